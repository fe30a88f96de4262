"""SRAgent through every branch of the R-C-L-K loop, with the scripted model and small fake tools."""

from __future__ import annotations

import dataclasses
import itertools
import json
import threading

import numpy as np
import pytest

from harness.core.candidates import Candidate
from harness.core.context import AgentContext, Budget, BudgetTracker, FitSettings
from harness.core.task import Task
from harness.llm.base import LLMError
from harness.runtime.agent import AgentConfig, SRAgent
from harness.runtime.state import NODES_FILE, RESULT_FILE, RUN_FILE, SearchRunState
from harness.tools.base import TOOLS, BaseTool, ToolRunAbort
from tests.doubles import SCRIPTED, ScriptedLLM


def make_cand(equation: str, nmse: float) -> Candidate:
    return Candidate(
        expression=equation,
        params=[],
        equation=equation,
        complexity=len(equation),
        metrics={"train": {"nmse": nmse}, "valid": {"nmse": nmse, "acc_0.01": float(nmse == 0.0)}},
        source="test",
    )


@TOOLS.register
class ProposeTool(BaseTool):
    name = "test_propose"

    def execute(self, equation: str, nmse: float = 0.5) -> dict:
        """Record an equation with a given validation error (test double).

        Args:
            equation: the equation text.
            nmse: its validation NMSE.
        """
        return {"candidates": [make_cand(equation, nmse)]}


@TOOLS.register
class BoomTool(BaseTool):
    name = "test_boom"

    def execute(self) -> str:
        """Always fails."""
        raise RuntimeError("kaboom")


@TOOLS.register
class AbortTool(BaseTool):
    name = "test_abort"

    def execute(self) -> str:
        """Stops the run."""
        raise ToolRunAbort("operator pressed stop")


TEST_TOOLS = ["test_propose", "test_boom", "test_abort"]


def propose(equation: str, nmse: float = 0.5) -> dict:
    return {"tool_calls": [{"name": "test_propose", "arguments": {"equation": equation, "nmse": nmse}}]}


def call(name: str, **arguments) -> dict:
    return {"tool_calls": [{"name": name, "arguments": arguments}]}


@pytest.fixture(scope="module")
def task() -> Task:
    rng = np.random.default_rng(0)
    X = rng.uniform(-2, 2, size=(200, 2))
    return Task.from_arrays(X, 2 * X[:, 0] + X[:, 1] ** 2, name="quad")


def make_agent(task, llm, tmp_path, budget: Budget | None = None, **cfg) -> SRAgent:
    context = AgentContext(task=task, fit=FitSettings(n_starts=1, max_seconds=1.0), budget=BudgetTracker(budget))
    cfg.setdefault("tools", TEST_TOOLS)
    return SRAgent(llm, context, AgentConfig(**cfg), run_dir=tmp_path / "run")


def lines(run_dir) -> list[dict]:
    return [json.loads(x) for x in (run_dir / NODES_FILE).read_text().splitlines()]


def last_user(request: dict) -> str:
    return next(m["content"] for m in reversed(request["messages"]) if m["role"] == "user")


def test_no_tool_call_is_recorded_and_nudged(task, tmp_path):
    llm = ScriptedLLM(["I think y is linear in x0.", propose("x0 + x1", 0.2)])
    result = make_agent(task, llm, tmp_path, L=2).run()
    assert result.status == "completed" and result.responses == 2
    nodes = lines(result.run_dir)
    assert nodes[0]["tool_results"] == [] and "linear" in nodes[0]["response"]
    assert "You did not call a tool" in last_user(llm.requests[1])
    assert result.best.equation == "x0 + x1"


def test_bad_json_is_a_node_error_and_the_run_continues(task, tmp_path):
    bad = '{"tool": "test_propose", "arguments": {"equation": "x0" "nmse": }}'
    good = '{"tool": "test_propose", "arguments": {"equation": "x0*x1", "nmse": 0.3}}'
    llm = ScriptedLLM([bad, good])
    result = make_agent(task, llm, tmp_path, L=2, parser="json").run()
    nodes = lines(result.run_dir)
    assert nodes[0]["error"].startswith("parse error") and nodes[0]["tool_results"] == []
    assert "could not be read as a tool call" in last_user(llm.requests[1])
    assert "test_propose" in llm.requests[0]["messages"][0]["content"]  # JSON protocol: tools in the system prompt
    assert result.status == "completed" and result.best.equation == "x0*x1"


def test_a_raising_tool_goes_back_to_the_model(task, tmp_path):
    llm = ScriptedLLM([call("test_boom"), "done"])
    result = make_agent(task, llm, tmp_path, L=2).run()
    record = lines(result.run_dir)[0]["tool_results"][0]
    assert record["ok"] is False and "kaboom" in record["error"]
    msgs = llm.requests[1]["messages"]
    assistant = next(m for m in msgs if m["role"] == "assistant")
    tool_msg = next(m for m in msgs if m["role"] == "tool")
    assert tool_msg["tool_call_id"] == assistant["tool_calls"][0]["id"]
    assert "RuntimeError: kaboom" in tool_msg["content"]
    assert result.status == "completed"


def test_unknown_tool_and_too_many_calls_are_failed_results(task, tmp_path):
    proposals = [propose(f"x0 + {i}")["tool_calls"][0] for i in range(3)]
    many = {"tool_calls": [{"name": "nope", "arguments": {}}] + proposals}
    llm = ScriptedLLM([many])
    result = make_agent(task, llm, tmp_path, L=1, max_tool_calls_per_response=2).run()
    records = lines(result.run_dir)[0]["tool_results"]
    assert [r["ok"] for r in records] == [False, True, False, False]
    assert "unknown tool" in records[0]["error"] and "at most 2" in records[2]["error"]


def test_tool_run_abort_stops_cleanly(task, tmp_path):
    llm = ScriptedLLM([propose("x0", 0.4), call("test_abort"), propose("x1")])
    result = make_agent(task, llm, tmp_path, L=3).run()
    assert result.status == "cancelled" and "operator pressed stop" in result.error
    assert len(llm.requests) == 2 and result.best.equation == "x0"
    saved = json.loads((result.run_dir / RESULT_FILE).read_text())
    assert saved["status"] == "cancelled" and saved["best"]["equation"] == "x0"


def test_budget_exhausted_stops_with_status(task, tmp_path):
    llm = ScriptedLLM([propose(f"x0 + {i}") for i in range(10)])
    result = make_agent(task, llm, tmp_path, budget=Budget(max_llm_calls=2), R=2, L=5).run()
    assert result.status == "budget_exhausted" and result.responses == 2
    assert "LLM call budget" in result.error
    assert json.loads((result.run_dir / RUN_FILE).read_text())["status"] == "budget_exhausted"


def test_target_reached_stops_early(task, tmp_path):
    llm = ScriptedLLM([propose("2*x0 + x1**2", 0.0), propose("x0")])
    result = make_agent(task, llm, tmp_path, L=3, R=2).run()
    assert result.status == "target_reached" and result.responses == 1
    assert result.best.metrics["valid"]["acc_0.01"] == 1.0


def test_restart_is_seeded_with_the_top_candidates(task, tmp_path):
    llm = ScriptedLLM([propose("x0 + x1", 0.1), propose("x0", 0.6), "restart two", "more"])
    result = make_agent(task, llm, tmp_path, R=2, L=2, restart_top_k=1).run()
    assert result.status == "completed" and len(llm.requests) == 4
    first_r0, first_r1 = llm.requests[0]["messages"], llm.requests[2]["messages"]
    assert "x0 + x1" not in first_r0[1]["content"]
    assert len(first_r1) == 2 and "earlier attempts" in first_r1[1]["content"]
    assert "x0 + x1" in first_r1[1]["content"] and "- x0  [" not in first_r1[1]["content"]  # top 1 only


@pytest.mark.parametrize("shape", [(1, 1, 1, 1), (2, 2, 2, 2), (1, 3, 2, 1), (2, 1, 3, 2)])
def test_response_count_is_bounded_by_rclk(task, tmp_path, shape):
    R, C, L, K = shape
    counter = itertools.count()
    lock = threading.Lock()

    def fn(messages, sample_index=0, **request):
        with lock:
            i = next(counter)
        return propose(f"x0 + {i}", 0.5 + i)

    llm = ScriptedLLM(fn=fn)
    result = make_agent(task, llm, tmp_path, R=R, C=C, L=L, K=K).run()
    assert result.status == "completed"
    assert result.responses == R * C * L * K == llm.usage.responses
    assert len(llm.requests) == R * C * L and all(r["n"] == K for r in llm.requests)  # K samples in one call
    nodes = lines(result.run_dir)
    assert len(nodes) == R * C * L * K == result.counts["nodes"]
    expected = set(itertools.product(range(R), range(C), range(L), range(K)))
    assert {(n["R"], n["C"], n["L"], n["K"]) for n in nodes} == expected
    assert result.counts["candidates"] == R * C * L * K  # every sample executed and recorded


def test_fewer_samples_than_asked_are_topped_up(task, tmp_path):
    class OneAtATime(ScriptedLLM):
        def _complete(self, request):
            return super()._complete(dataclasses.replace(request, n=1))

    llm = OneAtATime(fn=lambda messages, sample_index=0, **r: "no tools")
    result = make_agent(task, llm, tmp_path, L=2, K=3).run()
    assert result.responses == 6 and len(llm.requests) == 6


def test_best_sample_continues_the_conversation(task, tmp_path):
    def fn(messages, sample_index=0, **request):
        return [propose("x0", 0.5), propose("x0 + x1", 0.01), "no tool"][sample_index]

    llm = ScriptedLLM(fn=fn)
    result = make_agent(task, llm, tmp_path, L=2, K=3).run()
    assert result.responses == 6
    history = llm.requests[1]["messages"]
    calls = [tc for m in history if m["role"] == "assistant" for tc in m.get("tool_calls", [])]
    assert [json.loads(tc["function"]["arguments"])["equation"] for tc in calls] == ["x0 + x1"]
    nodes = lines(result.run_dir)
    chosen = next(n for n in nodes if n["L"] == 0 and n["K"] == 1)
    assert all(n["parent"] == chosen["id"] for n in nodes if n["L"] == 1)
    assert "x0 + x1" in last_user(llm.requests[1])  # the progress summary names the best equation


def test_branches_are_independent_copies(task, tmp_path):
    def fn(messages, sample_index=0, **request):
        return propose(f"x0 + {len(messages)}", 0.5)

    llm = ScriptedLLM(fn=fn)
    result = make_agent(task, llm, tmp_path, C=2, L=2, branch_workers=2).run()
    assert result.status == "completed" and result.responses == 4
    assert sorted(len(r["messages"]) for r in llm.requests) == [2, 2, 5, 5]  # no branch sees the other's turns
    assert {n["branch"] for n in lines(result.run_dir)} == {"r0c0", "r0c1"}


def test_dead_llm_server_ends_the_run_cleanly(task, tmp_path):
    llm = ScriptedLLM([propose("x0 + x1", 0.2), LLMError("connection refused after 4 tries")])
    result = make_agent(task, llm, tmp_path, L=3).run()
    assert result.status == "failed_llm" and "connection refused" in result.error
    assert result.best.equation == "x0 + x1"  # the work done before is kept
    nodes = lines(result.run_dir)
    assert len(nodes) == 2 and "LLMError" in nodes[1]["error"]
    saved = json.loads((result.run_dir / RESULT_FILE).read_text())
    assert saved["status"] == "failed_llm" and saved["best"]["equation"] == "x0 + x1"
    assert json.loads((result.run_dir / RUN_FILE).read_text())["ended"] is not None

    loaded = SearchRunState.load(result.run_dir)
    assert len(loaded.nodes) == 2 and loaded.best().equation == "x0 + x1" and loaded.status == "failed_llm"
    assert loaded.nodes[0].messages_digest and loaded.nodes[0].tool_results[0]["tool_name"] == "test_propose"


def test_dead_llm_from_the_start(task, tmp_path):
    class Dead(ScriptedLLM):
        def _complete(self, request):
            raise LLMError("http://localhost:8000: failed after 4 tries (connection refused)")

    result = make_agent(task, Dead(["unused"]), tmp_path, R=2, L=2).run()
    assert result.status == "failed_llm" and result.best is None and result.responses == 0
    assert json.loads((result.run_dir / RESULT_FILE).read_text())["best"] is None


def test_cli_agent_with_scripted_model_writes_the_run_folder(tmp_path, capsys):
    from harness.app.cli import main

    rng = np.random.default_rng(1)
    X = rng.uniform(-2, 2, size=(200, 2))
    rows = ["x0,x1,y"] + [f"{a},{b},{2 * a + b * b}" for a, b in X]
    (tmp_path / "data.csv").write_text("\n".join(rows) + "\n")
    script = "{responses:[{tool_calls:[{name:test_propose,arguments:{equation:x0,nmse:0.3}}]},'no tools'],cycle:true}"
    out = tmp_path / "run"
    args = [f"data={tmp_path / 'data.csv'}", "target=y", f"llm.provider={SCRIPTED}", f"llm.extra={script}"]
    args += [f"agent.tools=[{','.join(TEST_TOOLS)}]", "agent.L=2", "agent.K=2", f"out={out}"]
    assert main(["agent", *args]) == 0
    printed = capsys.readouterr().out
    assert "best" in printed and "x0" in printed and "completed" in printed
    result = json.loads((out / RESULT_FILE).read_text())
    assert result["status"] == "completed" and result["best"]["equation"] == "x0"
    assert len(lines(out)) == 4
    run = json.loads((out / RUN_FILE).read_text())
    assert run["config"]["cli"]["agent"]["K"] == 2 and run["task"]["name"] == "data"

    assert main(["agent", f"data={tmp_path / 'missing.csv'}", f"out={tmp_path / 'r2'}"]) == 2
    assert main(["nosuchcommand"]) == 2


def test_cli_agent_takes_the_llm_group_like_every_command(tmp_path):
    """`agent llm=openai` selects conf/llm/openai.yaml (it used to replace the inline llm block with a string)."""
    import socket

    from harness.app.cli import main

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    (tmp_path / "data.csv").write_text("x0,y\n" + "".join(f"{i},{2 * i}\n" for i in range(40)))
    out = tmp_path / "run"
    args = [f"data={tmp_path / 'data.csv'}", "llm=openai", f"llm.base_url=http://127.0.0.1:{port}/v1",
            "llm.max_retries=0", "llm.timeout_s=5", "agent.L=1", f"out={out}"]
    assert main(["agent", *args]) == 1  # a dead server is a recorded failure (exit code 1), not a crash
    result = json.loads((out / RESULT_FILE).read_text())
    assert result["status"] == "failed_llm"
    run = json.loads((out / RUN_FILE).read_text())
    assert run["config"]["cli"]["llm"]["provider"] == "openai" and run["config"]["cli"]["llm"]["model"] == "gpt-4o-mini"


@TOOLS.register
class SpentTool(BaseTool):
    name = "test_spent"

    def execute(self) -> str:
        """A solver that finds the budget spent."""
        from harness.core.context import BudgetExhausted

        raise BudgetExhausted("only 0.5s of the time budget left")


def test_a_solver_refusing_for_budget_stops_the_run(task, tmp_path):
    llm = ScriptedLLM([call("test_spent"), "unused"])
    result = make_agent(task, llm, tmp_path, L=2, tools=["test_spent"]).run()
    assert result.status == "budget_exhausted" and "0.5s" in result.error and result.responses == 1


def test_real_evaluate_expression_tool_reaches_the_target(task, tmp_path):
    llm = ScriptedLLM(
        [call("evaluate_expression", expression="c0*x0 + x1"), call("evaluate_expression", expression="c0*x0 + x1**2")]
    )
    agent = make_agent(task, llm, tmp_path, L=3, tools=["evaluate_expression"])
    result = agent.run()
    assert result.status == "target_reached" and result.responses == 2
    assert result.best.expression == "c0*x0 + x1**2" and abs(result.best.params[0] - 2) < 1e-6
    assert result.best.metrics["valid"]["nmse"] < 1e-10 and "test_id" not in result.best.metrics
    assert "valid NMSE" in next(m for m in llm.requests[1]["messages"] if m["role"] == "tool")["content"]
    nodes = lines(result.run_dir)
    assert [len(n["candidates"]) for n in nodes] == [1, 1]
    assert SearchRunState.load(result.run_dir).best().equation == result.best.equation


def test_default_tools_are_the_sr_and_analysis_tools(task, tmp_path):
    agent = make_agent(task, ScriptedLLM(["x"]), tmp_path, tools=None)
    assert {"run_sr_search", "evaluate_expression", "correlations", "residual_diagnostics"} <= set(agent.tools)
    offered = [t["function"]["name"] for t in agent._tool_kwargs["tools"]]
    assert offered == list(agent.tools)


def test_tool_choice_required_reaches_the_model(task, tmp_path):
    llm = ScriptedLLM([call("test_spent"), "unused"])
    make_agent(task, llm, tmp_path, L=1, tools=["test_spent"], tool_choice="required").run()
    assert llm.requests[0]["tool_choice"] == "required" and llm.requests[0]["tools"]
    plain = ScriptedLLM([call("test_spent"), "unused"])
    make_agent(task, plain, tmp_path / "b", L=1, tools=["test_spent"]).run()
    assert plain.requests[0].get("tool_choice") is None  # auto unless asked
