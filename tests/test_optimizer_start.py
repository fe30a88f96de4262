"""The optimizer from HarnessSR's start: the initial harness, the hand-made choices as searchable fields, shared
SR runs paid once, early stop at an exact fit, and paired decisions that a single task cannot make."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from harness.core.task import Task
from harness.core.vocabulary import BASIC_OPERATORS, DEFAULT_OPERATORS, OPERATOR_SETS
from optimize.evaluation import Evaluator
from optimize.paired import PairedRecord, PairedRule, sign_flip_p
from optimize.settings import Bounds
from tests.doubles import ScriptedLLM, detect_role, scripted_role_output
from workflows.harness import INITIAL_SR_CHOICES, hand_made_choices, initial_harness, shipped_harness
from workflows.params import SRSettings
from workflows.roles import default_prompts, initial_prompts

TINY = {"time_budget": 1, "population_size": 20, "generations": 3, "max_length": 15}


# -- the initial harness ----------------------------------------------------------------------------------------
def test_the_initial_seed_has_none_of_the_hand_made_choices() -> None:
    init, shipped = initial_harness(), shipped_harness()
    assert hand_made_choices(init) == {}
    assert set(hand_made_choices(shipped)) == set(INITIAL_SR_CHOICES) == {"unguided_run", "combine_terms", "operators",
                                                                         "sparse_regression"}
    settings = init.settings
    assert not settings.unguided_run and not settings.combine_terms and not settings.sparse_regression
    assert shipped.settings.sparse_regression
    assert "pow" not in settings.operators and set(settings.operators) == set(BASIC_OPERATORS)
    assert set(shipped.settings.operators) == set(DEFAULT_OPERATORS) == set(OPERATOR_SETS["basic+pow"])
    assert init.workflow.as_tuple() == shipped.workflow.as_tuple() == (0, 1, 0, 0, 0)
    # generic prompts: what the role does and answers; no field, no textbook framing, no worked example
    assert init.prompts == initial_prompts() != default_prompts()
    for role, text in init.prompts.items():
        assert role.title() in text and len(text) < 600
        for hint in ("textbook", "kinetics", "oscillator", "pendulum", "Example", "population"):
            assert hint not in text, (role, hint)
    # the engine settings that are not hand-made choices stay the engine config's; a hand-made field at its
    # shipped value is reset, one the user set otherwise (their own operators) is kept
    custom = initial_harness(sr_settings=SRSettings(time_budget=7, operators=["add", "sub", "mul", "div"])
                             .model_dump(mode="json"))
    assert custom.settings.time_budget == 7 and not custom.settings.unguided_run
    assert custom.settings.operators == ["add", "sub", "mul", "div"]


def test_optimize_seed_names_the_start(tmp_path) -> None:
    from optimize.context import build_context
    from optimize.settings import Bounds, OptimizeSettings
    from optimize.tasks import TaskSets

    def ctx(seed: str):
        settings = OptimizeSettings.model_validate({"seed": seed})
        return build_context(tmp_path / seed, settings, llm_config={"provider": "local"},
                             backend_config={"name": "operon"}, benchmark_config={}, llm=object(),
                             tasks=TaskSets([], []))

    initial, default = ctx("initial"), ctx("default")
    assert hand_made_choices(initial.base) == {} and initial.base.prompts == initial_prompts()
    assert default.base == default.default == initial.default
    assert default.base.identity_digest == shipped_harness(llm={"provider": "local"}).identity_digest
    with pytest.raises(ValueError):
        OptimizeSettings.model_validate({"seed": "textbook"})


@pytest.mark.parametrize("race_seeds", [1, 2])
def test_stage2_searches_the_hand_made_choices(tmp_path, race_seeds) -> None:
    """From the initial harness, scores reward the shipped default's three SR choices together: stage 2 searches
    them (each a parameter), its best trial races the start on the pairs it was not chosen on (the training tasks
    at ``race_seeds`` engine seeds, less the screening pairs) and wins, and the stage's harness carries them."""
    from optimize.stage2 import run_stage2
    from tests.optimize_standins import SEED_PROMPTS, context

    def rule(params, prompts, task, agents, sr):
        return 0.2 + 0.8 * (sr.unguided_run and sr.combine_terms and "pow" in sr.operators)

    overrides = {"stage2": {"n_trials": 16, "n_startup_trials": 8, "minibatch": 2, "adapt_steps": 0,
                            "race_pairs": 16,
                            "bounds": {"branches": [1, 1], "repair_rounds": [0, 0], "discussion_rounds": [0, 0],
                                       "use_analyst": [False], "role_tools": [False], "role_samples": [1, 1],
                                       "unguided_run": [False, True], "combine_terms": [False, True],
                                       "operators": ["basic", "basic+pow"], "sparse_regression": None}},
                 "seed": "initial", "race_seeds": race_seeds, "accept": {"min_net_wins": 2, "alpha": 0.125},
                 # every race must be able to accept (OptimizeSettings checks): 3 wins without a loss
                 "tasks": {"n_train": 6},
                 "stage1": {"race_pairs": 4}, "stage3": {"race_pairs": 4, "holdout": 3}, "freeze": {"race_pairs": 4}}
    assert Bounds().sparse_regression == [False, True]  # searched by default; kept at the start's here
    ctx, _ = context(tmp_path, rule, overrides, n_train=6)
    assert hand_made_choices(ctx.base) == {}
    result = run_stage2(ctx, {r: [t] for r, t in SEED_PROMPTS.items()})
    assert {"unguided_run", "combine_terms", "operators"} <= set(result["trials"][0]["params"])
    chosen = ctx.base.from_dict(result["harness"])
    assert hand_made_choices(chosen) == {"unguided_run": True, "combine_terms": True,
                                         "operators": list(OPERATOR_SETS["basic+pow"])}
    race = result["confirmation"][-1]
    assert race["verdict"] == "accepted" and race["wins"] == race["n"] == 6 * race_seeds - 2  # every pair left
    assert all(t["dropped"] is False for t in result["trials"] if t.get("gain", 0) > 0)


# -- paired decisions -------------------------------------------------------------------------------------------
def test_paired_rule_counts_and_p_values() -> None:
    rule = PairedRule(min_net_wins=2, alpha=0.125, margin=0.01)
    one = PairedRecord((0.9,) + (0.0,) * 7, 0.01)  # one task flipped, seven ties: never enough
    assert (one.wins, one.ties, one.losses) == (1, 7, 0) and not rule.accepts(one)
    three = PairedRecord((0.5, 0.5, 0.5, 0.0, 0.0), 0.01)
    assert sign_flip_p(three.diffs) == pytest.approx(1 / 8) and rule.accepts(three)
    mixed = PairedRecord((0.5, 0.5, 0.5, -0.5, 0.005), 0.01)  # the 0.005 is a tie, not a win
    assert (mixed.wins, mixed.ties, mixed.losses) == (3, 1, 1) and not rule.accepts(mixed)
    assert sign_flip_p(()) == 1.0 and not rule.accepts(PairedRecord(()))


def test_the_rule_refuses_what_the_pairs_do_not_show_and_needs_common_pairs() -> None:
    from optimize.records import EvalRecord

    def records(scores, tasks=("a", "b", "c", "d")):
        return [EvalRecord("x", t, 0, "freeze", s, task_key=t) for t, s in zip(tasks, scores)]

    rule = PairedRule(min_net_wins=2, alpha=0.125)
    # higher mean, but one task decides it: refused
    accepted, record = rule.decide(records([1, 0.5, 0.5, 0.5]), records([0, 0.5, 0.5, 0.5]))
    assert not accepted and record.net == 1
    assert rule.decide(records([1, 1, 1, 0.5]), records([0, 0, 0, 0.5]))[0]
    with pytest.raises(ValueError, match="same"):
        rule.decide(records([1, 1]), records([0, 0], tasks=("a", "z")))


def test_false_accept_rate_is_bounded_by_alpha() -> None:
    rule = PairedRule(min_net_wins=2, alpha=0.125, margin=0.0)
    rng = np.random.default_rng(0)
    for n in (3, 5, 8, 12):
        diffs = rng.choice([0.0, 0.5, 1.0, 0.02], size=n)
        far = rule.false_accept_rate(diffs)
        assert 0.0 <= far <= rule.alpha + 1e-12
    # the mean alone ("higher mean wins") accepts noise far more often on the same differences
    diffs = [1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]
    assert rule.false_accept_rate(diffs) == 0.0  # one differing pair can never decide
    # not a rule that never accepts: with 8 differing pairs of equal size, the sign-flip test's exact rate is the
    # share of patterns with >= 7 wins (9 / 256 = 0.035; 6 wins: 37 / 256 = 0.14 > alpha), and all wins pass
    assert rule.false_accept_rate([1.0] * 8) == pytest.approx(9 / 256)
    assert rule.accepts(PairedRecord((1.0,) * 8, rule.margin))


def test_the_gate_refuses_a_candidate_that_wins_one_validation_task(tmp_path) -> None:
    from optimize.freeze import run_freeze
    from tests.optimize_standins import PHRASE, context

    def rule(params, prompts, task):  # the trained prompt wins one validation task, ties the rest
        return 1.0 if (PHRASE in prompts["planner"] and task.name == "v0") else 0.5

    ctx, _ = context(tmp_path, rule, {"accept": {"min_net_wins": 2, "alpha": 0.125}, "race_seeds": 1,
                                      "tasks": {"n_train": 6, "n_validation": 4}, "stage1": {"race_pairs": 4},
                                      "stage3": {"race_pairs": 4, "holdout": 3}, "freeze": {"race_pairs": 4}},
                     n_train=6, n_validation=4)
    trained = ctx.base.with_prompts(planner=ctx.base.prompts["planner"] + " " + PHRASE)
    ctx.folder.save_stage("refine", {"stage": "refine", "harness": trained.to_dict()})
    result = run_freeze(ctx)
    gate = result["gate"]
    assert gate["paired"]["wins"] <= 1 and gate["paired"]["losses"] == 0 and gate["winner"] == "default"
    assert result["selected_stage"] == "default"
    # the report never calls the better-scoring harness worse: it says the evidence was too thin, and why
    assert gate["verdict"] in ("too thin", "cannot win") and "too thin" in gate["reason"]
    if gate["paired"]["wins"]:
        assert "scored higher on these pairs" in gate["reason"]
    assert "3 wins without a loss" in gate["reason"]


# -- shared runs and early stop (real workflow, scripted model, tiny Operon runs) --------------------------------
@pytest.fixture(scope="module")
def task() -> Task:
    import benchmarks

    return benchmarks.load_suite("synthetic", names=["chem_react_synth_00"], n_train=60, n_test=30, n_ood=30)[0]


def test_the_unguided_run_is_shared_by_harnesses_and_paid_once(tmp_path, task) -> None:
    """Two harnesses that differ in their Planner prompt make the same unguided run (same task, seed, engine
    settings): the second reads the first's, so both hold the same engine equations and it is paid once."""
    base = shipped_harness().with_sr_settings(**TINY).with_changes(llm={"provider": "scripted"})
    other = base.with_prompts(planner=base.prompts["planner"] + " Prefer short equations.")
    evaluator = Evaluator(tmp_path, ScriptedLLM(fn=scripted_role_output), metric="acc_0.1",
                          score_split="test_id+test_ood")
    first = evaluator.evaluate_one(base, task, 0, stage="init")
    second = evaluator.evaluate_one(other, task, 0, stage="init")
    assert (first.solver_runs, second.solver_runs) == (2, 1)
    assert evaluator.cache.shared_count() == 1 and evaluator.shared_runs.hits == 1

    def unguided(record):
        nodes = [json.loads(line) for line in (Path(record.run_dir) / "nodes.jsonl").read_text().splitlines()]
        return next(n for n in nodes if n.get("kind") == "sr" and (n.get("info") or {}).get("step") == "unguided")

    a, b = unguided(first), unguided(second)
    assert a["info"]["made_by_this_run"] and not b["info"]["made_by_this_run"]
    assert a["info"]["shared_run"] == b["info"]["shared_run"]
    assert [c["equation"] for c in a["candidates"]] == [c["equation"] for c in b["candidates"]]
    # another engine seed is another run
    third = evaluator.evaluate_one(base, task, 1, stage="init")
    assert third.solver_runs == 2 and evaluator.cache.shared_count() == 2


def test_stop_at_exact_skips_what_an_exact_fit_makes_needless(task) -> None:
    """The Planner states the law itself: its fitted hypothesis is exact, so with stop_at_exact the repair round
    (Diagnoser, Repairer, SR) is never paid; without it, it is."""
    from workflows.runner import run_workflow
    from harness.core.context import RunStatus

    truth = task.ground_truth
    assert truth

    def planner(messages, **request):
        if detect_role(messages, request.get("response_format")) == "planner":
            return json.dumps({"hypotheses": [truth], "operators": []})
        return scripted_role_output(messages, **request)

    settings = {**TINY, "unguided_run": False}
    plain = run_workflow(task, (0, 1, 1, 0, 0), None, ScriptedLLM(fn=planner), sr_settings=settings, seed=0)
    early = run_workflow(task, (0, 1, 1, 0, 0), None, ScriptedLLM(fn=planner),
                         sr_settings={**settings, "stop_at_exact": True}, seed=0)
    assert (plain.llm_calls, plain.solver_runs) == (3, 2) and plain.status == RunStatus.COMPLETED
    assert (early.llm_calls, early.solver_runs) == (1, 1) and early.status == RunStatus.TARGET_REACHED
    assert early.best.metric("valid") <= 1e-14
