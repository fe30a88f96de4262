"""Exact laws, not close ones: a candidate's skeleton refitted on relative error, pruned of terms that carry nothing
and its constants snapped to simple values, and a selection rule that prefers precision (the ladder).

Why: an MSE fit spends its error where the target is small in relative terms, so a curve close in bulk passes
acc_0.01 and fails acc_0.001 or "every point" (settled oscillators, laws spanning decades); a spurious small term or
a constant off in the third digit does the same. Each step keeps its change only when the validation error does
not grow beyond ``tolerance`` (a factor), so a real term or constant is never traded for simplicity.

In a solve: ``sr.precision_polish`` polishes the pool's best few after the last SR run, and ``sr.selection=ladder``
picks by the precision ladder (``harness.core.candidates.ladder_key``). Both are on in the shipped harness since
2026-12-06, decided by paired comparisons on training laws and confirmed on the test laws (docs/results.md).
"""

from __future__ import annotations

import copy
import math
import time
from dataclasses import replace

import sympy

from harness.core.candidates import NMSE_FLOOR, Candidate
from harness.core.context import AgentContext, evaluate_candidate
from harness.core.expression import Expression, ExpressionError, parse_expression

__all__ = ["polish", "prune_terms", "refit_relative", "snap_constants"]

SNAP_DENOMINATORS = (1, 2, 3, 4)
SNAP_NEAR = 0.02  # a constant is tried at a simple value only within 2 % of it


def _relative(ctx: AgentContext, n_starts: int) -> AgentContext:
    """The run's context with a fit on relative error from more starts (a copy: the run's own is untouched)."""
    out = copy.copy(ctx)
    out.fit = replace(ctx.fit, loss="relative", n_starts=max(n_starts, ctx.fit.n_starts))
    return out


def _skeleton(cand: Candidate, ctx: AgentContext) -> Expression:
    """The candidate's equation with its numbers as free parameters, starting at their fitted values."""
    return parse_expression(cand.equation, ctx.variables, constants_as_params=True)


def _fit(expr: sympy.Expr, start: dict[str, float], ctx: AgentContext, source: str,
         deadline: float | None = None) -> Candidate | None:
    """The skeleton fitted from ``start``; ``None`` when it cannot be, or once ``deadline`` (monotonic) has passed."""
    if deadline is not None and time.monotonic() >= deadline:
        return None
    skeleton = Expression(expr, ctx.variables, start)
    try:
        return evaluate_candidate(skeleton.to_string(), ctx, source=source, initial_params=skeleton.initial_params)
    except ExpressionError:
        return None


def _no_worse(new: Candidate | None, base: Candidate, tolerance: float, split: str = "valid") -> bool:
    if new is None:
        return False
    limit = max(base.metric(split, "nmse"), NMSE_FLOOR) * (1.0 + tolerance)
    return new.metric(split, "nmse") <= limit


def refit_relative(cand: Candidate, ctx: AgentContext, *, n_starts: int = 8,
                   deadline: float | None = None) -> Candidate | None:
    """The same skeleton, constants refitted in float64 from several starts on relative error (each point's
    error over its target's size), so the small-target tail counts as much as the bulk."""
    skeleton = _skeleton(cand, ctx)
    start = dict(zip(skeleton.parameters, skeleton.initial_params))
    return _fit(skeleton.sympy, start, _relative(ctx, n_starts), "precision:refit", deadline)


def prune_terms(cand: Candidate, ctx: AgentContext, *, tolerance: float = 0.1,
                deadline: float | None = None) -> Candidate:
    """Drop additive terms one at a time, refitting the rest, while the validation error stays within a factor
    ``1 + tolerance``; the first removal that qualifies is kept and the search starts again."""
    best = cand
    while True:
        skeleton = _skeleton(best, ctx)
        terms = sympy.Add.make_args(skeleton.sympy)
        if len(terms) < 2:
            return best
        start = dict(zip(skeleton.parameters, skeleton.initial_params))
        for term in terms:
            rest = skeleton.sympy - term
            if not rest.free_symbols - set(Expression(rest, ctx.variables).param_symbols()):
                continue  # never prune to a constant
            present = {sym.name for sym in rest.free_symbols}
            pruned = _fit(rest, {k: v for k, v in start.items() if k in present}, ctx, "precision:prune", deadline)
            if _no_worse(pruned, best, tolerance):
                best = pruned
                break
        else:
            return best


def _simple_values(value: float) -> list[sympy.Expr]:
    """Simple numbers within ``SNAP_NEAR`` of ``value``, nearest first: small fractions, then multiples of pi."""
    out: list[sympy.Expr] = [sympy.Rational(round(value * q), q) for q in SNAP_DENOMINATORS]
    if round(value / math.pi):
        out.append(round(value / math.pi) * sympy.pi)
    near = [v for v in dict.fromkeys(out)
            if 0 < abs(float(v) - value) <= SNAP_NEAR * max(abs(value), 1e-12)]
    return sorted(near, key=lambda v: abs(float(v) - value))


def snap_constants(cand: Candidate, ctx: AgentContext, *, tolerance: float = 0.1,
                   deadline: float | None = None) -> Candidate:
    """Each constant in turn set to the nearest simple value (an integer, a half, a third, a quarter, a multiple of
    pi) with the others refitted; kept when the validation error stays within a factor ``1 + tolerance``."""
    skeleton = _skeleton(cand, ctx)  # one skeleton throughout: a snapped constant stays fixed
    symbols = dict(zip(skeleton.parameters, skeleton.param_symbols()))
    values = dict(zip(skeleton.parameters, skeleton.initial_params))
    fixed: dict[str, sympy.Expr] = {}
    best = cand
    for name in skeleton.parameters:
        for simple in _simple_values(values[name]):
            expr = skeleton.sympy.xreplace({symbols[k]: v for k, v in {**fixed, name: simple}.items()})
            free = {k: v for k, v in values.items() if k not in fixed and k != name}
            trial = _fit(expr, free, ctx, "precision:snap", deadline)
            if _no_worse(trial, best, tolerance):
                best, fixed[name] = trial, simple
                values.update(zip(Expression(expr, ctx.variables, free).parameters, trial.params))
                break
    return best


def polish(cand: Candidate, ctx: AgentContext, *, tolerance: float = 0.1, n_starts: int = 8,
           deadline: float | None = None) -> list[Candidate]:
    """Refit on relative error, prune, snap: every distinct step's result (the pool and the selection decide);
    what is left undone at ``deadline`` (monotonic seconds) is skipped."""
    out: list[Candidate] = []
    current = cand
    refit = refit_relative(current, ctx, n_starts=n_starts, deadline=deadline)
    if refit is not None:
        out.append(refit)
        if _no_worse(refit, current, tolerance):
            current = refit
    for step in (prune_terms, snap_constants):
        changed = step(current, ctx, tolerance=tolerance, deadline=deadline)
        if changed.equation != current.equation:
            out.append(changed)
            current = changed
    return out
