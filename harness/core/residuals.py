"""Residual diagnostics of a candidate equation: trends of the residuals against each input, where the worst
points lie, and drop-one refits of its terms (``residual_report`` needs the run context to fit).

Like ``harness.core.analysis``: compact numbers (4 significant digits, bounded) plus a short ``summary``.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from scipy.stats import f as f_dist
from scipy.stats import norm

from harness.core.analysis import (
    _as_xy,
    _binned_means,
    _columns,
    _finite_rows,
    _names,
    _spearman,
    fmt,
    sig,
)


def _trend_thresholds(n: int, k: int, n_tests: int, alpha: float = 0.01) -> tuple[float, float]:
    """|Spearman| and eta2 above which a residual trend is flagged: significant at ``alpha`` after a Bonferroni
    correction over the inputs tested (so wide data does not flag noise), and never below a minimal effect size."""
    a = alpha / max(1, n_tests)
    rho = norm.isf(a / 2) / math.sqrt(max(n - 1, 1))
    f_crit = f_dist.isf(a, k - 1, max(n - k, 1))
    eta2 = (k - 1) * f_crit / ((k - 1) * f_crit + max(n - k, 1))
    return max(0.1, float(rho)), max(0.05, float(eta2))


def residual_analysis(
    X: Any, y: Any, pred: Any, names: list[str] | None = None, *, n_bins: int = 8, worst_frac: float = 0.05
) -> dict[str, Any]:
    """Structure left in the residuals y - pred: trends per input, heteroscedasticity, worst-fit regions.

    Per input: Spearman of residual with x and the correlation ratio ``eta2`` (share of residual variance
    explained by means over ~8 equal-count bins of x, which also catches U-shapes), plus the bin means.
    Why: a residual that still depends on an input says which term is missing or wrong.
    """
    X, y = _as_xy(X, y)
    pred = np.asarray(pred, dtype=float).ravel()
    names = _names(names, X.shape[1])
    finite = _finite_rows(X, y) & np.isfinite(pred)
    out: dict[str, Any] = {"n": int(finite.sum()), "n_nonfinite_pred": int((~np.isfinite(pred)).sum())}
    X, y, pred = X[finite], y[finite], pred[finite]
    if len(y) < 8:
        out["summary"] = "Too few finite predictions to analyse residuals."
        return out
    r = y - pred
    sy = float(y.std()) or 1.0
    rel_rms = float(np.sqrt(np.mean(r**2))) / sy
    out["rel_rms"] = sig(rel_rms)
    out["mean_residual"] = sig(r.mean())
    exact = rel_rms < 1e-6
    cols = _columns(names, None)
    bins = int(min(n_bins, max(2, len(y) // 5)))

    trends: dict[str, dict[str, Any]] = {}
    rho_thr, eta_thr = _trend_thresholds(len(y), bins, len(cols))
    for j in cols:
        x = X[:, j]
        rho = _spearman(x, r)
        xm, rm, cnt = _binned_means(x, r, bins)
        var_r = float(r.var())
        eta2 = float(np.sum(cnt * (rm - r.mean()) ** 2) / (len(r) * var_r)) if var_r > 0 else 0.0
        flagged = (not exact) and (eta2 > eta_thr or abs(rho) > rho_thr)
        trends[names[j]] = {"spearman": sig(rho), "eta2": sig(eta2), "flagged": bool(flagged),
                            "bin_x": [sig(v, 3) for v in xm], "bin_mean_resid": [sig(v, 3) for v in rm]}
    out["trend"] = trends

    ar = np.abs(r)
    hetero = {"abs_resid_vs_abs_y": sig(_spearman(ar, np.abs(y)))}
    hetero.update({f"abs_resid_vs_{names[j]}": sig(_spearman(ar, X[:, j])) for j in cols})
    out["heteroscedasticity"] = hetero

    n_worst = max(1, int(math.ceil(worst_frac * len(r))))
    worst = np.argsort(-ar)[:n_worst]
    regions: dict[str, Any] = {}
    for j in cols:
        x = X[:, j]
        lo, hi = float(x.min()), float(x.max())
        wlo, whi = float(x[worst].min()), float(x[worst].max())
        span = (whi - wlo) / (hi - lo) if hi > lo else 1.0
        regions[names[j]] = {"range": [sig(wlo), sig(whi)], "full": [sig(lo), sig(hi)], "span_frac": sig(span)}
    out["worst_regions"] = {"n_points": n_worst, "max_abs_resid": sig(ar[worst[0]]), "per_variable": regions}

    sentences = [f"Residual rms is {fmt(rel_rms)} x std(y)."]
    if exact:
        sentences.append("Fit is essentially exact; nothing to flag.")
        out["finding"] = sentences[-1]
    else:
        flagged = sorted((name for name, v in trends.items() if v["flagged"]), key=lambda n: -trends[n]["eta2"])
        if flagged:
            sentences.append("Residual still depends on " + ", ".join(
                f"{k} (eta2 {fmt(trends[k]['eta2'])}, spearman {fmt(trends[k]['spearman'])})" for k in flagged[:4])
                + ": a term in these is missing or wrong.")
        else:
            sentences.append("No residual trend along any input.")
        out["finding"] = sentences[-1]
        het = {k: v for k, v in hetero.items() if math.isfinite(v) and abs(v) > 0.3}
        concentrated = [k for k, v in regions.items() if v["span_frac"] < 0.3]
        extra = []
        if het:
            k0 = max(het, key=lambda k: abs(het[k]))
            extra.append(f"|residual| varies with {k0.replace('abs_resid_vs_', '')} (rank corr {fmt(het[k0])})")
        if concentrated:
            c = concentrated[0]
            extra.append(f"worst {n_worst} points lie in {c} in [{fmt(regions[c]['range'][0])}, "
                         f"{fmt(regions[c]['range'][1])}]")
        if extra:
            text = "; ".join(extra)
            sentences.append(text[0].upper() + text[1:] + ".")
    out["summary"] = " ".join(sentences)
    return out


def _drop_term_texts(expr: Any, params: list[float], max_terms: int) -> list[tuple[str, str, list[float]]]:
    """(dropped term, remaining skeleton, start values for its parameters) per top-level term of ``expr``.

    Texts are printed by the engine's own printer so they parse back; start values are the full fit's constants.
    """
    import sympy

    from harness.core.expression import Expression

    terms = list(sympy.Add.make_args(expr.sympy))
    if len(terms) < 2:
        return []
    values = dict(zip(expr.parameters, params))
    out = []
    for i, term in enumerate(terms[:max_terms]):
        rest = Expression(sympy.Add(*(t for j, t in enumerate(terms) if j != i)), expr.variables)
        start = [float(values.get(name, 1.0)) for name in rest.parameters]
        out.append((str(Expression(term, expr.variables)), str(rest), start))
    return out


def residual_report(
    candidate_or_text: Any, context: Any, *, drop_terms: bool = True, max_terms: int = 8, removable_tol: float = 0.05
) -> dict[str, Any]:
    """Residual diagnostics of a candidate on the train+valid data, its ID/OOD error ratio, and drop-one refits.

    ``candidate_or_text`` is a :class:`~harness.core.candidates.Candidate` or an expression text in engine grammar
    (then fitted with ``evaluate_candidate``). Drop-one: the skeleton's top-level sum is split into terms, each
    is removed in turn and the rest refitted; a term whose removal raises valid NMSE by less than
    ``removable_tol`` (relative) is reported as removable; for an equation without free parameters its numeric
    constants are refitted instead. Why: roles use this to decide what to add or prune.
    """
    import sympy

    from harness.core.candidates import Candidate
    from harness.core.context import evaluate_candidate
    from harness.core.expression import ExpressionError, parse_expression

    cand = candidate_or_text
    if not isinstance(cand, Candidate):
        cand = evaluate_candidate(str(candidate_or_text), context, source="analysis")
    expr = parse_expression(cand.expression, context.variables)
    X = np.vstack([context.train.X, context.valid.X])
    y = np.concatenate([context.train.y, context.valid.y])
    params = np.asarray(cand.params, dtype=float) if expr.n_params else None
    pred = expr(X, params)
    report: dict[str, Any] = {
        "candidate": cand.to_record(),  # the fitted candidate (agents pool candidates found in tool results)
        "valid_nmse": sig(cand.metric("valid", "nmse")),
        "residuals": residual_analysis(X, y, pred, context.variables),
    }

    nmse_id, nmse_ood = cand.metric("test_id", "nmse"), cand.metric("test_ood", "nmse")
    if "test_id" in cand.metrics and "test_ood" in cand.metrics:
        ratio = nmse_ood / nmse_id if nmse_id > 0 else (math.inf if nmse_ood > 0 else 1.0)
        report["id_ood"] = {"nmse_id": sig(nmse_id), "nmse_ood": sig(nmse_ood), "ratio": sig(ratio)}

    if drop_terms:
        base = cand.metric("valid", "nmse")
        literal_only = expr.n_params == 0  # a fitted equation: refit its numbers as free parameters
        drops = []
        n_terms = len(sympy.Add.make_args(expr.sympy))
        for term, rest, start in _drop_term_texts(expr, list(cand.params), max_terms):
            entry: dict[str, Any] = {"term": term[:120]}
            try:
                refit = evaluate_candidate(rest, context, source="analysis", initial_params=start or None,
                                           constants_as_params=literal_only)
                nmse = refit.metric("valid", "nmse")
                rel = (nmse - base) / max(base, 1e-10) if math.isfinite(nmse) else math.inf
                entry.update(valid_nmse=sig(nmse), rel_change=sig(rel),
                             removable=bool(math.isfinite(nmse) and nmse <= base * (1 + removable_tol) + 1e-10))
            except (ExpressionError, ValueError) as exc:
                entry.update(error=str(exc)[:120], removable=False)
            drops.append(entry)
        report["drop_one"] = {"n_terms": n_terms, "capped": n_terms > max_terms, "terms": drops}

    first = f"Valid NMSE {fmt(report['valid_nmse'])}"
    if "id_ood" in report:
        first += f", OOD/ID NMSE ratio {fmt(report['id_ood']['ratio'])}"
    sentences = [first + ".", report["residuals"].get("finding", report["residuals"]["summary"])]
    removable = [d["term"] for d in report.get("drop_one", {}).get("terms", []) if d.get("removable")]
    if removable:
        sentences.append("Removable terms (barely change the fit): " + ", ".join(removable[:4]) + ".")
    report["summary"] = " ".join(sentences)
    return report
