"""Do short training SR runs rank harnesses as the solve's 60 s runs do? (The optimizer's training scale.)

    python scripts/records/rank_scales.py [--out runs/rank_scales] [--scales 0.05 0.25 1.0] [--seeds 0]
        [--sample 8] [--harnesses initial unguided combine pow initial+sr shipped]

A handful of harnesses that span what the optimizer chooses between (HarnessSR's initial harness, each hand-made
SR choice added alone, all of them, and the shipped default with its own prompts) run on the same (task, seed)
pairs of ``lsr_like``'s *training* laws at each SR time scale (``time_scale`` x the harness's 60 s per run). The
optimizer's own evaluator runs them, so every run is cached in ``<out>/evals.db`` (a killed run resumes), the
unguided run of a task and seed is made once and shared by every harness with the same engine settings (common
random numbers), and the model's answers are cached in ``<out>/llm_cache.db`` (the same prompt at another scale
costs nothing).

Prints, per scale, each harness's mean of both Acc_0.01 readings (95 % of points within 1 %, and every point), of
the share of points within 1 % and of -log10 NMSE, then the rank agreement of each shorter scale with the longest one: Kendall's
tau of the harness means, and the share of harness pairs whose order (by mean) is the same, with the pairs at 60 s
that differ by less than half a task's weight (the share of points: 0.01; -log10 NMSE: 0.1) counted as ties. Writes
``<out>/rank_scales.md``.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import random
import sys
from pathlib import Path
from statistics import mean
from typing import Any

import benchmarks
from harness.core.vocabulary import DEFAULT_OPERATORS
from harness.llm.cache import CachedLLM
from optimize.context import make_client
from optimize.evaluation import Evaluator
from optimize.records import EvalRecord, metric_value
from workflows.harness import Harness, initial_harness, shipped_harness

LLM = {"provider": "local", "model": "qwen2.5-coder-1.5b-instruct", "max_tokens": 384, "timeout_s": 120.0,
       "max_retries": 1, "temperature": 0.7}
# readings: (label, metric key) - each the mean of the ID and OOD test splits of a task
READINGS = (("acc_0.01 (95 % of points)", "acc_0.01"), ("acc_0.01 (every point)", "acc_all_0.01"),
            ("share within 1 %", "frac_within_0.01"), ("-log10 NMSE", "log_nmse"))


def harnesses() -> dict[str, Harness]:
    """The arms: the initial harness, each hand-made SR choice alone, all three, and the shipped default."""
    init = initial_harness()
    return {
        "initial": init,
        "unguided": init.with_sr_settings(unguided_run=True),
        "combine": init.with_sr_settings(combine_terms=True),
        "pow": init.with_sr_settings(operators=list(DEFAULT_OPERATORS)),
        "initial+sr": init.with_sr_settings(unguided_run=True, combine_terms=True, operators=list(DEFAULT_OPERATORS)),
        "shipped": shipped_harness(),
    }


def training_tasks(sample: int) -> list[Any]:
    """A seeded sample of lsr_like's training laws (the sample earlier decisions used: ``bench_harness --sample``)."""
    suite = benchmarks.load_suite("lsr_like", split="train", n_per_domain=3, seed=0, max_rows=1000)
    keep = {t.name for t in random.Random(0).sample(suite, min(sample, len(suite)))}
    return [t for t in suite if t.name in keep]


def task_value(record: Any, metric: str) -> float:
    return mean(metric_value(record.metrics.get(split, {}), metric) for split in ("test_id", "test_ood"))


def kendall_tau(a: list[float], b: list[float]) -> float:
    from scipy.stats import kendalltau

    tau = kendalltau(a, b).statistic
    return float(tau) if tau is not None and math.isfinite(tau) else float("nan")


def agreement(short: dict[str, float], long: dict[str, float], tie: float) -> tuple[int, int, int]:
    """(same order, opposite order, tied at the long scale) over harness pairs."""
    same = opposite = tied = 0
    for a, b in itertools.combinations(sorted(long), 2):
        d_long, d_short = long[a] - long[b], short[a] - short[b]
        if abs(d_long) < tie:
            tied += 1
        elif d_long * d_short > 0:
            same += 1
        else:
            opposite += 1
    return same, opposite, tied


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="runs/rank_scales")
    parser.add_argument("--scales", nargs="+", type=float, default=[0.05, 0.25, 1.0])
    parser.add_argument("--seeds", nargs="+", type=int, default=[0])
    parser.add_argument("--sample", type=int, default=8)
    parser.add_argument("--harnesses", nargs="+", default=None)
    parser.add_argument("--report-only", action="store_true", help="tables from the cache; run nothing new")
    args = parser.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    arms = harnesses()
    if args.harnesses:
        arms = {k: v for k, v in arms.items() if k in args.harnesses}
    tasks = training_tasks(args.sample)
    llm = CachedLLM(make_client(LLM), out / "llm_cache.db")
    evaluator = Evaluator(out, llm, metric="acc_0.01", score_split="test_id+test_ood", keep_run_dirs=True)
    scales = sorted(args.scales)
    results: dict[float, dict[str, list[Any]]] = {}
    try:
        for scale in scales:  # the short scales first: their figures come in minutes
            results[scale] = {name: [] for name in arms}
            # pair-major: a (task, seed)'s arms run one after another, so a busy machine slows them alike
            for task, seed in [(t, s) for t in tasks for s in args.seeds]:
                for name, spec in arms.items():
                    if args.report_only:
                        held = evaluator.cache.get(evaluator.as_run(spec, scale).identity_digest,
                                                   task.fingerprint(), seed)
                        if held is not None:
                            results[scale][name].append(EvalRecord.from_dict(held))
                        continue
                    record = evaluator.evaluate_one(spec, task, seed, stage=f"scale {scale:g}", label=name,
                                                    time_scale=scale)
                    results[scale][name].append(record)
                    print(f"scale {scale:g} {name} {task.name} s{seed}: acc {task_value(record, 'acc_0.01'):.2f} "
                          f"frac {task_value(record, 'frac_within_0.01'):.3f} "
                          f"({record.seconds:.0f} s{', cached' if record.cached else ''})", flush=True)
    finally:
        llm.close() if hasattr(llm, "close") else None
    text = tables(results, scales, tasks, args.seeds, evaluator)
    (out / "rank_scales.md").write_text(text, encoding="utf-8")
    print(text)
    return 0


def tables(results: dict[float, dict[str, list[Any]]], scales: list[float], tasks: list[Any], seeds: list[int],
           evaluator: Evaluator) -> str:
    lines = [f"Tasks: {len(tasks)} lsr_like training laws ({', '.join(t.name for t in tasks)}), seeds {seeds}; "
             f"every harness on the same (task, seed) pairs at each scale. Shared unguided runs read from the "
             f"cache: {evaluator.shared_runs.hits if evaluator.shared_runs else 0} this session.", ""]
    names = list(next(iter(results.values())).keys())
    means: dict[str, dict[float, dict[str, float]]] = {}
    for label, metric in READINGS:
        lines += [f"### {label}, mean of ID and OOD", "", "| harness | " + " | ".join(f"{s:g} x 60 s" for s in scales)
                  + " |", "|---|" + "---|" * len(scales)]
        means[metric] = {s: {} for s in scales}
        for name in names:
            cells = []
            for s in scales:
                recs = results[s].get(name, [])
                value = mean(task_value(r, metric) for r in recs) if recs else float("nan")
                means[metric][s][name] = value
                cells.append(f"{value:.3f} ({len(recs)})")
            lines.append(f"| {name} | " + " | ".join(cells) + " |")
        lines.append("")
    long = scales[-1]
    n_pairs = len(tasks) * len(seeds)
    lines += [f"### Rank agreement with {long:g} x 60 s", "",
              "| reading | scale | Kendall tau | harness pairs same / opposite / tied at the long scale |",
              "|---|---|---|---|"]
    for label, metric in READINGS:
        for s in scales[:-1]:
            a, b = [means[metric][s][n] for n in names], [means[metric][long][n] for n in names]
            tie = {"frac_within_0.01": 0.01, "log_nmse": 0.1}.get(metric, 0.5 / n_pairs)  # or half a task flip
            same, opposite, tied = agreement(means[metric][s], means[metric][long], tie=tie)
            lines.append(f"| {label} | {s:g} | {kendall_tau(a, b):.2f} | {same} / {opposite} / {tied} |")
    lines += ["", "Raw means: " + json.dumps({m: {f"{s:g}": v for s, v in d.items()} for m, d in means.items()})]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
