"""Symbolic accuracy of recorded solves under both rules, side by side: on the task's rows only (the rule before
2026-12-07) and on the rows plus the box the inputs span (``harness.core.symbolic``, the rule now).

    python scripts/rescore_symbolic.py docs/data/outcome_matrix.jsonl --suite lsr_like --option split=train \
        --option seed=0 --option max_rows=1000
    python scripts/rescore_symbolic.py docs/data/lsr_synth_solves.jsonl --suite lsr_synth_laws

Reads JSONL records with ``task``, ``equation`` and (optionally) ``arm`` and ``seed`` (the outcome matrix's rows,
``bench_harness.py``'s results, the compact solves in docs/data); a header line without ``task`` is skipped. Tasks
are regenerated from ``--suite`` and its ``--option``s, as the records were made. Prints, per arm, SA under each
rule and every solve whose verdict changed, with the reason the new rule gives.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

import benchmarks
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("records", type=Path)
    parser.add_argument("--suite", required=True, choices=sorted(benchmarks.SUITES))
    parser.add_argument("--option", action="append", default=[], metavar="KEY=VALUE", help="suite option (repeatable)")
    parser.add_argument("--json", type=Path, help="also write the per-solve verdicts here")
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
    return 0


if __name__ == "__main__":
    sys.exit(main())
