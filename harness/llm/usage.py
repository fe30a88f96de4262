"""Usage accounting of one LLM client (calls, tokens, failures, retries, seconds): its own module, below both the
client interface (``harness.llm.base``) and the failure policy (``harness.llm.failures``) that count into it."""

from __future__ import annotations

import threading
from typing import Protocol, Sequence


class _Tokens(Protocol):
    """What :meth:`UsageCounter.record` reads of a response (``harness.llm.base.LLMResponse``)."""

    prompt_tokens: int
    completion_tokens: int


class UsageCounter:
    """Thread-safe usage accounting for one client.

    ``calls``: ``complete()`` invocations; ``responses``: samples returned; ``failures``: invocations that ended
    in :class:`LLMError`; ``retries``: extra attempts after transient errors; ``seconds``: wall time spent inside
    ``complete()``.
    """

    FIELDS = ("calls", "responses", "prompt_tokens", "completion_tokens", "failures", "retries", "seconds")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.calls = 0
        self.responses = 0
        self.prompt_tokens = 0
        self.completion_tokens = 0
        self.failures = 0
        self.retries = 0
        self.seconds = 0.0

    def add(self, **deltas: float) -> None:
        with self._lock:
            for key, value in deltas.items():
                if key not in self.FIELDS:
                    raise KeyError(f"unknown usage field {key!r}")
                setattr(self, key, getattr(self, key) + value)

    def record(self, responses: Sequence[_Tokens], seconds: float) -> None:
        """Account one successful ``complete()`` call."""
        self.add(
            calls=1,
            responses=len(responses),
            prompt_tokens=sum(r.prompt_tokens for r in responses),
            completion_tokens=sum(r.completion_tokens for r in responses),
            seconds=seconds,
        )

    def snapshot(self) -> dict[str, float]:
        with self._lock:
            return {key: getattr(self, key) for key in self.FIELDS}
