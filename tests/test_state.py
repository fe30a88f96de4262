"""SearchRunState: pool ranking, persistence as it grows, atomic result, load round trip, thread safety."""

from __future__ import annotations

import json
import math
import threading

import numpy as np

from harness.core.candidates import Candidate
from harness.core.context import Budget, BudgetTracker
from harness.core.task import Task
from harness.runtime.nodes import SearchCoordinate
from harness.runtime.state import (
    NODES_FILE,
    RESULT_FILE,
    RUN_FILE,
    SearchRunState,
    messages_digest,
)


def cand(eq: str, nmse: float, complexity: int, **extra) -> Candidate:
    return Candidate(
        expression=eq,
        params=[],
        equation=eq,
        complexity=complexity,
        metrics={"train": {"nmse": nmse}, "valid": {"nmse": nmse, "acc_0.01": 0.0}},
        **extra,
    )


def small_task() -> Task:
    rng = np.random.default_rng(0)
    X = rng.uniform(-2, 2, size=(200, 2))
    return Task.from_arrays(X, 2 * X[:, 0] + X[:, 1] ** 2, name="quad")


def test_pool_ranking_front_and_dedup(tmp_path):
    state = SearchRunState(tmp_path)
    state.add_node("sr", candidates=[cand("x0", 0.5, 1), cand("x0 + x1", 0.2, 3), cand("bad", math.inf, 1)])
    state.add_node("sr", candidates=[cand("x0", 0.9, 1), cand("2*x0 + x1**2", 0.0, 7), cand("big", 0.2, 9)])
    assert [c.equation for c in state.top(3)] == ["2*x0 + x1**2", "x0 + x1", "big"]
    assert state.best().equation == "2*x0 + x1**2"
    assert [c.equation for c in state.front()] == ["x0", "x0 + x1", "2*x0 + x1**2"]
    assert len(state.candidates) == 5  # "x0" again is not added
    assert state.candidates[0].metric() == 0.5  # the first "x0" is kept
    assert state.origin("2*x0 + x1**2") == 1


def test_nodes_jsonl_grows_one_line_per_node(tmp_path):
    state = SearchRunState(tmp_path, task=small_task(), config={"a": 1})
    run = json.loads((tmp_path / RUN_FILE).read_text())
    assert run["status"] == "running" and run["task"]["name"] == "quad" and run["config"] == {"a": 1}
    msgs = [{"role": "user", "content": "hi"}]
    for i in range(3):
        state.add_node("agent_step", at=SearchCoordinate(0, 0, i, 0), messages=msgs, response="x" * 10_000)
        lines = (tmp_path / NODES_FILE).read_text().splitlines()
        assert len(lines) == i + 1  # on disk before the next node exists
    rec = json.loads(lines[-1])
    assert rec["L"] == 2 and rec["messages_digest"] == messages_digest(msgs)
    assert len(rec["response"]) <= 4000


def test_finish_writes_result_atomically_and_load_round_trips(tmp_path):
    tracker = BudgetTracker(Budget(max_llm_calls=10))
    tracker.add_llm(calls=3, tokens=100)
    state = SearchRunState(tmp_path, budget=tracker, task=small_task())
    first = state.add_node("agent_step", at=SearchCoordinate(0, 0, 0, 0), candidates=[cand("x0", 0.5, 1)], prompt_tokens=7)
    state.add_node("sr", parent=first.id, branch="b0", candidates=[cand("x0 + x1", math.inf, 3)], error="boom")
    assert state.add_candidates([cand("x1", 0.1, 1), cand("x0", 0.5, 1)]) == 1  # a tool pools early ...
    assert state.best().equation == "x1" and state.origin("x1") is None
    state.add_node("agent_step", parent=first.id, candidates=[cand("x1", 0.1, 1)])  # ... its node persists them
    assert state.origin("x1") == 2

    result = state.finish("completed")
    assert not list(tmp_path.glob("*.tmp"))
    on_disk = json.loads((tmp_path / RESULT_FILE).read_text())
    assert on_disk["status"] == result["status"] == "completed"
    assert on_disk["best"]["equation"] == "x1"
    assert on_disk["metrics"]["valid"]["nmse"] == 0.1
    assert on_disk["counts"]["nodes"] == 3 and on_disk["counts"]["errors"] == 1
    assert on_disk["budget_left"]["llm_calls"] == 7
    assert json.loads((tmp_path / RUN_FILE).read_text())["status"] == "completed"

    loaded = SearchRunState.load(tmp_path)
    assert [n.kind for n in loaded.nodes] == ["agent_step", "sr", "agent_step"]
    assert loaded.nodes[1].parent == first.id and loaded.nodes[1].error == "boom"
    assert loaded.nodes[0].prompt_tokens == 7
    assert {c.equation for c in loaded.candidates} == {"x0", "x0 + x1", "x1"}
    assert loaded.best().equation == "x1" and loaded.status == "completed"
    assert math.isinf(next(c for c in loaded.candidates if c.equation == "x0 + x1").metric())


def test_load_skips_a_torn_last_line(tmp_path):
    state = SearchRunState(tmp_path)
    state.add_node("sr", candidates=[cand("x0", 0.5, 1)])
    with open(tmp_path / NODES_FILE, "a") as fh:
        fh.write('{"id": 1, "kind": "sr", "candidates": [')  # a crash mid-write
    loaded = SearchRunState.load(tmp_path)
    assert len(loaded.nodes) == 1 and loaded.best().equation == "x0"
    assert loaded.status == "running"  # run.json from the start: the run never finished


def test_progress_summary_is_bounded_and_informative():
    tracker = BudgetTracker(Budget(max_llm_calls=5, max_seconds=100))
    state = SearchRunState(None, budget=tracker)
    assert "No scored equation" in state.progress_summary()
    state.add_node(
        "agent_step",
        tool_results=[{"tool_name": "run_sr_search", "ok": True}],
        candidates=[cand("x0*" * 100 + "x1", 0.01, 201), cand("x0", 0.5, 1)],
    )
    text = state.progress_summary(max_chars=800)
    assert len(text) <= 800
    assert "nmse=0.01" in text and "run_sr_search x1" in text and "llm_calls=5" in text
    assert len(state.progress_summary(max_chars=120)) <= 120


def test_concurrent_add_node_is_consistent(tmp_path):
    state = SearchRunState(tmp_path)

    def work(b: int) -> None:
        for i in range(20):
            state.add_node("agent_step", branch=f"b{b}", candidates=[cand(f"x0 + {b * 100 + i}", 0.1, 3)])

    threads = [threading.Thread(target=work, args=(b,)) for b in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    lines = (tmp_path / NODES_FILE).read_text().splitlines()
    assert len(lines) == 80 and sorted(json.loads(x)["id"] for x in lines) == list(range(80))
    assert len(state.candidates) == 80


def test_a_new_run_in_an_old_folder_keeps_the_old_trace_aside(tmp_path):
    SearchRunState(tmp_path).add_node("sr")
    SearchRunState(tmp_path).add_node("agent_step")
    assert [json.loads(x)["kind"] for x in (tmp_path / NODES_FILE).read_text().splitlines()] == ["agent_step"]
    assert len(list(tmp_path.glob("nodes.*.jsonl"))) == 1
