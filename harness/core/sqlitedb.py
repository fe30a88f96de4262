"""SQLite connections that several processes can open at once (WAL mode, waits instead of 'database is locked').

Why a helper: switching a fresh file to WAL needs a moment of exclusive access, and SQLite answers a concurrent
switch with SQLITE_BUSY at once, without its busy timeout; workers that start together must retry it.
"""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path
from typing import Any

WAL_TRIES = 50
WAL_WAIT_S = 0.1


def connect(path: str | Path, *, timeout: float = 60.0, **kwargs: Any) -> sqlite3.Connection:
    """``sqlite3.connect`` with a busy timeout and WAL journaling, retried while another process holds the file."""
    conn = sqlite3.connect(str(path), timeout=timeout, **kwargs)
    for attempt in range(WAL_TRIES):
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            return conn
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) and "busy" not in str(exc) or attempt == WAL_TRIES - 1:
                conn.close()
                raise
            time.sleep(WAL_WAIT_S * (1 + attempt % 5))
    return conn
