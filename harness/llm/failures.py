"""How a model call fails: :class:`LLMError`, the call's deadline, and the one retry policy shared by the network
clients, so every provider fails the same way: transient problems are retried with exponential backoff and
jitter, everything else fails at once with an :class:`LLMError` that says which server/model, what failed and
after how many tries."""

from __future__ import annotations

import contextvars
import random
import time
from dataclasses import dataclass
from contextlib import contextmanager
from typing import Callable, Iterator, Literal, TypeVar

from harness.llm.usage import UsageCounter

T = TypeVar("T")


class LLMError(RuntimeError):
    """A model call that could not be completed (after retries, where retrying made sense)."""

    def __init__(
        self,
        message: str,
        *,
        retryable: bool = False,
        status: int | None = None,
        attempts: int = 0,
    ) -> None:
        super().__init__(message)
        self.retryable = retryable
        self.status = status
        self.attempts = attempts


# -- deadlines ------------------------------------------------------------------------------------------------------

_DEADLINE: contextvars.ContextVar[float | None] = contextvars.ContextVar("llm_deadline", default=None)


def seconds_left(default: float) -> float:
    """Seconds the current call may still take: ``default`` (the client's timeout), capped by the deadline that
    :meth:`LLMClient.complete` was given (``timeout_s``), never below 0."""
    deadline = _DEADLINE.get()
    if deadline is None:
        return float(default)
    return max(0.0, min(float(default), deadline - time.monotonic()))


@contextmanager
def call_deadline(timeout_s: float | None) -> Iterator[None]:
    """The deadline of one call (``None``: none), read inside the client by :func:`seconds_left` and
    :func:`deadline_passed`; contextvars keep concurrent calls' deadlines apart."""
    if timeout_s is None:
        yield
        return
    token = _DEADLINE.set(time.monotonic() + float(timeout_s))
    try:
        yield
    finally:
        _DEADLINE.reset(token)


def deadline_passed() -> bool:
    deadline = _DEADLINE.get()
    return deadline is not None and time.monotonic() >= deadline


# -- retries --------------------------------------------------------------------------------------------------------

Verdict = Literal["retry", "fail"]


@dataclass
class RetryPolicy:
    """Exponential backoff with jitter: wait ``backoff_s * 2**k`` (capped) times a random factor in [0.5, 1.5)."""

    max_retries: int = 3
    backoff_s: float = 0.5
    max_backoff_s: float = 10.0

    def delay(self, retry_index: int, rng: random.Random | None = None) -> float:
        base = min(self.max_backoff_s, self.backoff_s * (2**retry_index))
        return base * (0.5 + (rng or random).random())


def call_with_retries(
    fn: Callable[[], T],
    *,
    what: str,
    classify: Callable[[BaseException], tuple[Verdict, str, int | None]],
    policy: RetryPolicy,
    usage: UsageCounter | None = None,
    sleep: Callable[[float], None] = time.sleep,
    retry_after: Callable[[BaseException], float | None] | None = None,
) -> T:
    """Run ``fn``; retry what ``classify`` calls transient; raise :class:`LLMError` otherwise or when tries run out.

    ``classify(exc)`` returns ``(verdict, short description, HTTP status or None)``. :class:`LLMError` raised by
    ``fn`` passes through untouched. ``retry_after(exc)`` may return a server-requested wait (HTTP Retry-After),
    honoured up to the policy's cap.
    """
    attempts = 0
    while True:
        attempts += 1
        try:
            return fn()
        except LLMError:
            raise
        except Exception as exc:  # noqa: BLE001 - every failure is classified below
            verdict, description, status = classify(exc)
            if verdict == "fail":
                raise LLMError(
                    f"{what}: request rejected ({description}); not retried",
                    retryable=False,
                    status=status,
                    attempts=attempts,
                ) from exc
            if attempts > policy.max_retries:
                raise LLMError(
                    f"{what}: failed after {attempts} tries ({description})",
                    retryable=True,
                    status=status,
                    attempts=attempts,
                ) from exc
            wait = policy.delay(attempts - 1)
            if retry_after is not None:
                requested = retry_after(exc)
                if requested is not None:
                    wait = max(wait, min(requested, policy.max_backoff_s))
            deadline = _DEADLINE.get()
            if deadline is not None and time.monotonic() + wait >= deadline:
                raise LLMError(
                    f"{what}: gave up after {attempts} tries ({description}): the call's deadline is reached",
                    retryable=True,
                    status=status,
                    attempts=attempts,
                ) from exc
            if usage is not None:
                usage.add(retries=1)
            sleep(wait)


