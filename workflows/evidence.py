"""What the roles read: a branch's state, the evidence the workflow computes for them (data analyses, residual
diagnostics, every branch's results) and the short forms of equations in their prompts.

Deterministic and model-free, so the same run always shows the roles the same evidence.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from harness.core import analysis, shape_analysis
from harness.core.candidates import Candidate, select_best
from harness.core.context import AgentContext
from harness.runtime.state import SearchRunState
from workflows.roles import PlanOutput


@dataclass
class Branch:
    """One line of search: its current plan, history lines for its prompts, and the candidates it found."""

    index: int
    label: str
    plan: PlanOutput | None = None
    history: list[str] = field(default_factory=list)
    candidates: list[Candidate] = field(default_factory=list)
    last_node: int | None = None
    steps: int = 0

    def best(self) -> Candidate | None:
        return select_best(self.candidates)


_LONG_NUMBER = re.compile(r"(?<![\w.])\d+\.\d{5,}(?:[eE][-+]?\d+)?")


def short_equation(equation: str, limit: int = 200) -> str:
    """The equation with constants rounded to 4 significant digits (prompts need the form, not the digits)."""
    text = _LONG_NUMBER.sub(lambda m: f"{float(m.group(0)):.4g}", equation)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def with_term(base: str, term: str, variables: list[str]) -> str | None:
    """``base + term`` with the term's constants renumbered after the base's (a term without one gets one).

    Why: the Diagnoser names missing terms; adding them to the best equation is mechanical, so the repair run
    gets these hypotheses even when the Repairer's own answer is poor. ``None`` if either does not parse.
    """
    import sympy

    from harness.core.expression import Expression, ExpressionError, parse_expression

    try:
        b = parse_expression(base, variables)
        t = parse_expression(term, variables)
    except ExpressionError:
        return None
    if not any(s.name in variables for s in t.sympy.free_symbols):
        return None  # a bare constant adds nothing the fit does not already have
    params = {s.name: s for s in t.sympy.free_symbols if s.name in t.parameters}
    shift = len(b.parameters)
    mapping = {params[p]: sympy.Symbol(f"c{shift + i}", **params[p].assumptions0) for i, p in enumerate(t.parameters)}
    extra = t.sympy.xreplace(mapping)
    if not t.parameters:
        extra = sympy.Symbol(f"c{shift}", real=True) * extra
    try:
        return str(Expression(b.sympy + extra, b.variables))
    except (ExpressionError, ValueError, TypeError):
        return None


def describe(cand: Candidate | None) -> str:
    if cand is None:
        return "no usable equation"
    eq = short_equation(cand.equation)
    return f"{eq}  [valid NMSE {cand.metric('valid'):.3g}, train NMSE {cand.metric('train'):.3g}, complexity {cand.complexity}]"



def analysis_evidence(ctx: AgentContext, target_name: str) -> str:
    """Deterministic data analyses of the training data, one short summary each."""
    X, y, names = ctx.train.X, ctx.train.y, ctx.variables
    checks = {
        "summary statistics": lambda: analysis.summary_statistics(X, y, names, target_name),
        "correlations": lambda: analysis.correlations(X, y, names),
        "monotonicity": lambda: shape_analysis.monotonicity(X, y, names),
        "periodicity": lambda: shape_analysis.periodicity(X, y, names),
        "power law": lambda: shape_analysis.power_law(X, y, names),
    }
    lines = []
    for label, fn in checks.items():
        try:
            lines.append(f"- {label}: {fn().get('summary', '')}")
        except Exception as exc:  # one failing analysis must not cost the others
            lines.append(f"- {label}: not available ({type(exc).__name__})")
    return "\n".join(lines)

def residual_evidence(ctx: AgentContext, branch: Branch) -> str:
    """Residual diagnostics of the branch's best candidate (train+valid only: test metrics never leak)."""
    best = branch.best()
    if best is None:
        return "The branch has no usable equation yet (the SR runs failed or found nothing finite)."
    from harness.core.residuals import residual_report

    lines = [f"Best equation: {describe(best)}"]
    try:
        report = residual_report(best, ctx)
    except Exception as exc:
        return "\n".join(lines + [f"Residual diagnostics failed: {type(exc).__name__}: {exc}"[:300]])
    res = report.get("residuals", {})
    lines.append("Residuals: " + str(res.get("summary", "")))
    trends = res.get("trend", {})
    for name, t in list(trends.items())[:8]:
        lines.append(f"- vs {name}: spearman {t.get('spearman')}, eta2 {t.get('eta2')}"
                     + (" (flagged)" if t.get("flagged") else ""))
    drops = report.get("drop_one", {}).get("terms", [])
    if drops:
        lines.append("Drop-one refits (term: relative change of valid NMSE): " + "; ".join(
            f"{d['term']}: {d.get('rel_change', d.get('error', '?'))}" for d in drops[:6]))
    return "\n".join(lines)

def shared_results(state: SearchRunState, branches: list[Branch], viewer: Branch | None = None) -> str:
    """What every branch has found so far, for discussion and synthesis (bounded by the prompt builder)."""
    lines = []
    for br in branches:
        who = " (this branch)" if br is viewer else ""
        plan = br.plan.summary(200) if br.plan else "no plan"
        lines.append(f"{br.label}{who}: plan {plan}; best {describe(br.best())}")
    top = list(dict.fromkeys(describe(c) for c in state.top(6)))[:3]
    if top:
        lines.append("Overall best: " + " | ".join(top))
    return "\n".join(lines)

