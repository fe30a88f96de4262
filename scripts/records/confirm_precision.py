"""The precision polish and the ladder at the solve's seconds: real solves with both on, read back against what the
same solves would have returned without them, on the same (task, seed) pairs.

    python scripts/bench_harness.py --out runs/precision_60s_s0 --suite lsr_like --split train --n-per-domain 2 \
        --option max_rows=1000 --option seed=0 --llm-sr '' --arms harness \
        --sr precision_polish=true --sr selection=ladder --seed 0        # and --seed 1 into runs/precision_60s_s1
    python scripts/records/confirm_precision.py runs/precision_60s_s0 runs/precision_60s_s1 --split train --n-per-domain 2 \
        --option max_rows=1000 --option seed=0 [--markdown out.md]

Why this pairing is exact: the polish runs after the last SR run and only adds candidates to the pool, so the
pool without the polished ones (their source is ``precision:*``) is the pool the solve would have had with the
option off, and its validation-error pick (``sr.selection=accuracy``, the shipped rule) is what the solve would
have returned. ``after`` is the solve's own equation (polish + ladder); ``before`` is that pick, scored on the
same test splits. Printed: acc_0.01 in both readings and acc_0.001 (95 %), ID and OOD, symbolic accuracy, paired
wins / ties / losses per reading over (task, seed, split), and the solve seconds with and without the polish's.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from statistics import median
from typing import Any

from harness.core.candidates import Candidate, select
from harness.core.symbolic import task_symbolic_match

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # scripts/: bench_harness
from bench_harness import load_tasks  # noqa: E402

SPLITS = ("test_id", "test_ood")
READINGS = (("acc_0.01", "acc_0.01 (95 %)"), ("acc_all_0.01", "every point"), ("acc_0.001", "acc_0.001 (95 %)"))


def before_pick(pool: list[dict[str, Any]]) -> Candidate | None:
    """The validation-error pick among the pool's candidates that the polish did not add."""
    unpolished = [Candidate.from_record({"expression": p["equation"], "params": [], **p}) for p in pool
                  if not str(p.get("source", "")).startswith("precision:")]
    return select(unpolished, "accuracy")


def polish_seconds(run_dir: Path) -> float:
    nodes = run_dir / "nodes.jsonl"
    if not nodes.is_file():
        return 0.0
    rows = [json.loads(line) for line in nodes.read_text(encoding="utf-8").splitlines() if line.strip()]
    return sum(float(r.get("seconds") or 0.0) for r in rows
               if (r.get("info") or {}).get("channel") == "precision polish")


def wins_ties_losses(diffs: list[float]) -> str:
    return f"{sum(d > 0 for d in diffs)}/{sum(d == 0 for d in diffs)}/{sum(d < 0 for d in diffs)}"


def value(metrics: dict[str, Any], split: str, key: str) -> float:
    return float((metrics.get(split) or {}).get(key) or 0.0)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folders", nargs="+", help="bench_harness --out folders of solves with the polish on")
    parser.add_argument("--suite", default="lsr_like")
    parser.add_argument("--split", default="train", choices=("train", "test", "all"))
    parser.add_argument("--n-per-domain", type=int, default=2)
    parser.add_argument("--option", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--llm-sr", default="", help="the LLM-SR data folder, when the solves include its problems")
    parser.add_argument("--tasks", nargs="*", help="only these tasks (names, or a prefix ending in *)")
    parser.add_argument("--markdown", default=None)
    args = parser.parse_args(argv)
    tasks = {t.name: t for t in load_tasks(argparse.Namespace(
        suite=args.suite, option=args.option, n_per_domain=args.n_per_domain, split=args.split, llm_sr=args.llm_sr,
        sample=0, tasks=None))}
    rows = []
    for folder in map(Path, args.folders):
        for line in (folder / "results.jsonl").read_text(encoding="utf-8").splitlines():
            rec = json.loads(line)
            if rec.get("arm") != "harness" or rec["task"] not in tasks:
                continue
            if args.tasks and not any(rec["task"] == n or (n.endswith("*") and rec["task"].startswith(n[:-1]))
                                      for n in args.tasks):
                continue
            task, before = tasks[rec["task"]], before_pick(rec.get("pool") or [])
            match = task_symbolic_match(task, before.equation) if before is not None else None
            seconds = float(rec.get("seconds") or 0.0)
            rows.append({"task": rec["task"], "seed": rec["seed"],
                         "before": {"metrics": before.metrics if before else {},
                                    "sa": float(bool(match and match.equivalent)), "seconds":
                                    seconds - polish_seconds(folder / "runs" / rec["task"])},
                         "after": {"metrics": rec.get("metrics") or {},
                                   "sa": float(bool((rec.get("symbolic") or {}).get("equivalent"))),
                                   "seconds": seconds}})
    out = [f"{len(rows)} solves ({', '.join(args.folders)}); before: the same solves without the polished "
           "candidates, validation-error pick; after: the solve's own equation (polish + ladder).", "",
           "| arm | " + " | ".join(f"{label} ID / OOD" for _, label in READINGS)
           + " | symbolic accuracy | median s / solve | paired vs before: "
           + " / ".join(label for _, label in READINGS) + ", SA (W / T / L) |",
           "|---|" + "---|" * (len(READINGS) + 3)]
    for arm in ("before", "after"):
        cells = [" / ".join(f"{sum(value(r[arm]['metrics'], s, key) for r in rows) / max(1, len(rows)):.3f}"
                            for s in SPLITS) for key, _ in READINGS]
        sa = sum(r[arm]["sa"] for r in rows) / max(1, len(rows))
        secs = median(r[arm]["seconds"] for r in rows) if rows else 0.0
        paired = []
        for key, _ in READINGS:
            paired.append(wins_ties_losses([value(r[arm]["metrics"], s, key) - value(r["before"]["metrics"], s, key)
                                            for r in rows for s in SPLITS]))
        paired.append(wins_ties_losses([r[arm]["sa"] - r["before"]["sa"] for r in rows]))
        out.append(f"| {arm} | " + " | ".join(cells) + f" | {sa:.3f} | {secs:.1f} | " + ", ".join(paired) + " |")
    out += ["", "Per solve (acc_0.001 ID/OOD before -> after): " + "; ".join(
        f"{r['task']} s{r['seed']} {value(r['before']['metrics'], 'test_id', 'acc_0.001'):.0f}/"
        f"{value(r['before']['metrics'], 'test_ood', 'acc_0.001'):.0f} -> "
        f"{value(r['after']['metrics'], 'test_id', 'acc_0.001'):.0f}/"
        f"{value(r['after']['metrics'], 'test_ood', 'acc_0.001'):.0f}" for r in rows)]
    text = "\n".join(out) + "\n"
    print(text)
    if args.markdown:
        Path(args.markdown).write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
