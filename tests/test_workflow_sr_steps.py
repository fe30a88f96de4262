"""The SR side of a workflow run: guidance only widens the search (the floor), the unguided run beside the roles,
hypotheses screened before the engine, the term library and the residual run."""

from __future__ import annotations

import json
import math

import pytest
from pydantic import ValidationError

from tests.doubles import ScriptedLLM, detect_role, scripted_role_output
from workflows.params import (
    SRSettings,
    WorkflowParams,
    expected_solver_runs,
)
from tests.workflow_standins import TINY, scripted, workflow_task
from workflows.runner import run_workflow

@pytest.fixture(scope="module")
def task():
    return workflow_task()


# -- guidance only widens the search ------------------------------------------------------------------------------
def test_a_shrinking_plan_still_searches_the_harness_space() -> None:
    """A plan asking for length 3, arithmetic only, a tiny population and no time gets the harness's floor."""
    from harness.sr.plan import DEFAULT_OPERATORS
    from harness.sr.settings import SearchSettings

    floor = SRSettings(time_budget=7, population_size=300, max_length=25, max_depth=9).floor()
    plan, changes = SearchSettings(floor=floor).admit(
        {"max_length": 3, "max_depth": 2, "operators": ["add", "sub", "mul", "div"], "population_size": 20,
         "time_budget": 1, "seeds": ["c0*A"]}, ["t", "A"])
    assert set(DEFAULT_OPERATORS) <= set(plan.operators)
    assert (plan.max_length, plan.max_depth, plan.population_size, plan.time_budget) == (25, 9, 300, 7)
    assert plan.seeds == ["A*c0"]
    assert any(c.startswith("raised max_length") and c.endswith("-> 25 (the harness's floor)") for c in changes)
    assert any("kept the harness's operators" in c for c in changes)
    # extra operators are added, at most max_extra_operators of them
    plan, _ = SearchSettings(floor=floor, max_extra_operators=2).admit({"operators": ["tanh", "abs", "pow", "cube"]},
                                                                       ["t", "A"])
    assert plan.operators == list(DEFAULT_OPERATORS) + ["tanh", "abs"]
    # but none that slow every generation several times over, unless the harness's own operators have them
    plan, changes = SearchSettings(floor=floor, max_extra_operators=4).admit(
        {"operators": ["cosh", "tanh", "sinh", "tan", "atan"]}, ["t", "A"])
    assert plan.operators == list(DEFAULT_OPERATORS) + ["tanh"]
    assert any(c.startswith("did not add cosh, sinh, tan, atan") for c in changes)
    own = SRSettings(time_budget=7, operators=list(DEFAULT_OPERATORS) + ["tan"]).floor()
    plan, _ = SearchSettings(floor=own).admit({"operators": ["add"]}, ["t", "A"])
    assert "tan" in plan.operators


def test_workflow_runs_never_search_less_than_the_floor(task) -> None:
    """End to end: a model that asks for a crippled search; every SR node ran the harness's full space."""
    from harness.sr.plan import DEFAULT_OPERATORS

    def shrinker(messages, **request):
        role = detect_role(messages, request.get("response_format"))
        if role in ("planner", "repairer"):
            return json.dumps({"max_length": 3, "operators": ["add", "sub", "mul", "div"], "hypotheses": []})
        return scripted_role_output(messages, **request)

    settings = {**TINY, "max_length": 18}
    result = run_workflow(task, (0, 1, 1, 0, 0), None, ScriptedLLM(fn=shrinker), sr_settings=settings)
    sr_nodes = [n for n in result.state.nodes if n.kind == "sr"]
    assert len(sr_nodes) == 2
    for node in sr_nodes:
        plan = node.info["plan"]
        assert set(DEFAULT_OPERATORS) <= set(plan["operators"]) and plan["max_length"] == 18
        assert plan["population_size"] == TINY["population_size"]


def test_a_harness_can_take_only_the_models_equations(task) -> None:
    """max_extra_operators = max_features = 0: the plan's hypotheses still seed the engine, while its operators
    and features are left out with a note (the shipped default's setting: SRSettings' defaults)."""
    def planner(messages, **request):
        if detect_role(messages, request.get("response_format")) == "planner":
            return json.dumps({"hypotheses": ["-c0*A + c1*A**2*exp(-c2*t)"], "operators": ["tanh", "abs"],
                               "features": ["log(A)", "A*t"]})
        return scripted_role_output(messages, **request)

    settings = {**TINY, "max_extra_operators": 0, "max_features": 0}
    result = run_workflow(task, (0, 1, 0, 0, 0), None, ScriptedLLM(fn=planner), sr_settings=settings)
    node = next(n for n in result.state.nodes if n.kind == "sr")
    plan = node.info["plan"]
    assert plan["seeds"] and not plan["features"]
    assert "tanh" not in plan["operators"] and "abs" not in plan["operators"]
    assert any("feature" in c for c in node.info["plan_changes"])
    assert SRSettings(max_features=2).limits().max_features == 2


def test_an_unseeded_engine_keeps_the_hypotheses_in_the_pool(task) -> None:
    """seed_engine = False: the engine runs the unguided search; the fitted hypothesis still joins the pool."""
    good = "-c0*A + c1*A**2*exp(-c2*t)"

    def planner(messages, **request):
        if detect_role(messages, request.get("response_format")) == "planner":
            return json.dumps({"hypotheses": [good], "operators": []})
        return scripted_role_output(messages, **request)

    result = run_workflow(task, (0, 1, 0, 0, 0), None, ScriptedLLM(fn=planner),
                          sr_settings={**TINY, "seed_engine": False})
    node = next(n for n in result.state.nodes if n.kind == "sr")
    assert node.info["plan"]["seeds"] == [] and not node.info["engine"].get("n_injected")
    kept = [c for c in node.candidates if c["source"] == "hypothesis"]
    assert len(kept) == 1 and kept[0]["metrics"]["valid"]["nmse"] < 1e-6
    assert result.best is not None and result.best.metric("valid") < 1e-6


def test_the_unguided_run_joins_the_pool_beside_the_guided_one(task) -> None:
    """unguided_run: one more engine run with the floor plan, the task's seed and no seeds; the guided run gets
    another engine seed and the model's hypotheses; both fronts are in the pool and counted."""
    good = "-c0*A + c1*A**2*exp(-c2*t)"

    def planner(messages, **request):
        if detect_role(messages, request.get("response_format")) == "planner":
            return json.dumps({"hypotheses": [good], "operators": []})
        return scripted_role_output(messages, **request)

    settings = {**TINY, "unguided_run": True}
    result = run_workflow(task, (0, 1, 0, 0, 0), None, ScriptedLLM(fn=planner), sr_settings=settings, seed=3)
    runs = {n.info["step"]: n for n in result.state.nodes if n.kind == "sr"}
    assert set(runs) == {"unguided", "initial"}
    assert result.solver_runs == expected_solver_runs(WorkflowParams.from_tuple((0, 1, 0, 0, 0)), settings) == 2
    floor = SRSettings.coerce(settings).floor()
    plain = runs["unguided"].info["plan"]
    assert plain["seeds"] == [] and plain["seed"] == 3 and not runs["unguided"].info["engine"].get("n_injected")
    assert plain["operators"] == floor.operators and plain["max_length"] == floor.max_length
    assert runs["unguided"].branch == "unguided" and runs["unguided"].candidates
    guided = runs["initial"].info["plan"]
    assert guided["seeds"] and guided["seed"] != plain["seed"]
    pool = {c.equation for c in result.candidates}
    assert {c["equation"] for c in runs["unguided"].candidates} <= pool


def test_the_unguided_runs_answer_survives_a_crashing_model(task) -> None:
    """The model fails with an unexpected error on every call: the run records it, and the engine's own run is
    still in the pool and picked, so a broken model costs the guided run only."""

    def broken(messages, **request):
        raise RuntimeError("model backend crashed")

    settings = {**TINY, "unguided_run": True}
    result = run_workflow(task, (0, 1, 0, 0, 0), None, ScriptedLLM(fn=broken), sr_settings=settings, seed=3)
    assert any("model backend crashed" in e for e in result.errors), result.errors
    unguided = next(n for n in result.state.nodes if n.kind == "sr" and n.info["step"] == "unguided")
    assert unguided.candidates
    assert {c["equation"] for c in unguided.candidates} <= {c.equation for c in result.candidates}
    assert result.best is not None and math.isfinite(result.best.metric("valid"))


def test_hypotheses_are_screened_before_the_engine(task) -> None:
    """Good hypotheses are fitted at once and seed the engine; bad ones are dropped with a note in the history."""
    good, bad = "-c0*A + c1*A**2*exp(-c2*t)", "c0*sin(997*t)"

    def planner(messages, **request):
        role = detect_role(messages, request.get("response_format"))
        if role == "planner":  # the good one written as an equation for the target: its right-hand side is kept
            return json.dumps({"hypotheses": [f"dA_dt = {good}", bad, "c0*warp(A)"], "operators": ["exp"]})
        if role == "repairer":
            assert "dropped" in messages[1]["content"]  # the next role reads the notes
        return scripted_role_output(messages, **request)

    result = run_workflow(task, (0, 1, 1, 0, 0), None, ScriptedLLM(fn=planner), sr_settings=TINY)
    first = next(n for n in result.state.nodes if n.kind == "sr")
    notes = " | ".join(first.info["hypothesis_notes"])
    assert "warp" in notes and "dropped" in notes
    kept = [c for c in first.candidates if c["source"] == "hypothesis"]
    assert len(kept) == 1 and kept[0]["metrics"]["valid"]["nmse"] < 1e-6  # the true form, fitted exactly
    assert first.info["plan"]["seeds"] and "exp" in first.info["plan"]["operators"]


def test_the_term_library_fits_the_domains_terms_and_their_sum(task) -> None:
    """term_library: the task's domain's terms (and those for every task) are fitted before the first SR run,
    alone and summed; the sum of the right terms fits the law exactly and joins the pool, but does not seed the
    engine (the model's hypotheses keep its seed slots); a term over inputs the task lacks is dropped with a note;
    off, no library candidates."""
    library = {task.domain: ["-0.5*A", "0.1*A**2*exp(-0.3*t)", "0.2*P*log(10/P)"],
               "biology": ["0.3*A"], "any": ["0.01"]}
    settings = {**TINY, "term_library": library}
    result = run_workflow(task, (0, 1, 0, 0, 0), None, scripted(), sr_settings=settings, seed=1)
    node = next(n for n in result.state.nodes if n.kind == "sr")
    library_cands = [c for c in node.candidates if c["source"] == "library"]
    summed = [c for c in library_cands if "A**2" in c["equation"] or "A^2" in c["equation"]]
    assert summed and min(c["metrics"]["valid"]["nmse"] for c in summed) < 1e-8  # -c0*A + c1*A**2*exp(-c2*t)
    seeds = node.info["plan"]["seeds"]
    assert seeds and not {c["expression"] for c in library_cands} & set(seeds)  # the model's seeds only
    notes = node.info["hypothesis_notes"]
    assert any("library term '0.2*P*log(10/P)' dropped" in n for n in notes)
    assert result.best is not None and result.best.metric("valid") < 1e-8
    plain = run_workflow(task, (0, 1, 0, 0, 0), None, scripted(), sr_settings=TINY, seed=1)
    assert not any(c["source"] == "library" for n in plain.state.nodes if n.kind == "sr" for c in n.candidates)


def test_a_residual_run_searches_what_the_best_hypothesis_leaves(task) -> None:
    """residual_seconds: the branch's first run hands that many seconds to an engine run on y - f(x), f the best
    kept hypothesis; its equations come back as f + g refitted on the task (source "residual"), better than f
    alone; the solve's SR seconds stay the same. Off (0), there is no residual run."""
    settings = {**TINY, "time_budget": 2, "term_library": {task.domain: ["-0.5*A"]}, "residual_seconds": 1}
    result = run_workflow(task, (0, 1, 0, 0, 0), None, scripted(), sr_settings=settings, seed=1)
    sr = [n for n in result.state.nodes if n.kind == "sr"]
    guided = next(n for n in sr if n.info["step"] == "initial")
    residual = next(n for n in sr if n.info["step"] == "residual")
    assert guided.info["plan"]["time_budget"] == pytest.approx(1.0)
    assert residual.info["plan"]["time_budget"] == pytest.approx(1.0) and residual.parent == guided.id
    assert any("residual run" in c for c in guided.info["plan_changes"])
    base = min(guided.candidates, key=lambda c: c["metrics"]["valid"]["nmse"] if c["source"] in (
        "library", "hypothesis") else math.inf)
    assert any(c.startswith("target: y - (") for c in residual.info["plan_changes"])
    lifted = residual.candidates
    assert lifted and all(c["source"] == "residual" for c in lifted)
    assert all(math.isfinite(c["metrics"]["test_ood"]["nmse"]) for c in lifted)  # scored on the task itself
    assert min(c["metrics"]["valid"]["nmse"] for c in lifted) < base["metrics"]["valid"]["nmse"]
    assert result.solver_runs == 2
    off = run_workflow(task, (0, 1, 0, 0, 0), None, scripted(), sr_settings={**settings, "residual_seconds": 0},
                       seed=1)
    steps = [n.info["step"] for n in off.state.nodes if n.kind == "sr"]
    assert steps == ["initial"]
    assert next(n for n in off.state.nodes if n.kind == "sr").info["plan"]["time_budget"] == pytest.approx(2.0)


def test_a_term_library_is_bounded() -> None:
    with pytest.raises(ValidationError, match="at most"):
        SRSettings(term_library={"chemistry": [f"{i}.0*A" for i in range(30)]})
    library = SRSettings(term_library={"x": ["a", "a", "b"], "y": ["z"], "any": ["b", "c"]})
    assert library.library_terms("x") == ["a", "b", "c"] and library.library_terms("w") == ["b", "c"]


def test_the_precision_polish_refits_the_pools_best_and_the_pool_keeps_what_it_finds(task) -> None:
    """sr.precision_polish: after the last SR run the pool's best few are refitted on relative error, pruned and
    snapped; the results join the pool in one recorded step, and the run's answer is never worse for it."""
    settings = {**TINY, "unguided_run": False, "combine_terms": False, "sparse_regression": False,
                "selection": "accuracy"}  # the lowest validation error: "never worse" in that figure
    plain = run_workflow(task, (0, 1, 0, 0, 0), None, scripted(), sr_settings={**settings, "precision_polish": False},
                         seed=1)
    polished = run_workflow(task, (0, 1, 0, 0, 0), None, scripted(),
                            sr_settings={**settings, "precision_polish": True}, seed=1)
    [step] = [n for n in polished.state.nodes if n.info.get("channel") == "precision polish"]
    assert step.info["polished"] >= 1 and step.info["found"] == len(step.candidates) >= 1
    assert all(c["source"].startswith("precision:") for c in step.candidates)
    assert not [n for n in plain.state.nodes if n.info.get("channel") == "precision polish"]
    unpolished = [c for c in polished.candidates if not c.source.startswith("precision:")]
    best = min(unpolished, key=lambda c: c.metric("valid"))
    assert polished.best.metric("valid") <= best.metric("valid")
    # the polish did something: a new equation (not a copy of the pool's) that puts more training points within
    # 0.1 % than the pool's best, the precision an MSE fit neglects (a no-op polish fails here)
    seen = {c.equation for c in unpolished}
    gains = [c for c in step.candidates if c["equation"] not in seen
             and c["metrics"]["train"]["frac_within_0.001"] > best.metrics["train"]["frac_within_0.001"]]
    assert gains, [(c["equation"], c["metrics"]["train"]["frac_within_0.001"]) for c in step.candidates]
