"""Scripted LLM: a test double that replays given responses or calls a Python function. For tests only.

Like pydantic-ai's ``FunctionModel``: agents and workflows can be tested deterministically, without a model, and
every request the code under test made is recorded in :attr:`ScriptedLLM.requests` for assertions.
"""

from __future__ import annotations

import copy
import json
import threading
from typing import Any, Callable, Sequence

from harness.llm.base import LLMClient, LLMError, LLMResponse, Message, ToolCall
from harness.llm.config import LLMConfig

ScriptFn = Callable[..., "str | LLMResponse | dict[str, Any]"]


def to_response(item: Any) -> LLMResponse:
    """Turn a script item into an :class:`LLMResponse`.

    Strings become the text; dicts may hold ``text``, ``tool_calls`` (``{"name", "arguments", "id"?}`` or OpenAI
    format), ``finish_reason`` and the token counts.
    """
    if isinstance(item, LLMResponse):
        return copy.deepcopy(item)
    if isinstance(item, str):
        return LLMResponse(text=item, finish_reason="stop")
    if isinstance(item, dict):
        calls = []
        for k, raw in enumerate(item.get("tool_calls") or []):
            fn = raw.get("function", raw)
            args = fn.get("arguments") or {}
            if isinstance(args, str):
                args = json.loads(args)
            calls.append(ToolCall(id=raw.get("id") or f"call_scripted_{k}", name=fn["name"], arguments=args))
        return LLMResponse(
            text=item.get("text", item.get("content")) or "",
            tool_calls=calls,
            finish_reason=item.get("finish_reason", "tool_calls" if calls else "stop"),
            prompt_tokens=int(item.get("prompt_tokens", 0)),
            completion_tokens=int(item.get("completion_tokens", 0)),
        )
    raise TypeError(f"cannot use {item!r} as a scripted response")


class ScriptedLLM(LLMClient):
    """Replays ``responses`` in order (one per sample) or answers with ``fn(messages, **request)``.

    A script item that is an exception is raised (an :class:`LLMError` as is, anything else wrapped), to test
    failure paths. When the script runs out an :class:`LLMError` is raised, unless ``cycle`` is set.
    """

    provider = "scripted"

    def __init__(
        self,
        responses: Sequence[Any] | None = None,
        *,
        fn: ScriptFn | None = None,
        cycle: bool = False,
    ) -> None:
        super().__init__()
        if (responses is None) == (fn is None):
            raise ValueError("ScriptedLLM needs exactly one of responses= or fn=")
        self._script = list(responses or [])
        self._fn = fn
        self._cycle = cycle
        self._pos = 0
        self._lock = threading.Lock()
        self.requests: list[dict[str, Any]] = []

    @classmethod
    def from_config(cls, config: LLMConfig) -> "ScriptedLLM":
        extra = config.extra
        return cls(extra.get("responses"), fn=extra.get("fn"), cycle=bool(extra.get("cycle", False)))

    @property
    def description(self) -> str:
        return "scripted test model"

    @property
    def remaining(self) -> int:
        return max(0, len(self._script) - self._pos) if not self._cycle else len(self._script)

    def _next_item(self) -> Any:
        with self._lock:
            if self._pos >= len(self._script):
                if not self._cycle or not self._script:
                    raise LLMError(f"scripted model: script exhausted after {self._pos} responses")
                self._pos = 0
            item = self._script[self._pos]
            self._pos += 1
            return item

    def _complete(self, messages: list[Message], **request: Any) -> list[LLMResponse]:
        with self._lock:
            self.requests.append({"messages": copy.deepcopy(messages), **copy.deepcopy(request)})
        out = []
        for i in range(request["n"]):
            if self._fn is not None:
                item = self._fn(messages, sample_index=i, **request)
            else:
                item = self._next_item()
            if isinstance(item, LLMError):
                raise item
            if isinstance(item, BaseException):
                raise LLMError(f"scripted model: {type(item).__name__}: {item}") from item
            out.append(to_response(item))
        return out
