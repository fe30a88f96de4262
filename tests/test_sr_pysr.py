"""PySR adapter: plan translation, the unavailable path, auto fallback; a real fit only where pysr imports."""

from __future__ import annotations

import sys
import types

import numpy as np
import pandas as pd
import pytest
import sympy

from harness.core.context import AgentContext
from harness.core.task import Task
from harness.sr import pysr_backend
from harness.sr.backends import BackendUnavailable, run_search
from harness.sr.plan import SearchPlan
from harness.sr.pysr_backend import import_pysr, pysr_kwargs, run_pysr, supported_kwargs


def make_task() -> Task:
    rng = np.random.default_rng(0)
    X = rng.uniform(0.5, 2, (120, 2))
    return Task.from_arrays(X, 2.0 * X[:, 0] * X[:, 1] + 1.0, input_names=["x", "v"], name="pysr_t")


@pytest.fixture
def no_pysr(monkeypatch):
    """Make `import pysr` fail as it does on a machine without the package."""
    monkeypatch.setitem(sys.modules, "pysr", None)


def test_plan_translation():
    plan = SearchPlan(operators=["add", "sub", "mul", "div", "pow", "sin", "square", "cube"], max_length=25,
                      max_depth=8, generations=40, population_size=50, seeds=["x*v**2", "c0*exp(-c1*v)"],
                      loss="relative", seed=3,
                      extras={"parsimony": 0.01, "bogus": 1})
    warnings: list[str] = []
    kw = pysr_kwargs(plan, ["x", "v"], 12.0, warnings)
    assert kw["binary_operators"] == ["+", "-", "*", "/", "^"]
    assert kw["unary_operators"] == ["sin", "square", "cube"]
    assert (kw["maxsize"], kw["maxdepth"], kw["niterations"], kw["population_size"]) == (25, 8, 40, 50)
    assert kw["timeout_in_seconds"] == 12.0
    assert kw["deterministic"] is True and kw["parallelism"] == "serial" and kw["random_state"] == 3
    assert kw["guesses"] == ["v^2*x", "1.0*exp(-1.0*v)"]  # PySR knows no c0: starting values written in
    assert "target" in kw["elementwise_loss"] and kw["parsimony"] == 0.01
    assert warnings == ["pysr: ignored extra 'bogus'"]


def test_unsupported_arguments_are_dropped_with_a_warning():
    class OldPySR:
        def __init__(self, binary_operators=None, maxsize=20):
            pass

    warnings: list[str] = []
    out = supported_kwargs(OldPySR, {"binary_operators": ["+"], "maxsize": 5, "guesses": ["x"]}, warnings)
    assert out == {"binary_operators": ["+"], "maxsize": 5}
    assert "guesses" in warnings[0]


def test_missing_pysr_raises_backend_unavailable_with_install_hint(no_pysr):
    with pytest.raises(BackendUnavailable, match=r"pip install -e \.\[pysr\]"):
        import_pysr()


def test_broken_julia_at_import_is_backend_unavailable(monkeypatch):
    module = types.ModuleType("pysr")

    def __getattr__(name):
        raise RuntimeError("urlopen error: could not download Julia")

    module.__getattr__ = __getattr__
    monkeypatch.setitem(sys.modules, "pysr", module)
    with pytest.raises(BackendUnavailable, match="failed to start Julia"):
        import_pysr()


def test_explicit_pysr_backend_reports_error(no_pysr):
    out = run_search({"time_budget": 2}, AgentContext(make_task()), backend="pysr")
    assert out.candidates == [] and "pysr unavailable" in out.error and "Julia" in out.error


def test_auto_falls_back_to_operon_with_a_warning(no_pysr):
    out = run_search({"time_budget": 1, "generations": 3, "population_size": 40}, AgentContext(make_task()),
                     backend="auto")
    assert out.backend == "auto" and out.backend_used == "operon" and out.error is None
    assert out.candidates and any("fell back to operon" in w for w in out.warnings)


class FakePySR:
    """Stands in for PySRRegressor: records its arguments, 'finds' the right equation and a worse one."""

    last_kwargs: dict = {}

    def __init__(self, binary_operators=None, unary_operators=None, maxsize=20, maxdepth=None, niterations=40,
                 population_size=33, timeout_in_seconds=None, deterministic=False, parallelism=None,
                 random_state=None, variable_names=None, verbosity=1, progress=True, model_selection="best",
                 temp_equation_file=False, delete_tempfiles=True, guesses=None):
        FakePySR.last_kwargs = dict(locals())
        self.names = variable_names

    def fit(self, X, y):
        x, v = sympy.symbols(self.names[:2])
        self.equations_ = pd.DataFrame({"sympy_format": [x + 3.1, 1.99999 * x * v + 1.00001, sympy.Abs(x) / v]})
        return self


def test_adapter_turns_equations_into_refitted_candidates(monkeypatch):
    monkeypatch.setattr(pysr_backend, "import_pysr", lambda: FakePySR)
    plan = SearchPlan(seeds=["c0*x*v + c1"], time_budget=5)
    run = run_pysr(plan, AgentContext(make_task()), max_seconds=5)
    guess = FakePySR.last_kwargs["guesses"][0]  # the fitted seed, constants written in
    assert "c0" not in guess and abs(float(guess.split("*")[0]) - 2.0) < 1e-9
    assert FakePySR.last_kwargs["deterministic"] is True
    pysr = [c for c in run.candidates if c.source == "pysr"]
    assert len(pysr) == 3
    best = min(pysr, key=lambda c: c.sort_key())
    assert best.metric("valid") < 1e-20  # float64 refit of 1.99999*x*v + 1.00001


def test_fit_failure_is_backend_unavailable(monkeypatch):
    class Failing(FakePySR):
        def fit(self, X, y):
            raise OSError("juliaup: network unreachable")

    monkeypatch.setattr(pysr_backend, "import_pysr", lambda: Failing)
    with pytest.raises(BackendUnavailable, match="network unreachable"):
        run_pysr(SearchPlan(), AgentContext(make_task()), max_seconds=2)


def test_real_pysr_fit():
    pysr = pytest.importorskip("pysr")  # needs Julia; skipped where pysr cannot import
    assert pysr is not None
    out = run_search({"time_budget": 60, "generations": 5, "operators": ["add", "mul"]}, AgentContext(make_task()),
                     backend="pysr")
    assert out.error is None and out.backend_used == "pysr"
    assert out.best.metric("valid") < 1e-8
