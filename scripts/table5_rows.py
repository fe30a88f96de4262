"""Table 5's rows from an optimizer run folder: the held-out curve (the start, after each stage, the shipped
default), paired against the start, as ``docs/data/results.jsonl`` rows (table ``table5``).

    python scripts/table5_rows.py runs/small_real_s0 [--date 2026-12-07] [--write docs/data/results.jsonl]

Reads the run's ``freeze.json`` (its ``rows``: each stage's harness on the held-out laws, per task and seed), so
the figures are the run's own, not retyped. Each row: acc_0.01 ID / OOD in both readings (95 % of points, every
point), acc_0.001, symbolic accuracy (today's rule: off the trajectory too), and the (task, seed, split) pairs
against the start as wins / ties / losses in the 95 % reading and in every point. A stage whose harness is the one
before it (nothing accepted) says so. ``--write`` replaces the rows this run's command wrote before and appends
the new ones; without it they are printed.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

CURVE = ("baseline", "init", "search", "refine", "default")
TITLE = {"baseline": "initial harness (the start)", "init": "after stage 1", "search": "after stage 2",
         "refine": "after stage 3", "default": "shipped default"}
SPLITS = ("id", "ood")


def per_pair(row: dict[str, Any], key: str) -> dict[tuple[str, str, str], float]:
    """{(task, seed, split): value} of ``key`` (``acc_0.01``, ``acc_all_0.01``) on the held-out laws."""
    out = {}
    for task, detail in ((row.get("heldout") or {}).get("tasks") or {}).items():
        for seed, metrics in (detail.get("per_seed") or {}).items():
            for split in SPLITS:
                out[(task, seed, split)] = float(metrics.get(f"{key}_{split}") or 0.0)
    return out


def paired(row: dict[str, Any], start: dict[str, Any], key: str) -> str:
    mine, theirs = per_pair(row, key), per_pair(start, key)
    diffs = [mine[k] - theirs[k] for k in sorted(set(mine) & set(theirs))]
    return f"{sum(d > 0 for d in diffs)} / {sum(d == 0 for d in diffs)} / {sum(d < 0 for d in diffs)}"


def mean_of(row: dict[str, Any], key: str) -> dict[str, float]:
    values = per_pair(row, key)
    return {split: round(sum(v for k, v in values.items() if k[2] == split)
                         / max(1, sum(1 for k in values if k[2] == split)), 4) for split in SPLITS}


def table5_rows(run: Path, date: str, command: str) -> list[dict[str, Any]]:
    freeze = json.loads((run / "freeze.json").read_text(encoding="utf-8"))
    rows, picked, final = freeze["rows"], freeze.get("picked_stage"), freeze.get("selected_stage")
    harness = json.loads((run / "harness.json").read_text(encoding="utf-8"))
    provenance = harness.get("provenance") or {}
    seeds, held = provenance.get("seeds") or [], provenance.get("heldout_tasks") or []
    seconds = freeze.get("heldout_seconds_per_run")
    conditions = (f"optimize={provenance.get('preset')} from the {provenance.get('start')} harness, engine seed "
                  f"{', '.join(map(str, seeds))}; the {len(held)} held-out laws of LSR-Synth's split "
                  f"({', '.join(held)}) at {seconds:g} s SR runs, one seed; training runs bound by work "
                  f"(optimize.work_rate {(provenance.get('settings') or {}).get('work_rate')}); embedded "
                  "Qwen2.5-Coder-1.5B, 2 cores")
    start = rows["baseline"]
    out, previous = [], None
    for stage in (s for s in CURVE if s in rows and (rows[s].get("heldout") or {}).get("tasks")):
        row = rows[stage]
        title = TITLE[stage]
        if stage != "default" and previous is not None and row["digest"] == previous:
            title += " (nothing accepted: the harness before it)"
        elif stage == picked:
            title += " (the trained harness" + (", frozen by the gate)" if final == picked else ")")
        elif stage == "default" and final == "default":
            title += " (frozen by the gate)"
        if stage != "default":
            previous = row["digest"]
        same = stage != "baseline" and row["digest"] == start["digest"]
        out.append({"table": "table5", "date": date, "command": command, "conditions": conditions,
                    "seed": seeds[0] if seeds else 0, "harness": title,
                    "acc_0.01": mean_of(row, "acc_0.01"), "acc_all_0.01": mean_of(row, "acc_all_0.01"),
                    "acc_0.001": mean_of(row, "acc_0.001"), "sa": float(row["heldout"].get("sa") or 0.0),
                    "paired_vs_start": None if stage == "baseline" else "the same harness" if same else
                    f"{paired(row, start, 'acc_0.01')}, {paired(row, start, 'acc_all_0.01')}",
                    "highlight": stage == picked and not same, "sa_rule": "box", "benchmark": "lsr_synth_laws"})
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", type=Path)
    parser.add_argument("--date", default=time.strftime("%Y-%m-%d"))
    parser.add_argument("--command", default=None, help="the command that made the run (default: from its seed)")
    parser.add_argument("--write", type=Path, default=None, help="the results store to update")
    args = parser.parse_args(argv)
    seeds = json.loads((args.run / "harness.json").read_text(encoding="utf-8")).get("provenance", {}).get("seeds")
    command = args.command or ("python -m optimize optimize=small"
                               + (f" \"optimize.seeds=[{seeds[0]}]\"" if seeds and seeds[0] else "")
                               + f" hydra.run.dir={args.run}")
    rows = table5_rows(args.run, args.date, command)
    if args.write is None:
        print("\n".join(json.dumps(r) for r in rows))
        return 0
    kept = [line for line in args.write.read_text(encoding="utf-8").splitlines()
            if line.strip() and not (json.loads(line).get("table") == "table5"
                                     and json.loads(line).get("command") == command)]
    args.write.write_text("\n".join(kept + [json.dumps(r) for r in rows]) + "\n", encoding="utf-8")
    print(f"wrote {len(rows)} table5 rows for {args.run} to {args.write}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
