"""Data-analysis tools: the model asks a question about the data and gets compact numbers back, never arrays.

Each tool reads the run's data from the context (``context.train`` / ``context.valid`` / ``context.task``), calls
the matching pure function in :mod:`harness.core.analysis` and renders a short text (4 significant digits, under
~1500 characters) for the model; the full dict stays in ``ToolCallResult.result`` for traces.
"""

from __future__ import annotations

from typing import Any, Literal

import numpy as np

from harness.core import analysis, shape_analysis
from harness.core.analysis import fmt
from harness.core.residuals import residual_report
from harness.tools.base import TOOLS, BaseTool, bound_text

__all__ = [
    "ANALYSIS_TOOLS",
    "SummaryStatisticsTool",
    "CorrelationsTool",
    "MonotonicityTool",
    "PeriodicityTool",
    "PowerLawTool",
    "ResidualDiagnosticsTool",
    "residual_report",
]

ANALYSIS_TOOLS = ["summary_statistics", "correlations", "monotonicity", "periodicity", "power_law",
                  "residual_diagnostics"]
TEXT_LIMIT = 1500
MAX_LINES = 12  # per-variable lines shown; the rest are counted


def _data(context: Any, split: str) -> tuple[np.ndarray, np.ndarray]:
    """Rows of the fitting data: train, valid, or both (test splits are never exposed to analysis)."""
    if split == "train":
        return context.train.X, context.train.y
    if split == "valid":
        return context.valid.X, context.valid.y
    return np.vstack([context.train.X, context.valid.X]), np.concatenate([context.train.y, context.valid.y])


def _lines(header: str, rows: list[str], footer: str = "") -> str:
    shown = rows[:MAX_LINES]
    if len(rows) > MAX_LINES:
        shown.append(f"... {len(rows) - MAX_LINES} more variables")
    text = "\n".join([header, *shown] + ([footer] if footer else []))
    return bound_text(text, TEXT_LIMIT)


class _AnalysisTool(BaseTool):
    result_str_limit = TEXT_LIMIT

    @property
    def names(self) -> list[str]:
        return list(self.context.task.input_names)


@TOOLS.register
class SummaryStatisticsTool(_AnalysisTool):
    name = "summary_statistics"

    def execute(self, split: Literal["train", "valid", "all"] = "all", variables: list[str] | None = None) -> dict:
        """Range, mean, std, quantiles and sign of each input and the target, and zero crossings of the target.

        Args:
            split: Which rows to describe: train, valid, or all fitting data.
            variables: Inputs to include (default: all).
        """
        X, y = _data(self.context, split)
        return analysis.summary_statistics(X, y, self.names, self.context.task.target_name, variables)

    def format_result(self, result: dict) -> str:
        def row(name: str, s: dict) -> str:
            if not s.get("n"):
                return f"{name}: no finite values"
            return (f"{name}: [{fmt(s['min'])}, {fmt(s['max'])}] mean {fmt(s['mean'])} std {fmt(s['std'])} "
                    f"q25/50/75 {fmt(s['q25'])}/{fmt(s['median'])}/{fmt(s['q75'])} {s['sign']}")

        rows = [row(k, v) for k, v in result["inputs"].items()]
        return _lines(result["summary"], [row(result["target"]["name"] + " (target)", result["target"]), *rows])


@TOOLS.register
class CorrelationsTool(_AnalysisTool):
    name = "correlations"

    def execute(self, variables: list[str] | None = None) -> dict:
        """Pearson, Spearman and mutual information (nats) of the target with each input, on all fitting data.

        Args:
            variables: Inputs to include (default: all).
        """
        X, y = _data(self.context, "all")
        return analysis.correlations(X, y, self.names, variables)

    def format_result(self, result: dict) -> str:
        per = result["per_variable"]
        rows = [f"{k}: pearson {fmt(per[k]['pearson'])} spearman {fmt(per[k]['spearman'])} "
                f"MI {fmt(per[k]['mutual_info'])}" for k in result["ranking"]]
        return _lines(result["summary"], rows)


@TOOLS.register
class MonotonicityTool(_AnalysisTool):
    name = "monotonicity"

    def execute(self, variables: list[str] | None = None) -> dict:
        """Trend (increasing/decreasing/non-monotone) and curvature (convex/concave) of the target along each input.

        Args:
            variables: Inputs to include (default: all).
        """
        X, y = _data(self.context, "all")
        return shape_analysis.monotonicity(X, y, self.names, variables)

    def format_result(self, result: dict) -> str:
        rows = [f"{k}: {v['trend']}, {v['curvature']} (spearman {fmt(v['spearman'])}, frac_increasing "
                f"{fmt(v['frac_increasing'])}, quad_coef {fmt(v['quadratic_coef'])})"
                for k, v in result["per_variable"].items()]
        return _lines(result["summary"], rows)


@TOOLS.register
class PeriodicityTool(_AnalysisTool):
    name = "periodicity"

    def execute(self, variable: str | None = None) -> dict:
        """Spectrum of the target along a time variable: dominant frequencies and their share of the power.

        Args:
            variable: Input to treat as time (default: the input named t or time, if any).
        """
        X, y = _data(self.context, "all")
        return shape_analysis.periodicity(X, y, self.names, variable)

    def format_result(self, result: dict) -> str:
        rows = [f"f={fmt(d['frequency'])} period={fmt(d['period'])} angular={fmt(d['angular'])} "
                f"share={fmt(d['power_share'])}" for d in result.get("dominant", [])]
        footer = ""
        if result.get("time_variable") and "resolution" in result:
            footer = f"(frequency resolution {fmt(result['resolution'])}, nyquist {fmt(result['nyquist'])})"
        return _lines(result["summary"], rows, footer)


@TOOLS.register
class PowerLawTool(_AnalysisTool):
    name = "power_law"

    def execute(self, variables: list[str] | None = None) -> dict:
        """Log-log slope and r² of |target| against |input| for each input, plus a joint log-log fit.

        Args:
            variables: Inputs to include (default: all).
        """
        X, y = _data(self.context, "all")
        return shape_analysis.power_law(X, y, self.names, variables)

    def format_result(self, result: dict) -> str:
        rows = []
        for k, v in result["per_variable"].items():
            if "slope" in v:
                rows.append(f"{k}: slope {fmt(v['slope'])} prefactor {fmt(v['prefactor'])} r2 {fmt(v['r2'])} "
                            f"(n={v['n_used']}{', abs values' if v['used_abs'] else ''})")
            else:
                rows.append(f"{k}: {v.get('note', 'no fit')}")
        footer = f"joint r2 {fmt(result['joint']['r2'])}" if "joint" in result else ""
        return _lines(result["summary"], rows, footer)


@TOOLS.register
class ResidualDiagnosticsTool(_AnalysisTool):
    name = "residual_diagnostics"

    def execute(self, expression: str) -> dict:
        """Fit a candidate and diagnose its residuals: trends per input, heteroscedasticity, worst-fit regions,
        OOD/ID error ratio, and terms whose removal barely changes the fit.

        Args:
            expression: Candidate in engine grammar over the input names with free parameters c0, c1, ...
        """
        return residual_report(expression, self.context)

    def format_result(self, result: dict) -> str:
        res = result["residuals"]
        lines = [result["candidate"]["equation"][:200], result["summary"]]
        if "id_ood" in result:
            r = result["id_ood"]
            lines.append(f"nmse ID {fmt(r['nmse_id'])}, OOD {fmt(r['nmse_ood'])}, ratio {fmt(r['ratio'])}")
        for d in result.get("drop_one", {}).get("terms", []):
            if "error" in d:
                lines.append(f"drop {d['term'][:60]}: {d['error'][:80]}")
            else:
                lines.append(f"drop {d['term'][:60]}: valid nmse {fmt(d['valid_nmse'])} (rel change "
                             f"{fmt(d['rel_change'])}){' removable' if d['removable'] else ''}")
        trends = sorted(res.get("trend", {}).items(), key=lambda kv: (not kv[1]["flagged"], -kv[1]["eta2"]))
        for k, v in trends[:6]:  # flagged inputs first
            mark = " <-- trend" if v["flagged"] else ""
            means = ", ".join(fmt(m) for m in v["bin_mean_resid"])
            lines.append(f"resid vs {k}: spearman {fmt(v['spearman'])} eta2 {fmt(v['eta2'])}{mark}; "
                         f"bin means [{means}]")
        het = res.get("heteroscedasticity")
        if het:
            top = sorted(het.items(), key=lambda kv: -abs(kv[1]) if kv[1] == kv[1] else 0)[:3]
            lines.append("|resid| rank corr: "
                         + ", ".join(f"{k.replace('abs_resid_vs_', '')} {fmt(v)}" for k, v in top))
        worst = res.get("worst_regions")
        if worst:
            regions = sorted(worst["per_variable"].items(), key=lambda kv: kv[1]["span_frac"])[:3]
            lines.append(f"worst {worst['n_points']} points: " + "; ".join(
                f"{k} in [{fmt(v['range'][0])}, {fmt(v['range'][1])}]" for k, v in regions))
        return bound_text("\n".join(lines), TEXT_LIMIT)
