"""The benchmark runner: per-task records appended as they finish, resume, failures recorded as misses."""

from __future__ import annotations

import json
from pathlib import Path

import benchmarks
from benchmarks.runner import load_records, markdown_table, run_benchmark, summary_row
from harness.artifact import FrozenHarness

TINY = {"time_budget": 1, "population_size": 20, "generations": 3, "max_length": 15}


def _harness() -> FrozenHarness:
    return FrozenHarness.create(FrozenHarness.default().prompts, (0, 1, 0, 0, 0), sr_settings=TINY)


def test_run_records_resume_and_table(tmp_path: Path) -> None:
    tasks = benchmarks.load_suite("synthetic", n_per_domain=1, domains=["chemistry", "materials"],
                                  n_train=120, n_test=60, n_ood=60)
    seen: list[str] = []
    table = run_benchmark(_harness(), tasks, tmp_path, llm={"provider": "scripted"},
                          on_record=lambda r: seen.append(r["task"]))
    assert seen == [t.name for t in tasks]
    records = load_records(tmp_path / "results.jsonl")
    assert [r["task"] for r in records] == seen
    assert all(r["llm_calls"] == 1 and r["solver_runs"] >= 1 for r in records)
    assert set(table.columns) >= {"acc_0.01_id", "acc_0.001_ood", "nmse_id", "llm_calls", "seconds"}
    # a rerun over the same folder solves nothing again
    seen.clear()
    again = run_benchmark(_harness(), tasks, tmp_path, llm={"provider": "scripted"},
                          on_record=lambda r: seen.append(r["task"]))
    assert seen == [] and len(again) == len(tasks)
    text = markdown_table(again)
    assert "**mean**" in text and tasks[0].name in text


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
