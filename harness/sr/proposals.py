"""Reading a model's equation proposals: JSON first (any reasonable shape), then the complete ``"expression"``
fields of a reply cut short, then expression-looking lines. Only text comes out; the engine's grammar decides
what an expression is (``harness.core.expression``)."""

from __future__ import annotations

import re
from typing import Any

from harness.llm.json_output import parse_json_output

__all__ = ["MAX_EXPRESSION_CHARS", "MAX_REASON_CHARS", "parse_proposals"]

MAX_EXPRESSION_CHARS = 300
MAX_REASON_CHARS = 200

_EXPR_CHARS = re.compile(r"^[\w\s.+\-*/^()\[\],]+$")
_BULLET = re.compile(r"^\s*(?:[-*•]|\d+[.)]|#+)\s*")


def _text_lines(text: str) -> list[tuple[str, str]]:
    """Fallback for non-JSON replies: lines (or their part after the last ``=``) that look like an expression."""
    out = []
    for raw in text.splitlines():
        line = _BULLET.sub("", raw.strip().strip("`")).strip()
        line = line.rsplit("=", 1)[-1]  # "y = ...", "I think f(x) = ..."
        line = re.sub(r"^\s*(?:expression|equation)\s*:\s*", "", line, flags=re.I).strip().strip("`").rstrip(".,;")
        if line and _EXPR_CHARS.match(line) and re.search(r"[+\-*/^(]", line):
            out.append((line, ""))
    return out


def _from_json(value: Any) -> list[tuple[str, str]] | None:
    """(expression, reason) pairs from any reasonable JSON shape, or None if there are none."""
    if isinstance(value, dict):
        for key in ("equations", "expressions", "candidates", "proposals"):
            if isinstance(value.get(key), list):
                return _from_json(value[key])
        for key in ("expression", "equation", "expr"):
            if isinstance(value.get(key), str):
                return [(value[key], str(value.get("reason", "")))]
        return None
    if isinstance(value, list):
        pairs = []
        for item in value:
            if isinstance(item, str):
                pairs.append((item, ""))
            elif isinstance(item, dict):
                pairs += _from_json(item) or []
        return pairs
    return None


_JSON_EXPRESSION = re.compile(r'"expression"\s*:\s*"([^"\\]{1,%d})"' % MAX_EXPRESSION_CHARS)


def parse_proposals(text: str, n: int) -> list[tuple[str, str]]:
    """Up to ``n`` (expression, reason) pairs from a reply: JSON first, then the complete ``"expression"``
    fields of a JSON reply cut short (a call that hit its time cap), then expression-looking lines."""
    value, _ = parse_json_output(text or "")
    pairs = _from_json(value) if value is not None else None
    cut_short = _JSON_EXPRESSION.findall(text or "")
    if len(cut_short) > len(pairs or []):  # a repaired truncated reply may have lost complete entries
        reasons = dict(pairs or [])
        pairs = [(e, reasons.get(e, "")) for e in cut_short]
    if not pairs:
        pairs = _text_lines(text or "")
    out = []
    for expr, reason in pairs:
        expr = str(expr).strip()
        if expr:
            out.append((expr, str(reason)[:MAX_REASON_CHARS]))
    return out[:n]
