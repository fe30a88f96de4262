"""Tool boundary of the SR engines, the backend registry, and the hybrid LLM + Operon search."""

from __future__ import annotations

import json
import sys

import numpy as np

import harness.sr.tools  # noqa: F401  (registers the tools)
from harness.core.context import (
    AgentContext,
    Budget,
    BudgetTracker,
    evaluate_candidate,
)
from harness.core.task import Task
from harness.sr.backends import backend_names, run_search
from harness.sr.hybrid import run_hybrid
from harness.sr.plan import SearchPlan
from harness.sr.settings import SearchSettings
from harness.tools.base import TOOLS

QUICK = {"time_budget": 1, "generations": 3, "population_size": 40}


def make_task(fn=lambda X: 2.0 * X[:, 0] * X[:, 1] + 1.0, d=2, names=("x", "v"), n=150) -> Task:
    rng = np.random.default_rng(0)
    X = rng.uniform(0.5, 3, (n, d))
    Xt = rng.uniform(0.5, 3, (40, d))
    return Task.from_arrays(X, fn(X), input_names=list(names), name="tools_t", test_id=(Xt, fn(Xt)))


class FakeState:
    def __init__(self):
        self.added = []

    def add_candidates(self, cands):
        self.added += list(cands)


def tools_for(ctx):
    return TOOLS.create(["run_sr_search", "evaluate_expression"], ctx)


def test_tools_are_registered_with_schemas():
    assert {"run_sr_search", "evaluate_expression"} <= set(TOOLS.names())
    schema = TOOLS.get("run_sr_search").openai_schema()["function"]
    assert {"operators", "max_length", "time_budget", "seeds", "features", "loss"} <= set(schema["parameters"]["properties"])
    assert TOOLS.get("evaluate_expression").openai_schema()["function"]["parameters"]["required"] == ["expression"]
    assert set(backend_names()) == {"operon", "pysr", "llm", "hybrid", "auto"}


def test_search_tool_with_nonsense_plan_runs_and_reports_changes():
    ctx = AgentContext(make_task())
    ctx.state = FakeState()
    res = tools_for(ctx)["run_sr_search"](call_id="1", operators=["+", "*", "warp_drive"], max_length=999,
                                          seeds=["x*v", "import os"], junk_key=1, **QUICK)
    assert res.ok, res.error
    text = res.result_str
    assert len(text) <= TOOLS.get("run_sr_search").result_str_limit
    assert "warp_drive" in text and "clipped" in text and "junk_key" in text and "import os" in text
    assert "valid NMSE" in text and "test" not in text.lower()  # test metrics never reach the model
    assert res.result["candidates"] and res.result["best"]["metrics"]["valid"]["nmse"] < 1e-10
    assert ctx.state.added and len(ctx.state.added) == len(res.result["candidates"])
    json.dumps(res.to_record())  # the trace record serialises


def test_search_tool_bad_argument_types_fail_cleanly():
    tools = tools_for(AgentContext(make_task()))
    res = tools["run_sr_search"](call_id="2", max_length="thirty", operators="add")
    assert not res.ok and "invalid arguments" in res.result_str and len(res.result_str) < 400


def test_evaluate_expression_tool():
    ctx = AgentContext(make_task())
    ctx.state = FakeState()
    tools = tools_for(ctx)
    good = tools["evaluate_expression"](call_id="3", expression="c0*x*v + c1")
    assert good.ok and "valid NMSE" in good.result_str and ctx.state.added
    assert good.result["candidate"]["metrics"]["valid"]["nmse"] < 1e-20
    bad = tools["evaluate_expression"](call_id="4", expression="x*y + __import__('os')")
    assert not bad.ok and "ExpressionError" in bad.result_str and "unknown name 'y'" in bad.result_str
    assert len(bad.result_str) <= TOOLS.get("evaluate_expression").result_str_limit


def test_backend_comes_from_the_context_search_settings(monkeypatch):
    monkeypatch.setitem(sys.modules, "pysr", None)
    ctx = AgentContext(make_task(), search=SearchSettings(backend="pysr"))
    res = tools_for(ctx)["run_sr_search"](call_id="5", **QUICK)
    assert not res.ok and "pip install" in res.result_str
    ctx = AgentContext(make_task(), search=SearchSettings(backend="auto"))
    res = tools_for(ctx)["run_sr_search"](call_id="6", **QUICK)
    assert res.ok and "fell back to operon" in res.result_str


def test_spent_budget_is_an_error_result():
    ctx = AgentContext(make_task(), budget=BudgetTracker(Budget(max_solver_runs=0)))
    res = tools_for(ctx)["run_sr_search"](call_id="7", **QUICK)
    assert not res.ok and "BudgetExhausted" in res.result_str


def test_unknown_backend_is_reported():
    out = run_search(QUICK, AgentContext(make_task()), backend="quantum")
    assert out.error.startswith("unknown backend") and not out.candidates


SEEDED = (lambda X: 1.7 * X[:, 0] * np.exp(-0.8 * X[:, 1]) * np.sin(X[:, 2]) + 0.3)


def test_hybrid_pools_given_proposals_with_operon():
    ctx = AgentContext(make_task(SEEDED, 3, ("x0", "x1", "x2")))
    proposals = [evaluate_candidate("c0*x0*exp(c1*x1)*sin(x2) + c2", ctx, source="llm"),
                 evaluate_candidate("c0*x0 + c1", ctx, source="llm")]
    run = run_hybrid(SearchPlan(generations=2, population_size=60), ctx, max_seconds=3, proposals=proposals)
    sources = {c.source for c in run.candidates}
    assert {"llm", "operon"} <= sources
    assert run.info["n_llm_injected"] == 2
    operon = min((c for c in run.candidates if c.source == "operon"), key=lambda c: c.sort_key())
    assert operon.metric("valid") < 1e-10


def test_hybrid_backend_with_a_scripted_model():
    from tests.doubles import ScriptedLLM

    reply = json.dumps({"equations": [{"expression": "c0*x0*exp(c1*x1)*sin(x2) + c2", "reason": "decay"}]})
    ctx = AgentContext(make_task(SEEDED, 3, ("x0", "x1", "x2")), llm=ScriptedLLM([reply], cycle=True))
    out = run_search({**QUICK, "time_budget": 3}, ctx, backend="hybrid")
    assert out.error is None and out.backend_used == "hybrid"
    assert any(c.source == "llm" for c in out.candidates) and any(c.source == "operon" for c in out.candidates)
    assert out.best.metric("valid") < 1e-10 and ctx.budget.llm_calls >= 1 and ctx.budget.solver_runs == 1


def test_hybrid_without_a_model_still_searches():
    out = run_search(QUICK, AgentContext(make_task()), backend="hybrid")
    assert out.error is None and out.candidates
    assert any("no language model" in w for w in out.warnings)
    llm_only = run_search(QUICK, AgentContext(make_task()), backend="llm")
    assert "needs a language model" in llm_only.error
