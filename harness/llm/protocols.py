"""Tool-call protocols: how tools are shown to a model and how its calls are read back.

Three are provided because models differ: :class:`NativeToolParser` uses the API's own function calling (OpenAI
``tool_calls`` and ``role: tool`` messages), :class:`JSONToolParser` asks for one JSON object
``{"tool": name, "arguments": {...}}`` (works with any model, and with grammar-constrained decoding),
:class:`TaggedTextParser` uses Hermes/Qwen-style ``<tool_call>{"name": ..., "arguments": ...}</tool_call>`` tags
(what many open models are trained on).

They live with the clients (not the runtime) because clients use them too: a client without native function
calling reads calls from text with them and returns native :class:`ToolCall`s. Tool results are reported back
from anything shaped like ``harness.tools.base.ToolCallResult`` (:class:`ToolResultLike`), so this module needs
no tool code.

Parsers never invent a call: no call in the text gives an empty list, and a malformed attempt gives an empty list
plus an entry in :attr:`BaseParser.last_errors` (also returned by :meth:`BaseParser.parse`) that the agent can
show the model so it corrects itself.
"""

from __future__ import annotations

import json
import re
import uuid
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol

from harness.llm.base import LLMResponse, Message, ToolCall
from harness.llm.json_output import _decoded_values, cut_off, extract_json
from harness.llm.text_rendering import add_system_text


class ToolResultLike(Protocol):
    """What a protocol reads from a tool result (``harness.tools.base.ToolCallResult`` has it)."""

    tool_name: str
    ok: bool
    result_str: str
    error: str | None
    call_id: str


# -- tools ------------------------------------------------------------------------------------------------------


def normalize_tools(tools: Any) -> list[dict[str, Any]]:
    """OpenAI ``tools`` list from OpenAI dicts, bare function dicts, BaseTool classes/instances, or a name->tool map."""
    if tools is None:
        return []
    if isinstance(tools, dict):
        tools = list(tools.values())
    out: list[dict[str, Any]] = []
    for tool in tools:
        if hasattr(tool, "openai_schema"):
            out.append(tool.openai_schema())
        elif isinstance(tool, dict) and tool.get("type") == "function" and "function" in tool:
            out.append(tool)
        elif isinstance(tool, dict) and "name" in tool:
            out.append({"type": "function", "function": tool})
        else:
            raise TypeError(f"cannot use {tool!r} as a tool (need an OpenAI tool dict or a BaseTool)")
    return out


def tool_call_schema(tools: list[dict[str, Any]], *, name_key: str = "tool") -> dict[str, Any]:
    """JSON schema of one call ``{"tool": <name>, "arguments": {...}}`` (anyOf over the tools), for constrained
    decoding."""
    options = []
    for tool in normalize_tools(tools):
        fn = tool["function"]
        params = fn.get("parameters") or {"type": "object", "properties": {}}
        options.append(
            {
                "type": "object",
                "properties": {name_key: {"type": "string", "enum": [fn["name"]]}, "arguments": params},
                "required": [name_key, "arguments"],
            }
        )
    if len(options) == 1:
        return options[0]
    return {"anyOf": options}


def _tool_catalogue(tools: list[dict[str, Any]]) -> str:
    lines = []
    for tool in tools:
        fn = tool["function"]
        lines.append(
            json.dumps(
                {"name": fn["name"], "description": fn.get("description", ""), "parameters": fn.get("parameters", {})}
            )
        )
    return "\n".join(lines)


def new_call_id() -> str:
    return "call_" + uuid.uuid4().hex[:12]


def _as_call(obj: Any, name_keys: tuple[str, ...]) -> tuple[ToolCall | None, str | None]:
    """A ToolCall from a decoded object, or (None, error) when it is a broken attempt, or (None, None) if no call."""
    if not isinstance(obj, dict):
        return None, None
    if isinstance(obj.get("function"), dict):  # {"function": {"name":..., "arguments":...}}
        obj = {**obj["function"], **{k: v for k, v in obj.items() if k != "function"}}
    name = next((obj[k] for k in name_keys if k in obj), None)
    if name is None:
        return None, None
    if not isinstance(name, str) or not name.strip():
        return None, f"tool name must be a non-empty string, got {name!r}"
    args = next((obj[k] for k in ("arguments", "parameters", "args", "input") if k in obj), {})
    if isinstance(args, str):
        args, err = extract_json(args) if args.strip() else ({}, None)
        if err is not None:
            return None, f"arguments of {name} are not valid JSON: {err}"
    if args is None:
        args = {}
    if not isinstance(args, dict):
        return None, f"arguments of {name} must be a JSON object, got {type(args).__name__}"
    return ToolCall(id=str(obj.get("id") or new_call_id()), name=name.strip(), arguments=args), None


@dataclass
class ParseOutcome:
    """Calls found in one response, and the problems met on the way (empty when all went well)."""

    calls: list[ToolCall] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


def _text_of(response: LLMResponse | str) -> str:
    return response if isinstance(response, str) else (response.text or "")


class BaseParser(ABC):
    """One tool-call protocol: how tools are presented, how calls are read, how results go back."""

    name: ClassVar[str] = ""

    def __init__(self) -> None:
        self.last_errors: list[str] = []

    @abstractmethod
    def format_tools(self, tools: Any) -> dict[str, Any]:
        """``{"kwargs": <extra kwargs for LLMClient.complete>, "system": <text to add to the system prompt>}``."""

    @abstractmethod
    def parse(self, response: LLMResponse | str) -> ParseOutcome:
        """Calls and errors found in ``response``."""

    @abstractmethod
    def format_tool_result_messages(self, results: list[ToolResultLike]) -> list[Message]:
        """Messages that report ``results`` back to the model."""

    def parse_response(self, response: LLMResponse | str) -> list[ToolCall]:
        """Calls in ``response`` (empty if none); problems are left in :attr:`last_errors`."""
        outcome = self.parse(response)
        self.last_errors = outcome.errors
        return outcome.calls

    def format_assistant_message(self, response: LLMResponse) -> Message:
        """The assistant turn as it should be kept in the history."""
        return {"role": "assistant", "content": response.text or ""}

    def prepare(self, messages: list[Message], tools: Any) -> tuple[list[Message], dict[str, Any]]:
        """Messages with the tool instructions merged into the system prompt, plus the ``complete`` kwargs."""
        fmt = self.format_tools(tools)
        return add_system_text(messages, fmt.get("system", "")), dict(fmt.get("kwargs", {}))


def _text_result_payload(result: ToolResultLike) -> dict[str, Any]:
    payload: dict[str, Any] = {"tool": result.tool_name, "ok": result.ok, "result": result.result_str}
    if not result.ok and result.error and not result.result_str:
        payload["result"] = f"Error: {result.error}"
    return payload


class NativeToolParser(BaseParser):
    """The API's own function calling. Falls back to ``<tool_call>`` tags in the text, which some servers leave
    unparsed (e.g. a Qwen/Hermes model behind a server without a tool parser)."""

    name = "native"

    def format_tools(self, tools: Any) -> dict[str, Any]:
        normalized = normalize_tools(tools)
        return {"kwargs": {"tools": normalized} if normalized else {}, "system": ""}

    def parse(self, response: LLMResponse | str) -> ParseOutcome:
        outcome = ParseOutcome()
        if isinstance(response, LLMResponse) and response.tool_calls:
            for call in response.tool_calls:
                if call.parse_error:
                    outcome.errors.append(f"call to {call.name}: {call.parse_error}")
                else:
                    outcome.calls.append(call)
            return outcome
        if "<tool_call>" in _text_of(response):
            return TaggedTextParser().parse(response)
        return outcome

    def format_assistant_message(self, response: LLMResponse) -> Message:
        return response.to_message()

    def format_tool_result_messages(self, results: list[ToolResultLike]) -> list[Message]:
        return [
            {
                "role": "tool",
                "tool_call_id": r.call_id,
                "name": r.tool_name,
                "content": r.result_str or (f"Error: {r.error}" if r.error else ""),
            }
            for r in results
        ]


class JSONToolParser(BaseParser):
    """The model answers with ``{"tool": name, "arguments": {...}}`` (or a list of such objects).

    With ``constrain=True`` :meth:`format_tools` also returns a ``response_format`` that forces this shape,
    for providers with grammar-constrained decoding (then the model can only call tools).
    """

    name = "json"
    NAME_KEYS = ("tool", "name", "tool_name")

    def __init__(self, constrain: bool = False) -> None:
        super().__init__()
        self.constrain = constrain

    def format_tools(self, tools: Any) -> dict[str, Any]:
        normalized = normalize_tools(tools)
        if not normalized:
            return {"kwargs": {}, "system": ""}
        alternative = "" if self.constrain else "To answer without a tool, reply in plain text.\n"
        system = (
            "To call a tool, reply with only a JSON object of the form "
            '{"tool": "<tool name>", "arguments": {<arguments>}} and nothing else.\n'
            + alternative
            + "Available tools (JSON schema of the arguments):\n"
            + _tool_catalogue(normalized)
        )
        kwargs: dict[str, Any] = {}
        if self.constrain:
            kwargs["response_format"] = {
                "type": "json_schema",
                "json_schema": {"name": "tool_call", "schema": tool_call_schema(normalized)},
            }
        return {"kwargs": kwargs, "system": system}

    def parse(self, response: LLMResponse | str) -> ParseOutcome:
        outcome = ParseOutcome()
        text = _text_of(response)
        if isinstance(response, LLMResponse) and response.tool_calls and not text.strip():
            return NativeToolParser().parse(response)
        values, error = _decoded_values(text)
        for value in values:  # the first JSON value that holds a call (or a broken one) is the reply
            for item in _call_items(value):
                call, err = _as_call(item, self.NAME_KEYS)
                if call is not None:
                    outcome.calls.append(call)
                elif err is not None:
                    outcome.errors.append(err)
            if outcome.calls or outcome.errors:
                break
        if not values and error and _looks_like_call_attempt(text, self.NAME_KEYS):
            outcome.errors.append(f"could not read the tool call: {error}")
        return outcome

    def format_tool_result_messages(self, results: list[ToolResultLike]) -> list[Message]:
        if not results:
            return []
        body = "\n".join(json.dumps(_text_result_payload(r)) for r in results)
        return [{"role": "user", "content": f"Tool results:\n{body}"}]


def _call_items(value: Any) -> list[Any]:
    """Objects that may be calls: a list of them, ``{"tool_calls": [...]}``, or the object itself."""
    if isinstance(value, list):
        return value
    if isinstance(value, dict):
        nested = value.get("tool_calls")
        return nested if isinstance(nested, list) else [value]
    return []


def _looks_like_call_attempt(text: str, name_keys: tuple[str, ...]) -> bool:
    return "{" in text and any(f'"{k}"' in text or f"'{k}'" in text for k in name_keys)


_TAG = re.compile(r"<tool_call>\s*(.*?)\s*(?:</tool_call>|(?=<tool_call>)|$)", re.DOTALL)


class TaggedTextParser(BaseParser):
    """Hermes/Qwen-style ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` blocks in the text.

    Results go back as ``<tool_response>`` blocks in a user message, which every chat template accepts.
    """

    name = "tagged"
    NAME_KEYS = ("name", "tool", "tool_name")

    def format_tools(self, tools: Any) -> dict[str, Any]:
        normalized = normalize_tools(tools)
        if not normalized:
            return {"kwargs": {}, "system": ""}
        system = (
            "You may call tools. Function signatures are inside <tools></tools>:\n<tools>\n"
            + _tool_catalogue(normalized)
            + "\n</tools>\nTo call a tool, write:\n<tool_call>\n"
            '{"name": "<tool name>", "arguments": {<arguments>}}\n</tool_call>\n'
            "You may write several <tool_call> blocks in one reply."
        )
        return {"kwargs": {}, "system": system}

    def parse(self, response: LLMResponse | str) -> ParseOutcome:
        outcome = ParseOutcome()
        text = _text_of(response)
        if isinstance(response, LLMResponse) and response.tool_calls and "<tool_call>" not in text:
            return NativeToolParser().parse(response)
        for match in _TAG.finditer(text):
            body = match.group(1).strip()
            if not body:
                outcome.errors.append("empty <tool_call> block")
                continue
            if cut_off(body):
                # The object never closes (the answer hit max_tokens): an object nested in it is not the call.
                outcome.errors.append("could not read <tool_call> block: its JSON object never closes (cut off at max_tokens?)")
                continue
            value, error = extract_json(body)
            if error is not None:
                outcome.errors.append(f"could not read <tool_call> block: {error}")
                continue
            call, err = _as_call(value, self.NAME_KEYS)
            if call is not None:
                outcome.calls.append(call)
            else:
                outcome.errors.append(err or "<tool_call> block has no tool name")
        return outcome

    def format_tool_result_messages(self, results: list[ToolResultLike]) -> list[Message]:
        if not results:
            return []
        blocks = "\n".join(f"<tool_response>\n{json.dumps(_text_result_payload(r))}\n</tool_response>" for r in results)
        return [{"role": "user", "content": blocks}]


PARSERS: dict[str, type[BaseParser]] = {
    NativeToolParser.name: NativeToolParser,
    JSONToolParser.name: JSONToolParser,
    TaggedTextParser.name: TaggedTextParser,
}


def make_parser(name: str, **options: Any) -> BaseParser:
    """Parser by protocol name: ``native``, ``json`` or ``tagged``."""
    try:
        return PARSERS[name](**options)
    except KeyError:
        raise KeyError(f"unknown tool-call protocol {name!r}; known: {sorted(PARSERS)}") from None
