"""Data-analysis functions on constructed data with known answers, and their tools at the BaseTool boundary."""

from __future__ import annotations

import re

import numpy as np
import pytest

from harness.core import analysis, residuals, shape_analysis
from harness.core.context import AgentContext
from harness.core.task import Split, Task
from harness.tools.analysis_tools import ANALYSIS_TOOLS, TEXT_LIMIT
from harness.tools.base import TOOLS


def _split(rng: np.random.Generator, n: int, lo: float, hi: float) -> Split:
    x1 = rng.uniform(lo, hi, n)
    x2 = rng.uniform(-1, 1, n)
    return Split(np.column_stack([x1, x2]), 2 * x1 + x2**2 + 0.01 * rng.normal(size=n))


@pytest.fixture(scope="module")
def context() -> AgentContext:
    """y = 2 x1 + x2^2 with an in-domain test split and an out-of-domain one (x1 further out)."""
    rng = np.random.default_rng(0)
    task = Task(name="quad", domain="test", input_names=["x1", "x2"], input_descriptions=["a", "b"],
                target_name="y", target_description="target", train=_split(rng, 200, 0, 2),
                test_id=_split(rng, 60, 0, 2), test_ood=_split(rng, 60, 2, 4))
    return AgentContext(task)


# -- pure functions ---------------------------------------------------------------------------------------------
def test_sig_rounds_to_four_significant_digits():
    assert analysis.sig(3.14159265) == 3.142
    assert analysis.sig(123456.7) == 123500.0
    assert analysis.fmt(0.000123456) == "0.0001235"
    assert np.isinf(analysis.sig(np.inf))


def test_summary_statistics_signs_and_zero_crossings():
    rng = np.random.default_rng(1)
    t = rng.uniform(0, 10, 300)
    x = rng.uniform(1, 2, 300)
    y = np.sin(np.pi * t)  # zeros at t = 1..9
    out = analysis.summary_statistics(np.column_stack([t, x]), y, ["t", "x"])
    assert out["inputs"]["x"]["sign"] == "positive"
    assert out["target"]["sign"] == "mixed"
    assert out["target"]["zero_crossings_along"]["t"] == 9
    assert out["target"]["zero_crossings_along"]["x"] is None  # no structure along x: no count
    assert 0 < len(out["summary"]) < 400


def test_correlations_rank_and_nonmonotone_mi():
    rng = np.random.default_rng(2)
    X = rng.uniform(-1, 1, (500, 3))
    y = 3 * X[:, 0] + 2 * X[:, 1] ** 2
    out = analysis.correlations(X, y, ["a", "b", "noise"])
    per = out["per_variable"]
    assert per["a"]["pearson"] > 0.8 and per["a"]["spearman"] > 0.8
    assert abs(per["b"]["spearman"]) < 0.2 and per["b"]["mutual_info"] > 5 * per["noise"]["mutual_info"]
    assert out["ranking"][0] == "a" and out["ranking"][-1] == "noise"
    assert analysis.mutual_information(rng.normal(size=800), rng.normal(size=800)) < 0.03


def test_monotonicity_and_curvature():
    rng = np.random.default_rng(3)
    X = rng.uniform(0.1, 3, (400, 3))
    y = np.exp(X[:, 0]) - 2 * X[:, 1] + 3 * (X[:, 2] - 1.5) ** 2
    per = shape_analysis.monotonicity(X, y, ["up", "down", "bowl"])["per_variable"]
    assert per["up"]["trend"] == "increasing" and per["up"]["curvature"] == "convex"
    assert per["up"]["frac_increasing"] >= 0.9
    assert "decreasing" in per["down"]["trend"] and per["down"]["spearman"] < -0.2
    assert per["bowl"]["trend"].startswith("non-monotone") and per["bowl"]["quadratic_coef"] > 0.15


def test_monotone_single_input_detected():
    x = np.linspace(1, 10, 200)
    out = shape_analysis.monotonicity(x[:, None], -np.log(x), ["x"])
    per = out["per_variable"]["x"]
    assert per["trend"] == "decreasing" and per["frac_increasing"] == 0.0 and per["spearman"] == -1.0
    assert per["curvature"] == "convex" and "decreasing in x" in out["summary"]


def test_periodicity_finds_sine_frequency():
    rng = np.random.default_rng(4)
    t = rng.uniform(0, 40, 600)
    x = rng.uniform(-1, 1, 600)
    y = 2 * np.sin(2 * np.pi * 0.25 * t) + 0.1 * x
    out = shape_analysis.periodicity(np.column_stack([x, t]), y, ["x", "t"])
    top = out["dominant"][0]
    assert out["time_variable"] == "t" and out["periodic"]
    assert top["frequency"] == pytest.approx(0.25, abs=0.01)
    assert top["angular"] == pytest.approx(np.pi / 2, abs=0.06)
    assert top["power_share"] > 0.8


def test_periodicity_without_time_variable():
    X = np.random.default_rng(5).uniform(size=(50, 1))
    out = shape_analysis.periodicity(X, X[:, 0], ["x"])
    assert out["time_variable"] is None and "no time variable" in out["summary"].lower()
    assert shape_analysis.periodicity(X, X[:, 0], ["x"], variable="x")["time_variable"] == "x"


def test_power_law_slope():
    rng = np.random.default_rng(6)
    x = rng.uniform(0.5, 5, 200)
    z = rng.uniform(1, 2, 200)
    out = shape_analysis.power_law(np.column_stack([x, z]), 3 * x**2.5, ["x", "z"])
    fit = out["per_variable"]["x"]
    assert fit["slope"] == pytest.approx(2.5, abs=1e-3)
    assert fit["prefactor"] == pytest.approx(3.0, rel=1e-3) and fit["r2"] > 0.999
    assert out["joint"]["exponents"]["x"] == pytest.approx(2.5, abs=1e-3)
    assert "slope 2.5" in out["summary"]


def test_residual_analysis_flags_missing_term_input():
    rng = np.random.default_rng(7)
    X = rng.uniform(-1, 1, (400, 2))
    y = X[:, 0] + X[:, 1] ** 2  # the candidate below lacks the x2^2 term
    out = residuals.residual_analysis(X, y, X[:, 0] + np.mean(X[:, 1] ** 2), ["x1", "x2"])
    assert out["trend"]["x2"]["flagged"] and out["trend"]["x2"]["eta2"] > 0.8
    assert not out["trend"]["x1"]["flagged"]
    assert len(out["trend"]["x2"]["bin_mean_resid"]) == 8
    assert "x2" in out["summary"]
    assert out["worst_regions"]["n_points"] == 20


def test_residual_analysis_heteroscedasticity_and_exact_fit():
    rng = np.random.default_rng(8)
    x = rng.uniform(1, 10, (500, 1))
    y = x[:, 0] * (1 + 0.2 * rng.normal(size=500))  # noise grows with x
    out = residuals.residual_analysis(x, y, x[:, 0], ["x"])
    assert out["heteroscedasticity"]["abs_resid_vs_x"] > 0.3
    exact = residuals.residual_analysis(x, x[:, 0], x[:, 0], ["x"])
    assert "exact" in exact["summary"] and not exact["trend"]["x"]["flagged"]


# -- residual_report (needs the engine) -------------------------------------------------------------------------
def test_residual_report_drop_one_and_id_ood(context):
    rep = residuals.residual_report("c0*x1 + c1 + c2*sin(x2)", context)
    assert rep["residuals"]["trend"]["x2"]["flagged"]  # x2^2 is missing; sin(x2) cannot stand in for it
    drops = {d["term"]: d for d in rep["drop_one"]["terms"]}
    assert len(drops) == 3
    assert drops["c2*sin(x2)"]["removable"]  # odd term for an even dependence: useless
    assert not drops["c0*x1"]["removable"] and drops["c0*x1"]["rel_change"] > 1
    ratio = rep["id_ood"]["ratio"]
    assert ratio == pytest.approx(rep["id_ood"]["nmse_ood"] / rep["id_ood"]["nmse_id"], rel=1e-3)
    assert rep["candidate"]["metrics"]["valid"]["nmse"] == pytest.approx(rep["valid_nmse"], rel=1e-3)
    assert len(rep["summary"]) < 500


def test_residual_report_accepts_candidate(context):
    from harness.core.context import evaluate_candidate

    cand = evaluate_candidate("c0*x1 + c1*x2**2", context)
    rep = residuals.residual_report(cand, context, drop_terms=False)
    assert "drop_one" not in rep
    assert not any(v["flagged"] for v in rep["residuals"]["trend"].values())


# -- tools ------------------------------------------------------------------------------------------------------
def test_tools_registered_with_schemas():
    for name in ANALYSIS_TOOLS:
        schema = TOOLS.get(name).openai_schema()["function"]
        assert schema["name"] == name and schema["description"]
    assert TOOLS.get("residual_diagnostics").tool_parameters()["required"] == ["expression"]


@pytest.mark.parametrize("name", ANALYSIS_TOOLS)
def test_tool_boundary(context, name):
    tool = TOOLS.get(name)(context)
    args = {"expression": "c0*x1 + c1 + c2*sin(x2)"} if name == "residual_diagnostics" else {}
    res = tool(call_id="c1", **args)
    assert res.ok, res.error
    assert 0 < len(res.result_str) <= TEXT_LIMIT
    assert "summary" in res.result


def test_tool_rounded_numbers_and_arguments(context):
    res = TOOLS.get("correlations")(context)(variables=["x1"])
    assert res.ok and list(res.result["per_variable"]) == ["x1"]
    digits = [len(m.replace(".", "").lstrip("-0")) for m in re.findall(r"-?\d+\.\d+", res.result_str)]
    assert digits and max(digits) <= 4
    bad = TOOLS.get("correlations")(context)(variables=["nope"])
    assert not bad.ok and "unknown variable" in bad.error
    bad_type = TOOLS.get("periodicity")(context)(variable=3)
    assert not bad_type.ok and "invalid arguments" in bad_type.error


def test_residual_tool_rejects_hostile_expression(context):
    res = TOOLS.get("residual_diagnostics")(context)(expression="__import__('os').getcwd()")
    assert not res.ok and "ExpressionError" in res.error


def test_periodicity_tool_with_time_task():
    rng = np.random.default_rng(9)
    t = np.sort(rng.uniform(0, 20, 200))
    task = Task(name="osc", domain="", input_names=["t"], input_descriptions=[], target_name="v",
                target_description="", train=Split(t[:, None], np.cos(2 * np.pi * 0.5 * t)))
    res = TOOLS.get("periodicity")(AgentContext(task))()
    assert res.ok and res.result["dominant"][0]["frequency"] == pytest.approx(0.5, abs=0.02)
    assert "clearly periodic" in res.result_str
