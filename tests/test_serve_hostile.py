"""A hostile token holder against a real ``python -m harness serve`` process (loopback, token set): a request
never makes the server call a host of its choosing, send an environment variable, import a module, open a file
outside the workspace or hold the engine past the operator's limits; every refusal is a 4xx naming the field.

One server for the module (its start-up is the slow part). The operator's configuration offers the scripted
double (by import path: the operator may name code) and ``tiny`` (never run here).
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Iterator

import httpx
import numpy as np
import pytest

from tests.doubles import SCRIPTED

ROOT = Path(__file__).resolve().parent.parent
TOKEN = "hostile-suite-token-5f2c"
SECRET = "the-server-secret-9d41e7"  # the value of a server environment variable a request must never reach
TINY_SR = {"time_budget": 1, "population_size": 30, "generations": 5, "max_length": 15}
PROBE = '''"""Imported = the server ran a module a request named: leaves a marker file."""
from pathlib import Path

Path(__file__).with_name("probe-was-imported").write_text("imported")


class Client:
    pass
'''


class Listener:
    """A TCP listener on another loopback port that counts every connection made to it."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.connections = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            self.connections += 1
            conn.close()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(2)
        self.sock.close()


class Server:
    def __init__(self, root: Path, url: str, ws: Path, probe_dir: Path, listener: Listener,
                 process: subprocess.Popen) -> None:
        self.root, self.url, self.ws, self.probe_dir, self.listener, self.process = (root, url, ws, probe_dir,
                                                                                      listener, process)
        self.http = httpx.Client(base_url=url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=30)

    def post_run(self, body: dict[str, Any]) -> httpx.Response:
        return self.http.post("/api/runs", json=body)

    def refused(self, body: dict[str, Any], *fields: str, status: tuple[int, ...] = (400, 422)) -> str:
        """POST /api/runs is a 4xx whose one-line detail names every field; the secret is never echoed."""
        r = self.post_run(body)
        detail = r.json().get("detail", "")
        assert r.status_code in status, (body, r.status_code, detail)
        assert isinstance(detail, str) and "\n" not in detail, detail
        for name in fields:
            assert name in detail, (body, name, detail)
        assert SECRET not in r.text
        return detail


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _csv(rows: int = 120) -> str:
    rng = np.random.default_rng(0)
    x = rng.uniform(1, 3, (rows, 2))
    return "a,b,y\n" + "".join(f"{p},{q},{2.5 * p * np.sin(q)}\n" for p, q in x)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    root = tmp_path_factory.mktemp("hostile")
    ws, probe_dir, cwd = root / "ws", root / "probe", root / "cwd"
    for folder in (ws, probe_dir, cwd):
        folder.mkdir()
    (ws / "data.csv").write_text(_csv())
    (probe_dir / "hostile_probe.py").write_text(PROBE)
    (root / "outside").mkdir()
    (root / "outside" / "secret.csv").write_text(_csv().replace("a,b,y", f"a,b,{SECRET.replace('-', '_')}"))
    (root / "serve.yaml").write_text(f"models:\n  scripted: {{provider: {SCRIPTED}}}\n  tiny: tiny\n"
                                     "limits:\n  max_run_seconds: 120\n")
    listener = Listener()
    port = _free_port()
    env = {**os.environ, "SECRET_DEMO": SECRET,  # the probe's folder is importable by the server: nothing stops it
           "PYTHONPATH": os.pathsep.join([str(probe_dir), str(ROOT), os.environ.get("PYTHONPATH", "")])}
    process = subprocess.Popen([sys.executable, "-m", "harness", "serve", "--port", str(port), "--workspace",
                                str(ws), "--token", TOKEN, "--config", str(root / "serve.yaml")],
                               cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    srv = Server(root, f"http://127.0.0.1:{port}", ws, probe_dir, listener, process)
    deadline = time.monotonic() + 90
    while True:
        try:
            if srv.http.get("/api/options").status_code == 200:
                break
        except httpx.TransportError:
            pass
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            pytest.fail(f"the server did not start: {process.stdout.read() if process.stdout else ''}")
        time.sleep(0.2)
    try:
        yield srv
    finally:
        srv.http.close()
        process.terminate()
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
        listener.close()


def test_the_server_runs_the_worktrees_code_and_offers_models_by_name(server: Server) -> None:
    options = server.http.get("/api/options").json()
    assert options["llms"] == ["scripted", "tiny"] and options["default_llm"] == "scripted"
    assert options["limits"]["max_run_seconds"] == 120
    assert SECRET not in server.http.get("/api/options").text


def test_a_request_cannot_name_a_host_or_an_environment_variable(server: Server) -> None:
    url = server.listener.url
    server.refused({"data": "data.csv", "llm": {"name": "scripted", "base_url": url}}, "llm.base_url")
    server.refused({"data": "data.csv", "llm": {"provider": "openai", "base_url": url, "api_key_env": "SECRET_DEMO"}},
                   "llm.provider", "llm.base_url", "llm.api_key_env")
    server.refused({"data": "data.csv", "llm": {"name": "tiny", "api_key_env": "SECRET_DEMO"}}, "llm.api_key_env")
    server.refused({"data": "data.csv", "llm": {"name": "tiny", "base_url": [url, url]}}, "llm.base_url")
    server.refused({"data": "data.csv", "llm": {"name": "tiny", "extra": {"base_url": url}}}, "llm.extra")
    server.refused({"data": "data.csv", "base_url": url, "api_key_env": "SECRET_DEMO"}, "base_url", "api_key_env")
    server.refused({"data": "data.csv", "llm": url}, "llm.name", "unknown model")
    server.refused({"data": "data.csv", "sr": {"extras": {"base_url": url}}}, "sr.extras")
    server.refused({"data": "data.csv", "agent": {"base_url": url, "api_key_env": "SECRET_DEMO"}},
                   "agent.base_url", "agent.api_key_env")
    time.sleep(0.5)
    assert server.listener.connections == 0
    assert server.http.get("/api/runs").json() == []  # nothing was queued


def test_an_import_path_is_refused_without_the_module_being_imported(server: Server) -> None:
    marker = server.probe_dir / "probe-was-imported"
    for path in ("hostile_probe.Client", "hostile_probe:Client"):
        server.refused({"data": "data.csv", "llm": {"provider": path}}, "llm.provider")
        server.refused({"data": "data.csv", "llm": {"name": "scripted", "provider": path}}, "llm.provider")
        server.refused({"data": "data.csv", "llm": path}, "llm.name")
        server.refused({"data": "data.csv", "llm": {"name": path}}, "llm.name")
        server.refused({"data": "data.csv", "harness": path}, "hostile_probe", status=(400, 404))
    assert not marker.exists()
    # the control: the server's import path did reach the probe, so importing it would have left the marker
    env = {**os.environ, "PYTHONPATH": str(server.probe_dir)}
    subprocess.run([sys.executable, "-c", "import hostile_probe"], env=env, cwd=server.root, check=True, timeout=60)
    assert marker.read_text() == "imported"


def test_server_files_are_neither_models_nor_data(server: Server) -> None:
    server.refused({"data": "data.csv", "llm": {"name": "tiny", "model_path": "/etc/passwd"}}, "llm.model_path")
    server.refused({"data": "data.csv", "llm": {"provider": "local", "model_path": "/etc/passwd"}},
                   "llm.provider", "llm.model_path")
    server.refused({"data": "/etc/passwd"}, "workspace")
    server.refused({"data": "../outside/secret.csv"}, "workspace")
    server.refused({"data": "data.csv", "harness": "/etc/passwd"}, "workspace")
    for path in ("/etc/passwd", "../outside/secret.csv"):
        r = server.http.get("/api/data", params={"path": path})
        assert r.status_code == 400 and "workspace" in r.json()["detail"] and "root:" not in r.text
    assert server.http.get("/api/runs").json() == []


def test_oversize_budgets_and_settings_are_refused(server: Server) -> None:
    data = {"data": "data.csv"}
    server.refused({**data, "budget": {"max_seconds": 999999}}, "budget.max_seconds", "120", "max_run_seconds")
    server.refused({**data, "sr": {"time_budget": 99999}}, "sr.time_budget", "sr_time_factor")
    server.refused({**data, "sr": {"max_time": 99999}}, "sr.max_time")  # an alias is no way around it
    server.refused({**data, "sr": {"residual_seconds": 99999}}, "sr.residual_seconds")
    server.refused({**data, "sr": {"population_size": 10**7}}, "sr.population_size", "max_population")
    server.refused({**data, "sr": {"max_length": 60}}, "sr.max_length")
    server.refused({**data, "llm": {"name": "scripted", "max_tokens": 10**6}}, "llm.max_tokens")
    server.refused({**data, "agent": {"L": 1000}}, "agent.R*C*L*K", "max_agent_steps")
    server.refused({**data, "budget": {"max_seconds": 10, "max_llm_calls": -1}}, "budget.max_llm_calls")
    server.refused({**data, "seed": 2**70}, "seed")
    assert server.http.get("/api/runs").json() == []


def _routes(folder: Path) -> list[tuple[str, str]]:
    """Every (method, path) the app serves, path parameters filled in: a route added later is checked too."""
    from harness.app.serve import create_app

    app = create_app(folder)
    fill = {"run_id": "20260101-000000-abcdef", "name": "view.html", "action": "pause"}
    out = []
    for route in app.routes:
        for method in sorted(getattr(route, "methods", None) or {"GET"}):
            if method in ("HEAD", "OPTIONS"):
                continue
            out.append((method, re.sub(r"\{(\w+)(:\w+)?\}", lambda m: fill.get(m.group(1), "x"), route.path)))
    return out


def test_a_wrong_or_missing_token_is_401_on_every_route(server: Server, tmp_path: Path) -> None:
    routes = _routes(tmp_path)
    assert ("GET", "/api/runs/20260101-000000-abcdef/events") in routes  # SSE
    assert ("GET", "/api/runs/20260101-000000-abcdef/files/view.html") in routes  # static results
    assert ("GET", "/") in routes and ("GET", "/openapi.json") in routes
    with httpx.Client(base_url=server.url, timeout=30) as anon:
        for method, path in routes:
            for kwargs in ({}, {"headers": {"Authorization": "Bearer wrong"}}, {"params": {"token": "wrong"}},
                           {"headers": {"Cookie": "harness_token=wrong"}},
                           {"headers": {"Authorization": f"Bearer {TOKEN}x"}}):
                r = anon.request(method, path, **kwargs)
                assert r.status_code == 401, (method, path, kwargs, r.status_code)
                assert "event-stream" not in r.headers.get("content-type", "")
        assert anon.get("/api/runs", params={"token": TOKEN}).status_code == 200  # the token itself works
        assert anon.get("/", headers={"Cookie": f"harness_token={TOKEN}"}).status_code == 200


def _snapshot(folder: Path, skip: Path) -> dict[str, int]:
    return {str(p): p.stat().st_size for p in folder.rglob("*") if not p.is_relative_to(skip) and p.is_file()}


def test_a_run_cannot_read_outside_the_workspace_through_any_results_route(server: Server) -> None:
    outside = server.root / "outside"
    (outside / "view.html").write_text(SECRET)
    (outside / "nodes.jsonl").write_text('{"secret": "%s"}\n' % SECRET)
    (outside / "status.json").write_text('{"status": "done", "error": "%s"}' % SECRET)
    before = _snapshot(server.root, server.ws)
    r = server.post_run({"data": "data.csv", "target": "y", "llm": "scripted", "name": "../../escape",
                         "budget": {"max_seconds": 60}, "sr": TINY_SR})
    assert r.status_code == 201, r.text
    run_id = r.json()["id"]
    deadline = time.monotonic() + 90
    while (info := server.http.get(f"/api/runs/{run_id}").json())["status"] not in ("done", "failed", "stopped"):
        assert time.monotonic() < deadline, info
        time.sleep(0.3)
    assert info["status"] == "done", info
    run_dir = server.ws / "runs" / run_id
    assert Path(info["result"]["run_dir"]) == run_dir
    os.symlink(outside / "secret.csv", run_dir / "leak.csv")
    os.symlink(outside, run_dir / "leakdir")
    fake = "20260101-000000-abcdef"
    os.symlink(outside, server.ws / "runs" / fake)  # a run folder that leads out of the workspace
    routes = [f"/api/runs/{run_id}/files/leak.csv", f"/api/runs/{run_id}/files/leakdir",
              f"/api/runs/{run_id}/files/..%2F..%2F..%2Foutside%2Fsecret.csv",
              f"/api/runs/{run_id}/files/%2Fetc%2Fpasswd", f"/api/runs/{fake}",
              f"/api/runs/{fake}/files/view.html", f"/api/runs/{fake}/tree", f"/api/runs/{fake}/events",
              "/api/runs/..%2F..%2Foutside/files/view.html", "/api/runs/..%2Foutside/events"]
    for path in routes:
        r = server.http.get(path)
        assert r.status_code in (400, 404), (path, r.status_code)
        assert SECRET not in r.text and SECRET.replace("-", "_") not in r.text and "root:" not in r.text, path
    listed = server.http.get("/api/runs").json()
    assert [x["id"] for x in listed] == [run_id] and SECRET not in str(listed)
    assert server.http.get(f"/api/runs/{run_id}/files/view.html").status_code == 200  # the run's own files
    assert _snapshot(server.root, server.ws) == before  # nothing written outside the workspace
    assert not any(server.root.glob("escape*")) and server.listener.connections == 0
    socket.create_connection(("127.0.0.1", server.listener.port)).close()  # the control: it does count
    deadline = time.monotonic() + 5
    while server.listener.connections == 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert server.listener.connections == 1
