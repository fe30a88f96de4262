"""Every registered SR and analysis tool, called by the R-C-L-K agent (scripted model), and one run of the agent
with the real embedded model (marked ``llm``)."""

from __future__ import annotations

import json

import numpy as np
import pytest

import harness.sr.llm_generator  # noqa: F401  (registers llm_equation_search)
import harness.sr.tools  # noqa: F401
import harness.tools.analysis_tools  # noqa: F401
import harness.tools.code_tools  # noqa: F401
from harness.core.context import AgentContext, BudgetTracker, FitSettings
from harness.core.task import Task
from harness.runtime.agent import AgentConfig, SRAgent
from harness.runtime.state import NODES_FILE
from harness.sr.plan import PlanLimits
from harness.sr.settings import SearchSettings
from tests.doubles import ScriptedLLM

ARGUMENTS = {
    "run_sr_search": {"operators": ["add", "mul", "sin"], "max_length": 12, "time_budget": 1,
                      "seeds": ["c0*x*sin(t)"], "population_size": 30, "generations": 5},
    "evaluate_expression": {"expression": "c0*x*sin(t) + c1*x"},
    "residual_diagnostics": {"expression": "c0*x*sin(t)"},
    "llm_equation_search": {"rounds": 1, "n_per_round": 2},
    "summary_statistics": {},
    "correlations": {},
    "monotonicity": {},
    "periodicity": {},
    "power_law": {},
    "run_python": {"code": "print(df.shape, round(float(np.corrcoef(df['x'], df.iloc[:, -1])[0, 1]), 3))"},
}


@pytest.fixture(scope="module")
def task() -> Task:
    rng = np.random.default_rng(1)
    x, t = rng.uniform(0.5, 3, 300), np.linspace(0, 10, 300)
    return Task.from_arrays(np.column_stack([x, t]), 1.5 * x * np.sin(t) + 0.3 * x, name="toy",
                            input_names=["x", "t"], input_descriptions=["amplitude", "time"])


def test_every_tool_runs_from_the_agent(task, tmp_path):
    """The scripted model calls each tool once; every call succeeds and reaches the model as a tool message."""
    script = [{"tool_calls": [{"name": name, "arguments": args}]} for name, args in ARGUMENTS.items()]

    def generator_reply(messages, **kwargs):  # the llm_equation_search tool asks the same client for equations
        return json.dumps({"equations": [{"expression": "c0*x*sin(t) + c1*x", "reason": "product"}]})

    replies = iter(script)

    def model(messages, **kwargs):
        if kwargs.get("tools"):
            return next(replies)
        return generator_reply(messages, **kwargs)

    llm = ScriptedLLM(fn=model)
    context = AgentContext(task=task, fit=FitSettings(n_starts=2, max_seconds=1.0), budget=BudgetTracker(), llm=llm)
    agent = SRAgent(llm, context, AgentConfig(L=len(script), target_nmse=None, tools=list(ARGUMENTS)),
                    run_dir=tmp_path / "run")
    result = agent.run()
    nodes = [json.loads(x) for x in (tmp_path / "run" / NODES_FILE).read_text().splitlines()]
    results = [r for n in nodes for r in n["tool_results"]]
    assert [r["tool_name"] for r in results] == list(ARGUMENTS)
    failed = {r["tool_name"]: r["error"] for r in results if not r["ok"]}
    assert failed == {}
    assert all(0 < len(r["result_str"]) <= 2000 for r in results)
    assert result.best is not None and result.best.metrics["valid"]["nmse"] < 1e-8


@pytest.mark.llm
def test_agent_with_the_embedded_model(task, tmp_path):
    """SmolLM2 through llama.cpp drives one agent step: its grammar-constrained reply is a call of a real tool."""
    from harness.llm.config import LLMConfig
    from harness.llm.factory import make_llm

    llm = make_llm(LLMConfig(provider="local", model="smollm2-135m-instruct", max_tokens=200, temperature=0.2,
                             timeout_s=240))
    context = AgentContext(task=task, fit=FitSettings(n_starts=2, max_seconds=1.0), budget=BudgetTracker(), llm=llm)
    context.search = SearchSettings(limits=PlanLimits(max_time=2.0, max_population=50, max_generations=20))
    config = AgentConfig(L=1, tools=["evaluate_expression", "run_sr_search"], parser="native", max_tokens=200)
    result = SRAgent(llm, context, config, run_dir=tmp_path / "run").run()
    nodes = [json.loads(x) for x in (tmp_path / "run" / NODES_FILE).read_text().splitlines()]
    assert result.responses == 1 and len(nodes) == 1
    calls = nodes[0]["tool_results"]
    assert calls, f"the constrained reply held no tool call: {nodes[0]['response'][:300]!r} {nodes[0]['error']}"
    assert calls[0]["tool_name"] in {"evaluate_expression", "run_sr_search"}
    # a well-formed call of a real tool: it either ran, or came back with a reason the model can act on
    assert calls[0]["ok"] or calls[0]["error"]
    assert (tmp_path / "run" / "result.json").exists()
