"""Term combination: small linear combinations of the additive terms found across a pool, refitted in float64.

Why: the engine's front and the model's hypotheses often hold a law's terms in *different* equations (one front
model has ``-c*A**2`` and a polynomial in ``t``, a hypothesis has ``c*A*sin(c*t)``); no single candidate has them
all, and a GP run rarely crosses them over in time. Fitting subsets of the pooled terms by least squares costs
milliseconds, and on a law's exact terms the validation error drops by orders of magnitude, which a spurious term
cannot do. So a combination joins the pool only when it beats the pool's best validation NMSE by a clear factor
(``CombineSettings.min_gain``): near-equal overfits never displace what the search found, and the harness keeps
"guidance only widens" (the pool only grows).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

import numpy as np
import sympy

from harness.core.candidates import NMSE_FLOOR, Candidate
from harness.core.context import AgentContext, evaluate_candidate
from harness.core.expression import Expression, ExpressionError, parse_expression

__all__ = ["CombineSettings", "Term", "combine_terms", "additive_terms", "GUIDED_SOURCES"]

MAX_EXPANDED_TERMS = 16  # an expansion longer than this (a product of sums) keeps the equation's own terms
COLLINEAR = 1e-9  # 1 - |correlation| below this: the same column as a term already in the library


@dataclass(frozen=True)
class CombineSettings:
    """How wide the combination search is and what it takes to join the pool.

    ``min_gain``: a combination is kept only when its validation NMSE is at most the pool's best / ``min_gain``
    (after the float64 refit), so it is a different fit, not the same one with a noise term added.
    ``step_gain``: a term is added to a combination only when it cuts the validation NMSE by this factor.
    Chosen on 24 pools of the synthetic suite's *training* templates (engine alone and harness, seed 0): gains of
    (3, 10, 30, 100) x steps of (2, 5) lifted acc_0.01 OOD from 18 to 19, 19, 20, 20 tasks; only 100 made no
    task's OOD NMSE worse, and step 5 gave the most acc_0.001 OOD (9 -> 12).
    """

    max_sources: int = 12
    max_library: int = 64
    max_terms: int = 6
    step_gain: float = 5.0
    min_gain: float = 100.0
    max_refits: int = 4
    max_guided_refits: int = 6
    max_complexity: int = 80
    max_seconds: float = 8.0


@dataclass
class Term:
    """One additive term (its numeric coefficient stripped, inner constants kept as numbers) and where from."""

    expr: sympy.Expr
    origin: str  # the source of the candidate it came from ("hypothesis", "operon", ...)
    train: np.ndarray = field(repr=False, default_factory=lambda: np.zeros(0))
    valid: np.ndarray = field(repr=False, default_factory=lambda: np.zeros(0))


def additive_terms(expr: sympy.Expr) -> list[sympy.Expr]:
    """The equation's additive terms without their numeric factors: expanded when that stays short (so
    ``x*(a + b)`` gives ``x*a`` and ``x*b``), else the terms as written. Pure numbers are left out (the intercept
    is always offered)."""
    parts = list(sympy.Add.make_args(expr))
    try:
        expanded = sympy.expand(expr, power_exp=False, power_base=False, log=False)
        more = list(sympy.Add.make_args(expanded))
        if len(more) <= MAX_EXPANDED_TERMS:
            parts = parts + more
    except Exception:  # sympy may fail on odd trees; the unexpanded terms still count
        pass
    out: list[sympy.Expr] = []
    seen: set[sympy.Expr] = set()
    for part in parts:
        _, rest = part.as_coeff_Mul()
        if rest.is_number or rest in seen:
            continue
        seen.add(rest)
        out.append(rest)
    return out


def _library(sources: Sequence[Candidate], ctx: AgentContext, settings: CombineSettings) -> list[Term]:
    variables = ctx.variables
    terms: list[Term] = []
    normed: list[np.ndarray] = []
    for cand in sources:
        try:
            expr = parse_expression(cand.equation, variables, max_nodes=400, max_depth=64)
        except ExpressionError:
            continue
        for rest in additive_terms(expr.sympy):
            if len(terms) >= settings.max_library:
                return terms
            try:
                term_expr = Expression(rest, variables)
                with np.errstate(all="ignore"):
                    tr = np.asarray(term_expr(ctx.train.X), dtype=float) * np.ones(ctx.train.y.size)
                    va = np.asarray(term_expr(ctx.valid.X), dtype=float) * np.ones(ctx.valid.y.size)
            except (ExpressionError, TypeError, ValueError, ZeroDivisionError):
                continue
            if not (np.all(np.isfinite(tr)) and np.all(np.isfinite(va))):
                continue
            centred = tr - tr.mean()
            norm = float(np.linalg.norm(centred))
            if norm == 0.0 or not math.isfinite(norm) or float(np.max(np.abs(tr))) > 1e12:
                continue
            unit = centred / norm
            if any(1.0 - abs(float(unit @ other)) < COLLINEAR for other in normed):
                continue
            normed.append(unit)
            terms.append(Term(rest, cand.source or "?", tr, va))
    return terms


def _nmse(y: np.ndarray, pred: np.ndarray) -> float:
    var = float(np.var(y))
    if var <= 0.0:
        return math.inf
    value = float(np.mean((y - pred) ** 2)) / var
    return value if math.isfinite(value) else math.inf


def _linear(subset: tuple[int, ...], terms: list[Term], ctx: AgentContext) -> tuple[float, np.ndarray]:
    """Least squares on train (with an intercept) over the subset's columns; validation NMSE and weights."""
    y = ctx.train.y
    A = np.column_stack([terms[i].train for i in subset] + [np.ones_like(y)])
    w, *_ = np.linalg.lstsq(A, y, rcond=None)
    if not np.all(np.isfinite(w)):
        return math.inf, w
    V = np.column_stack([terms[i].valid for i in subset] + [np.ones_like(ctx.valid.y)])
    return _nmse(ctx.valid.y, V @ w), w


def _grow(start: tuple[int, ...], terms: list[Term], ctx: AgentContext, settings: CombineSettings,
          seen: dict[tuple[int, ...], tuple[float, np.ndarray]], deadline: float) -> None:
    """Greedy forward steps from ``start``: add the term that cuts validation error most, while it cuts it by
    ``step_gain``; every subset visited is remembered in ``seen``."""
    current = tuple(sorted(start))
    if current and current not in seen:
        seen[current] = _linear(current, terms, ctx)
    err = seen[current][0] if current else _nmse(ctx.valid.y, np.full(ctx.valid.y.size, ctx.train.y.mean()))
    while len(current) < settings.max_terms and time.perf_counter() < deadline:
        best: tuple[float, tuple[int, ...]] | None = None
        for i in range(len(terms)):
            if i in current:
                continue
            subset = tuple(sorted(current + (i,)))
            if subset not in seen:
                seen[subset] = _linear(subset, terms, ctx)
            if best is None or seen[subset][0] < best[0]:
                best = (seen[subset][0], subset)
        if best is None or not best[0] * settings.step_gain <= max(err, NMSE_FLOOR):
            return
        err, current = best


def _text(subset: tuple[int, ...], weights: np.ndarray, terms: list[Term], variables: Sequence[str]) -> str:
    """The combination as engine-grammar text, the least-squares weights written in as starting values."""
    expr = sum((sympy.Float(float(w)) * terms[i].expr for i, w in zip(subset, weights[:-1])), sympy.Integer(0))
    if abs(float(weights[-1])) > 0.0:
        expr = expr + sympy.Float(float(weights[-1]))
    return str(Expression(expr, variables))


# the model's words, known terms, and equations built on them (a residual run's f + g)
GUIDED_SOURCES = frozenset({"hypothesis", "seed", "warm_start", "library", "residual"})


def _own_terms(cand: Candidate, terms: list[Term], variables: Sequence[str]) -> tuple[int, ...]:
    """Library indices of ``cand``'s own terms."""
    try:
        own = {sympy.srepr(t) for t in additive_terms(
            parse_expression(cand.equation, variables, max_nodes=400, max_depth=64).sympy)}
    except ExpressionError:
        return ()
    return tuple(i for i, t in enumerate(terms) if sympy.srepr(t.expr) in own)


def combine_terms(pool: Iterable[Candidate], ctx: AgentContext, settings: CombineSettings | None = None,
                  extra_sources: Iterable[Candidate] = (),
                  guided: frozenset[str] = GUIDED_SOURCES) -> tuple[list[Candidate], dict[str, Any]]:
    """Combinations of the pool's terms that beat the pool's best validation NMSE by ``min_gain``.

    Sources: the ``max_sources`` best candidates of ``pool`` by validation NMSE, the pool's candidates from
    ``guided`` sources (the model's hypotheses), and ``extra_sources`` (hypotheses too poor to join the pool
    alone, whose terms may still be right). Every guided term is also tried inside the best equation and its
    best combination is refitted, so a model's term is never crowded out by the engine's many near-copies.
    Returns the new candidates (source "combination", ``info["terms_from"]`` naming the terms' origins) and a
    summary for the run record.
    """
    settings = settings or CombineSettings()
    t0 = time.perf_counter()
    deadline = t0 + settings.max_seconds
    usable = sorted((c for c in pool if math.isfinite(c.metric("valid"))), key=lambda c: c.sort_key())
    info: dict[str, Any] = {"library": 0, "guided_terms": 0, "subsets": 0, "refits": 0, "kept": 0}
    if not usable:
        return [], info
    best_err = usable[0].metric("valid")
    if best_err <= NMSE_FLOOR:  # an exact fit is already there: nothing can beat it but rounding noise
        return [], info
    top = usable[: settings.max_sources]
    sources = top[:1] + [c for c in usable if c.source in guided] + list(extra_sources) + top[1:]
    terms = _library(sources, ctx, settings)
    info["library"] = len(terms)
    if not terms:
        return [], info
    model_terms = [i for i, t in enumerate(terms) if t.origin in guided]
    info["guided_terms"] = len(model_terms)
    seen: dict[tuple[int, ...], tuple[float, np.ndarray]] = {}
    starts: list[tuple[int, ...]] = [()] + [_own_terms(c, terms, ctx.variables) for c in usable[:3]]
    best_own = starts[1]
    starts += [tuple(sorted(set(best_own) | {i})) for i in model_terms] + [(i,) for i in model_terms]
    for start in dict.fromkeys(starts):
        if time.perf_counter() > deadline:
            break
        if len(start) < settings.max_terms:
            _grow(start, terms, ctx, settings, seen, deadline)
    info["subsets"] = len(seen)
    ranked = sorted((err, subset) for subset, (err, _) in seen.items() if math.isfinite(err))
    to_refit = [subset for _, subset in ranked[: settings.max_refits]]
    for i in model_terms:  # the best combination holding each of the model's terms gets its refit too
        holding = next((subset for _, subset in ranked if i in subset), None)
        if holding is not None:
            to_refit.append(holding)
    target = best_err / settings.min_gain
    out: list[Candidate] = []
    for subset in list(dict.fromkeys(to_refit))[: settings.max_refits + settings.max_guided_refits]:
        if time.perf_counter() > deadline:
            break
        text = _text(subset, seen[subset][1], terms, ctx.variables)
        info["refits"] += 1
        try:
            cand = evaluate_candidate(text, ctx, source="combination", constants_as_params=True)
        except ExpressionError:
            continue
        if cand.metric("valid") <= target and cand.complexity <= settings.max_complexity:
            cand.info["terms_from"] = sorted({terms[i].origin for i in subset})
            out.append(cand)
    info["kept"] = len(out)
    info["seconds"] = round(time.perf_counter() - t0, 3)
    return out, info
