"""``executor=ray``: one Ray task per solve, with the per-solve resources of the ``executor`` config.

Why Ray tasks (not actors): solves are independent and stateless from the driver's side; what a worker process
keeps between solves (the embedded model, ``harness.llm.llama_runtime.load_llama``'s per-process cache; the SR
worker children) is process state that Ray's worker reuse gives for free. The driver connects once
(``ray.init(address=...)``), only if no Ray session is up yet, and shuts down only what it started.

What crosses the wire must pickle: callers send plain specs (a harness as JSON, the ``Task``, the seed, settings,
an LLM *config*) and rebuild clients on the worker; results come back to the driver, which writes every file
(``harness.app.remote``). A worker process that dies mid-solve is retried ``max_retries`` times by Ray, then its
solve is a failure delivered to the caller's ``on_error`` (a recorded failure, never a lost result).
"""

from __future__ import annotations

import logging
import math
import socket
from typing import Any, Callable, Iterable, TypeVar
from urllib.parse import urlparse

from harness.app.executor import ExecutorConfig, ExecutorError, OnError, OnResult, run_bounded

log = logging.getLogger(__name__)

T = TypeVar("T")
R = TypeVar("R")


def _apply(fn: Callable[[Any], Any], item: Any) -> Any:
    """The Ray task: one solve (module level, so workers import it by reference)."""
    return fn(item)


def probe_address(address: str, timeout_s: float) -> None:
    """Fail fast with a clear message when an explicit ``host:port`` / ``ray://host:port`` does not answer (Ray's
    own connect would retry for a long time and then report something less readable)."""
    if address in ("auto", "local", ""):
        return
    parsed = urlparse(address if "://" in address else f"gcs://{address}")
    if not parsed.hostname or not parsed.port:
        raise ExecutorError(f"executor.address={address!r}: expected auto, local, ray://host:port or host:port")
    try:
        with socket.create_connection((parsed.hostname, parsed.port), timeout=timeout_s):
            pass
    except OSError as exc:
        raise ExecutorError(
            f"no Ray cluster answers at {address} ({type(exc).__name__}: {exc}); start one (`ray start --head`), "
            "fix executor.address, or use executor.address=local for a private one on this machine") from exc


class RayExecutor:
    """Solves as Ray tasks (see the module docstring); ``slots`` = solves in flight at once."""

    name = "ray"
    remote = True

    def __init__(self, config: ExecutorConfig) -> None:
        try:
            import ray
        except ImportError as exc:
            raise ExecutorError('executor=ray needs Ray: pip install "harness-sr[ray]" (or "ray>=2.9")') from exc
        self._ray = ray
        self.config = config
        self._owned = False
        if not ray.is_initialized():
            probe_address(config.address, config.connect_timeout_s)
            kwargs: dict[str, Any] = {"runtime_env": config.runtime_env}
            if "://" not in config.address:  # Ray Client forwards every argument to the server's ray.init
                kwargs.update(log_to_driver=False, logging_level=logging.WARNING)
            if config.address == "local":  # a new instance: no dashboard (one more process, a port)
                kwargs["include_dashboard"] = False
            try:
                ray.init(address=config.address, **kwargs)
            except ImportError as exc:  # ray:// needs Ray Client's gRPC
                raise ExecutorError(f"executor.address={config.address!r} needs Ray Client: "
                                    f'pip install "ray[client]" ({exc})') from exc
            except (ConnectionError, RuntimeError, ValueError) as exc:
                raise ExecutorError(f"could not connect to Ray at executor.address={config.address!r}: "
                                    f"{type(exc).__name__}: {exc}") from exc
            self._owned = True
        options: dict[str, Any] = {"num_cpus": config.num_cpus, "max_retries": config.max_retries}
        if config.num_gpus:
            options["num_gpus"] = config.num_gpus
        if config.memory_gb:
            options["memory"] = int(config.memory_gb * 2**30)
        self._task = ray.remote(_apply).options(**options)
        self._slots = config.max_in_flight or self._cluster_slots()
        log.info("ray executor: %d solves in flight, %s CPU each (cluster %s)", self._slots, config.num_cpus,
                 ray.cluster_resources())

    def _cluster_slots(self) -> int:
        cpus = float(self._ray.cluster_resources().get("CPU", 1.0))
        return max(1, int(math.floor(cpus / self.config.num_cpus + 1e-9)))

    @property
    def slots(self) -> int:
        return self._slots

    def map(self, fn: Callable[[T], R], items: Iterable[T], *, on_result: OnResult | None = None,
            on_error: OnError | None = None) -> list[R]:
        ray = self._ray
        fn_ref = ray.put(fn)  # shipped once per map, not once per solve

        def wait_any(refs: list[Any]) -> list[Any]:
            ready, _ = ray.wait(refs, num_returns=1)
            return ready

        return run_bounded(lambda item: self._task.remote(fn_ref, item), wait_any, ray.get, items, self._slots,
                           on_result=on_result, on_error=on_error)

    def close(self) -> None:
        if self._owned and self._ray.is_initialized():
            self._ray.shutdown()
        self._owned = False
