"""Paired decisions: a candidate harness against an incumbent on the same (task, seed) pairs.

Every acceptance of the optimizer (a stage-1 rewrite, stage 2's choice, a stage-3 child, freeze's gate) compares two
harnesses run on the same (task, seed) pairs (common random numbers: same tasks, same engine seeds, the unguided
run shared). Each pair is a win, a tie or a loss for the candidate (its score minus the incumbent's beyond
``margin``): :class:`PairedRecord`, what the races of ``optimize.race`` count. The acceptances themselves are races
now (``optimize.race.RaceRule``); :class:`PairedRule` is the rule they replaced, a fixed minibatch, kept for the
replays that compare the two (``optimize.replay``, ``scripts/power_replay.py``). It accepts the candidate only when

1. it wins at least ``min_net_wins`` more pairs than it loses, so no single task decides (one task flipping moves
   the net count by at most 2 when it flips a loss into a win, and a decision needs more than one pair's say), and
2. the paired sign-flip permutation test of the summed differences gives ``p <= alpha``: under the null hypothesis
   that the two harnesses are equally good, each pair's difference is as likely to have either sign, so the rule's
   false-accept rate is at most ``alpha`` whatever the distribution of the differences
   (:func:`false_accept_rate` computes it exactly for recorded differences).

Why not the mean alone: on 8 tasks x 1 seed one task flipping moves a mean of 0/1 scores by 0.125, so "higher mean"
accepts noise about half the time (docs/optimizer.md measures it on recorded outcomes).
"""

from __future__ import annotations

import itertools
import math
import random
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

from pydantic import BaseModel, ConfigDict, Field

EXACT_LIMIT = 16  # nonzero differences up to which the permutation distribution is enumerated (2**16 sign patterns)
SAMPLES = 20_000  # Monte Carlo sign patterns beyond that (seeded: the same record always gets the same p)


@dataclass(frozen=True)
class PairedRecord:
    """Per-pair differences (candidate minus incumbent) and their win / tie / loss count."""

    diffs: tuple[float, ...]
    margin: float = 0.0

    @property
    def wins(self) -> int:
        return sum(d > self.margin for d in self.diffs)

    @property
    def losses(self) -> int:
        return sum(d < -self.margin for d in self.diffs)

    @property
    def ties(self) -> int:
        return len(self.diffs) - self.wins - self.losses

    @property
    def net(self) -> int:
        return self.wins - self.losses

    @property
    def n(self) -> int:
        return len(self.diffs)

    @property
    def mean_diff(self) -> float:
        return sum(self.diffs) / len(self.diffs) if self.diffs else 0.0

    def p_value(self) -> float:
        """One-sided p of the sign-flip permutation test: the share of sign patterns of the nonzero differences
        whose sum is at least the observed one (1.0 when there is no difference at all)."""
        return sign_flip_p(self.diffs)

    def summary(self) -> str:
        return f"{self.wins} wins / {self.ties} ties / {self.losses} losses over {self.n} pairs"

    def to_dict(self) -> dict[str, Any]:
        return {"wins": self.wins, "ties": self.ties, "losses": self.losses, "n": self.n, "net": self.net,
                "mean_diff": round(self.mean_diff, 6), "p_value": round(self.p_value(), 6)}


def _signed_sums(values: Sequence[float]) -> Iterable[float]:
    if len(values) <= EXACT_LIMIT:
        for signs in itertools.product((1.0, -1.0), repeat=len(values)):
            yield sum(s * v for s, v in zip(signs, values))
        return
    rng = random.Random(len(values))
    for _ in range(SAMPLES):
        yield sum(v if rng.random() < 0.5 else -v for v in values)


def sign_flip_p(diffs: Sequence[float]) -> float:
    nonzero = [abs(d) for d in diffs if d != 0.0]
    if not nonzero:
        return 1.0
    observed = sum(d for d in diffs if d != 0.0) - 1e-12
    sums = list(_signed_sums(nonzero))
    return sum(s >= observed for s in sums) / len(sums)


class PairedRule(BaseModel):
    """When a candidate replaces an incumbent (module docstring): ``net wins >= min_net_wins`` and the sign-flip
    ``p <= alpha``; a difference within ``margin`` is a tie."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    min_net_wins: int = Field(2, ge=1)
    alpha: float = Field(0.1, gt=0.0, le=1.0)
    margin: float = Field(0.0, ge=0.0)

    def record(self, candidate: Any, incumbent: Any) -> PairedRecord:
        """Pair two evaluations (``EvalSummary`` or lists of ``EvalRecord``) by (task, seed); the candidate's
        score minus the incumbent's. Every pair of one must be in the other (same pairs, or no decision)."""
        a, b = _by_pair(candidate), _by_pair(incumbent)
        if set(a) != set(b):
            missing = sorted(set(a) ^ set(b))[:4]
            raise ValueError(f"the two harnesses were not run on the same (task, seed) pairs; e.g. {missing}")
        return PairedRecord(tuple(a[k] - b[k] for k in sorted(a)), self.margin)

    def accepts(self, record: PairedRecord) -> bool:
        return record.net >= self.min_net_wins and record.p_value() <= self.alpha

    def decide(self, candidate: Any, incumbent: Any) -> tuple[bool, PairedRecord]:
        record = self.record(candidate, incumbent)
        return self.accepts(record), record

    def false_accept_rate(self, diffs: Sequence[float]) -> float:
        """The rule's acceptance probability when the two harnesses are equally good and the pairs' absolute
        differences are ``|diffs|``: every sign pattern of the nonzero ones equally likely (exact up to
        ``EXACT_LIMIT`` of them, Monte Carlo beyond)."""
        nonzero = [abs(d) for d in diffs if d != 0.0]
        zeros = len(diffs) - len(nonzero)
        if not nonzero:
            return 0.0
        if len(nonzero) <= EXACT_LIMIT:
            patterns: Iterable[Sequence[float]] = itertools.product((1.0, -1.0), repeat=len(nonzero))
            total = 2 ** len(nonzero)
        else:
            rng = random.Random(len(nonzero) + 1)
            patterns = ([1.0 if rng.random() < 0.5 else -1.0 for _ in nonzero] for _ in range(2000))
            total = 2000
        accepted = 0
        for signs in patterns:
            record = PairedRecord(tuple(s * v for s, v in zip(signs, nonzero)) + (0.0,) * zeros, self.margin)
            accepted += self.accepts(record)
        return accepted / total

    def describe(self) -> str:
        return (f"net wins >= {self.min_net_wins} and sign-flip p <= {self.alpha:g}"
                + (f" (|difference| <= {self.margin:g} is a tie)" if self.margin else ""))


def _by_pair(evaluation: Any) -> dict[tuple[str, int], float]:
    records = getattr(evaluation, "records", evaluation)
    out: dict[tuple[str, int], float] = {}
    for r in records:
        score = float(r.score)
        out[(r.task_key or r.task, int(r.seed))] = score if math.isfinite(score) else 0.0
    return out


@dataclass(frozen=True)
class NonInferiority:
    """Is a candidate no worse than a reference by more than ``margin``? The mean paired difference (candidate minus
    reference) over tasks, each task's differences (its seeds and splits) averaged first, and the one-sided lower
    bound of its ``1 - alpha`` confidence interval by a bootstrap over tasks (the tasks are the sample; seeds of
    one task are not independent of each other). Non-inferior when the lower bound is above ``-margin``."""

    mean: float
    lower: float
    margin: float
    alpha: float
    tasks: int
    pairs: int
    wins: int
    ties: int
    losses: int

    @property
    def non_inferior(self) -> bool:
        return self.tasks > 1 and self.lower > -self.margin

    def summary(self) -> str:
        verdict = "not worse" if self.non_inferior else "not shown to be no worse"
        return (f"{verdict} by more than {self.margin:g}: mean difference {self.mean:+.3f}, one-sided "
                f"{1 - self.alpha:.0%} lower bound {self.lower:+.3f} over {self.tasks} tasks ({self.pairs} pairs: "
                f"{self.wins} W / {self.ties} T / {self.losses} L)")


def non_inferiority(diffs: dict[str, Sequence[float]], margin: float, alpha: float = 0.05,
                    n_resamples: int = 10_000, seed: int = 0) -> NonInferiority:
    """:class:`NonInferiority` of paired differences grouped by task (``{task: [difference per seed and split]}``)."""
    import numpy as np

    per_task = np.array([float(np.mean(v)) for v in diffs.values() if len(v)])
    flat = [float(d) for v in diffs.values() for d in v]
    counts = dict(wins=sum(d > 0 for d in flat), ties=sum(d == 0 for d in flat), losses=sum(d < 0 for d in flat))
    if len(per_task) < 2:
        return NonInferiority(float(per_task.mean()) if len(per_task) else 0.0, -math.inf, margin, alpha,
                              len(per_task), len(flat), **counts)
    rng = np.random.default_rng(seed)
    means = per_task[rng.integers(0, len(per_task), size=(n_resamples, len(per_task)))].mean(axis=1)
    lower = float(np.quantile(means, alpha))  # percentile bootstrap, one-sided
    return NonInferiority(float(per_task.mean()), lower, margin, alpha, len(per_task), len(flat), **counts)
