"""Would the generic basis (harness.core.basis) have changed a solve? Post hoc on stored pools, no new SR run.

    python scripts/records/compare_basis.py RUN_DIR_OR_RESULTS [...] [--split train|test] [--n-per-domain 4]
        [--llm-sr DATA/llm-sr] [--sparse 'trig' 'trig;trig,abs,tanh,localized/stlsq,forward' ...]

For every stored solve (``scripts/bench_harness.py``'s harness records with their run folders, an optimizer /
``rank_scales.py`` folder's ``evals.db`` with its run folders, or a folder of run folders named ``TASK_sSEED``), the pool is read back from ``nodes.jsonl``, the
term combination of that run is removed, and the combination is run again twice on the same pool and validation
split: as shipped, and with the generic basis as extra terms (its residual = what the pool's best leaves). The
pick (lowest validation NMSE) of each is scored on the test splits. Prints, per task and in sum, acc_0.01 ID / OOD
(95 % of points) and every-point acc_0.01 of the two picks, and the exact laws found (``harness.core.symbolic``).

``--sparse ARM ...`` compares the sparse regression channel instead (``SRSettings.sparse_regression``, as the
workflow runs it: the sparse fits, the best kept when it beats the pool's best 100-fold, then the term
combination), one arm per ``LIBRARIES[/FITS]`` (libraries: family sets of ``harness.core.basis.FAMILIES`` split
by ``;``; fits: ``stlsq``, ``forward``), beside the pool with the combination alone (today's default).
"""

from __future__ import annotations

import argparse
import json
import time
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any, Iterator

import numpy as np

import benchmarks
from harness.core.basis import BasisSettings, generic_basis, signed_inputs, sparse_candidates
from harness.core.candidates import NMSE_FLOOR, Candidate, select_best
from harness.core.combine import CombineSettings, combine_terms
from harness.core.context import AgentContext
from harness.core.expression import parse_expression
from harness.core.symbolic import task_symbolic_match
from workflows.sr_steps import SPARSE_SECONDS


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


def residual_of(ctx: AgentContext, best: Candidate | None) -> np.ndarray:
    """What ``best`` leaves of the training target (the target itself without a usable best)."""
    if best is None:
        return ctx.train.y
    with np.errstate(all="ignore"):
        pred = parse_expression(best.equation, ctx.variables)(ctx.train.X) * np.ones(ctx.train.y.size)
    return ctx.train.y - pred if np.all(np.isfinite(pred)) else ctx.train.y


def basis_candidates(ctx: AgentContext, pool: list[Candidate], settings: BasisSettings) -> list[Candidate]:
    best = select_best(pool)
    residual = residual_of(ctx, best)
    terms = generic_basis(ctx.train.X, residual, ctx.variables, settings)
    return [Candidate(expression=t, params=[], equation=t, complexity=0, source="basis") for t in terms]


def sparse_pick(ctx: AgentContext, pool: list[Candidate], settings: BasisSettings, without: Candidate | None
                ) -> tuple[Candidate | None, bool]:
    """The run's pick with the sparse channel on (``workflows.sr_steps``'s order: sparse, then the combination) and
    whether the sparse fit joined the pool (``without``, the pick without it, when it did not)."""
    best = select_best(pool)
    if (best is not None and best.metric("valid") <= NMSE_FLOOR) or not signed_inputs(ctx.train.X):
        return without, False  # the workflow skips the channel then
    residual = residual_of(ctx, best)
    found, _ = sparse_candidates(ctx, residual, settings, pool=pool, deadline=time.perf_counter() + SPARSE_SECONDS)
    top = select_best(found)
    limit = (best.metric("valid") if best is not None else np.inf) / CombineSettings().min_gain
    kept = [top] if top is not None and top.metric("valid") <= limit else []
    if not kept:
        return without, False
    combined, _ = combine_terms(pool + kept, ctx)
    return select_best(pool + kept + combined), bool(kept)


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
        if p.is_dir():  # run folders named TASK_sSEED anywhere below (an optimizer's or rank_scales.py's runs/)
            for nodes in sorted(p.rglob("nodes.jsonl")):
                task, _, seed = nodes.parent.name.rpartition("_s")
                if task and seed.isdigit():
                    out.append((task, int(seed), nodes.parent))
        elif p.suffix == ".db":
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


def stored_pools(paths: list[str], tasks: dict[str, Any]) -> Iterator[tuple[str, int, Any, list[Candidate],
                                                                          AgentContext]]:
    """(task name, seed, task, pool, context) of every stored solve of a known task with a non-empty pool."""
    for name, seed, run_dir in solves(paths):
        task = tasks.get(name)
        pool = pool_of(run_dir)
        if task is not None and pool:
            yield name, seed, task, pool, AgentContext(task=task, seed=seed)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", nargs="+")
    parser.add_argument("--split", default="train")
    parser.add_argument("--n-per-domain", type=int, default=4)
    parser.add_argument("--llm-sr", default="")
    parser.add_argument("--library", type=int, default=128, help="the combination's library size with the basis")
    parser.add_argument("--sparse", nargs="*", default=None, help="family sets of the sparse channel to compare")
    args = parser.parse_args(argv)
    tasks = {t.name: t for t in benchmarks.load_suite("lsr_like", split=args.split, n_per_domain=args.n_per_domain)}
    if args.llm_sr:
        tasks.update({t.name: t for t in benchmarks.load_suite("llm_sr", root=str(Path(args.llm_sr).parent))})
    if args.sparse:
        return compare_sparse(args, tasks, args.sparse)
    rows = []
    for name, seed, task, pool, ctx in stored_pools(args.results, tasks):
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


def arm_settings(spec: str) -> BasisSettings:
    """``trig;trig,abs,tanh,localized/forward,stlsq``: libraries (family sets) split by ``;``, then the fits."""
    libraries, _, selection = spec.partition("/")
    return BasisSettings(libraries=tuple(tuple(f.split(",")) for f in libraries.split(";")),
                         selection=tuple(selection.split(",")) if selection else BasisSettings().selection)


def compare_sparse(args: argparse.Namespace, tasks: dict[str, Any], arms: list[str]) -> int:
    labels = ["combination only"] + [f"sparse {a}" for a in arms]
    settings = [arm_settings(a) for a in arms]
    rows = []
    for name, seed, task, pool, ctx in stored_pools(args.results, tasks):
        combined, _ = combine_terms(pool, ctx)
        base = select_best(pool + combined)
        picks = [(base, False)] + [sparse_pick(ctx, pool, a, base) for a in settings]
        row = [scores(task, p) for p, _ in picks]
        rows.append(row)
        cells = "  ".join(f"{lab}: {r[0]:.0f}/{r[1]:.0f} (every point {r[2]:.0f}/{r[3]:.0f}){' exact' if r[4] else ''}"
                          f"{' (joined)' if j else ''}"
                          for lab, r, (_, j) in zip(labels, row, picks))
        print(f"{name} s{seed}: {cells}", flush=True)
    if not rows:
        print("no stored solves found")
        return 1
    n = len(rows)
    base = np.array([r[0][:2] for r in rows])
    for k, label in enumerate(labels):
        s = np.array([r[k][:4] for r in rows], dtype=float)
        exact = sum(r[k][4] for r in rows)
        d = s[:, :2] - base
        print(f"{label}: acc_0.01 ID / OOD {s[:, 0].mean():.3f} / {s[:, 1].mean():.3f}, every point "
              f"{s[:, 2].mean():.3f} / {s[:, 3].mean():.3f}, exact laws {exact} of {n}; vs combination only "
              f"(ID, OOD) wins {int((d > 0).sum(0)[0])}, {int((d > 0).sum(0)[1])} / losses "
              f"{int((d < 0).sum(0)[0])}, {int((d < 0).sum(0)[1])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
