"""Prompt assembly for role calls: task frame, then instruction + evidence + history + shared results + format.

Every section has its own character cap and the whole prompt has one too, so a long run never outgrows a small
model's context: the oldest history goes first, then shared results are cut. The instruction (the optimised
part) opens the user message; the rest is a fixed frame the optimizer never touches.
"""

from __future__ import annotations

from typing import Any, Sequence

from harness.core.vocabulary import PROMPT_FUNCTIONS
from harness.tools.base import bound_text
from workflows.roles import format_text

MAX_PROMPT_CHARS = 7000
CARD_CHARS = 1500
EVIDENCE_CHARS = 1600
FINDINGS_CHARS = 800
HISTORY_CHARS = 1400
SHARED_CHARS = 1600
INSTRUCTION_CHARS = 3000

FRAME_INTRO = "You are one role of a symbolic regression team looking for the equation of the target below."
GRAMMAR_NOTE = (
    "Equations: over the input names only, with free constants c0, c1, ... (fitted later), numbers, "
    f"+ - * / ** and {', '.join(PROMPT_FUNCTIONS)}. No target name, no '='."
)


def bounded_history(entries: Sequence[str], max_chars: int = HISTORY_CHARS) -> str:
    """The most recent entries that fit in ``max_chars`` (older ones are counted, not shown)."""
    kept: list[str] = []
    used = 0
    for entry in reversed(list(entries)):
        line = bound_text(entry, 400)
        if used + len(line) + 1 > max_chars:
            break
        kept.append(line)
        used += len(line) + 1
    kept.reverse()
    dropped = len(entries) - len(kept)
    if dropped:
        kept.insert(0, f"({dropped} earlier steps not shown)")
    return "\n".join(kept)


def task_frame(task: Any) -> str:
    """The system message of every role call on ``task`` (and of the evolution channel's): one cached prefix."""
    return (f"{FRAME_INTRO}\n\n## Task\n" + task.card(max_chars=CARD_CHARS) + "\nInput names: "
            + ", ".join(task.input_names) + "\n\n" + GRAMMAR_NOTE)


def build_messages(
    role: str,
    instruction: str,
    task: Any,
    *,
    mode: str = "",
    evidence: str = "",
    findings: str = "",
    history: Sequence[str] = (),
    shared: str = "",
    note: str = "",
    max_chars: int = MAX_PROMPT_CHARS,
) -> list[dict[str, str]]:
    """Messages for one role call.

    system = the task frame (task card, how to write equations), identical for every role call on a task;
    user = the role's instruction (the optimised part), then its context and output format.
    Why this order: llama.cpp (and vLLM's prefix cache) reuse the evaluated prefix of the previous prompt, so
    every call after the first on a task pays only for its own part (scripts/bench_llm_local.py measures it).
    """
    system = task_frame(task)
    header = f"# Role: {role}" + (f" (mode: {mode})" if mode else "")
    fixed = [header + "\n" + bound_text(instruction.strip(), INSTRUCTION_CHARS)]
    if note:
        fixed.append(bound_text(note, 300))
    if evidence:
        fixed.append("## Evidence\n" + bound_text(evidence, EVIDENCE_CHARS))
    if findings:
        fixed.append("## Analyst findings\n" + bound_text(findings, FINDINGS_CHARS))
    tail = ["## Output format\nReply with one JSON object with exactly these keys, and nothing else:\n"
            + format_text(role)]
    budget = max_chars - len(system) - sum(len(s) + 2 for s in fixed + tail)
    hist = "## Branch history\n" + (bounded_history(history) if history else "(none yet)")
    shared_text = "## Shared results of all branches\n" + shared if shared else ""
    # Fit the variable sections into what is left: history first, shared results get the rest.
    hist = bound_text(hist, max(200, min(len(hist), budget // 2 if shared_text else budget)))
    if shared_text:
        shared_text = bound_text(shared_text, max(200, min(SHARED_CHARS, budget - len(hist) - 2)))
    user = "\n\n".join(fixed + [hist] + ([shared_text] if shared_text else []) + tail)
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


def prompt_chars(messages: list[dict[str, str]]) -> int:
    return sum(len(m.get("content") or "") for m in messages)
