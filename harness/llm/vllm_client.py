"""Provider ``vllm``: an in-process ``vllm.LLM`` engine (optional extra ``[vllm]``, GPU machines).

Chosen over ``vllm serve`` + provider ``openai`` when one process owns the GPU and wants batching without HTTP:
``n`` samples are one ``SamplingParams(n=...)`` and :meth:`VLLMClient.complete_many` sends all requests to one
``LLM.chat`` call, which vLLM schedules as a single continuous batch.

Structured output uses ``StructuredOutputsParams(json=schema)`` (``SamplingParams.structured_outputs``, vLLM >=
0.10.2; the only spelling since 0.12) and falls back to ``GuidedDecodingParams(json=schema)``
(``SamplingParams.guided_decoding``) on older releases. Tools: by default (``extra.tool_mode="json"``) the output
is constrained to ``{"tool": name, "arguments": {...}}``, which every model can follow; with ``"template"`` the
tools go to the model's chat template and ``<tool_call>`` blocks are parsed from the text. vLLM offline has no
per-request timeout: a call whose deadline (``complete(timeout_s=...)``) passed while the engine started is an
``LLMError`` before any generation; a generation is bounded by ``max_tokens``.

``vllm`` is imported only when this provider is chosen.
"""

from __future__ import annotations

import importlib
import json
import threading
import time
from dataclasses import dataclass
from typing import Any

from harness.llm.base import (
    CompletionRequest,
    LLMClient,
    LLMError,
    LLMResponse,
    Message,
    schema_from_response_format,
)
from harness.llm.failures import deadline_passed
from harness.llm.config import LLMConfig
from harness.llm.protocols import JSONToolParser, TaggedTextParser, tool_call_schema
from harness.llm.text_rendering import add_system_text, messages_as_text, schema_prompt

INSTALL_HINT = (
    "provider 'vllm' needs the vllm package, which is not installed here: run `pip install -e .[vllm]` on a GPU "
    "machine, or serve the model with `vllm serve` and use provider 'openai'"
)


def import_vllm() -> Any:
    """The ``vllm`` module, or an :class:`LLMError` that says how to install it."""
    try:
        return importlib.import_module("vllm")
    except ImportError as exc:
        raise LLMError(f"{INSTALL_HINT} ({exc})") from exc


def structured_output_kwargs(schema: dict[str, Any] | None, *, json_object: bool = False) -> dict[str, Any]:
    """``SamplingParams`` keyword for JSON-constrained decoding, for whichever API this vLLM has."""
    if schema is None and not json_object:
        return {}
    sp_module = importlib.import_module("vllm.sampling_params")
    spec: dict[str, Any] = {"json": schema} if schema is not None else {"json_object": True}
    new_cls = getattr(sp_module, "StructuredOutputsParams", None)
    if new_cls is not None:
        return {"structured_outputs": new_cls(**spec)}
    old_cls = getattr(sp_module, "GuidedDecodingParams", None)
    if old_cls is not None:
        return {"guided_decoding": old_cls(**spec)}
    raise LLMError("this vLLM has neither StructuredOutputsParams nor GuidedDecodingParams; upgrade vllm")


def compact_json_supported() -> bool:
    """True when this vLLM's structured-output config has ``disable_any_whitespace`` and xgrammar is installed."""
    try:
        config_module = importlib.import_module("vllm.config")
        importlib.import_module("xgrammar")
    except ImportError:
        return False
    fields = getattr(getattr(config_module, "StructuredOutputsConfig", None), "__dataclass_fields__", {})
    return "disable_any_whitespace" in fields


@dataclass
class _Prepared:
    """One request translated for ``LLM.chat``: messages, sampling params, and how to read the output."""

    messages: list[Message]
    sampling_params: Any
    chat_tools: list[dict[str, Any]] | None
    read_tools: str | None  # None | "json" | "tagged"


class VLLMClient(LLMClient):
    """In-process vLLM. The engine loads on first use (minutes for big models), once per client."""

    provider = "vllm"

    def __init__(self, config: LLMConfig) -> None:
        super().__init__(seed=config.seed)
        if not config.model:
            raise ValueError("provider 'vllm' needs config.model (a Hugging Face model id or a local path)")
        self.config = config
        self.model = config.model
        self._vllm = import_vllm()
        self.tool_mode: str = config.extra.get("tool_mode", "json")
        self._engine: Any = None
        self._started_in_call = False
        self._lock = threading.Lock()  # one generate() at a time; batching happens inside vLLM

    @property
    def description(self) -> str:
        return f"vLLM engine (model {self.model!r})"

    def engine_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for ``vllm.LLM``: model, seed, context length, compact JSON, then ``extra.engine_kwargs``.

        ``max_model_len`` follows ``n_ctx`` (vLLM's default is the model's full context, whose KV cache may not fit
        a CPU or a small GPU). JSON-constrained output is compact (no free whitespace between tokens) where this
        vLLM supports it: small models otherwise fill ``max_tokens`` with newlines inside the JSON (seen with
        SmolLM2 on vLLM 0.32). Anything in ``extra.engine_kwargs`` wins.
        """
        kwargs: dict[str, Any] = {"model": self.model, "seed": self.config.seed, "max_model_len": self.config.n_ctx}
        if self.config.extra.get("compact_json", True) and compact_json_supported():
            kwargs["structured_outputs_config"] = {"backend": "xgrammar", "disable_any_whitespace": True}
        kwargs.update(self.config.extra.get("engine_kwargs") or {})
        return kwargs

    def engine(self) -> Any:
        self._started_in_call = self._engine is None
        if self._engine is None:
            engine_kwargs = self.engine_kwargs()
            try:
                self._engine = self._vllm.LLM(**engine_kwargs)
            except Exception as exc:  # noqa: BLE001 - report any engine start failure the same way
                raise LLMError(f"{self.description}: engine failed to start: {type(exc).__name__}: {exc}") from exc
        return self._engine

    # -- translation ----------------------------------------------------------------------------------------------
    def sampling_params(
        self,
        *,
        n: int = 1,
        temperature: float | None = None,
        max_tokens: int | None = None,
        seed: int | None = None,
        stop: list[str] | str | None = None,
        schema: dict[str, Any] | None = None,
        json_object: bool = False,
    ) -> Any:
        """vLLM ``SamplingParams`` for one request."""
        kwargs: dict[str, Any] = {
            "n": n,
            "temperature": self.config.temperature if temperature is None else temperature,
            "max_tokens": self.config.max_tokens if max_tokens is None else max_tokens,
            "seed": seed,
        }
        if stop:
            kwargs["stop"] = [stop] if isinstance(stop, str) else list(stop)
        kwargs.update(structured_output_kwargs(schema, json_object=json_object))
        return self._vllm.SamplingParams(**kwargs)

    def prepare(self, request: CompletionRequest) -> _Prepared:
        """Translate one request (public so the translation can be tested without an engine)."""
        common = dict(n=request.n, temperature=request.temperature, max_tokens=request.max_tokens,
                      seed=self.seeds.next(request.seed, request.n), stop=request.stop)
        tools, tool_choice, messages = request.tools, request.tool_choice, request.messages
        if request.uses_tools():
            if isinstance(tool_choice, dict):
                wanted = tool_choice.get("function", {}).get("name")
                tools = [t for t in tools if t["function"]["name"] == wanted] or tools
            if self.tool_mode == "template":
                return _Prepared(list(messages), self.sampling_params(**common), tools, "tagged")
            system = JSONToolParser(constrain=True).format_tools(tools)["system"]
            msgs = add_system_text(messages_as_text(messages, style="json"), system)
            return _Prepared(msgs, self.sampling_params(**common, schema=tool_call_schema(tools)), None, "json")
        response_format = request.response_format
        schema = schema_from_response_format(response_format)
        json_object = bool(response_format) and response_format.get("type") == "json_object"
        msgs = messages_as_text(messages)
        if schema is not None:
            msgs = add_system_text(msgs, schema_prompt(schema))
        return _Prepared(msgs, self.sampling_params(**common, schema=schema, json_object=json_object), None, None)

    # -- generation -----------------------------------------------------------------------------------------------
    def _run(self, prepared: list[_Prepared]) -> list[list[LLMResponse]]:
        """One ``LLM.chat`` call per distinct tool list (normally exactly one), results in request order."""
        groups: dict[str, list[int]] = {}
        for i, p in enumerate(prepared):
            groups.setdefault(json.dumps(p.chat_tools, sort_keys=True), []).append(i)
        results: list[list[LLMResponse]] = [[] for _ in prepared]
        engine = self.engine()
        if deadline_passed():  # offline vLLM cannot stop a generation; do not start one past the call's deadline
            raise LLMError(f"{self.description}: the call's deadline passed before generation "
                           f"({'while the engine started' if self._started_in_call else 'deadline reached'})",
                           retryable=False)
        for indices in groups.values():
            chat_kwargs: dict[str, Any] = {"use_tqdm": False}
            if prepared[indices[0]].chat_tools:
                chat_kwargs["tools"] = prepared[indices[0]].chat_tools
            start = time.perf_counter()
            try:
                with self._lock:
                    outputs = engine.chat(
                        [prepared[i].messages for i in indices],
                        [prepared[i].sampling_params for i in indices],
                        **chat_kwargs,
                    )
            except LLMError:
                raise
            except Exception as exc:  # noqa: BLE001
                raise LLMError(f"{self.description}: generation failed: {type(exc).__name__}: {exc}") from exc
            latency = time.perf_counter() - start
            for i, output in zip(indices, outputs):
                results[i] = _convert(output, prepared[i].read_tools, latency)
        return results

    def _complete(self, request: CompletionRequest) -> list[LLMResponse]:
        return self._run([self.prepare(request)])[0]

    def complete_many(
        self, requests: list[dict[str, Any]], max_workers: int = 8, *, raise_errors: bool = False
    ) -> list[list[LLMResponse]]:
        """All requests in one engine call: vLLM batches them itself, threads would only add contention."""
        if not requests:
            return []
        start = time.perf_counter()
        try:
            results = self._run([self.prepare(CompletionRequest.of(r)) for r in requests])
        except LLMError as exc:
            self.usage.add(calls=len(requests), failures=len(requests), seconds=time.perf_counter() - start)
            if raise_errors:
                raise
            return [[LLMResponse(finish_reason="error", error=str(exc))] for _ in requests]
        seconds = time.perf_counter() - start
        for responses in results:
            self.usage.record(responses, seconds / len(results))
        return results


def _convert(output: Any, read_tools: str | None, latency: float) -> list[LLMResponse]:
    prompt_tokens = len(getattr(output, "prompt_token_ids", None) or [])
    responses = []
    for k, completion in enumerate(output.outputs):
        response = LLMResponse(
            text=completion.text,
            finish_reason=getattr(completion, "finish_reason", None),
            prompt_tokens=prompt_tokens if k == 0 else 0,
            completion_tokens=len(getattr(completion, "token_ids", None) or []),
            latency_s=latency,
        )
        if read_tools == "json":
            response.tool_calls = JSONToolParser().parse(response.text).calls
            if response.tool_calls:  # constrained JSON becomes a native call, as with function calling
                response.meta["raw_text"], response.text = response.text, ""
        elif read_tools == "tagged":
            response.tool_calls = TaggedTextParser().parse(response.text).calls
        responses.append(response)
    return responses
