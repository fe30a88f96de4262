"""Model-written instruction rewrites: the "prompt engineer" (stage 1, stage-2 adaptation) and the reflection
model (stage 3) share one meta-prompt shape, one structured output and one acceptance filter.

A rewrite is only worth an evaluation if it is a plausible instruction, so texts that are empty, unchanged,
too short or long, repetitive, or mostly non-words are rejected here before any solver runs.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

log = logging.getLogger(__name__)

ROLE_PURPOSE = {
    "analyst": "inspects the data before planning and reports evidence (trends, scalings, periodicity, symmetries)",
    "planner": "writes the search plan for the symbolic regression engine: operators, size limits, seed "
    "equations (hypotheses) and derived features",
    "diagnoser": "reads the fit metrics and residual diagnostics of the best equation and says what is wrong",
    "repairer": "revises the search plan so that the diagnosed problems get fixed in the next engine run",
    "synthesizer": "merges the findings of several branches into one final search plan",
}

ENGINEER_SYSTEM = (
    "You are a prompt engineer. You improve the instruction text of one role in a team of language-model agents "
    "that discover equations from data by steering a symbolic regression engine. You get the role's current "
    "instruction and feedback from equation discovery on training tasks. Write a better instruction: keep what "
    "works, address what failed, stay general (never name a task's own equation), and keep it short."
)
REFLECT_SYSTEM = (
    "You are a reflection model. You read diagnostics from symbolic regression runs of an agent team and rewrite "
    "the instruction of one role so the team discovers the right equations more often. Base every change on the "
    "evidence shown, stay general (never name a task's own equation), and keep it short."
)


class InstructionRewrite(BaseModel):
    """Structured output of a rewrite call."""

    instruction: str = Field(..., description="the complete new instruction text for the role")
    rationale: str = Field("", description="one or two sentences on what was changed and why")


# llama.cpp builds a grammar rule per allowed character of a bounded string; past ~1000 it refuses the grammar
# (and has been seen to crash), so the embedded model gets at most this bound in its schema.
LOCAL_SCHEMA_MAX_CHARS = 1000


def rewrite_format(max_chars: int) -> dict[str, Any]:
    """Structured-output request; explicit string bounds (grammar-constrained local models cap unbounded ones)."""
    schema = {
        "type": "object",
        "properties": {
            "instruction": {"type": "string", "minLength": 1, "maxLength": int(max_chars)},
            "rationale": {"type": "string", "maxLength": 300},
        },
        "required": ["instruction", "rationale"],
        "additionalProperties": False,
    }
    return {"type": "json_schema", "json_schema": {"name": "instruction_rewrite", "schema": schema}}


class RewriteSettings(BaseModel):
    """Bounds on rewrite calls and texts (the optimizer's ``rewrite`` config section)."""

    model_config = ConfigDict(extra="forbid")

    attempts: int = Field(2, ge=1, description="Calls per rewrite before giving up.")
    temperature: float | None = Field(None, description="Sampling temperature of rewrite calls (unset: the model's).")
    max_tokens: int | None = Field(None, description="Longest rewrite answer (unset: the model's).")
    min_chars: int = Field(60, ge=1, description="A shorter rewrite is refused.")
    max_chars: int = Field(2500, ge=100, description="A longer rewrite is refused.")
    feedback_chars: int = Field(2500, ge=200, description="Feedback shown to the rewriting model, at most.")


@dataclass
class Rewrite:
    text: str | None
    rationale: str = ""
    reason: str = ""
    attempts: int = 0  # the calls this rewrite took
    raw: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"text": self.text, "rationale": self.rationale, "reason": self.reason, "attempts": self.attempts,
                "raw": [r[:600] for r in self.raw]}


def _normalise(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip().lower()


def clean_instruction(text: str) -> str:
    """Strip code fences, quotes and stray labels that models wrap around an instruction."""
    text = text.strip()
    text = re.sub(r"^```[a-zA-Z]*\s*|\s*```$", "", text).strip()
    text = re.sub(r"^(new\s+)?instruction\s*:\s*", "", text, flags=re.IGNORECASE).strip()
    if len(text) > 1 and text[0] == text[-1] and text[0] in "\"'":
        text = text[1:-1].strip()
    return text


def check_instruction(text: str | None, current: str, settings: RewriteSettings) -> str | None:
    """Why ``text`` is not an acceptable instruction, or None when it is."""
    if not text or not text.strip():
        return "empty"
    if len(text) < settings.min_chars:
        return f"too short ({len(text)} < {settings.min_chars} characters)"
    if len(text) > settings.max_chars:
        return f"too long ({len(text)} > {settings.max_chars} characters)"
    if _normalise(text) == _normalise(current):
        return "unchanged"
    visible = [c for c in text if not c.isspace()]
    letters = sum(c.isalpha() for c in visible)
    if letters < 0.6 * len(visible):
        return "mostly non-letters"
    words = re.findall(r"[A-Za-z]+", text.lower())
    if len(words) < 8:
        return "too few words"
    if len(set(words)) < 0.3 * len(words):
        return "repetitive"
    if re.search(r"\b(\w+)(\W+\1\b){4,}", text.lower()):
        return "repeats a word"
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    if len(lines) >= 4 and len(set(lines)) < 0.5 * len(lines):
        return "repeated lines"
    if text.lstrip().startswith(("{", "[")):
        return "looks like raw JSON"
    return None


def _extract(text: str) -> tuple[str | None, str]:
    """(instruction, rationale) from a structured response, tolerating prose and plain-text answers."""
    try:
        from harness.llm.json_output import parse_json_output

        obj, _ = parse_json_output(text, InstructionRewrite)
    except ImportError:  # pragma: no cover - harness.llm.json_output is part of the package
        obj = None
    if obj is not None:
        return clean_instruction(obj.instruction), obj.rationale.strip()
    match = re.search(r'"instruction"\s*:\s*"((?:[^"\\]|\\.)*)', text, flags=re.DOTALL)
    if match:
        return clean_instruction(match.group(1).encode().decode("unicode_escape", errors="ignore")), ""
    if "{" in text[:40]:
        return None, ""
    return clean_instruction(text), ""


def build_messages(role: str, current: str, feedback: str, *, mode: str, settings: RewriteSettings,
                   context: str = "") -> list[dict[str, str]]:
    """Meta-prompt for rewriting ``role``'s instruction; ``mode`` is "engineer" or "reflect"."""
    feedback = feedback.strip() or "No feedback available."
    if len(feedback) > settings.feedback_chars:
        feedback = feedback[: settings.feedback_chars - 20] + "\n... [cut]"
    user = "\n".join(
        [
            f"Role: {role} — it {ROLE_PURPOSE.get(role, 'is one step of the workflow')}.",
            *([context] if context else []),
            "",
            "Current instruction:",
            "<<<",
            current.strip(),
            ">>>",
            "",
            "Feedback from equation discovery on training tasks:" if mode == "engineer" else "Diagnostics:",
            feedback,
            "",
            f"Write the improved instruction for the {role} (at most {settings.max_chars} characters). "
            'Answer with JSON only: {"instruction": "<full new instruction>", "rationale": "<why>"}',
        ]
    )
    system = ENGINEER_SYSTEM if mode == "engineer" else REFLECT_SYSTEM
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


def propose_rewrite(
    llm: Any,
    role: str,
    current: str,
    feedback: str,
    *,
    mode: str = "engineer",
    settings: RewriteSettings | None = None,
    seed: int | None = None,
    context: str = "",
    avoid: tuple[str, ...] = (),
) -> Rewrite:
    """Ask ``llm`` for a new instruction; up to ``settings.attempts`` tries; ``text=None`` when none passed."""
    settings = settings or RewriteSettings()
    messages = build_messages(role, current, feedback, mode=mode, settings=settings, context=context)
    schema_chars = settings.max_chars
    if getattr(llm, "provider", "") == "local":
        schema_chars = min(schema_chars, LOCAL_SCHEMA_MAX_CHARS)
    raw: list[str] = []
    reason = ""
    for attempt in range(max(1, settings.attempts)):
        try:
            responses = llm.complete(
                messages,
                response_format=rewrite_format(schema_chars),
                temperature=settings.temperature,
                max_tokens=settings.max_tokens,
                seed=None if seed is None else seed + attempt,
            )
        except Exception as exc:  # noqa: BLE001 - a failed rewrite call is a rejected rewrite, not a crash
            reason = f"model call failed: {exc}"
            log.warning("rewrite of %s: %s", role, reason)
            continue
        text = responses[0].text if responses else ""
        raw.append(text or "")
        instruction, rationale = _extract(text or "")
        reason = check_instruction(instruction, current, settings) or ""
        if not reason and any(_normalise(instruction or "") == _normalise(a) for a in avoid):
            reason = "duplicate of an earlier candidate"
        if not reason:
            return Rewrite(instruction, rationale, "", attempt + 1, raw)
        log.info("rewrite of %s rejected (%s)", role, reason)
    return Rewrite(None, "", reason, len(raw), raw)
