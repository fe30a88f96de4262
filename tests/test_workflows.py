"""Workflows: every shape runs end to end (scripted model + Operon, tiny budgets) with exact call counts;
budget stops, failures, selection, prompt bounds and role schemas."""

from __future__ import annotations

import json
import math

import pytest
from pydantic import ValidationError

from harness.core.candidates import select
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
from tests.workflow_standins import TINY, scripted, workflow_task
from workflows.runner import run_workflow

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
    return workflow_task()


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
    rule = SRSettings.coerce(TINY).selection  # the shipped rule: the precision ladder
    assert result.best.equation == select(result.candidates, rule).equation

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
