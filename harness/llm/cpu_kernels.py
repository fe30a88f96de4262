"""Which llama.cpp CPU kernels the embedded model runs with, decided before this process depends on them.

* ``fast``: llama.cpp's extra buffer types, its fastest kernels where the CPU has them (AMX tiles on recent Intel
  Xeons, weights repacked for AVX2 / AVX-512 / NEON);
* ``portable``: its plain CPU kernels (``llama_model_params.use_extra_bufts = False``, what mainline's
  ``--no-repack`` sets), compiled for the same CPU but without those paths.

Why a choice at all: on some CPUs the fast kernels kill the process. On a Xeon VM advertising AMX, llama-cpp-python
0.3.36 built with native flags dies with SIGILL (``tilezero`` in ``ggml_backend_amx_mul_mat``) on the first prompt
longer than a few dozen tokens, taking the optimizer and pytest down with it (llama.cpp issue 28328, pull request
26954: the tile state is not set up where the kernels run). A signal cannot be caught in the process that receives
it, so ``auto`` (the default, ``llm.cpu_kernels``) decides in a child process: :func:`probe` loads the model the
way :func:`open_llama` will and decodes a few hundred tokens at the production batch size, first with the fast
kernels, then, if the child died or failed, with the portable ones. The verdict is stored in the cache folder
(``<cache>/cpu-kernels/<key>.json``) under a key of the llama-cpp-python build (version and its shared libraries'
sizes and times), the CPU (model name and flags) and the model file, so it is paid once per machine and build and
found again after a rebuild or on another CPU. If neither path runs, :func:`choose_kernels` raises one
:class:`LLMError` line naming the CPU's features, the llama-cpp-python version and the rebuild that avoids them.

The child is this module: ``python -m harness.llm.cpu_kernels MODEL_PATH fast|portable N_THREADS``, printing one
JSON line with its tokens per second (``scripts/bench_llm_local.py`` reads them).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import os
import platform
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Iterator, Literal

from harness.core.paths import cache_dir
from harness.llm.base import LLMError

log = logging.getLogger(__name__)

CpuKernels = Literal["auto", "fast", "portable"]
KERNEL_PATHS: tuple[str, ...] = ("fast", "portable")  # the order auto tries them in
VERDICT_VERSION = 1  # bump when the probe changes what it proves
PROBE_TIMEOUT_S = 300.0  # a 1.1 GB model and 300 prompt tokens take ~15 s on 2 cores; a hang is a failure too
PROBE_PROMPT_WORDS = 160  # ~330 tokens: several decodes of N_BATCH, past the size where the AMX kernels start
PROBE_NEW_TOKENS = 8
# Prompt tokens per decode, in the probe as in every real call: small enough that a thread change reaches a long
# prompt's evaluation within a few seconds (llama_runtime.ThreadFollower), large enough to cost nothing measurable
# (64 vs 512: 20 tok/s both, 2 cores).
N_BATCH = 64
# The CPU features whose kernels llama.cpp chooses at build time (-march=native) and that hypervisors may refuse.
NOTABLE_FLAGS = ("amx_tile", "amx_int8", "amx_bf16", "avx512f", "avx512_vnni", "avx512_bf16", "avx512_fp16",
                 "avx_vnni", "avx2", "fma", "f16c")
REBUILD_HINT = ('CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX512=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF '
                '-DGGML_AMX_BF16=OFF" pip install --force-reinstall --no-cache-dir --no-deps llama-cpp-python=={v}')


# -- opening a model with a kernel choice -------------------------------------------------------------------------


@contextlib.contextmanager
def kernels_for_new_models(kernels: str) -> Iterator[None]:
    """Every ``llama_cpp.Llama`` built inside the block runs on ``kernels`` (``fast`` or ``portable``).

    llama-cpp-python has no keyword for ``use_extra_bufts``, so its default-params function is wrapped for the
    block and restored after. Not for concurrent use: callers hold a lock (``llama_runtime._CACHE_LOCK``) or are a
    process of their own (the probe's child; the tests' ``llama_cpp.server``)."""
    import llama_cpp
    import llama_cpp.llama as llama_module

    if kernels not in KERNEL_PATHS:
        raise ValueError(f"kernels must be one of {KERNEL_PATHS}, not {kernels!r}")
    if kernels == "fast":  # llama.cpp's own default
        yield
        return
    if "use_extra_bufts" not in {name for name, _ in llama_cpp.llama_model_params._fields_}:
        raise LLMError(f"llama-cpp-python {llama_cpp.__version__} cannot turn its fast CPU kernels off (no "
                       "use_extra_bufts): upgrade it (pip install -U llama-cpp-python) or set llm.cpu_kernels=fast")
    original = llama_module.llama_cpp.llama_model_default_params

    def portable_params() -> Any:
        params = original()
        params.use_extra_bufts = False
        return params

    llama_module.llama_cpp.llama_model_default_params = portable_params
    try:
        yield
    finally:
        llama_module.llama_cpp.llama_model_default_params = original


def open_llama(path: str, n_ctx: int, n_threads: int, kernels: str) -> Any:
    """A ``llama_cpp.Llama`` for ``path`` on ``kernels`` (``fast`` or ``portable``), ``N_BATCH`` tokens per decode."""
    from llama_cpp import Llama

    with kernels_for_new_models(kernels):
        return Llama(model_path=path, n_ctx=n_ctx, n_threads=n_threads, n_threads_batch=n_threads, n_batch=N_BATCH,
                     verbose=False)


# -- what the verdict depends on ---------------------------------------------------------------------------------


def cpu_description() -> dict[str, Any]:
    """The CPU as llama.cpp's build sees it: model name and feature flags (Linux ``/proc/cpuinfo``; elsewhere the
    platform's processor string, which is all a verdict can key on there)."""
    name, flags = platform.processor() or platform.machine(), []
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as fh:
            for line in fh:
                key, _, value = line.partition(":")
                key = key.strip()
                if key == "model name" and name in ("", platform.machine(), platform.processor()):
                    name = value.strip()
                elif key in ("flags", "Features") and not flags:
                    flags = sorted(value.split())
    except OSError:
        pass
    return {"machine": platform.machine(), "model": name, "flags": flags}


def notable_flags(cpu: dict[str, Any]) -> list[str]:
    """The flags behind llama.cpp's build-time kernel choices that this CPU advertises (for messages)."""
    have = set(cpu.get("flags") or ())
    return [f for f in NOTABLE_FLAGS if f in have]


def build_description() -> dict[str, Any]:
    """llama-cpp-python's version and its shared libraries (name, size, mtime): a rebuild changes them."""
    import llama_cpp

    folder = Path(llama_cpp.__file__).resolve().parent / "lib"
    libs = []
    for lib in sorted(folder.glob("*.so*")) + sorted(folder.glob("*.dylib")) + sorted(folder.glob("*.dll")):
        st = lib.stat()
        libs.append([lib.name, st.st_size, st.st_mtime_ns])
    return {"version": getattr(llama_cpp, "__version__", "unknown"), "libs": libs}


def verdict_key(model_path: str, n_threads: int, *, cpu: dict[str, Any] | None = None,
                build: dict[str, Any] | None = None) -> str:
    """Digest of everything a verdict depends on: the build, the CPU, the model file, the thread count."""
    st = os.stat(model_path)
    what = {"v": VERDICT_VERSION, "build": build or build_description(), "cpu": cpu or cpu_description(),
            "model": [os.path.basename(model_path), st.st_size], "threads": n_threads, "batch": N_BATCH}
    return hashlib.sha256(json.dumps(what, sort_keys=True).encode()).hexdigest()[:24]


def verdict_folder() -> Path:
    return cache_dir() / "cpu-kernels"


# -- the probe ---------------------------------------------------------------------------------------------------


@dataclass
class ProbeResult:
    """One kernel path tried in a child process: ``ok``, or how the child ended (a signal, an error, a hang)."""

    kernels: str
    ok: bool
    outcome: str  # "ok", "killed by SIGILL", "exit code 3: <error>", "no answer within 300 s"
    seconds: float
    prompt_tokens: int = 0
    prompt_tok_s: float = 0.0
    generated_tokens: int = 0
    generation_tok_s: float = 0.0


def probe_command(model_path: str, kernels: str, n_threads: int, new_tokens: int) -> list[str]:
    """The child's command line (a module attribute so tests can stand in a child that crashes)."""
    return [sys.executable, "-m", "harness.llm.cpu_kernels", model_path, kernels, str(n_threads), str(new_tokens)]


def probe(model_path: str, kernels: str, n_threads: int, *, new_tokens: int = PROBE_NEW_TOKENS,
          timeout_s: float = PROBE_TIMEOUT_S) -> ProbeResult:
    """Run the model on ``kernels`` in a child process; its crash is recorded here, never felt."""
    started = time.perf_counter()
    cmd = probe_command(model_path, kernels, n_threads, new_tokens)
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, errors="replace")
    except subprocess.TimeoutExpired:
        return ProbeResult(kernels, False, f"no answer within {timeout_s:g} s", time.perf_counter() - started)
    seconds = time.perf_counter() - started
    if done.returncode < 0:
        try:
            name = signal.Signals(-done.returncode).name
        except ValueError:
            name = f"signal {-done.returncode}"
        return ProbeResult(kernels, False, f"killed by {name}", seconds)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1][:300]
        return ProbeResult(kernels, False, f"exit code {done.returncode}: {tail}", seconds)
    report = json.loads(lines[-1])
    return ProbeResult(kernels, True, "ok", seconds, **{k: report[k] for k in
                                                        ("prompt_tokens", "prompt_tok_s", "generated_tokens",
                                                         "generation_tok_s")})


def _probe_child(model_path: str, kernels: str, n_threads: int, new_tokens: int) -> dict[str, Any]:
    """The child's work: load, evaluate ~330 prompt tokens in N_BATCH decodes, generate ``new_tokens``."""
    llama = open_llama(model_path, n_ctx=2048, n_threads=n_threads, kernels=kernels)
    words = " ".join(f"x{i} = {i * 0.37:.2f};" for i in range(PROBE_PROMPT_WORDS // 4))
    prompt = f"Variables of an experiment: {words} Name the largest value."
    tokens = llama.tokenize(prompt.encode())
    started = time.perf_counter()
    llama.eval(tokens)
    prompt_s = time.perf_counter() - started
    started, generated = time.perf_counter(), 0
    for _ in llama.generate(tokens, temp=0.0):  # greedy, from the evaluated prompt (a full-prefix cache hit)
        generated += 1
        if generated >= new_tokens:
            break
    gen_s = time.perf_counter() - started
    llama.close()
    return {"kernels": kernels, "prompt_tokens": len(tokens), "prompt_tok_s": round(len(tokens) / prompt_s, 2),
            "generated_tokens": generated, "generation_tok_s": round(generated / max(gen_s, 1e-9), 2)}


# -- the choice --------------------------------------------------------------------------------------------------

_CHOSEN: dict[tuple[str, int, str], str] = {}  # per process: (model, threads, requested) -> path


def choose_kernels(model_path: str, requested: str, n_threads: int) -> str:
    """The kernel path to load ``model_path`` with: ``requested`` when forced, else the stored verdict, else the
    probe's (stored). Raises :class:`LLMError` (one line) when no path runs."""
    if requested in KERNEL_PATHS:
        return requested
    if requested != "auto":
        raise LLMError(f"llm.cpu_kernels must be auto, fast or portable, not {requested!r}")
    memo = (os.path.realpath(model_path), n_threads, requested)
    if memo in _CHOSEN:
        return _CHOSEN[memo]
    verdict = load_or_probe(model_path, n_threads)
    chosen = verdict.get("chosen")
    if chosen not in KERNEL_PATHS:
        raise LLMError(no_kernels_message(verdict))
    if chosen != "fast":
        log.warning("embedded model: llama.cpp's fast CPU kernels do not run on this CPU (%s); using the portable "
                    "ones (llm.cpu_kernels=fast forces the fast ones; verdict %s)", verdict["results"][0]["outcome"],
                    verdict.get("path"))
    _CHOSEN[memo] = chosen
    return chosen


def load_or_probe(model_path: str, n_threads: int) -> dict[str, Any]:
    """The stored verdict for this build, CPU, model and thread count, or a new one (probes under a file lock, so
    processes starting together probe once)."""
    folder = verdict_folder()
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise LLMError(f"cannot create {folder} for the CPU-kernel verdict: {exc}; set HARNESS_SR_CACHE to a "
                       "writable folder or llm.cpu_kernels=fast|portable") from exc
    cpu, build = cpu_description(), build_description()
    path = folder / f"{verdict_key(model_path, n_threads, cpu=cpu, build=build)}.json"
    with open(path.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        stored = _read(path)
        if stored is not None:
            return {**stored, "path": str(path), "reused": True}
        results: list[ProbeResult] = []
        for kernels in KERNEL_PATHS:
            results.append(probe(model_path, kernels, n_threads))
            log.info("embedded model: CPU kernels %s: %s (%.1f s)", kernels, results[-1].outcome, results[-1].seconds)
            if results[-1].ok:
                break
        verdict = {"version": VERDICT_VERSION, "chosen": next((r.kernels for r in results if r.ok), None),
                   "results": [asdict(r) for r in results], "model": os.path.basename(model_path),
                   "threads": n_threads, "llama_cpp": build["version"], "cpu_model": cpu["model"],
                   "cpu_flags": notable_flags(cpu), "created": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
        tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(verdict, indent=1))
        os.replace(tmp, path)
        return {**verdict, "path": str(path), "reused": False}


def _read(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and data.get("version") == VERDICT_VERSION else None


def no_kernels_message(verdict: dict[str, Any]) -> str:
    """One line: what failed, on which CPU features, with which build, and the rebuild that avoids them."""
    how = "; ".join(f"{r['kernels']}: {r['outcome']}" for r in verdict.get("results", []))
    flags = ", ".join(verdict.get("cpu_flags") or []) or "none of the usual"
    version = verdict.get("llama_cpp", "unknown")
    return (f"the embedded model cannot run on this CPU ({verdict.get('cpu_model', 'unknown')}; features {flags}) "
            f"with llama-cpp-python {version} ({how}); rebuild it without the native CPU kernels: "
            f"{REBUILD_HINT.format(v=version)}, or use another LLM (llm=openai)")


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 4:
        print("usage: python -m harness.llm.cpu_kernels MODEL_PATH fast|portable N_THREADS NEW_TOKENS",
              file=sys.stderr)
        return 2
    try:
        report = _probe_child(args[0], args[1], int(args[2]), int(args[3]))
    except Exception as exc:  # noqa: BLE001 - the parent reads the last stderr line
        print(f"{type(exc).__name__}: {exc}", file=sys.stderr)
        return 3
    print(json.dumps(report), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
