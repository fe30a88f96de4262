"""Text renderings of a conversation for models and servers without function calling or constrained decoding:
tool traffic as text, a JSON schema as a system-prompt request, extra system text."""

from __future__ import annotations

import json
from typing import Any

from harness.llm.base import Message


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
