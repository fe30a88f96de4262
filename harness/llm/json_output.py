"""Tolerant JSON reading of model output: code fences, prose around the JSON, trailing commas, raw newlines in
strings, Python-style dicts; validation against a pydantic model or a JSON schema.

A leaf module: the LLM clients, the tool-call protocols, the roles and the optimizer's rewriter all read model
JSON with it, and it imports nothing of ours.
"""

from __future__ import annotations

import ast
import json
import re
from typing import Any, Iterator

import jsonschema
from pydantic import BaseModel, ValidationError

__all__ = ["extract_json", "parse_json_output", "cut_off"]


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
    if cut_off(text):  # say so: the error of a nested value ("[] is not an object") would mislead
        first_error = f"the JSON object never closes (cut off, e.g. at max_tokens); {first_error}"
    return None, first_error


def cut_off(text: str) -> bool:
    """True when the text opens a JSON object that never closes (a truncated answer)."""
    body = (text or "").strip()
    return body.startswith("{") and not body.startswith(next(_balanced_spans(body), "\0"))

