"""The embedded model's CPU kernels: a probe in a child process decides, its crash is never the caller's, the verdict
is stored per (build, CPU, model) and found again, either path can be forced, and a CPU where nothing runs gets one
line that says what to do (harness.llm.cpu_kernels)."""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import pytest

from harness.llm import cpu_kernels
from harness.llm.base import LLMError

AMX_CPU = {"machine": "x86_64", "model": "Test Xeon", "flags": sorted(["amx_tile", "amx_int8", "avx512f", "avx2"])}
PLAIN_CPU = {"machine": "x86_64", "model": "Test Xeon", "flags": ["avx2", "fma"]}
BUILD = {"version": "0.3.36", "libs": [["libggml-cpu.so", 123, 1]]}

# A stand-in for the probe child: dies by ``signal`` on the listed kernel paths, else answers as the real one does.
CHILD = textwrap.dedent("""
    import json, os, signal, sys
    kernels, crash = sys.argv[1], json.loads(sys.argv[2])
    if kernels in crash:
        os.kill(os.getpid(), getattr(signal, crash[kernels]))
    print(json.dumps({"kernels": kernels, "prompt_tokens": 330, "prompt_tok_s": 50.0, "generated_tokens": 8,
                      "generation_tok_s": 10.0}))
""")


@pytest.fixture()
def machine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """A fresh cache folder, a model file, a CPU and a build; returns a function that sets which paths crash and
    counts the probes."""
    monkeypatch.setenv("HARNESS_SR_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(cpu_kernels, "_CHOSEN", {})
    monkeypatch.setattr(cpu_kernels, "cpu_description", lambda: AMX_CPU)
    monkeypatch.setattr(cpu_kernels, "build_description", lambda: BUILD)
    model = tmp_path / "model.gguf"
    model.write_bytes(b"GGUF" + b"\0" * 100)
    probes: list[str] = []
    crash: dict[str, str] = {}

    def command(path: str, kernels: str, n_threads: int, new_tokens: int) -> list[str]:
        probes.append(kernels)
        return [sys.executable, "-c", CHILD, kernels, json.dumps(crash)]

    monkeypatch.setattr(cpu_kernels, "probe_command", command)

    def set_crashes(**which: str) -> tuple[str, list[str]]:
        crash.clear()
        crash.update(which)
        return str(model), probes

    return set_crashes


@pytest.mark.parametrize("sig", ["SIGILL", "SIGSEGV"])
def test_a_probe_killed_by_a_signal_leads_to_the_portable_kernels_and_is_recorded(machine, sig: str) -> None:
    model, probes = machine(fast=sig)
    assert cpu_kernels.choose_kernels(model, "auto", 2) == "portable"  # this process is alive to say so
    assert probes == ["fast", "portable"]
    [stored] = list(cpu_kernels.verdict_folder().glob("*.json"))
    verdict = json.loads(stored.read_text())
    assert verdict["chosen"] == "portable"
    assert verdict["results"][0] == {**verdict["results"][0], "kernels": "fast", "ok": False,
                                     "outcome": f"killed by {sig}"}
    assert verdict["results"][1]["ok"] and verdict["results"][1]["prompt_tok_s"] == 50.0
    assert verdict["cpu_flags"] == ["amx_tile", "amx_int8", "avx512f", "avx2"] and verdict["llama_cpp"] == "0.3.36"


def test_fast_kernels_that_run_are_kept_and_portable_is_not_tried(machine) -> None:
    model, probes = machine()
    assert cpu_kernels.choose_kernels(model, "auto", 2) == "fast"
    assert probes == ["fast"]


def test_the_verdict_is_reused_and_redone_when_the_build_or_the_cpu_changes(machine, monkeypatch) -> None:
    model, probes = machine(fast="SIGILL")
    assert cpu_kernels.choose_kernels(model, "auto", 2) == "portable"
    assert len(probes) == 2
    monkeypatch.setattr(cpu_kernels, "_CHOSEN", {})  # a new process: only the stored verdict is left
    machine()  # the fast kernels would run now: a reused verdict must not notice
    assert cpu_kernels.choose_kernels(model, "auto", 2) == "portable" and len(probes) == 2
    assert cpu_kernels.load_or_probe(model, 2)["reused"] is True

    monkeypatch.setattr(cpu_kernels, "build_description", lambda: {**BUILD, "libs": [["libggml-cpu.so", 124, 2]]})
    monkeypatch.setattr(cpu_kernels, "_CHOSEN", {})
    assert cpu_kernels.choose_kernels(model, "auto", 2) == "fast" and probes[2:] == ["fast"]  # a rebuild: probed

    machine(fast="SIGILL")
    monkeypatch.setattr(cpu_kernels, "cpu_description", lambda: PLAIN_CPU)
    monkeypatch.setattr(cpu_kernels, "_CHOSEN", {})
    assert cpu_kernels.choose_kernels(model, "auto", 2) == "portable" and probes[3:] == ["fast", "portable"]
    assert len(list(cpu_kernels.verdict_folder().glob("*.json"))) == 3


def test_forced_paths_are_used_without_a_probe(machine) -> None:
    model, probes = machine(fast="SIGILL", portable="SIGILL")
    assert cpu_kernels.choose_kernels(model, "fast", 2) == "fast"
    assert cpu_kernels.choose_kernels(model, "portable", 2) == "portable"
    assert probes == []
    with pytest.raises(LLMError, match="auto, fast or portable"):
        cpu_kernels.choose_kernels(model, "turbo", 2)


def test_a_cpu_where_no_kernels_run_gets_one_line_naming_features_version_and_rebuild(machine) -> None:
    model, _ = machine(fast="SIGILL", portable="SIGSEGV")
    with pytest.raises(LLMError) as err:
        cpu_kernels.choose_kernels(model, "auto", 2)
    message = str(err.value)
    assert "\n" not in message
    for part in ("amx_tile", "llama-cpp-python 0.3.36", "fast: killed by SIGILL", "portable: killed by SIGSEGV",
                 "CMAKE_ARGS=", "-DGGML_NATIVE=OFF", "llama-cpp-python==0.3.36"):
        assert part in message, (part, message)


def test_portable_turns_llama_cpps_extra_buffer_types_off(monkeypatch) -> None:
    """``use_extra_bufts`` has no keyword in llama-cpp-python: the default-params function is wrapped while a model
    is built (read the way ``Llama.__init__`` reads it) and restored after."""
    import llama_cpp
    import llama_cpp.llama as llama_module

    seen: list[bool] = []

    class FakeLlama:
        def __init__(self, **kwargs):
            seen.append(bool(llama_module.llama_cpp.llama_model_default_params().use_extra_bufts))

    monkeypatch.setattr(llama_cpp, "Llama", FakeLlama)
    cpu_kernels.open_llama("m.gguf", 512, 1, "portable")
    cpu_kernels.open_llama("m.gguf", 512, 1, "fast")
    assert seen == [False, True]
    assert llama_cpp.llama_cpp.llama_model_default_params().use_extra_bufts is True  # restored


@pytest.mark.llm
def test_the_real_probe_child_measures_the_tiny_model(monkeypatch, tmp_path) -> None:
    from harness.llm.models import embedded_model_path

    result = cpu_kernels.probe(embedded_model_path("smollm2-135m-instruct"), "portable", 1, new_tokens=4)
    assert result.ok, result
    assert result.prompt_tokens > 200 and result.prompt_tok_s > 0 and result.generated_tokens == 4


@pytest.mark.llm
def test_the_default_model_answers_a_long_prompt_on_this_cpu() -> None:
    """The crash of issue 54: a 540-token prompt with the fast kernels killed the process on AMX CPUs. ``auto``
    must take kernels that run here (on such a CPU: the portable ones, after the probe saw the fast ones die)."""
    from harness.llm import make_llm

    llm = make_llm({"provider": "local", "max_tokens": 8, "temperature": 0.0})
    llm.ready()
    prompt = "Summarise these readings in one word: " + " ".join(f"x{i}={i * 0.37:.2f}" for i in range(120))
    [r] = llm.complete([{"role": "user", "content": prompt}])
    assert r.prompt_tokens > 500 and r.completion_tokens > 0
    llama, _ = llm._model()
    assert llama._harness_kernels in ("fast", "portable")


def test_a_model_that_cannot_run_stops_both_clis_in_one_line_before_any_work(tmp_path) -> None:
    import subprocess

    from tests.doubles import HYDRA_TEST_CONF

    repo = Path(__file__).resolve().parent.parent
    csv = tmp_path / "d.csv"
    csv.write_text("x,y\n" + "\n".join(f"{i},{2 * i}" for i in range(1, 30)) + "\n")
    unusable = "llm.provider=tests.doubles.UnusableModel"
    solve = subprocess.run([sys.executable, "-m", "harness", "solve", f"data={csv}", "target=y", unusable,
                            HYDRA_TEST_CONF, f"hydra.run.dir={tmp_path / 'solve'}"], cwd=repo, capture_output=True,
                           text=True, timeout=120)
    assert solve.returncode == 1
    [line] = [x for x in solve.stdout.splitlines() if "cannot run on this CPU" in x]
    assert line.startswith("error:") and "CMAKE_ARGS=" in line and "llama-cpp-python 0.3.36" in line
    run = tmp_path / "opt"
    opt = subprocess.run([sys.executable, "-m", "optimize", "stage=init", unusable, HYDRA_TEST_CONF,
                          "benchmark=toy", f"hydra.run.dir={run}"], cwd=repo, capture_output=True, text=True,
                         timeout=120)
    assert opt.returncode == 1 and "cannot run on this CPU" in opt.stdout + opt.stderr
    assert not (run / "stage1_init.json").exists() and not (run / "trace.jsonl").exists()  # no work was done
