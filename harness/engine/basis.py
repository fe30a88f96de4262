"""A generic basis of terms for the term combination: what data analysis names when no model or engine run did.

Two families, both standard in equation discovery and neither tied to a field: the monomials of the inputs up to
degree 3 (SINDy's polynomial library: ``x**3``, ``v**3``, ``x*v``, ``x**2*v``), and for each input the dominant
angular frequencies of what the pool's best equation leaves unexplained (its residual), read off a Lomb-Scargle
periodogram (the training rows are not evenly spaced): ``sin(w*u)``, ``cos(w*u)`` and their products with each
other input (``x*cos(w*t)``). A driving force ``F*sin(w*t)`` needs its frequency found, which an evolutionary
search rarely does; the periodogram finds it in milliseconds, and the combination's float64 refit frees every
constant, the frequency too, so the estimate only needs to be close.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

__all__ = ["BasisSettings", "dominant_frequencies", "generic_basis", "standard_library", "sparse_fit",
           "sparse_candidates"]


@dataclass(frozen=True)
class BasisSettings:
    """``degree``: the monomials' highest degree; ``frequencies``: peaks kept per input; ``min_cycles``: a
    frequency must make at least this many cycles over the input's range (slower ones are trends, which the
    monomials hold); ``grid``: periodogram frequencies tried per input; ``max_rows``: rows the periodogram reads."""

    degree: int = 3
    frequencies: int = 2
    min_cycles: float = 1.5
    grid: int = 1500
    max_rows: int = 1500
    min_share: float = 0.05  # a peak's power as a share of the residual's variance it must explain


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
    for i in peaks:
        w = float(omega[i])
        if all(abs(w - other) > 2 * (omega[1] - omega[0]) for other in out):
            out.append(w)
        if len(out) >= settings.frequencies:
            break
    return out


def _num(x: float) -> str:
    return repr(round(float(x), 6))


def generic_basis(X: np.ndarray, residual: np.ndarray, variables: Sequence[str],
                  settings: BasisSettings = BasisSettings()) -> list[str]:
    """The basis as expressions in the engine grammar over ``variables`` (numbers as starting values)."""
    names = list(variables)
    terms: list[str] = []
    for degree in range(1, settings.degree + 1):
        for combo in itertools.combinations_with_replacement(names, degree):
            terms.append("*".join(combo))
    for j, u in enumerate(names):
        for w in dominant_frequencies(X[:, j], residual, settings):
            for fn in ("sin", "cos"):
                wave = f"{fn}({_num(w)}*{u})"
                terms.append(wave)
                terms += [f"{z}*{wave}" for z in names if z != u]
    return list(dict.fromkeys(terms))


def standard_library(X: np.ndarray, residual: np.ndarray, variables: Sequence[str],
                     settings: BasisSettings = BasisSettings()) -> list[str]:
    """:func:`generic_basis` plus SINDy's trigonometric library at unit frequency: ``sin(u)``, ``cos(u)`` and their
    products with every input (``x*cos(x)`` included). (Exponential couplings ``z*exp(k*u)`` on a grid of rates were
    tried and left out: on LLM-SR's oscillator1 their wide columns crowded the sparse fit off the law.)"""
    names = list(variables)
    terms = generic_basis(X, residual, variables, settings)
    for u in names:
        for fn in ("sin", "cos"):
            terms.append(f"{fn}({u})")
            terms += [f"{z}*{fn}({u})" for z in names]
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


# (STLSQ threshold, most terms kept): every pair is one sparse fit; each is refitted in float64 and offered
SPARSE_GRID = ((1e-1, 4), (3e-2, 4), (1e-2, 8), (3e-3, 8), (1e-3, 8))


def sparse_candidates(ctx: Any, residual: np.ndarray, settings: BasisSettings = BasisSettings(),
                      deadline: float | None = None) -> tuple[list[Any], dict[str, Any]]:
    """Sparse regression (SINDy) of the target on :func:`standard_library` over ``ctx``'s training rows (its
    frequencies read off ``residual``), at each ``SPARSE_GRID`` setting; each sparse combination is refitted with
    every constant free (``evaluate_candidate``) and returned as a candidate (source "sparse")."""
    import time

    from harness.engine.context import evaluate_candidate
    from harness.engine.expression import ExpressionError, parse_expression

    X, y = ctx.train.X, ctx.train.y
    names, columns = [], []
    for term in standard_library(X, residual, ctx.variables, settings):
        try:
            with np.errstate(all="ignore"):
                col = np.asarray(parse_expression(term, ctx.variables)(X), dtype=float) * np.ones(y.size)
        except (ExpressionError, TypeError, ValueError, ZeroDivisionError):
            continue
        if np.all(np.isfinite(col)) and float(np.max(np.abs(col))) < 1e12:
            names.append(term)
            columns.append(col)
    info: dict[str, Any] = {"library": len(names), "fits": 0}
    if not columns:
        return [], info
    A = np.column_stack(columns + [np.ones(y.size)])
    names.append("1")
    texts: list[str] = []
    for threshold, most in SPARSE_GRID:
        if deadline is not None and time.perf_counter() > deadline:
            break
        w = sparse_fit(A, y, threshold=threshold, max_terms=most)
        if w is None:
            continue
        parts = [f"({float(w[i])!r})" if names[i] == "1" else f"({float(w[i])!r})*({names[i]})"
                 for i in np.flatnonzero(w)]
        texts.append(" + ".join(parts))
    out = []
    for text in dict.fromkeys(texts):
        if deadline is not None and time.perf_counter() > deadline:
            break
        try:
            out.append(evaluate_candidate(text, ctx, source="sparse", constants_as_params=True))
        except (ExpressionError, ValueError):
            continue
    info["fits"] = len(out)
    return out, info
