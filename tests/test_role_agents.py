"""Roles as agents of the runtime: tool steps before the answer, K answers ranked by their hypotheses' fit, the
SR step as a run_sr_search tool call, and one search tree per run (scripted model + tiny Operon runs)."""

from __future__ import annotations

import json
from typing import Any

import pytest

import benchmarks
from harness.runtime.role_agent import RoleAgentConfig
from tests.doubles import ScriptedLLM, scripted_role_output
from workflows.params import WorkflowParams, expected_llm_calls
from workflows.runner import run_workflow

TINY = {"time_budget": 1, "population_size": 20, "generations": 3, "max_length": 15,
        "unguided_run": False}  # the engine-only run is tested on its own


@pytest.fixture(scope="module")
def task():
    return benchmarks.load_suite("synthetic", names=["chem_react_synth_00"], n_train=60, n_test=30, n_ood=30)[0]


def _nodes(run_dir) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (run_dir / "nodes.jsonl").read_text().splitlines()]


def test_a_planner_with_a_tool_checks_its_hypothesis_then_answers(task, tmp_path) -> None:
    roles = {"planner": RoleAgentConfig(tools=("evaluate_expression",), tool_steps=1)}
    llm = ScriptedLLM(fn=scripted_role_output)
    result = run_workflow(task, (0, 1, 1, 0, 0), None, llm, sr_settings=TINY, run_dir=tmp_path, role_agents=roles)
    params = WorkflowParams.from_tuple((0, 1, 1, 0, 0))
    assert result.llm_calls == expected_llm_calls(params, roles) == 1 + 1 + 2  # tool step + answer, diag, repair
    assert len(llm.requests) == result.llm_calls
    assert llm.requests[0]["tools"][0]["function"]["name"] == "evaluate_expression"
    assert llm.requests[0]["tool_choice"] == "required" and llm.requests[0].get("response_format") is None
    assert llm.requests[1]["response_format"]["json_schema"]["name"] == "planner_output"
    nodes = _nodes(tmp_path)
    by_id = {n["id"]: n for n in nodes}
    tool_step = next(n for n in nodes if n["kind"] == "tools:planner")
    assert tool_step["tool_results"][0]["tool_name"] == "evaluate_expression" and tool_step["tool_results"][0]["ok"]
    assert tool_step["candidates"], "the fitted hypothesis joins the pool"
    planner = next(n for n in nodes if n["kind"] == "role:planner")
    assert planner["parent"] == tool_step["id"]
    assert any("evaluate_expression" in json.dumps(m) or "valid NMSE" in json.dumps(m) for m in
               llm.requests[1]["messages"]), "the answer sees the tool's result"
    sr = [n for n in nodes if n["kind"] == "sr"]
    assert len(sr) == 2 and sr[0]["parent"] == planner["id"]
    assert sr[0]["tool_results"][0]["tool_name"] == "run_sr_search" and sr[0]["tool_results"][0]["ok"]
    # one tree: every node but the first hangs under a recorded parent
    assert all(n["parent"] in by_id for n in nodes if n["id"] != tool_step["id"])
    assert result.solver_runs == 2 and result.best is not None


def test_k_answers_are_ranked_by_how_their_hypotheses_fit(task, tmp_path) -> None:
    """Sample 0 proposes a constant, sample 1 the data's own form: the runtime keeps sample 1."""
    good = task.ground_truth

    def fn(messages: list[dict[str, Any]], sample_index: int = 0, **request: Any) -> str:
        hyp = "c0" if sample_index == 0 else good
        return json.dumps({"hypotheses": [hyp], "operators": [], "features": [], "rationale": f"sample {sample_index}"})

    roles = {"planner": {"K": 2}}
    result = run_workflow(task, (0, 1, 0, 0, 0), None, ScriptedLLM(fn=fn), sr_settings=TINY, run_dir=tmp_path,
                          role_agents=roles)
    assert result.llm_calls == 2
    planner = next(n for n in _nodes(tmp_path) if n["kind"] == "role:planner")
    chosen = [s for s in planner["info"]["samples"] if s["chosen"]]
    assert [s["k"] for s in chosen] == [1]
    ranks = {s["k"]: s["rank"] for s in planner["info"]["samples"]}
    assert ranks[1] < ranks[0]
    assert planner["info"]["output"]["hypotheses"] == [good]


def test_a_diagnoser_reads_residual_diagnostics_through_its_tool(task, tmp_path) -> None:
    roles = {"diagnoser": RoleAgentConfig(tools=("residual_diagnostics",), tool_steps=1)}
    result = run_workflow(task, (0, 1, 1, 0, 0), None, ScriptedLLM(fn=scripted_role_output), sr_settings=TINY,
                          run_dir=tmp_path, role_agents=roles)
    nodes = _nodes(tmp_path)
    step = next(n for n in nodes if n["kind"] == "tools:diagnoser")
    assert step["tool_results"][0]["tool_name"] == "residual_diagnostics" and step["tool_results"][0]["ok"]
    assert step["parent"] == next(n for n in nodes if n["kind"] == "sr")["id"]
    assert result.status == "completed"


def test_an_analyst_reads_the_data_through_sandboxed_code(task, tmp_path, monkeypatch) -> None:
    """The Analyst's tool step runs model-written pandas code in the sandbox; its printout reaches the answer."""
    from harness.tools.code_tools import SANDBOX_ENV
    from harness.tools.sandbox import isolation_report

    if not isolation_report()["strict"]:
        monkeypatch.setenv(SANDBOX_ENV, "process")
    code = "print('rows', len(df), 'target mean', round(float(df.iloc[:, -1].mean()), 4))"

    def fn(messages: list[dict[str, Any]], **request: Any) -> Any:
        if request.get("tools"):
            assert [t["function"]["name"] for t in request["tools"]] == ["run_python"]
            return {"tool_calls": [{"name": "run_python", "arguments": {"code": code}}]}
        return scripted_role_output(messages, **request)

    llm = ScriptedLLM(fn=fn)
    result = run_workflow(task, (1, 1, 0, 0, 0), None, llm, sr_settings=TINY, run_dir=tmp_path,
                          role_agents={"analyst": {"tools": ["run_python"]}})
    step = next(n for n in _nodes(tmp_path) if n["kind"] == "tools:analyst")
    call = step["tool_results"][0]
    assert call["tool_name"] == "run_python" and call["ok"], call["error"]
    assert call["result_str"].startswith(f"rows {len(task.train.y)} target mean")
    assert any(call["result_str"] in json.dumps(m) for m in llm.requests[1]["messages"])
    assert result.status == "completed" and result.solver_runs >= 1


def test_a_role_agent_is_refused_a_tool_outside_its_menu(task) -> None:
    with pytest.raises(ValueError, match="not among planner's tools"):
        run_workflow(task, (0, 1, 0, 0, 0), None, ScriptedLLM(fn=scripted_role_output), sr_settings=TINY,
                     role_agents={"planner": {"tools": ["run_sr_search"]}})
    with pytest.raises(ValueError, match="unknown role"):
        run_workflow(task, (0, 1, 0, 0, 0), None, ScriptedLLM(fn=scripted_role_output), sr_settings=TINY,
                     role_agents={"critic": {}})


def test_a_dead_model_in_a_tool_step_falls_back_and_the_engine_still_runs(task, tmp_path) -> None:
    from harness.llm.base import LLMError

    llm = ScriptedLLM([LLMError("server gone")] * 3)
    roles = {"planner": RoleAgentConfig(tools=("evaluate_expression",), tool_steps=1)}
    result = run_workflow(task, (0, 1, 0, 0, 0), None, llm, sr_settings=TINY, run_dir=tmp_path, role_agents=roles)
    assert result.solver_runs == 1 and result.best is not None
    planner = next(n for n in _nodes(tmp_path) if n["kind"] == "role:planner")
    assert planner["info"]["fallback"] is True and "server gone" in planner["error"]


def test_an_answer_cut_at_the_clients_deadline_is_named_and_counted_as_seconds(task, tmp_path) -> None:
    from types import SimpleNamespace

    from optimize.records import guard_hits

    llm = ScriptedLLM([{"text": '{"hypotheses": ["x', "finish_reason": "timeout"}])
    result = run_workflow(task, (0, 1, 0, 0, 0), None, llm, sr_settings=TINY, run_dir=tmp_path)
    planner = next(n for n in _nodes(tmp_path) if n["kind"] == "role:planner")
    assert planner["info"]["finish_reasons"] == ["timeout"] and planner["info"]["fallback"] is True
    assert "cut at the client's deadline" in planner["error"]
    roles_only = SimpleNamespace(nodes=[n for n in result.state.nodes if str(n.kind).startswith("role")])
    assert result.solver_runs == 1 and guard_hits(roles_only) == 1  # the engine still ran; seconds decided the plan
