"""The benchmark runner: per-task records appended as they finish, resume, failures recorded as misses."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import benchmarks
from benchmarks.runner import (
    domain_markdown,
    load_records,
    markdown_table,
    results_table,
    run_benchmark,
    summary_row,
)
from harness.app.artifact import FrozenHarness
from tests.doubles import SCRIPTED

TINY = {"time_budget": 1, "population_size": 20, "generations": 3, "max_length": 15,
        "unguided_run": False}  # the engine-only run is tested on its own


def _harness() -> FrozenHarness:
    return FrozenHarness.create(FrozenHarness.default().prompts, (0, 1, 0, 0, 0), sr_settings=TINY)


def test_run_records_resume_and_table(tmp_path: Path) -> None:
    tasks = benchmarks.load_suite("synthetic", n_per_domain=1, domains=["chemistry", "materials"],
                                  n_train=120, n_test=60, n_ood=60)
    seen: list[str] = []
    table = run_benchmark(_harness(), tasks, tmp_path, llm={"provider": SCRIPTED},
                          on_record=lambda r: seen.append(r["task"]))
    assert seen == [t.name for t in tasks]
    records = load_records(tmp_path / "results.jsonl")
    assert [r["task"] for r in records] == seen
    assert all(r["llm_calls"] == 1 and r["solver_runs"] >= 1 for r in records)
    assert set(table.columns) >= {"acc_0.01_id", "acc_0.001_ood", "nmse_id", "llm_calls", "seconds"}
    # a rerun over the same folder solves nothing again
    seen.clear()
    again = run_benchmark(_harness(), tasks, tmp_path, llm={"provider": SCRIPTED},
                          on_record=lambda r: seen.append(r["task"]))
    assert seen == [] and len(again) == len(tasks)
    text = markdown_table(again)
    assert "**mean**" in text and tasks[0].name in text and " sa " in text.splitlines()[0]
    # symbolic accuracy: every synthetic task has a ground truth, so every record has a verdict and sa is 0 or 1
    assert all(isinstance(r["symbolic"], dict) and "equivalent" in r["symbolic"] for r in records)
    assert set(again["sa"]) <= {0.0, 1.0}
    per_domain = domain_markdown(again)
    assert "| all |" in per_domain and "chemistry" in per_domain and "sa" in per_domain.splitlines()[0]


def test_symbolic_accuracy_column_from_records() -> None:
    truth = "-0.848*A + 0.137*A**2*exp(-0.492*t)"
    records = [
        {"task": "a", "domain": "chemistry", "ground_truth": truth, "symbolic": {"equivalent": True}, "metrics": {}},
        {"task": "b", "domain": "chemistry", "ground_truth": truth, "symbolic": {"equivalent": False}, "metrics": {}},
        {"task": "c", "domain": "chemistry", "ground_truth": truth, "status": "error", "metrics": {}},  # a miss
        {"task": "d", "domain": "physics", "ground_truth": None, "metrics": {}},  # no truth: not counted
    ]
    table = results_table(records)
    assert table["sa"].tolist()[:3] == [1.0, 0.0, 0.0] and table["sa"].isna().tolist() == [False] * 3 + [True]
    assert summary_row(table)["sa"] == pytest.approx(1 / 3)


def test_failed_task_is_a_recorded_miss(tmp_path: Path) -> None:
    tasks = benchmarks.load_suite("synthetic", n_per_domain=1, domains=["biology"], n_train=80, n_test=40, n_ood=40)

    class DeadLLM:
        def complete(self, *args, **kwargs):
            raise ConnectionError("server gone")

    class Exploding(FrozenHarness):
        def solve(self, task, **kwargs):  # type: ignore[override]
            raise RuntimeError("engine crashed")

    harness = Exploding.create(FrozenHarness.default().prompts, (0, 1, 0, 0, 0), sr_settings=TINY)
    table = run_benchmark(harness, tasks, tmp_path, llm=DeadLLM())
    record = json.loads((tmp_path / "results.jsonl").read_text().splitlines()[0])
    assert record["status"] == "error" and "engine crashed" in record["error"]
    assert table["acc_0.01_id"].tolist() == [0.0]
    assert summary_row(table)["acc_0.01_id"] == 0.0
