"""Persistent evaluation cache: one row per (harness digest, task, seed), in SQLite.

It is what makes the three stages and any resume cheap: a configuration evaluated once is never run again, and the
stage that first paid for a row is stored with it, so cumulative solver executions per stage are exact sums over
the rows (no counter can drift after a crash). SQLite's own locking lets several processes share the file.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any, Iterator

from harness.core.jsonio import json_restore, json_safe
from harness.core.sqlitedb import connect

_SCHEMA = """
CREATE TABLE IF NOT EXISTS evals (
    digest TEXT NOT NULL,
    task TEXT NOT NULL,
    seed INTEGER NOT NULL,
    stage TEXT NOT NULL,
    score REAL,
    solver_runs INTEGER NOT NULL DEFAULT 0,
    llm_calls INTEGER NOT NULL DEFAULT 0,
    seconds REAL NOT NULL DEFAULT 0,
    record TEXT NOT NULL,
    created REAL NOT NULL,
    PRIMARY KEY (digest, task, seed)
);
CREATE TABLE IF NOT EXISTS specs (
    digest TEXT PRIMARY KEY,
    spec TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS shared_runs (
    key TEXT PRIMARY KEY,
    value TEXT NOT NULL,
    created REAL NOT NULL
);
"""


def _dumps(obj: Any) -> str:
    return json.dumps(json_safe(obj), ensure_ascii=False)


def _loads(text: str) -> Any:
    return json_restore(json.loads(text))


class EvalCache:
    """Thread-safe SQLite store of evaluation records (plain dicts; see ``optimize.records.EvalRecord``)."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._conn = connect(self.path, timeout=60.0, check_same_thread=False, isolation_level=None)
        with self._lock:
            self._conn.executescript(_SCHEMA)

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    def get(self, digest: str, task: str, seed: int) -> dict[str, Any] | None:
        with self._lock:
            row = self._conn.execute(
                "SELECT record FROM evals WHERE digest=? AND task=? AND seed=?", (digest, task, int(seed))
            ).fetchone()
        return _loads(row[0]) if row else None

    def put(self, record: dict[str, Any], spec: dict[str, Any] | None = None) -> bool:
        """Store ``record`` unless a row for its key exists (another worker won); True when this call stored it."""
        with self._lock:
            cur = self._conn.execute(
                "INSERT OR IGNORE INTO evals (digest, task, seed, stage, score, solver_runs, llm_calls, seconds,"
                " record, created) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    record["digest"],
                    record.get("task_key") or record["task"],
                    int(record["seed"]),
                    record.get("stage", ""),
                    float(record.get("score", 0.0)),
                    int(record.get("solver_runs", 0)),
                    int(record.get("llm_calls", 0)),
                    float(record.get("seconds", 0.0)),
                    _dumps(record),
                    time.time(),
                ),
            )
            if spec is not None:
                self._conn.execute(
                    "INSERT OR IGNORE INTO specs (digest, spec) VALUES (?, ?)", (record["digest"], _dumps(spec))
                )
            return cur.rowcount > 0

    def spec(self, digest: str) -> dict[str, Any] | None:
        with self._lock:
            row = self._conn.execute("SELECT spec FROM specs WHERE digest=?", (digest,)).fetchone()
        return _loads(row[0]) if row else None

    def records(self, stage: str | None = None) -> Iterator[dict[str, Any]]:
        query = "SELECT record FROM evals" + (" WHERE stage=?" if stage else "") + " ORDER BY created"
        with self._lock:
            rows = self._conn.execute(query, (stage,) if stage else ()).fetchall()
        for (text,) in rows:
            yield _loads(text)

    def totals_by_stage(self) -> dict[str, dict[str, float]]:
        """Per stage: evaluations, solver executions, LLM calls and seconds actually paid (cache rows)."""
        with self._lock:
            rows = self._conn.execute(
                "SELECT stage, COUNT(*), SUM(solver_runs), SUM(llm_calls), SUM(seconds) FROM evals GROUP BY stage"
            ).fetchall()
        return {
            stage: {"evaluations": n, "solver_runs": int(s or 0), "llm_calls": int(c or 0), "seconds": float(t or 0)}
            for stage, n, s, c, t in rows
        }

    # -- SR runs no role influences (workflows.run_core.SharedRuns): made once, read by every harness -------------
    def get_shared(self, key: str) -> dict[str, Any] | None:
        with self._lock:
            row = self._conn.execute("SELECT value FROM shared_runs WHERE key=?", (key,)).fetchone()
        return _loads(row[0]) if row else None

    def put_shared(self, key: str, value: dict[str, Any]) -> None:
        """First writer wins (a concurrent twin made the same run; either result is a valid draw)."""
        with self._lock:
            self._conn.execute("INSERT OR IGNORE INTO shared_runs (key, value, created) VALUES (?, ?, ?)",
                               (key, _dumps(value), time.time()))

    def shared_runs(self) -> "SharedRunStore":
        return SharedRunStore(self)

    def shared_count(self) -> int:
        with self._lock:
            return int(self._conn.execute("SELECT COUNT(*) FROM shared_runs").fetchone()[0])

    def __len__(self) -> int:
        with self._lock:
            return int(self._conn.execute("SELECT COUNT(*) FROM evals").fetchone()[0])


class SharedRunStore:
    """The cache's shared runs as a ``workflows.run_core.SharedRuns`` store; counts its hits (the runs not paid
    again) for the report."""

    def __init__(self, cache: EvalCache):
        self.cache = cache
        self.hits = 0
        self._lock = threading.Lock()

    def get(self, key: str) -> dict[str, Any] | None:
        value = self.cache.get_shared(key)
        if value is not None:
            with self._lock:
                self.hits += 1
        return value

    def put(self, key: str, value: dict[str, Any]) -> None:
        self.cache.put_shared(key, value)
