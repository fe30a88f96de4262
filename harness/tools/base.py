"""Tool base class: one execution boundary for everything a model may call.

A tool is a subclass of :class:`BaseTool` with a ``name`` and an ``execute(**params)`` method. Its description
and JSON parameter schema are derived from the signature, the type hints and a Google-style docstring, unless
the subclass sets ``description`` / ``parameters_schema`` explicitly. ``__call__`` is the only way a tool runs:
it checks cancellation, validates arguments, measures time, and turns exceptions into ``ok=False`` results so a
broken tool never crashes a run. :class:`ToolRunAbort` is the one exception that propagates (it stops the run).
"""

from __future__ import annotations

import inspect
import json
import re
import threading
import time
import typing
from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar

import jsonschema

RESULT_STR_LIMIT = 2000


class ToolRunAbort(Exception):
    """Raised by a tool (or by cancellation) to stop the whole run, not just this call."""


@dataclass
class ToolCallResult:
    """What a tool call produced: the full machine-readable ``result`` and a bounded ``result_str`` for the model."""

    tool_name: str
    ok: bool
    result: Any = None
    result_str: str = ""
    error: str | None = None
    seconds: float = 0.0
    call_id: str = ""
    arguments: dict[str, Any] = field(default_factory=dict)

    def to_record(self) -> dict[str, Any]:
        """JSON-safe summary for traces (the full result only when it serialises)."""
        try:
            json.dumps(self.result, default=float)
            result = self.result
        except (TypeError, ValueError):
            result = repr(self.result)[:RESULT_STR_LIMIT]
        return {
            "tool_name": self.tool_name,
            "call_id": self.call_id,
            "ok": self.ok,
            "arguments": self.arguments,
            "result": result,
            "result_str": self.result_str,
            "error": self.error,
            "seconds": round(self.seconds, 6),
        }


def bound_text(text: str, limit: int = RESULT_STR_LIMIT) -> str:
    """Cut ``text`` to ``limit`` characters, saying how much was cut."""
    if len(text) <= limit:
        return text
    cut = len(text) - limit
    return text[: max(0, limit - 40)] + f"\n... [{cut} characters cut]"


_JSON_TYPES: dict[Any, str] = {str: "string", int: "integer", float: "number", bool: "boolean", dict: "object"}


def _annotation_schema(annotation: Any) -> dict[str, Any]:
    """JSON schema for a (simple) Python type annotation."""
    if annotation is inspect.Parameter.empty or annotation is Any:
        return {}
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is typing.Union or (origin is not None and str(origin) == "<class 'types.UnionType'>"):
        non_none = [a for a in args if a is not type(None)]
        if len(non_none) == 1:
            return _annotation_schema(non_none[0])
        return {"anyOf": [_annotation_schema(a) for a in non_none]}
    if origin is typing.Literal:
        return {"enum": list(args)}
    if origin in (list, tuple, typing.Sequence) or annotation in (list, tuple):
        schema: dict[str, Any] = {"type": "array"}
        if args:
            schema["items"] = _annotation_schema(args[0])
        return schema
    if origin is dict:
        return {"type": "object"}
    if annotation in _JSON_TYPES:
        return {"type": _JSON_TYPES[annotation]}
    return {}


def parse_google_docstring(doc: str | None) -> tuple[str, dict[str, str]]:
    """Split a Google-style docstring into (summary, {arg: description})."""
    if not doc:
        return "", {}
    doc = inspect.cleandoc(doc)
    summary_lines: list[str] = []
    args: dict[str, str] = {}
    section = None
    current = None
    for line in doc.splitlines():
        stripped = line.strip()
        if re.match(r"^(Args|Arguments|Parameters):\s*$", stripped):
            section = "args"
            continue
        if re.match(r"^(Returns|Raises|Yields|Examples?|Notes?):\s*$", stripped):
            section = "other"
            continue
        if section is None:
            summary_lines.append(stripped)
        elif section == "args" and stripped:
            m = re.match(r"^(\w+)\s*(\([^)]*\))?:\s*(.*)$", stripped)
            if m and line.startswith((" ", "\t")) and len(line) - len(line.lstrip()) <= 4:
                current = m.group(1)
                args[current] = m.group(3).strip()
            elif current:
                args[current] = (args[current] + " " + stripped).strip()
    summary = " ".join(s for s in summary_lines if s).strip()
    return summary, args


class BaseTool:
    """Base class of every tool; subclasses set ``name`` and implement ``execute``."""

    name: ClassVar[str] = ""
    description: ClassVar[str | None] = None
    parameters_schema: ClassVar[dict[str, Any] | None] = None
    result_str_limit: ClassVar[int] = RESULT_STR_LIMIT

    def __init__(self, context: Any = None):
        self.context = context

    # -- schema ---------------------------------------------------------------------------------------------
    @classmethod
    def tool_description(cls) -> str:
        if cls.description:
            return cls.description
        summary, _ = parse_google_docstring(cls.execute.__doc__)
        return summary or (inspect.cleandoc(cls.__doc__ or "").split("\n\n")[0].replace("\n", " "))

    @classmethod
    def tool_parameters(cls) -> dict[str, Any]:
        """JSON schema of ``execute``'s keyword parameters (explicit ``parameters_schema`` wins)."""
        if cls.parameters_schema is not None:
            return cls.parameters_schema
        _, arg_docs = parse_google_docstring(cls.execute.__doc__)
        sig = inspect.signature(cls.execute)
        try:
            hints = typing.get_type_hints(cls.execute)
        except Exception:  # unresolved forward references: fall back to raw annotations
            hints = {}
        properties: dict[str, Any] = {}
        required: list[str] = []
        for pname, param in sig.parameters.items():
            if pname == "self" or param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
                continue
            schema = dict(_annotation_schema(hints.get(pname, param.annotation)))
            if pname in arg_docs:
                schema["description"] = arg_docs[pname]
            if param.default is inspect.Parameter.empty:
                required.append(pname)
            elif param.default is not None and isinstance(param.default, (str, int, float, bool)):
                schema["default"] = param.default
            properties[pname] = schema
        return {"type": "object", "properties": properties, "required": required, "additionalProperties": False}

    @classmethod
    def openai_schema(cls) -> dict[str, Any]:
        """The tool in OpenAI's ``tools=[...]`` format."""
        return {
            "type": "function",
            "function": {"name": cls.name, "description": cls.tool_description(), "parameters": cls.tool_parameters()},
        }

    # -- execution ------------------------------------------------------------------------------------------
    def execute(self, **params: Any) -> Any:  # pragma: no cover - abstract
        raise NotImplementedError

    def format_result(self, result: Any) -> str:
        """Text the model reads; override for a compact rendering."""
        if isinstance(result, str):
            return result
        try:
            return json.dumps(result, default=_json_default, indent=None)
        except (TypeError, ValueError):
            return repr(result)

    def __call__(self, call_id: str = "", **arguments: Any) -> ToolCallResult:
        """A model's call: arguments checked against the tool's schema, then :meth:`execute` run by :meth:`invoke`."""
        self._abort_if_cancelled()
        start = time.perf_counter()
        try:
            jsonschema.validate(arguments, self.tool_parameters())
        except jsonschema.ValidationError as exc:
            where = "/".join(str(p) for p in exc.absolute_path) or "arguments"
            return ToolCallResult(
                tool_name=self.name,
                ok=False,
                error=f"invalid arguments for {self.name} ({where}): {exc.message}",
                result_str=bound_text(f"Error: invalid arguments for {self.name} ({where}): {exc.message}"),
                seconds=time.perf_counter() - start,
                call_id=call_id,
                arguments=arguments,
            )
        return self.invoke(call_id, arguments, lambda: self.execute(**arguments))

    def invoke(self, call_id: str, arguments: dict[str, Any], run: Callable[[], Any]) -> ToolCallResult:
        """The one execution boundary, for a model's call and code's typed call alike: cancellation, timing, and
        exceptions turned into ``ok=False`` results; ``arguments`` is what the record shows."""
        self._abort_if_cancelled()
        start = time.perf_counter()
        try:
            result = run()
        except ToolRunAbort:
            raise
        except Exception as exc:  # the boundary: a failing tool becomes a recorded failure
            msg = f"{type(exc).__name__}: {exc}"
            return ToolCallResult(
                tool_name=self.name,
                ok=False,
                error=msg,
                result_str=bound_text(f"Error: {msg}", self.result_str_limit),
                seconds=time.perf_counter() - start,
                call_id=call_id,
                arguments=arguments,
            )
        return ToolCallResult(
            tool_name=self.name,
            ok=True,
            result=result,
            result_str=bound_text(self.format_result(result), self.result_str_limit),
            seconds=time.perf_counter() - start,
            call_id=call_id,
            arguments=arguments,
        )

    def _abort_if_cancelled(self) -> None:
        cancel = getattr(self.context, "cancel_event", None)
        if isinstance(cancel, threading.Event) and cancel.is_set():
            raise ToolRunAbort("run cancelled")


def _json_default(obj: Any) -> Any:
    try:
        import numpy as np

        if isinstance(obj, np.ndarray):
            return obj.tolist()
        if isinstance(obj, np.generic):
            return obj.item()
    except ImportError:  # pragma: no cover
        pass
    return str(obj)


class ToolRegistry:
    """Tools by stable name. ``register`` is usable as a class decorator."""

    def __init__(self) -> None:
        self._tools: dict[str, type[BaseTool]] = {}

    def register(self, cls: type[BaseTool]) -> type[BaseTool]:
        if not cls.name:
            raise ValueError(f"{cls.__name__} has no name")
        existing = self._tools.get(cls.name)
        if existing is not None and existing is not cls:
            raise ValueError(f"tool name {cls.name!r} already registered by {existing.__name__}")
        self._tools[cls.name] = cls
        return cls

    def get(self, name: str) -> type[BaseTool]:
        try:
            return self._tools[name]
        except KeyError:
            raise KeyError(f"unknown tool {name!r}; known: {sorted(self._tools)}") from None

    def names(self) -> list[str]:
        return sorted(self._tools)

    def create(self, names: list[str], context: Any) -> dict[str, BaseTool]:
        return {n: self.get(n)(context) for n in names}


TOOLS = ToolRegistry()
