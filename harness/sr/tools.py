"""SR engines as tools a model can call: ``run_sr_search`` (a whole engine run) and ``evaluate_expression``.

The model only ever reads ``format_result``'s compact text: train/validation numbers, never test metrics, and
every plan change spelled out so a small model learns what it asked for that could not be done. The full
``result`` (candidate records with all splits) is for the run record; the agent collects its candidates.
"""

from __future__ import annotations

import math
import re
from typing import Any

from harness.core.candidates import Candidate
from harness.core.context import evaluate_candidate
from harness.core.vocabulary import operator_list_text
from harness.sr.backends import run_plan
from harness.sr.plan import SearchPlan
from harness.sr.settings import search_settings
from harness.tools.base import TOOLS, BaseTool, ToolCallResult, bound_text

__all__ = ["RunSRSearchTool", "EvaluateExpressionTool", "record_candidates", "short_equation"]

FRONT_ROWS = 8
EQUATION_CHARS = 110
_FLOAT = re.compile(r"(?<![\w.])(\d+\.\d{5,}(?:e[-+]?\d+)?|\d+(?:\.\d+)?e[-+]?\d+)")


def short_equation(text: str, limit: int = EQUATION_CHARS) -> str:
    """Equation text with long numbers shown to 4 significant digits, cut to ``limit`` characters."""
    short = _FLOAT.sub(lambda m: f"{float(m.group(0)):.4g}", text)
    short = re.sub(r"- -(?=\d)", "+ ", re.sub(r"\+ -(?=\d)", "- ", short))  # printer writes "x - -1.5"
    return short if len(short) <= limit else short[: limit - 3] + "..."


def _num(value: float) -> str:
    return f"{value:.3g}" if math.isfinite(value) else "inf"


def record_candidates(context: Any, candidates: list[Candidate]) -> None:
    """Give candidates to the run state when it takes them (workflows without a state skip this)."""
    adder = getattr(getattr(context, "state", None), "add_candidates", None)
    if callable(adder) and candidates:
        adder(list(candidates))


@TOOLS.register
class RunSRSearchTool(BaseTool):
    """Run a symbolic-regression engine with a search plan; returns the Pareto front of fitted equations."""

    name = "run_sr_search"
    result_str_limit = 1800

    @classmethod
    def tool_parameters(cls) -> dict[str, Any]:
        # Unknown keys are tolerated here and reported back by validate_plan, so a small model's extra
        # fields do not cost it the whole call.
        schema = {**super().tool_parameters(), "additionalProperties": True}
        schema["properties"]["operators"]["description"] = f"Operators to use, from {operator_list_text()}."
        return schema

    def execute(
        self,
        operators: list[str] | None = None,
        max_length: int | None = None,
        time_budget: float | None = None,
        seeds: list[str] | None = None,
        features: list[str] | None = None,
        loss: str | None = None,
        population_size: int | None = None,
        max_depth: int | None = None,
        constraints: list[str] | None = None,
        seed: int | None = None,
        plan: dict | None = None,
        **other: Any,
    ) -> dict:
        """Search for equations with the SR engine, guided by a plan. Every field is optional.

        Args:
            operators: Operators to use (the vocabulary is filled in from harness.core.vocabulary).
            max_length: Largest equation size in nodes (5-60).
            time_budget: Seconds the engine may run.
            seeds: Hypotheses to start from, e.g. "c0*x*exp(-c1*t)" (inputs, c0..cN, numbers).
            features: Derived inputs, e.g. "r = x/v" or "log(P)"; substituted back in the equations.
            loss: "mse" or "relative".
            population_size: GP population size.
            max_depth: Largest equation depth.
            constraints: Free-text notes kept with the run (not enforced).
            seed: Random seed of the engine.
            plan: The same fields as one object (merged; explicit arguments win).
        """
        fields: dict[str, Any] = dict(plan) if isinstance(plan, dict) else {}
        given = {"operators": operators, "max_length": max_length, "time_budget": time_budget, "seeds": seeds,
                 "features": features, "loss": loss, "population_size": population_size, "max_depth": max_depth,
                 "constraints": constraints, "seed": seed}
        fields.update({k: v for k, v in given.items() if v is not None})
        fields.update(other)
        if "seed" not in fields:
            fields["seed"] = int(getattr(self.context, "seed", 0) or 0)
        admitted, changes = search_settings(self.context).admit(fields, self.context.variables)  # a model's raw answer
        return self.search(admitted, changes)

    def search(self, plan: SearchPlan, changes: list[str] | tuple[str, ...] = ()) -> dict:
        """Run an admitted plan as it is, under the run's search settings (``AgentContext.search``)."""
        outcome = run_plan(plan, self.context, search_settings(self.context).backend, changes=changes)
        if outcome.error and not outcome.candidates:
            detail = f" (plan changes: {'; '.join(outcome.plan_changes)})" if outcome.plan_changes else ""
            raise RuntimeError(outcome.error + detail)
        record_candidates(self.context, outcome.candidates)
        return outcome.to_record()

    def call_plan(self, plan: SearchPlan, changes: list[str] | tuple[str, ...] = (), *,
                  call_id: str = "") -> ToolCallResult:
        """The typed call for code (the workflow's SR steps): an admitted plan, through the tool's one boundary,
        recorded with the plan as its argument."""
        return self.invoke(call_id, {"plan": plan.model_dump(mode="json")}, lambda: self.search(plan, changes))

    def format_result(self, result: dict) -> str:
        front = [Candidate.from_record(r) for r in result.get("front", [])]
        lines = [f"{result['backend_used']} ran {result['seconds']:.1f}s: {len(result['candidates'])} equations, "
                 f"Pareto front (complexity | valid NMSE | equation):"]
        shown = front if len(front) <= FRONT_ROWS else front[: FRONT_ROWS - 1] + front[-1:]
        for cand in shown:
            lines.append(f"{cand.complexity:>3} | {_num(cand.metric('valid'))} | {short_equation(cand.equation)}")
        if not front:
            lines.append("(no equation with a finite validation error)")
        best = result.get("best")
        if best:
            b = Candidate.from_record(best)
            lines.append(f"best: {short_equation(b.equation, 200)} (valid NMSE {_num(b.metric('valid'))}, "
                         f"train NMSE {_num(b.metric('train'))})")
        if result.get("plan_changes"):
            lines.append("plan changes: " + "; ".join(result["plan_changes"]))
        if result.get("warnings"):
            lines.append("warnings: " + "; ".join(result["warnings"]))
        if result.get("error"):
            lines.append(f"error: {result['error']}")
        return bound_text("\n".join(lines), self.result_str_limit)


@TOOLS.register
class EvaluateExpressionTool(BaseTool):
    """Fit and score one equation on the task's data."""

    name = "evaluate_expression"
    result_str_limit = 600

    def execute(self, expression: str, fit_numbers: bool = False) -> dict:
        """Parse an equation, fit its constants c0..cN on the training data and score it.

        Args:
            expression: Right-hand side over the input names, e.g. "c0*x*exp(-c1*t) + c2".
            fit_numbers: Also treat the numbers written in the expression as constants to fit.
        """
        cand = evaluate_candidate(expression, self.context, source="evaluate_expression",
                                  constants_as_params=bool(fit_numbers))
        record_candidates(self.context, [cand])
        return {"candidate": cand.to_record()}

    def format_result(self, result: dict) -> str:
        cand = Candidate.from_record(result["candidate"])
        text = (f"{short_equation(cand.equation, 300)}\ncomplexity {cand.complexity}, "
                f"train NMSE {_num(cand.metric('train'))}, valid NMSE {_num(cand.metric('valid'))}, "
                f"fit status {cand.status}")
        return bound_text(text, self.result_str_limit)
