"""Shape analyses of the target along each input: trend and curvature, periodicity in time, power laws.

Pure over arrays and bounded like the rest of :mod:`harness.core.analysis` (compact numbers plus a short
``summary``), so a result can be shown to a model as is.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from scipy import fft as sp_fft

from harness.core.analysis import (
    TIME_NAMES,
    _as_xy,
    _binned_means,
    _columns,
    _finite_rows,
    _names,
    _spearman,
    fmt,
    sig,
)


# -- monotonicity and curvature ----------------------------------------------------------------------------------
def _shape(x: np.ndarray, y: np.ndarray) -> dict[str, Any]:
    n = len(x)
    xm, ym, _ = _binned_means(x, y, int(np.clip(n // 20, 4, 16)))
    d1 = np.diff(ym)
    d2 = np.diff(ym, 2)
    frac_inc = float(np.mean(d1 > 0)) if d1.size else math.nan
    frac_convex = float(np.mean(d2 > 0)) if d2.size else math.nan
    sx, sy = x.std(), y.std()
    if sx > 0 and sy > 0:
        u = (x - x.mean()) / sx
        c2, c1, _ = np.polyfit(u, (y - y.mean()) / sy, 2)
    else:
        c1 = c2 = math.nan
    rho = _spearman(x, y)
    vertex = -c1 / (2 * c2) if c2 else math.inf  # turning point of the quadratic, in standardised x
    u_lo, u_hi = np.quantile(u, [0.2, 0.8]) if sx > 0 else (0.0, 0.0)
    if abs(c2) >= 0.15 and u_lo < vertex < u_hi and abs(rho) < 0.6 and 0.2 < frac_inc < 0.8:
        trend = "non-monotone (U-shaped)" if c2 > 0 else "non-monotone (peaked)"
    elif rho >= 0.3 and frac_inc >= 0.75:
        trend = "increasing"
    elif rho <= -0.3 and frac_inc <= 0.25:
        trend = "decreasing"
    elif abs(rho) > 0.1:
        trend = "weakly increasing" if rho > 0 else "weakly decreasing"
    else:
        trend = "no clear trend"
    curvature = "convex" if c2 > 0.05 else "concave" if c2 < -0.05 else "near-linear"
    return {
        "spearman": sig(rho),
        "frac_increasing": sig(frac_inc),
        "frac_convex": sig(frac_convex),
        "linear_coef": sig(c1),
        "quadratic_coef": sig(c2),
        "trend": trend,
        "curvature": curvature,
    }


def monotonicity(X: Any, y: Any, names: list[str] | None = None, variables: list[str] | None = None) -> dict[str, Any]:
    """Trend and curvature of the target along each input.

    ``frac_increasing`` is the fraction of positive differences of y after sorting by x, taken over equal-count
    bin means (binning damps the scatter other inputs add); ``quadratic_coef`` comes from a quadratic fit in
    standardised units (y/std(y) against (x-mean)/std), ``frac_convex`` is the fraction of positive second
    differences. Why: trend and curvature narrow the family of terms worth trying.
    """
    X, y = _as_xy(X, y)
    names = _names(names, X.shape[1])
    ok = _finite_rows(X, y)
    X, y = X[ok], y[ok]
    per = {names[j]: _shape(X[:, j], y) for j in _columns(names, variables)} if len(y) >= 8 else {}
    groups: dict[str, list[str]] = {}
    for k, v in per.items():
        groups.setdefault(v["trend"], []).append(f"{k} ({v['curvature']})")
    summary = "; ".join(f"{t} in {', '.join(v[:5])}{' ...' if len(v) > 5 else ''}" for t, v in groups.items())
    return {"n": int(len(y)), "per_variable": per,
            "summary": f"Target is {summary}." if summary else "Too few rows."}


# -- periodicity -------------------------------------------------------------------------------------------------
def find_time_variable(names: list[str], variable: str | None = None) -> str | None:
    """``variable`` when given, else the input named t or time (any case), else ``None``."""
    if variable:
        if variable not in names:
            raise ValueError(f"unknown variable {variable!r}; known: {names}")
        return variable
    for name in names:
        if name.lower() in TIME_NAMES:
            return name
    return None


def periodicity(
    X: Any, y: Any, names: list[str] | None = None, variable: str | None = None, top_k: int = 3
) -> dict[str, Any]:
    """Spectrum of the target along a time-like input: dominant frequencies and their share of the power.

    Samples are sorted by the variable, duplicates averaged, linearly interpolated to a uniform grid, detrended
    and Hann-windowed before the FFT. Frequencies are in cycles per unit of the variable (``angular`` = 2*pi*f,
    what goes inside sin()). Why: a clear spectral peak suggests sin/cos terms and their frequency.
    """
    X, y = _as_xy(X, y)
    names = _names(names, X.shape[1])
    tvar = find_time_variable(names, variable)
    if tvar is None:
        return {"time_variable": None, "summary": "No time variable (no input named t/time); pass `variable` to "
                "analyse the spectrum along another input."}
    t = X[:, names.index(tvar)]
    ok = np.isfinite(t) & np.isfinite(y)
    tu, inverse = np.unique(t[ok], return_inverse=True)
    if tu.size < 16:
        return {"time_variable": tvar, "summary": f"Too few distinct {tvar} values ({tu.size}) for a spectrum."}
    yu = np.bincount(inverse, weights=y[ok]) / np.bincount(inverse)
    m = int(np.clip(tu.size, 64, 4096))
    grid = np.linspace(tu[0], tu[-1], m)
    dt = grid[1] - grid[0]
    yi = np.interp(grid, tu, yu)
    yi = yi - np.polyval(np.polyfit(grid, yi, 1), grid)
    power = np.abs(sp_fft.rfft(yi * np.hanning(m))) ** 2
    freqs = sp_fft.rfftfreq(m, d=dt)
    power[0] = 0.0
    total = float(power.sum())
    base = {"time_variable": tvar, "span": sig(tu[-1] - tu[0]), "resolution": sig(1.0 / (tu[-1] - tu[0])),
            "nyquist": sig(0.5 / dt)}
    if total <= 0 or not math.isfinite(total):
        return {**base, "dominant": [], "summary": f"Target is constant or linear along {tvar}: no spectrum."}

    peaks = [i for i in range(1, len(power) - 1) if power[i] >= power[i - 1] and power[i] >= power[i + 1]]
    peaks.sort(key=lambda i: -power[i])
    chosen: list[int] = []
    for i in peaks:
        if all(abs(i - j) > 3 for j in chosen):
            chosen.append(i)
        if len(chosen) == top_k:
            break
    dominant = []
    for i in chosen:
        lp = np.log(power[i - 1 : i + 2] + 1e-300)  # parabolic refinement of the peak position
        denom = lp[0] - 2 * lp[1] + lp[2]
        shift = 0.5 * (lp[0] - lp[2]) / denom if denom < 0 else 0.0
        f = (i + float(np.clip(shift, -0.5, 0.5))) * (freqs[1] - freqs[0])
        share = float(power[max(1, i - 2) : i + 3].sum() / total)  # Hann main lobe spans +-2 bins
        dominant.append({"frequency": sig(f), "period": sig(1 / f) if f > 0 else math.inf,
                         "angular": sig(2 * math.pi * f), "power_share": sig(share)})
    top = dominant[0] if dominant else None
    if top and top["power_share"] >= 0.3:
        summary = (f"Along {tvar}: dominant frequency {fmt(top['frequency'])} (period {fmt(top['period'])}, angular "
                   f"{fmt(top['angular'])}) holds {top['power_share']:.0%} of the power: clearly periodic.")
        if len(dominant) > 1 and dominant[1]["power_share"] >= 0.1:
            summary += f" Second peak at {fmt(dominant[1]['frequency'])} ({dominant[1]['power_share']:.0%})."
    else:
        share = top["power_share"] if top else 0.0
        summary = (f"Along {tvar}: no dominant frequency (largest peak holds {share:.0%} of the power): "
                   "not clearly periodic.")
    return {**base, "dominant": dominant, "periodic": bool(top and top["power_share"] >= 0.3), "summary": summary}


# -- power laws --------------------------------------------------------------------------------------------------
def _loglog_fit(lx: np.ndarray, ly: np.ndarray) -> tuple[float, float, float]:
    slope, intercept = np.polyfit(lx, ly, 1)
    resid = ly - (slope * lx + intercept)
    ss = float(((ly - ly.mean()) ** 2).sum())
    r2 = 1 - float(resid @ resid) / ss if ss > 0 else math.nan
    return float(slope), float(intercept), r2


def power_law(X: Any, y: Any, names: list[str] | None = None, variables: list[str] | None = None) -> dict[str, Any]:
    """Log-log slope of |y| against |x| for each input (rows where both are nonzero), with the fit's r².

    Also a joint fit log|y| = a + sum_i b_i log|x_i| over rows where every input is nonzero. Why: a straight
    log-log line with a clean slope is strong evidence of a power-law factor y ~ x^slope.
    """
    X, y = _as_xy(X, y)
    names = _names(names, X.shape[1])
    cols = _columns(names, variables)
    per: dict[str, dict[str, Any]] = {}
    for j in cols:
        x = X[:, j]
        ok = np.isfinite(x) & np.isfinite(y) & (x != 0) & (y != 0)
        entry: dict[str, Any] = {"n_used": int(ok.sum()), "used_abs": bool(np.any(x[ok] < 0) or np.any(y[ok] < 0))}
        lx, ly = np.log(np.abs(x[ok])), np.log(np.abs(y[ok]))
        if ok.sum() < 8 or lx.std() < 0.05:
            entry["note"] = "too few rows or too narrow a range"
        else:
            slope, intercept, r2 = _loglog_fit(lx, ly)
            entry.update(slope=sig(slope), prefactor=sig(math.exp(intercept)) if intercept < 700 else math.inf,
                         r2=sig(r2))
        per[names[j]] = entry
    out: dict[str, Any] = {"per_variable": per}

    ok = _finite_rows(X[:, cols], y) & (X[:, cols] != 0).all(axis=1) & (y != 0)
    if len(cols) > 1 and ok.sum() >= max(10, 3 * len(cols)):
        A = np.column_stack([np.log(np.abs(X[ok][:, cols])), np.ones(ok.sum())])
        ly = np.log(np.abs(y[ok]))
        coef, *_ = np.linalg.lstsq(A, ly, rcond=None)
        ss = float(((ly - ly.mean()) ** 2).sum())
        r2 = 1 - float(((ly - A @ coef) ** 2).sum()) / ss if ss > 0 else math.nan
        out["joint"] = {"exponents": {names[j]: sig(c) for j, c in zip(cols, coef[:-1])}, "r2": sig(r2),
                        "n_used": int(ok.sum())}

    fitted = [(k, v) for k, v in per.items() if "r2" in v and math.isfinite(v["r2"])]
    good = sorted([kv for kv in fitted if kv[1]["r2"] >= 0.9], key=lambda kv: -kv[1]["r2"])
    sentences = []
    if good:
        sentences.append("Clean power law in " + ", ".join(f"{k} (slope {fmt(v['slope'])}, r² {fmt(v['r2'])})"
                                                           for k, v in good[:4]) + ".")
    elif fitted:
        k, v = max(fitted, key=lambda kv: kv[1]["r2"])
        sentences.append(f"No clean single-input power law; best {k} (slope {fmt(v['slope'])}, r² {fmt(v['r2'])}).")
    else:
        sentences.append("No input allows a log-log fit.")
    if "joint" in out and out["joint"]["r2"] >= 0.9:
        exps = ", ".join(f"{k}^{fmt(v)}" for k, v in list(out["joint"]["exponents"].items())[:6])
        sentences.append(f"Joint log-log fit r² {fmt(out['joint']['r2'])}: y ~ {exps}.")
    out["summary"] = " ".join(sentences)
    return out
