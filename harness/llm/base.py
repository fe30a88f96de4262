"""Provider-neutral LLM types: requests go in as OpenAI-style messages, :class:`LLMResponse` objects come out.

Every provider (embedded llama.cpp, OpenAI-compatible servers, in-process vLLM, scripted test doubles) implements
:class:`LLMClient.complete`. Everything above this layer (roles, agents, parsers) only sees these types, so a run
can switch providers through configuration alone.

Also here: :class:`UsageCounter` (thread-safe accounting, because samples and branches run concurrently). How a
call fails (:class:`LLMError`, its deadline, the network clients' one retry policy): ``harness.llm.failures``.
"""

from __future__ import annotations

import json
import threading
import time
from abc import ABC, abstractmethod
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, fields, replace
from typing import Any

from harness.llm.failures import LLMError, call_deadline
from harness.llm.usage import UsageCounter

Message = dict[str, Any]


@dataclass
class ToolCall:
    """One function call requested by the model.

    ``parse_error`` is set (and ``arguments`` left empty) when the model named a function but its arguments were
    not valid JSON; parsers drop such calls and report the error instead of inventing arguments.
    """

    id: str
    name: str
    arguments: dict[str, Any] = field(default_factory=dict)
    parse_error: str | None = None

    def to_openai(self) -> dict[str, Any]:
        """The call in OpenAI's assistant-message ``tool_calls`` format (arguments as a JSON string)."""
        return {
            "id": self.id,
            "type": "function",
            "function": {"name": self.name, "arguments": json.dumps(self.arguments)},
        }


@dataclass
class LLMResponse:
    """One sampled completion. ``error`` is set (and ``text`` empty) for a sample that failed inside a batch."""

    text: str = ""
    tool_calls: list[ToolCall] = field(default_factory=list)
    finish_reason: str | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    latency_s: float = 0.0
    error: str | None = None
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.error is None

    def to_message(self) -> Message:
        """The assistant message to append to the conversation history."""
        msg: Message = {"role": "assistant", "content": self.text or ("" if not self.tool_calls else None)}
        if self.tool_calls:
            msg["tool_calls"] = [tc.to_openai() for tc in self.tool_calls if tc.parse_error is None]
        return msg


# -- the request ----------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CompletionRequest:
    """One ``complete`` call, as every client receives it: the only spelling of its parameters below
    :meth:`LLMClient.complete`. ``None`` fields fall back to the client's configured defaults."""

    messages: list[Message]
    tools: list[dict[str, Any]] | None = None
    response_format: dict[str, Any] | None = None
    n: int = 1
    temperature: float | None = None
    max_tokens: int | None = None
    seed: int | None = None
    stop: list[str] | str | None = None
    tool_choice: str | dict[str, Any] | None = None

    @classmethod
    def of(cls, call: dict[str, Any]) -> "CompletionRequest":
        """The request of ``complete(**call)`` (its ``timeout_s`` is the call's, not the request's)."""
        return cls(**{k: v for k, v in call.items() if k != "timeout_s"})

    def options(self) -> dict[str, Any]:
        """Everything but the messages, as keywords of :meth:`LLMClient.complete` (caches key on them)."""
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name != "messages"}

    def stops(self) -> list[str]:
        return [self.stop] if isinstance(self.stop, str) else list(self.stop or [])

    def uses_tools(self) -> bool:
        return bool(self.tools) and self.tool_choice != "none"

    def with_seed(self, seed: int) -> "CompletionRequest":
        return replace(self, seed=seed)


class SeedCounter:
    """Seeds for calls that name none: the configured seed advanced by the samples each call draws, so a run is
    reproducible and its samples still differ. Thread-safe (branches call concurrently)."""

    def __init__(self, start: int = 0) -> None:
        self.start = int(start)
        self._used = 0
        self._lock = threading.Lock()

    def next(self, seed: int | None, n: int = 1) -> int:
        """``seed`` when given, else the next ``n`` seeds' first."""
        if seed is not None:
            return seed
        with self._lock:
            first = self.start + self._used
            self._used += n
            return first


# -- the client interface -------------------------------------------------------------------------------------------


class LLMClient(ABC):
    """A chat model. Subclasses implement :meth:`_complete` (one :class:`CompletionRequest`); :meth:`complete`
    builds the request and adds the deadline and the accounting (:meth:`send`)."""

    provider: str = ""

    def __init__(self, seed: int = 0) -> None:
        self.usage = UsageCounter()
        self.seeds = SeedCounter(seed)

    @property
    def description(self) -> str:
        """Short text naming the provider and model, used in error messages and traces."""
        return self.provider

    def complete(
        self,
        messages: list[Message],
        *,
        tools: list[dict[str, Any]] | None = None,
        response_format: dict[str, Any] | None = None,
        n: int = 1,
        temperature: float | None = None,
        max_tokens: int | None = None,
        seed: int | None = None,
        stop: list[str] | str | None = None,
        tool_choice: str | dict[str, Any] | None = None,
        timeout_s: float | None = None,
    ) -> list[LLMResponse]:
        """Sample ``n`` completions of ``messages``.

        ``timeout_s`` caps the whole call, retries included (a run passes the seconds it has left): the client's
        own ``timeout_s`` still bounds each attempt, and an attempt never outlives the cap.

        ``tools`` is OpenAI's ``[{"type": "function", "function": {...}}]`` list; ``tool_choice`` (an extension of
        the contract) is ``"auto" | "none" | "required"`` or ``{"type": "function", "function": {"name": ...}}``.
        ``response_format`` is canonically ``{"type": "json_schema", "json_schema": {"name", "schema"}}``.
        ``None`` arguments fall back to the client's configured defaults.
        """
        if n < 1:
            raise ValueError(f"n must be >= 1, got {n}")
        request = CompletionRequest(messages, tools=tools, response_format=response_format, n=n,
                                    temperature=temperature, max_tokens=max_tokens, seed=seed, stop=stop,
                                    tool_choice=tool_choice)
        return self.send(request, timeout_s=timeout_s)

    def send(self, request: CompletionRequest, *, timeout_s: float | None = None) -> list[LLMResponse]:
        """:meth:`complete` for a built request: the call's deadline (``timeout_s``) and the accounting around
        :meth:`_complete`. Wrappers (the response cache) override this, not ``complete``."""
        start = time.perf_counter()
        if timeout_s is not None and timeout_s <= 0:
            self.usage.add(calls=1, failures=1)
            raise LLMError(f"{self.description}: no time left for the call (deadline reached)", retryable=False)
        try:
            with call_deadline(timeout_s):
                responses = self._complete(request)
        except LLMError:
            self.usage.add(calls=1, failures=1, seconds=time.perf_counter() - start)
            raise
        self.usage.record(responses, time.perf_counter() - start)
        return responses

    @abstractmethod
    def _complete(self, request: CompletionRequest) -> list[LLMResponse]:
        """The provider's answer to one request (``request.seed`` may be None: :attr:`seeds` resolves it)."""

    def complete_many(
        self, requests: list[dict[str, Any]], max_workers: int = 8, *, raise_errors: bool = False
    ) -> list[list[LLMResponse]]:
        """Run independent ``complete(**request)`` calls concurrently (K samples, branches); results in order.

        A request that fails becomes ``[LLMResponse(error=...)]`` so one bad branch does not sink the others,
        unless ``raise_errors`` is set, in which case the first failure (in request order) is raised.
        """
        return complete_many(self, requests, max_workers=max_workers, raise_errors=raise_errors)

    def ready(self) -> None:
        """Make sure the model can answer before a long job depends on it (the embedded model: load it, choosing
        CPU kernels that run on this machine); an :class:`LLMError` says why not. Servers are asked on use."""

    def close(self) -> None:
        """Release resources (network clients, engines). Safe to call twice."""


def complete_many(
    client: LLMClient,
    requests: list[dict[str, Any]],
    max_workers: int = 8,
    *,
    raise_errors: bool = False,
) -> list[list[LLMResponse]]:
    """Threaded fan-out of independent requests to ``client.complete`` (the network calls release the GIL)."""
    if not requests:
        return []

    def one(request: dict[str, Any]) -> list[LLMResponse] | LLMError:
        try:
            return client.complete(**request)
        except LLMError as exc:
            return exc

    workers = max(1, min(max_workers, len(requests)))
    if workers == 1:
        outcomes = [one(r) for r in requests]
    else:
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="llm") as pool:
            outcomes = list(pool.map(one, requests))
    results: list[list[LLMResponse]] = []
    for outcome in outcomes:
        if isinstance(outcome, LLMError):
            if raise_errors:
                raise outcome
            results.append([LLMResponse(finish_reason="error", error=str(outcome))])
        else:
            results.append(outcome)
    return results


def schema_from_response_format(response_format: dict[str, Any] | None) -> dict[str, Any] | None:
    """The JSON schema inside any of the accepted ``response_format`` spellings, or None (free JSON / text)."""
    if not response_format:
        return None
    kind = response_format.get("type")
    if kind == "json_schema":
        inner = response_format.get("json_schema") or {}
        return inner.get("schema") if "schema" in inner else inner or None
    if kind == "json_object":
        return response_format.get("schema")
    return None


def json_schema_format(schema: dict[str, Any], name: str = "output") -> dict[str, Any]:
    """Wrap a JSON schema in the canonical ``response_format``."""
    return {"type": "json_schema", "json_schema": {"name": name, "schema": schema}}
