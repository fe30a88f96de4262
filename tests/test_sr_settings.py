"""Typed engine settings (harness/sr/settings.py): built once, carried as ``AgentContext.search``, and what reaches
the engine is what the harness's settings say; bad values fail with a message that names them; one LLM counter."""

from __future__ import annotations

import numpy as np
import pytest
from pydantic import ValidationError

from harness.core.candidates import Candidate
from harness.core.context import AgentContext, BudgetTracker, evaluate_candidate
from harness.core.task import Task
from harness.runtime.agent import AgentConfig, SRAgent
from harness.sr import backends
from harness.sr.backends import EngineRun
from harness.sr.plan import PlanLimits, SearchPlan
from harness.sr.settings import EngineSettings, SearchSettings, search_settings
from tests.doubles import ScriptedLLM
from workflows.params import SRSettings
from workflows.runner import run_workflow

SEEN: list[dict] = []


def capture_engine(plan: SearchPlan, context: AgentContext, *, max_seconds: float) -> EngineRun:
    """A stand-in engine (in-process): records what reached it and answers with one fitted equation."""
    SEEN.append({"plan": plan, "max_seconds": max_seconds, "search": context.search})
    return EngineRun(candidates=[evaluate_candidate("c0*x0 + c1", context, source="capture")])


@pytest.fixture()
def capture(monkeypatch):
    SEEN.clear()
    monkeypatch.setitem(backends.BACKENDS, "capture", f"{__name__}:capture_engine")
    return SEEN


def make_task() -> Task:
    rng = np.random.default_rng(0)
    X = rng.uniform(1, 2, size=(80, 2))
    return Task.from_arrays(X, 2 * X[:, 0] + X[:, 1] ** 2, name="settings", input_names=["x0", "x1"])


def test_the_settings_reach_the_engine_with_their_values(capture) -> None:
    """Every SR run of a workflow runs the harness's numbers: time, population, length, depth, the floor's
    operators plus at most max_extra_operators, the engine seed, and the engine gets the plan's seconds."""
    settings = SRSettings(time_budget=7, population_size=77, generations=33, max_length=21, max_depth=6,
                          operators=["add", "sub", "mul", "div"], max_extra_operators=1, unguided_run=True,
                          combine_terms=False)
    plan_json = '{"hypotheses": ["c0*x0 + c1*x1**2"], "operators": ["sin", "exp"], "features": [], "rationale": "r"}'
    result = run_workflow(make_task(), (0, 1, 0, 0, 0), None, ScriptedLLM([plan_json]), backend="capture",
                          sr_settings=settings, seed=3)
    assert result.solver_runs == 2 and len(capture) == 2
    expected = settings.search_settings("capture")
    for seen in capture:
        plan = seen["plan"]
        assert isinstance(plan, SearchPlan) and seen["search"] == expected
        assert (plan.time_budget, plan.population_size, plan.generations, plan.max_length, plan.max_depth) == \
            (7, 77, 33, 21, 6)
        assert plan.operators[:4] == ["add", "sub", "mul", "div"] and len(plan.operators) <= 5
        assert seen["max_seconds"] == 7
    unguided = [s["plan"] for s in capture if not s["plan"].seeds]
    assert unguided == [settings.floor().model_copy(update={"seed": 3})]  # the floor, from the one module
    guided = next(s["plan"] for s in capture if s["plan"].seeds)
    assert guided.operators == ["add", "sub", "mul", "div", "sin"]  # one extra operator, as the settings allow
    assert guided.seed != 3 and guided.seeds == ["c0*x0 + c1*x1**2"]


def test_the_agent_and_the_workflow_build_their_settings_with_one_function() -> None:
    from harness.app.cli import agent_search_settings

    settings = SRSettings(time_budget=5, max_length=20, max_extra_operators=2)
    agent = agent_search_settings({"name": "PySR", **settings.model_dump()})
    assert agent == settings.search_settings("pysr", floor=False)
    assert agent.floor is None and agent.limits.max_time == 5 and agent.limits.max_length == 20
    workflow = settings.search_settings("operon")
    assert workflow.floor == settings.floor() and workflow.limits == agent.limits
    assert workflow.max_extra_operators == 2


def test_bad_settings_are_rejected_with_a_clear_error() -> None:
    from harness.app.cli import agent_search_settings

    with pytest.raises(ValueError, match="unknown SR backend 'quantum'; choose one of"):
        agent_search_settings({"name": "quantum"})
    with pytest.raises(ValidationError, match="max_extra_operators"):
        agent_search_settings({"name": "operon", "max_extra_operators": 11})
    with pytest.raises(ValidationError, match="unknown operators"):
        EngineSettings(operators=["add", "tanhh"])
    with pytest.raises(ValidationError, match="backend must name an SR engine"):
        SearchSettings(backend=" ")
    with pytest.raises(ValidationError, match="extra"):
        SearchSettings(plan_floor=SearchPlan())
    ctx = AgentContext(make_task())
    assert search_settings(ctx) == SearchSettings()  # none given: limits only, the default engine
    ctx.search = {"backend": "operon"}  # type: ignore[assignment]
    with pytest.raises(TypeError, match="must be a SearchSettings"):
        search_settings(ctx)


def test_a_model_call_is_admitted_under_the_context_settings(capture) -> None:
    """The agent's tool clips a greedy plan to the limits and widens it to the floor, then runs it as admitted."""
    from harness.sr.tools import RunSRSearchTool

    floor = SearchPlan(operators=["add", "sub", "mul", "div", "sin"], time_budget=4, population_size=60, max_length=20)
    ctx = AgentContext(make_task(), search=SearchSettings(backend="capture", floor=floor, max_extra_operators=0,
                                                          limits=PlanLimits(max_time=4, max_length=25)))
    call = RunSRSearchTool(ctx)(call_id="1", operators=["add", "exp"], time_budget=100, max_length=90,
                                population_size=10)
    assert call.ok, call.error
    plan = capture[0]["plan"]
    assert (plan.time_budget, plan.max_length, plan.population_size) == (4, 25, 60)
    assert plan.operators == floor.operators  # the floor's, and no extra one (max_extra_operators=0)
    assert any("clipped" in c for c in call.result["plan_changes"])


def test_the_agent_reads_its_responses_from_the_one_llm_counter(tmp_path) -> None:
    """``AgentResult.responses`` is the rise of the budget's LLM-call count over the run, not a second tally."""
    budget = BudgetTracker()
    budget.add_llm(5)  # something else already used this budget
    ctx = AgentContext(make_task(), budget=budget)
    llm = ScriptedLLM(["no tool call", "still none"])
    result = SRAgent(llm, ctx, AgentConfig(L=2, tools=["evaluate_expression"], target_nmse=None),
                     run_dir=tmp_path / "run").run()
    assert result.responses == 2 and budget.llm_calls == 7
    assert isinstance(result.best, (Candidate, type(None)))
