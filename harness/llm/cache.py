"""A persistent response cache in front of any client, so a resumed or repeated run pays for no call twice.

Keyed by everything that decides an answer: the model's identity (provider, model, file or server), the messages,
tools and ``tool_choice``, the response format, ``n``, the sampling settings as they will be used (temperature and
max tokens after the client's defaults) and the seed. Only calls with a seed are cached (without one, two calls
are meant to differ), and only answers without an error. One SQLite file; several processes may share it.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from harness.core.sqlitedb import connect
from harness.llm.base import CompletionRequest, LLMClient, LLMResponse, ToolCall

_SCHEMA = """
CREATE TABLE IF NOT EXISTS responses (
    key TEXT PRIMARY KEY,
    model TEXT NOT NULL,
    responses TEXT NOT NULL,
    created REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS hits (
    pid INTEGER NOT NULL,
    n INTEGER NOT NULL,
    time REAL NOT NULL
);
"""


def model_identity(client: Any) -> dict[str, Any]:
    """What names the model behind ``client`` (never keys)."""
    config = getattr(client, "config", None)
    data = {"provider": getattr(client, "provider", type(client).__name__),
            "description": str(getattr(client, "description", ""))}
    for name in ("model", "model_path", "base_url"):
        value = getattr(config, name, None)
        if value:
            data[name] = value
    if getattr(client, "model_path", None):
        data["model_path"] = str(client.model_path)
    return data


class CachedLLM(LLMClient):
    """``inner`` behind a response cache at ``path``; ``hits`` / ``misses`` count this process's lookups."""

    def __init__(self, inner: LLMClient, path: str | Path) -> None:
        super().__init__()
        self.inner = inner
        self.provider = inner.provider
        self.config = getattr(inner, "config", None)
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.hits = 0
        self.misses = 0
        self._lock = threading.Lock()
        self._conn = connect(self.path, timeout=60, check_same_thread=False)
        with self._lock, self._conn:
            self._conn.executescript(_SCHEMA)

    @property
    def description(self) -> str:
        return f"{self.inner.description} (cached in {self.path.name})"

    def key(self, request: CompletionRequest) -> str | None:
        """The cache key of a request, or ``None`` when it must not be cached (no seed)."""
        if request.seed is None:
            return None
        resolved = request.options()
        if resolved["temperature"] is None:
            resolved["temperature"] = getattr(self.config, "temperature", None)
        if resolved["max_tokens"] is None:
            resolved["max_tokens"] = getattr(self.config, "max_tokens", None)
        blob = json.dumps({"model": model_identity(self.inner), "messages": request.messages, **resolved},
                          sort_keys=True, default=str, ensure_ascii=False)
        return hashlib.sha256(blob.encode()).hexdigest()

    def send(self, request: CompletionRequest, *, timeout_s: float | None = None) -> list[LLMResponse]:
        """As :meth:`LLMClient.send`; a hit returns the stored answer without calling the model (how long the
        call may wait, ``timeout_s``, is not in the key). An answer the client's deadline cut short
        (``finish_reason`` "timeout": the machine's, not the model's) or an error is returned but never stored."""
        start = time.perf_counter()
        key = self.key(request)
        row = None
        if key is not None:
            with self._lock, self._conn:
                row = self._conn.execute("SELECT responses FROM responses WHERE key = ?", (key,)).fetchone()
                if row is not None:
                    self._conn.execute("INSERT INTO hits VALUES (?, 1, ?)", (os.getpid(), time.time()))
        if row is not None:
            self.hits += 1
            responses = [_response(r) for r in json.loads(row[0])]
        else:
            responses = self.inner.send(request, timeout_s=timeout_s)
            self.misses += 1
            if key is not None and not any(r.error or r.finish_reason == "timeout" for r in responses):
                payload = json.dumps([asdict(r) for r in responses], default=str)
                with self._lock, self._conn:
                    self._conn.execute("INSERT OR REPLACE INTO responses VALUES (?, ?, ?, ?)",
                                       (key, json.dumps(model_identity(self.inner), sort_keys=True), payload,
                                        time.time()))
        self.usage.record(responses, time.perf_counter() - start)
        return responses

    def _complete(self, request: CompletionRequest) -> list[LLMResponse]:
        return self.send(request)

    def export_rows(self) -> list[tuple[str, str, str, float]]:
        """Every stored answer as ``(key, model, responses, created)``: how a remote solve hands the answers it
        got to the driver, which owns the run's cache file (:meth:`import_rows`)."""
        with self._lock:
            return [tuple(row) for row in self._conn.execute(
                "SELECT key, model, responses, created FROM responses ORDER BY created")]

    def import_rows(self, rows: list[tuple[str, str, str, float]]) -> int:
        """Store answers exported by another cache (an earlier answer under the same key is kept); returns how
        many were new."""
        if not rows:
            return 0
        with self._lock, self._conn:
            before = self._conn.total_changes
            self._conn.executemany("INSERT OR IGNORE INTO responses VALUES (?, ?, ?, ?)", [tuple(r) for r in rows])
            return self._conn.total_changes - before

    def stats(self) -> dict[str, int]:
        with self._lock:
            stored = self._conn.execute("SELECT COUNT(*) FROM responses").fetchone()[0]
        return {"hits": self.hits, "misses": self.misses, "stored": int(stored)}

    def ready(self) -> None:
        self.inner.ready()

    def close(self) -> None:
        with self._lock:
            self._conn.close()
        self.inner.close()


def _response(data: dict[str, Any]) -> LLMResponse:
    calls = [ToolCall(**c) if isinstance(c, dict) else c for c in data.pop("tool_calls", []) or []]
    return LLMResponse(tool_calls=calls, **data)
