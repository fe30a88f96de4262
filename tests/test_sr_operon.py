"""Operon backend: recovery with float64 refit, seeding by warm start, determinism, derived features."""

from __future__ import annotations

import numpy as np
import pyoperon  # a core dependency: a broken install fails here, it does not skip
import pytest

from harness.core.context import (
    AgentContext,
    Budget,
    BudgetExhausted,
    BudgetTracker,
    evaluate_candidate,
)
from harness.core.expression import parse_expression
from harness.core.task import Task
from harness.sr.backends import run_search
from harness.sr.operon_backend import (
    operon_kwargs,
    run_operon,
    substitute_features,
    sympy_to_tree,
)
from harness.sr.plan import SearchPlan


def make_task(fn, lo, hi, d, names=None, n=200, seed=0, name="t") -> Task:
    rng = np.random.default_rng(seed)
    X = rng.uniform(lo, hi, (n, d))
    Xt = rng.uniform(lo, hi, (60, d))
    return Task.from_arrays(X, fn(X), input_names=names, name=name, test_id=(Xt, fn(Xt)))


def engine_best(cands, source="operon"):
    own = [c for c in cands if c.source == source]
    return min(own, key=lambda c: c.sort_key())


def test_recovers_product_plus_sine_exactly():
    task = make_task(lambda X: 2.5 * X[:, 0] * X[:, 1] + np.sin(X[:, 0]), -2, 2, 2)
    plan = {"operators": ["add", "sub", "mul", "sin"], "time_budget": 4, "generations": 60, "population_size": 300}
    out = run_search(plan, AgentContext(task))
    assert out.backend_used == "operon" and out.error is None
    best = out.best
    assert best.source == "operon"
    assert best.metric("valid") < 1e-10 and best.metric("test_id") < 1e-10
    assert abs(best.params[0]) > 0  # constants refitted in float64, not the engine's float32 values
    assert set(out.info) >= {"generations", "front_size", "gp_seconds"}
    assert out.front and out.front[-1].metric("valid") <= out.front[0].metric("valid")


SEEDED = (lambda X: 1.7 * X[:, 0] * np.exp(-0.8 * X[:, 1]) * np.sin(X[:, 2]) + 0.3)


def test_seeds_injected_by_warm_start_help():
    task = make_task(SEEDED, 0.5, 3, 3)
    base = {"time_budget": 5, "generations": 3, "population_size": 100, "seed": 1,
            "operators": ["add", "sub", "mul", "div", "cos"]}  # the seed's exp and sin are added for it
    unseeded = run_search(base, AgentContext(task))
    seeded = run_search({**base, "seeds": ["x0*exp(-x1)*sin(x2)"]}, AgentContext(task))
    assert seeded.info["n_injected"] == 1
    assert "exp" in seeded.info["allowed_symbols"] and "sin" in seeded.info["allowed_symbols"]
    assert engine_best(unseeded.candidates).metric("valid") > 1e-4
    assert engine_best(seeded.candidates).metric("valid") < 1e-10  # the GP's own output, not just the seed
    assert any(c.source == "seed" for c in seeded.candidates)


def test_same_seed_same_result():
    task = make_task(lambda X: X[:, 0] ** 2 / (1 + X[:, 1]) + X[:, 1], 0.5, 2, 2, seed=4)
    plan = {"time_budget": 10, "generations": 4, "population_size": 80, "seed": 7}
    runs = [run_search(plan, AgentContext(task)) for _ in range(2)]
    texts = [[c.info.get("engine_text") for c in r.candidates] for r in runs]
    assert texts[0] == texts[1] and len(texts[0]) > 2
    assert runs[0].best.equation == runs[1].best.equation


def test_derived_feature_is_substituted_back():
    task = make_task(lambda X: 3.3 * np.log(X[:, 0] * X[:, 1]) + 0.5 * X[:, 1], 0.5, 3, 2, names=["x", "v"])
    plan = {"operators": ["add", "sub", "mul"], "features": ["phi = log(x*v)"], "time_budget": 3,
            "generations": 20, "population_size": 100}
    out = run_search(plan, AgentContext(task))
    assert out.info["features"] == {"phi": "log(v*x)"}
    assert "log(v*x)" in out.best.equation and "phi" not in out.best.equation
    assert out.best.metric("valid") < 1e-10
    parse_expression(out.best.expression, ["x", "v"])  # over the inputs only


def test_substitute_features_whole_words_only():
    assert substitute_features("F0_*x + F0_1 + sin(F0_)", {"F0_": "x*v"}) == "(x*v)*x + F0_1 + sin((x*v))"


@pytest.mark.parametrize("text", [
    "x0/x1 - x1**2.5 + 1/(x0 + 2)",
    "exp(-x0)*sin(x1) - 3*cos(2*x0)",
    "sqrt(x0)*x1**2 + x0**3 - abs(x1 - 1.5)",
    "log(x0*x1)/(x0 + x1) + tanh(x1) - 0.5",
])
def test_sympy_to_tree_matches_the_engine(text):
    rng = np.random.default_rng(0)
    X = rng.uniform(0.5, 2.5, (50, 2))
    expr = parse_expression(text, ["x0", "x1"])
    ds = pyoperon.Dataset(np.asfortranarray(X))
    hashes = {v.Name: v.Hash for v in ds.Variables}
    tree = sympy_to_tree(expr.sympy, {"x0": hashes["X1"], "x1": hashes["X2"]})
    got = np.asarray(pyoperon.Evaluate(pyoperon.DispatchTable(), tree, ds, pyoperon.Range(0, 50))).ravel()
    np.testing.assert_allclose(got, expr(X), rtol=1e-4, atol=1e-5)


def test_plan_translation_to_operon_arguments():
    warnings: list[str] = []
    plan = SearchPlan(operators=["add", "sub", "mul", "div", "cube", "exp"], max_length=21, max_depth=7,
                      population_size=64, generations=9, seed=5,
                      extras={"optimizer_iterations": 1000, "offspring_generator": "os", "bogus": 1})
    kw = operon_kwargs(plan, 3, warnings)
    assert kw["allowed_symbols"].split(",") == ["add", "div", "exp", "mul", "square", "sub", "constant", "variable"]
    assert (kw["max_length"], kw["max_depth"], kw["population_size"], kw["generations"]) == (21, 7, 64, 9)
    assert (kw["max_time"], kw["random_state"], kw["n_threads"]) == (3, 5, 1)
    assert kw["optimizer_iterations"] == 100 and kw["offspring_generator"] == "os"
    assert kw["objectives"] == ["r2", "length"]
    assert warnings == ["operon: ignored extra 'bogus'"]


def test_budget_is_checked_and_charged():
    task = make_task(lambda X: X[:, 0] + 1, 0, 1, 1, n=60)
    ctx = AgentContext(task, budget=BudgetTracker(Budget(max_solver_runs=1)))
    run_search({"time_budget": 1, "generations": 2, "population_size": 30}, ctx)
    assert ctx.budget.solver_runs == 1
    with pytest.raises(BudgetExhausted):
        run_search({"time_budget": 1}, ctx)


def test_run_time_capped_by_seconds_left():
    task = make_task(lambda X: X[:, 0] * np.sin(X[:, 0]), -3, 3, 1, n=80)
    ctx = AgentContext(task, budget=BudgetTracker(Budget(max_seconds=2.2)))
    out = run_search({"time_budget": 60}, ctx)
    assert out.info["gp_seconds"] <= 2
    assert ctx.budget.elapsed() < 30  # 2.2 s budget plus refit slack, not 60 s


def test_seed_pool_candidates_are_injected_and_returned():
    task = make_task(SEEDED, 0.5, 3, 3)
    ctx = AgentContext(task)
    pool = [evaluate_candidate("c0*x0*exp(c1*x1)*sin(x2) + c2", ctx, source="llm")]
    run = run_operon(SearchPlan(generations=2, population_size=60), ctx, max_seconds=3, seed_pool=pool)
    assert run.info["n_injected"] == 1 and pool[0] in run.candidates
    assert engine_best(run.candidates).metric("valid") < 1e-10


def test_a_seed_with_a_costly_operator_is_injected_but_the_search_stays_fast() -> None:
    """A seed using tan is scored and injected; the GP does not get tan (it slows every generation 3x)."""
    import benchmarks

    task = benchmarks.load_suite("synthetic", names=["chem_react_synth_00"], n_train=100)[0]
    ctx = AgentContext(task=task)
    run = run_operon(SearchPlan(time_budget=2, population_size=60, seeds=["c0*A + c1*tan(c2*t)"]), ctx)
    assert "tan" not in run.info["allowed_symbols"].split(",") and run.info["n_injected"] == 1
    assert any(c.source == "seed" and "tan" in c.expression for c in run.candidates)
    own = run_operon(SearchPlan(time_budget=2, population_size=60, operators=["add", "sub", "mul", "div", "tan"],
                                seeds=["c0*A + c1*tan(c2*t)"]), ctx)
    assert "tan" in own.info["allowed_symbols"].split(",")


def test_a_later_run_can_continue_the_population_of_an_earlier_one() -> None:
    """SRSettings.continue_search: the worker keeps a branch's population; the next run goes on from it."""
    import benchmarks
    from harness.core.context import AgentContext
    from harness.sr.backends import run_search

    task = benchmarks.load_suite("synthetic", names=["chem_react_synth_00"], n_train=100)[0]
    ctx = AgentContext(task=task)
    key = {"population_key": "test-branch-0"}
    first = run_search({"time_budget": 1, "population_size": 60, "extras": {**key, "continue_population": False}}, ctx)
    again = run_search({"time_budget": 1, "population_size": 60, "seeds": ["c0*A"],
                        "extras": {**key, "continue_population": True}}, ctx)
    fresh = run_search({"time_budget": 1, "population_size": 60, "extras": {"population_key": "other",
                                                                            "continue_population": True}}, ctx)
    assert first.error is None and "continued" not in first.info
    assert again.error is None and again.info["continued"] == "test-branch-0" and again.info["n_injected"] == 1
    assert "continued" not in fresh.info  # nothing kept under that key: a fresh run
    other_ops = run_search({"time_budget": 1, "population_size": 60, "seeds": ["c0*tanh(A)"],
                            "extras": {**key, "continue_population": True}}, ctx)
    assert other_ops.info["continued"] == "test-branch-0"  # a seed's own operator does not end the continuation
    assert "tanh" not in other_ops.info["allowed_symbols"] and other_ops.info["n_injected"] == 1
    narrower = run_search({"time_budget": 1, "population_size": 60, "operators": ["add", "mul"],
                           "extras": {**key, "continue_population": True}}, ctx)
    assert "continued" not in narrower.info  # other operators asked for: a fresh run, and it says so
    assert any("starts afresh" in w for w in narrower.warnings)
