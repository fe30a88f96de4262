"""Exact laws, not close ones (harness.core.precision, the ladder): a refit on relative error reaches a law's exact
constants from a close wrong start and fits a settled tail; pruning drops a planted spurious term and keeps every
real one; snapping finds simple constants under noise; the ladder prefers the exact law to a closer bulk fit."""

from __future__ import annotations

import numpy as np
import sympy

from harness.core.candidates import Candidate, ladder_key, select
from harness.core.context import AgentContext, evaluate_candidate
from harness.core.expression import parse_expression
from harness.core.precision import polish, prune_terms, refit_relative, snap_constants
from harness.core.task import Task


def _ctx(fn, lo: float, hi: float, names: tuple[str, ...], noise: float = 0.0, n: int = 500) -> AgentContext:
    rng = np.random.default_rng(0)
    X = rng.uniform(lo, hi, (n, len(names)))
    y = fn(X) * (1 + noise * rng.standard_normal(n))
    return AgentContext(Task.from_arrays(X, y, name="law", input_names=list(names)))


def _constants(equation: str) -> list[float]:
    return sorted(parse_expression(equation, ["x", "v"], constants_as_params=True).initial_params.tolist())


def test_a_refit_recovers_the_exact_constants_from_a_close_wrong_start() -> None:
    ctx = _ctx(lambda X: 2.5 * X[:, 0] * X[:, 1] + 0.5 * X[:, 0] ** 2, 0.5, 3.0, ("x", "v"))
    close = evaluate_candidate("2.4*x*v + 0.52*x**2", ctx)  # its numbers fixed: close, not the law
    assert close.metric("valid") > 1e-4
    exact = refit_relative(close, ctx)
    assert exact.metric("valid") < 1e-20 and np.allclose(_constants(exact.equation), [0.5, 2.5], rtol=1e-10)


def test_a_relative_refit_fits_a_settled_tail_that_least_squares_ignores() -> None:
    ctx = _ctx(lambda X: 5 * np.exp(-3 * X[:, 0]) + 0.002 * np.exp(-0.5 * X[:, 0]), 0.0, 6.0, ("t",), noise=1e-3)
    bulk = evaluate_candidate("5*exp(-3*t) + 0.01*exp(-1*t)", ctx, constants_as_params=True)  # MSE: the bulk

    def tail_within_1_percent(equation: str) -> float:
        X, y = ctx.task.train.X, ctx.task.train.y
        late = X[:, 0] > 3  # where the target has settled below 1e-3 of its largest value
        return float(np.mean(np.abs(parse_expression(equation, ["t"])(X[late]) - y[late]) / np.abs(y[late]) < 0.01))

    relative = refit_relative(bulk, ctx)
    assert tail_within_1_percent(bulk.equation) < 0.5 < 0.95 <= tail_within_1_percent(relative.equation)


def test_pruning_drops_a_planted_spurious_term_and_keeps_every_real_one() -> None:
    ctx = _ctx(lambda X: 2.5 * X[:, 0] * X[:, 1] + 0.05 * X[:, 1], 0.5, 3.0, ("x", "v"), noise=1e-4)
    planted = evaluate_candidate("2.5*x*v + 0.05*v + 0.001*sin(x)", ctx, constants_as_params=True)
    pruned = prune_terms(planted, ctx)
    assert "sin" not in pruned.equation
    skeleton = parse_expression(pruned.equation, ["x", "v"], constants_as_params=True)
    ones = {sympy.Symbol(name, real=True): 1 for name in skeleton.parameters}
    terms = {str(term.subs(ones)) for term in sympy.Add.make_args(skeleton.sympy)}
    assert terms == {"v*x", "v"}, pruned.equation  # x*v and the small real term v both stay, nothing else
    assert pruned.metric("valid") <= planted.metric("valid") * 1.1


def test_snapping_finds_simple_constants_under_noise() -> None:
    ctx = _ctx(lambda X: 2.5 * X[:, 0] * X[:, 1] + X[:, 0] ** 2 / 3, 0.5, 3.0, ("x", "v"), noise=1e-4)
    fitted = evaluate_candidate("2.5*x*v + 0.33*x**2", ctx, constants_as_params=True)
    assert _constants(fitted.equation) != [1 / 3, 2.5]  # noise moves the fitted constants off the simple ones
    snapped = snap_constants(fitted, ctx)
    law = parse_expression(snapped.equation, ["x", "v"])
    assert law.n_params == 0, snapped.equation  # every constant is now a simple number: 5/2 and 1/3
    X = np.array([[1.0, 2.0], [0.7, 1.3]])
    assert np.allclose(law(X), 2.5 * X[:, 0] * X[:, 1] + X[:, 0] ** 2 / 3, rtol=1e-14)
    assert snapped.metric("valid") <= fitted.metric("valid") * 1.1
    assert snapped.equation in [c.equation for c in polish(fitted, ctx)]


def _candidate(equation: str, nmse: float, within_1: float, within_01: float, complexity: int) -> Candidate:
    metrics = {"valid": {"nmse": nmse, "frac_within_0.01": within_1, "frac_within_0.001": within_01}}
    return Candidate(expression=equation, params=[], equation=equation, complexity=complexity, metrics=metrics)


def test_the_ladder_selects_the_exact_law_over_a_closer_bulk_fit() -> None:
    exact = _candidate("law", 2e-6, 1.0, 0.97, 7)  # every point within 1 %, nearly all within 0.1 %
    close = _candidate("approximation", 5e-7, 0.99, 0.60, 15)  # lower bulk error, a tail that is off
    assert select([exact, close], "accuracy") is close
    assert select([exact, close], "ladder") is exact
    assert ladder_key(exact) < ladder_key(close)
