"""The evolution channel (LLM-SR's loop beside the guided SR runs): rounds only while a guided run is going and
only when they fit before it ends, proposals fitted into the pool, counts exact, a failing model contained."""

from __future__ import annotations

import json
import threading
import time

import pytest

import benchmarks
from harness.llm import LLMError
from harness.llm.failures import seconds_left
from tests.doubles import ScriptedLLM, scripted_role_output
from workflows.run_core import GuidedWindow
from workflows.params import WorkflowParams, expected_llm_calls
from workflows.prompting import task_frame
from workflows.runner import run_workflow

GOOD = "-c0*A + c1*A**2*exp(-c2*t)"
SETTINGS = {"time_budget": 2, "population_size": 20, "generations": 100_000, "max_length": 15,
            "unguided_run": True}
W = (0, 1, 0, 0, 0)


@pytest.fixture(scope="module")
def task():
    return benchmarks.load_suite("synthetic", names=["chem_react_synth_00"], n_train=60, n_test=30, n_ood=30)[0]


def _model(equations=GOOD, delay: float = 0.0, fail: bool = False) -> ScriptedLLM:
    """Role JSON for the roles; for the evolution's requests (schema "equations") the given skeletons."""

    caps: list[float] = []

    def fn(messages, **request):
        schema = ((request.get("response_format") or {}).get("json_schema") or {}).get("name")
        if schema != "equations":
            return scripted_role_output(messages, **request)
        caps.append(seconds_left(1e9))  # the cap this call runs under
        time.sleep(delay)
        if fail:
            return LLMError("server went away")
        exprs = [equations] if isinstance(equations, str) else list(equations)
        return json.dumps({"equations": [{"expression": e, "reason": "from the best"} for e in exprs]})

    llm = ScriptedLLM(fn=fn)
    llm.caps = caps
    return llm


def _rounds(result) -> list:
    return [n for n in result.state.nodes if n.kind == "evolve"]


def test_rounds_run_beside_the_guided_run_and_join_the_pool(task) -> None:
    llm = _model(equations=[GOOD, "c0*A + c1", "c0*import_os"])
    result = run_workflow(task, W, None, llm, sr_settings={**SETTINGS, "evolve_rounds": 3}, seed=1)
    rounds = _rounds(result)
    assert [r.info["round"] for r in rounds] == [1, 2, 3]
    # one counter: the planner's call plus one call per round (no repair calls in the channel)
    assert result.llm_calls == expected_llm_calls(WorkflowParams.from_tuple(W)) + 3
    ids = {n.id: n for n in result.state.nodes}
    guided = next(n for n in result.state.nodes if n.kind == "sr" and n.info["step"] == "initial")
    planner = next(n for n in result.state.nodes if n.kind == "role:planner")
    assert all(r.id > planner.id for r in rounds)  # never while the Planner thinks
    assert rounds[0].relation == "evolves" and rounds[0].branch == "evolution"
    assert ids[rounds[0].parent].kind == "sr" and rounds[1].parent == rounds[0].id
    # the model saw the pool's best (the unguided run's front), then its own fits and rejections
    prompts = [r for r in llm.requests if (r["response_format"] or {}).get("json_schema", {}).get("name") == "equations"]
    first = prompts[0]["messages"][-1]["content"]
    assert "Best equations so far" in first and "Evolve the best equations" in first
    assert "import_os" in prompts[1]["messages"][-1]["content"]  # the rejection reached the next round
    # the roles' task frame is the system message (a prefix the model has read), and each call is capped at
    # the guided run's end
    assert all(r["messages"][0]["content"] == task_frame(task) for r in prompts)
    assert len(llm.caps) == 3 and all(0 < c <= SETTINGS["time_budget"] for c in llm.caps)
    fitted = {c["equation"] for r in rounds for c in r.candidates}
    assert fitted and fitted <= {c.equation for c in result.candidates}
    assert any(c.source == "llm" for c in result.candidates)
    assert guided.id < max(n.id for n in result.state.nodes if n.kind == "combine")


def test_a_round_that_would_outlast_the_guided_run_is_not_started(task) -> None:
    """Rounds of ~1.5 s beside a 2 s guided run: the second would end after it, so only one runs and the solve
    is not lengthened by the channel."""
    result = run_workflow(task, W, None, _model(delay=1.5), sr_settings={**SETTINGS, "evolve_rounds": 5}, seed=1)
    assert len(_rounds(result)) == 1
    plain = run_workflow(task, W, None, _model(delay=1.5), sr_settings=SETTINGS, seed=1)
    assert not _rounds(plain) and plain.llm_calls == expected_llm_calls(WorkflowParams.from_tuple(W))


def test_a_failing_model_stops_the_channel_not_the_run(task) -> None:
    result = run_workflow(task, W, None, _model(fail=True), sr_settings={**SETTINGS, "evolve_rounds": 5}, seed=1)
    rounds = _rounds(result)
    assert len(rounds) == 2 and all("server went away" in (r.error or "") for r in rounds)
    assert any("evolution stopped after 2 failed rounds" in e for e in result.errors)
    assert result.best is not None and result.status.value == "completed"


def test_the_window_waits_for_a_guided_run_and_ends_when_closed() -> None:
    window = GuidedWindow()
    got: list = []
    waiter = threading.Thread(target=lambda: got.append(window.seconds_left()))
    waiter.start()
    time.sleep(0.1)
    assert not got  # nothing runs yet: the channel waits
    token = window.enter(10)
    waiter.join(2)
    assert got and 9 < got[0] <= 10
    window.leave(token)
    window.close()
    assert window.seconds_left() is None
