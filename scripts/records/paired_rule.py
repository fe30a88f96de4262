"""How often would the optimizer's acceptance rules accept noise? A sign-flip argument on recorded outcomes.

    python scripts/records/paired_rule.py RUN_DIR [RUN_DIR ...] [--metric frac_within_0.01] [--split test_id+test_ood]
        [--min-pairs 4] [--min-net-wins 2] [--alpha 0.125] [--margin 0.01]

Reads every evaluation in each folder's ``evals.db`` (an optimizer run, or ``scripts/records/rank_scales.py``'s folder),
and for every two harnesses evaluated on at least ``--min-pairs`` common (task, seed) pairs takes the per-pair
differences of their score. If the two were equally good, each difference would be as likely positive as negative
(the pairs share tasks and engine seeds; only the harness differs): so flipping the signs at random gives the
outcomes noise alone would produce. For each recorded comparison the script computes, over every sign pattern,
how often each rule accepts:

- ``paired``: the optimizer's rule (``optimize.paired.PairedRule``: net wins >= N and sign-flip p <= alpha);
- ``mean``: the earlier rule, "a higher mean wins";
- ``one task``: the candidate wins at least one pair and loses none.

Prints the mean and the largest false-accept rate of each rule over the comparisons, with the number of pairs.
"""

from __future__ import annotations

import argparse
import itertools
import math
import sys
from pathlib import Path
from statistics import mean
from typing import Any

from optimize.cache import EvalCache
from optimize.paired import PairedRecord, PairedRule
from optimize.records import split_score


def outcomes(folder: Path, metric: str, split: str) -> dict[str, dict[tuple[str, int], float]]:
    """digest -> (task key, seed) -> score."""
    cache = EvalCache(folder / "evals.db")
    try:
        out: dict[str, dict[tuple[str, int], float]] = {}
        for record in cache.records():
            score, _ = split_score(record.get("metrics") or {}, split, metric)
            out.setdefault(record["digest"], {})[(record.get("task_key") or record["task"], int(record["seed"]))] = (
                score if math.isfinite(score) else 0.0)
        return out
    finally:
        cache.close()


def sign_patterns(diffs: list[float]) -> list[tuple[float, ...]]:
    nonzero = [abs(d) for d in diffs if d != 0.0]
    zeros = (0.0,) * (len(diffs) - len(nonzero))
    if len(nonzero) > 14:  # enough: the rule's own false_accept_rate handles the long case
        return []
    return [tuple(s * v for s, v in zip(signs, nonzero)) + zeros
            for signs in itertools.product((1.0, -1.0), repeat=len(nonzero))]


def rates(diffs: list[float], rule: PairedRule) -> dict[str, float] | None:
    patterns = sign_patterns(diffs)
    if not patterns:
        return None
    paired = rule.false_accept_rate(diffs)
    higher_mean = mean(sum(p) > 1e-12 for p in patterns)
    one_task = mean(PairedRecord(p, rule.margin).wins >= 1 and PairedRecord(p, rule.margin).losses == 0
                    for p in patterns)
    return {"paired": paired, "mean": higher_mean, "one task": one_task}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+")
    parser.add_argument("--metric", default="frac_within_0.01")
    parser.add_argument("--split", default="test_id+test_ood")
    parser.add_argument("--min-pairs", type=int, default=4)
    parser.add_argument("--min-net-wins", type=int, default=2)
    parser.add_argument("--alpha", type=float, default=0.125)
    parser.add_argument("--margin", type=float, default=0.01)
    args = parser.parse_args(argv)
    rule = PairedRule(min_net_wins=args.min_net_wins, alpha=args.alpha, margin=args.margin)
    found: list[tuple[int, dict[str, float]]] = []
    for run in args.runs:
        scores = outcomes(Path(run), args.metric, args.split)
        for a, b in itertools.combinations(sorted(scores), 2):
            common = sorted(set(scores[a]) & set(scores[b]))
            if len(common) < args.min_pairs:
                continue
            diffs = [scores[a][k] - scores[b][k] for k in common]
            r = rates(diffs, rule)
            if r is not None:
                found.append((len(common), r))
    if not found:
        print("no two harnesses share enough (task, seed) pairs")
        return 1
    print(f"{len(found)} recorded comparisons ({min(n for n, _ in found)}-{max(n for n, _ in found)} pairs each), "
          f"{args.metric} on {args.split}; rule: {rule.describe()}\n")
    print("| rule | mean false-accept rate | largest |")
    print("|---|---|---|")
    for name in ("paired", "mean", "one task"):
        values = [r[name] for _, r in found]
        print(f"| {name} | {mean(values):.3f} | {max(values):.3f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
