"""Tool-call protocols and tolerant JSON parsing of model output.

A *protocol* is how tools are shown to the model and how its calls are read back. Three are provided because
models differ: :class:`NativeToolParser` uses the API's own function calling (OpenAI ``tool_calls`` and
``role: tool`` messages), :class:`JSONToolParser` asks for one JSON object ``{"tool": name, "arguments": {...}}``
(works with any model, and with grammar-constrained decoding), :class:`TaggedTextParser` uses Hermes/Qwen-style
``<tool_call>{"name": ..., "arguments": ...}</tool_call>`` tags (what many open models are trained on).

Parsers never invent a call: no call in the text gives an empty list, and a malformed attempt gives an empty list
plus an entry in :attr:`BaseParser.last_errors` (also returned by :meth:`BaseParser.parse`) that the agent can
show the model so it corrects itself.

:func:`parse_json_output` extracts JSON from chatty output (code fences, leading prose, trailing commas, raw
newlines in strings) and validates it against a pydantic model or a JSON schema.
"""

from __future__ import annotations

import ast
import json
import re
import uuid
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, ClassVar, Iterator

import jsonschema
from pydantic import BaseModel, ValidationError

from harness.llm.base import LLMResponse, Message, ToolCall
from harness.tools.base import ToolCallResult

# -- tolerant JSON ----------------------------------------------------------------------------------------------

_FENCE = re.compile(r"```[a-zA-Z0-9_+-]*[ \t]*\n?(.*?)(?:```|$)", re.DOTALL)


def _balanced_spans(text: str, opener: str = "{") -> Iterator[str]:
    """Outermost balanced ``{...}`` (or ``[...]``) spans, string- and escape-aware, in order of appearance."""
    closer = "}" if opener == "{" else "]"
    i = text.find(opener)
    while i != -1:
        depth = 0
        in_str = False
        esc = False
        end = -1
        for j in range(i, len(text)):
            ch = text[j]
            if in_str:
                if esc:
                    esc = False
                elif ch == "\\":
                    esc = True
                elif ch == '"':
                    in_str = False
            elif ch == '"':
                in_str = True
            elif ch == opener:
                depth += 1
            elif ch == closer:
                depth -= 1
                if depth == 0:
                    end = j
                    break
        if end == -1:  # unbalanced from here: try the next opener
            i = text.find(opener, i + 1)
            continue
        yield text[i : end + 1]
        i = text.find(opener, end + 1)


def _strip_trailing_commas(text: str) -> str:
    """Drop commas directly before ``}`` or ``]`` (outside strings), a common small-model slip."""
    out: list[str] = []
    in_str = False
    esc = False
    n = len(text)
    for idx, ch in enumerate(text):
        if in_str:
            out.append(ch)
            if esc:
                esc = False
            elif ch == "\\":
                esc = True
            elif ch == '"':
                in_str = False
            continue
        if ch == '"':
            in_str = True
        elif ch == ",":
            k = idx + 1
            while k < n and text[k] in " \t\r\n":
                k += 1
            if k < n and text[k] in "}]":
                continue
        out.append(ch)
    return "".join(out)


def _decode(candidate: str) -> tuple[Any, str | None]:
    """Decode one candidate: strict-ish JSON, then without trailing commas, then Python literals."""
    try:
        return json.loads(candidate, strict=False), None
    except json.JSONDecodeError as exc:
        first_error = f"invalid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"
    fixed = _strip_trailing_commas(candidate)
    if fixed != candidate:
        try:
            return json.loads(fixed, strict=False), None
        except json.JSONDecodeError:
            pass
    if len(candidate) < 20000 and candidate.lstrip()[:1] in "{[":
        try:  # single quotes / True / None: literal_eval never executes code
            value = ast.literal_eval(candidate)
            if isinstance(value, (dict, list)):
                return json.loads(json.dumps(value)), None
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            pass
    return None, first_error


def _candidates(text: str, opener: str = "{") -> Iterator[str]:
    """Places JSON may hide in model output, most specific first; duplicates removed."""
    seen: set[str] = set()
    stripped = text.strip()
    pool = [stripped]
    pool += [m.group(1).strip() for m in _FENCE.finditer(text)]
    for chunk in list(pool):
        pool += list(_balanced_spans(chunk, opener))
        if opener == "{":
            pool += list(_balanced_spans(chunk, "["))
    for cand in pool:
        if cand and cand not in seen:
            seen.add(cand)
            yield cand


def extract_json(text: str, *, prefer_array: bool = False) -> tuple[Any, str | None]:
    """The first JSON value that decodes in ``text`` (see :func:`parse_json_output`), or ``(None, error)``."""
    values, error = _decoded_values(text, prefer_array=prefer_array)
    return (values[0], None) if values else (None, error)


def _decoded_values(text: str, *, prefer_array: bool = False) -> tuple[list[Any], str | None]:
    if not text or not text.strip():
        return [], "empty output: expected a JSON object"
    values: list[Any] = []
    first_error: str | None = None
    for cand in _candidates(text, "[" if prefer_array else "{"):
        if cand[0] not in "{[":
            continue
        value, error = _decode(cand)
        if error is None:
            values.append(value)
        elif first_error is None:
            first_error = error
    if values:
        return values, None
    if first_error is None:
        snippet = text.strip()[:80].replace("\n", " ")
        first_error = f"no JSON object found in output (starts: {snippet!r})"
    return [], first_error


def _pydantic_error(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors()[:5]:
        loc = ".".join(str(p) for p in err.get("loc", ())) or "root"
        parts.append(f"{loc}: {err.get('msg')}")
    more = f" (+{len(exc.errors()) - 5} more)" if len(exc.errors()) > 5 else ""
    return "; ".join(parts) + more


def _validate(value: Any, target: type[BaseModel] | dict[str, Any] | None) -> tuple[Any, str | None]:
    if target is None:
        return value, None
    if isinstance(target, type) and issubclass(target, BaseModel):
        try:
            return target.model_validate(value), None
        except ValidationError as exc:
            return None, f"JSON does not match {target.__name__}: {_pydantic_error(exc)}"
    try:
        jsonschema.validate(value, target)
    except jsonschema.ValidationError as exc:
        where = "/".join(str(p) for p in exc.absolute_path) or "root"
        return None, f"JSON does not match the schema at {where}: {exc.message}"
    return value, None


def parse_json_output(
    text: str, model_cls: type[BaseModel] | dict[str, Any] | None = None
) -> tuple[Any | None, str | None]:
    """Extract and validate JSON from model output; returns ``(obj, None)`` or ``(None, error message)``.

    Tolerates code fences, prose around the JSON, trailing commas, raw newlines inside strings, single-quoted
    Python-style dicts. ``model_cls`` is a pydantic model (an instance is returned), a JSON schema dict (the
    validated dict is returned) or None (any JSON value). The first candidate that validates wins; otherwise the
    error of the first candidate that decoded (a validation error beats a syntax error).
    """
    prefer_array = isinstance(model_cls, dict) and model_cls.get("type") == "array"
    values, error = _decoded_values(text, prefer_array=prefer_array)
    first_error: str | None = None if values else error
    for value in values:
        obj, err = _validate(value, model_cls)
        if err is None:
            return obj, None
        first_error = first_error or err
    if _cut_off(text):  # say so: the error of a nested value ("[] is not an object") would mislead
        first_error = f"the JSON object never closes (cut off, e.g. at max_tokens); {first_error}"
    return None, first_error


def _cut_off(text: str) -> bool:
    """True when the text opens a JSON object that never closes (a truncated answer)."""
    body = (text or "").strip()
    return body.startswith("{") and not body.startswith(next(_balanced_spans(body), "\0"))


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
    def format_tool_result_messages(self, results: list[ToolCallResult]) -> list[Message]:
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


def add_system_text(messages: list[Message], text: str) -> list[Message]:
    """Copy of ``messages`` with ``text`` appended to the first system message (inserted if there is none)."""
    if not text:
        return list(messages)
    out = [dict(m) for m in messages]
    for msg in out:
        if msg.get("role") == "system":
            msg["content"] = f"{msg.get('content') or ''}\n\n{text}".strip()
            return out
    return [{"role": "system", "content": text}, *out]


def _text_result_payload(result: ToolCallResult) -> dict[str, Any]:
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

    def format_tool_result_messages(self, results: list[ToolCallResult]) -> list[Message]:
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

    def format_tool_result_messages(self, results: list[ToolCallResult]) -> list[Message]:
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
            if _cut_off(body):
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

    def format_tool_result_messages(self, results: list[ToolCallResult]) -> list[Message]:
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


# -- text renderings for models without function calling / constrained decoding ----------------------------


def schema_prompt(schema: dict[str, Any]) -> str:
    """System-prompt text asking for JSON that matches ``schema`` (the fallback when the server cannot constrain)."""
    return (
        "Reply with only a JSON object (no prose, no code fences) that matches this JSON schema:\n"
        + json.dumps(schema)
    )


def messages_as_text(messages: list[Message], style: str = "tagged") -> list[Message]:
    """History with native tool traffic rewritten as text, for models/servers without function calling.

    ``style="tagged"``: ``<tool_call>``/``<tool_response>`` blocks; ``"json"``: the ``{"tool", "arguments"}``
    objects the JSON protocol asks for, so the history matches what the model was told to write.
    """
    out: list[Message] = []
    for msg in messages:
        role = msg.get("role")
        if role == "assistant" and msg.get("tool_calls"):
            calls = [(tc["function"]["name"], _loads_or_raw(tc["function"]["arguments"])) for tc in msg["tool_calls"]]
            if style == "json":
                blocks = [json.dumps({"tool": name, "arguments": args}) for name, args in calls]
            else:
                blocks = [
                    "<tool_call>\n" + json.dumps({"name": name, "arguments": args}) + "\n</tool_call>"
                    for name, args in calls
                ]
            out.append({"role": "assistant", "content": "\n".join(filter(None, [msg.get("content") or "", *blocks]))})
        elif role == "tool":
            payload = json.dumps({"tool": msg.get("name", ""), "result": msg.get("content", "")})
            content = f"Tool result:\n{payload}" if style == "json" else f"<tool_response>\n{payload}\n</tool_response>"
            out.append({"role": "user", "content": content})
        else:
            out.append(msg)
    return out


def _loads_or_raw(value: Any) -> Any:
    if isinstance(value, str):
        try:
            return json.loads(value)
        except json.JSONDecodeError:
            return value
    return value
