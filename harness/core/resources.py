"""Process-wide count of running SR engine runs, so the embedded LLM knows how many cores are free.

A leaf module (imports nothing of ours): the SR entry point marks its runs, the local LLM client reads the count.
"""

from __future__ import annotations

import threading
from contextlib import contextmanager
from typing import Iterator

_lock = threading.Lock()
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
