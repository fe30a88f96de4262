"""What each extra operator costs the engine: Operon generations per second with the harness's floor operators,
against the floor plus one operator, same task, seed and time.

    python scripts/bench_operator_cost.py [--seconds 6] [--tasks phys_osc_synth_00 chem_react_synth_00 ...]
        [--operators tan tanh abs ...]

Why: a plan may add operators, and an SR run has a fixed time budget, so an operator that makes every generation
slower shrinks the search as surely as a shorter run. Prints generations per second per (operator, task), the
ratio to the floor measured in the same run (twice, for the noise), and the median ratio over tasks. Training
templates by default (``split="train"``), so a choice made from it is not tuned on held-out tasks.
"""

from __future__ import annotations

import argparse
import statistics
import sys

import pandas as pd

import benchmarks
from harness.app.artifact import FrozenHarness
from harness.core.context import AgentContext
from harness.core.vocabulary import OPERATORS
from harness.sr.backends import run_search

TASKS = ["phys_osc_synth_00", "chem_react_synth_00", "bio_pop_growth_synth_00", "matsci_synth_00"]


def generations_per_second(plan: dict, ctx: AgentContext) -> float:
    out = run_search(plan, ctx)
    if out.error:
        raise RuntimeError(out.error)
    return float(out.info["generations"]) / max(float(out.info["gp_seconds"]), 1.0)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=6.0)
    parser.add_argument("--tasks", nargs="*", default=TASKS)
    parser.add_argument("--operators", nargs="*")
    args = parser.parse_args(argv)
    floor = FrozenHarness.default().sr_settings.floor().model_dump()
    extras = args.operators or [o for o in OPERATORS if o not in floor["operators"]]
    tasks = benchmarks.load_suite("synthetic", names=args.tasks, split="all")
    rows = []
    for task in tasks:
        ctx = AgentContext(task=task, seed=0)
        base = {**floor, "time_budget": args.seconds, "seed": 0}
        floors = [generations_per_second(base, ctx) for _ in range(2)]
        ref = statistics.mean(floors)
        rows += [{"operator": f"floor (run {i + 1})", "task": task.name, "gen/s": g, "ratio": g / ref}
                 for i, g in enumerate(floors)]
        for op in extras:
            g = generations_per_second({**base, "operators": floor["operators"] + [op]}, ctx)
            rows.append({"operator": op, "task": task.name, "gen/s": g, "ratio": g / ref})
            print(f"{task.name:24s} {op:8s} {g:8.2f} gen/s  ({g / ref:.2f} x floor)", flush=True)
    df = pd.DataFrame(rows)
    wide = df.pivot_table(index="operator", columns="task", values="ratio", aggfunc="first")
    wide["median"] = wide.median(axis=1)
    print(f"\n### generations per second relative to the floor ({args.seconds:g} s runs, "
          f"floor = {', '.join(floor['operators'])})\n")
    print(wide.sort_values("median").to_markdown(floatfmt=".2f"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
