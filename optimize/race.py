"""Racing: a challenger against the incumbent on shared (task, seed) pairs, in growing batches, dropped as soon as it
cannot win and accepted once its paired record clears the rule (irace's F-race, SMAC's intensifier).

Every acceptance of the optimizer is a race: a stage-1 rewrite against the kept text, stage 2's best trials
against the stage's start, a stage-3 child against its parent, freeze's gate of the trained harness against the
shipped default. The pairs come in a fixed order (a *schedule*, fixed before any outcome is seen); each is a win,
a tie or a loss for the challenger (its score minus the incumbent's beyond ``margin``). After every pair the race

* **drops** the challenger when it has ``drop_behind`` more losses than wins (it has fallen behind, as SMAC drops a
  challenger that is worse on the incumbent's runs), or when even winning every pair left would not clear the
  rule;
* **accepts** it when its wins among its ``n`` non-tied pairs reach ``boundary(n)`` with at least ``min_net_wins``
  more wins than losses: at any pair (``looks="every"``) or once its ``max_pairs`` pairs are run (``looks="end"``);
* else goes on, until ``max_pairs`` pairs or the budget are spent: then the evidence is *too thin*, and the verdict
  says how many pairs it saw and what the rule needed.

Why this is safe: if the two harnesses are equally good, each non-tied difference is as likely positive as
negative whatever the scores look like (the pairs' null; ties say nothing either way). With ``looks="end"`` (the
default) the rule is a one-sided test at ``alpha`` on the pairs run: the exact Wilcoxon signed-rank test of the
non-tied differences (``test="signed_rank"``, the default: a large win counts more than a small one, by rank, so a
clipped exact fit cannot swamp it) or the sign test of the wins (``test="sign"``); a drop or an early stop can only
lower its false accepts. With ``looks="every"`` (sign test only), :func:`sign_boundary` computes, by dynamic
programming over the walk of wins and losses with the drop rule in it, the most lenient boundary whose probability
of ever accepting under that null, looking after every non-tied pair up to ``max_pairs``, is at most ``alpha``: a
clear winner stops early, at the price of a win or two more before it may. Racing several challengers against one
start, a stage splits alpha between them (Bonferroni), so the stage as a whole stays within alpha. Which test and
looks pay at the optimizer's budgets was measured on recorded outcomes (docs/optimizer.md, the power table;
``optimize.replay``).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from typing import Any, Callable, Hashable, Iterator, Literal, Mapping, Sequence

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

from optimize.paired import PairedRecord

Pair = tuple[Any, int]  # (task, seed); a task object in the stages, a name in replays
Verdict = Literal["accepted", "behind", "cannot win", "too thin", "screened"]
Looks = Literal["every", "end"]


@functools.lru_cache(maxsize=256)
def sign_boundary(max_pairs: int, alpha: float, min_net_wins: int, drop_behind: int | None
                  ) -> tuple[tuple[int, ...], float]:
    """(wins needed among n non-tied pairs for n = 0..max_pairs, the exact null acceptance probability).

    A constant per-look level (Pocock's shape): the largest binomial tail level whose overall acceptance under the
    null stays <= ``alpha``; ``max_pairs + 1`` in the tuple means "cannot accept at this n"."""
    levels = sorted({_tail(n, w) for n in range(1, max_pairs + 1) for w in range(n + 1)})
    best: tuple[tuple[int, ...], float] = (tuple(max_pairs + 1 for _ in range(max_pairs + 1)), 0.0)
    for level in levels:
        if level > alpha:
            break
        bound = _boundary_at(max_pairs, level, min_net_wins)
        rate = _null_acceptance(bound, max_pairs, min_net_wins, drop_behind)
        if rate <= alpha + 1e-12:
            best = (bound, rate)
    return best


def _walks(steps: int, drop_behind: int | None) -> Iterator[tuple[int, dict[int, float]]]:
    """After each of ``steps`` non-tied pairs under the null (fair coin flips): n, and by wins w the probability of
    having w wins without ever having been ``drop_behind`` behind."""
    alive = {0: 1.0}
    for n in range(1, steps + 1):
        step: dict[int, float] = {}
        for w, p in alive.items():
            step[w + 1] = step.get(w + 1, 0.0) + p / 2
            step[w] = step.get(w, 0.0) + p / 2
        alive = {w: p for w, p in step.items() if drop_behind is None or (n - w) - w < drop_behind}
        yield n, alive


def _end_acceptance(n: int, need: int, drop_behind: int | None) -> float:
    """P(a walk of n fair coin flips is never ``drop_behind`` behind and ends with at least ``need`` wins)."""
    alive = {0: 1.0}
    for _, alive in _walks(n, drop_behind):
        pass
    return sum(p for w, p in alive.items() if w >= need)


def _tail(n: int, w: int) -> float:
    """P(Binomial(n, 1/2) >= w)."""
    return sum(math.comb(n, k) for k in range(w, n + 1)) / 2**n


@functools.lru_cache(maxsize=256)
def end_boundary(max_pairs: int, alpha: float, min_net_wins: int, drop_behind: int | None) -> tuple[int, ...]:
    """Wins needed among n non-tied pairs when the race accepts only at its end: for each n, the fewest wins whose
    probability under the null, on a walk of n fair coin flips that was never ``drop_behind`` behind (a dropped
    race never reaches its end), is at most ``alpha``. Exact for every n, so for any number of ties."""
    out = [max_pairs + 1]
    for n, alive in _walks(max_pairs, drop_behind):
        need, tail = max_pairs + 1, 0.0
        for w in range(n, -1, -1):
            tail += alive.get(w, 0.0)
            if tail > alpha + 1e-12 or 2 * w - n < min_net_wins:
                break
            need = w
        out.append(need)
    return tuple(out)


def _boundary_at(max_pairs: int, level: float, min_net_wins: int) -> tuple[int, ...]:
    out = [max_pairs + 1]
    for n in range(1, max_pairs + 1):
        need = next((w for w in range(n + 1) if _tail(n, w) <= level and 2 * w - n >= min_net_wins), max_pairs + 1)
        out.append(need)
    return tuple(out)


def _null_acceptance(bound: Sequence[int], max_pairs: int, min_net_wins: int, drop_behind: int | None) -> float:
    """P(the walk ever crosses ``bound`` before a drop) when every non-tied pair is a fair coin."""
    alive = {0: 1.0}  # wins -> probability, after n non-tied pairs, among paths not yet decided
    accepted = 0.0
    for n in range(1, max_pairs + 1):
        step: dict[int, float] = {}
        for w, p in alive.items():
            step[w + 1] = step.get(w + 1, 0.0) + p / 2
            step[w] = step.get(w, 0.0) + p / 2
        alive = {}
        for w, p in step.items():
            losses = n - w
            if w >= bound[n] and w - losses >= min_net_wins:
                accepted += p
            elif drop_behind is None or losses - w < drop_behind:
                alive[w] = p
    return accepted


def signed_rank_p(diffs: Sequence[float], margin: float = 0.0) -> float:
    """One-sided exact p of the Wilcoxon signed-rank test of the non-tied differences (``|d| > margin``; equal
    ``|d|`` share their mid-rank): the probability of a sum of positive ranks at least the observed one when each
    sign is a fair coin (the pairs' null), by dynamic programming over the sums."""
    kept = [d for d in diffs if abs(d) > margin]
    if not kept:
        return 1.0
    ranks = _twice_midranks([abs(d) for d in kept])
    observed = sum(r for r, d in zip(ranks, kept) if d > 0)
    dist = np.zeros(sum(ranks) + 1)
    dist[0] = 1.0
    for r in ranks:
        dist = 0.5 * (dist + np.concatenate((np.zeros(r), dist[:-r])))
    return float(min(1.0, dist[observed:].sum()))


def _twice_midranks(values: Sequence[float]) -> list[int]:
    """Twice the mid-ranks of ``values`` (integers: tied values share the mean of their ranks)."""
    order = sorted(range(len(values)), key=lambda i: values[i])
    out = [0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            out[order[k]] = i + j + 2  # 2 x the mean of ranks i+1 .. j+1
        i = j + 1
    return out


class RaceRule(BaseModel):
    """When a race accepts, drops or goes on (module docstring). ``alpha`` is the most a race accepts a challenger
    no better than the incumbent; ``margin`` makes a small difference a tie; ``test`` is what decides at the end:
    the Wilcoxon signed-rank test of the non-tied differences (``signed_rank``: their order of size counts) or the
    sign test of the wins (``sign``); ``looks="every"`` accepts as soon as the sign test's sequential boundary is
    crossed. A race's length (``max_pairs``) and step (``batch``) are set per stage."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    alpha: float = Field(0.125, gt=0.0, le=1.0,
        description="Level of the one-sided test that accepts a challenger (false accepts at most alpha).")
    margin: float = Field(0.0, ge=0.0, description="Score differences within this are ties.")
    min_net_wins: int = Field(2, ge=1, description="Wins beyond losses a challenger needs, at least.")
    drop_behind: int | None = Field(3, ge=1,
        description="Losses beyond wins at which a challenger is dropped (unset: never early).")
    looks: Looks = Field("end",
        description="end: decide after the last pair; every: an exact sequential boundary at every pair (sign test).")
    test: Literal["signed_rank", "sign"] = Field("signed_rank", description="signed_rank (exact Wilcoxon) or sign.")

    @model_validator(mode="after")
    def _sequential_looks_need_the_sign_test(self) -> "RaceRule":
        if self.looks == "every" and self.test != "sign":
            raise ValueError("a race that may accept at any pair (looks=every) is decided by the sign test, whose "
                             "sequential boundary is exact: set test=sign")
        return self

    def boundary(self, max_pairs: int, alpha: float | None = None) -> tuple[int, ...]:
        """The sign test's wins needed among n non-tied pairs, n = 0..max_pairs (``max_pairs + 1``: cannot)."""
        a = self.alpha if alpha is None else alpha
        if self.looks == "end":
            return end_boundary(max_pairs, a, self.min_net_wins, self.drop_behind)
        return sign_boundary(max_pairs, a, self.min_net_wins, self.drop_behind)[0]

    def null_acceptance(self, max_pairs: int, alpha: float | None = None) -> float:
        """The most a race of ``max_pairs`` pairs accepts a challenger no better than the incumbent: exact for the
        sign test (``every``: when every pair is non-tied; ``end``: at the worst number of non-tied pairs); for the
        signed-rank test its level, ``alpha``, which the exact test never exceeds."""
        a = self.alpha if alpha is None else alpha
        if self.looks == "every":
            return sign_boundary(max_pairs, a, self.min_net_wins, self.drop_behind)[1]
        if self.test == "signed_rank":
            return a
        return max((_end_acceptance(n, self.boundary(max_pairs, a)[n], self.drop_behind)
                    for n in range(1, max_pairs + 1)), default=0.0)

    def clean_wins_needed(self, max_pairs: int, alpha: float | None = None) -> int | None:
        """Wins without a loss that accept (None: no race of ``max_pairs`` pairs can accept at this alpha)."""
        if self.test == "signed_rank":  # k clean wins: the largest sum of ranks, p = 2 ** -k
            a = self.alpha if alpha is None else alpha
            k = max(self.min_net_wins, math.ceil(math.log2(1 / a) - 1e-9))
            return k if k <= max_pairs else None
        bound = self.boundary(max_pairs, alpha)
        return next((n for n in range(1, max_pairs + 1) if bound[n] <= n), None)

    def verdict(self, record: PairedRecord, max_pairs: int, alpha: float | None = None) -> Verdict | None:
        """The decision after ``record`` (None: go on)."""
        if self.test == "signed_rank":
            return self._signed_rank_verdict(record, max_pairs, self.alpha if alpha is None else alpha)
        bound = self.boundary(max_pairs, alpha)
        n, left = record.wins + record.losses, max_pairs - record.n
        clears = bool(n) and record.wins >= bound[n] and record.net >= self.min_net_wins
        if clears and (self.looks == "every" or left <= 0):
            return "accepted"
        if self.drop_behind is not None and -record.net >= self.drop_behind:
            return "behind"
        if left <= 0:
            return "too thin"
        if not any(record.wins + k >= bound[n + k] and record.net + k >= self.min_net_wins
                   for k in range(left + 1)):
            return "cannot win"
        return None

    def _signed_rank_verdict(self, record: PairedRecord, max_pairs: int, alpha: float) -> Verdict | None:
        left = max_pairs - record.n
        if left <= 0 and record.net >= self.min_net_wins and signed_rank_p(record.diffs, self.margin) <= alpha:
            return "accepted"
        if self.drop_behind is not None and -record.net >= self.drop_behind:
            return "behind"
        if left <= 0:
            return "too thin"
        # the best the race can still do: every pair left a win larger than any so far (each one only lowers p)
        top = max((abs(d) for d in record.diffs), default=0.0) + self.margin + 1.0
        best = list(record.diffs) + [top + k for k in range(left)]
        if record.net + left < self.min_net_wins or signed_rank_p(best, self.margin) > alpha:
            return "cannot win"
        return None

    def describe(self) -> str:
        drop = f"; dropped {self.drop_behind} losses behind" if self.drop_behind else ""
        when = "at any pair" if self.looks == "every" else "once its pairs are run"
        test = "the Wilcoxon signed-rank test" if self.test == "signed_rank" else "the sign test"
        return (f"a race decided by {test} (accepts {when}, false accepts <= {self.alpha:g}; net wins >= "
                f"{self.min_net_wins}{drop}" + (f"; |difference| <= {self.margin:g} is a tie" if self.margin else "")
                + ")")


@dataclass
class RaceResult:
    """How a race ended: the verdict, the paired record on the pairs it decided on, what it cost and needed."""

    verdict: Verdict
    record: PairedRecord
    pairs: list[tuple[str, int]]
    challenger_mean: float
    incumbent_mean: float
    max_pairs: int
    alpha: float
    clean_wins_needed: int | None
    note: str = ""
    scores: dict[str, list[float]] = field(default_factory=dict)

    @property
    def accepted(self) -> bool:
        return self.verdict == "accepted"

    def summary(self) -> str:
        """One sentence a report can print as it is."""
        rec = self.record
        seen = f"{rec.wins} wins / {rec.ties} ties / {rec.losses} losses over {rec.n} pairs"
        means = f"mean score {self.challenger_mean:.3f} vs {self.incumbent_mean:.3f}"
        if self.verdict == "accepted":
            return f"accepted: {seen} ({means})"
        if self.verdict == "behind":
            return f"dropped, it fell behind: {seen} ({means})"
        need = (f"at least {self.clean_wins_needed} wins without a loss" if self.clean_wins_needed
                else "more pairs than the race had")
        what = "cannot win within its pairs" if self.verdict == "cannot win" else "the evidence is too thin to decide"
        return (f"not accepted, {what}: {seen} ({means}); in {self.max_pairs} pairs the rule needs {need}, or "
                f"more wins than losses beyond that" + (f"; {self.note}" if self.note else ""))

    def to_dict(self) -> dict[str, Any]:
        return {"verdict": self.verdict, "accepted": self.accepted, **self.record.to_dict(),
                "pairs": [list(p) for p in self.pairs], "challenger_mean": self.challenger_mean,
                "incumbent_mean": self.incumbent_mean, "max_pairs": self.max_pairs, "alpha": self.alpha,
                "clean_wins_needed": self.clean_wins_needed, "summary": self.summary()}


# scores(arms, pairs) -> {label: [score per pair]}; raises StopRace (e.g. a spent budget) to end with what it has
Scorer = Callable[[Mapping[str, Any], Sequence[Pair]], Mapping[str, Sequence[float]]]


class StopRace(Exception):
    """Raised by a scorer that cannot pay for more runs: the race ends as "too thin" with the pairs it has."""


def race(challenger: Any, incumbent: Any, schedule: Sequence[Pair], rule: RaceRule, scores: Scorer, *,
         max_pairs: int, batch: int = 2, alpha: float | None = None, screening: bool = False,
         labels: tuple[str, str] = ("challenger", "incumbent"), key: Callable[[Pair], Hashable] | None = None
         ) -> RaceResult:
    """Race ``challenger`` against ``incumbent`` on the first ``max_pairs`` pairs of ``schedule``, ``batch`` pairs
    at a time, the verdict taken pair by pair in schedule order (so batching never changes a decision).

    ``screening``: no acceptance, only the drop of a challenger that falls behind (stage 2's first look at a
    trial, on pairs too few to decide on); a challenger that does not fall behind ends as "screened"."""
    alpha = rule.alpha if alpha is None else alpha
    max_pairs = min(max_pairs, len(schedule))
    name = key or pair_key
    diffs: list[float] = []
    seen: list[tuple[str, int]] = []
    got: dict[str, list[float]] = {labels[0]: [], labels[1]: []}
    verdict: Verdict | None = None
    note = ""
    position = 0
    while verdict is None and position < max_pairs:
        step = list(schedule[position : min(position + max(1, batch), max_pairs)])
        try:
            out = scores({labels[0]: challenger, labels[1]: incumbent}, step)
        except StopRace as exc:
            note = str(exc)
            break
        for i, pair in enumerate(step):
            a, b = _finite(out[labels[0]][i]), _finite(out[labels[1]][i])
            got[labels[0]].append(a)
            got[labels[1]].append(b)
            diffs.append(a - b)
            seen.append(name(pair))
            verdict = rule.verdict(PairedRecord(tuple(diffs), rule.margin), max_pairs, alpha)
            if screening and verdict != "behind":
                verdict = None
            if verdict is not None:
                break
        position += len(step)
    record = PairedRecord(tuple(diffs), rule.margin)
    if verdict is None or verdict == "too thin":
        verdict = "screened" if screening else "too thin"
    return RaceResult(verdict=verdict, record=record, pairs=seen, challenger_mean=_mean(got[labels[0]]),
                      incumbent_mean=_mean(got[labels[1]]), max_pairs=max_pairs, alpha=alpha,
                      clean_wins_needed=rule.clean_wins_needed(max_pairs, alpha), note=note,
                      scores={k: list(v) for k, v in got.items()})


def pair_key(pair: Pair) -> tuple[str, int]:
    """A pair as (task name, seed): tasks are objects in the stages and names in replays."""
    return (str(getattr(pair[0], "name", pair[0])), int(pair[1]))


def race_schedule(tasks: Sequence[Any], seeds: Sequence[int], order_seed: int, *,
                  exclude: Sequence[tuple[str, int]] = (), last: Sequence[str] = (),
                  first: Sequence[str] = ()) -> list[Pair]:
    """The order a stage's races take their pairs in, fixed before any outcome: seed-major (every task at the
    first seed, in a seeded order with the tasks in ``first`` ahead - those already run there - then every task at
    the next), without the ``exclude`` pairs (those a candidate was chosen on: its record there is favoured by the
    choice), the tasks in ``last`` (retired: every candidate tied on them) after all others."""
    import random

    order = list(tasks)
    random.Random(order_seed).shuffle(order)
    ahead = {str(t) for t in first}
    order.sort(key=lambda t: str(getattr(t, "name", t)) not in ahead)  # stable: the seeded order within each part
    skip = {tuple(p) for p in exclude}
    retired = set(last)
    pairs = [(t, int(s)) for s in seeds for t in order if pair_key((t, s)) not in skip]
    return ([p for p in pairs if pair_key(p)[0] not in retired]
            + [p for p in pairs if pair_key(p)[0] in retired])


def _finite(value: float) -> float:
    value = float(value)
    return value if math.isfinite(value) else 0.0


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else 0.0
