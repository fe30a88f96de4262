"""An optimizer evaluation as a plain job for a remote executor (``executor=ray``), and the function a worker runs.

Why plain: a Ray worker gets a pickled copy, maybe on another machine, so the job holds the harness as JSON (its
identity digest included, checked on arrival: a worker running other code would compute another digest and poison
the evaluation cache), the :class:`~harness.core.task.Task`, the seed and the settings - and the LLM *config*,
from which the worker builds its own client (``harness.app.remote.WorkerSession``). The worker returns the record
and a :class:`~harness.app.remote.Shipment`; the driver (``optimize.evaluation.Evaluator``) writes the evaluation
cache, the response cache, ``trace.jsonl`` and the run folder.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable

from harness.app.remote import Shipment, WorkerSession, worker_llm_config
from harness.core.task import Task
from optimize.records import build_record, exception_record
from workflows.harness import Harness, run_harness


@dataclass(frozen=True)
class RemoteSolve:
    """One (harness, task, seed) evaluation to run elsewhere. ``index``: the solve's number in this optimizer
    run (which endpoint of a ``base_url`` list it uses); ``run_dir``: where the driver will put its run folder
    (None: no folder kept)."""

    harness: dict[str, Any]
    task: Task
    seed: int
    llm: dict[str, Any]
    index: int
    stage: str
    label: str
    metric: str
    score_split: str
    run_dir: str | None = None
    budget: Any = None
    branch_workers: int | None = None
    cache_llm: bool = True
    runner: Callable[..., Any] | None = None


@dataclass
class RemoteOutcome:
    """The record (``EvalRecord.to_dict()``) and what the driver absorbs."""

    record: dict[str, Any]
    shipment: Shipment = field(default_factory=Shipment)


def run_remote_solve(job: RemoteSolve) -> RemoteOutcome:
    """Run ``job`` in this (worker) process. A run that raises is an ``exception`` record (not cached by the
    driver, so a later run tries again), as with the local executor."""
    spec = Harness.from_dict(job.harness)
    if spec.identity_digest != job.harness.get("digest"):
        raise RuntimeError(f"harness digest {spec.identity_digest} on this worker, {job.harness.get('digest')} on "
                           "the driver: the worker runs other code (install the same version on every node)")
    started = time.perf_counter()
    with WorkerSession(worker_llm_config(job.llm, job.index), keep_files=job.run_dir is not None,
                       cache_llm=job.cache_llm) as session:
        try:
            result = run_harness(spec, job.task, session.client, seed=job.seed, budget=job.budget,
                                 run_dir=session.run_dir, max_workers=job.branch_workers, runner=job.runner)
            record = build_record(spec, job.task, job.seed, job.stage, job.label, result,
                                  time.perf_counter() - started, None, metric=job.metric,
                                  score_split=job.score_split)
        except Exception as exc:  # noqa: BLE001 - a crashed run is a recorded failure, as locally
            record = exception_record(spec, job.task, job.seed, job.stage, job.label, exc,
                                      time.perf_counter() - started, None, metric=job.metric,
                                      score_split=job.score_split)
        record.run_dir = job.run_dir  # where the driver unpacks the folder, not this worker's temporary one
        return RemoteOutcome(record.to_dict(), session.shipment())
