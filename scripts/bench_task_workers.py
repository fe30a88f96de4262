"""Does evaluating tasks concurrently pay? The optimizer's wall time per solver execution, task_workers 1 vs 2.

    python scripts/bench_task_workers.py [--preset small] [--tasks 4] [--workers 1 2] [--out runs/bench_task_workers]

Each arm scores the preset's seed harness (the default workflow, seed prompts, the preset's SR settings and model:
the "baseline" row of the optimizer's report) on the same first ``--tasks`` training tasks in a fresh folder, with no evaluation or LLM response cache, so
every solve is paid for. Why it can pay on a CPU: the embedded model serves one call at a time, so with two tasks
in flight one task's SR run and fits go on while the other's LLM call runs. Prints wall seconds, solver
executions, LLM calls and seconds per solver execution per arm, side by side (the model is loaded before each arm's
clock starts).
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from pathlib import Path
from typing import Any

import pandas as pd
from hydra import compose, initialize_config_module
from omegaconf import OmegaConf

from optimize.__main__ import register_config_bases
from optimize.context import build_context
from optimize.settings import OptimizeSettings


def arm(cfg: Any, workers: int, n_tasks: int, out: Path) -> dict[str, Any]:
    folder = out / f"task_workers_{workers}"
    shutil.rmtree(folder, ignore_errors=True)  # a fresh folder: nothing cached
    plain = OmegaConf.to_container(cfg, resolve=True)
    settings = OptimizeSettings.model_validate({**plain["optimize"], "task_workers": workers, "llm_cache": False})
    ctx = build_context(folder, settings, llm_config=plain["llm"], backend_config=plain["backend"],
                        benchmark_config=plain["benchmark"], seed=int(plain["seed"]))
    tasks = ctx.tasks.train[:n_tasks]
    try:  # load the model before the clock starts (a local model takes ~20 s to load; one arm must not pay it)
        ctx.llm.complete([{"role": "user", "content": "Say ok."}], max_tokens=1)
        t0 = time.perf_counter()
        summary = ctx.evaluator.evaluate(ctx.base, tasks, stage="init")
        wall = time.perf_counter() - t0
    finally:
        close = getattr(ctx.llm, "close", None)
        if callable(close):
            close()
    runs = sum(r.solver_runs for r in summary.records)
    calls = sum(r.llm_calls for r in summary.records)
    return {"task_workers": workers, "tasks": len(tasks), "wall s": round(wall, 1), "solver executions": runs,
            "LLM calls": calls, "s / solver execution": round(wall / max(runs, 1), 1),
            "mean score": round(summary.score, 3)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="small")
    parser.add_argument("--tasks", type=int, default=4)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--out", type=Path, default=Path("runs/bench_task_workers"))
    parser.add_argument("overrides", nargs="*", help="Hydra overrides, e.g. llm=tiny")
    args = parser.parse_args(argv)

    register_config_bases()
    with initialize_config_module("harness.conf", version_base="1.3"):
        cfg = compose("optimize", overrides=[f"optimize={args.preset}", *args.overrides])
    rows = []
    for workers in args.workers:
        rows.append(arm(cfg, workers, args.tasks, args.out))
        print(rows[-1], flush=True)
    table = pd.DataFrame(rows).to_markdown(index=False)
    print("\n" + table)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "table.md").write_text(table + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
