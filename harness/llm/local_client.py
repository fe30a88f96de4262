"""Provider ``local``, the embedded default: llama.cpp (``llama_cpp.Llama``) running a GGUF file in-process.

The default model is Qwen2.5-Coder-1.5B-Instruct (Q4_K_M), shipped as chunk packages and assembled once into a
cache folder (``harness/llm/models.py``), so a fresh install runs every workflow end to end on a laptop CPU with
no server and no download step; SmolLM2-135M (``llm=tiny``) is the fast option for quick tests. Small models
need grammar-constrained decoding:

* structured output: llama.cpp enforces ``{"type": "json_object", "schema": ...}`` but silently ignores
  ``{"type": "json_schema", ...}``, so the canonical form is translated. Small models loop inside unbounded
  strings/arrays, so :func:`bound_schema` adds ``maxLength``/``maxItems`` where missing. The grammar admits raw
  newlines inside strings, hence ``json.loads(strict=False)`` before validation.
* tools: the output is constrained to ``{"tool": <name>, "arguments": {...}}`` (anyOf over the tools) and read
  back as a native :class:`ToolCall`, so callers can use :class:`harness.llm.protocols.NativeToolParser` with any
  provider. ``tool_choice="none"`` turns this off.
* ``n`` > 1: sequential generations with seeds ``seed, seed+1, ...``.

``Llama`` objects are not thread-safe and expensive to load, so they are cached per process per
``(path, n_ctx, n_threads)`` and every use holds that model's lock. Threads: with ``n_threads`` unset the model
generates on every core while no SR engine runs in this process, and on one core while one does (the engine
wants the other), followed during a call (``llama_runtime.ThreadFollower``: an SR run that ends mid-call hands its core back). llama.cpp reuses the evaluated prefix of the
previous prompt (its KV cache), so prompts that share a long prefix cost only their new tokens. Generation streams so a call can stop at its
deadline (``timeout_s``): the partial text is returned with ``finish_reason="timeout"``.
"""

from __future__ import annotations

import copy
import json
import os
import threading
import time
from typing import Any

import jsonschema

from harness.core.resources import engine_runs_active, usable_cpus
from harness.llm.base import (
    CompletionRequest,
    LLMClient,
    LLMError,
    LLMResponse,
    Message,
    ToolCall,
    schema_from_response_format,
)
from harness.llm.failures import seconds_left
from harness.llm.config import LLMConfig
from harness.llm.protocols import JSONToolParser, new_call_id, tool_call_schema
from harness.llm.text_rendering import add_system_text, messages_as_text
from harness.llm.llama_runtime import ThreadFollower, load_llama
from harness.llm.models import embedded_model_path, resolve_model_name

DEFAULT_MAX_STRING = 300
DEFAULT_MAX_ITEMS = 10
# llama.cpp expands a bounded string into one grammar rule per character; far past ~1000 it rejects the grammar
# and can then crash the process (seen with maxLength 1200), so no string bound may exceed this.
GRAMMAR_MAX_STRING = 1000
# Per-call limit when the config does not set one: an in-process model cannot hang like a server, but on a 2-core
# CPU with an SR run beside it (one thread) a ~700-token role prompt alone takes over a minute to evaluate, and
# the generic 60 s would cut the call before its first token.
LOCAL_TIMEOUT_S = 300.0


def default_model_path(name: str | None = None) -> str:
    """GGUF path of the embedded model ``name`` (None = the default, Qwen2.5-Coder-1.5B; see ``models.py``)."""
    return embedded_model_path(name)


# -- schema bounds ----------------------------------------------------------------------------------------------

_SUBSCHEMA_LISTS = ("anyOf", "oneOf", "allOf", "prefixItems")
_SUBSCHEMA_MAPS = ("properties", "$defs", "definitions", "patternProperties")


def bound_schema(
    schema: dict[str, Any], max_string: int = DEFAULT_MAX_STRING, max_items: int = DEFAULT_MAX_ITEMS
) -> dict[str, Any]:
    """Copy of ``schema`` where every string has a ``maxLength`` and every array a ``maxItems``.

    Existing bounds are kept; strings restricted by ``enum``/``const`` need none. Why: a grammar only says what
    may come next, not when to stop, and small models often never close an unbounded string or array.
    """
    return _bound(copy.deepcopy(schema), max_string, max_items)


def _bound(node: Any, max_string: int, max_items: int) -> Any:
    if not isinstance(node, dict):
        return node
    types = node.get("type")
    types = set(types) if isinstance(types, list) else {types}
    if "string" in types and "maxLength" not in node and "enum" not in node and "const" not in node:
        node["maxLength"] = max(max_string, int(node.get("minLength", 0)))
    if isinstance(node.get("maxLength"), int) and node["maxLength"] > GRAMMAR_MAX_STRING:
        node["maxLength"] = GRAMMAR_MAX_STRING
        node["minLength"] = min(int(node.get("minLength", 0)), GRAMMAR_MAX_STRING)
    if "array" in types and "maxItems" not in node:
        node["maxItems"] = max(max_items, int(node.get("minItems", 0)))
    if "object" in types and isinstance(node.get("properties"), dict) and "additionalProperties" not in node:
        # An open object lets a small model invent keys forever; close it where its keys are declared.
        node["additionalProperties"] = False
    for key in _SUBSCHEMA_LISTS:
        if isinstance(node.get(key), list):
            node[key] = [_bound(s, max_string, max_items) for s in node[key]]
    for key in _SUBSCHEMA_MAPS:
        if isinstance(node.get(key), dict):
            node[key] = {k: _bound(s, max_string, max_items) for k, s in node[key].items()}
    for key in ("items", "additionalProperties", "not"):
        if isinstance(node.get(key), dict):
            node[key] = _bound(node[key], max_string, max_items)
    return node


# -- the client -------------------------------------------------------------------------------------------------


class LocalLlamaClient(LLMClient):
    """In-process llama.cpp. Loads lazily on first call; clients with equal settings share one model."""

    provider = "local"

    def __init__(self, config: LLMConfig | None = None) -> None:
        self.config = config or LLMConfig()
        super().__init__(seed=self.config.seed)
        self.model_path = self.config.model_path or None  # resolved lazily: a missing package fails on use
        self.max_string = int(self.config.extra.get("max_string", DEFAULT_MAX_STRING))
        self.max_items = int(self.config.extra.get("max_items", DEFAULT_MAX_ITEMS))
        self.timeout_s = float(self.config.timeout_s if "timeout_s" in self.config.model_fields_set
                               else LOCAL_TIMEOUT_S)

    @property
    def description(self) -> str:
        name = os.path.basename(self.model_path) if self.model_path else resolve_model_name(self.config.model)
        return f"local llama.cpp model {name}"

    def complete_many(
        self, requests: list[dict[str, Any]], max_workers: int = 8, *, raise_errors: bool = False
    ) -> list[list[LLMResponse]]:
        """Sequential: one in-process model serves one request at a time, threads would only queue on its lock
        (and could run into the lock's timeout)."""
        return super().complete_many(requests, max_workers=1, raise_errors=raise_errors)

    def ready(self) -> None:
        """Load the model now (and probe the CPU kernels on a new machine): an unusable model fails here, in one
        line, not in the middle of a job (``harness.llm.cpu_kernels``)."""
        self._model()

    def _model(self) -> tuple[Any, threading.Lock]:
        if self.model_path is None:
            self.model_path = default_model_path(self.config.model)
        return load_llama(self.model_path, self.config.n_ctx, self.max_threads(), self.config.cpu_kernels)

    def max_threads(self) -> int:
        """Threads the model is loaded with: every usable core (at most 8); each call then uses ``threads_now()``."""
        return max(1, min(8, usable_cpus()), int(self.config.n_threads or 1))

    def threads_now(self) -> int:
        """Threads for the next generation: ``n_threads`` when set, else every core less one per running engine."""
        if self.config.n_threads:
            return int(self.config.n_threads)
        return max(1, self.max_threads() - engine_runs_active())

    def _complete(self, request: CompletionRequest) -> list[LLMResponse]:
        msgs = _plain_messages(messages_as_text(request.messages, style="json"))
        schema: dict[str, Any] | None = None
        tool_mode = request.uses_tools()
        response_format = request.response_format
        if tool_mode:
            tools = list(request.tools or [])
            if isinstance(request.tool_choice, dict):
                wanted = request.tool_choice.get("function", {}).get("name")
                tools = [t for t in tools if t["function"]["name"] == wanted] or tools
            msgs = add_system_text(msgs, JSONToolParser(constrain=True).format_tools(tools)["system"])
            schema = tool_call_schema(tools)
        else:
            schema = schema_from_response_format(response_format)
            if schema is not None:
                msgs = _add_schema_hint(msgs, schema)
        grammar_format: dict[str, Any] | None = None
        if schema is not None:
            schema = bound_schema(schema, self.max_string, self.max_items)
            grammar_format = {"type": "json_object", "schema": schema}
        elif response_format and response_format.get("type") == "json_object":
            grammar_format = {"type": "json_object"}

        base_seed = self.seeds.next(request.seed, request.n)
        llama, lock = self._model()
        out = []
        for i in range(request.n):
            response = self._generate(
                llama,
                lock,
                msgs,
                grammar_format=grammar_format,
                temperature=self.config.temperature if request.temperature is None else request.temperature,
                max_tokens=self.config.max_tokens if request.max_tokens is None else request.max_tokens,
                seed=base_seed + i,
                stop=request.stops(),
            )
            if schema is not None:
                _check_json(response, schema, tool_mode)
            out.append(response)
        return out

    def _generate(
        self,
        llama: Any,
        lock: threading.Lock,
        messages: list[Message],
        *,
        grammar_format: dict[str, Any] | None,
        temperature: float,
        max_tokens: int,
        seed: int,
        stop: list[str],
    ) -> LLMResponse:
        timeout = seconds_left(self.timeout_s)  # the run's deadline caps the client's timeout
        start = time.perf_counter()
        if not lock.acquire(timeout=timeout):
            raise LLMError(f"{self.description}: model busy for more than {timeout:g}s (another call holds it)")
        follower = ThreadFollower(llama, self.threads_now)
        try:
            follower.start()
            deadline = time.perf_counter() + seconds_left(self.timeout_s)  # after any wait for the lock
            pieces: list[str] = []
            finish_reason: str | None = None
            completion_tokens = 0
            try:
                stream = llama.create_chat_completion(
                    messages=messages,
                    temperature=temperature,
                    max_tokens=max_tokens,
                    seed=seed,
                    stop=stop,
                    response_format=grammar_format,
                    stream=True,
                )
                for chunk in stream:
                    choice = chunk["choices"][0]
                    piece = choice.get("delta", {}).get("content")
                    if piece:
                        pieces.append(piece)
                        completion_tokens += 1
                    if choice.get("finish_reason"):
                        finish_reason = choice["finish_reason"]
                    if time.perf_counter() > deadline:
                        finish_reason = "timeout"
                        stream.close()
                        break
                total_tokens = int(getattr(llama, "n_tokens", 0) or 0)
            except LLMError:
                raise
            except Exception as exc:  # noqa: BLE001 - e.g. prompt longer than n_ctx
                raise LLMError(f"{self.description}: generation failed: {type(exc).__name__}: {exc}") from exc
        finally:
            follower.stop()
            lock.release()
        return LLMResponse(
            text="".join(pieces),
            finish_reason=finish_reason or "stop",
            prompt_tokens=max(0, total_tokens - completion_tokens),
            completion_tokens=completion_tokens,
            latency_s=time.perf_counter() - start,
        )


def _add_schema_hint(messages: list[Message], schema: dict[str, Any]) -> list[Message]:
    """Name the keys at the end of the last user message; the grammar enforces the rest.

    Why not the whole schema in the system message: it costs hundreds of prompt tokens the grammar makes
    redundant, and a system message that differs per schema defeats llama.cpp's reuse of the shared prefix.
    """
    keys = list((schema.get("properties") or {}).keys())
    hint = ("Reply with only a JSON object" + (f" with the keys {', '.join(keys)}." if keys else "."))
    out = [dict(m) for m in messages]
    for msg in reversed(out):
        if msg.get("role") == "user":
            msg["content"] = f"{msg.get('content') or ''}\n\n{hint}".strip()
            return out
    return out + [{"role": "user", "content": hint}]


def _plain_messages(messages: list[Message]) -> list[Message]:
    """Messages the chat template can render: string contents, only system/user/assistant roles."""
    out = []
    for msg in messages:
        role = msg.get("role", "user")
        content = msg.get("content")
        if isinstance(content, list):  # OpenAI content parts: keep the text parts
            content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
        out.append({"role": role if role in ("system", "user", "assistant") else "user", "content": content or ""})
    return out


def _check_json(response: LLMResponse, schema: dict[str, Any], tool_mode: bool) -> None:
    """Decode (strict=False: the grammar lets raw newlines into strings) and validate; fill tool calls."""
    try:
        value = json.loads(response.text, strict=False)
        jsonschema.validate(value, schema)
    except (json.JSONDecodeError, jsonschema.ValidationError) as exc:
        msg = exc.msg if isinstance(exc, json.JSONDecodeError) else exc.message
        response.meta["json_error"] = f"{type(exc).__name__}: {msg} (finish_reason={response.finish_reason})"
        return
    if tool_mode:
        response.tool_calls = [ToolCall(id=new_call_id(), name=value["tool"], arguments=value["arguments"])]
        response.meta["raw_text"] = response.text
        response.text = ""  # the call lives in tool_calls, as with native function calling
        response.finish_reason = "tool_calls"
