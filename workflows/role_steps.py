"""The role side of a workflow run: one activation of a role by the runtime's role agent (its prompt with the
user's guidance, K answers ranked by how their hypotheses fit, the fallback when it fails), and the LLM budget and
time the role calls run under.

The state these steps use is the run's (:class:`workflows.run_core.WorkflowRun`).
"""

from __future__ import annotations

import math
from typing import Any

from harness.core.context import evaluate_candidate
from harness.core.expression import ExpressionError
from harness.runtime.role_agent import RoleAgent
from workflows.evidence import Branch, with_term
from workflows.prompting import build_messages
from workflows.run_core import WorkflowRun
from workflows.roles import (
    DiagnosisOutput,
    RoleOutput,
    fallback_output,
    output_model,
    response_format,
    salvage_truncated,
)

ENGINE_RESERVE_MARGIN_S = 1.0  # kept on top of one engine run's time for its refit and bookkeeping


class RoleSteps(WorkflowRun):
    """Role-side steps of a workflow run (see the module docstring)."""

    def _reserve_llm_calls(self, n: int = 1) -> bool:
        """Count ``n`` model responses if nothing is spent yet; otherwise stop scheduling and say no."""
        with self._lock:
            if self.ctx.cancelled():
                self.stop_reason = self.stop_reason or "cancelled"
                return False
            reason = self.stop_reason or self.tracker.exhausted()
            if reason:
                self.stop_reason = reason
                return False
            self.tracker.add_llm(n)
            return True

    def llm_seconds(self) -> float | None:
        """Seconds a role call may take: what the run has left, less one engine run (so a hung or slow model
        never costs the engine's answer); ``None`` when the run has no time limit."""
        left = self.tracker.seconds_left()
        if left is None:
            return None
        return left - (self.settings.time_budget + ENGINE_RESERVE_MARGIN_S)

    def role_call(
        self, role: str, branch: Branch | None, *, mode: str = "", parent: int | None = None,
        fallback: RoleOutput | None = None, **parts: Any,
    ) -> RoleOutput | None:
        """One activation of ``role``, run by the runtime's role agent (tool steps, K answers ranked by how their
        hypotheses fit); ``None`` when the budget stopped the run. Failures use a fallback."""
        if not self._boundary(role):
            return None
        messages = build_messages(role, self.prompts[role], self.task, mode=mode, **parts)
        if self.guidance:
            note = "Guidance from the user (take it into account):\n" + "\n".join(f"- {g}" for g in self.guidance)
            messages[-1] = {**messages[-1], "content": f"{messages[-1]['content']}\n\n{note}"}
        call_seed = self.seed * 1000 + (branch.index + 1 if branch else 0) * 100 + (branch.steps if branch else 0)
        agent = RoleAgent(self.llm, self.ctx, self.state, role, self.role_agents.get(role),
                          reserve=self._reserve_llm_calls, seconds_left=self.llm_seconds, on_node=self.on_node)
        answer = agent.answer(messages, output_model(role), response_format(role), seed=call_seed, parent=parent,
                              branch=branch.label if branch else None, info={"mode": mode},
                              rank=lambda out: self.rank_output(out, branch), salvage=salvage_truncated)
        if answer is None:
            return None
        out = answer.output
        if out is None:
            self._error(answer.error or f"{role}: no output")
            out = fallback if fallback is not None else fallback_output(role)
        if branch is not None:
            branch.last_node = answer.node_id
            branch.steps += 1
        return out

    def rank_output(self, out: RoleOutput, branch: Branch | None) -> float:
        """How good an answer looks by what it proposes, fitted now: the best validation NMSE among its hypotheses
        (a Diagnoser's missing terms added to the branch's best equation); inf when it proposes nothing that fits."""
        texts: list[str] = list(getattr(out, "hypotheses", []) or [])
        held = branch.best() if branch is not None else None
        if isinstance(out, DiagnosisOutput) and held is not None:
            texts = [h for h in (with_term(held.expression, t, self.ctx.variables) for t in out.missing_terms) if h]
        best = math.inf
        for text in dict.fromkeys(texts):
            try:
                err = evaluate_candidate(text, self.ctx, source="ranking", constants_as_params=True).metric("valid")
            except ExpressionError:
                continue
            best = min(best, err) if math.isfinite(err) else best
        return best
