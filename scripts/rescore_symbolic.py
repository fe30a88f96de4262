"""Symbolic accuracy of recorded solves under both rules, side by side: on the task's rows only (the rule before
2026-12-07) and on the rows plus the box the inputs span (``harness.core.symbolic``, the rule now).

    python scripts/rescore_symbolic.py docs/data/outcome_matrix.jsonl --suite lsr_like --option split=train \
        --option seed=0 --option max_rows=1000
    python scripts/rescore_symbolic.py docs/data/lsr_synth_solves.jsonl --suite lsr_synth_laws \
        [--store docs/data/results.jsonl --label "LSR-Synth held-out laws" --conditions "..."]

Reads JSONL records with ``task``, ``equation`` and (optionally) ``arm`` and ``seed`` (the outcome matrix's rows,
``bench_harness.py``'s results, the compact solves in docs/data); a header line without ``task`` is skipped. Tasks
are regenerated from ``--suite`` and its ``--option``s, as the records were made. Prints, per arm, SA under each
rule and every solve whose verdict changed, with the reason the new rule gives. ``--store`` writes the figures as
the results store's ``sa_rescore`` row for ``--label`` (replacing that label's earlier row).
"""

from __future__ import annotations

import argparse
import datetime
import json
import shlex
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

import benchmarks
from harness.core.jsonio import write_text_atomic
from harness.core.symbolic import task_symbolic_match


def read_records(path: Path) -> list[dict[str, Any]]:
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    return [r for r in rows if r.get("task")]


def rescore(records: list[dict[str, Any]], tasks: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per record with a ground truth: arm, task, seed, the verdict under each rule and the new note."""
    out = []
    for r in records:
        task = tasks.get(r["task"])
        if task is None or not task.ground_truth:
            continue
        old = task_symbolic_match(task, r.get("equation"), off_trajectory=False)
        new = task_symbolic_match(task, r.get("equation"))
        out.append({"arm": r.get("arm", "-"), "task": r["task"], "seed": r.get("seed"), "domain": task.domain,
                    "equation": r.get("equation"), "rows": bool(old and old.equivalent),
                    "region": bool(new and new.equivalent), "note": (new.note if new else "nothing found")})
    return out


def summary(rows: list[dict[str, Any]]) -> str:
    by_arm: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        by_arm[row["arm"]].append(row)
    lines = ["| arm | solves | SA on the rows (old) | SA on rows + region (new) | old yes, new no |", "|---|---|---|---|---|"]
    for arm, group in sorted(by_arm.items()):
        n = len(group)
        lost = sum(r["rows"] and not r["region"] for r in group)
        lines.append(f"| {arm} | {n} | {sum(r['rows'] for r in group) / n:.3f} | "
                     f"{sum(r['region'] for r in group) / n:.3f} | {lost} |")
    everything = len(rows)
    lines.append(f"| all | {everything} | {sum(r['rows'] for r in rows) / max(everything, 1):.3f} | "
                 f"{sum(r['region'] for r in rows) / max(everything, 1):.3f} | "
                 f"{sum(r['rows'] and not r['region'] for r in rows)} |")
    return "\n".join(lines)


def store_row(rows: list[dict[str, Any]], label: str, command: str, conditions: str) -> dict[str, Any]:
    """The ``sa_rescore`` results row (rendered by ``render_docs.py``): per arm and over all, SA under each rule."""
    def figures(group: list[dict[str, Any]]) -> dict[str, Any]:
        n = max(len(group), 1)
        return {"solves": len(group), "rows": round(sum(r["rows"] for r in group) / n, 3),
                "region": round(sum(r["region"] for r in group) / n, 3),
                "lost": sum(r["rows"] and not r["region"] for r in group),
                "gained": sum(r["region"] and not r["rows"] for r in group)}

    by_arm: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        by_arm[row["arm"]].append(row)
    return {"table": "sa_rescore", "date": datetime.date.today().isoformat(), "command": command,
            "conditions": conditions, "suite": label, "arms": {a: figures(g) for a, g in sorted(by_arm.items())},
            "all": figures(rows), "changed": [{k: r[k] for k in ("arm", "task", "seed", "note")}
                                              for r in rows if r["rows"] != r["region"]]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("records", type=Path)
    parser.add_argument("--suite", required=True, choices=sorted(benchmarks.SUITES))
    parser.add_argument("--option", action="append", default=[], metavar="KEY=VALUE", help="suite option (repeatable)")
    parser.add_argument("--json", type=Path, help="also write the per-solve verdicts here")
    parser.add_argument("--store", type=Path, help="write the sa_rescore results row here (docs/data/results.jsonl)")
    parser.add_argument("--label", help="the stored row's name for these solves (default: the suite)")
    parser.add_argument("--conditions", default="", help="what the solves are, stored with the row")
    args = parser.parse_args(argv)
    records = read_records(args.records)
    options = dict(item.split("=", 1) for item in args.option)
    names = sorted({r["task"] for r in records})
    tasks = {t.name: t for t in benchmarks.load_suite(args.suite, names=names, **options)}
    rows = rescore(records, tasks)
    print(summary(rows))
    changed = [r for r in rows if r["rows"] != r["region"]]
    if changed:
        print(f"\nVerdicts that changed ({len(changed)}):")
        for r in changed:
            print(f"- {r['arm']} / {r['task']} / seed {r['seed']}: {'yes -> no' if r['rows'] else 'no -> yes'}: "
                  f"{str(r['equation'])[:120]} ({r['note'][:160]})")
    if args.json:
        args.json.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    if args.store:
        label = args.label or args.suite
        command = "python scripts/rescore_symbolic.py " + shlex.join(argv or sys.argv[1:])
        kept = [line for line in args.store.read_text(encoding="utf-8").splitlines() if line.strip() and not (
            json.loads(line).get("table") == "sa_rescore" and json.loads(line).get("suite") == label)]
        write_text_atomic(args.store, "\n".join([*kept, json.dumps(store_row(rows, label, command, args.conditions))])
                          + "\n")
        print(f"wrote the sa_rescore row {label!r} to {args.store}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
