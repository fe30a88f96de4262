"""Workflows: every shape runs end to end (scripted model + Operon, tiny budgets) with exact call counts;
budget stops, failures, selection, prompt bounds and role schemas."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from pydantic import ValidationError

import benchmarks
from harness.core.candidates import Candidate, select_best
from harness.llm import LLMError
from tests.doubles import ScriptedLLM, detect_role, scripted_role_output
from workflows.params import (
    LOCAL_WORKFLOWS,
    SRSettings,
    WorkflowParams,
    expected_llm_calls,
    expected_solver_runs,
)
from workflows.prompting import MAX_PROMPT_CHARS, build_messages, prompt_chars
from workflows.roles import (
    ROLE_NAMES,
    DiagnosisOutput,
    PlanOutput,
    default_prompts,
    output_model,
    response_format,
    salvage_truncated,
)
from harness.core.context import RunStatus
from workflows.runner import run_workflow

TINY = {"time_budget": 1, "population_size": 20, "generations": 3, "max_length": 15,
        "unguided_run": False}  # the engine-only run is tested on its own

# each value of each parameter at least once, plus combinations (u_ana, b, t_rep, t_dis, u_syn)
SHAPES = [
    (0, 1, 0, 0, 0),
    (1, 1, 0, 0, 0),
    (0, 1, 1, 0, 0),
    (0, 1, 2, 0, 0),
    (0, 1, 3, 0, 0),
    (0, 2, 0, 0, 1),
    (0, 2, 0, 1, 0),
    (0, 2, 0, 2, 0),
    (0, 3, 0, 0, 0),
    (1, 4, 1, 0, 1),
    (1, 2, 1, 1, 1),
    (1, 5, 1, 0, 1),
]


@pytest.fixture(scope="module")
def task():
    return benchmarks.load_suite("synthetic", names=["chem_react_synth_00"], n_train=60, n_test=30, n_ood=30)[0]


def scripted() -> ScriptedLLM:
    return ScriptedLLM(fn=scripted_role_output)


# -- parameters -------------------------------------------------------------------------------------------------
def test_params_validation_and_counts() -> None:
    w = WorkflowParams.from_tuple((1, 5, 3, 2, 1))
    assert w.as_tuple() == (1, 5, 3, 2, 1)
    assert expected_llm_calls(w) == 1 + 5 + 5 * 3 * 2 + 5 * 2 + 1 == 47
    assert expected_solver_runs(w) == 5 + 15 + 10 + 1
    for bad in [(0, 0, 0, 0, 0), (0, 6, 0, 0, 0), (0, 1, 4, 0, 0), (0, 1, 0, 3, 0), (2, 1, 0, 0, 0), (0, 1, 0)]:
        with pytest.raises((ValidationError, ValueError)):
            WorkflowParams.from_tuple(bad)
    with pytest.raises(ValidationError):
        WorkflowParams(branches=2, extra_field=1)
    assert LOCAL_WORKFLOWS["synthesizer"].as_tuple() == (0, 2, 0, 0, 1)
    assert SRSettings.coerce({"time": 2, "population": 30}).time_budget == 2
    with pytest.raises(ValidationError):
        SRSettings.coerce({"time_budjet": 2})


# -- every shape --------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "w" + "".join(map(str, s)))
def test_shape_runs_with_exact_counts(task, shape, tmp_path) -> None:
    params = WorkflowParams.from_tuple(shape)
    llm = scripted()
    result = run_workflow(task, params, None, llm, sr_settings=TINY, seed=1, run_dir=tmp_path)
    assert result.status == RunStatus.COMPLETED, result.errors
    assert result.errors == []
    assert result.llm_calls == expected_llm_calls(params) == len(llm.requests)
    assert result.solver_runs == expected_solver_runs(params)
    assert result.best is not None and math.isfinite(result.best.metric("valid"))
    assert result.best is select_best(result.candidates) or result.best.equation == select_best(result.candidates).equation

    kinds: dict[str, int] = {}
    for node in result.state.nodes:
        kinds[node.kind] = kinds.get(node.kind, 0) + 1
    u_ana, b, t_rep, t_dis, u_syn = shape
    assert kinds.get("role:analyst", 0) == u_ana
    assert kinds.get("role:planner", 0) == b + b * t_dis
    assert kinds.get("role:diagnoser", 0) == kinds.get("role:repairer", 0) == b * t_rep
    assert kinds.get("role:synthesizer", 0) == u_syn
    assert kinds["sr"] == expected_solver_runs(params)
    lines = (tmp_path / "nodes.jsonl").read_text().splitlines()
    assert len(lines) == len(result.state.nodes)
    saved = json.loads((tmp_path / "result.json").read_text())
    assert saved["status"] == RunStatus.COMPLETED and saved["best"]["equation"] == result.best.equation


def test_discussion_and_synthesis_see_all_branches(task) -> None:
    llm = scripted()
    run_workflow(task, (0, 2, 0, 1, 1), None, llm, sr_settings=TINY)
    by_role: dict[str, list[str]] = {}
    for req in llm.requests:
        role = detect_role(req["messages"], req["response_format"])
        by_role.setdefault(role, []).append(req["messages"][1]["content"])
    discussion = [p for p in by_role["planner"] if "mode: discussion" in p]
    assert len(discussion) == 2
    for prompt in discussion + by_role["synthesizer"]:
        assert "branch 1" in prompt and "branch 2" in prompt and "valid NMSE" in prompt


def test_analyst_and_diagnoser_get_evidence_without_test_data(task) -> None:
    llm = scripted()
    run_workflow(task, (1, 1, 1, 0, 0), None, llm, sr_settings=TINY)
    prompts = {detect_role(r["messages"], r["response_format"]): "\n".join(m["content"] for m in r["messages"])
               for r in llm.requests}
    assert "power law" in prompts["analyst"] and "correlations" in prompts["analyst"]
    assert "Residuals:" in prompts["diagnoser"]
    assert "Analyst findings" in prompts["planner"]
    for text in prompts.values():  # the task card names the splits; nothing after it may show test results
        after_card = text.split("Input names:", 1)[1]
        assert "test_id" not in after_card and "test_ood" not in after_card and "OOD" not in after_card


# -- failures and budgets -----------------------------------------------------------------------------------------
def test_failed_and_unparseable_calls_still_count(task) -> None:
    calls = {"n": 0}

    def flaky(messages, **request):
        calls["n"] += 1
        role = detect_role(messages, request.get("response_format"))
        if role == "diagnoser":
            return "I think the residuals look fine, no JSON here"
        if role == "repairer":
            raise LLMError("server went away")
        if calls["n"] == 1:
            return '{"operators": "sin", "max_length": 500, "hypotheses": "c0*A"}'  # sloppy but usable
        return scripted_role_output(messages, **request)

    params = WorkflowParams.from_tuple((0, 2, 2, 0, 0))
    result = run_workflow(task, params, None, ScriptedLLM(fn=flaky), sr_settings=TINY)
    assert result.status == RunStatus.COMPLETED
    assert result.llm_calls == expected_llm_calls(params)
    assert result.solver_runs == expected_solver_runs(params)
    assert len([e for e in result.errors if "diagnoser" in e]) == 4
    assert len([e for e in result.errors if "repairer" in e]) == 4
    fallbacks = [n for n in result.state.nodes if n.kind.startswith("role:") and n.info["fallback"]]
    assert len(fallbacks) == 8 and all(n.error for n in fallbacks)
    assert result.best is not None


@pytest.mark.parametrize("budget, max_llm, max_sr", [
    ({"max_llm_calls": 2}, 2, 2),
    ({"max_solver_runs": 1}, 2, 1),
])
def test_budget_stop_keeps_what_it_has(task, budget, max_llm, max_sr) -> None:
    params = WorkflowParams.from_tuple((0, 2, 2, 1, 1))
    result = run_workflow(task, params, None, scripted(), sr_settings=TINY, budget=budget, max_workers=1)
    assert result.status == RunStatus.BUDGET_EXHAUSTED and result.stop_reason
    assert result.llm_calls <= max_llm < expected_llm_calls(params)
    assert result.solver_runs <= max_sr
    assert result.best is not None  # selection over what was found before the stop


def test_time_budget_stops_early(task) -> None:
    # too little time left for an engine run (engines need >= 1 s): the run stops after the first plan
    result = run_workflow(task, (0, 1, 3, 0, 0), None, scripted(), sr_settings=TINY, budget={"max_seconds": 0.5})
    assert result.status == RunStatus.BUDGET_EXHAUSTED and "time" in result.stop_reason
    assert result.llm_calls == 1 and result.solver_runs == 0 and result.best is None


def test_concurrent_sr_runs_keep_counts_exact(task) -> None:
    params = WorkflowParams.from_tuple((0, 3, 1, 0, 0))
    result = run_workflow(task, params, None, scripted(), sr_settings=TINY, max_workers=2)
    assert (result.llm_calls, result.solver_runs) == (expected_llm_calls(params), expected_solver_runs(params))


# -- selection ----------------------------------------------------------------------------------------------------
def _cand(eq: str, valid: float, complexity: int) -> Candidate:
    return Candidate(expression=eq, params=[], equation=eq, complexity=complexity,
                     metrics={"train": {"nmse": 0.0}, "valid": {"nmse": valid}})


def test_selection_is_validation_best_then_simpler() -> None:
    pool = [_cand("a", 0.2, 3), _cand("b", 0.01, 9), _cand("c", 0.01, 5), _cand("d", math.nan, 1),
            _cand("e", 0.5, 1)]
    assert select_best(pool).equation == "c"  # lowest valid NMSE; tie -> lower complexity; nan never wins
    assert select_best(reversed(pool)).equation == "c"
    assert select_best([_cand("d", math.inf, 1)]) is None


def test_workflow_selects_validation_best_over_all_branches(task) -> None:
    result = run_workflow(task, (0, 3, 0, 0, 0), None, scripted(), sr_settings=TINY)
    best_valid = min(c.metric("valid") for c in result.candidates)
    assert result.best.metric("valid") == best_valid
    assert result.front and result.front[-1].metric("valid") == best_valid


# -- roles and prompts --------------------------------------------------------------------------------------------
def _walk(schema):
    yield schema
    for value in schema.get("properties", {}).values():
        yield from _walk(value)
    if isinstance(schema.get("items"), dict):
        yield from _walk(schema["items"])


@pytest.mark.parametrize("role", ROLE_NAMES)
def test_role_schema_is_bounded_and_closed(role) -> None:
    schema = response_format(role)["json_schema"]["schema"]
    assert "$defs" not in schema and schema["additionalProperties"] is False
    assert set(schema["required"]) == set(schema["properties"])
    for node in _walk(schema):
        if node.get("type") == "string":
            assert "maxLength" in node
        if node.get("type") == "array":
            assert "maxItems" in node
    out = output_model(role).model_validate_json(scripted_role_output([], response_format=response_format(role)))
    assert isinstance(out, output_model(role))


def test_role_outputs_are_tolerant() -> None:
    plan = PlanOutput.model_validate({"operators": "sin", "max_length": 500, "hypotheses": "c0*x", "junk": 1})
    assert plan.operators == ["sin"] and plan.hypotheses == ["c0*x"]
    assert "max_length" not in plan.to_raw_plan()  # engine knobs are not the model's to choose
    assert plan.to_raw_plan()["seeds"] == ["c0*x"]
    diag = DiagnosisOutput.model_validate({"issues": ["x" * 500] * 9, "evidence": "one", "missing_terms": None})
    assert len(diag.issues) == 4 and len(diag.issues[0]) == 200 and diag.evidence == ["one"]
    assert diag.missing_terms == []
    cut = '{"operators": ["add", "sin"], "max_length": 12, "hypotheses": ["c0*sin(x)"], "features": [], "rationale": "1.1.1.1'
    salvaged = salvage_truncated(cut, PlanOutput)
    assert salvaged.operators == ["add", "sin"] and salvaged.hypotheses == ["c0*sin(x)"] and salvaged.rationale == ""
    assert salvage_truncated("no json at all", PlanOutput) is None


def test_prompt_is_bounded_and_framed(task) -> None:
    prompts = default_prompts()
    assert set(prompts) == set(ROLE_NAMES) and all(len(p) < 2000 for p in prompts.values())
    history = [f"step {i}: " + "tried something long " * 20 for i in range(200)]
    messages = build_messages("planner", prompts["planner"], task, mode="discussion", evidence="e" * 9000,
                              findings="f" * 5000, history=history, shared="s" * 20000)
    user = messages[1]["content"]
    assert user.startswith("# Role: planner (mode: discussion)\n" + prompts["planner"])
    assert "Input names: t, A" in messages[0]["content"] and "## Output format" in user
    assert "earlier steps not shown" in user
    assert prompt_chars(messages) <= MAX_PROMPT_CHARS + len(prompts["planner"])
    # the system message is the task frame, the same for every role: llama.cpp reuses it as a cached prefix
    other = build_messages("diagnoser", prompts["diagnoser"], task, evidence="e")
    assert other[0] == messages[0]


def test_missing_prompt_is_refused(task) -> None:
    with pytest.raises(ValueError, match="repairer"):
        run_workflow(task, (0, 1, 1, 0, 0), {"planner": "p", "diagnoser": "d"}, scripted(), sr_settings=TINY)


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


def test_parsimony_selection_prefers_the_simpler_near_best(task) -> None:
    from harness.core.candidates import select

    def cand(eq: str, nmse: float, complexity: int) -> Candidate:
        return Candidate(eq, [], eq, complexity, {"valid": {"nmse": nmse}})

    pool = [cand("a", 1.0e-6, 25), cand("b", 1.3e-6, 7), cand("c", 1e-3, 3)]
    assert select(pool, "accuracy").equation == "a"
    assert select(pool, "parsimony", 0.5).equation == "b"
    assert select(pool, "parsimony", 0.1).equation == "a"
    with pytest.raises(ValueError, match="selection rule"):
        select(pool, "vibes")


def test_edge_validation_split_takes_the_extreme_rows(task) -> None:
    train, valid = task.train_valid(0.2, seed=0, mode="edge")
    assert train.n + valid.n == task.train.n
    t = task.train.X[:, 0]
    lo, hi = np.quantile(t, [0.1, 0.9])
    inner = (valid.X[:, 0] > lo) & (valid.X[:, 0] < hi) & (valid.X[:, 1] > np.quantile(task.train.X[:, 1], 0.1)) \
        & (valid.X[:, 1] < np.quantile(task.train.X[:, 1], 0.9))
    assert inner.mean() < 0.1  # validation rows lie at the edges of the inputs
    again = task.train_valid(0.2, seed=0, mode="edge")
    assert np.array_equal(again[1].X, valid.X)


def test_extrapolation_selection_reads_the_edge_score_among_near_best_only() -> None:
    from harness.core.candidates import select

    def cand(eq: str, nmse: float, complexity: int, edge: float | None) -> Candidate:
        metrics = {"valid": {"nmse": nmse}} | ({"edge": {"nmse": edge}} if edge is not None else {})
        return Candidate(eq, [], eq, complexity, metrics)

    pool = [cand("wiggly", 1.0e-6, 25, 3e-2), cand("law", 1.2e-6, 9, 2e-6), cand("simple", 1.4e-6, 5, 4e-4),
            cand("far", 1e-3, 3, 1e-9)]
    assert select(pool, "extrapolation", 0.5).equation == "law"  # best edge score among the near-best
    assert select(pool, "extrapolation", 0.1).equation == "wiggly"  # "law" is outside a 10% band
    assert select(pool, "accuracy").equation == "wiggly"
    unscored = [cand(c.equation, c.metric("valid"), c.complexity, None) for c in pool]
    assert select(unscored, "extrapolation", 0.5).equation == select(unscored, "parsimony", 0.5).equation == "simple"


def test_edge_score_tells_the_law_from_a_curve_that_only_fits_the_range() -> None:
    """exp(0.5 t) sampled on [0, 4] with 0.3% noise: a cubic fits the range within 2x of the law, but refitted on
    the inner rows it misses the extreme ones by 7x; the law does not (real fits, no doubles). A quartic would fit
    the edges to the noise level too: the edge score only sees misfit that rises above the noise."""
    from harness.core.candidates import select
    from harness.core.context import AgentContext, FitSettings, evaluate_candidate
    from harness.core.task import Task

    rng = np.random.default_rng(0)
    t = np.sort(rng.uniform(0, 4, 300))
    y = np.exp(0.5 * t) * (1 + 0.003 * rng.standard_normal(t.size))
    t_ood = np.linspace(4, 6, 100)
    task = Task.from_arrays(t[:, None], y, input_names=["t"], test_ood=(t_ood[:, None], np.exp(0.5 * t_ood)))
    ctx = AgentContext(task=task, fit=FitSettings(edge_check=True))
    law = evaluate_candidate("c0*exp(c1*t)", ctx)
    cubic = evaluate_candidate("c0 + c1*t + c2*t**2 + c3*t**3", ctx)
    assert "edge" in law.metrics and "edge" in cubic.metrics
    assert cubic.metric("valid") < 3 * law.metric("valid")  # in range, both fit
    assert law.metric("edge") * 3 < cubic.metric("edge")  # at the edges, only the law holds
    assert law.metric("test_ood") < cubic.metric("test_ood")  # and the edge score said which extrapolates
    assert select([cubic, law], "extrapolation", 9.0) is law
    assert "edge" not in evaluate_candidate("c0*exp(c1*t)", AgentContext(task=task)).metrics  # only when asked


def test_extrapolation_selection_in_a_workflow_scores_every_candidate(task) -> None:
    result = run_workflow(task, (0, 1, 0, 0, 0), None, scripted(),
                          sr_settings={**TINY, "selection": "extrapolation", "selection_tolerance": 3.0})
    assert result.candidates and all("edge" in c.metrics for c in result.candidates)
    assert result.best is not None and math.isfinite(result.best.metric("edge"))


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
