"""llama.cpp models in this process: loaded once per ``(path, n_ctx, n_threads, kernels)`` and shared by every client
with those settings (each use holds the model's lock), a RAM cache of recent prompt states, and the thread count of
a running call kept at what the SR engines leave free. The CPU kernels are chosen before the first load
(:mod:`harness.llm.cpu_kernels`: a probe in a child process, so a CPU whose fast kernels crash never crashes this
one). :mod:`harness.llm.local_client` is the client on top."""

from __future__ import annotations

import atexit
import os
import threading
from typing import Any, Callable

from harness.llm.base import LLMError
from harness.llm.cpu_kernels import choose_kernels, open_llama

# RAM for recent calls' model states (see _attach_prompt_cache); HARNESS_SR_PROMPT_CACHE_MB overrides, 0 = off.
PROMPT_CACHE_BYTES = int(float(os.environ.get("HARNESS_SR_PROMPT_CACHE_MB", "1024")) * 2**20)


# -- model cache ------------------------------------------------------------------------------------------------

_CACHE: dict[tuple[str, int, int, str], tuple[Any, threading.Lock]] = {}
_CACHE_LOCK = threading.Lock()


@atexit.register
def _close_cached_models() -> None:
    """Free cached models while the interpreter still works (llama.cpp's __del__ fails during shutdown)."""
    with _CACHE_LOCK:
        for llama, _ in _CACHE.values():
            try:
                llama.close()
            except Exception:  # noqa: BLE001 - best effort at exit
                pass
        _CACHE.clear()


def load_llama(path: str, n_ctx: int, n_threads: int, cpu_kernels: str = "auto") -> tuple[Any, threading.Lock]:
    """The cached ``(Llama, lock)`` for these settings, loading the model on first use (``cpu_kernels``: auto, fast
    or portable; auto asks :func:`~harness.llm.cpu_kernels.choose_kernels`, which probes once per machine)."""
    if not os.path.isfile(path):
        raise LLMError(f"local model: GGUF file not found: {path}")
    try:
        import llama_cpp  # noqa: F401 - a clear error before any probe
    except ImportError as exc:
        raise LLMError("provider 'local' needs llama-cpp-python: pip install llama-cpp-python") from exc
    kernels = choose_kernels(path, cpu_kernels, n_threads)
    key = (os.path.realpath(path), n_ctx, n_threads, kernels)
    with _CACHE_LOCK:
        if key not in _CACHE:
            try:
                llama = open_llama(path, n_ctx, n_threads, kernels)
                trained = _trained_context(llama)
                if trained and n_ctx > trained:  # beyond the trained window output degrades: clamp
                    llama.close()
                    llama = open_llama(path, trained, n_threads, kernels)
            except LLMError:
                raise
            except Exception as exc:  # noqa: BLE001 - llama.cpp raises plain ValueError/RuntimeError
                raise LLMError(f"local model: could not load {path}: {type(exc).__name__}: {exc}") from exc
            llama._harness_kernels = kernels
            _attach_prompt_cache(llama)
            _CACHE[key] = (llama, threading.Lock())
        return _CACHE[key]


def _attach_prompt_cache(llama: Any) -> None:
    """Keep the model state after each call in RAM (llama-cpp-python's ``LlamaRAMCache``, LRU, about 60 MB a call),
    so a later prompt that shares a prefix with *any* recent call - not only the last one - skips evaluating it.

    Why: prompt evaluation is most of a role call on a CPU (a 750-token prompt: 37 s of 72 s here), and the
    optimizer asks the same role about the same task again and again with other instructions or workflows, with
    other calls in between that evict llama.cpp's single KV slot. Measured: the same card with another role text
    after an unrelated call, 29 s instead of 44 s. ``PROMPT_CACHE_BYTES`` = 0 turns it off."""
    if PROMPT_CACHE_BYTES <= 0:
        return
    try:
        from llama_cpp import LlamaRAMCache

        llama.set_cache(LlamaRAMCache(capacity_bytes=PROMPT_CACHE_BYTES))
    except Exception:  # noqa: BLE001 - older bindings: no prompt cache, same answers
        pass


def _trained_context(llama: Any) -> int | None:
    """The model's trained context length from the GGUF metadata (``<arch>.context_length``), if present."""
    for key, value in (getattr(llama, "metadata", None) or {}).items():
        if key.endswith(".context_length"):
            try:
                return int(value)
            except ValueError:
                return None
    return None


class ThreadFollower:
    """Keeps a running call's thread count at ``threads_now()`` while it runs: an SR run that ends mid-call gives
    its core back to the model (and one that starts takes it), instead of the call keeping the count it began with.

    Why: a role call begins beside the engine's unguided run, so it started on one thread and kept it to the end,
    even when that run lasted 3 s of a 90 s call (the optimizer's training runs): 128 s against 72 s on two
    threads for a planner call here. llama.cpp reads the count at every decode, and the model is loaded with a
    small ``n_batch`` (:data:`harness.llm.cpu_kernels.N_BATCH`) so a long prompt is evaluated in several decodes that each see it."""

    PERIOD_S = 0.25

    def __init__(self, llama: Any, threads_now: Callable[[], int]) -> None:
        self.llama, self.threads_now = llama, threads_now
        self._done = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        _set_threads(self.llama, self.threads_now())
        self._thread = threading.Thread(target=self._follow, name="llm-threads", daemon=True)
        self._thread.start()

    def _follow(self) -> None:
        while not self._done.wait(self.PERIOD_S):
            _set_threads(self.llama, self.threads_now())

    def stop(self) -> None:
        self._done.set()
        if self._thread is not None:
            self._thread.join()


def _set_threads(llama: Any, n: int) -> None:
    """Generation threads for the next decode (llama.cpp reads them per decode); best effort on old bindings."""
    if getattr(llama, "_harness_threads", None) == n:
        return
    try:
        import llama_cpp

        llama_cpp.llama_set_n_threads(llama.ctx, n, n)
        llama._harness_threads = n
    except Exception:  # noqa: BLE001 - keep the load-time setting
        pass
