"""LLM-SR-style generator with the scripted test model: good, hostile and malformed proposals."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from harness.core.candidates import Candidate
from harness.core.context import AgentContext, Budget, BudgetExhausted, BudgetTracker
from harness.core.task import Split, Task
from harness.sr.llm_generator import (
    ExperienceBuffer,
    equations_response_format,
    generate_equations,
    parse_proposals,
)
from harness.tools.base import TOOLS
from tests.doubles import ScriptedLLM

GOOD = "c0*x1 + c1*x2**2"  # the true form of y = 2 x1 + x2^2
WEAK = "c0*x1 + c1"
MALFORMED = "c0*x1 +* ("


def _task() -> Task:
    rng = np.random.default_rng(0)
    X = rng.uniform(-1, 1, (80, 2))
    return Task(name="toy", domain="test", input_names=["x1", "x2"], input_descriptions=["first", "second"],
                target_name="y", target_description="response", train=Split(X, 2 * X[:, 0] + X[:, 1] ** 2))


def _reply(*exprs: str, tokens: int = 10) -> dict:
    body = {"equations": [{"expression": e, "reason": f"try {i}"} for i, e in enumerate(exprs)]}
    return {"text": json.dumps(body), "prompt_tokens": tokens, "completion_tokens": tokens}


def _context(budget: Budget | None = None) -> AgentContext:
    return AgentContext(_task(), budget=BudgetTracker(budget))


def _cand(expr: str, nmse: float, complexity: int = 5) -> Candidate:
    return Candidate(expression=expr, params=[], equation=expr, complexity=complexity,
                     metrics={"valid": {"nmse": nmse}})


# -- buffer and parsing -----------------------------------------------------------------------------------------
def test_buffer_keeps_best_bounded_and_deduped():
    buf = ExperienceBuffer(capacity=2)
    assert buf.add(_cand("a", 0.5))
    assert not buf.add(_cand("a", 0.9))  # same skeleton, worse
    assert buf.add(_cand("a", 0.1))  # same skeleton, better: replaces
    assert buf.add(_cand("b", 0.3))
    assert not buf.add(_cand("c", 0.7))  # worse than both, capacity 2
    assert not buf.add(_cand("d", math.inf))
    assert [c.expression for c in buf.candidates] == ["a", "b"] and len(buf) == 2
    text = buf.as_prompt_text(1)
    assert text.startswith("1. a") and "nmse 0.1" in text and "\n" not in text


def test_buffer_ties_break_on_complexity():
    buf = ExperienceBuffer()
    buf.extend([_cand("long", 0.2, complexity=9), _cand("short", 0.2, complexity=3)])
    assert buf.best().expression == "short"


def test_parse_proposals_json_and_text_fallback():
    text = 'Sure!\n```json\n{"equations": [{"expression": "c0*x1", "reason": "linear"}, ' \
           '{"expression": "c0*exp(x2)", "reason": "growth"}]}\n```'
    assert parse_proposals(text, 5) == [("c0*x1", "linear"), ("c0*exp(x2)", "growth")]
    assert parse_proposals(text, 1) == [("c0*x1", "linear")]
    plain = "Here are ideas:\n1. y = c0*x1 + c1\n- c0*sin(x2)\nThis one is physical."
    assert parse_proposals(plain, 4) == [("c0*x1 + c1", ""), ("c0*sin(x2)", "")]
    assert parse_proposals("", 3) == []


def test_response_format_schema():
    fmt = equations_response_format(3)
    schema = fmt["json_schema"]["schema"]
    assert fmt["type"] == "json_schema"
    assert schema["properties"]["equations"]["maxItems"] == 3
    assert schema["properties"]["equations"]["items"]["properties"]["expression"]["maxLength"] == 300


# -- generation -------------------------------------------------------------------------------------------------
def test_generate_fits_good_rejects_hostile_and_repairs(tmp_path):
    marker = tmp_path / "pwned"
    hostile = f"__import__('os').system('touch {marker}')"
    llm = ScriptedLLM([_reply(GOOD, hostile, MALFORMED, WEAK), _reply("c0*x1 + c1*cos(x2)")])
    ctx = _context()
    buf = ExperienceBuffer()
    cands = generate_equations(ctx, n=4, llm=llm, buffer=buf)

    assert not marker.exists()  # the hostile text was never run
    by_expr = {c.expression: c for c in cands}
    best = cands[0]
    assert best.expression == GOOD and best.source == "llm" and best.metric("valid", "nmse") < 1e-8
    assert best.params == pytest.approx([2.0, 1.0], abs=1e-6) and best.info["reason"] == "try 0"
    assert WEAK in by_expr and len(cands) == 3  # good, weak, and the repaired proposal
    assert any(c.info["round"] == 2 for c in cands)

    reasons = {r.expression: r.reason for r in buf.rejections}
    assert "function calls" in reasons[hostile]
    assert "syntax error" in reasons[MALFORMED]

    first, repair = llm.requests
    assert first["response_format"]["json_schema"]["schema"]["properties"]["equations"]["maxItems"] == 4
    assert "Task: toy" in first["messages"][-1]["content"]
    repair_prompt = repair["messages"][-1]["content"]
    assert "__import__" in repair_prompt and "function calls" in repair_prompt and "syntax error" in repair_prompt
    assert repair["messages"][-2]["role"] == "assistant"

    assert buf.best().expression == GOOD
    assert ctx.budget.llm_calls == 2 and ctx.budget.tokens == 40


def test_next_call_sees_best_and_rejections():
    llm = ScriptedLLM([_reply(WEAK, "c0*foo(x1)"), _reply(MALFORMED), _reply(GOOD)])
    ctx = _context()
    buf = ExperienceBuffer()
    generate_equations(ctx, n=2, llm=llm, buffer=buf)  # round 1 + repair (which fails again)
    cands = generate_equations(ctx, n=2, llm=llm, buffer=buf, feedback="residual depends on x2")
    prompt = llm.requests[2]["messages"][-1]["content"]
    assert "Best equations so far" in prompt and WEAK in prompt
    assert "unknown function 'foo'" in prompt and "residual depends on x2" in prompt
    assert [c.expression for c in cands] == [GOOD]
    assert buf.best().expression == GOOD and len(buf) == 2
    assert ctx.budget.llm_calls == 3


def test_duplicate_proposal_is_reported_not_refitted():
    llm = ScriptedLLM([_reply(GOOD), _reply(GOOD, "x1*c0 + x2**2*c1"), _reply(WEAK)])
    ctx = _context()
    buf = ExperienceBuffer()
    generate_equations(ctx, n=1, llm=llm, buffer=buf)
    second = generate_equations(ctx, n=2, llm=llm, buffer=buf)
    assert [c.expression for c in second] == [WEAK]  # both duplicates rejected, the repair gave WEAK
    assert any("duplicate" in r.reason for r in buf.rejections)


def test_budget_checked_before_calling():
    llm = ScriptedLLM([_reply(MALFORMED), _reply(GOOD)])
    ctx = _context(Budget(max_llm_calls=1))
    assert generate_equations(ctx, n=1, llm=llm) == []  # repair skipped: budget spent after one call
    assert len(llm.requests) == 1 and ctx.budget.llm_calls == 1
    with pytest.raises(BudgetExhausted):
        generate_equations(ctx, n=1, llm=llm)
    assert len(llm.requests) == 1


def test_plain_text_reply_and_empty_reply():
    llm = ScriptedLLM(["I think y = c0*x1 + c1*x2**2", "no idea", "nothing"])
    ctx = _context()
    assert generate_equations(ctx, n=2, llm=llm)[0].expression == GOOD
    buf = ExperienceBuffer()
    assert generate_equations(ctx, n=2, llm=llm, buffer=buf) == []
    assert "no equation found" in buf.rejections[0].reason


# -- tool -------------------------------------------------------------------------------------------------------
def test_llm_equation_search_tool():
    ctx = _context()
    ctx.llm = ScriptedLLM([_reply(WEAK, "c0*bad("), _reply("c0*x1 + c1*abs(x2)"), _reply(GOOD)])
    tool = TOOLS.get("llm_equation_search")(ctx)
    res = tool(call_id="t1", rounds=2, n_per_round=2, feedback="look at x2")
    assert res.ok, res.error
    assert res.result["llm_calls"] == 3 == ctx.budget.llm_calls
    assert res.result["candidates"][0]["expression"] == GOOD
    assert 0 < len(res.result_str) <= 1500 and "rejected" in res.result_str
    assert Candidate.from_record(res.result["candidates"][0]).metric() < 1e-8
    # a later call continues from the same buffer; the script is exhausted, so the first round fails
    again = tool(rounds=1)
    assert not again.ok and "LLMError" in again.error
    assert "rounds" in TOOLS.get("llm_equation_search").tool_parameters()["properties"]


def test_plan_reaches_prompt():
    from harness.sr.plan import default_plan

    llm = ScriptedLLM([_reply(GOOD)])
    plan = default_plan(operators=["add", "mul", "square"], seeds=["c0*x1 + c1"])
    generate_equations(_context(), plan, n=1, llm=llm)
    prompt = llm.requests[0]["messages"][-1]["content"]
    assert "Operators to use: add, mul, square" in prompt and "c0*x1 + c1" in prompt


def test_a_reply_cut_at_its_time_cap_keeps_its_complete_equations() -> None:
    """A call that hit its time cap returns the JSON it had: every complete expression field is kept."""
    cut = '{"equations": [{"expression": "c0*x1 + c1", "reason": "linear"}, {"expression": "c0*x2**2", "rea'
    assert parse_proposals(cut, 4) == [("c0*x1 + c1", "linear"), ("c0*x2**2", "")]
    assert parse_proposals(cut[:40], 4) == []
