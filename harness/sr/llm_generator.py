"""LLM-SR-style equation generation: the model proposes skeletons, the engine parses, fits and scores them.

The model sees the task card, an optional search plan, the best equations so far (an :class:`ExperienceBuffer`),
the reasons earlier proposals were rejected, and free-form feedback. It answers with JSON (structured output) of
equation skeletons with free parameters ``c0..cN``; plain text is tolerated. Proposals only ever go through the
engine's ``ast`` whitelist (``evaluate_candidate``), never eval/exec. Rejected proposals get one repair round in
which the model sees the reasons, and those reasons stay in the buffer for later prompts.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from harness.core.candidates import Candidate
from harness.core.context import AgentContext, BudgetExhausted, evaluate_candidate
from harness.core.expression import (
    ALLOWED_FUNCTIONS,
    ExpressionError,
    parse_expression,
)
from harness.llm.base import LLMError
from harness.sr.proposals import MAX_EXPRESSION_CHARS, MAX_REASON_CHARS, parse_proposals
from harness.tools.base import TOOLS, BaseTool, bound_text

__all__ = [
    "ExperienceBuffer",
    "PromptShape",
    "Rejection",
    "generate_equations",
    "equations_response_format",
    "parse_proposals",
    "LLMEquationSearchTool",
]

SOURCE = "llm"

SYSTEM_PROMPT = """You are a scientist proposing equations for symbolic regression.
Write each equation as the right-hand side only, over the task's input names, with free constants c0, c1, c2, ...
that are fitted to the data afterwards (do not write fitted numbers; small integers and pi are fine).
Allowed: + - * / ** (or ^), parentheses, pi, and the functions {functions}.
No other names, no code, no imports, no assignments.
Reply with JSON only: {{"equations": [{{"expression": "...", "reason": "..."}}]}}"""


@dataclass
class Rejection:
    """A proposal that was not usable, and why (the text the model sees on its next try)."""

    expression: str
    reason: str

    def line(self) -> str:
        return f"- `{self.expression[:120]}`: {self.reason[:200]}"


class ExperienceBuffer:
    """The best candidates seen so far, for the prompt: bounded, deduplicated by skeleton, best first.

    Order is the shared selection rule (valid NMSE, then complexity). Recent rejections are kept too (bounded) so
    the reasons reach later prompts.
    """

    def __init__(self, capacity: int = 16, max_rejections: int = 8):
        self.capacity = capacity
        self.max_rejections = max_rejections
        self._by_skeleton: dict[str, Candidate] = {}
        self.rejections: list[Rejection] = []

    def __len__(self) -> int:
        return len(self._by_skeleton)

    def __contains__(self, skeleton: str) -> bool:
        return skeleton in self._by_skeleton

    @property
    def candidates(self) -> list[Candidate]:
        return sorted(self._by_skeleton.values(), key=lambda c: c.sort_key())

    def best(self) -> Candidate | None:
        cands = self.candidates
        return cands[0] if cands else None

    def add(self, cand: Candidate) -> bool:
        """Keep ``cand`` if it is finite and better than what holds its skeleton; returns whether it is kept."""
        if cand.metric("valid", "nmse") == float("inf"):
            return False
        held = self._by_skeleton.get(cand.expression)
        if held is not None and held.sort_key() <= cand.sort_key():
            return False
        self._by_skeleton[cand.expression] = cand
        for dropped in self.candidates[self.capacity :]:
            del self._by_skeleton[dropped.expression]
        return cand.expression in self._by_skeleton

    def extend(self, cands: list[Candidate]) -> int:
        return sum(self.add(c) for c in cands)

    def note_rejection(self, expression: str, reason: str) -> None:
        self.rejections.append(Rejection(expression, reason))
        del self.rejections[: -self.max_rejections]

    def as_prompt_text(self, k: int = 5, fitted: bool = True) -> str:
        """The top ``k`` skeletons with their valid NMSE, complexity and (``fitted``) fitted equation, one per
        line."""
        lines = []
        for i, c in enumerate(self.candidates[:k], 1):
            lines.append(f"{i}. {c.expression}  | nmse {c.metric('valid', 'nmse'):.4g}, complexity {c.complexity}"
                         + (f" | fitted: {c.equation[:160]}" if fitted else ""))
        return "\n".join(lines)

    def rejections_text(self, k: int = 5) -> str:
        return "\n".join(r.line() for r in self.rejections[-k:])


# -- prompt and parsing ------------------------------------------------------------------------------------------
def equations_response_format(n: int, reason_chars: int = MAX_REASON_CHARS) -> dict[str, Any]:
    """Structured-output schema: up to ``n`` equations, each an expression and a short reason (at most
    ``reason_chars``: with a grammar-constrained local model, a shorter reason is a shorter call)."""
    item = {
        "type": "object",
        "properties": {
            "expression": {"type": "string", "maxLength": MAX_EXPRESSION_CHARS},
            "reason": {"type": "string", "maxLength": max(1, min(int(reason_chars), MAX_REASON_CHARS))},
        },
        "required": ["expression", "reason"],
        "additionalProperties": False,
    }
    schema = {
        "type": "object",
        "properties": {"equations": {"type": "array", "items": item, "maxItems": n}},
        "required": ["equations"],
        "additionalProperties": False,
    }
    return {"type": "json_schema", "json_schema": {"name": "equations", "schema": schema}}


def _plan_text(plan: Any) -> str:
    """A plan as prompt text: a SearchPlan's operators, size limit, seeds and constraints; else its own text."""
    if plan is None:
        return ""
    if isinstance(plan, str):
        return plan
    if hasattr(plan, "operators"):
        lines = [f"Operators to use: {', '.join(plan.operators)}"]
        if getattr(plan, "max_length", None):
            lines.append(f"Keep equations under about {plan.max_length} nodes.")
        if getattr(plan, "seeds", None):
            lines.append("Hypotheses to start from: " + "; ".join(plan.seeds[:6]))
        if getattr(plan, "constraints", None):
            lines.append("Constraints: " + "; ".join(plan.constraints[:6]))
        return "\n".join(lines)
    for attr in ("as_prompt_text", "summary"):
        fn = getattr(plan, attr, None)
        if callable(fn):
            return str(fn())
    try:
        return json.dumps(plan, default=str)
    except (TypeError, ValueError):
        return str(plan)


@dataclass(frozen=True)
class PromptShape:
    """How much a proposal prompt carries. ``frame``: a system message shared with other calls on the task (the
    workflow's task frame, a prefix the model has already evaluated); the generator's rules then open the user
    turn and the task card is not repeated. ``best``: equations of the buffer shown; ``fitted``: with their fitted
    numbers; ``rejections``: recent rejections shown; ``reason_chars``: the most a reason may take."""

    frame: str | None = None
    best: int = 5
    fitted: bool = True
    rejections: int = 5
    reason_chars: int = MAX_REASON_CHARS


def build_messages(context: AgentContext, plan: Any, n: int, feedback: str, buffer: ExperienceBuffer,
                   shape: PromptShape = PromptShape()) -> list[dict]:
    """System rules plus a user turn with the task card, plan, best so far, past rejections and feedback."""
    rules = SYSTEM_PROMPT.format(functions=", ".join(ALLOWED_FUNCTIONS))
    parts = [rules] if shape.frame else [f"Task:\n{context.task.card()}"]
    plan_text = _plan_text(plan)
    if plan_text:
        parts.append(f"Search plan:\n{plan_text[:1500]}")
    best = buffer.as_prompt_text(shape.best, fitted=shape.fitted)
    if best:
        parts.append("Best equations so far (skeleton | valid NMSE, complexity"
                     + (" | fitted" if shape.fitted else "") + f"):\n{best}")
    rejected = buffer.rejections_text(shape.rejections)
    if rejected:
        parts.append(f"Earlier proposals that were rejected (do not repeat these mistakes):\n{rejected}")
    if feedback:
        parts.append(f"Feedback:\n{feedback[:1500]}")
    parts.append(f"Propose {n} diverse equations for {context.task.target_name} that could beat the best so far.")
    system = shape.frame or rules
    return [{"role": "system", "content": system}, {"role": "user", "content": "\n\n".join(parts)}]


# -- generation --------------------------------------------------------------------------------------------------
def _call(llm: Any, context: AgentContext, messages: list[dict], n: int, temperature: float | None,
          max_tokens: int | None, timeout_s: float | None = None, reason_chars: int = MAX_REASON_CHARS) -> str:
    """One counted model call; returns the first usable text (``timeout_s``: the call's cap, partial text kept)."""
    context.budget.check()
    try:
        responses = llm.complete(messages, response_format=equations_response_format(n, reason_chars), n=1,
                                 temperature=temperature, max_tokens=max_tokens, timeout_s=timeout_s)
    except LLMError:
        context.budget.add_llm(1, 0)
        raise
    tokens = sum(int(r.prompt_tokens or 0) + int(r.completion_tokens or 0) for r in responses)
    context.budget.add_llm(1, tokens)
    return next((r.text for r in responses if r.error is None and r.text), "")


def _evaluate(proposals: list[tuple[str, str]], context: AgentContext, round_no: int, seen: set[str],
              buffer: ExperienceBuffer) -> tuple[list[Candidate], list[Rejection]]:
    """Parse (whitelist), fit and score each proposal; collect rejections with the engine's reason."""
    fitted: list[Candidate] = []
    rejected: list[Rejection] = []
    for text, reason in proposals:
        if len(text) > MAX_EXPRESSION_CHARS:
            rejected.append(Rejection(text, f"longer than {MAX_EXPRESSION_CHARS} characters"))
            continue
        try:
            skeleton = str(parse_expression(text, context.variables))
        except (ExpressionError, RecursionError) as exc:
            rejected.append(Rejection(text, str(exc)))
            continue
        if skeleton in seen or skeleton in buffer:
            rejected.append(Rejection(text, "duplicate of an equation already evaluated; propose a different one"))
            continue
        seen.add(skeleton)
        try:
            cand = evaluate_candidate(text, context, source=SOURCE)
        except Exception as exc:  # noqa: BLE001 - one odd proposal must not sink the batch; the model sees why
            rejected.append(Rejection(text, f"{type(exc).__name__}: {exc}"[:200]))
            continue
        cand.info.update(reason=reason, round=round_no)
        if cand.metric("valid", "nmse") == float("inf"):
            rejected.append(Rejection(text, f"fit {cand.status}: non-finite predictions or error "
                                            f"({cand.info.get('fit_message', '')})"[:200]))
        fitted.append(cand)
    return fitted, rejected


def generate_equations(
    context: AgentContext,
    plan: Any = None,
    *,
    n: int = 4,
    feedback: str = "",
    llm: Any = None,
    buffer: ExperienceBuffer | None = None,
    temperature: float | None = None,
    max_tokens: int | None = 1024,
    repair: bool = True,
    shape: PromptShape = PromptShape(),
    timeout_s: float | None = None,
) -> list[Candidate]:
    """Ask the model for ``n`` skeletons, fit and score them; one repair round for rejected proposals (unless
    ``repair`` is off: a caller that asks again soon passes the reasons on through ``buffer`` instead).

    Returns the fitted candidates (best first); usable ones enter ``buffer`` and rejections are noted there, so
    a later call's prompt carries both. Raises ``BudgetExhausted`` if the budget is spent before the first call
    and ``LLMError`` if that call fails; the repair round is skipped quietly in either case.
    """
    llm = llm or context.llm
    if llm is None:
        raise ValueError("no LLM: pass llm= or set context.llm")
    buffer = buffer if buffer is not None else ExperienceBuffer()
    messages = build_messages(context, plan, n, feedback, buffer, shape)
    text = _call(llm, context, messages, n, temperature, max_tokens, timeout_s, shape.reason_chars)
    seen: set[str] = set()
    fitted, rejected = _evaluate(parse_proposals(text, n), context, 1, seen, buffer)
    if not fitted and not rejected:
        rejected.append(Rejection(text[:120] or "(empty reply)", "no equation found in the reply; answer with "
                                  'JSON {"equations": [{"expression": ..., "reason": ...}]}'))
    for r in rejected:
        buffer.note_rejection(r.expression, r.reason)
    buffer.extend(fitted)

    if repair and rejected and context.budget.exhausted() is None:
        repair_messages = messages + [
            {"role": "assistant", "content": text or "(empty)"},
            {"role": "user", "content": "These proposals were rejected:\n" + "\n".join(r.line() for r in rejected)
             + f"\nPropose up to {len(rejected)} corrected equations in the same JSON format."},
        ]
        try:
            text2 = _call(llm, context, repair_messages, len(rejected), temperature, max_tokens)
        except (LLMError, BudgetExhausted):
            text2 = ""
        more, rejected2 = _evaluate(parse_proposals(text2, len(rejected)), context, 2, seen, buffer)
        for r in rejected2:
            buffer.note_rejection(r.expression, r.reason)
        buffer.extend(more)
        fitted += more
    return sorted(fitted, key=lambda c: c.sort_key())


# -- tool --------------------------------------------------------------------------------------------------------
BUFFER_KEY = "llm_experience"


@TOOLS.register
class LLMEquationSearchTool(BaseTool):
    """Run a few rounds of LLM equation proposals and return the fitted candidates compactly."""

    name = "llm_equation_search"
    result_str_limit = 1500

    def execute(self, rounds: int = 2, n_per_round: int = 4, feedback: str = "") -> dict:
        """Ask the language model for equation skeletons over several rounds; each is fitted and scored.

        Args:
            rounds: Proposal rounds (1-5); each round sees the best equations and rejections so far.
            n_per_round: Equations proposed per round (1-8).
            feedback: Hints for the proposer, e.g. what the residuals or data analysis showed.
        """
        rounds = max(1, min(int(rounds), 5))
        n_per_round = max(1, min(int(n_per_round), 8))
        buffer = self.context.extras.setdefault(BUFFER_KEY, ExperienceBuffer())
        calls_before = self.context.budget.llm_calls
        found: list[Candidate] = []
        stopped = None
        for r in range(rounds):
            try:
                found += generate_equations(self.context, n=n_per_round, feedback=feedback, buffer=buffer)
            except (BudgetExhausted, LLMError) as exc:
                if r == 0:
                    raise
                stopped = f"{type(exc).__name__}: {exc}"
                break
        found.sort(key=lambda c: c.sort_key())
        return {
            "candidates": [c.to_record() for c in found],
            "best_so_far": [c.to_record() for c in buffer.candidates[:3]],
            "rejections": [{"expression": r.expression, "reason": r.reason} for r in buffer.rejections[-4:]],
            "llm_calls": self.context.budget.llm_calls - calls_before,
            "stopped": stopped,
        }

    def format_result(self, result: dict) -> str:
        cands = result["candidates"]
        lines = [f"{len(cands)} new candidates from {result['llm_calls']} LLM calls"
                 + (f" (stopped: {result['stopped']})" if result["stopped"] else "") + "."]
        for c in cands[:6]:
            nmse = c["metrics"].get("valid", {}).get("nmse", float("nan"))
            lines.append(f"nmse {nmse:.4g} | complexity {c['complexity']} | {c['equation'][:150]}")
        if result["best_so_far"]:
            b = result["best_so_far"][0]
            lines.append(f"best so far: {b['equation'][:150]} (nmse {b['metrics']['valid']['nmse']:.4g})")
        for r in result["rejections"]:
            lines.append(f"rejected `{r['expression'][:80]}`: {r['reason'][:120]}")
        return bound_text("\n".join(lines), self.result_str_limit)
