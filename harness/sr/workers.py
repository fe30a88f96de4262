"""SR engine runs in worker processes: a crash in native code is a failed run, not a dead solve.

Why: Operon is C++; on some inputs it segfaults, and a segfault in-process kills the user's interpreter (and the
run's answer with it). It also cannot be interrupted before its time budget. Here each run goes to a persistent
worker process (spawned once, reused): the task's arrays are sent once per worker, then only the plan. The
parent waits with a deadline (the run's seconds plus a grace period) and watches the cancel flag; a worker that
dies (signal named), hangs past the deadline or is cancelled is killed and replaced, and the run comes back as
an :class:`EngineFailure` with the reason.

The worker rebuilds the run context from (task, seed, fit settings), so candidates are fitted and scored on
exactly the splits the parent uses. Engines that need the parent's LLM client (``llm``, ``hybrid``) stay
in-process.
"""

from __future__ import annotations

import atexit
import os
import pickle
import select
import signal
import struct
import subprocess
import sys
import threading
import time
import traceback
from dataclasses import dataclass
from typing import Any

from harness.core.context import AgentContext

__all__ = ["EngineFailure", "run_in_worker", "shutdown_workers", "PROCESS_ENGINES", "GRACE_SECONDS"]

PROCESS_ENGINES = {"operon": "harness.sr.operon_backend:run_operon"}
GRACE_SECONDS = 15.0  # past the engine's own time: refit of the front, pickling
STARTUP_SECONDS = 120.0  # a new worker's imports; not counted in a run's deadline (a loaded machine is slow here)
POLL_SECONDS = 0.1
MAX_CACHED_TASKS = 4


# what an EngineFailure says when seconds, not the engine, ended the run (a work-bound evaluation counts it)
PAST_DEADLINE = "ran past its deadline"


class EngineFailure(RuntimeError):
    """The engine's process died, hung past its deadline or was cancelled; the message says which."""


@dataclass
class _Job:
    engine: str  # "module:function", resolved from PROCESS_ENGINES in the parent (the one table of engines)
    plan: Any
    task_key: str
    seed: int
    fit: Any
    max_seconds: float
    extras: dict[str, Any]


def task_key(task: Any) -> str:
    """Fingerprint of a task's data and names (``Task.fingerprint``), so a worker keeps it and is sent only plans
    afterwards."""
    return task.fingerprint()


# -- the worker process -----------------------------------------------------------------------------------------
# A plain ``python -m harness.sr.workers`` child speaking length-prefixed pickle frames over its stdin/stdout:
# unlike multiprocessing's spawn/forkserver it never re-imports the user's ``__main__`` (a script or notebook
# without a main guard keeps working), and unlike fork it is safe beside the parent's threads.

def _send(stream: Any, obj: Any) -> None:
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    stream.write(struct.pack("<Q", len(data)) + data)
    stream.flush()


def _recv(stream: Any) -> Any:
    head = _read_exact(stream, 8)
    return pickle.loads(_read_exact(stream, struct.unpack("<Q", head)[0]))


def _read_exact(stream: Any, n: int) -> bytes:
    chunks, got = [], 0
    while got < n:
        chunk = stream.read(n - got)
        if not chunk:
            raise EOFError("worker pipe closed")
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def serve() -> None:
    """Worker loop: ("task", key, task) stores data, ("run", job) runs an engine and answers."""
    import importlib

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides when a run stops
    out = os.fdopen(os.dup(1), "wb")  # the protocol's channel; plain prints go to stderr instead
    os.dup2(2, 1)
    inp = os.fdopen(os.dup(0), "rb")
    for spec in PROCESS_ENGINES.values():  # the heavy imports, before the parent starts a run's clock
        try:
            importlib.import_module(spec.split(":")[0])
        except Exception:  # noqa: BLE001 - reported by the run that needs the engine
            pass
    _send(out, ("ready",))
    tasks: dict[str, Any] = {}
    while True:
        try:
            message = _recv(inp)
        except (EOFError, OSError):
            return
        if message[0] == "task":
            _, key, task = message
            tasks[key] = task
            while len(tasks) > MAX_CACHED_TASKS:
                tasks.pop(next(iter(tasks)))
            continue
        job: _Job = message[1]
        try:
            module, func = job.engine.split(":")
            engine = getattr(importlib.import_module(module), func)
            context = AgentContext(task=tasks[job.task_key], seed=job.seed, fit=job.fit)
            context.extras.update(job.extras)
            reply: tuple[Any, ...] = ("ok", engine(job.plan, context, max_seconds=job.max_seconds))
        except BaseException as exc:  # noqa: BLE001 - reported to the parent, which decides
            reply = ("error", exc if _picklable(exc) else RuntimeError(f"{type(exc).__name__}: {exc}"),
                     traceback.format_exc()[-2000:])
        _send(out, reply)


def _picklable(exc: BaseException) -> bool:
    try:
        pickle.loads(pickle.dumps(exc))
    except Exception:  # noqa: BLE001
        return False
    return True


class _Worker:
    """One worker process and its pipes; knows which tasks it holds."""

    def __init__(self) -> None:
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        self.process = subprocess.Popen([sys.executable, "-m", "harness.sr.workers"], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, stderr=None, env=env, bufsize=0)
        self.tasks: list[str] = []
        self.populations: list[str] = []  # population keys this worker's engine keeps (newest last)
        self.started_up = False

    def wait_started(self, timeout: float, cancelled: Any) -> None:
        """Wait for the worker's "ready" (its imports done), so a run's deadline counts the run only."""
        end = time.monotonic() + timeout
        while not self.started_up:
            if self.ready(POLL_SECONDS):
                message = self.recv()
                if message != ("ready",):
                    raise EngineFailure(f"the engine's process said {message!r} instead of starting")
                self.started_up = True
            elif not self.alive():
                raise EngineFailure(_death_reason(self))
            elif cancelled():
                raise EngineFailure("cancelled: the engine's process was stopped")
            elif time.monotonic() > end:
                raise EngineFailure(f"the engine's process did not start within {timeout:g}s")

    def alive(self) -> bool:
        return self.process.poll() is None

    def kill(self) -> None:
        try:
            self.process.kill()
            self.process.wait(5)
        except Exception:  # noqa: BLE001 - already gone
            pass
        for stream in (self.process.stdin, self.process.stdout):
            try:
                stream.close()
            except OSError:
                pass

    def send(self, obj: Any) -> None:
        _send(self.process.stdin, obj)

    def ready(self, timeout: float) -> bool:
        readable, _, _ = select.select([self.process.stdout], [], [], timeout)
        return bool(readable)

    def recv(self) -> Any:
        return _recv(self.process.stdout)

    def ensure_task(self, key: str, task: Any) -> None:
        if key not in self.tasks:
            self.send(("task", key, task))
            self.tasks = [k for k in self.tasks if k != key][-(MAX_CACHED_TASKS - 1):] + [key]


class _Pool:
    """Idle workers, reused; a run takes one (or starts one) and gives it back if it is still healthy."""

    def __init__(self) -> None:
        self._idle: list[_Worker] = []
        self._lock = threading.Lock()
        self.started = 0

    def take(self, key: str, population: str | None = None) -> _Worker:
        with self._lock:
            if population:  # a run that continues a population must go where the population lives
                for i, w in enumerate(self._idle):
                    if population in w.populations and w.alive():
                        return self._idle.pop(i)
            for i, w in enumerate(self._idle):  # prefer a worker that already holds the task's data
                if key in w.tasks and w.alive():
                    return self._idle.pop(i)
            while self._idle:
                w = self._idle.pop()
                if w.alive():
                    return w
                w.kill()
            self.started += 1
        return _Worker()

    def give_back(self, worker: _Worker) -> None:
        with self._lock:
            self._idle.append(worker)

    def shutdown(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for w in idle:
            w.kill()


_POOL = _Pool()
atexit.register(_POOL.shutdown)


def shutdown_workers() -> None:
    """Stop every idle worker (tests; they are also stopped at exit)."""
    _POOL.shutdown()


def workers_started() -> int:
    return _POOL.started


def _death_reason(worker: _Worker) -> str:
    try:
        worker.process.wait(2)
    except subprocess.TimeoutExpired:
        pass
    code = worker.process.returncode
    if code is not None and code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"the engine's process died with {name}"
    return f"the engine's process exited (code {code})"


def run_in_worker(engine: str, plan: Any, context: AgentContext, *, max_seconds: float,
                  grace: float | None = None) -> Any:
    """Run ``engine`` on ``plan`` in a worker; the engine's result, or :class:`EngineFailure` with the reason.
    The worker is killed ``grace`` seconds (default ``GRACE_SECONDS``) after ``max_seconds``."""
    grace = GRACE_SECONDS if grace is None else grace
    key = task_key(context.task)
    population = str(plan.extras.get("population_key") or "") or None
    worker = _POOL.take(key, population)
    job = _Job(engine=PROCESS_ENGINES[engine], plan=plan, task_key=key, seed=context.seed, fit=context.fit,
               max_seconds=float(max_seconds), extras=_plain_extras(context.extras))
    try:
        worker.wait_started(STARTUP_SECONDS, context.cancelled)
        deadline = time.monotonic() + float(max_seconds) + grace
        worker.ensure_task(key, context.task)
        worker.send(("run", job))
        while True:
            if worker.ready(POLL_SECONDS):
                status, *payload = worker.recv()
                break
            if not worker.alive():
                raise EngineFailure(_death_reason(worker))
            if context.cancelled():
                raise EngineFailure("cancelled: the engine's process was stopped")
            if time.monotonic() > deadline:
                raise EngineFailure(f"the engine {PAST_DEADLINE} ({max_seconds:g}s + {grace:g}s grace) "
                                    "and its process was killed")
    except (EOFError, OSError):
        worker.kill()
        raise EngineFailure(_death_reason(worker)) from None
    except BaseException:
        worker.kill()
        raise
    if population:
        worker.populations = [p for p in worker.populations if p != population][-7:] + [population]
    _POOL.give_back(worker)
    if status == "ok":
        return payload[0]
    exc, tb = payload
    raise exc


def _plain_extras(extras: dict[str, Any]) -> dict[str, Any]:
    """The context extras a worker can use (plain data only; clients and callbacks stay in the parent)."""
    out = {}
    for k, v in (extras or {}).items():
        try:
            pickle.dumps(v)
        except Exception:  # noqa: BLE001
            continue
        out[k] = v
    return out


def in_process_requested() -> bool:
    """``HARNESS_SR_IN_PROCESS=1`` runs engines in-process (debugging with a native debugger)."""
    return os.environ.get("HARNESS_SR_IN_PROCESS", "").strip() in ("1", "true", "yes")


if __name__ == "__main__":
    serve()
