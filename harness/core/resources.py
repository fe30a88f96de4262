"""The cores this process may use, and the count of running SR engine runs, so the embedded LLM knows how many are free.

A leaf module (imports nothing of ours): the SR entry point marks its runs, the local LLM client reads the count.
"""

from __future__ import annotations

import os
import threading
from contextlib import contextmanager
from typing import Iterator

_lock = threading.Lock()


def usable_cpus() -> int:
    """The cores this process may run on: its CPU affinity (a SLURM ``--cpus-per-task`` job, ``taskset``, a pytest-xdist
    worker pinned to one core), not the machine's count, so llama.cpp never starts more threads than it has cores."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # macOS and Windows have no affinity call
        return max(1, os.cpu_count() or 1)


_active = 0


@contextmanager
def engine_run() -> Iterator[None]:
    """Mark one SR engine run for its duration."""
    global _active
    with _lock:
        _active += 1
    try:
        yield
    finally:
        with _lock:
            _active -= 1


def engine_runs_active() -> int:
    with _lock:
        return _active
