"""Provider ``openai``: any OpenAI-compatible chat endpoint through the ``openai`` SDK.

Servers differ in what they accept, so the client discovers it once and remembers it (per client):

* structured output: ``json_schema`` (OpenAI, vLLM) -> ``{"type": "json_object", "schema": ...}`` (llama.cpp's
  server, which answers HTTP 500 to ``json_schema``) -> plain prompting with the schema in the system message.
  A mode also counts as failed when the server accepts it but the first answer does not validate (it was
  silently ignored). Callers read the result with :func:`harness.llm.json_output.parse_json_output` in every mode.
* tools: native ``tools=``/``tool_choice``; if the server rejects them, the tools are described in the system
  prompt and ``<tool_call>`` blocks are parsed from the text. Tagged blocks in a native answer are parsed too.
* ``n`` samples: the ``n`` parameter; if the server returns fewer choices (llama.cpp returns one), the rest are
  topped up with concurrent single calls with different seeds.

The SDK's own retries are off (``max_retries=0``); :func:`harness.llm.failures.call_with_retries` handles them, so
every provider fails the same way.
"""

from __future__ import annotations

import itertools
import json
import os
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from harness.llm.base import (
    CompletionRequest,
    LLMClient,
    LLMError,
    LLMResponse,
    ToolCall,
    schema_from_response_format,
)
from harness.llm.failures import RetryPolicy, call_with_retries, seconds_left
from harness.llm.config import LLMConfig
from harness.llm.json_output import extract_json, parse_json_output
from harness.llm.protocols import TaggedTextParser
from harness.llm.text_rendering import add_system_text, messages_as_text, schema_prompt

STRUCTURED_MODES = ("json_schema", "json_object", "prompt")
# Statuses that, on first use of a feature, mean "this server does not support that request shape".
REJECTION_STATUSES = frozenset({400, 404, 415, 422, 500, 501})
DUMMY_API_KEY = "sk-no-key-required"


def _short_error(exc: Any) -> str:
    body = getattr(exc, "body", None)
    if isinstance(body, dict):
        err = body.get("error", body)
        msg = err.get("message") if isinstance(err, dict) else err
        if msg:
            return str(msg)[:300]
    return str(getattr(exc, "message", None) or exc)[:300]


class OpenAIClient(LLMClient):
    """Chat completions against an OpenAI-compatible server (hosted APIs, ``vllm serve``, llama.cpp's server)."""

    provider = "openai"

    def __init__(self, config: LLMConfig) -> None:
        super().__init__(seed=config.seed)
        import openai

        self._openai = openai
        self.config = config
        self.model = config.model or "default"
        self.base_url = config.base_url
        api_key = os.environ.get(config.api_key_env or "OPENAI_API_KEY") or DUMMY_API_KEY
        # Several endpoints (``base_url`` a list) serving the same model: a shared client (one process, local
        # executor) spreads its calls over them in turn, and a retry goes to the next one. The executors pin one
        # endpoint per solve instead (``LLMConfig.for_solve``).
        self._clients = [openai.OpenAI(api_key=api_key, base_url=url, max_retries=0, timeout=config.timeout_s)
                         for url in config.endpoints()]
        self._turn = itertools.count()
        self.policy = RetryPolicy(max_retries=config.max_retries, backoff_s=config.backoff_s)
        # What the server turned out to support; None = not known yet. Presets may come from config.extra.
        self.structured_mode: str | None = config.extra.get("structured_mode")
        self.tool_mode: str | None = config.extra.get("tool_mode")  # "native" | "text"
        self.supports_n: bool | None = config.extra.get("supports_n")
        self.max_parallel = int(config.extra.get("max_parallel", 8))
        self.extra_body: dict[str, Any] | None = config.extra.get("extra_body")

    @property
    def description(self) -> str:
        where = ", ".join(self.base_url) if isinstance(self.base_url, list) else self.base_url or "api.openai.com"
        return f"openai-compatible server {where} (model {self.model!r})"

    def close(self) -> None:
        for client in self._clients:
            client.close()

    @property
    def _client(self) -> Any:
        """The SDK client for the next request (round-robin when there are several endpoints)."""
        return self._clients[next(self._turn) % len(self._clients)] if len(self._clients) > 1 else self._clients[0]

    # -- errors ---------------------------------------------------------------------------------------------------
    def _classify(self, exc: BaseException, *, probing: bool = False) -> tuple[str, str, int | None]:
        openai = self._openai
        if isinstance(exc, openai.APITimeoutError):
            return "retry", f"timed out after {self.config.timeout_s:g}s", None
        if isinstance(exc, openai.APIConnectionError):
            cause = exc.__cause__ or exc
            return "retry", f"connection error: {type(cause).__name__}: {cause}", None
        if isinstance(exc, openai.APIStatusError):
            status = exc.status_code
            description = f"HTTP {status}: {_short_error(exc)}"
            if probing and status in REJECTION_STATUSES:
                return "fail", description, status
            if status in (408, 409, 429) or status >= 500:
                return "retry", description, status
            return "fail", description, status
        return "fail", f"{type(exc).__name__}: {exc}", None

    @staticmethod
    def _retry_after(exc: BaseException) -> float | None:
        response = getattr(exc, "response", None)
        value = getattr(response, "headers", {}).get("retry-after") if response is not None else None
        try:
            return float(value) if value is not None else None
        except ValueError:
            return None

    # -- one HTTP request -----------------------------------------------------------------------------------------
    def _request(self, kwargs: dict[str, Any], *, probing: bool) -> list[LLMResponse]:
        if self.extra_body:
            kwargs = {**kwargs, "extra_body": {**self.extra_body, **kwargs.get("extra_body", {})}}
        start = time.perf_counter()

        def attempt() -> Any:
            timeout = seconds_left(self.config.timeout_s)  # the run's deadline caps every attempt
            if timeout <= 0:
                raise LLMError(f"{self.description}: the call's deadline is reached", retryable=True)
            return self._client.chat.completions.create(**kwargs, timeout=timeout)

        completion = call_with_retries(
            attempt,
            what=f"{self.description}: chat completion",
            classify=lambda exc: self._classify(exc, probing=probing),
            policy=self.policy,
            usage=self.usage,
            retry_after=self._retry_after,
        )
        latency = time.perf_counter() - start
        return self._convert(completion, latency)

    def _convert(self, completion: Any, latency: float) -> list[LLMResponse]:
        """SDK objects -> responses; anything that is not a chat completion (an HTML page or plain text behind a
        200, wrong field types) is an :class:`LLMError`, never an AttributeError deep in a run."""
        try:
            return self._convert_completion(completion, latency)
        except LLMError:
            raise
        except (AttributeError, TypeError, ValueError, KeyError, IndexError) as exc:
            raise LLMError(f"{self.description}: the server's answer is not a chat completion "
                           f"({type(completion).__name__}: {str(completion)[:120]!r}; {type(exc).__name__}: {exc})",
                           retryable=False) from None

    def _convert_completion(self, completion: Any, latency: float) -> list[LLMResponse]:
        if isinstance(completion, (str, bytes)) or not hasattr(completion, "choices"):
            raise TypeError("no 'choices' in the answer")
        usage = getattr(completion, "usage", None)
        prompt_tokens = int(getattr(usage, "prompt_tokens", 0) or 0)
        completion_tokens = int(getattr(usage, "completion_tokens", 0) or 0)
        out = []
        for k, choice in enumerate(completion.choices or []):
            msg = choice.message
            calls = [_tool_call(tc) for tc in (getattr(msg, "tool_calls", None) or [])]
            out.append(
                LLMResponse(
                    text=msg.content or "",
                    tool_calls=calls,
                    finish_reason=choice.finish_reason,
                    # usage covers all choices: book it on the first so sums stay right
                    prompt_tokens=prompt_tokens if k == 0 else 0,
                    completion_tokens=completion_tokens if k == 0 else 0,
                    latency_s=latency,
                )
            )
        if not out:
            raise LLMError(f"{self.description}: server returned no choices")
        return out

    # -- n samples ------------------------------------------------------------------------------------------------
    def _sample(self, kwargs: dict[str, Any], n: int, seed: int, *, probing: bool) -> list[LLMResponse]:
        if n == 1 or self.supports_n is False:
            got = self._request({**kwargs, "seed": seed}, probing=probing)
        else:
            try:
                got = self._request({**kwargs, "n": n, "seed": seed}, probing=probing)
            except LLMError as exc:
                if self.supports_n is None and exc.status in (400, 422):
                    self.supports_n = False
                    return self._sample(kwargs, n, seed, probing=probing)
                raise
            self.supports_n = len(got) >= n
        if len(got) >= n:
            return got[:n]
        missing = n - len(got)
        seeds = [seed + len(got) + i for i in range(missing)]
        with ThreadPoolExecutor(max_workers=max(1, min(missing, self.max_parallel))) as pool:
            extra = list(pool.map(lambda s: self._request({**kwargs, "seed": s}, probing=False)[0], seeds))
        return got + extra

    # -- complete -------------------------------------------------------------------------------------------------
    def _complete(self, request: CompletionRequest) -> list[LLMResponse]:
        kwargs: dict[str, Any] = {
            "model": self.model,
            "messages": list(request.messages),
            "temperature": self.config.temperature if request.temperature is None else request.temperature,
            "max_tokens": self.config.max_tokens if request.max_tokens is None else request.max_tokens,
        }
        if request.stop:
            kwargs["stop"] = request.stop
        n, seed, response_format = request.n, self.seeds.next(request.seed, request.n), request.response_format
        if request.uses_tools():
            return self._complete_tools(kwargs, request.tools or [], request.tool_choice, n, seed)
        schema = schema_from_response_format(response_format)
        if response_format is None:
            return self._sample(kwargs, n, seed, probing=False)
        if schema is None:  # plain json_object / text: pass through
            return self._sample({**kwargs, "response_format": response_format}, n, seed, probing=False)
        return self._complete_structured(kwargs, response_format, schema, n, seed)

    def _structured_kwargs(
        self, kwargs: dict[str, Any], mode: str, response_format: dict[str, Any], schema: dict[str, Any]
    ) -> dict[str, Any]:
        if mode == "json_schema":
            rf = response_format if response_format.get("type") == "json_schema" else {
                "type": "json_schema",
                "json_schema": {"name": "output", "schema": schema},
            }
            return {**kwargs, "response_format": rf}
        if mode == "json_object":
            return {**kwargs, "response_format": {"type": "json_object", "schema": schema}}
        return {**kwargs, "messages": add_system_text(kwargs["messages"], schema_prompt(schema))}

    def _complete_structured(
        self, kwargs: dict[str, Any], response_format: dict[str, Any], schema: dict[str, Any], n: int, seed: int
    ) -> list[LLMResponse]:
        if self.structured_mode is not None:
            responses = self._sample(self._structured_kwargs(kwargs, self.structured_mode, response_format, schema),
                                     n, seed, probing=False)
            return _tag(responses, structured_mode=self.structured_mode)
        accepted: tuple[str, list[LLMResponse]] | None = None
        rejections: list[str] = []
        for mode in STRUCTURED_MODES:
            probing = mode != "prompt"
            try:
                responses = self._sample(self._structured_kwargs(kwargs, mode, response_format, schema),
                                         n, seed, probing=probing)
            except LLMError as exc:
                if probing and exc.status in REJECTION_STATUSES:
                    rejections.append(f"{mode}: {exc}")
                    continue
                raise
            if any(parse_json_output(r.text, schema)[1] is None for r in responses):
                self.structured_mode = mode
                return _tag(responses, structured_mode=mode)
            accepted = accepted or (mode, responses)
        # Nothing produced valid JSON: keep the first mode the server accepted; the caller sees the parse error.
        assert accepted is not None  # "prompt" is never rejected as a probe
        self.structured_mode = accepted[0]
        return _tag(accepted[1], structured_mode=accepted[0], rejected=rejections)

    def _complete_tools(
        self,
        kwargs: dict[str, Any],
        tools: list[dict[str, Any]],
        tool_choice: str | dict[str, Any] | None,
        n: int,
        seed: int,
    ) -> list[LLMResponse]:
        if self.tool_mode != "text":
            native = {**kwargs, "tools": tools}
            if tool_choice is not None:
                native["tool_choice"] = tool_choice
            try:
                responses = self._sample(native, n, seed, probing=self.tool_mode is None)
            except LLMError as exc:
                if self.tool_mode is not None or exc.status not in REJECTION_STATUSES:
                    raise
                self.tool_mode = "text"
            else:
                self.tool_mode = "native"
                parser = TaggedTextParser()
                for r in responses:  # servers without a tool parser leave the tags in the text
                    if not r.tool_calls and "<tool_call>" in r.text:
                        r.tool_calls = parser.parse(r).calls
                return _tag(responses, tool_mode="native")
        parser = TaggedTextParser()
        system = parser.format_tools(tools)["system"]
        if isinstance(tool_choice, dict):
            name = tool_choice.get("function", {}).get("name")
            system += f"\nCall the tool {name} now."
        elif tool_choice == "required":
            system += "\nCall one of the tools now."
        text_kwargs = {**kwargs, "messages": add_system_text(messages_as_text(kwargs["messages"]), system)}
        responses = self._sample(text_kwargs, n, seed, probing=False)
        for r in responses:
            r.tool_calls = parser.parse(r).calls
        return _tag(responses, tool_mode="text")


def _tag(responses: list[LLMResponse], **meta: Any) -> list[LLMResponse]:
    for r in responses:
        r.meta.update(meta)
    return responses


def _tool_call(tc: Any) -> ToolCall:
    """ToolCall from an SDK tool call; arguments that are not JSON are kept as a parse error, not guessed."""
    fn = tc.function
    raw = fn.arguments or "{}"
    try:
        args = json.loads(raw, strict=False) if isinstance(raw, str) else dict(raw)
        error = None if isinstance(args, dict) else f"arguments must be a JSON object, got {type(args).__name__}"
    except json.JSONDecodeError as exc:

        args, error = extract_json(raw)
        if error is None and not isinstance(args, dict):
            error = f"arguments are not a JSON object: {exc.msg}"
    if error is not None:
        return ToolCall(id=tc.id or "", name=fn.name, arguments={}, parse_error=f"{error}; raw: {raw[:200]!r}")
    return ToolCall(id=tc.id or "", name=fn.name, arguments=args)
