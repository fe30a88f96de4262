"""Generic libraries of terms and the sparse regression over them: what data analysis names when no model or
engine run did.

The libraries are standard in equation discovery and tied to no field: the monomials of the inputs up to degree 3
(SINDy's polynomial library: ``x**3``, ``v**3``, ``x*v``), for each input the dominant angular frequencies of the
target and of what the pool's best equation leaves unexplained, read off a Lomb-Scargle periodogram (the training
rows are not evenly spaced) and refined past its grid: ``sin(w*u)``, ``cos(w*u)`` and their products with each
other input (``x*cos(w*t)``), and the :data:`FAMILIES` of unary forms (unit-frequency waves; for a signed state,
``abs``, ``tanh`` and couplings localized near rest). A driving force ``F*sin(w*t)`` needs its frequency found,
which an evolutionary search rarely does; the periodogram finds it in milliseconds. Every sparse fit is refitted
in float64 with each constant free (frequencies and rates too), so the library's numbers only need to be close.
Why the channel is on, and what each part solved: docs/oscillators.md.
"""

from __future__ import annotations

import copy
import itertools
import math
from dataclasses import dataclass, replace
from typing import Any, Sequence

import numpy as np

__all__ = ["BasisSettings", "FAMILIES", "dominant_frequencies", "forward_path", "generic_basis", "input_frequencies",
           "pool_terms", "signed_inputs", "sparse_candidates", "sparse_fit", "standard_library"]


@dataclass(frozen=True)
class BasisSettings:
    """``degree``: the monomials' highest degree; ``frequencies``: peaks kept per input; ``min_cycles``: a
    frequency must make at least this many cycles over the input's range (slower ones are trends, which the
    monomials hold); ``grid``: periodogram frequencies tried per input; ``max_rows``: rows the periodogram reads;
    the rest shape the sparse regression (:func:`sparse_candidates`)."""

    degree: int = 3
    frequencies: int = 2
    min_cycles: float = 1.5
    grid: int = 1500
    max_rows: int = 1500
    min_share: float = 0.05  # a peak's power as a share of the residual's variance it must explain
    families: tuple[str, ...] = ("trig",)  # :data:`FAMILIES` :func:`standard_library` adds
    # the sparse regression's libraries (family sets), each fitted on its own: a wider library's nearly collinear
    # columns cannot crowd the narrower one's fit off a law (LLM-SR's oscillator1); the third adds the pool's terms
    libraries: tuple[tuple[str, ...], ...] = (("trig",), ("trig", "abs", "tanh", "localized"),
                                              ("trig", "abs", "tanh", "localized", "pool"))
    selection: tuple[str, ...] = ("stlsq", "forward")  # the sparse fits: SINDy's thresholding, a forward path
    max_terms: int = 8  # the forward path's longest model
    keep: int = 3  # forward-path models refitted per library


def dominant_frequencies(u: np.ndarray, r: np.ndarray, settings: BasisSettings = BasisSettings()) -> list[float]:
    """Angular frequencies of the strongest periodic components of ``r`` as a function of ``u`` (local maxima of
    the normalized Lomb-Scargle periodogram, strongest first, at most ``settings.frequencies``)."""
    from scipy.signal import lombscargle

    u, r = np.asarray(u, dtype=float), np.asarray(r, dtype=float)
    ok = np.isfinite(u) & np.isfinite(r)
    u, r = u[ok], r[ok]
    if u.size < 20 or np.ptp(u) <= 0 or np.var(r) <= 0:
        return []
    if u.size > settings.max_rows:  # evenly thinned: the periodogram's cost grows with rows x frequencies
        keep = np.linspace(0, u.size - 1, settings.max_rows).astype(int)
        order = np.argsort(u)
        u, r = u[order][keep], r[order][keep]
    span = float(np.ptp(u))
    spacing = float(np.median(np.diff(np.sort(u)))) or span / u.size
    lo = 2 * math.pi * settings.min_cycles / span
    hi = min(math.pi / max(spacing, 1e-12), lo * 400)
    if hi <= lo:
        return []
    omega = np.linspace(lo, hi, settings.grid)
    centred = r - r.mean()
    with np.errstate(all="ignore"):
        power = lombscargle(u, centred, omega, normalize=True)
    if not np.all(np.isfinite(power)):
        return []
    peaks = [i for i in range(1, len(power) - 1) if power[i] >= power[i - 1] and power[i] >= power[i + 1]
             and power[i] >= settings.min_share]
    peaks.sort(key=lambda i: -power[i])
    out: list[float] = []
    step = float(omega[1] - omega[0])
    for i in peaks:
        fine = np.linspace(omega[i] - step, omega[i] + step, 41)  # the grid's step is ~0.1 rad/s over 30 s of
        with np.errstate(all="ignore"):  # time: a phase error of radians by the end, more than a refit repairs
            local = lombscargle(u, centred, fine, normalize=True)
        w = float(fine[int(np.nanargmax(local))]) if np.any(np.isfinite(local)) else float(omega[i])
        if all(abs(w - other) > 2 * step for other in out):
            out.append(w)
        if len(out) >= settings.frequencies:
            break
    return out


def _num(x: float) -> str:
    return repr(round(float(x), 6))


def input_frequencies(X: np.ndarray, residual: np.ndarray, j: int, settings: BasisSettings = BasisSettings()
                      ) -> list[float]:
    """:func:`dominant_frequencies` along input ``j`` of each signal in ``residual`` (a column, or several side by
    side: what the pool's best leaves, and the target itself, where a drive shows before anything is fitted)."""
    signals = np.asarray(residual, dtype=float).reshape(len(X), -1)
    out: list[float] = []
    for r in signals.T:
        for w in dominant_frequencies(X[:, j], r, settings):
            if all(abs(w - other) > 0.01 * other for other in out):
                out.append(w)
    return out


def generic_basis(X: np.ndarray, residual: np.ndarray, variables: Sequence[str],
                  settings: BasisSettings = BasisSettings(), frequencies: Sequence[list[float]] | None = None
                  ) -> list[str]:
    """The basis as expressions in the engine grammar over ``variables`` (numbers as starting values); the waves'
    frequencies are :func:`input_frequencies` of ``residual`` (or ``frequencies``, per input, already read)."""
    names = list(variables)
    terms: list[str] = []
    for degree in range(1, settings.degree + 1):
        for combo in itertools.combinations_with_replacement(names, degree):
            terms.append("*".join(combo))
    for j, u in enumerate(names):
        for w in frequencies[j] if frequencies is not None else input_frequencies(X, residual, j, settings):
            for fn in ("sin", "cos"):
                wave = f"{fn}({_num(w)}*{u})"
                terms.append(wave)
                terms += [f"{z}*{wave}" for z in names if z != u]
    return list(dict.fromkeys(terms))


# The nonlinearity families of the sparse regression's library: unary functions of one input (numbers are starting
# values the refit frees: ``tanh(1.0*v)`` becomes ``tanh(c*v)``), offered alone and times every input. ``trig`` is
# SINDy's unit-frequency library (pendulum, LLM-SR's ``x*cos(x)``) over every input; the others are the classical
# forms of a signed state around its equilibrium (an input taking both signs: position, velocity), so they are
# offered only for such inputs: odd even-powers through ``abs`` (quadratic drag ``v*abs(v)``, a spring of order
# 3/2 ``x*sqrt(abs(x))``), saturation (smoothed dry friction ``tanh(k*v)``) and couplings localized near rest
# (``x*exp(-k*abs(x))``, ``v*exp(-k*x**2)``). A non-negative input (time, a concentration, a temperature) gets
# none of them: there they only duplicate the monomials or add slow trends of time.
FAMILIES: dict[str, tuple[str, ...]] = {
    "trig": ("sin({u})", "cos({u})"),
    "abs": ("abs({u})", "sqrt(abs({u}))"),
    "tanh": ("tanh({k}*{u})",),
    "localized": ("exp(-{k}*abs({u}))", "exp(-{k2}*{u}**2)"),
}
SIGNED_FAMILIES = ("abs", "tanh", "localized")


def signed_inputs(X: np.ndarray) -> list[int]:
    """The inputs that take both signs (a position, a velocity: a state around its equilibrium)."""
    return [j for j in range(X.shape[1]) if X.shape[0] and float(np.min(X[:, j])) < 0 < float(np.max(X[:, j]))]


def standard_library(X: np.ndarray, residual: np.ndarray, variables: Sequence[str],
                     settings: BasisSettings = BasisSettings(), frequencies: Sequence[list[float]] | None = None
                     ) -> list[str]:
    """:func:`generic_basis` plus, per :data:`FAMILIES` in ``settings.families``, each unary function of each
    input (of each signed input, for :data:`SIGNED_FAMILIES`) alone and times every input (``x*cos(x)``,
    ``v*abs(v)``, ``x*exp(-1.0*abs(x))``); rates start at the input's scale (``k`` = 1 / its RMS). (Left out
    after trials: exponential couplings ``z*exp(k*u)`` on a grid of rates crowded the sparse fit off LLM-SR's
    oscillator1; decays ``exp(-s*t)`` of non-negative inputs let slow trends of time mimic a trajectory's state
    terms; damped waves ``exp(-s*t)*cos(w*t)`` found no law and cost one.)"""
    names = list(variables)
    terms = generic_basis(X, residual, variables, settings, frequencies)
    signed = signed_inputs(X)
    for family in (f for f in settings.families if f in FAMILIES):  # ("pool": the pool's terms, sparse_candidates)
        for j, u in enumerate(names):
            if family in SIGNED_FAMILIES and j not in signed:
                continue
            rms = float(np.sqrt(np.mean(np.square(X[:, j])))) if X.size else 0.0
            k = 1.0 / rms if rms > 0 else 1.0
            for form in FAMILIES[family]:
                unary = form.format(u=u, k=_num(k), k2=_num(k * k))
                terms.append(unary)
                terms += [f"{z}*{unary}" for z in names]
    return list(dict.fromkeys(terms))


def sparse_fit(columns: np.ndarray, y: np.ndarray, *, threshold: float = 1e-3, rounds: int = 12,
               max_terms: int = 8) -> np.ndarray | None:
    """Sequentially thresholded least squares (SINDy's STLSQ) on unit-scaled columns: the weights of a sparse
    combination (zeros elsewhere), or None. On exact data whose law's terms are all columns, the full least-squares
    solution already is the law; thresholding drops what only fits rounding noise. More than ``max_terms`` left:
    the weaker half is dropped and the rest refitted, until at most ``max_terms`` remain."""
    scale = np.linalg.norm(columns, axis=0)
    ok = np.isfinite(scale) & (scale > 0) & np.all(np.isfinite(columns), axis=0)
    if not np.any(ok):
        return None
    A = np.where(ok, columns / np.where(ok, scale, 1.0), 0.0)
    active = ok.copy()
    w = np.zeros(A.shape[1])
    for _ in range(rounds):
        idx = np.flatnonzero(active)
        if idx.size == 0:
            return None
        sol, *_ = np.linalg.lstsq(A[:, idx], y, rcond=None)
        w[:] = 0.0
        w[idx] = sol
        keep = active & (np.abs(w) >= threshold * float(np.max(np.abs(w))))
        if int(keep.sum()) > max_terms:
            cut = np.sort(np.abs(w[keep]))[::-1][max(max_terms, int(keep.sum()) // 2) - 1]
            keep &= np.abs(w) >= cut
        if np.array_equal(keep, active):
            break
        active = keep
    out = np.where(ok, w / np.where(ok, scale, 1.0), 0.0)
    return out if np.any(out) else None


def _repeats(col: np.ndarray, columns: list[np.ndarray]) -> bool:
    """Whether ``col`` is a multiple of a column already kept (``abs(t)`` of a non-negative ``t`` is ``t``)."""
    unit = col / np.linalg.norm(col)
    return any(abs(float(unit @ c)) / float(np.linalg.norm(c)) > 1 - 1e-12 for c in columns)


# (STLSQ threshold, most terms kept): every pair is one sparse fit; each is refitted in float64 and offered
SPARSE_GRID = ((1e-1, 4), (3e-2, 4), (1e-2, 8), (3e-3, 8), (1e-3, 8))


def forward_path(A: np.ndarray, y: np.ndarray, max_terms: int) -> list[list[int]]:
    """Forward stepwise selection (orthogonal matching pursuit with exact refits): at each step the column that
    most reduces the least-squares residual of the columns chosen so far joins them. Returns the chosen column
    sets of sizes 1..``max_terms``. Unlike thresholding, a wide library of nearly collinear columns cannot make it
    keep cancelling pairs: each step takes one column on its own merit."""
    norms = np.linalg.norm(A, axis=0)
    ok = np.isfinite(norms) & (norms > 0) & np.all(np.isfinite(A), axis=0)
    R = np.where(ok, A / np.where(ok, norms, 1.0), 0.0)
    r = np.asarray(y, dtype=float).copy()
    chosen: list[int] = []
    path: list[list[int]] = []
    for _ in range(min(max_terms, int(ok.sum()))):
        left = np.linalg.norm(R, axis=0)
        usable = ok & (left > 1e-6)
        usable[chosen] = False
        if not np.any(usable):
            break
        gain = np.where(usable, np.abs(R.T @ r) / np.where(usable, left, 1.0), -1.0)
        j = int(np.argmax(gain))
        q = R[:, j] / left[j]
        r -= (q @ r) * q
        R -= np.outer(q, q @ R)
        chosen.append(j)
        path.append(list(chosen))
    return path


def _library_columns(terms: Sequence[str], X: np.ndarray, variables: Sequence[str]
                     ) -> tuple[list[str], list[np.ndarray]]:
    from harness.core.expression import ExpressionError, parse_expression

    names: list[str] = []
    columns: list[np.ndarray] = []
    for term in terms:
        try:
            with np.errstate(all="ignore"):
                col = np.asarray(parse_expression(term, list(variables))(X), dtype=float) * np.ones(len(X))
        except (ExpressionError, TypeError, ValueError, ZeroDivisionError):
            continue
        if np.all(np.isfinite(col)) and 0 < float(np.max(np.abs(col))) < 1e12 and not _repeats(col, columns):
            names.append(term)
            columns.append(col)
    return names, columns


def _text(names: Sequence[str], weights: np.ndarray, idx: Sequence[int]) -> str:
    return " + ".join(f"({float(weights[k])!r})" if names[i] == "1" else f"({float(weights[k])!r})*({names[i]})"
                      for k, i in enumerate(idx))


def _path_models(A: np.ndarray, y: np.ndarray, names: Sequence[str], max_terms: int, keep: int
                 ) -> list[tuple[float, str]]:
    """The forward path's models worth a refit, with their linear NMSE: a size whose next term gains less than
    3-fold (a plateau: the structure is complete up to what the library can say), lowest error first, at most
    ``keep``."""
    path = forward_path(A, y, max_terms)
    scale = float(np.sum(np.square(y - y.mean()))) or 1.0
    fits = []
    for idx in path:
        w, *_ = np.linalg.lstsq(A[:, idx], y, rcond=None)
        share = np.abs(w) * np.linalg.norm(A[:, idx], axis=0) / (np.linalg.norm(y) or 1.0)
        if np.any(share < 1e-9):  # columns a greedy step took that the exact fit does not need: pruned
            idx = [i for i, keep in zip(idx, share >= 1e-9) if keep]
            w, *_ = np.linalg.lstsq(A[:, idx], y, rcond=None)
        fits.append((float(np.sum(np.square(y - A[:, idx] @ w))) / scale, idx, w))
    if not fits:
        return []
    plateaus = [f for k, f in enumerate(fits) if k + 1 == len(fits) or fits[k + 1][0] > f[0] / 3]
    plateaus.sort(key=lambda f: f[0])
    return [(e, _text(names, w, idx)) for e, idx, w in plateaus[:keep]]


def pool_terms(pool: Sequence[Any], ctx: Any, best: int = 3) -> list[str]:
    """The additive terms (numeric factors stripped, inner constants kept) of the pool's ``best`` equations by
    validation NMSE (``harness.core.combine.additive_terms``): what the engine and the model found, offered to the
    sparse fit beside the generic library (a drive ``exp(-0.1*t)*cos(1.28*t)`` the engine found, next to a spring
    only the library can say)."""
    import math

    from harness.core.combine import additive_terms
    from harness.core.expression import Expression, ExpressionError, parse_expression

    ranked = sorted((c for c in pool if math.isfinite(c.metric("valid"))), key=lambda c: c.sort_key("valid"))
    out: list[str] = []
    for cand in ranked[:best]:
        try:
            expr = parse_expression(cand.equation, ctx.variables, max_nodes=400, max_depth=64)
            out += [str(Expression(t, ctx.variables)) for t in additive_terms(expr.sympy)]
        except (ExpressionError, TypeError, ValueError):
            continue
    return list(dict.fromkeys(out))


def _pruned(cand: Any, ctx: Any, share: float = 1e-6) -> Any | None:
    """An exact sparse fit without the terms its refit drove to nothing (a starting rate made the linear fit borrow
    columns the law does not have), refitted; None when nothing is dropped or the rest is no longer exact."""
    import sympy

    from harness.core.candidates import NMSE_FLOOR
    from harness.core.context import evaluate_candidate
    from harness.core.expression import Expression, ExpressionError, parse_expression

    if not cand.metric("valid") <= NMSE_FLOOR:
        return None
    try:
        expr = parse_expression(cand.equation, ctx.variables)
        parts = sympy.Add.make_args(expr.sympy)
        X, y = ctx.train.X, ctx.train.y
        size = float(np.linalg.norm(y)) or 1.0
        with np.errstate(all="ignore"):
            norms = [float(np.linalg.norm(np.asarray(Expression(p, ctx.variables)(X), dtype=float) * np.ones(y.size)))
                     for p in parts]
        kept = [p for p, n in zip(parts, norms) if not n < share * size]
        if len(kept) == len(parts) or not kept:
            return None
        fitted = evaluate_candidate(str(Expression(sympy.Add(*kept), ctx.variables)), ctx, source="sparse",
                                    constants_as_params=True)
    except (ExpressionError, TypeError, ValueError, ZeroDivisionError):
        return None
    return fitted if fitted.metric("valid") <= NMSE_FLOOR else None


def sparse_candidates(ctx: Any, residual: np.ndarray, settings: BasisSettings = BasisSettings(),
                      deadline: float | None = None, pool: Sequence[Any] = ()) -> tuple[list[Any], dict[str, Any]]:
    """Sparse regressions of the target over ``ctx``'s training rows, one per library of ``settings.libraries``
    (:func:`standard_library`; its waves at the frequencies of ``residual``, what the pool's best leaves, and of
    the target; a library naming ``"pool"`` also holds :func:`pool_terms` of ``pool``). Each runs SINDy's
    thresholding (``SPARSE_GRID``) and a forward stepwise path (:func:`forward_path`; a library naming ``"pool"``
    the path alone: its terms are collinear with the library's); the distinct sparse
    combinations are refitted with every constant free (``evaluate_candidate``), lowest linear error first until
    ``deadline``, and returned as candidates (source "sparse")."""
    import time

    from harness.core.context import evaluate_candidate
    from harness.core.expression import ExpressionError

    X, y = ctx.train.X, ctx.train.y
    info: dict[str, Any] = {"library": 0, "fits": 0}
    texts: list[tuple[float, str]] = []  # (linear NMSE on train, text): refitted most promising first
    signals = np.column_stack([residual, y])  # waves of what the pool's best leaves and of the target itself
    scale = float(np.sum(np.square(y - y.mean()))) or 1.0
    frequencies = [input_frequencies(X, signals, j, settings) for j in range(X.shape[1])]
    for k, families in enumerate(settings.libraries):
        if k and deadline is not None and time.perf_counter() > deadline:
            break
        terms = standard_library(X, signals, ctx.variables, replace(settings, families=families), frequencies)
        if "pool" in families:
            terms = pool_terms(pool, ctx) + terms
        names, columns = _library_columns(terms, X, ctx.variables)
        info["library"] = max(info["library"], len(names))
        if not columns:
            continue
        A = np.column_stack(columns + [np.ones(y.size)])
        names.append("1")
        if "forward" in settings.selection:
            texts += _path_models(A, y, names, settings.max_terms, settings.keep)
        thresholding = "stlsq" in settings.selection and "pool" not in families  # the path alone on the pool's
        for threshold, most in SPARSE_GRID if thresholding else ():  # terms: collinear with the library's
            if deadline is not None and time.perf_counter() > deadline:
                break
            w = sparse_fit(A, y, threshold=threshold, max_terms=most)
            if w is not None:
                idx = np.flatnonzero(w)
                texts.append((float(np.sum(np.square(y - A @ w))) / scale, _text(names, w[idx], idx)))
    refit = copy.copy(ctx)  # the linear fit is the start: two starts of the portfolio, not the context's four
    refit.fit = replace(ctx.fit, n_starts=min(2, ctx.fit.n_starts))
    out = []
    for text in dict.fromkeys(t for _, t in sorted(texts)):
        if deadline is not None and time.perf_counter() > deadline:
            break
        try:
            cand = evaluate_candidate(text, refit, source="sparse", constants_as_params=True)
        except (ExpressionError, ValueError):
            continue
        out.append(_pruned(cand, refit) or cand)
    info["fits"] = len(out)
    return out, info
