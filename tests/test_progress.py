"""harness.app.progress: plain lines where stdout is not a terminal, a live display where it is, the closing
summary; and the benchmark runner reporting through it."""

from __future__ import annotations

import io
import re
from pathlib import Path

from rich.console import Console

from harness.app.progress import Progress, format_seconds, print_summary

CLOCK = r"\[\s*\d+:\d\d\] "


def _plain() -> tuple[Console, io.StringIO]:
    buffer = io.StringIO()
    return Console(file=buffer, width=60), buffer  # a StringIO is not a terminal


def test_plain_lines_say_stage_item_count_and_elapsed() -> None:
    console, buffer = _plain()
    with Progress("optimize", console=console) as progress:
        assert not progress.live
        progress.stage("stage 1: prompt initialisation", total=3, done=1)  # a resumed stage
        progress.item("candidate planner#2")
        progress.advance(note="chem_react_lsr_01 0.741 (a note longer than the console is wide stays on one line)")
        progress.log("stage 1 kept the rewrite")
        progress.stage("stage 2", total=None)
        progress.advance(2)
    lines = buffer.getvalue().splitlines()
    assert all(re.match(CLOCK, line) for line in lines), lines
    body = [re.sub(CLOCK, "", line) for line in lines]
    assert body == [
        "stage 1: prompt initialisation: 1/3",
        "stage 1: prompt initialisation: 1/3 - candidate planner#2",
        "stage 1: prompt initialisation: 2/3 done - chem_react_lsr_01 0.741 (a note longer than the console is wide "
        "stays on one line)",
        "stage 1 kept the rewrite",
        "stage 2: 0",
        "stage 2: 2 done",
    ]
    assert progress.done == 2 and progress.elapsed >= 0


def test_summary_is_a_markdown_table_off_a_terminal() -> None:
    console, buffer = _plain()
    print_summary("held-out tasks", [{"harness": "trained", "acc_0.01": 0.75, "tasks": 4},
                                     {"harness": "shipped default", "acc_0.01": float("nan")}],
                  notes=["frozen: the shipped default (better on validation)", "report: out/report.md"],
                  console=console)
    assert buffer.getvalue().splitlines() == [
        "held-out tasks",
        "| harness | acc_0.01 | tasks |",
        "|---|---|---|",
        "| trained | 0.750 | 4 |",
        "| shipped default | nan |  |",
        "frozen: the shipped default (better on validation)",
        "report: out/report.md",
    ]
    assert (format_seconds(9.24), format_seconds(383), format_seconds(3725)) == ("9.2 s", "6 min 23 s", "1 h 2 min")


def test_live_display_on_a_terminal() -> None:
    buffer = io.StringIO()
    console = Console(file=buffer, force_terminal=True, width=100)
    with Progress("bench", console=console) as progress:
        assert progress.live
        progress.stage("12 tasks", total=12)
        progress.item("task phys_osc_lsr_01")
        progress.advance(note="phys_osc_lsr_01 ok")
        progress.log("a line")
    print_summary("done", [{"arm": "harness", "acc": 0.5}], console=console)
    text = buffer.getvalue()
    assert "12 tasks" in text and "1/12" in text and "phys_osc_lsr_01 ok" in text and "a line" in text
    assert "harness" in text and "0.500" in text


def test_the_benchmark_runner_reports_tasks_done_and_the_current_task(tmp_path: Path) -> None:
    import benchmarks
    from benchmarks.runner import run_benchmark
    from harness.app.artifact import FrozenHarness
    from tests.doubles import SCRIPTED

    tasks = benchmarks.load_suite("synthetic", n_per_domain=1, domains=["materials"], n_train=80, n_test=30,
                                  n_ood=30)
    harness = FrozenHarness.create(FrozenHarness.default().prompts, (0, 1, 0, 0, 0),
                                   sr_settings={"time_budget": 1, "population_size": 20, "generations": 3,
                                                "max_length": 15, "unguided_run": False})
    console, buffer = _plain()
    run_benchmark(harness, tasks, tmp_path, llm={"provider": SCRIPTED}, progress=Progress("bench", console=console))
    body = [re.sub(CLOCK, "", line) for line in buffer.getvalue().splitlines()]
    name = tasks[0].name
    assert body[:2] == ["solving 1 tasks: 0/1", f"solving 1 tasks: 0/1 - task {name}"]
    assert body[2].startswith(f"solving 1 tasks: 1/1 done - {name} completed acc_0.01 ID/OOD ")
    console, buffer = _plain()  # resumed: nothing left to do, the count starts at the recorded task
    run_benchmark(harness, tasks, tmp_path, llm={"provider": SCRIPTED}, progress=Progress("bench", console=console))
    assert [re.sub(CLOCK, "", line) for line in buffer.getvalue().splitlines()] == ["solving 1 tasks: 1/1"]
