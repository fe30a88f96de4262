"""Prompt rewrites (optimize.rewrite): garbage is refused with a reason, a structured answer is read, a model that
writes nothing usable gives no rewrite."""

from __future__ import annotations

import pytest

from optimize.rewrite import RewriteSettings, check_instruction, propose_rewrite
from tests.doubles import ScriptedLLM
from tests.optimize_standins import PHRASE, SEED_PROMPTS, engineer


@pytest.mark.parametrize("text, reason", [
    ("", "empty"), ("short", "too short"), ("x" * 3000, "too long"), ("1234 5678 " * 20, "mostly non-letters"),
    ("plan plan plan plan plan plan plan plan plan plan plan plan plan", "repetitive"),
    ('{"instruction": "alpha beta gamma delta epsilon zeta eta theta iota kappa"}', "looks like raw JSON"),
])
def test_garbage_rewrites_are_rejected(text, reason):
    assert reason in (check_instruction(text, "current instruction", RewriteSettings()) or "")


def test_propose_rewrite_parses_structured_output_and_falls_back_to_none():
    settings = RewriteSettings(min_chars=20)
    good = propose_rewrite(ScriptedLLM(fn=engineer), "planner", SEED_PROMPTS["planner"], "feedback", settings=settings)
    assert good.text and PHRASE in good.text and good.text.startswith("You are the Planner")
    llm = ScriptedLLM(["", "!!!! ????", '{"instruction": ""}'], cycle=True)
    bad = propose_rewrite(llm, "planner", SEED_PROMPTS["planner"], "feedback", settings=settings)
    assert bad.text is None and bad.attempts == 2 and bad.reason
    req = llm.requests[0]
    assert req["response_format"]["json_schema"]["schema"]["properties"]["instruction"]["maxLength"] == 2500


