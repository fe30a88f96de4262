"""Run the outcome matrix: harness variants x *training* laws x engine seeds at the training seconds.

    python scripts/outcome_matrix.py [--out runs/outcome_matrix] [--suite lsr_like] [--per-domain 6] [--seeds 0 1]
        [--time-scale 0.25] [--work-rate R] [--part 1/4] [--arms initial all_four ...]
        [--space] [--export docs/data/outcome_matrix.jsonl] [--resume-from docs/data/<earlier export>.jsonl]

The arms (``optimize.matrix.matrix_arms``: the initial harness, each hand-made SR choice alone, all four, the shipped
default, a tiny engine population; ``--space`` adds the other 10 combinations of the four SR choices, so stage
2's whole space at ``quick`` is recorded) run pair by pair on the same (task, seed) pairs with the optimizer's own
evaluator, as ``optimize=small`` trains: SR runs at ``--time-scale`` x 60 s (0.25: 15 s; with ``--work-rate`` bound by
that many generations per second of it, the seconds a guard: ``optimize.work_rate``), stop at an exact fit,
the unguided run of a (task, seed) made once per engine setting and shared, the model's answers cached. Everything
is cached in ``<out>/evals.db`` and ``<out>/llm_cache.db``: a killed run resumes, and ``--part K/N`` runs the K-th of
N slices of the pairs, so the matrix can be built in parts. ``--export`` writes every finished (arm, task, seed) as
the data file ``optimize.matrix.OutcomeMatrix`` reads (runs nothing new with ``--export-only``). Held-out (test)
laws are never loaded: the tasks come from the suite's ``split=train`` (``--suite``: ``lsr_like``, our own laws, or
``lsr_synth_laws``, LSR-Synth's own training laws). ``--resume-from`` continues a matrix whose run folder is gone
(another machine, a lost session) from its export: the same suite, tasks, seeds, scale, work and arm digests or a
clear refusal; its outcomes are not run again, and ``--export`` writes them with the new ones (the header names
every machine that made them).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import time
from pathlib import Path
from typing import Any

import benchmarks
from harness.llm.cache import CachedLLM
from harness.llm.cpu_kernels import cpu_description
from optimize.context import make_client
from optimize.evaluation import Evaluator
from optimize.matrix import OutcomeMatrix, matrix_arms, outcome_of
from optimize.records import EvalRecord

LLM = {"provider": "local", "model": "qwen2.5-coder-1.5b-instruct", "max_tokens": 384, "timeout_s": 120.0,
       "max_retries": 1, "temperature": 0.7}


def training_tasks(per_domain: int, suite: str = "lsr_like") -> list:
    """The first ``per_domain`` training laws of each domain of ``suite`` (the optimizer's own draw takes from
    these), at the optimizer's training rows."""
    options = {"seed": 0} if suite == "lsr_like" else {}
    tasks = benchmarks.load_suite(suite, split="train", n_per_domain=per_domain, max_rows=1000, **options)
    assert all(t.metadata.get("split", "train") == "train" for t in tasks), "the matrix never holds test laws"
    return tasks


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="runs/outcome_matrix")
    parser.add_argument("--per-domain", type=int, default=6)
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1])
    parser.add_argument("--suite", default="lsr_like", choices=("lsr_like", "lsr_synth_laws"))
    parser.add_argument("--time-scale", type=float, default=0.25)
    parser.add_argument("--work-rate", type=float, default=None,
                        help="bound each SR run by work: generations per second of its share (optimize.work_rate)")
    parser.add_argument("--time-guard", type=float, default=3.0,
                        help="a work-bound run's seconds cap, times its share (optimize.time_guard; raise it to build "
                             "the matrix on a busy machine: the outcomes do not depend on it unless a guard is hit)")
    parser.add_argument("--part", default="1/1", help="K/N: run the K-th of N slices of the (task, seed) pairs")
    parser.add_argument("--arms", nargs="+", default=None)
    parser.add_argument("--space", action="store_true",
                        help="add the other 10 combinations of the four hand-made SR choices (stage 2's whole space at "
                             "quick: optimize.matrix.space_arms); an earlier export without them is resumed and grown")
    parser.add_argument("--export", default=None, help="write the finished outcomes to this data file")
    parser.add_argument("--export-only", action="store_true")
    parser.add_argument("--resume-from", default=None, help="an earlier export of this matrix: its outcomes are kept, "
                        "not run again, and exported with the new ones")
    args = parser.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    arms = matrix_arms(LLM, space=args.space)
    if args.arms:
        arms = {k: v for k, v in arms.items() if k in args.arms}
    tasks = training_tasks(args.per_domain, args.suite)
    pairs = [(t, s) for s in args.seeds for t in tasks]  # seed-major: a first seed over every task comes first
    k, n = (int(x) for x in args.part.split("/"))
    mine = pairs[(k - 1) * len(pairs) // n : k * len(pairs) // n]  # contiguous: part 1/2 is the first seed
    llm = CachedLLM(make_client(LLM), out / "llm_cache.db")
    evaluator = Evaluator(out, llm, metric="log_nmse", score_split="test_id+test_ood", time_scale=args.time_scale,
                          work_rate=args.work_rate, time_guard=args.time_guard, stop_at_exact=True, keep_run_dirs=False)
    earlier = resumed(Path(args.resume_from), header_of(evaluator, arms, tasks, args)) if args.resume_from else None
    started = time.time()
    try:
        if not args.export_only:
            for i, (task, seed) in enumerate(mine):
                for name, spec in arms.items():  # pair-major: a busy machine slows a pair's arms alike
                    if earlier is not None and (name, task.name, seed) in earlier.outcomes:
                        continue
                    record = evaluator.evaluate_one(spec, task, seed, stage="matrix", label=name)
                    print(f"[{i + 1}/{len(mine)} {time.time() - started:6.0f} s] {name:16s} {task.name} s{seed}: "
                          f"log_nmse {record.score:6.2f} ({record.seconds:.0f} s{', cached' if record.cached else ''}"
                          f"{f', {record.guard_hits} step(s) stopped by seconds' if record.guard_hits else ''})",
                          flush=True)
    finally:
        llm.close()
    if args.export:
        export(evaluator, arms, tasks, args, Path(args.export), earlier)
    return 0


# what must agree for two exports to be one matrix (the machine, the date and the command's --out may differ)
SAME_MATRIX = ("suite", "per_domain", "seeds", "time_scale", "stop_at_exact", "work_rate", "time_guard", "llm", "arms",
               "tasks")


def resumed(path: Path, header: dict[str, Any]) -> OutcomeMatrix:
    """An earlier export of the same matrix, or a clear refusal naming what differs."""
    earlier = OutcomeMatrix.load(path)
    differ = [k for k in SAME_MATRIX if k != "arms" and json.dumps(earlier.header.get(k), sort_keys=True)
              != json.dumps(header[k], sort_keys=True)]
    held = earlier.header.get("arms") or {}
    if any(header["arms"].get(name) != digest for name, digest in held.items()):
        differ.append("arms")  # arms may be added to a matrix (--space), never changed or dropped
    if differ:
        raise SystemExit(f"--resume-from {path}: another matrix ({', '.join(differ)} differ): "
                         + "; ".join(f"{k}: {earlier.header.get(k)!r} here, {header[k]!r} now" for k in differ))
    print(f"resuming from {path}: {len(earlier.outcomes)} outcomes kept ({len(earlier.complete_pairs())} complete "
          f"pairs), made on {earlier.header.get('machine')}", flush=True)
    return earlier


def header_of(evaluator: Evaluator, arms: dict, tasks: list, args: argparse.Namespace) -> dict[str, Any]:
    run = (f"python scripts/outcome_matrix.py --out {shlex.quote(args.out)} --suite {args.suite} --per-domain "
           f"{args.per_domain} --seeds {' '.join(map(str, args.seeds))} --time-scale {args.time_scale:g}"
           + (f" --work-rate {args.work_rate:g} --time-guard {args.time_guard:g}" if args.work_rate else "")
           + (f" --arms {' '.join(args.arms)}" if args.arms else "") + (" --space" if args.space else ""))
    return {
        "command": run,  # what made the outcomes (in parts: add --part K/N); --export writes this file from its cache
        "created": time.strftime("%Y-%m-%d"),
        "machine": f"{cpu_description()['model']}, {os.cpu_count()} cores",
        "suite": f"{args.suite}, split=train (training laws only)", "per_domain": args.per_domain, "seeds": args.seeds,
        "time_scale": args.time_scale, "sr_seconds_per_run": 60 * args.time_scale, "stop_at_exact": True,
        "work_rate": args.work_rate, "time_guard": evaluator.time_guard,
        "llm": LLM, "arms": {name: spec.identity_digest for name, spec in arms.items()},
        "tasks": [t.name for t in tasks],
    }


def export(evaluator: Evaluator, arms: dict, tasks: list, args: argparse.Namespace, path: Path,
           earlier: OutcomeMatrix | None = None) -> None:
    """Every (arm, task, seed) in the cache (and in ``earlier``, where the cache lacks it), as the matrix data file,
    with a header that says how it was made."""
    outcomes = {}
    for task in tasks:
        for seed in args.seeds:
            for name, spec in arms.items():
                held = evaluator.cache.get(evaluator.as_run(spec).identity_digest, task.fingerprint(), seed)
                if held is not None:
                    outcomes[(name, task.name, seed)] = outcome_of(name, EvalRecord.from_dict(held), domain=task.domain)
                elif earlier is not None and (name, task.name, seed) in earlier.outcomes:
                    outcomes[(name, task.name, seed)] = earlier.outcomes[(name, task.name, seed)]
    header = header_of(evaluator, arms, tasks, args)
    if earlier is not None and earlier.header.get("machine") not in (None, header["machine"]):
        header["machine"] = f"{earlier.header['machine']} (the earlier outcomes); {header['machine']}"
    matrix = OutcomeMatrix(outcomes.values(), header)
    path.parent.mkdir(parents=True, exist_ok=True)
    matrix.save(path)
    print(f"wrote {len(outcomes)} outcomes ({len(matrix.complete_pairs())} complete pairs of {len(arms)} arms) to "
          f"{path}")
    print(json.dumps({a: round(v, 3) for a, v in matrix.arm_means("log_nmse").items()}))


if __name__ == "__main__":
    sys.exit(main())
