"""Compare SR engines at an equal wall-time budget per task.

Engines:
  ours      - harness.sr run_search(backend="operon"): our Operon setup (Pareto front, constant optimisation,
              float64 refit, selection by validation error).
  operon    - plain ``pyoperon.sklearn.SymbolicRegressor(max_time=...)``: its defaults, its own model
              selection, its model's predictions.
  gplearn   - ``gplearn.genetic.SymbolicRegressor``, grown one generation at a time (warm start) until the
              next generation would overrun the budget.

Baselines train on the task's whole train split; ours holds out 20% of it for validation (its choice).
Metrics are the project's (harness.core.evaluator.compute_metrics) on the in-domain and out-of-domain test splits.

    python scripts/bench_engines.py --seconds 10                 # 16 synthetic + 10 Feynman tasks
    python scripts/bench_engines.py --quick                      # 2 tasks per suite, 3 s
    python scripts/bench_engines.py --engines ours --tasks phys_osc_synth_00 --seconds 5
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
import warnings
from pathlib import Path
from typing import Any, Callable

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from harness.core.context import AgentContext  # noqa: E402
from harness.core.evaluator import compute_metrics  # noqa: E402
from harness.core.task import Task  # noqa: E402

ENGINES = ("ours", "operon", "gplearn")
GPLEARN_FUNCTIONS = ("add", "sub", "mul", "div", "sqrt", "log", "sin", "cos", "neg", "inv")


def load_tasks(args: argparse.Namespace) -> list[Task]:
    import benchmarks

    tasks: list[Task] = []
    if "synthetic" in args.suites:
        tasks += benchmarks.load_suite("synthetic", n_per_domain=args.n_per_domain, seed=args.seed)
    if "feynman" in args.suites:
        tasks += benchmarks.load_suite("feynman", n=args.n_feynman, seed=args.seed)
    if args.tasks:
        tasks = [t for t in tasks if t.name in args.tasks]
    if args.limit:
        by_suite: dict[str, list[Task]] = {}
        for t in tasks:
            by_suite.setdefault(suite_of(t), []).append(t)
        tasks = [t for group in by_suite.values() for t in group[: args.limit]]
    return tasks


def suite_of(task: Task) -> str:
    return "feynman" if task.name.startswith("feynman") else "synthetic"


# ------------------------------------------------------------------------------------------- engines

def run_ours(task: Task, seconds: float, seed: int, plan_overrides: dict[str, Any]) -> dict[str, Any]:
    from harness.sr.backends import run_search

    ctx = AgentContext(task, seed=seed)
    out = run_search({"time_budget": seconds, "seed": seed, **plan_overrides}, ctx, backend="operon")
    if out.best is None:
        return {"equation": None, "error": out.error or "no candidate"}
    return {"equation": out.best.equation, "metrics": out.best.metrics, "info": out.info}


def run_operon_default(task: Task, seconds: float, seed: int) -> dict[str, Any]:
    from pyoperon.sklearn import SymbolicRegressor

    reg = SymbolicRegressor(max_time=max(1, int(seconds)), random_state=seed)
    reg.fit(task.train.X, task.train.y)
    return {"equation": reg.get_model_string(reg.model_, 4), "predict": reg.predict}


def run_gplearn(task: Task, seconds: float, seed: int) -> dict[str, Any]:
    from gplearn.genetic import SymbolicRegressor

    est = SymbolicRegressor(generations=1, function_set=GPLEARN_FUNCTIONS, random_state=seed, n_jobs=1,
                            warm_start=True)
    t0 = time.perf_counter()
    gens, last = 0, 0.0
    while gens == 0 or time.perf_counter() - t0 + 0.5 * last <= seconds:  # expected finish nearest the budget
        g0 = time.perf_counter()
        gens += 1
        est.set_params(generations=gens)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            est.fit(task.train.X, task.train.y)
        last = time.perf_counter() - g0
    return {"equation": str(est._program), "predict": est.predict, "generations": gens}


def score(task: Task, result: dict[str, Any]) -> dict[str, dict[str, float]]:
    """Test metrics: ours already has them (engine-scored); baselines are scored from their predictions."""
    if "metrics" in result:
        return {k: v for k, v in result["metrics"].items() if k.startswith("test")}
    out = {}
    predict: Callable[[np.ndarray], np.ndarray] | None = result.get("predict")
    for name in ("test_id", "test_ood"):
        split = getattr(task, name)
        if split is None or predict is None:
            continue
        with np.errstate(all="ignore"):
            pred = np.asarray(predict(split.X), dtype=np.float64)
        out[name] = compute_metrics(split.y, pred)
    return out


# ------------------------------------------------------------------------------------------- report

def summarise(rows: list[dict[str, Any]], engines: list[str]) -> str:
    lines = []
    for suite in ["all"] + sorted({r["suite"] for r in rows}):
        sel = [r for r in rows if suite == "all" or r["suite"] == suite]
        n_tasks = len({r["task"] for r in sel})
        lines.append(f"\n{suite} ({n_tasks} tasks)")
        lines.append(f"{'engine':<9} {'acc_0.01 ID':>11} {'acc_0.01 OOD':>12} {'median NMSE ID':>15} {'s/task':>7}")
        for engine in engines:
            er = [r for r in sel if r["engine"] == engine]
            if not er:
                continue
            acc_id = statistics.mean(r["acc_id"] for r in er)
            acc_ood = statistics.mean(r["acc_ood"] for r in er)
            med = statistics.median(r["nmse_id"] for r in er)
            secs = statistics.mean(r["seconds"] for r in er)
            lines.append(f"{engine:<9} {acc_id:>11.3f} {acc_ood:>12.3f} {med:>15.3g} {secs:>7.1f}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=10.0, help="wall-time budget per task and engine")
    ap.add_argument("--engines", default=",".join(ENGINES), help="comma list of ours,operon,gplearn")
    ap.add_argument("--suites", default="synthetic,feynman")
    ap.add_argument("--n-per-domain", type=int, default=4, help="synthetic tasks per domain")
    ap.add_argument("--n-feynman", type=int, default=10)
    ap.add_argument("--tasks", default="", help="comma list of task names (subset)")
    ap.add_argument("--limit", type=int, default=0, help="first N tasks per suite")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--plan", default="{}", help="JSON overrides of our search plan")
    ap.add_argument("--quick", action="store_true", help="2 tasks per suite at 3 s")
    ap.add_argument("--out", default="", help="write per-task rows as JSON here")
    args = ap.parse_args(argv)
    args.suites = [s.strip() for s in args.suites.split(",") if s.strip()]
    args.tasks = [s.strip() for s in args.tasks.split(",") if s.strip()]
    engines = [e.strip() for e in args.engines.split(",") if e.strip()]
    if args.quick:
        args.limit, args.seconds = args.limit or 2, 3.0
    unknown = set(engines) - set(ENGINES)
    if unknown:
        ap.error(f"unknown engines {sorted(unknown)}")
    plan_overrides = json.loads(args.plan)

    tasks = load_tasks(args)
    print(f"{len(tasks)} tasks, {args.seconds:g}s per task and engine, engines {engines}", flush=True)
    warm = Task.from_arrays(np.linspace(1, 2, 40).reshape(-1, 1), np.linspace(1, 2, 40) ** 2, name="warmup")
    run_ours(warm, 1, 0, {"generations": 2, "population_size": 20})  # imports outside the timed runs
    run_operon_default(warm, 1, 0)

    rows: list[dict[str, Any]] = []
    for task in tasks:
        for engine in engines:
            t0 = time.perf_counter()
            try:
                if engine == "ours":
                    result = run_ours(task, args.seconds, args.seed, plan_overrides)
                elif engine == "operon":
                    result = run_operon_default(task, args.seconds, args.seed)
                else:
                    result = run_gplearn(task, args.seconds, args.seed)
                metrics = score(task, result)
                error = result.get("error")
            except Exception as exc:  # a failing engine scores zero on that task
                result, metrics, error = {"equation": None}, {}, f"{type(exc).__name__}: {exc}"
            seconds = time.perf_counter() - t0
            mid, mood = metrics.get("test_id", {}), metrics.get("test_ood", {})
            nmse = mid.get("nmse", math.inf)
            row = {
                "task": task.name, "suite": suite_of(task), "engine": engine, "seconds": seconds,
                "acc_id": float(mid.get("acc_0.01", 0.0)), "acc_ood": float(mood.get("acc_0.01", 0.0)),
                "nmse_id": float(nmse) if nmse is not None and math.isfinite(nmse) else math.inf,
                "equation": (result.get("equation") or "")[:300], "error": error,
            }
            rows.append(row)
            print(f"{task.name:<24} {engine:<8} acc_id={row['acc_id']:.0f} acc_ood={row['acc_ood']:.0f} "
                  f"nmse_id={row['nmse_id']:.3g} {seconds:5.1f}s  {row['equation'][:90]}"
                  + (f"  ERROR {error}" if error else ""), flush=True)
    print(summarise(rows, engines), flush=True)
    if args.out:
        Path(args.out).write_text(json.dumps(rows, indent=1, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
