"""Search plans: nonsense in, a runnable plan and a list of what was changed out."""

from __future__ import annotations

import numpy as np
import pytest

from harness.core.context import AgentContext
from harness.core.task import Task
from harness.sr.plan import (
    DEFAULT_OPERATORS,
    PlanLimits,
    SearchPlan,
    default_plan,
    operators_in,
)
from harness.sr.plan_validation import validate_plan

VARS = ["x", "v"]


def joined(changes: list[str]) -> str:
    return "\n".join(changes)


@pytest.mark.parametrize("raw", [None, "", "not json at all", "{broken json", 42, ["add"]])
def test_unusable_input_gives_default_plan(raw):
    plan, changes = validate_plan(raw, VARS)
    assert plan.operators == list(DEFAULT_OPERATORS)
    assert plan.max_length == default_plan().max_length
    if raw not in (None, ""):
        assert changes and "default plan" in joined(changes)


def test_valid_plan_round_trips_without_changes():
    plan = SearchPlan(operators=["add", "sub", "mul", "div", "exp"], max_length=25, seeds=["v*x"],
                      features={"r": "x/v"}, loss="relative", seed=3)
    again, changes = validate_plan(plan, VARS)
    assert changes == []
    assert again == plan


def test_nonsense_dict_is_repaired_and_every_repair_reported():
    raw = {
        "ops": ["+", "*", "sin(x)", "np.exp", "foo", 3, "sigmoid"],
        "maxsize": "500",
        "time": "5 seconds",
        "population": 7.6,
        "hypotheses": ["y = 2*x*v", "x**", "import os", "c0*exp(-c1*v)", "3", "__import__('os')"],
        "features": ["r = x*v", "log(v)", "c0*x", "zz", "exp = x/v"],
        "loss": "mae",
        "seed": "abc",
        "constraints": "keep it positive",
        "junk": {"a": 1},
    }
    plan, changes = validate_plan(raw, VARS)
    text = joined(changes)
    assert plan.operators[:4] == ["add", "sub", "mul", "div"]
    assert "sin" in plan.operators and "exp" in plan.operators
    assert "'foo'" in text and "'sigmoid'" in text and "dropped operator 3" in text
    assert plan.max_length == PlanLimits().max_length and "clipped" in text
    assert plan.time_budget == 5.0
    assert plan.population_size == PlanLimits().min_population
    assert plan.seeds == ["2*v*x", "c0*exp(-c1*v)"]
    assert "syntax error" in text and "uses no input variable" in text
    assert plan.features["r"] == "v*x" and "log(v)" in plan.features.values()
    assert "x/v" in plan.features.values() and "exp" not in plan.features  # reserved name renamed
    assert "free parameters" in text and "unknown name 'zz'" in text
    assert plan.loss == "mse" and "unknown loss" in text
    assert plan.seed == 0 and "not an integer" in text
    assert plan.constraints == ["keep it positive"]
    assert "ignored unknown field 'junk'" in text


def test_pysr_style_operator_lists_and_json_text():
    plan, changes = validate_plan('Here: {"binary_operators": ["+", "-", "*", "/", "^"], '
                                  '"unary_operators": ["cos", "square"], "max_length": 2.0}', VARS)
    assert plan.operators == ["add", "sub", "mul", "div", "pow", "cos", "square"]
    assert plan.max_length == PlanLimits().min_length
    assert any("clipped" in c for c in changes)


def test_limits_are_configurable():
    plan, changes = validate_plan({"max_length": 40, "time_budget": 100, "seeds": ["x", "v", "x*v"]}, VARS,
                                  {"max_length": 20, "max_time": 3, "max_seeds": 2})
    assert (plan.max_length, plan.time_budget, len(plan.seeds)) == (20, 3.0, 2)
    assert len(changes) == 3


def test_operators_in_reads_a_seed():
    assert operators_in("x**3 + sin(x)/v - sqrt(v) + x**2.5", VARS) >= {"add", "mul", "div", "sin", "sqrt", "pow"}


def test_nonsense_plan_still_runs():
    rng = np.random.default_rng(1)
    X = rng.uniform(1, 2, (120, 2))
    task = Task.from_arrays(X, X[:, 0] * X[:, 1] + 1, input_names=VARS, name="plan_runs")
    from harness.sr.backends import run_search

    out = run_search({"operators": "blah, +", "max_length": -3, "time_budget": "1", "generations": 3,
                      "population_size": 50, "seeds": ["nonsense("], "what": 1}, AgentContext(task))
    assert out.error is None and out.candidates and out.best is not None
    assert any("blah" in c for c in out.plan_changes) and any("nonsense" in c for c in out.plan_changes)
