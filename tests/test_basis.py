"""The generic basis and sparse regression (harness.core.basis) and the workflow channel that uses them."""

from __future__ import annotations

import math

import numpy as np
import pytest

from harness.core.basis import (BasisSettings, dominant_frequencies, forward_path, generic_basis, sparse_candidates,
                                  sparse_fit, standard_library)
from harness.core.task import Task


def test_the_periodogram_finds_a_drive_frequency_in_unevenly_sampled_rows() -> None:
    rng = np.random.default_rng(0)
    t = np.sort(rng.uniform(0, 30, 3000))
    r = 0.3 * np.sin(1.2288 * t) + 0.05 * rng.normal(size=t.size)
    found = dominant_frequencies(t, r)
    assert found and abs(found[0] - 1.2288) < 0.005  # refined past the grid's step (~0.1 here)
    assert dominant_frequencies(t, rng.normal(size=t.size)) == []  # noise alone has no peak worth a term


def test_sparse_fit_recovers_an_exact_sparse_law_from_a_wide_library() -> None:
    rng = np.random.default_rng(1)
    X = rng.uniform(-1.5, 1.5, size=(2000, 2))
    names = ["x", "v"]
    terms = standard_library(X, np.zeros(len(X)), names)
    assert {"x*x*x", "v*v*v", "x*v", "sin(x)", "x*cos(x)"} <= set(terms)
    from harness.core.expression import parse_expression

    A = np.column_stack([parse_expression(t, names)(X) * np.ones(len(X)) for t in terms])
    y = 0.8 * np.sin(X[:, 0]) - 0.5 * X[:, 1] ** 3 - 0.5 * X[:, 0] * X[:, 1] - X[:, 0] * np.cos(X[:, 0])
    w = sparse_fit(A, y, threshold=1e-3)
    kept = {terms[i]: w[i] for i in np.flatnonzero(w)}
    assert set(kept) == {"sin(x)", "v*v*v", "x*v", "x*cos(x)"}
    assert kept["v*v*v"] == pytest.approx(-0.5) and kept["x*cos(x)"] == pytest.approx(-1.0)
    assert sparse_fit(np.zeros((10, 3)), np.ones(10)) is None


def test_the_basis_holds_monomials_and_the_residuals_waves() -> None:
    rng = np.random.default_rng(2)
    X = np.column_stack([rng.uniform(-1, 1, 2000), np.sort(rng.uniform(0, 30, 2000))])
    terms = generic_basis(X, 0.5 * np.cos(2.0 * X[:, 1]), ["x", "t"])
    assert "x*x*t" in terms and "t*t*t" in terms
    waves = [t for t in terms if t.startswith("cos(") and t.endswith("*t)")]
    assert waves and abs(float(waves[0][4:].split("*")[0]) - 2.0) < 0.03
    assert any(t.startswith("x*cos(") for t in terms)  # the wave times the other input


@pytest.fixture(scope="module")
def oscillator() -> Task:
    rng = np.random.default_rng(3)

    def rows(n: int, lo: float, hi: float) -> tuple[np.ndarray, np.ndarray]:
        X = rng.uniform(lo, hi, size=(n, 2))
        x, v = X[:, 0], X[:, 1]
        return X, 0.8 * np.sin(x) - 0.5 * v ** 3 - 0.2 * x ** 3 - 0.5 * x * v - x * np.cos(x)

    return Task.from_arrays(*rows(600, -1.0, 1.0), name="toy_oscillator", input_names=["x", "v"],
                            test_id=rows(200, -1.0, 1.0), test_ood=rows(200, 1.0, 1.5))


def test_the_sparse_channel_brings_an_exact_law_the_engine_missed(oscillator) -> None:
    """A 1 s engine run on a tiny population misses the law; the sparse regression finds it and, being far
    better than anything in the pool, is the pick (and holds out of domain)."""
    from tests.doubles import ScriptedLLM, scripted_role_output
    from workflows.runner import run_workflow

    tiny = {"time_budget": 1, "population_size": 20, "generations": 2, "max_length": 10, "unguided_run": False,
            "combine_terms": False, "precision_polish": False}  # the sparse channel's own pick, not its polish
    off = run_workflow(oscillator, (0, 1, 0, 0, 0), None, ScriptedLLM(fn=scripted_role_output),
                       sr_settings={**tiny, "sparse_regression": False})
    on = run_workflow(oscillator, (0, 1, 0, 0, 0), None, ScriptedLLM(fn=scripted_role_output),
                      sr_settings={**tiny, "sparse_regression": True})
    assert not any((n.info or {}).get("channel") == "sparse regression" for n in off.state.nodes)
    node = next(n for n in on.state.nodes if (n.info or {}).get("channel") == "sparse regression")
    assert node.info["library"] >= 20 and node.info["kept"] == 1
    assert on.best.source == "sparse" and on.best.metric("valid") < 1e-20
    assert on.best.metrics["test_ood"]["acc_0.01"] == 1.0
    assert math.isfinite(off.best.metric("valid")) and off.best.metric("valid") > 1e-12


def test_the_wide_library_offers_a_signed_states_forms_and_no_trends_of_time() -> None:
    rng = np.random.default_rng(4)
    X = np.column_stack([rng.uniform(-2, 2, 500), np.sort(rng.uniform(0, 30, 500)), rng.uniform(-1, 1, 500)])
    wide = standard_library(X, np.zeros(len(X)), ["x", "t", "v"],
                            BasisSettings(families=("trig", "abs", "tanh", "localized")))
    assert {"v*abs(v)", "x*sqrt(abs(x))"} <= set(wide)
    assert any(t.startswith("tanh(") and t.endswith("*v)") for t in wide)
    assert any(t.startswith("x*exp(-") and "abs(x)" in t for t in wide)
    assert not any("abs(t)" in t or "*t)" in t and t.startswith(("tanh", "exp")) for t in wide)  # t is not signed
    narrow = standard_library(X, np.zeros(len(X)), ["x", "t", "v"])
    assert not any("abs(" in t or "tanh(" in t for t in narrow)


def test_the_forward_path_takes_the_laws_columns_first() -> None:
    rng = np.random.default_rng(5)
    X = rng.uniform(-1.5, 1.5, size=(1500, 2))
    names = ["x", "v"]
    terms = standard_library(X, np.zeros(len(X)), names, BasisSettings(families=("trig", "abs", "tanh", "localized")))
    from harness.core.expression import parse_expression

    A = np.column_stack([parse_expression(t, names)(X) * np.ones(len(X)) for t in terms])
    y = -0.3 * X[:, 1] * np.abs(X[:, 1]) - 1.2 * X[:, 0] + 0.4 * X[:, 0] ** 3
    path = forward_path(A, y, 8)
    assert [len(p) for p in path] == list(range(1, 9))

    def nmse(idx: list[int]) -> float:
        w, *_ = np.linalg.lstsq(A[:, idx], y, rcond=None)
        return float(np.mean(np.square(y - A[:, idx] @ w)) / np.var(y))

    errors = [nmse(p) for p in path]
    assert all(b <= a + 1e-20 for a, b in zip(errors, errors[1:]))  # each step only takes error away
    exact = next(p for p, e in zip(path, errors) if e < 1e-20)  # the law's columns are all in by then
    assert len(exact) <= 6 and {"v*abs(v)", "x", "x*x*x"} <= {terms[i] for i in exact}


def test_the_sparse_channel_finds_a_drag_law_with_a_rate_inside_an_exponential() -> None:
    """Quadratic drag and a softening spring ``x*exp(-k*abs(x))``: the wide library holds the form at a starting
    rate, and the refit frees the rate, so the exact law comes back (validation NMSE at round-off) and holds out
    of domain; the trig library alone cannot say it."""
    from harness.core.candidates import NMSE_FLOOR
    from harness.core.context import AgentContext

    rng = np.random.default_rng(6)

    def rows(n: int, lo: float, hi: float) -> tuple[np.ndarray, np.ndarray]:
        X = np.column_stack([rng.uniform(lo, hi, n) * rng.choice([-1, 1], n), rng.uniform(-1, 1, n)])
        x, v = X[:, 0], X[:, 1]
        return X, -0.25 * v * np.abs(v) - 1.3 * x * np.exp(-0.37 * np.abs(x))

    task = Task.from_arrays(*rows(800, 0.0, 2.0), name="toy_drag", input_names=["x", "v"],
                            test_id=rows(200, 0.0, 2.0), test_ood=rows(200, 2.0, 3.0))
    ctx = AgentContext(task=task, seed=0)
    found, info = sparse_candidates(ctx, ctx.train.y)
    best = min(found, key=lambda c: c.metric("valid"))
    assert best.metric("valid") <= NMSE_FLOOR and best.metrics["test_ood"]["acc_0.001"] == 1.0
    assert "exp" in best.equation and "abs" in best.equation
    narrow, _ = sparse_candidates(ctx, ctx.train.y, BasisSettings(libraries=(("trig",),)))
    assert min(c.metric("valid") for c in narrow) > 1e-12


def test_the_sparse_channel_skips_a_task_without_a_signed_input() -> None:
    """Time, concentrations, temperatures: no state around an equilibrium, no sparse node (on the training pools
    of such tasks the channel only lost picks out of domain)."""
    from tests.doubles import ScriptedLLM, scripted_role_output
    from workflows.runner import run_workflow

    rng = np.random.default_rng(7)

    def rows(n: int, lo: float, hi: float) -> tuple[np.ndarray, np.ndarray]:
        X = rng.uniform(lo, hi, size=(n, 2))
        return X, 0.3 * X[:, 0] ** 1.7 * np.exp(-0.2 * X[:, 1])

    task = Task.from_arrays(*rows(300, 0.1, 2.0), name="toy_positive", input_names=["A", "t"],
                            test_id=rows(100, 0.1, 2.0), test_ood=rows(100, 2.0, 3.0))
    tiny = {"time_budget": 1, "population_size": 20, "generations": 2, "max_length": 10, "unguided_run": False,
            "combine_terms": False, "sparse_regression": True}
    result = run_workflow(task, (0, 1, 0, 0, 0), None, ScriptedLLM(fn=scripted_role_output), sr_settings=tiny)
    assert result.state.nodes and not any((n.info or {}).get("channel") == "sparse regression"
                                          for n in result.state.nodes)
