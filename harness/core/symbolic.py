"""Symbolic accuracy: is a found equation the ground truth, up to the truth's free constants?

The rule (what ``python -m benchmarks run`` and the optimizer's report count as SA):

1. **The truth's family.** Every decimal number in the ground truth (``0.273``, ``90.2``, ``0.442`` in an
   exponent; ``pi`` and ``E`` count as decimals) becomes a free constant; integers and fractions stay structure
   (the ``1`` of ``1 - P/K``, the ``2`` of ``x**2``, the ``1/2`` of ``sqrt``). This gives the skeleton
   ``G(x; a)``; the truth is ``G(x; a*)``.
2. **Points, on the data and off it.** The task's own inputs (train, in-domain and out-of-domain test rows, at most
   2,000), so the check covers the range the task is judged on, extrapolation included; *and* as many points drawn
   uniformly from the box those inputs span (``region_points``, seeded). One trajectory is a curve (``t`` and ``P``
   tied together), and a flexible family can follow another function along a curve to 1e-12: ``r*P*(1 - P/K) +
   c*(P - P(t))`` is the logistic law on its own trajectory and nothing like it elsewhere. The law is defined over
   the region, so equivalence is judged there. Box points where the truth is not finite are dropped; the found
   equation must be finite on the rest (up to 1 %: where it is not, it is not the law there).
3. **Negligible terms dropped.** SR leaves tiny terms (``- 1.4e-05``, ``+ 3e-6*t``); a top-level additive term of
   the found equation ``f`` whose RMS over the rows and the box points is below ``prune_tol`` (1e-4) times the
   truth's RMS on the rows is removed.
4. **Constants fitted.** The constants of ``G`` are fitted to ``f``'s values on the points by least squares,
   starting from the truth's own values (our evaluator's multistart fit).
5. **Equivalent when** (a) *sympy*: with the fitted constants written in and every float in both sides rounded to
   ``digits`` (4) significant digits, ``simplify(f - G)`` is exactly 0, within ``timeout_s`` (5 s) of simplification;
   or (b) *refit*: ``G`` with the fitted constants reproduces ``f`` to NMSE <= ``refit_tol`` (1e-12, an RMS
   error of 1e-6 of the spread) on the task's rows *and* on the region's points, each NMSE over its own points - the same family member, written differently (``exp(c + b*x)``
   for ``a*exp(b*x)``, which refits to ~1e-30), where rounding breaks the exact sympy check. The tolerance is
   tight on purpose: an SR approximation of a polynomial term by nested sines reached 3e-10 over ID and OOD
   inputs (seen on phys_osc_synth_03) and is not the truth. The method that decided is recorded.
   Either way every fitted constant must stay within a factor ``1000`` of the truth's own value: a constant
   fitted to ~0 (or ~infinity, as ``K`` in ``P/K``) deletes a term, and an equation missing a term is not the truth.

Not equivalent: a different form that only fits the data (a polynomial for a sine, sines for a cubic) does not
reproduce the truth's family to 1e-12; neither does a found equation with a missing or extra term.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Sequence

import numpy as np
import sympy

from harness.core.expression import (
    Expression,
    ExpressionError,
    _run_with_timeout,
    parse_expression,
)

MAX_POINTS = 2000
REGION_POINTS = 2000
MAX_UNDEFINED_SHARE = 0.01
PRUNE_TOL = 1e-4
REFIT_TOL = 1e-12
DIGITS = 4
TIMEOUT_S = 5.0
DEGENERATE_FACTOR = 1000.0


@dataclass
class SymbolicMatch:
    """The verdict and how it was reached (JSON-ready via :meth:`to_record`)."""

    equivalent: bool
    method: str | None = None  # "sympy" | "refit" | None
    refit_nmse: float | None = None  # on the task's rows
    region_nmse: float | None = None  # on points drawn over the box the rows span (None: not judged off them)
    constants: dict[str, float] = field(default_factory=dict)  # the truth's constants fitted to the found equation
    dropped_terms: list[str] = field(default_factory=list)
    note: str = ""

    def to_record(self) -> dict[str, Any]:
        return asdict(self)


def truth_skeleton(truth: str, variables: Sequence[str]) -> tuple[Expression, np.ndarray]:
    """The truth's family ``G(x; a)`` and its own constants ``a*`` (non-integer numbers become c0, c1, ...)."""
    expr = parse_expression(truth, variables).sympy
    expr = expr.xreplace({s: sympy.Float(s.evalf(17)) for s in expr.atoms(sympy.NumberSymbol)})
    numbers = sorted((a for a in expr.atoms(sympy.Float)), key=sympy.default_sort_key)
    symbols = {a: sympy.Symbol(f"c{i}", real=True) for i, a in enumerate(numbers)}
    skeleton = _replace_numbers(expr, symbols)
    initial = {s.name: float(a) for a, s in symbols.items()}
    return Expression(skeleton, variables, initial), np.array([float(a) for a in numbers], dtype=float)


def _replace_numbers(expr: sympy.Expr, symbols: dict[sympy.Number, sympy.Symbol]) -> sympy.Expr:
    """Numbers -> symbols, also where sympy stores ``-0.27`` as the coefficient of a product (no re-evaluation)."""
    if expr.is_Number:
        if expr in symbols:
            return symbols[expr]
        if -expr in symbols:
            return -symbols[-expr]
        return expr
    if not expr.args:
        return expr
    return expr.func(*(_replace_numbers(a, symbols) for a in expr.args))


def _round_floats(expr: sympy.Expr, digits: int) -> sympy.Expr:
    return expr.xreplace({f: sympy.Float(float(f"{float(f):.{digits}g}")) for f in expr.atoms(sympy.Float)})


def _rms(values: np.ndarray) -> float:
    return float(np.sqrt(np.mean(np.square(values))))


def points(task: Any, max_points: int = MAX_POINTS, seed: int = 0) -> np.ndarray:
    """Inputs of every split of a task (train, test_id, test_ood), subsampled to ``max_points`` rows."""
    blocks = [split.X for split in (task.train, task.test_id, task.test_ood) if split is not None and len(split.X)]
    X = np.vstack(blocks)
    if len(X) > max_points:
        X = X[np.random.default_rng(seed).choice(len(X), size=max_points, replace=False)]
    return X


def region_points(X: np.ndarray, n: int = REGION_POINTS, seed: int = 0) -> np.ndarray:
    """``n`` points drawn uniformly from the box ``X``'s rows span (each input over its own range, independently):
    where a law is defined, not only where one trajectory passed."""
    X = np.asarray(X, dtype=float)
    if not len(X) or n <= 0:
        return np.zeros((0, X.shape[1] if X.ndim == 2 else 0))
    lo, hi = np.nanmin(X, axis=0), np.nanmax(X, axis=0)
    return np.random.default_rng(seed).uniform(lo, hi, size=(int(n), X.shape[1]))


def _region_part(f_expr: sympy.Expr, g_family: Expression, g_constants: np.ndarray, variables: Sequence[str],
                 region: np.ndarray) -> tuple[np.ndarray, str]:
    """The region's points where the truth is finite; '' or why the found equation is not the law there."""
    cols = Expression.columns(region, len(variables))
    with np.errstate(all="ignore"):
        g_ok = np.isfinite(g_family.evaluate(cols, g_constants, n=len(region)))
        region = region[g_ok]
        f_values = Expression(f_expr, variables).evaluate(Expression.columns(region, len(variables)), n=len(region))
    undefined = ~np.isfinite(f_values)
    if len(region) and undefined.mean() > MAX_UNDEFINED_SHARE:
        return region, (f"the found equation is not finite on {undefined.mean():.0%} of the region the inputs span, "
                        "where the truth is")
    return region[~undefined], ""


def _nmse(f_values: np.ndarray, g_values: np.ndarray) -> float:
    err = f_values - g_values
    if not len(err) or not np.all(np.isfinite(err)):
        return float("inf") if len(err) else 0.0
    return float(np.mean(err ** 2) / max(np.var(f_values), 1e-300))


def symbolic_match(found: str, truth: str, variables: Sequence[str], X: np.ndarray, *,
                   region: np.ndarray | None = None, prune_tol: float = PRUNE_TOL, refit_tol: float = REFIT_TOL,
                   digits: int = DIGITS, timeout_s: float = TIMEOUT_S) -> SymbolicMatch:
    """Whether ``found`` equals ``truth`` up to the truth's free constants, on inputs ``X`` (rows x variables)
    and on ``region`` (points off the rows; None: :func:`region_points` over ``X``'s box; an empty array: the
    rows alone, the rule before 2026-12-07)."""
    from harness.core.evaluator import fit

    try:
        f_expr = parse_expression(found, variables)
        g_family, g_constants = truth_skeleton(truth, variables)
    except ExpressionError as exc:
        return SymbolicMatch(False, note=f"cannot parse: {exc}")
    region = region_points(X) if region is None else np.asarray(region, dtype=float).reshape(-1, len(variables))
    cols = Expression.columns(X, len(variables))
    with np.errstate(all="ignore"):
        g_values = g_family.evaluate(cols, g_constants, n=len(X))
        ok = np.isfinite(g_values)
        if not ok.any():
            return SymbolicMatch(False, note="the ground truth is not finite on the task's inputs")
        X, cols, g_values = X[ok], [c[ok] for c in cols], g_values[ok]
        scale = _rms(g_values) or 1.0
        kept, dropped = [], []
    region, undefined = _region_part(f_expr.sympy, g_family, g_constants, variables, region)
    if undefined:
        return SymbolicMatch(False, note=undefined)
    both = np.vstack([X, region])
    both_cols = Expression.columns(both, len(variables))
    on_rows = np.arange(len(both)) < len(X)
    with np.errstate(all="ignore"):
        for term in sympy.Add.make_args(f_expr.sympy):  # negligible on the rows and off them
            values = Expression(term, variables).evaluate(both_cols, n=len(both))
            if np.all(np.isfinite(values)) and _rms(values) < prune_tol * scale:
                dropped.append(str(term))
            else:
                kept.append(term)
    if not kept:
        return SymbolicMatch(False, dropped_terms=dropped, note="every term of the found equation is negligible")
    f_pruned = sympy.Add(*kept)
    with np.errstate(all="ignore"):
        f_values = Expression(f_pruned, variables).evaluate(both_cols, n=len(both))
    if not np.all(np.isfinite(f_values[on_rows])):
        return SymbolicMatch(False, dropped_terms=dropped, note="the found equation is not finite where the truth is")
    if g_family.n_params:
        result = fit(g_family, both, f_values, n_starts=4, max_seconds=5.0)
        params = result.params if result.params is not None and len(result.params) else g_constants
    else:
        params = np.zeros(0)
    with np.errstate(all="ignore"):
        g_fitted = g_family.evaluate(both_cols, params, n=len(both))
    nmse = _nmse(f_values[on_rows], g_fitted[on_rows])
    region_nmse = _nmse(f_values[~on_rows], g_fitted[~on_rows]) if len(region) else None
    constants = {name: float(v) for name, v in zip(g_family.parameters, params)}
    match = SymbolicMatch(False, refit_nmse=nmse, region_nmse=region_nmse, constants=constants,
                          dropped_terms=dropped)
    worst = max(nmse, region_nmse or 0.0)
    where = f"NMSE {nmse:.2e} on the task's rows" + (f", {region_nmse:.2e} off them" if region_nmse is not None else "")
    if not worst <= max(refit_tol, 1e-4):  # far from the family: no need for sympy
        match.note = f"the truth's form with any constants does not reproduce the found equation ({where})"
        return match
    degenerate = [name for name, v, a in zip(g_family.parameters, params, g_constants)
                  if not (abs(a) / DEGENERATE_FACTOR <= abs(v) <= abs(a) * DEGENERATE_FACTOR)]
    if degenerate:
        match.note = (f"fitted constants {', '.join(degenerate)} left the truth's scale (a term vanishes): the "
                      "found equation lacks part of the truth")
        return match
    g_written = g_family.with_params(params).sympy if g_family.n_params else g_family.sympy
    f_pruned = f_pruned.xreplace({s: sympy.Float(s.evalf(17)) for s in f_pruned.atoms(sympy.NumberSymbol)})
    try:
        difference = _run_with_timeout(
            lambda: sympy.simplify(_round_floats(f_pruned, digits) - _round_floats(g_written, digits)), timeout_s)
    except Exception as exc:  # noqa: BLE001 - sympy internals can fail on odd trees; the refit rule still decides
        difference, match.note = None, f"sympy: {type(exc).__name__}"
    if difference is not None and difference == 0:
        match.equivalent, match.method = True, "sympy"
    elif worst <= refit_tol:
        match.equivalent, match.method = True, "refit"
    else:
        match.note = match.note or f"refit above {refit_tol:g} ({where})"
    return match


def task_symbolic_match(task: Any, found: str | None, *, off_trajectory: bool = True) -> SymbolicMatch | None:
    """:func:`symbolic_match` on a task's own inputs and the box they span (``off_trajectory=False``: the rows
    alone, the rule before 2026-12-07, for re-scoring side by side); None when the task has no ground truth or
    nothing was found."""
    if not found or not getattr(task, "ground_truth", None):
        return None
    X = points(task)
    region = region_points(np.vstack([s.X for s in task.splits().values()])) if off_trajectory else X[:0]
    return symbolic_match(found, task.ground_truth, list(task.input_names), X, region=region)
