"""Stage 2's decisions among screened trials, apart from the study that proposes them: a trial's first look at
the start (screening), its gain, the tasks that carry no information, which trials earn a race, and the races.
Pure functions of race outcomes, so the stage (``optimize.stage2``) and its replays on recorded outcomes
(``optimize.replay``) decide with the same code."""

from __future__ import annotations

from typing import Any, Hashable, Sequence

from optimize.race import Pair, RaceResult, RaceRule, Scorer, race


def screen_trial(candidate: Any, start: Any, pairs: Sequence[Pair], rule: RaceRule, scores: Scorer, *,
                 batch: int, label: str = "trial") -> RaceResult | None:
    """A trial's first look: raced against the start on the screening pairs with drops only (too few pairs to
    accept on); None when the stage's budget ends it before its first pair."""
    result = race(candidate, start, pairs, rule, scores, max_pairs=len(pairs), batch=batch, screening=True,
                  labels=(label, "start"))
    return None if result.note and not result.pairs else result


# A screened trial's gain: its mean difference from the start with each pair's clipped to +-GAIN_CLIP (in -log10
# NMSE, a factor of 100), so one exact fit (clipped at 16) against a good approximation does not outweigh every other
# pair of a short screen (2-6 pairs); a 0/1 reading is unchanged.
GAIN_CLIP = 2.0


def screening_gain(result: RaceResult) -> float:
    """What ranks screened trials and what the sampler maximises: the clipped mean difference from the start."""
    diffs = [max(-GAIN_CLIP, min(GAIN_CLIP, d)) for d in result.record.diffs]
    return sum(diffs) / len(diffs) if diffs else 0.0


def uninformative_tasks(screened: Sequence[dict[str, Any]], margin: float, min_trials: int = 3) -> list[str]:
    """Tasks on whose screening pair every screened trial (at least ``min_trials`` of them) tied the start: they
    carry no information, so the races take them last. ``screened`` rows have ``pairs`` and ``diffs``."""
    seen: dict[str, list[float]] = {}
    for row in screened:
        for pair, diff in zip(row["pairs"], row["diffs"]):
            seen.setdefault(str(pair[0]), []).append(float(diff))
    return sorted(t for t, diffs in seen.items() if len(diffs) >= min_trials and all(abs(d) <= margin for d in diffs))


def eligible(screened: Sequence[dict[str, Any]], start_key: Hashable, top: int) -> list[dict[str, Any]]:
    """The trials worth a race, best first: distinct, not the start, not dropped, a positive mean gain on the
    screening pairs; ordered by gain, fewer LLM calls, earlier; at most ``top``."""
    order = sorted((r for r in screened if not r["dropped"] and r["gain"] > 0 and r["key"] != start_key),
                   key=lambda r: (-r["gain"], r.get("calls", 0.0), r.get("number", 0)))
    out: list[dict[str, Any]] = []
    for row in order:
        if len(out) >= top:
            break
        if row["key"] not in {r["key"] for r in out}:
            out.append(row)
    return out


def confirm_by_race(candidates: Sequence[dict[str, Any]], start: Any, schedule: Sequence[Pair], rule: RaceRule,
                    scores: Scorer, *, max_pairs: int, batch: int) -> tuple[Any | None, list[RaceResult]]:
    """Race each candidate (best first) against the start on ``schedule`` at alpha / len(candidates) (Bonferroni:
    the stage accepts a harness no better than its start with probability <= alpha); the first accepted wins."""
    results: list[RaceResult] = []
    alpha = rule.alpha / max(1, len(candidates))
    for row in candidates:
        result = race(row["candidate"], start, schedule, rule, scores, max_pairs=max_pairs, batch=batch, alpha=alpha,
                      labels=(f"race trial {row.get('number', '')}".strip(), "race start"))
        results.append(result)
        if result.accepted:
            return row["candidate"], results
        if result.note:  # the budget is spent: no further race can run
            break
    return None, results
