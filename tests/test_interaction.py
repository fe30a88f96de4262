"""The interactive runtime: queued messages reach the next step, pause / resume / stop at safe boundaries, the
agent waits for the user after a turn without a tool call, and the workflow's next role prompt carries guidance."""

from __future__ import annotations

import io
import json
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from harness.app.cli import main as cli
from harness.core.context import AgentContext, Budget, BudgetTracker, RunStatus
from harness.core.task import Task
from harness.runtime.agent import AgentConfig, SRAgent
from harness.runtime.interaction import RunControl
from tests.doubles import SCRIPTED, ScriptedLLM, detect_role, scripted_role_output

TINY_SR = {"time_budget": 1, "population_size": 30, "generations": 5, "max_length": 15}
EVAL = {"tool_calls": [{"name": "evaluate_expression", "arguments": {"expression": "c0*x0"}}]}


def _task() -> Task:
    rng = np.random.default_rng(0)
    X = rng.uniform(-2, 2, (80, 1))
    return Task.from_arrays(X, 3 * X[:, 0], name="line", input_names=["x0"])


def _agent(llm: ScriptedLLM, tmp_path: Path, control: RunControl, **config: object) -> SRAgent:
    ctx = AgentContext(task=_task(), workspace=tmp_path, budget=BudgetTracker(Budget()))
    cfg = AgentConfig(tools=["evaluate_expression"], target_nmse=None, **config)
    return SRAgent(llm, ctx, cfg, run_dir=tmp_path, control=control)


def _nodes(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "nodes.jsonl").read_text().splitlines()]


def test_control_queue_pause_and_two_stops() -> None:
    control, recorded, cancel = RunControl(), [], threading.Event()
    control.pause()  # asked before the run started: recorded once it binds
    control.bind(cancel, lambda kind, **f: recorded.append((str(kind), f["response"])))
    assert recorded == [("control", "pause")]
    control.send("try a sine")
    parked = threading.Thread(target=lambda: recorded.append(("got", control.checkpoint("step"))))
    parked.start()
    time.sleep(0.3)
    assert parked.is_alive() and control.phase == "paused"  # held at the boundary, message not yet delivered
    control.resume()
    parked.join(2)
    assert recorded[-2:] == [("user_message", "try a sine"), ("got", ["try a sine"])]
    with pytest.raises(ValueError):
        control.send("   ")
    assert control.stop() == 1 and control.stop_requested and not cancel.is_set()
    assert control.stop() == 2 and cancel.is_set()  # the second stop interrupts the running tool / SR run


def test_interactive_agent_waits_for_the_user_after_a_turn_without_tool_call(tmp_path: Path) -> None:
    llm = ScriptedLLM(["What should I try first?", EVAL, "I am done."])
    control = RunControl()
    agent = _agent(llm, tmp_path, control, L=2, interactive=True)

    def user() -> None:
        while control.phase != "waiting":
            time.sleep(0.05)
        control.send("fit c0*x0")
        while len(llm.requests) < 3 or control.phase != "waiting":
            time.sleep(0.05)
        control.end_input()  # no more input: the run ends as a non-interactive one would

    helper = threading.Thread(target=user)
    helper.start()
    result = agent.run()
    helper.join(5)
    assert result.status == RunStatus.COMPLETED and len(llm.requests) == 3  # the user's turn is not one of L
    assert "Message from the user: fit c0*x0" in llm.requests[1]["messages"][-1]["content"]
    kinds = [n["kind"] for n in _nodes(tmp_path)]
    assert kinds == ["agent_step", "user_message", "agent_step", "agent_step"]


def test_message_sent_mid_step_reaches_the_next_step_and_a_stop_ends_the_run(tmp_path: Path) -> None:
    control = RunControl()

    def model(messages: list, **request: object) -> dict:
        if len(llm.requests) == 1:
            control.send("look at x0 only")  # the user types while the model works
        if len(llm.requests) == 2:
            control.stop()
        return EVAL

    llm = ScriptedLLM(fn=model)
    result = _agent(llm, tmp_path, control, L=5).run()
    assert "look at x0 only" not in json.dumps(llm.requests[0]["messages"])
    assert "Message from the user: look at x0 only" in llm.requests[1]["messages"][-1]["content"]
    assert result.status == RunStatus.CANCELLED and result.error == "stopped by the user"
    assert len(llm.requests) == 2  # the step that was running finished; no new one started
    kinds = [n["kind"] for n in _nodes(tmp_path)]
    assert kinds == ["agent_step", "user_message", "control", "agent_step"]


def test_workflow_guidance_reaches_the_next_role_prompt(tmp_path: Path) -> None:
    from workflows.runner import run_workflow

    control = RunControl()

    def model(messages: list, **request: object) -> object:
        if detect_role(messages, request.get("response_format")) == "planner":
            control.send("the law has a sine of x0")  # arrives while the planner answers
        return scripted_role_output(messages, **request)

    llm = ScriptedLLM(fn=model)
    result = run_workflow(_task(), (0, 1, 1, 0, 0), None, llm, sr_settings={**TINY_SR, "unguided_run": False},
                          run_dir=tmp_path, control=control)
    roles = [detect_role(r["messages"], r.get("response_format")) for r in llm.requests]
    assert roles == ["planner", "diagnoser", "repairer"]
    texts = [json.dumps(r["messages"]) for r in llm.requests]
    assert "the law has a sine of x0" not in texts[0]
    assert all("Guidance from the user" in t and "the law has a sine of x0" in t for t in texts[1:])
    assert result.status == RunStatus.COMPLETED
    nodes = _nodes(tmp_path)
    message = next(n for n in nodes if n["kind"] == "user_message")
    assert message["response"] == "the law has a sine of x0" and message["info"]["delivered_at"] == "sr run"


def test_agent_cli_reads_messages_from_stdin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(0)
    x = rng.uniform(-2, 2, 60)
    (tmp_path / "data.csv").write_text("x0,y\n" + "".join(f"{a},{3 * a}\n" for a in x))
    script = "{responses:['Which form?',{tool_calls:[{name:evaluate_expression,arguments:{expression:'c0*x0'}}]}]}"
    monkeypatch.setattr("sys.stdin", io.StringIO("try c0*x0\n"))
    out = tmp_path / "run"
    assert cli(["agent", f"data={tmp_path / 'data.csv'}", f"llm.provider={SCRIPTED}", f"llm.extra={script}",
                "agent.tools=[evaluate_expression]", "agent.L=1", "agent.interactive=true", f"out={out}"]) == 0
    nodes = _nodes(out)  # the line may arrive before the first step or while the model waits: both deliver it
    [message] = [n for n in nodes if n["kind"] == "user_message"]
    assert message["response"] == "try c0*x0" and message["info"]["delivered_at"]


def test_time_held_at_a_boundary_is_not_spent() -> None:
    budget = BudgetTracker(Budget(max_seconds=100))
    control = RunControl()
    control.bind(threading.Event(), lambda kind, **f: None, budget)
    control.pause()
    parked = [threading.Thread(target=control.checkpoint) for _ in range(2)]  # two branches held at once
    for t in parked:
        t.start()
    time.sleep(1.0)
    control.resume()
    for t in parked:
        t.join(2)
    # about 1 s held, given back once: not kept (elapsed ~ +1) and not given back twice (elapsed ~ -1)
    assert -0.5 < budget.elapsed() < 0.5
