"""Overhead of running the SR engine in a worker process, side by side with in-process runs.

    python scripts/bench_sr_workers.py [--runs 10] [--seconds 1] [--rows 500]

Same task, plans and seeds both ways (``HARNESS_SR_IN_PROCESS=1`` for the in-process arm). Prints the mean wall
time per run, the overhead per run, the first run's start-up cost (spawning the worker) and whether both arms
found the same equations (a run is deterministic given its seed, so they should).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import benchmarks
from harness.core.context import AgentContext
from harness.sr import workers
from harness.sr.backends import run_search


def arm(ctx: AgentContext, runs: int, seconds: float, in_process: bool) -> tuple[list[float], list[str | None]]:
    os.environ["HARNESS_SR_IN_PROCESS"] = "1" if in_process else ""
    times, eqs = [], []
    for i in range(runs):
        t0 = time.perf_counter()
        out = run_search({"time_budget": seconds, "population_size": 200, "seed": i, "seeds": ["c0*A"]}, ctx)
        times.append(time.perf_counter() - t0)
        eqs.append(out.best.equation if out.best else None)
    return times, eqs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--seconds", type=float, default=1.0)
    parser.add_argument("--rows", type=int, default=500)
    args = parser.parse_args(argv)
    task = benchmarks.load_suite("synthetic", names=["chem_react_synth_00"], n_train=args.rows)[0]
    ctx = AgentContext(task=task)
    workers.shutdown_workers()
    worker_times, worker_eqs = arm(ctx, args.runs, args.seconds, in_process=False)
    local_times, local_eqs = arm(ctx, args.runs, args.seconds, in_process=True)
    warm = worker_times[1:]
    print(f"{args.runs} runs of {args.seconds:g} s, {args.rows} rows; workers started: {workers.workers_started()}")
    print("| arm | first run s | mean s/run after the first | overhead ms/run |")
    print("|---|---|---|---|")
    base = statistics.mean(local_times[1:])
    print(f"| in-process | {local_times[0]:.2f} | {base:.3f} | - |")
    print(f"| worker process | {worker_times[0]:.2f} | {statistics.mean(warm):.3f} | "
          f"{1000 * (statistics.mean(warm) - base):.0f} |")
    same = sum(a == b for a, b in zip(worker_eqs, local_eqs))
    print(f"same equation in both arms: {same}/{args.runs} runs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
