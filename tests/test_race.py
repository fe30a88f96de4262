"""Races (optimize.race) and their replays on recorded outcomes (optimize.replay, optimize.matrix): a challenger
that cannot win is dropped, one that wins on the incumbent's pairs is accepted, the sign test's boundary is exact,
and a replayed null accepts no more often than alpha."""

from __future__ import annotations

import itertools
import math
import random
from pathlib import Path

import pytest

from optimize.matrix import Outcome, OutcomeMatrix
from optimize.paired import PairedRule
from optimize.race import RaceRule, StopRace, race, race_schedule, sign_boundary
from optimize.replay import (
    MatrixScorer,
    PairedProtocol,
    RaceProtocol,
    Stage2Protocol,
    permuted,
    stage2_race,
    stage2_rates,
    two_arm_rate,
    with_other_seed,
)
from optimize.screening import eligible, uninformative_tasks

TASKS = [f"t{i:02d}" for i in range(24)]
SEEDS = [0, 1]


def scorer_from(values: dict[str, list[float]]):
    """A scorer whose arms are names and whose pairs are indices into ``values``; counts what it was asked."""
    asked: list[int] = []

    def scores(arms, pairs):
        asked.extend(p[1] for p in pairs)
        return {label: [values[arm][p[1]] for p in pairs] for label, arm in arms.items()}

    scores.asked = asked
    return scores


def schedule(n: int) -> list[tuple[str, int]]:
    return [("t", i) for i in range(n)]


# -- the race -----------------------------------------------------------------------------------------------------
def test_a_race_accepts_a_challenger_that_wins_on_the_incumbents_pairs_and_drops_one_that_falls_behind() -> None:
    rule = RaceRule(alpha=0.125, margin=0.3, min_net_wins=2, drop_behind=2)
    incumbent = [5.0] * 8
    better = [6.0, 5.1, 6.0, 6.0, 5.0, 5.2, 6.0, 5.0]  # 4 wins, 4 ties
    scores = scorer_from({"inc": incumbent, "better": better, "worse": [4.0, 4.0, 6.0, 4.0, 6.0, 6.0, 6.0, 6.0]})
    won = race("better", "inc", schedule(8), rule, scores, max_pairs=8, batch=3)
    assert won.accepted and (won.record.wins, won.record.ties, won.record.losses) == (4, 4, 0)
    assert won.pairs == [("t", i) for i in range(8)]  # looks="end": accepted once its pairs are run
    lost = race("worse", "inc", schedule(8), rule, scores, max_pairs=8, batch=1)
    assert lost.verdict == "behind" and lost.record.n == 2  # two losses: dropped, six pairs never paid
    assert "fell behind" in lost.summary()


def test_a_challenger_that_cannot_win_within_its_pairs_is_dropped_at_once() -> None:
    rule = RaceRule(alpha=0.125, margin=0.0, min_net_wins=2, drop_behind=None)
    scores = scorer_from({"inc": [1.0] * 4, "c": [1.0, 1.0, 2.0, 2.0]})
    result = race("c", "inc", schedule(4), rule, scores, max_pairs=4, batch=1)
    assert result.verdict == "cannot win" and result.record.n == 2  # two ties: 2 wins at most, 3 needed
    assert "3 wins without a loss" in result.summary()


def test_looks_every_stops_a_clear_winner_early_and_batching_never_changes_the_verdict() -> None:
    rule = RaceRule(alpha=0.125, looks="every", test="sign")
    values = {"inc": [0.0] * 24, "c": [1.0] * 24}
    for batch in (1, 2, 5):
        scores = scorer_from(values)
        result = race("c", "inc", schedule(24), rule, scores, max_pairs=24, batch=batch)
        assert result.accepted and result.record.n == rule.clean_wins_needed(24) == 5
        assert len(scores.asked) == 5 + (-5) % batch  # the pairs of at most one batch more were paid


def test_a_spent_budget_ends_a_race_as_too_thin_with_what_it_saw() -> None:
    def scores(arms, pairs):
        if pairs[0][1] >= 2:
            raise StopRace("the stage's budget is spent")
        return {label: [1.0 if arm == "c" else 0.0 for _ in pairs] for label, arm in arms.items()}

    result = race("c", "inc", schedule(8), RaceRule(), scores, max_pairs=8, batch=2)
    assert result.verdict == "too thin" and result.record.wins == 2 and "budget" in result.summary()
    assert "too thin" in result.summary() and "3 wins without a loss" in result.summary()


@pytest.mark.parametrize("looks,test", [("every", "sign"), ("end", "sign"), ("end", "signed_rank")])
@pytest.mark.parametrize("max_pairs", [3, 6, 10])
def test_the_boundary_holds_false_accepts_to_alpha_by_enumeration(looks: str, test: str, max_pairs: int) -> None:
    """Every sign pattern of ``max_pairs`` non-tied pairs (of unequal sizes: the signed-rank test reads them), run
    through the race itself: the share accepted is at most alpha, for every number of non-tied pairs (ties after)."""
    for alpha in (0.05, 0.125):
        rule = RaceRule(alpha=alpha, looks=looks, test=test, min_net_wins=2, drop_behind=2)
        worst, all_wins = 0.0, []
        for n in range(1, max_pairs + 1):  # n non-tied pairs, the rest ties at the end
            accepted = 0
            for signs in itertools.product((1.0, -1.0), repeat=n):
                diffs = [s * (1 + 0.37 * i) for i, s in enumerate(signs)] + [0.0] * (max_pairs - n)
                scores = scorer_from({"inc": [0.0] * max_pairs, "c": diffs})
                verdict = race("c", "inc", schedule(max_pairs), rule, scores, max_pairs=max_pairs).accepted
                accepted += verdict
                if n == max_pairs and min(signs) > 0:
                    all_wins.append(verdict)
            worst = max(worst, accepted / 2**n)
        assert worst <= alpha + 1e-12, (alpha, looks, max_pairs, worst)
        # and it is not a rule that never accepts: wherever its pairs can decide, a challenger that wins them all
        # is accepted and the null is accepted at a positive rate (a rule that never accepts fails here)
        can_decide = rule.clean_wins_needed(max_pairs) is not None
        assert all_wins == [can_decide] and (worst > 0) == can_decide, (alpha, looks, max_pairs, worst)
        if looks == "every":
            assert worst <= rule.null_acceptance(max_pairs) + 1e-12
        assert rule.null_acceptance(max_pairs) <= alpha + 1e-12


def test_the_sequential_boundary_costs_evidence_for_its_looks() -> None:
    bound, rate = sign_boundary(24, 0.125, 2, 2)
    assert rate <= 0.125 and bound[3] > 3  # three clean wins no longer suffice when every pair is a look ...
    assert RaceRule(looks="end", test="sign").clean_wins_needed(24) == 3  # ... they do when only the end is
    assert RaceRule(looks="end").clean_wins_needed(24) == 3  # (the signed-rank test: p = 2 ** -3 for three)
    assert RaceRule(looks="every", test="sign").clean_wins_needed(24) == 5
    assert RaceRule(alpha=0.0625).clean_wins_needed(24) == 4  # stage 2's two races at alpha / 2
    assert RaceRule().clean_wins_needed(2) is None  # two pairs can never accept
    with pytest.raises(ValueError, match="sign test"):
        RaceRule(looks="every")  # no exact sequential boundary for the signed-rank test


def test_the_signed_rank_test_reads_the_size_of_a_win_and_matches_scipy() -> None:
    from scipy.stats import wilcoxon

    from optimize.race import signed_rank_p

    diffs = [2.5, -0.4, 1.1, 3.0, -0.9, 0.7, 1.6, 0.05]
    assert signed_rank_p(diffs) == pytest.approx(wilcoxon(diffs, alternative="greater", method="exact").pvalue)
    assert signed_rank_p(diffs, margin=0.3) == pytest.approx(
        wilcoxon([d for d in diffs if abs(d) > 0.3], alternative="greater", method="exact").pvalue)
    big_wins = [5.0, 4.0, 3.0, -0.5, -0.6, 2.0]  # 4 wins, 2 small losses: the sizes tell, the signs alone do not
    assert signed_rank_p(big_wins) == pytest.approx(5 / 64)  # ranks 3-6 positive: 5 of 64 sign patterns do as well
    rule = RaceRule(alpha=0.125, margin=0.3)
    scores = scorer_from({"inc": [0.0] * 6, "c": big_wins})
    assert race("c", "inc", schedule(6), rule, scores, max_pairs=6).accepted
    sign = rule.model_copy(update={"test": "sign"})
    assert not race("c", "inc", schedule(6), sign, scorer_from({"inc": [0.0] * 6, "c": big_wins}),
                    max_pairs=6).accepted  # 4 wins and 2 losses: p = 0.34 by signs


def test_the_signed_rank_p_with_tied_differences_is_the_exact_enumeration() -> None:
    """Tied |differences| are the usual case with 0/1 readings (acc_0.01 wins and losses of exactly 1): they share
    their mid-rank. The p-value is checked against every sign pattern enumerated, independently of the code."""
    import itertools

    from scipy.stats import rankdata

    from optimize.race import signed_rank_p

    def enumerated(diffs: list[float], margin: float = 0.0) -> float:
        kept = [d for d in diffs if abs(d) > margin]
        ranks = rankdata([abs(d) for d in kept])  # mid-ranks for ties
        observed = sum(r for r, d in zip(ranks, kept) if d > 0)
        sums = [sum(r for r, s in zip(ranks, signs) if s > 0) for signs in itertools.product((1, -1), repeat=len(kept))]
        return sum(total >= observed - 1e-9 for total in sums) / len(sums)

    for diffs in ([1.0, 1.0, -1.0, 1.0, 1.0, 1.0, -1.0, 1.0],       # 0/1 readings: every |difference| tied
                  [1.0, 0.5, 0.5, -0.5, 1.0, 0.5, -1.0, 1.0, 0.5],  # two tie groups
                  [0.4, 0.4, 0.4, -0.4, 1.2, 1.2, -2.0, 0.0, 0.0]):  # ties, and zeros (dropped as ties)
        assert signed_rank_p(diffs) == pytest.approx(enumerated(diffs)), diffs
        assert signed_rank_p(diffs, margin=0.45) == pytest.approx(enumerated(diffs, 0.45)), diffs


def test_schedules_are_seed_major_fixed_and_take_the_retired_tasks_last() -> None:
    order = race_schedule(TASKS[:5], [0, 1], 7)
    assert [s for _, s in order] == [0] * 5 + [1] * 5 and order == race_schedule(TASKS[:5], [0, 1], 7)
    assert [t for t, _ in order[:5]] == [t for t, _ in order[5:]]
    left = race_schedule(TASKS[:5], [0, 1], 7, exclude=[(order[0][0], 0)], last=[order[1][0]])
    assert (order[0][0], 0) not in left and [t for t, _ in left[-2:]] == [order[1][0]] * 2
    first = race_schedule(TASKS[:5], [0], 7, first=["t04", "t02"])
    assert {t for t, _ in first[:2]} == {"t02", "t04"}


# -- stage 2's screening helpers ----------------------------------------------------------------------------------
def test_screening_retires_tasks_where_every_trial_tied_and_races_only_trials_that_gained() -> None:
    rows = [{"key": k, "candidate": k, "gain": g, "dropped": d, "calls": 1.0, "number": i,
             "pairs": [("a", 0), ("b", 0)], "diffs": diffs}
            for i, (k, g, d, diffs) in enumerate([("x", 0.5, False, [1.0, 0.0]), ("y", 0.5, False, [1.0, 0.1]),
                                                   ("start", 0.0, False, [0.0, 0.0]), ("z", 2.0, True, [-3, 0.0]),
                                                   ("x", 0.5, False, [1.0, 0.0]), ("w", -0.2, False, [-0.4, 0.0])])]
    assert uninformative_tasks(rows, margin=0.3) == ["b"]
    assert uninformative_tasks(rows[:2], margin=0.3) == []  # two trials are too few to retire a task
    assert [r["key"] for r in eligible(rows, "start", 3)] == ["x", "y"]  # dropped, the start, no gain, twins: out


# -- replays ------------------------------------------------------------------------------------------------------
def synthetic_matrix(win: float, lose: float, seed: int = 0) -> OutcomeMatrix:
    """``initial`` with noisy scores, ``good`` that wins ``win`` of the pairs by 2 and loses ``lose`` by 2."""
    rng = random.Random(seed)
    rows = []
    for t in TASKS:
        for s in SEEDS:
            base = rng.gauss(5.0, 3.0)
            u = rng.random()
            good = base + (2.0 if u < win else -2.0 if u < win + lose else rng.uniform(-0.2, 0.2))
            for arm, v in (("initial", base), ("good", good)):
                rows.append(Outcome(arm=arm, task=t, seed=s, metrics={"test_id": {"nmse": 10 ** -v},
                                                                       "test_ood": {"nmse": 10 ** -v}}))
    return OutcomeMatrix(rows, {"command": "synthetic"})


def test_the_matrix_file_round_trips_and_scores_as_the_evaluator(tmp_path) -> None:
    matrix = synthetic_matrix(0.3, 0.0)
    matrix.save(tmp_path / "m.jsonl")
    again = OutcomeMatrix.load(tmp_path / "m.jsonl")
    assert again.header == {"command": "synthetic"} and again.arms == ["good", "initial"]
    assert len(again.complete_pairs()) == 48
    outcome = again.outcomes[("initial", "t00", 0)]
    assert outcome.value("log_nmse") == pytest.approx(-math.log10(outcome.metrics["test_id"]["nmse"]))
    assert Outcome("a", "t", 0).value("log_nmse") == 0.0  # no equation: the mean's NMSE, as the evaluator scores


def test_a_replayed_null_never_accepts_above_alpha() -> None:
    """The same harness run again (another engine seed of the same task): over 3000 replays each protocol's
    acceptance rate is within its alpha (a binomial test at the 0.001 level, fixed seed)."""
    from scipy.stats import binomtest

    table = with_other_seed(synthetic_matrix(0.3, 0.1).table("log_nmse"), "initial", "initial again")
    rule = RaceRule(alpha=0.125, margin=0.3)
    for protocol in (RaceProtocol(rule, 8), RaceProtocol(rule, 20), RaceProtocol(rule.model_copy(
            update={"looks": "every", "test": "sign"}), 20), PairedProtocol(PairedRule(alpha=0.125, margin=0.3), 4, 2)):
        rate = two_arm_rate(table, protocol, "initial again", "initial", TASKS, SEEDS, 12, 3000, seed=1)
        assert binomtest(rate.accepted, rate.replays, 0.125, alternative="greater").pvalue > 0.001, (protocol, rate.rate)


def test_racing_finds_a_sparse_gain_that_a_minibatch_cannot() -> None:
    """A gain shaped like the real one (15 % of the pairs won, none lost): the paired rule on 4 pairs almost never
    accepts it; a 20-pair race usually does."""
    table = synthetic_matrix(0.15, 0.0, seed=3).table("log_nmse")
    before = two_arm_rate(table, PairedProtocol(PairedRule(alpha=0.125, margin=0.3), 4), "good", "initial", TASKS,
                          SEEDS, 12, 500, seed=2)
    after = two_arm_rate(table, RaceProtocol(RaceRule(alpha=0.125, margin=0.3), 20), "good", "initial", TASKS, SEEDS,
                         12, 500, seed=2)
    assert before.rate < 0.1 and after.rate > before.rate + 0.3


def test_the_racing_stage_2_finds_the_better_arm_and_stays_put_on_a_null() -> None:
    matrix = synthetic_matrix(0.5, 0.05, seed=4)
    table = matrix.table("log_nmse")
    table["also_initial"] = dict(table["initial"])
    arms = ["initial", "good", "also_initial"]
    protocol = Stage2Protocol(n_trials=6, n_startup=3, screen_tasks=4, confirm_top=2, race=RaceRule(margin=0.3),
                              max_pairs=16)
    found = stage2_rates(table, "initial", arms, TASKS, SEEDS, 12, stage2_race, 100, {"good"}, seed=5, p=protocol)
    assert found.found.rate > 0.8 and found.wrong.rate == 0.0
    null = stage2_rates(table, "initial", arms, TASKS, SEEDS, 12,
                        lambda t, start, a, world, seed, **kw: stage2_race(permuted(t, random.Random(seed)), start, a,
                                                                           world, seed=seed, **kw),
                        200, set(), seed=6, p=protocol)
    assert null.wrong.rate <= 0.125 + 0.05
    assert MatrixScorer(table)({"a": "good"}, [("t00", 0)]) == {"a": [table["good"][("t00", 0)]]}


def test_settings_that_make_an_acceptance_impossible_are_refused() -> None:
    """The main job used to confirm on pairs too few for its rule to ever accept: now such settings do not start."""
    from pydantic import ValidationError

    from optimize.settings import OptimizeSettings

    with pytest.raises(ValidationError, match=r"the gate .* can never accept: its race has 2 pairs"):
        OptimizeSettings.model_validate({"tasks": {"n_validation": 1}, "race_seeds": 2})
    with pytest.raises(ValidationError, match=r"stage 2 .* can never accept"):
        OptimizeSettings.model_validate({"tasks": {"n_train": 2}, "race_seeds": 1, "stage1": {"race_pairs": 1},
                                         "accept": {"alpha": 1.0, "min_net_wins": 1}})
    OptimizeSettings.model_validate({"tasks": {"n_validation": 2}, "race_seeds": 2})  # 4 pairs: 3 clean wins accept


def test_non_inferiority_reads_a_bootstrap_over_tasks_against_its_margin() -> None:
    from optimize.paired import non_inferiority

    same = {f"t{i}": [0.0, 0.0] for i in range(8)}
    assert non_inferiority(same, margin=0.05).non_inferior  # identical: the bound is 0, above -0.05
    worse = {f"t{i}": ([-1.0, 0.0] if i < 4 else [0.0, 0.0]) for i in range(8)}  # a loss on half the tasks
    verdict = non_inferiority(worse, margin=0.05)
    assert not verdict.non_inferior and verdict.mean == pytest.approx(-0.25) and verdict.lower < -0.05
    assert (verdict.wins, verdict.ties, verdict.losses) == (0, 12, 4) and "not shown" in verdict.summary()
    mixed = {f"t{i}": ([1.0, 0.0] if i % 2 else [0.0, -1.0]) for i in range(8)}  # wins and losses even
    assert not non_inferiority(mixed, margin=0.05).non_inferior  # mean 0, but the spread leaves the margin
    assert non_inferiority(mixed, margin=0.5).non_inferior
    assert not non_inferiority({"t0": [0.0]}, margin=0.5).non_inferior  # one task decides nothing


def test_the_shipped_default_comes_from_runs_only_when_they_agree_and_are_not_worse(tmp_path) -> None:
    import importlib.util
    import json

    from harness.app.artifact import FrozenHarness

    spec = importlib.util.spec_from_file_location("make_default", Path(__file__).parents[1] / "scripts" / "make_default_harness.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)

    def run(folder: str, digest: str, trained: list[float], default: list[float]) -> Path:
        path = tmp_path / folder
        path.mkdir()
        FrozenHarness.build_default().save(path / "harness.json")

        def rows(values):
            return {"heldout": {"tasks": {f"t{i}": {"per_seed": {"0": {"acc_0.01_id": v, "acc_0.01_ood": v}}}
                                          for i, v in enumerate(values)}}, "digest": digest}
        (path / "freeze.json").write_text(json.dumps({"picked_stage": "search", "rows": {
            "search": rows(trained), "default": rows(default)}}))
        return path

    worse = run("worse", "a", [0, 0, 0, 1], [1, 1, 1, 1])
    verdict, about = script.from_runs([worse, run("worse2", "a", [0, 0, 1, 1], [1, 1, 1, 1])], 0.05, 0.05)
    assert not verdict.non_inferior and about[0]["picked_stage"] == "search"
    assert script.main(["--from-runs", str(worse), str(tmp_path / "worse2")]) == 1  # refused, nothing written
    other = run("other", "b", [1, 1, 1, 1], [1, 1, 1, 1])
    assert script.main(["--from-runs", str(worse), str(other)]) == 1  # two different trained harnesses
