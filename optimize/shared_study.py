"""One Optuna study run by several worker processes (stage 2), with Optuna's public machinery only.

- Dead workers: the RDB storage records a heartbeat per running trial; ``optuna.storages.fail_stale_trials``
  (Optuna calls it before every trial, ``run_until_complete`` while it waits) fails a trial whose heartbeat
  stopped ``grace_period`` seconds ago, and the retry callback queues it again with the same parameters. The
  evaluation cache makes the retried trial's finished task runs free.
- Exactly ``n_trials``: ``MaxTrialsCallback`` counting COMPLETE + RUNNING trials stops a worker once the slots are
  taken; a trial that still finds them taken (two workers starting a trial at once) is pruned (``slots_taken``).
  A worker whose loop stopped waits while other workers' trials run, and runs the retries, until ``n_trials`` are
  COMPLETE, so every worker leaves with the same complete trials.
- Duplicates: ``twin`` finds another worker's COMPLETE or earlier RUNNING trial with the same parameters (each
  trial records its ``worker``); the caller prunes. A retried or enqueued trial is never a twin.
- Samplers: ``join`` records the worker in the study; one that finds others there gets its own sampler seed.
"""

from __future__ import annotations

import logging
import os
import socket
import time
import warnings
from collections import Counter
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta

import optuna
from optuna.storages import RDBStorage, RetryFailedTrialCallback
from optuna.study import MaxTrialsCallback
from optuna.trial import FrozenTrial, Trial, TrialState

log = logging.getLogger(__name__)
POLL_SECONDS = 1.0
# A RUNNING trial that never named its worker this long after it started was killed between Optuna's ask() and
# its first heartbeat: no heartbeat will ever mark it stale, so it is failed by age.
UNNAMED_SECONDS = 120.0


def make_storage(url: str, heartbeat_interval: int, grace_period: int | None, max_retry: int) -> RDBStorage:
    """RDB storage (SQLite or a server) with heartbeats; a stale trial is failed and retried ``max_retry`` times.

    Heartbeats and the retry callback are marked experimental; their names from before Optuna 4.9 (valid up to 6,
    pyproject's bound) warn as deprecated from 4.9 on."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        warnings.simplefilter("ignore", FutureWarning)
        return RDBStorage(
            url,
            engine_kwargs={"connect_args": {"timeout": 60}} if url.startswith("sqlite") else None,
            heartbeat_interval=heartbeat_interval,
            grace_period=grace_period,
            failed_trial_callback=RetryFailedTrialCallback(max_retry=max_retry),
        )


def worker_id() -> str:
    """This process's name in the study's records (``host:pid``)."""
    return f"{socket.gethostname()}:{os.getpid()}"


def join(study: optuna.Study) -> bool:
    """Record this worker in the study; True when other workers joined it before (alive or not)."""
    me = f"worker/{worker_id()}"
    study.set_user_attr(me, time.time())
    return any(key.startswith("worker/") and key != me for key in study.user_attrs)


def slots_taken(trials: Sequence[FrozenTrial], number: int, n_trials: int) -> bool:
    """Do COMPLETE trials and RUNNING or WAITING ones numbered before ``number`` fill ``n_trials``?

    Trial numbers are unique and ordered, so of two workers that start a trial for the last slot at once exactly
    one runs; an earlier trial that dies is retried (a WAITING trial) and keeps its slot."""
    active = (TrialState.RUNNING, TrialState.WAITING)
    return sum(t.state == TrialState.COMPLETE or (t.state in active and t.number < number) for t in trials) >= n_trials


def twin(trials: Sequence[FrozenTrial], number: int) -> FrozenTrial | None:
    """Another worker's COMPLETE, or earlier RUNNING, trial with the parameters of trial ``number``, if any.

    Only other workers' trials count: one process's sampler repeating itself in a small space is an evaluation
    cache hit; two processes evaluating one point is the waste avoided. Retried and enqueued trials run."""
    me = next(t for t in trials if t.number == number)
    if {"fixed_params", "failed_trial"} & set(me.system_attrs):
        return None
    worker = me.user_attrs.get("worker")
    for t in trials:
        if (t.number != number and t.params == me.params and t.user_attrs.get("worker") not in (None, worker)
                and (t.state == TrialState.COMPLETE or (t.state == TrialState.RUNNING and t.number < number))):
            return t
    return None


def fail_stale(study: optuna.Study) -> None:
    """Fail (and retry) trials whose heartbeat stopped, and fail RUNNING trials that never named their worker."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        optuna.storages.fail_stale_trials(study)
    cutoff = datetime.now() - timedelta(seconds=UNNAMED_SECONDS)
    for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        if "worker" not in t.user_attrs and t.datetime_start is not None and t.datetime_start < cutoff:
            log.warning("stage 2: trial %d never started its objective; failing it", t.number)
            study.tell(t.number, state=TrialState.FAIL, skip_if_finished=True)


def run_until_complete(study: optuna.Study, objective: Callable[[Trial], float], n_trials: int,
                       callbacks: Sequence[Callable[[optuna.Study, FrozenTrial], None]],
                       halted: Callable[[], bool]) -> None:
    """Run trials until ``n_trials`` are COMPLETE in the study (all workers together) or ``halted()``.

    While the other workers' trials fill the open slots this worker waits; it runs again when a slot opens (a
    trial failed without a retry) or a retry is queued."""
    stop_when_full = MaxTrialsCallback(n_trials, states=(TrialState.COMPLETE, TrialState.RUNNING))
    waited = False
    while not halted():
        fail_stale(study)
        states = Counter(t.state for t in study.get_trials(deepcopy=False))
        if states[TrialState.COMPLETE] >= n_trials:
            return
        if states[TrialState.COMPLETE] + states[TrialState.RUNNING] < n_trials or states[TrialState.WAITING]:
            study.optimize(objective, n_trials=None, callbacks=[stop_when_full, *callbacks], catch=(Exception,),
                           gc_after_trial=False)
            waited = False
        else:
            if not waited:
                log.info("stage 2: waiting for %d running trial(s) of other workers", states[TrialState.RUNNING])
                waited = True
            time.sleep(POLL_SECONDS)
