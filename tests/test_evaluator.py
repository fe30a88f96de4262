"""Tests for harness.core.evaluator: hand-computed metrics and constant recovery."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from harness.core.evaluator import FitResult, compute_metrics, fit, score
from harness.core.expression import parse_expression


def test_metrics_by_hand() -> None:
    y = np.array([1.0, 2.0, -4.0, 0.0, 10.0])
    yp = np.array([1.05, 2.5, -4.001, 0.05, 10.0])
    m = compute_metrics(y, yp, complexity=7)
    mse = (0.05**2 + 0.5**2 + 0.001**2 + 0.05**2 + 0.0) / 5
    assert m["mse"] == pytest.approx(mse, rel=1e-12)
    assert m["nmse"] == pytest.approx(mse / 20.96, rel=1e-12)
    assert m["r2"] == pytest.approx(1 - mse / 20.96, rel=1e-12)
    # relative errors 0.05, 0.25, 0.00025, (y=0: |0.05|/median|y|=2 ->) 0.025, 0
    assert m["frac_within_0.1"] == pytest.approx(0.8)
    assert m["frac_within_0.01"] == pytest.approx(0.4)
    assert m["frac_within_0.001"] == pytest.approx(0.4)
    for tau in ("0.1", "0.01", "0.001"):
        assert m[f"acc_{tau}"] == 0.0 and m[f"acc_all_{tau}"] == 0.0
    assert m["n"] == 5 and m["n_valid"] == 5 and m["complexity"] == 7.0


def test_acc_needs_95_percent_and_all() -> None:
    y = np.arange(1.0, 21.0)
    yp = y * 1.05
    yp[0] = y[0] * 1.5  # 19 of 20 within 10%
    m = compute_metrics(y, yp)
    assert m["frac_within_0.1"] == pytest.approx(0.95)
    assert m["acc_0.1"] == 1.0 and m["acc_all_0.1"] == 0.0 and m["acc_0.01"] == 0.0
    m = compute_metrics(y, y * 1.0005)
    assert m["acc_all_0.001"] == 1.0 and m["acc_0.001"] == 1.0
    assert np.isnan(m["complexity"])


def test_near_zero_targets_use_absolute_tolerance() -> None:
    y = np.array([0.0, 1e-12, 1.0, 1.0])
    # y = 0 and y = 1e-12 would give huge relative errors; they are judged by |yhat - y| < tau * median|y|
    m = compute_metrics(y, np.array([0.04, -0.04, 1.0, 1.0]))
    assert m["frac_within_0.1"] == 1.0  # 0.04 < 0.1 * 0.5
    assert m["frac_within_0.01"] == 0.5
    m = compute_metrics(np.zeros(3), np.array([0.05, 0.0, -0.2]))  # all-zero y: scale 1
    assert m["frac_within_0.1"] == pytest.approx(2 / 3)
    assert m["nmse"] == np.inf


def test_nonfinite_predictions_are_failures() -> None:
    y = np.array([1.0, 2.0, 3.0, 4.0])
    m = compute_metrics(y, np.array([1.0, np.nan, 3.0, np.inf]))
    assert m["mse"] == np.inf and m["nmse"] == np.inf and m["r2"] == -np.inf
    assert m["n_valid"] == 2 and m["frac_within_0.1"] == 0.5 and m["acc_all_0.1"] == 0.0
    with pytest.raises(ValueError):
        compute_metrics(y, np.ones(3))


def _data(n: int = 400, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).uniform(-2.0, 2.0, (n, 1))


def _assert_recovered(params: np.ndarray, true: list[float]) -> None:
    rel = np.abs(np.asarray(params) - true) / np.abs(true)
    assert rel.max() < 1e-8, (params, true)


def test_fit_recovers_sine_quadratic_from_good_starts() -> None:
    X = _data()
    y = 1.7 * np.sin(2.3 * X[:, 0]) + 0.4 * X[:, 0] ** 2
    e = parse_expression("1.5*sin(2*x) + 0.5*x**2", ["x"], constants_as_params=True)
    res = fit(e, X, y)
    assert isinstance(res, FitResult) and res.status == "ok"
    _assert_recovered(res.params, [1.7, 2.3, 0.4])
    assert res.metrics["nmse"] < 1e-20 and res.metrics["acc_all_0.001"] == 1.0
    assert res.metrics["complexity"] == e.complexity and res.n_evaluations > 0


def test_fit_recovers_exponential_decay_both_losses() -> None:
    X = np.random.default_rng(1).uniform(0.0, 3.0, (300, 1))
    y = 2.5 * np.exp(-0.7 * X[:, 0])
    e = parse_expression("c0*exp(-c1*x)", ["x"])
    for loss in ("mse", "relative"):
        res = fit(e, X, y, loss=loss)
        assert res.status == "ok"
        _assert_recovered(res.params, [2.5, 0.7])


def test_fit_without_analytic_jacobian(monkeypatch: pytest.MonkeyPatch) -> None:
    X = np.random.default_rng(1).uniform(0.0, 3.0, (300, 1))
    y = 2.5 * np.exp(-0.7 * X[:, 0])
    e = parse_expression("c0*exp(-c1*x)", ["x"])
    monkeypatch.setattr(e, "jacobian", lambda *a, **k: None)
    res = fit(e, X, y)
    assert "finite-difference" in res.message
    np.testing.assert_allclose(res.params, [2.5, 0.7], rtol=1e-6)


def test_fit_is_deterministic_and_warning_free() -> None:
    X = _data(seed=3)
    y = np.cos(1.3 * X[:, 0]) * 3.0 + 0.2
    e = parse_expression("c0*cos(c1*x) + c2 + exp(c3*x)*0", ["x"])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        a = fit(e, X, y, seed=5)
        b = fit(e, X, y, seed=5)
    np.testing.assert_array_equal(a.params, b.params)


def test_fallback_when_least_squares_raises(monkeypatch: pytest.MonkeyPatch) -> None:
    import harness.core.evaluator as evaluator

    def broken(*args: object, **kwargs: object) -> None:
        raise np.linalg.LinAlgError("SVD did not converge")

    monkeypatch.setattr(evaluator, "least_squares", broken)
    X = _data()
    res = fit(parse_expression("c0*x + c1", ["x"]), X, 3.0 * X[:, 0] - 1.0)
    assert res.status == "ok" and "LinAlgError" in res.message
    np.testing.assert_allclose(res.params, [3.0, -1.0], rtol=1e-5)


def test_no_params_and_score() -> None:
    X = _data()
    y = X[:, 0] ** 2
    e = parse_expression("x**2", ["x"])
    res = fit(e, X, y)
    assert res.status == "no_params" and res.params.shape == (0,)
    assert res.metrics["mse"] == 0.0
    s = score(parse_expression("c0*x", ["x"]), [2.0], X, 2 * X[:, 0])
    assert s["mse"] == 0.0 and s["complexity"] == 3.0


def test_nonfinite_status_keeps_best_params() -> None:
    X = _data()
    y = np.exp(X[:, 0])
    res = fit(parse_expression("c0*log(c1*x)", ["x"]), X, y, max_seconds=1.0)
    assert res.status == "nonfinite"
    assert res.metrics["n_valid"] < res.metrics["n"] and np.all(np.isfinite(res.params))


def test_timeout_status_returns_best_found() -> None:
    rng = np.random.default_rng(0)
    X = rng.uniform(0.1, 2.0, (20000, 2))
    y = np.sin(3 * X[:, 0]) * X[:, 1] + rng.normal(0, 0.1, 20000)
    e = parse_expression("c0*sin(c1*x)*v**c2 + c3*exp(c4*v) + c5", ["x", "v"])
    res = fit(e, X, y, n_starts=100, max_seconds=0.05)
    assert res.status == "timeout"
    assert res.seconds < 5.0 and res.params.shape == (6,)  # 100 starts on 20,000 rows would take minutes and np.isfinite(res.metrics["mse"])


def test_bad_loss_rejected() -> None:
    with pytest.raises(ValueError):
        fit(parse_expression("c0*x", ["x"]), _data(), np.ones(400), loss="huber")


def test_fit_with_overflowing_starts_is_quiet() -> None:
    """Starts that overflow inside SciPy's own arithmetic give no RuntimeWarning spam."""
    import warnings

    from harness.core.evaluator import fit
    from harness.core.expression import parse_expression

    x = np.linspace(0.0, 300.0, 400)[:, None]
    y = 1e-3 * np.exp(0.02 * x[:, 0]) + 5.0
    expr = parse_expression("c0*exp(c1*x)*sinh(c2*x) + c3", ["x"])
    expr.initial_params = np.array([1.0, 5.0, 5.0, 1.0])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        result = fit(expr, x, y, n_starts=3, max_seconds=1.0)
    assert result.status in {"ok", "timeout", "nonfinite", "failed"}


def test_large_data_is_searched_on_a_subsample_and_polished_on_all_rows() -> None:
    """Above SUBSAMPLE_ROWS the result is still the all-rows optimum: exact constants, metrics on every row."""
    from harness.core.evaluator import SUBSAMPLE_ROWS

    rng = np.random.default_rng(3)
    n = 5 * SUBSAMPLE_ROWS
    X = rng.uniform(0.1, 3.0, (n, 2))
    y = 1.7 * X[:, 0] ** 2 + 0.4 * np.exp(-1.3 * X[:, 1])
    e = parse_expression("c0*x**2 + c1*exp(-c2*v)", ["x", "v"])
    res = fit(e, X, y, n_starts=4, seed=0)
    assert res.status == "ok" and res.metrics["n"] == n
    assert np.allclose(res.params, [1.7, 0.4, 1.3], rtol=1e-8, atol=0)
    # with noise, the polished point is the least-squares optimum on all rows (no better point nearby)
    noisy = y + rng.normal(0, 0.05, n)
    res = fit(e, X, noisy, n_starts=4, seed=0)
    cols = [X[:, 0], X[:, 1]]
    J = e.jacobian(cols, res.params, n=n)
    gradient = J.T @ (e(X, res.params) - noisy)
    assert np.max(np.abs(gradient)) < 1e-6 * n
