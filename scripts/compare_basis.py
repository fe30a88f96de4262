"""Would the generic basis (harness.engine.basis) have changed a solve? Post hoc on stored pools, no new SR run.

    python scripts/compare_basis.py RUN_DIR_OR_RESULTS [...] [--split train|test] [--n-per-domain 4]
        [--llm-sr DATA/llm-sr]

For every stored solve (``scripts/bench_harness.py``'s harness records with their run folders, or an optimizer /
``rank_scales.py`` folder's ``evals.db`` with its run folders), the pool is read back from ``nodes.jsonl``, the
term combination of that run is removed, and the combination is run again twice on the same pool and validation
split: as shipped, and with the generic basis as extra terms (its residual = what the pool's best leaves). The
pick (lowest validation NMSE) of each is scored on the test splits. Prints, per task and in sum, acc_0.01 ID / OOD
(95 % of points) and every-point acc_0.01 of the two picks, and the exact laws found (``harness.engine.symbolic``).
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

import benchmarks
from harness.engine.basis import BasisSettings, generic_basis
from harness.engine.candidates import Candidate, select_best
from harness.engine.combine import CombineSettings, combine_terms
from harness.engine.context import AgentContext
from harness.engine.expression import parse_expression
from harness.engine.symbolic import task_symbolic_match


def pool_of(run_dir: Path) -> list[Candidate]:
    out = []
    path = run_dir / "nodes.jsonl"
    if not path.is_file():
        return out
    for line in path.read_text(encoding="utf-8").splitlines():
        node = json.loads(line)
        if node.get("kind") == "combine":
            continue
        for rec in node.get("candidates") or []:
            try:
                out.append(Candidate.from_record(rec))
            except (KeyError, TypeError, ValueError):
                continue
    return out


def basis_candidates(ctx: AgentContext, pool: list[Candidate], settings: BasisSettings) -> list[Candidate]:
    best = select_best(pool)
    residual = ctx.train.y
    if best is not None:
        with np.errstate(all="ignore"):
            pred = parse_expression(best.equation, ctx.variables)(ctx.train.X) * np.ones(ctx.train.y.size)
        if np.all(np.isfinite(pred)):
            residual = ctx.train.y - pred
    terms = generic_basis(ctx.train.X, residual, ctx.variables, settings)
    return [Candidate(expression=t, params=[], equation=t, complexity=0, source="basis") for t in terms]


def scores(task: Any, cand: Candidate | None) -> tuple[float, float, float, float, bool]:
    if cand is None:
        return 0.0, 0.0, 0.0, 0.0, False
    m = cand.metrics
    exact = False
    if task.ground_truth:
        try:
            match = task_symbolic_match(task, cand.equation)
            exact = bool(match and match.equivalent)
        except Exception:  # noqa: BLE001 - a checker failure counts as not the law
            exact = False
    return (float(m.get("test_id", {}).get("acc_0.01", 0.0)), float(m.get("test_ood", {}).get("acc_0.01", 0.0)),
            float(m.get("test_id", {}).get("acc_all_0.01", 0.0)), float(m.get("test_ood", {}).get("acc_all_0.01", 0.0)),
            exact)


def solves(paths: list[str]) -> list[tuple[str, int, Path]]:
    """(task, seed, run folder) of every stored solve."""
    out = []
    for path in paths:
        p = Path(path)
        if p.suffix == ".db":
            from optimize.cache import EvalCache

            cache = EvalCache(p)
            out += [(r["task"], int(r["seed"]), Path(r["run_dir"])) for r in cache.records() if r.get("run_dir")]
            cache.close()
        else:
            for line in p.read_text().splitlines():
                r = json.loads(line)
                if r.get("arm", "harness") == "harness":
                    out.append((r["task"], int(r["seed"]), p.parent / "runs" / r["task"]))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", nargs="+")
    parser.add_argument("--split", default="train")
    parser.add_argument("--n-per-domain", type=int, default=4)
    parser.add_argument("--llm-sr", default="")
    parser.add_argument("--library", type=int, default=128, help="the combination's library size with the basis")
    args = parser.parse_args(argv)
    tasks = {t.name: t for t in benchmarks.load_suite("lsr_like", split=args.split, n_per_domain=args.n_per_domain)}
    if args.llm_sr:
        tasks.update({t.name: t for t in benchmarks.load_suite("llm_sr", root=str(Path(args.llm_sr).parent))})
    rows = []
    for name, seed, run_dir in solves(args.results):
        task = tasks.get(name)
        pool = pool_of(run_dir)
        if task is None or not pool:
            continue
        ctx = AgentContext(task=task, seed=seed)
        shipped, _ = combine_terms(pool, ctx)
        extra = basis_candidates(ctx, pool, BasisSettings())
        widened, info = combine_terms(pool, ctx, replace(CombineSettings(), max_library=args.library),
                                      extra_sources=extra)
        a, b = select_best(pool + shipped), select_best(pool + widened)
        rows.append((name, seed, scores(task, a), scores(task, b), len(extra), info.get("kept", 0)))
        print(f"{name} s{seed}: shipped {scores(task, a)}  with basis {scores(task, b)}  ({len(extra)} basis terms)",
              flush=True)
    if not rows:
        print("no stored solves found")
        return 1
    n = len(rows)
    for label, k in (("shipped", 2), ("with basis", 3)):
        s = np.array([r[k][:4] for r in rows], dtype=float).mean(axis=0)
        exact = sum(r[k][4] for r in rows)
        print(f"{label}: acc_0.01 ID / OOD {s[0]:.3f} / {s[1]:.3f}, every point {s[2]:.3f} / {s[3]:.3f}, "
              f"exact laws {exact} of {n}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
