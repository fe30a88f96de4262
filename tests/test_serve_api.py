"""The workbench's HTTP API (FastAPI's test client): uploads, path confinement, runs, live events, guidance at the
next role prompt, pause / resume, stop during an SR run, a failing run, the token. The scripted model stands in
for the LLM (the model is not the point here; tests/test_serve_browser.py solves with llm=tiny)."""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from fastapi.testclient import TestClient

from harness import FrozenHarness
from harness.app.serve import create_app
from harness.app.serve import workspace as workspace_module
from harness.app.serve.cli import main as serve_main
from harness.app.serve.config import ServeSettings
from tests.doubles import SCRIPTED, ScriptedLLM, detect_role, scripted_role_output

TINY_SR = {"time_budget": 1, "population_size": 30, "generations": 5, "max_length": 15}
ASK_THEN_CALL = ["Which form should I try?",
                 {"tool_calls": [{"name": "evaluate_expression", "arguments": {"expression": "c0*a*sin(b)"}}]}]
# the operator's model configurations (a request picks one by name): the scripted double by its import path
SETTINGS = ServeSettings(models={"scripted": {"provider": SCRIPTED}, "tiny": "tiny",
                                 "broken": {"provider": SCRIPTED, "model": "broken"},
                                 "asks": {"provider": SCRIPTED, "extra": {"responses": ASK_THEN_CALL}}})
FINAL = ("done", "failed", "stopped")


def _csv(rows: int = 120) -> bytes:
    rng = np.random.default_rng(0)
    x = rng.uniform(1, 3, (rows, 3))
    lines = ["a,b,junk,y"] + [f"{p},{q},{r},{2.5 * p * np.sin(q)}" for p, q, r in x]
    return ("\n".join(lines) + "\n").encode()


@pytest.fixture()
def client(tmp_path: Path) -> Any:
    with TestClient(create_app(tmp_path / "ws", settings=SETTINGS)) as c:
        yield c


def _wait(client: TestClient, run_id: str, statuses: tuple[str, ...] = FINAL, timeout: float = 60) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        info = client.get(f"/api/runs/{run_id}").json()
        if info["status"] in statuses:
            return info
        time.sleep(0.1)
    raise AssertionError(f"run {run_id} still {info['status']} after {timeout} s")


def _upload(client: TestClient, content: bytes = b"", name: str = "d.csv") -> Any:
    return client.post("/api/uploads", files={"file": (name, content or _csv(), "text/csv")})


def test_upload_preview_and_bad_uploads(client: TestClient, monkeypatch: pytest.MonkeyPatch) -> None:
    r = _upload(client)
    assert r.status_code == 200 and r.json()["columns"] == ["a", "b", "junk", "y"] and r.json()["rows"] == 120
    view = client.get("/api/data", params={"id": r.json()["id"]}).json()
    assert view["columns"] == ["a", "b", "junk", "y"] and len(view["head"]) == 20 and len(view["sample"]) == 120
    bad = {b"": "empty file", b"a,b\n1,2\n": "at least 5", b"a,b\n" + b"1,x\n" * 6: "non-numeric",
           b"\x00\xff\xfe garbage": "", b"a,b,c\n1,2\n3,4,5,6,7\n": "not a readable CSV"}
    for content, reason in bad.items():
        r = client.post("/api/uploads", files={"file": ("x.csv", content, "text/csv")})
        assert r.status_code == 400 and reason in r.json()["detail"], (content, r.json())
        assert "\n" not in r.json()["detail"]
    monkeypatch.setattr(workspace_module, "MAX_UPLOAD_BYTES", 100)
    assert _upload(client).status_code == 413
    assert client.post("/api/uploads").status_code == 422  # no file part
    uploads = list((Path(client.app.state.workspace.root) / "uploads").glob("*.csv"))
    assert len(uploads) == 1  # nothing of the bad ones was written


def test_paths_are_confined_to_the_workspace(client: TestClient, tmp_path: Path) -> None:
    ws = Path(client.app.state.workspace.root)
    (tmp_path / "outside.csv").write_bytes(_csv())
    (ws / "inside.csv").write_bytes(_csv())
    os.symlink(tmp_path / "outside.csv", ws / "link.csv")
    os.symlink(tmp_path, ws / "linkdir")
    assert client.get("/api/data", params={"path": "inside.csv"}).status_code == 200
    for path in ("../outside.csv", str(tmp_path / "outside.csv"), "link.csv", "linkdir/outside.csv",
                 "runs/../../outside.csv", "~/x.csv"):
        r = client.get("/api/data", params={"path": path})
        assert r.status_code == 400 and "workspace" in r.json()["detail"], (path, r.json())
        r = client.post("/api/runs", json={"data": path, "target": "y"})
        assert r.status_code == 400, path
    assert client.post("/api/runs", json={"data": "inside.csv", "harness": "../h.json"}).status_code == 400
    assert client.get("/api/runs/..%2F..%2Fetc/files/passwd").status_code == 404
    assert client.get("/api/runs/20260101-000000-abcdef/files/..%2F..%2Finside.csv").status_code in (400, 404)
    assert client.get("/api/data", params={"path": "missing.csv"}).status_code == 404


def test_bad_run_requests_get_one_line_reasons(client: TestClient) -> None:
    up = _upload(client).json()["id"]
    cases = [({"target": "y"}, 422, "exactly one of data"),
             ({"data": up, "target": "nope"}, 400, "nope"),
             ({"data": up, "llm": "no-such-model"}, 400, "unknown model 'no-such-model'; this server offers: "
                                                         "scripted, tiny, broken, asks"),
             ({"data": up, "budget": {"max_seconds": -1}}, 422, "budget.max_seconds"),
             ({"data": up, "budget": {"max_sconds": 1}}, 422, "budget.max_sconds"),
             ({"data": up, "sr": {"time_budget": "soon"}}, 400, "time_budget"),
             ({"data": up, "colour": "red"}, 422, "colour"),
             ({"data": "up-000000000000"}, 404, "no such upload"),
             ({"suite": "feynman:I.6.2a"}, 400, "built-in")]
    for body, status, reason in cases:
        r = client.post("/api/runs", json=body)
        assert r.status_code == status and reason in r.json()["detail"], (body, r.status_code, r.json())
    from harness.app.serve.models import RunRequest

    picked = client.app.state.manager.prepare(RunRequest(suite="synthetic:phys_osc_synth_00"))  # a suite's task
    assert picked.task.name == "phys_osc_synth_00" and picked.task.test_ood is not None
    assert client.get("/api/runs/20260101-000000-abcdef").status_code == 404
    assert client.post("/api/runs/20260101-000000-abcdef/pause").status_code == 404
    assert client.post("/api/runs/20260101-000000-abcdef/messages", json={"text": ""}).status_code == 422
    assert client.get("/api/runs").json() == []


def test_a_solve_through_the_api(client: TestClient) -> None:
    up = _upload(client).json()["id"]
    r = client.post("/api/runs", json={"data": up, "target": "y", "inputs": ["a", "b"],
                                       "descriptions": {"a": "distance", "y": "force"}, "ood_column": "a",
                                       "llm": "scripted", "budget": {"max_seconds": 60}, "sr": TINY_SR})
    assert r.status_code == 201
    run_id = r.json()["id"]
    info = _wait(client, run_id)
    assert info["status"] == "done", info
    result = info["result"]
    assert "<math" in result["mathml"] and {"sympy", "latex", "python"} <= set(result["exports"])
    assert "def f(a, b):" in result["exports"]["python"] and "junk" not in result["equation"]
    assert {"test_id", "test_ood", "valid"} <= set(result["metrics"]) and "pred_vs_true_ood.png" in result["plots"]
    with client.stream("GET", f"/api/runs/{run_id}/events") as stream:
        lines = [line for line in stream.iter_lines() if line.startswith("data:")]
    run_dir = Path(result["run_dir"])
    nodes = (run_dir / "nodes.jsonl").read_text().splitlines()
    assert len(lines) == len(nodes) + 1 and json.loads(lines[-1][5:])["status"] == "done"
    assert client.get(f"/api/runs/{run_id}/files/pareto_front.png").content[:4] == b"\x89PNG"
    assert client.get(f"/api/runs/{run_id}/files/missing.png").status_code == 404
    assert "<math" in client.get(f"/api/runs/{run_id}/files/view.html").text
    assert "class='node'" in client.get(f"/api/runs/{run_id}/tree").text
    assert [r["id"] for r in client.get("/api/runs").json()] == [run_id]
    task = json.loads((run_dir / "run.json").read_text())["task"]
    assert task["input_names"] == ["a", "b"] and task["input_descriptions"][0] == "distance"
    assert client.post(f"/api/runs/{run_id}/pause").status_code == 409  # a finished run takes no controls
    assert "synthetic" in client.get("/api/options").json()["suites"]


def test_guidance_reaches_the_next_role_prompt_and_pause_holds_the_run(tmp_path: Path) -> None:
    """A message sent while the Planner works is in the Diagnoser's prompt; a pause parks the run at the next
    boundary until resumed; a second run waits in the queue (max_runs=1) and can be stopped there."""
    planner_busy, release = threading.Event(), threading.Event()

    def model(messages: list, **request: Any) -> Any:
        if detect_role(messages, request.get("response_format")) == "planner":
            planner_busy.set()
            release.wait(30)
        return scripted_role_output(messages, **request)

    llm = ScriptedLLM(fn=model)
    ws = tmp_path / "ws"
    ws.mkdir()
    FrozenHarness.default().with_changes(workflow=(0, 1, 1, 0, 0)).save(ws / "repairing.json")
    with TestClient(create_app(ws, make_client=lambda config: llm)) as client:
        up = _upload(client).json()["id"]
        body = {"data": up, "target": "y", "harness": "repairing.json", "sr": {**TINY_SR, "unguided_run": False}}
        run_id = client.post("/api/runs", json=body).json()["id"]
        queued = client.post("/api/runs", json=body).json()["id"]
        assert planner_busy.wait(30)
        assert client.get(f"/api/runs/{queued}").json()["status"] == "queued"
        assert client.post(f"/api/runs/{queued}/stop").status_code == 200
        assert _wait(client, queued)["status"] == "stopped"
        assert client.post(f"/api/runs/{run_id}/messages", json={"text": "try a sine of b"}).json()
        assert client.post(f"/api/runs/{run_id}/pause").json()["status"] == "paused"
        release.set()
        time.sleep(1.5)  # the planner answers, the run parks before its SR run
        assert client.get(f"/api/runs/{run_id}").json()["status"] == "paused"
        assert len(llm.requests) == 1
        client.post(f"/api/runs/{run_id}/resume")
        info = _wait(client, run_id)
        assert info["status"] == "done", info
    roles = [detect_role(r["messages"], r.get("response_format")) for r in llm.requests]
    assert roles == ["planner", "diagnoser", "repairer"]
    assert "try a sine of b" not in json.dumps(llm.requests[0]["messages"])
    assert "try a sine of b" in llm.requests[1]["messages"][-1]["content"]
    nodes = [json.loads(x) for x in (ws / "runs" / run_id / "nodes.jsonl").read_text().splitlines()]
    said = [(n["kind"], n["response"]) for n in nodes if n["kind"] in ("user_message", "control")]
    assert said == [("control", "pause"), ("control", "resume"), ("user_message", "try a sine of b")]


def test_stop_during_an_sr_run_and_a_failing_run(tmp_path: Path) -> None:
    """The first stop waits for the running engine; the second kills it within seconds. A run whose model cannot
    be built fails with its error and the server goes on."""
    def make_client(config: Any) -> Any:
        if config.model == "broken":
            raise RuntimeError("the model exploded")
        return ScriptedLLM(fn=scripted_role_output)

    with TestClient(create_app(tmp_path / "ws", make_client=make_client, max_runs=2, settings=SETTINGS)) as client:
        up = _upload(client).json()["id"]
        long_sr = {**TINY_SR, "time_budget": 60, "generations": 100000, "population_size": 200}
        run_id = client.post("/api/runs", json={"data": up, "target": "y", "sr": long_sr}).json()["id"]
        run_dir = Path(client.app.state.workspace.root) / "runs" / run_id
        nodes_file, deadline = run_dir / "nodes.jsonl", time.monotonic() + 30
        while not nodes_file.exists() or "role:planner" not in nodes_file.read_text():
            assert time.monotonic() < deadline
            time.sleep(0.2)
        time.sleep(2)  # the planner has answered; the unguided engine runs, the planner's SR run waits for it
        t0 = time.monotonic()
        assert client.post(f"/api/runs/{run_id}/stop").status_code == 200
        time.sleep(0.5)
        assert client.get(f"/api/runs/{run_id}").json()["status"] == "running"  # waits for the engine
        client.post(f"/api/runs/{run_id}/stop")
        info = _wait(client, run_id, timeout=20)
        assert info["status"] == "stopped" and time.monotonic() - t0 < 40, info  # not the 60 s engine run
        nodes = [json.loads(x) for x in (run_dir / "nodes.jsonl").read_text().splitlines()]
        assert [n["response"] for n in nodes if n["kind"] == "control"] == ["stop", "stop"]
        assert any(n["kind"] == "sr" and "cancelled" in (n["error"] or "") for n in nodes)  # the engine was killed
        broken = client.post("/api/runs", json={"data": up, "llm": "broken"}).json()["id"]
        info = _wait(client, broken)
        assert info["status"] == "failed" and "the model exploded" in info["error"]
        assert client.get("/api/runs").status_code == 200 and len(client.get("/api/runs").json()) == 2


def test_the_interactive_agent_waits_for_a_message(client: TestClient) -> None:
    up = _upload(client).json()["id"]
    body = {"data": up, "target": "y", "inputs": ["a", "b"], "llm": "asks", "sr": TINY_SR,
            "agent": {"L": 1, "tools": ["evaluate_expression"]}}
    run_id = client.post("/api/runs", json=body).json()["id"]
    assert _wait(client, run_id, ("waiting", *FINAL))["status"] == "waiting"
    assert client.post(f"/api/runs/{run_id}/messages", json={"text": "fit c0*a*sin(b)"}).status_code == 200
    info = _wait(client, run_id)
    assert info["status"] == "done" and "sin(b)" in info["result"]["equation"], info
    run_dir = Path(info["result"]["run_dir"])
    kinds = [json.loads(x)["kind"] for x in (run_dir / "nodes.jsonl").read_text().splitlines()]
    assert kinds == ["agent_step", "user_message", "agent_step"]
    assert client.post("/api/runs", json={**body, "agent": {"L": 0}}).status_code == 400


def test_one_model_client_for_all_runs(tmp_path: Path) -> None:
    """The embedded model is loaded once: runs with the same model settings share one client."""
    from harness.llm.config import LLMConfig

    built: list[Any] = []
    app = create_app(tmp_path / "ws", make_client=lambda config: built.append(config) or ScriptedLLM(["x"]))
    manager = app.state.manager
    tiny = FrozenHarness.default().llm_config({"provider": "local", "model": "smollm2-135m-instruct"})
    assert manager._client(tiny) is manager._client(LLMConfig.model_validate(tiny.model_dump()))
    assert len(built) == 1
    manager._client(FrozenHarness.default().llm_config({"provider": SCRIPTED}))
    assert len(built) == 2


def test_token_and_bind_address(tmp_path: Path) -> None:
    with TestClient(create_app(tmp_path / "ws", token="s3cret")) as client:
        assert client.get("/api/runs").status_code == 401
        assert client.get("/api/runs", headers={"Authorization": "Bearer wrong"}).status_code == 401
        assert client.get("/api/runs", headers={"Authorization": "Bearer s3cret"}).status_code == 200
        assert client.get("/api/runs?token=s3cret").status_code == 200
    assert serve_main(["--host", "0.0.0.0", "--workspace", str(tmp_path)]) == 2


def test_a_request_picks_a_model_by_name_and_sets_only_sampling_fields(client: TestClient) -> None:
    """Which model runs, where, with which key and from which file is the operator's; a workspace harness file's
    llm section cannot say either (only its sampling settings are kept)."""
    from harness.app.serve.models import RunRequest

    manager, up = client.app.state.manager, _upload(client).json()["id"]
    for field in ("provider", "base_url", "api_key_env", "model_path", "model", "extra", "n_threads", "timeout_s"):
        r = client.post("/api/runs", json={"data": up, "llm": {"name": "tiny", field: "x"}})
        assert r.status_code == 422 and r.json()["detail"].startswith(f"llm.{field}: not a request's to set"), r.json()
    chosen = manager.prepare(RunRequest(data=up, llm={"name": "scripted", "temperature": 0.2, "max_tokens": 99,
                                                      "seed": 7})).llm_config
    assert (chosen.provider, chosen.temperature, chosen.max_tokens, chosen.seed) == (SCRIPTED, 0.2, 99, 7)
    assert manager.prepare(RunRequest(data=up, llm="tiny")).llm_config.model == "smollm2-135m-instruct"
    assert manager.prepare(RunRequest(data=up)).llm_config.provider == SCRIPTED  # the default: the first
    r = client.post("/api/runs", json={"data": up, "llm": {"name": "scripted", "max_tokens": 5000}})
    assert r.status_code == 400 and "llm.max_tokens: 5000 is over this server's limit of 4096" in r.json()["detail"]
    ws = Path(client.app.state.workspace.root)
    hostile = {"provider": "openai", "base_url": "http://127.0.0.1:9/v1", "api_key_env": "HOME",
               "model_path": "/etc/passwd", "temperature": 0.3, "extra": {"fn": "os.system"}}
    FrozenHarness.default().with_changes(llm=hostile).save(ws / "hostile.json")
    config = manager.prepare(RunRequest(data=up, harness="hostile.json")).llm_config
    assert (config.provider, config.base_url, config.model_path, config.extra) == (SCRIPTED, None, None, {})
    assert config.api_key_env == "OPENAI_API_KEY"  # the LLMConfig default: no variable named by the file
    assert config.temperature == 0.3  # the harness's sampling setting, where the operator left it open
    for place in ("uploads", "runs"):  # a harness file is the operator's: not one a request could have written
        (ws / place / "h.json").write_text((ws / "hostile.json").read_text())
        r = client.post("/api/runs", json={"data": up, "harness": f"{place}/h.json"})
        assert r.status_code == 400 and "not in runs/ or uploads/" in r.json()["detail"]


def test_limits_bound_requests_and_the_operator_raises_them(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from harness.app.serve.models import RunRequest

    raised = SETTINGS.model_copy(update={"limits": SETTINGS.limits.model_copy(
        update={"max_run_seconds": 7200, "sr_time_factor": 10, "max_population": 10_000})})
    with TestClient(create_app(tmp_path / "ws", settings=SETTINGS)) as client:
        manager, up = client.app.state.manager, _upload(client).json()["id"]
        assert manager.prepare(RunRequest(data=up)).budget.max_seconds == 1800  # no budget: the server's limit
        for over in ({"budget": {"max_seconds": 3600}}, {"sr": {"time_budget": 600}},
                     {"sr": {"population_size": 5000}}):
            r = client.post("/api/runs", json={"data": up, **over})
            assert r.status_code == 400 and "over this server's limit" in r.json()["detail"], r.json()
        r = client.post("/api/runs", json={"data": up, "sr": {"time_budget": 240.5}})  # 60 s harness x 4
        assert r.status_code == 400 and "sr.time_budget: 240.5 is over this server's limit of 240" in r.json()["detail"]
        monkeypatch.setenv("HARNESS_SR_SANDBOX", "process")  # run_python is then not confined: off for requests
        r = client.post("/api/runs", json={"data": up, "agent": {"L": 1, "tools": ["run_python"]}})
        assert r.status_code == 400 and r.json()["detail"].startswith("agent.tools: run_python is off")
    with TestClient(create_app(tmp_path / "ws2", settings=raised)) as client:
        up = _upload(client).json()["id"]
        prepared = client.app.state.manager.prepare(RunRequest(
            data=up, budget={"max_seconds": 3600}, sr={"time_budget": 600, "population_size": 5000}))
        assert prepared.budget.max_seconds == 3600 and prepared.sr["time_budget"] == 600


def test_unfinished_runs_per_client_are_capped(tmp_path: Path) -> None:
    """A client with max_runs_per_client unfinished runs gets a 429 until one ends."""
    release = threading.Event()
    llm = ScriptedLLM(fn=lambda messages, **request: release.wait(30) and scripted_role_output(messages, **request))
    capped = SETTINGS.model_copy(update={"limits": SETTINGS.limits.model_copy(update={"max_runs_per_client": 2})})
    with TestClient(create_app(tmp_path / "ws", make_client=lambda config: llm, settings=capped)) as client:
        up = _upload(client).json()["id"]
        body = {"data": up, "target": "y", "sr": {**TINY_SR, "unguided_run": False}}
        first, second = (client.post("/api/runs", json=body).json()["id"] for _ in range(2))
        r = client.post("/api/runs", json=body)
        assert r.status_code == 429 and "2 unfinished runs" in r.json()["detail"]
        client.post(f"/api/runs/{second}/stop")  # queued behind the first: stopped at once
        assert _wait(client, second)["status"] == "stopped"
        third = client.post("/api/runs", json=body)
        assert third.status_code == 201
        release.set()
        assert _wait(client, first)["status"] == "done" and _wait(client, third.json()["id"])["status"] == "done"
    assert len(list((tmp_path / "ws" / "runs").iterdir())) == 3  # the refused one left no folder


def test_the_operators_models_and_limits_from_flags_and_a_file(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture) -> None:
    from harness.app.serve.config import load_settings

    conf = tmp_path / "serve.yaml"
    conf.write_text("models:\n  gpt: {group: openai, model: gpt-4o, api_key_env: TEAM_KEY}\n  small: tiny\n"
                    "default_model: small\nlimits: {max_run_seconds: 600}\n")
    settings = load_settings(conf, ["qwen=openai,model=Qwen2.5-7B,base_url=http://gpu1:8000/v1"],
                             ["max_runs_per_client=1"])
    assert settings.names() == ["gpt", "small", "qwen"] and settings.default_model == "small"
    assert settings.models["gpt"].api_key_env == "TEAM_KEY" and settings.models["qwen"].base_url.startswith("http")
    assert (settings.limits.max_run_seconds, settings.limits.max_runs_per_client) == (600, 1)
    assert load_settings().names() == ["local", "tiny"]  # nothing configured: the embedded models
    ws = str(tmp_path / "ws")
    bad = {("--model", "x=nope"): "unknown llm group 'nope'", ("--limit", "max_run_seconds=-1"): "max_run_seconds",
           ("--limit", "colour=red"): "--limit 'colour=red'", ("--model", "x=openai,provider=no_such_mod.Client"):
           "models.x.provider", ("--config", str(tmp_path / "missing.yaml")): "missing.yaml"}
    for args, reason in bad.items():
        assert serve_main(["--workspace", ws, *args]) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith("error: ") and reason in err and "\n" not in err, err
