"""The two ends of a remote solve: what a worker builds and sends back, and what the driver does with it.

Why: with ``executor=ray`` a solve may run on another machine, yet its results, caches and traces must end where
they end with the local executor - in the driver's run folder, written by the driver. So a worker never writes the
driver's files: :class:`WorkerSession` rebuilds the LLM client from its config (the embedded model is loaded once
per worker process by ``harness.llm.llama_runtime.load_llama``'s cache, not once per solve), solves into a private
temporary folder and records the model's answers in a private response cache; its :class:`Shipment` carries the
folder (a tar archive), the answers, the paid usage and who ran it. The driver's :func:`absorb` unpacks the folder
at the path the local executor would have used, stores the answers in the run's response cache and adds the usage
to its own client's, so cost accounting, the response cache and resume work as they do locally.

Workers do not read the driver's response cache during a solve: a call another solve already paid for is paid
again on a worker (the evaluation cache still keeps any finished solve from running twice).
"""

from __future__ import annotations

import io
import os
import shutil
import socket
import sys
import tarfile
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Mapping

from harness.llm.base import UsageCounter
from harness.llm.cache import CachedLLM
from harness.llm.config import LLMConfig
from harness.llm.factory import make_llm


@dataclass(frozen=True)
class WorkerInfo:
    """Who ran a solve: the host, the process and the Ray node (None outside Ray). Stored with each record, so a
    run shows how its solves were spread."""

    host: str
    pid: int
    node_id: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _ray_context() -> Any:
    """Ray's runtime context when this process is a Ray driver or worker (Ray is never imported here)."""
    ray = sys.modules.get("ray")
    if ray is None or not ray.is_initialized():
        return None
    return ray.get_runtime_context()


def worker_info() -> WorkerInfo:
    context = _ray_context()
    node = context.get_node_id() if context is not None else None
    return WorkerInfo(host=socket.gethostname(), pid=os.getpid(), node_id=node)


def assigned_cpus() -> float | None:
    """The CPUs Ray reserved for the running task (None outside a Ray task)."""
    context = _ray_context()
    if context is None:
        return None
    try:
        return context.get_assigned_resources().get("CPU")
    except AssertionError:  # Ray allows it only in a worker, not in the driver
        return None


def worker_llm_config(config: LLMConfig | Mapping[str, Any], index: int) -> LLMConfig:
    """The config a worker builds its client from: the ``index``-th solve's endpoint (``LLMConfig.for_solve``),
    and for the embedded model without ``n_threads`` the solve's reserved CPUs as threads (llama.cpp would
    otherwise take every core of the node, however many solves share it)."""
    cfg = config if isinstance(config, LLMConfig) else LLMConfig.model_validate(dict(config))
    cfg = cfg.for_solve(index)
    cpus = assigned_cpus()
    if cfg.provider == "local" and cfg.n_threads is None and cpus:
        cfg = cfg.model_copy(update={"n_threads": max(1, int(cpus))})
    return cfg


def pack_folder(path: Path) -> bytes | None:
    """A folder as a gzipped tar archive (None when it does not exist)."""
    if not path.is_dir():
        return None
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for item in sorted(path.rglob("*")):
            if item.is_file() and not item.is_symlink():
                tar.add(item, arcname=str(item.relative_to(path)), recursive=False)
    return buffer.getvalue()


def unpack_folder(data: bytes, dest: Path) -> None:
    """Extract :func:`pack_folder`'s archive into ``dest`` (files already there are replaced); members that
    would land outside ``dest`` are refused."""
    dest.mkdir(parents=True, exist_ok=True)
    root = dest.resolve()
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        members = tar.getmembers()
        for member in members:
            target = (root / member.name).resolve()
            if not member.isfile() or root not in target.parents:
                raise ValueError(f"refusing archive member {member.name!r}")
        if hasattr(tarfile, "data_filter"):
            tar.extractall(root, members=members, filter="data")
        else:  # pragma: no cover - Pythons without the extraction filters; members were checked above
            tar.extractall(root, members=members)


@dataclass
class Shipment:
    """What a remote solve returns besides its record (see the module docstring)."""

    files: bytes | None = None
    llm_rows: list[tuple[str, str, str, float]] = field(default_factory=list)
    usage: dict[str, float] = field(default_factory=dict)
    cache_hits: int = 0
    worker: dict[str, Any] = field(default_factory=dict)


class WorkerSession:
    """Around one solve on a worker: ``client`` (built from ``llm_config``, behind a private response cache when
    ``cache_llm``), ``run_dir`` (a private folder, or None when ``keep_files`` is off), then :meth:`shipment`."""

    def __init__(self, llm_config: LLMConfig, *, keep_files: bool = True, cache_llm: bool = True) -> None:
        self.llm_config = llm_config
        self.keep_files = keep_files
        self.cache_llm = cache_llm
        self.client: Any = None
        self.run_dir: Path | None = None
        self._tmp: Path | None = None

    def __enter__(self) -> "WorkerSession":
        self._tmp = Path(tempfile.mkdtemp(prefix="harness-sr-solve-"))
        client = make_llm(self.llm_config)
        self.client = CachedLLM(client, self._tmp / "llm_cache.db") if self.cache_llm else client
        self.run_dir = self._tmp / "run" if self.keep_files else None
        return self

    def shipment(self) -> Shipment:
        inner = getattr(self.client, "inner", self.client)
        usage = getattr(inner, "usage", None)
        return Shipment(
            files=pack_folder(self.run_dir) if self.run_dir is not None else None,
            llm_rows=self.client.export_rows() if isinstance(self.client, CachedLLM) else [],
            usage=usage.snapshot() if usage is not None else {},
            cache_hits=int(getattr(self.client, "hits", 0) or 0),
            worker=worker_info().to_dict(),
        )

    def __exit__(self, *exc: Any) -> None:
        try:
            if self.client is not None:
                self.client.close()
        finally:
            if self._tmp is not None:
                shutil.rmtree(self._tmp, ignore_errors=True)


def absorb(shipment: Shipment, *, run_dir: Path | None, llm: Any = None) -> None:
    """On the driver: the solve's folder at ``run_dir``, its answers in ``llm``'s response cache (when ``llm`` is
    a :class:`CachedLLM`), its paid usage and cache hits added to ``llm``'s (what ``optimize.pipeline.llm_paid``
    reads)."""
    if shipment.files and run_dir is not None:
        unpack_folder(shipment.files, Path(run_dir))
    if isinstance(llm, CachedLLM):
        llm.import_rows(shipment.llm_rows)
        llm.hits += shipment.cache_hits
    usage = getattr(getattr(llm, "inner", llm), "usage", None) if llm is not None else None
    if isinstance(usage, UsageCounter) and shipment.usage:
        usage.add(**{k: v for k, v in shipment.usage.items() if k in UsageCounter.FIELDS})
