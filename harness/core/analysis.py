"""Data analysis a model can ask for instead of reading raw arrays.

Every public function here is pure over arrays: it returns a dict of compact numbers (rounded to 4
significant digits, bounded in size) plus a ``summary`` of one to three short sentences, so the result can be
shown to a model as is. Trend, periodicity and power laws are in ``harness.core.shape_analysis``, residual
diagnostics of a candidate in ``harness.core.residuals``.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from scipy.stats import rankdata

MAX_VARIABLES = 24  # per-variable entries kept in a result; wider data is cut so results stay bounded
TIME_NAMES = ("t", "time")


# -- small numeric helpers ---------------------------------------------------------------------------------------
def sig(x: Any, digits: int = 4) -> float:
    """``x`` rounded to ``digits`` significant digits (nan/inf kept), as a plain float."""
    try:
        x = float(x)
    except (TypeError, ValueError):
        return math.nan
    if x == 0.0 or not math.isfinite(x):
        return x
    return float(f"{x:.{digits}g}")


def fmt(x: Any) -> str:
    """Short text of a number (4 significant digits)."""
    try:
        return f"{float(x):.4g}"
    except (TypeError, ValueError):
        return str(x)


def _pearson(a: np.ndarray, b: np.ndarray) -> float:
    a = a - a.mean()
    b = b - b.mean()
    denom = math.sqrt(float(a @ a) * float(b @ b))
    if denom == 0.0 or not math.isfinite(denom):
        return math.nan
    return float(np.clip((a @ b) / denom, -1.0, 1.0))


def _spearman(a: np.ndarray, b: np.ndarray) -> float:
    return _pearson(rankdata(a), rankdata(b))


def _finite_rows(*arrays: np.ndarray) -> np.ndarray:
    mask = np.ones(len(arrays[0]), dtype=bool)
    for arr in arrays:
        mask &= np.isfinite(arr) if arr.ndim == 1 else np.isfinite(arr).all(axis=1)
    return mask


def _as_xy(X: Any, y: Any) -> tuple[np.ndarray, np.ndarray]:
    X = np.asarray(X, dtype=float)
    if X.ndim == 1:
        X = X[:, None]
    return X, np.asarray(y, dtype=float).ravel()


def _quantile_bins(x: np.ndarray, n_bins: int) -> np.ndarray:
    """Equal-count bin index per sample; ties share a bin (ranks are averaged)."""
    n = len(x)
    ranks = rankdata(x)  # 1..n, ties averaged
    return np.minimum(((ranks - 1) * n_bins / max(n, 1)).astype(int), n_bins - 1)


def _binned_means(x: np.ndarray, y: np.ndarray, n_bins: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(bin centre of x, mean of y, count) over equal-count bins of x, ordered by x; empty bins dropped."""
    idx = _quantile_bins(x, n_bins)
    counts = np.bincount(idx, minlength=n_bins)
    keep = counts > 0
    xm = np.bincount(idx, weights=x, minlength=n_bins)[keep] / counts[keep]
    ym = np.bincount(idx, weights=y, minlength=n_bins)[keep] / counts[keep]
    return xm, ym, counts[keep]


def _names(names: list[str] | None, d: int) -> list[str]:
    names = list(names) if names is not None else [f"x{i}" for i in range(d)]
    if len(names) != d:
        raise ValueError(f"{len(names)} names for {d} columns")
    return names


def _columns(names: list[str], selected: list[str] | None) -> list[int]:
    """Indices of the selected variables (all when ``None``), capped at MAX_VARIABLES."""
    if selected:
        unknown = [s for s in selected if s not in names]
        if unknown:
            raise ValueError(f"unknown variable(s) {unknown}; known: {names}")
        idx = [names.index(s) for s in selected]
    else:
        idx = list(range(len(names)))
    return idx[:MAX_VARIABLES]


# -- summary statistics ------------------------------------------------------------------------------------------
def _sign_label(v: np.ndarray) -> str:
    if v.size == 0:
        return "empty"
    lo, hi = float(v.min()), float(v.max())
    if lo > 0:
        return "positive"
    if hi < 0:
        return "negative"
    if lo == 0 and hi == 0:
        return "zero"
    if lo >= 0:
        return "nonnegative"
    if hi <= 0:
        return "nonpositive"
    return "mixed"


def _column_stats(v: np.ndarray) -> dict[str, Any]:
    v = v[np.isfinite(v)]
    if v.size == 0:
        return {"n": 0, "sign": "empty"}
    q = np.quantile(v, [0.05, 0.25, 0.5, 0.75, 0.95])
    return {
        "n": int(v.size),
        "min": sig(v.min()),
        "max": sig(v.max()),
        "mean": sig(v.mean()),
        "std": sig(v.std()),
        "q05": sig(q[0]),
        "q25": sig(q[1]),
        "median": sig(q[2]),
        "q75": sig(q[3]),
        "q95": sig(q[4]),
        "sign": _sign_label(v),
        "frac_negative": sig(np.mean(v < 0)),
        "n_unique": int(min(np.unique(v).size, 1000)),
    }


def _zero_crossings(x: np.ndarray, y: np.ndarray) -> int | None:
    """Sign changes of y along x, counted on equal-count bin means with a small dead band.

    Binning removes the scatter other inputs add; ``None`` when the bin means explain little more of var(y) than
    noise would, i.e. y has no visible structure along x and any count would be noise.
    """
    n_bins = int(np.clip(len(x) // 8, 4, 50))
    idx = _quantile_bins(x, n_bins)
    counts = np.bincount(idx, minlength=n_bins)
    keep = counts > 0
    ym = np.bincount(idx, weights=y, minlength=n_bins)[keep] / counts[keep]
    var = float(y.var())
    eta2_floor = max(0.1, 3.0 * (keep.sum() - 1) / len(y))  # ~3x what pure noise would explain
    if var <= 0 or float(np.sum(counts[keep] * (ym - y.mean()) ** 2)) / (len(y) * var) < eta2_floor:
        return None
    band = 0.05 * math.sqrt(var)
    crossings, state = 0, 0
    for v in ym:
        s = 1 if v > band else -1 if v < -band else 0
        if s and state and s != state:
            crossings += 1
        state = s or state
    return crossings


def summary_statistics(
    X: Any, y: Any, names: list[str] | None = None, target_name: str = "y", variables: list[str] | None = None
) -> dict[str, Any]:
    """Range, moments, quantiles and sign of every input and the target; zero crossings of y along each input.

    Why: the sign and range of each variable decide which operators are safe (log, sqrt, division) and which
    scalings are plausible before any search starts.
    """
    X, y = _as_xy(X, y)
    names = _names(names, X.shape[1])
    cols = _columns(names, variables)
    out: dict[str, Any] = {"n_rows": int(len(y)), "n_nonfinite_rows": int(np.sum(~_finite_rows(X, y)))}
    out["inputs"] = {names[j]: _column_stats(X[:, j]) for j in cols}
    out["target"] = {"name": target_name, **_column_stats(y)}
    ok = _finite_rows(X, y)
    out["target"]["zero_crossings_along"] = {
        names[j]: _zero_crossings(X[ok, j], y[ok]) for j in cols if ok.sum() >= 4
    }
    if len(names) > len(cols) and not variables:
        out["truncated_variables"] = len(names) - len(cols)

    by_sign: dict[str, list[str]] = {}
    for name, st in out["inputs"].items():
        by_sign.setdefault(st["sign"], []).append(name)
    t = out["target"]
    sentences = [
        f"{len(y)} rows, {len(names)} inputs; {target_name} in [{fmt(t.get('min'))}, {fmt(t.get('max'))}] "
        f"({t['sign']}), mean {fmt(t.get('mean'))}, std {fmt(t.get('std'))}."
    ]
    sentences.append(
        "Input signs: "
        + "; ".join(f"{s}: {', '.join(v[:6])}{' ...' if len(v) > 6 else ''}" for s, v in by_sign.items())
        + "."
    )
    crossings = {k: v for k, v in t["zero_crossings_along"].items() if v}
    if crossings:
        top = sorted(crossings.items(), key=lambda kv: -kv[1])[:3]
        sentences.append(f"{target_name} changes sign along " + ", ".join(f"{k} ({v}x)" for k, v in top) + ".")
    out["summary"] = " ".join(sentences)
    return out


# -- correlations ------------------------------------------------------------------------------------------------
def mutual_information(x: Any, y: Any, n_bins: int | None = None) -> float:
    """Binned mutual information (nats) over equal-count bins, Miller-Madow bias corrected, clipped at 0.

    Why: picks up non-monotone dependence (y = x^2 on symmetric x) that rank correlation misses.
    """
    x = np.asarray(x, dtype=float)
    y = np.asarray(y, dtype=float)
    ok = np.isfinite(x) & np.isfinite(y)
    x, y = x[ok], y[ok]
    n = len(x)
    if n < 8:
        return math.nan
    k = n_bins or int(np.clip(round(n ** (1 / 3)), 3, 16))
    bx, by = _quantile_bins(x, k), _quantile_bins(y, k)
    joint = np.bincount(bx * k + by, minlength=k * k).reshape(k, k) / n
    px, py = joint.sum(axis=1), joint.sum(axis=0)
    nz = joint > 0
    mi = float(np.sum(joint[nz] * np.log(joint[nz] / np.outer(px, py)[nz])))
    bias = (nz.sum() - (px > 0).sum() - (py > 0).sum() + 1) / (2 * n)
    return max(0.0, mi - bias)


def correlations(X: Any, y: Any, names: list[str] | None = None, variables: list[str] | None = None) -> dict[str, Any]:
    """Pearson, Spearman and binned mutual information of the target with each input.

    Why: ranks the inputs by how much they matter and separates linear, monotone and non-monotone dependence.
    """
    X, y = _as_xy(X, y)
    names = _names(names, X.shape[1])
    ok = _finite_rows(X, y)
    X, y = X[ok], y[ok]
    per: dict[str, dict[str, float]] = {}
    for j in _columns(names, variables):
        x = X[:, j]
        per[names[j]] = {
            "pearson": sig(_pearson(x, y)),
            "spearman": sig(_spearman(x, y)),
            "mutual_info": sig(mutual_information(x, y)),
        }
    ranking = sorted(per, key=lambda k: -(per[k]["mutual_info"] if math.isfinite(per[k]["mutual_info"]) else -1))
    sentences = []
    if ranking:
        top = ranking[0]
        sentences.append(
            f"Strongest dependence: {top} (MI {fmt(per[top]['mutual_info'])}, spearman {fmt(per[top]['spearman'])})"
            + (f"; weakest: {ranking[-1]} (MI {fmt(per[ranking[-1]]['mutual_info'])})." if len(ranking) > 1 else ".")
        )
    nonmono = [k for k in ranking if per[k]["mutual_info"] > 0.1 and abs(per[k]["spearman"]) < 0.3]
    if nonmono:
        sentences.append("Likely non-monotone dependence on " + ", ".join(nonmono[:4]) + " (high MI, low rank corr).")
    nonlin = [k for k in ranking if abs(per[k]["spearman"]) - abs(per[k]["pearson"]) > 0.15]
    if nonlin:
        sentences.append("Monotone but nonlinear in " + ", ".join(nonlin[:4]) + " (|spearman| >> |pearson|).")
    return {"n": int(len(y)), "per_variable": per, "ranking": ranking, "summary": " ".join(sentences)}
