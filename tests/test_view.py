"""The run viewer: one self-contained HTML page per run folder, checked in a real headless Chromium."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest

import benchmarks
from harness import FrozenHarness
from harness.app.cli import main as cli
from harness.app.view import render, write_view
from tests.doubles import SCRIPTED

TINY = {"time_budget": 1, "population_size": 30, "generations": 5, "max_length": 15, "sparse_regression": False}


@pytest.fixture(scope="module")
def solve_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    [task] = benchmarks.load_suite("synthetic", names=["chem_react_synth_00"], n_train=120, n_test=40, n_ood=40)
    from harness.app.solve_cli import write_plots

    run_dir = tmp_path_factory.mktemp("solve")
    repairing = FrozenHarness.default().with_changes(workflow=(0, 1, 1, 0, 0))  # a tree with every node kind
    solution = repairing.solve(task, llm={"provider": SCRIPTED}, run_dir=run_dir, sr_settings=TINY)
    write_plots(run_dir, task, solution)  # as `python -m harness solve` does
    return run_dir


def _no_external_resources(page: str) -> None:
    assert not re.search(r"""(src|href)\s*=\s*['"]?(https?:)?//""", page), "the page must not load anything"
    assert "<link" not in page and "<iframe" not in page


def test_solve_view_has_the_task_equation_metrics_and_tree(solve_run: Path) -> None:
    page = render(solve_run)
    _no_external_resources(page)
    nodes = [json.loads(line) for line in (solve_run / "nodes.jsonl").read_text().splitlines()]
    # the unguided sr run, planner, sr, diagnoser, repairer, sr, combine, the precision polish (a combine node)
    assert page.count("class='node'") == len(nodes) == 8
    assert [n["kind"] for n in nodes][-2:] == ["combine", "combine"] and "data-kind='combine'" in page
    assert nodes[-1]["info"]["channel"] == "precision polish"
    result = json.loads((solve_run / "result.json").read_text())
    assert "<math" in page and result["expression"] in page.replace("&#x27;", "'")
    assert "id='metrics'" in page and "test_ood" in page and "data:image/png;base64," in page
    # the prompts behind each role call are kept (messages.jsonl) and shown
    prompts = [json.loads(line) for line in (solve_run / "messages.jsonl").read_text().splitlines()]
    assert len(prompts) == 3 and page.count("prompt (2 messages)") == 3
    assert "chem_react_synth_00" in page and "ground truth" in page


def test_agent_and_optimize_runs_and_the_cli(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    x = rng.uniform(-2, 2, 100)
    (tmp_path / "data.csv").write_text("x0,y\n" + "".join(f"{a},{3 * a}\n" for a in x))
    script = "{responses:[{tool_calls:[{name:evaluate_expression,arguments:{expression:'c0*x0'}}]},'done'],cycle:true}"
    agent_dir = tmp_path / "agent"
    assert cli(["agent", f"data={tmp_path / 'data.csv'}", f"llm.provider={SCRIPTED}", f"llm.extra={script}",
                "agent.tools=[evaluate_expression]", "agent.L=2", f"out={agent_dir}"]) == 0
    page = render(agent_dir)
    assert "agent run" in page and "tool <b>evaluate_expression</b>" in page and "c0*x0" in page
    assert cli(["view", str(agent_dir)]) == 0 and (agent_dir / "view.html").exists()
    assert cli(["view", str(tmp_path / "missing")]) == 2

    opt = tmp_path / "opt"
    (opt / "runs").mkdir(parents=True)
    (opt / "freeze.json").write_text(json.dumps({"selected_stage": "init", "digest": "sha256:abc", "rows": {
        "baseline": {"title": "seed harness", "workflow": [0, 1, 1, 0, 0], "train": {"score": 0.0},
                     "heldout": {"score": 0.0, "sa": 0.0}},
        "init": {"title": "stage 1: prompt init", "workflow": [0, 1, 1, 0, 0], "train": {"score": 1.0},
                 "heldout": {"score": 1.0, "sa": 1.0}}}}))
    page = render(opt)
    assert "optimize run" in page and "stage 1: prompt init" in page and "sha256:abc" in page
    _no_external_resources(page)


def _chromium() -> str:
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    if path is None:
        pytest.skip("no Chromium on this machine (.ci/run installs Debian's chromium package)")
    return path


def test_the_page_in_headless_chromium(solve_run: Path, tmp_path: Path) -> None:
    """Loads with no console errors; the equation and the tree are visible; expand all opens every node."""
    from playwright import (
        sync_api,  # the test extra: a missing one is a broken install, not a skip
    )

    page_file = write_view(solve_run, tmp_path / "view.html")
    shot = tmp_path / "view.png"
    errors: list[str] = []
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=_chromium(), args=[
            "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
            "--disable-sync", "--no-first-run"])
        page = browser.new_page(viewport={"width": 1200, "height": 1400})
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.on("request", lambda r: errors.append(f"network: {r.url}") if not r.url.startswith(("file:", "data:"))
                else None)
        page.goto(page_file.as_uri())
        assert page.locator("#equation math").is_visible()
        assert page.locator("#equation-text").is_visible()
        assert page.locator("#tree details.node").first.is_visible()
        nested = page.locator("#tree details.node details")
        assert not nested.first.is_visible()  # collapsed until asked
        page.click("#expand")
        assert nested.first.is_visible()
        assert page.locator("#tree details[open]").count() == page.locator("#tree details").count()
        page.evaluate("window.scrollTo(0, 0)")
        page.screenshot(path=str(shot), full_page=True)
        box = page.locator("#equation math").bounding_box()
        browser.close()
    assert errors == []
    assert box is not None and box["width"] > 50 and box["height"] > 10  # MathML was laid out, not raw text
    assert shot.stat().st_size > 20_000 and shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
