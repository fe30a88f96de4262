"""Does the precision polish pay? Replayed on recorded solves: the pool's best three of each solve, polished or not,
selected by validation error or by the precision ladder, side by side on the same (task, seed) pairs.

    python scripts/records/compare_precision.py [--matrix docs/data/outcome_matrix.jsonl] [--arm shipped] [--seconds 10]
        [--markdown out.md]

The outcome matrix (``scripts/outcome_matrix.py``) keeps each solve's three best equations by validation error:
exactly what ``sr.precision_polish`` polishes after the last SR run. Each task is rebuilt as the matrix loaded it;
the three are refitted on its training rows (as the solve did), polished (``harness.core.precision.polish``, within
``--seconds``), and four arms select among them: ``before`` (validation error: the solve's own rule), ``ladder``
(the precision ladder, no polish), ``polish`` (polished, validation error), ``polish+ladder``. Printed per arm:
acc_0.01 in both readings, acc_0.001 (95 %), in and out of domain, and paired wins / ties / losses against
``before`` on every (task, seed, split) for each reading. A replay at the matrix's training seconds on training
laws: what decides whether the options go on, before a confirmation at the solve seconds.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

from harness.core.candidates import Candidate, select
from harness.core.context import AgentContext, evaluate_candidate
from harness.core.expression import ExpressionError
from harness.core.precision import polish

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the sibling's matrix loader
from diagnose_precision import load_matrix  # noqa: E402

SPLITS = ("test_id", "test_ood")
READINGS = (("acc_0.01", "acc_0.01 (95 %)"), ("acc_all_0.01", "every point"), ("acc_0.001", "acc_0.001 (95 %)"))
ARMS = ("before", "ladder", "polish", "polish+ladder")


def arms_of(record: dict[str, Any], task: Any, seconds: float) -> dict[str, Candidate | None]:
    ctx = AgentContext(task, seed=int(record["seed"]))
    top: list[Candidate] = []
    for entry in record.get("top") or []:
        try:
            top.append(evaluate_candidate(entry["equation"], ctx, source=entry.get("source", ""),
                                          constants_as_params=True))
        except ExpressionError:
            continue
    deadline = time.monotonic() + seconds
    polished = top + [c for cand in top for c in polish(cand, ctx, deadline=deadline)]
    return {"before": select(top, "accuracy"), "ladder": select(top, "ladder"),
            "polish": select(polished, "accuracy"), "polish+ladder": select(polished, "ladder")}


def value(cand: Candidate | None, split: str, key: str) -> float:
    return float(cand.metrics.get(split, {}).get(key, 0.0)) if cand is not None else 0.0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--matrix", default="docs/data/outcome_matrix.jsonl")
    parser.add_argument("--arm", default="shipped", help="the matrix arm whose solves are replayed")
    parser.add_argument("--seconds", type=float, default=10.0, help="the polish's seconds per solve")
    parser.add_argument("--markdown", default=None, help="also write the table to this file")
    args = parser.parse_args(argv)
    header, solves, tasks = load_matrix(args.matrix, args.arm)
    picks = []
    for record in solves:
        picks.append(arms_of(record, tasks[record["task"]], args.seconds))
        print(f"{record['task']} s{record['seed']}: " + ", ".join(
            f"{arm} {value(c, 'test_id', 'acc_0.001'):.0f}/{value(c, 'test_ood', 'acc_0.001'):.0f}"
            for arm, c in picks[-1].items()), flush=True)
    out = [f"`{args.matrix}` arm `{args.arm}` ({header['command']}): {len(solves)} solves, the best three of each; "
           f"polish within {args.seconds:g} s.", "",
           "| arm | " + " | ".join(f"{label} ID / OOD" for _, label in READINGS) + " | paired vs before: "
           + " / ".join(label for _, label in READINGS) + " (W / T / L) |",
           "|---|" + "---|" * (len(READINGS) + 1)]
    for arm in ARMS:
        cells = []
        for key, _ in READINGS:
            means = [sum(value(p[arm], s, key) for p in picks) / max(1, len(picks)) for s in SPLITS]
            cells.append(f"{means[0]:.3f} / {means[1]:.3f}")
        paired = []
        for key, _ in READINGS:
            diffs = [value(p[arm], s, key) - value(p["before"], s, key) for p in picks for s in SPLITS]
            paired.append(f"{sum(d > 0 for d in diffs)}/{sum(d == 0 for d in diffs)}/{sum(d < 0 for d in diffs)}")
        out.append(f"| {arm} | " + " | ".join(cells) + " | " + ", ".join(paired) + " |")
    text = "\n".join(out) + "\n"
    print(text)
    if args.markdown:
        Path(args.markdown).write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
