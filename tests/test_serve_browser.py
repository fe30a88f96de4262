"""The workbench in a real headless Chromium against a real server (uvicorn) and the embedded tiny model: upload a
CSV, set up the task, start a solve, watch nodes arrive, send guidance, pause and resume, see the equation.

``HARNESS_SR_WORKBENCH_SHOT=docs/workbench.png`` also writes the screenshot there (how docs/workbench.png is made).
"""

from __future__ import annotations

import os
import shutil
import socket
import threading
import time
from pathlib import Path

import numpy as np
import pytest

CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def _chromium() -> str:
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    if path is None:
        pytest.skip("no Chromium on this machine (.ci/run installs Debian's chromium package)")
    return path


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.slow
@pytest.mark.llm
def test_workbench_solve_in_chromium_with_the_tiny_model(tmp_path: Path) -> None:
    import uvicorn
    from playwright import sync_api  # the test extra: a missing one is a broken install, not a skip

    from harness.app.serve import create_app

    chromium = _chromium()
    rng = np.random.default_rng(0)
    x = rng.uniform(1, 3, (300, 3))
    data = tmp_path / "force.csv"
    data.write_text("a,b,junk,y\n" + "".join(f"{p:.6g},{q:.6g},{r:.6g},{2.5 * p * np.sin(q):.8g}\n" for p, q, r in x))
    port = _free_port()
    server = uvicorn.Server(uvicorn.Config(create_app(tmp_path / "ws"), host="127.0.0.1", port=port,
                                           log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.05)
    shot = tmp_path / "workbench.png"
    errors: list[str] = []
    try:
        with sync_api.sync_playwright() as p:
            browser = p.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS)
            page = browser.new_page(viewport={"width": 1300, "height": 1500})
            page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.on("response", lambda r: errors.append(f"{r.status}: {r.url}") if r.status >= 400 else None)
            page.on("request", lambda r: None if r.url.startswith(f"http://127.0.0.1:{port}/")
                    else errors.append(f"network: {r.url}"))
            page.goto(f"http://127.0.0.1:{port}/")
            page.set_input_files("#file", str(data))
            page.click("#upload")
            page.wait_for_selector("svg.plot")  # preview table and target-vs-input plots
            assert page.locator("#preview table tr").count() == 9 and page.locator("svg.plot").count() == 3
            page.select_option("#target", "y")
            page.select_option("select.use[data-col='junk']", "unused")
            page.fill("input.desc[data-col='a']", "distance")
            page.select_option("#ood", "a")  # rows with the largest a: the out-of-domain test
            page.select_option("#llm", "tiny")
            page.fill("#max-seconds", "40")
            page.fill("#sr-seconds", "5")
            page.click("#start")
            page.wait_for_selector("#timeline li", timeout=120_000)  # a node arrived while the run goes on
            assert page.text_content("#status") in ("running", "waiting", "paused", "queued")
            page.fill("#message", "try a*sin(b)")
            page.click("#send")
            page.wait_for_function("document.getElementById('control-note').textContent.startsWith('messages')")
            page.click("#pause")
            page.wait_for_function("document.getElementById('status').textContent.startsWith('paused')"
                                   " || document.getElementById('status').textContent.startsWith('done')")
            page.click("#resume")
            page.wait_for_function("['done', 'failed', 'stopped'].some(s => "
                                   "document.getElementById('status').textContent.startsWith(s))", timeout=240_000)
            assert page.text_content("#status") == "done"
            assert page.locator("#equation math").is_visible() and page.text_content("#equation-text").strip()
            page.wait_for_selector("#tree details.node")
            assert "OOD (test_ood)" in page.text_content("#metrics")
            timeline = page.text_content("#timeline")
            assert "user_message" in timeline and "control" in timeline
            n_nodes = page.locator("#timeline li").count()
            page.click("#runs li")  # a past run reopens: its nodes are replayed once, with its result
            page.wait_for_function(f"document.querySelectorAll('#timeline li').length === {n_nodes}"
                                   " && document.getElementById('status').textContent === 'done'")
            page.wait_for_timeout(4000)  # longer than EventSource's reconnect delay: a closed stream stays closed
            assert page.locator("#timeline li").count() == n_nodes
            page.evaluate("window.scrollTo(0, 0)")
            page.screenshot(path=str(shot), full_page=True)
            browser.close()
    finally:
        server.should_exit = True
        thread.join(30)
    assert errors == []
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    target = os.environ.get("HARNESS_SR_WORKBENCH_SHOT")
    if target:
        shutil.copy(shot, target)
