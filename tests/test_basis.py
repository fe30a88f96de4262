"""The generic basis and sparse regression (harness.engine.basis) and the workflow channel that uses them."""

from __future__ import annotations

import math

import numpy as np
import pytest

from harness.engine.basis import dominant_frequencies, generic_basis, sparse_fit, standard_library
from harness.engine.task import Task


def test_the_periodogram_finds_a_drive_frequency_in_unevenly_sampled_rows() -> None:
    rng = np.random.default_rng(0)
    t = np.sort(rng.uniform(0, 30, 3000))
    r = 0.3 * np.sin(1.2288 * t) + 0.05 * rng.normal(size=t.size)
    found = dominant_frequencies(t, r)
    assert found and abs(found[0] - 1.2288) < 0.02
    assert dominant_frequencies(t, rng.normal(size=t.size)) == []  # noise alone has no peak worth a term


def test_sparse_fit_recovers_an_exact_sparse_law_from_a_wide_library() -> None:
    rng = np.random.default_rng(1)
    X = rng.uniform(-1.5, 1.5, size=(2000, 2))
    names = ["x", "v"]
    terms = standard_library(X, np.zeros(len(X)), names)
    assert {"x*x*x", "v*v*v", "x*v", "sin(x)", "x*cos(x)"} <= set(terms)
    from harness.engine.expression import parse_expression

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
            "combine_terms": False}
    off = run_workflow(oscillator, (0, 1, 0, 0, 0), None, ScriptedLLM(fn=scripted_role_output), sr_settings=tiny)
    on = run_workflow(oscillator, (0, 1, 0, 0, 0), None, ScriptedLLM(fn=scripted_role_output),
                      sr_settings={**tiny, "sparse_regression": True})
    assert not any((n.info or {}).get("channel") == "sparse regression" for n in off.state.nodes)
    node = next(n for n in on.state.nodes if (n.info or {}).get("channel") == "sparse regression")
    assert node.info["library"] >= 20 and node.info["kept"] == 1
    assert on.best.source == "sparse" and on.best.metric("valid") < 1e-20
    assert on.best.metrics["test_ood"]["acc_0.01"] == 1.0
    assert math.isfinite(off.best.metric("valid")) and off.best.metric("valid") > 1e-12
