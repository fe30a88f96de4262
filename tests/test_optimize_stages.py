"""Each optimizer stage end to end with the real workflow runner, Operon (tiny) and the scripted toy model.

The toy (tests/doubles.py): the Planner only writes the right hypothesis when its instruction holds the magic
phrase or the Analyst's hint is in its prompt; the prompt engineer's rewrites add the phrase. So stage 1 and
stage 3 must find the phrase, and stage 2 must turn the Analyst on when the pool has no phrase.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from optimize.context import build_context
from optimize.settings import OptimizeSettings
from optimize.stage1 import run_stage1
from optimize.stage2 import run_stage2
from optimize.stage3 import run_stage3
from optimize.tasks import TaskSets
from tests import doubles as toy
from tests.doubles import SCRIPTED, ScriptedLLM
from workflows.params import WorkflowParams

SR = {"name": "operon", "time_budget": 1.0, "population_size": 50, "generations": 20, "max_length": 20,
      "operators": toy.TOY_SR_FLOOR,
      "combine_terms": False, "unguided_run": False, "sparse_regression": False}
TASKS = TaskSets(toy.toy_tasks(5), toy.toy_tasks(2, offset=100))


def make_ctx(tmp_path: Path, overrides: dict):
    from tests.optimize_standins import MECHANICS, merged

    settings = OptimizeSettings.model_validate(merged(MECHANICS, overrides))  # the toy's five tasks: one pair decides
    llm = ScriptedLLM(fn=toy.respond)
    llm_config = {"provider": SCRIPTED, "extra": {"fn": "tests.doubles:respond"}}
    ctx = build_context(tmp_path, settings, llm_config=llm_config, backend_config=SR, benchmark_config={}, llm=llm,
                        tasks=TASKS)
    return ctx, llm


def test_stage1_finds_the_planner_phrase(tmp_path):
    ctx, llm = make_ctx(tmp_path, {"stage1": {"groups": [["planner"], ["analyst"]], "n_candidates": 2,
                                               "minibatch": 2, "pool_size": 2}})
    result = run_stage1(ctx)
    planner = result["groups"][0]
    assert planner["candidates"][0]["origin"].startswith("rewrite") and planner["candidates"][0]["score"] == 1.0
    assert planner["candidates"][1]["score"] == 0.0
    assert toy.PHRASE in result["best_prompts"]["planner"]
    assert toy.PHRASE not in result["pool"]["planner"][1]
    assert result["solver_runs"] == 2 * 2 * (1 + 1)  # candidates x tasks x (planner + analyst local workflows)
    assert any("prompt engineer" in r["messages"][0]["content"] for r in llm.requests)
    assert (tmp_path / "trace.jsonl").exists() and any((tmp_path / "runs" / "init").rglob("nodes.jsonl"))


def test_stage2_switches_the_analyst_on(tmp_path):
    ctx, _ = make_ctx(tmp_path, {"stage2": {"n_trials": 5, "n_startup_trials": 3, "minibatch": 2, "adapt_steps": 0,
                                             "bounds": {"branches": [1, 1], "repair_rounds": [0, 1],
                                                        "discussion_rounds": [0, 0], "use_synthesizer": [False]}}})
    pool = {role: [text] for role, text in ctx.base.prompts.items()}  # no phrase anywhere: only the workflow helps
    result = run_stage2(ctx, pool)
    assert result["n_trials_complete"] == 5
    accs = {tuple(t["workflow"]): t["acc"] for t in result["trials"] if t["state"] == "COMPLETE"}
    assert all(acc == (1.0 if w[0] else 0.0) for w, acc in accs.items())  # no SR choice is searched: the Analyst
    assert result["chosen"]["workflow"][0] == 1 and result["chosen"]["acc"] == 1.0  # alone solves the toy
    [race] = result["confirmation"]
    assert race["verdict"] == "accepted" and race["wins"] == race["n"] == 3  # the 5 tasks less the 2 screened
    assert not {tuple(p) for p in race["pairs"]} & {tuple(p) for p in result["screening_pairs"]}
    assert (tmp_path / "optuna.db").exists()


def test_stage2_adaptation_keeps_a_better_rewrite(tmp_path):
    ctx, _ = make_ctx(tmp_path, {"stage2": {"n_trials": 1, "minibatch": 2, "adapt_steps": 1, "adapt_roles": 1,
                                             "bounds": {"branches": [1, 1], "repair_rounds": [0, 0],
                                                        "discussion_rounds": [0, 0], "use_analyst": [False],
                                                        "use_synthesizer": [False], "role_samples": [1, 1],
                                                        "role_tools": [False], "sparse_regression": None}}})
    result = run_stage2(ctx, {role: [text] for role, text in ctx.base.prompts.items()})
    assert result["chosen"]["start"] and result["confirmation"] == []  # its one trial is the start: nothing to race
    assert result["adaptation"][0]["kept"] and result["adaptation"][0]["verdict"] == "accepted"
    assert result["minibatch_score"] == 1.0
    assert toy.PHRASE in result["harness"]["prompts"]["planner"]


@pytest.mark.parametrize("feedback", ["sr_diagnostics", "traces"])
def test_stage3_refines_the_planner(tmp_path, feedback):
    ctx, llm = make_ctx(tmp_path, {"stage3": {"steps": 1, "minibatch": 1, "holdout": 2, "feedback": feedback}})
    start = ctx.base.with_workflow(WorkflowParams.from_tuple((0, 1, 0, 0, 0)))
    result = run_stage3(ctx, start)
    assert result["members"][0]["holdout_score"] == 0.0 and result["holdout_score"] == 1.0
    assert toy.PHRASE in result["harness"]["prompts"]["planner"]
    reflection = [r for r in llm.requests if "reflection model" in r["messages"][0]["content"]]
    assert len(reflection) == 1
    user = reflection[0]["messages"][1]["content"]
    if feedback == "traces":
        assert "[role:planner" in user and "[sr" in user
    else:
        assert "selected" in user and "candidates:" in user


def test_rewrites_come_from_the_reflection_model_of_their_own(tmp_path):
    """GEPA's reflection_lm: stage-1 rewrites go to optimize.reflection_llm, role calls to the harness's model."""
    reflection = {"provider": SCRIPTED, "model": "reflector", "extra": {"fn": "tests.doubles:respond"}}
    ctx, llm = make_ctx(tmp_path, {"reflection_llm": reflection,
                                   "stage1": {"groups": [["planner"]], "n_candidates": 2, "minibatch": 1,
                                              "pool_size": 2}})
    result = run_stage1(ctx)
    assert toy.PHRASE in result["best_prompts"]["planner"]  # the rewrite arrived and won
    assert ctx.reflection_llm is not None and ctx.reflection_llm.usage.calls >= 1
    assert not any("prompt engineer" in r["messages"][0]["content"] for r in llm.requests)
    assert llm.requests  # the role calls stayed on the harness's model
