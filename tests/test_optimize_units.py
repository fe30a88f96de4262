"""Optimizer logic with a stand-in runner (no SR, no model): caching, budgets, rewrites, and each stage's choice.

The stand-in scores a run 1 when the Planner instruction holds the magic phrase (stages 1 and 3) or when the
workflow has the Analyst on (stage 2), so the right answer of every stage is known.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from optimize.evaluation import StageBudgetSpent
from optimize.records import EvalRecord, summarize
from optimize.settings import OptimizeSettings
from optimize.stage1 import run_stage1
from optimize.search_space import fixed_pool
from optimize.stage2 import choose, completed, run_stage2
from optimize.stage3 import Member, pareto_members, run_stage3
from optimize.tasks import minibatch, split_slice
from tests.doubles import ScriptedLLM
from workflows.harness import Harness
from workflows.params import WorkflowParams

from tests.optimize_standins import PHRASE, SEED_PROMPTS, context, make_tasks, planner_rule


# -- evaluation and cache -----------------------------------------------------------------------------------------
def test_evaluator_caches_per_digest_task_seed_and_survives_restart(tmp_path):
    ctx, runner = context(tmp_path, planner_rule)
    spec = ctx.base
    first = ctx.evaluator.evaluate(spec, ctx.tasks.train[:2], [0, 1], stage="init")
    assert (first.n_new, first.n_cached, runner.calls) == (4, 0, 4)
    again = ctx.evaluator.evaluate(spec, ctx.tasks.train[:2], [0, 1], stage="search")
    assert (again.n_new, again.n_cached, runner.calls) == (0, 4, 4)
    # a prompt of a role the workflow does not call does not change the digest
    assert spec.with_prompts(synthesizer="other").identity_digest == spec.identity_digest
    assert spec.with_prompts(planner="other").identity_digest != spec.identity_digest
    # a new process (new evaluator on the same folder) reuses the rows; the paying stage is kept
    ctx2, runner2 = context(tmp_path, planner_rule)
    assert ctx2.evaluator.evaluate(spec, ctx.tasks.train[:2], [0, 1], stage="refine").n_cached == 4
    assert runner2.calls == 0
    assert ctx2.evaluator.cumulative_solver_runs(("init", "search", "refine")) == {"init": 8, "search": 8, "refine": 8}
    lines = (tmp_path / "trace.jsonl").read_text().splitlines()
    assert len(lines) == 12 and json.loads(lines[-1])["cached"] is True


def test_the_run_folder_names_the_solve_a_dead_process_was_running(tmp_path, caplog):
    """in_flight/<host>_<pid>.json names each solve while it runs and is empty after; a process that died mid-solve
    (a native crash is no exception: simulated by the file a dead pid leaves) is named by the next one on the
    folder, which keeps the record in in_flight/stopped/; a live process sharing the folder is not."""
    import socket
    import subprocess
    import sys

    seen = []

    def rule(params, prompts, task):
        seen.append(json.loads(next((tmp_path / "in_flight").glob("*.json")).read_text()))
        return 1.0

    ctx, _ = context(tmp_path, rule)
    ctx.evaluator.evaluate(ctx.base, ctx.tasks.train[:1], [3], stage="init", label="planner seed")
    [during] = seen
    assert during["pid"] == os.getpid()
    assert [(r["stage"], r["label"], r["task"], r["seed"]) for r in during["runs"]] == [("init", "planner seed", "t0", 3)]
    assert json.loads(ctx.evaluator.in_flight.path.read_text())["runs"] == []
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    host = socket.gethostname()
    for pid in (int(dead.stdout), os.getppid()):  # a process that is gone, and one that is alive
        (tmp_path / "in_flight" / f"{host}_{pid}.json").write_text(json.dumps({"pid": pid, "runs": during["runs"]}))
    with caplog.at_level("WARNING"):
        context(tmp_path, rule)
    assert caplog.text.count("stopped without finishing: stage init, planner seed on t0 (seed 3") == 1
    assert (tmp_path / "in_flight" / "stopped" / f"{host}_{int(dead.stdout)}.json").exists()
    assert (tmp_path / "in_flight" / f"{host}_{os.getppid()}.json").exists()  # alive: not a stop


def test_stage_budget_stops_new_runs_but_not_cached_ones(tmp_path):
    ctx, runner = context(tmp_path, planner_rule, {"stage1": {"max_solver_runs": 4}})
    spec = ctx.base  # (0,1,1,0,0): 2 solver runs per task
    ctx.evaluator.evaluate(spec, ctx.tasks.train[:2], [0], stage="init")
    with pytest.raises(StageBudgetSpent):
        ctx.evaluator.evaluate(spec, ctx.tasks.train[2:3], [0], stage="init")
    assert ctx.evaluator.evaluate(spec, ctx.tasks.train[:2], [0], stage="init").n_cached == 2


def test_summary_is_mean_over_tasks_of_mean_over_seeds():
    recs = [EvalRecord("d", "a", 0, "init", 1.0, llm_calls=2), EvalRecord("d", "a", 1, "init", 0.0, llm_calls=2),
            EvalRecord("d", "b", 0, "init", 1.0, llm_calls=4)]
    s = summarize("d", recs)
    assert s.score == pytest.approx(0.75) and s.per_task == {"a": 0.5, "b": 1.0}
    assert s.llm_calls_per_task == pytest.approx(8 / 3)


def test_minibatches_are_seeded_and_slices_disjoint():
    tasks = make_tasks(6)
    assert [t.name for t in minibatch(tasks, 3, 0, "x")] == [t.name for t in minibatch(tasks, 3, 0, "x")]
    rest, held = split_slice(tasks, 2, 0, "refine")
    assert len(held) == 2 and not {t.name for t in rest} & {t.name for t in held}


# -- stages ---------------------------------------------------------------------------------------------------------
def test_stage1_finds_the_phrase_and_builds_the_pool(tmp_path):
    ctx, _ = context(tmp_path, planner_rule, {"stage1": {"n_candidates": 2, "minibatch": 2, "pool_size": 2}})
    result = run_stage1(ctx)
    assert PHRASE in result["best_prompts"]["planner"]
    assert result["pool"]["planner"][0] == result["best_prompts"]["planner"] and len(result["pool"]["planner"]) == 2
    planner = result["groups"][0]
    assert planner["workflow"] == [0, 1, 0, 0, 0] and planner["candidates"][0]["score"] == 1.0
    # 2 candidates x 2 tasks x (1 + 1 + 2 + 3) guided solver runs per local workflow, + the seed's unguided run each
    assert result["solver_runs"] == 2 * 2 * (7 + 4)
    # a rerun replays the journal and the cache: no new runs, same answer
    ctx2, runner2 = context(tmp_path, planner_rule, {"stage1": {"n_candidates": 2, "minibatch": 2, "pool_size": 2}},
                            llm=ScriptedLLM([], cycle=False))
    assert run_stage1(ctx2)["best_prompts"] == result["best_prompts"] and runner2.calls == 0


def test_stage2_finds_the_better_workflow_and_prompt(tmp_path):
    def rule(params, prompts, task):
        return params.use_analyst and PHRASE in prompts["planner"]

    overrides = {"stage2": {"n_trials": 10, "n_startup_trials": 4, "minibatch": 2, "adapt_steps": 0,
                            "bounds": {"branches": [1, 2], "repair_rounds": [0, 1], "discussion_rounds": [0, 1]}}}
    ctx, _ = context(tmp_path, rule, overrides)
    pool = {r: [t] for r, t in SEED_PROMPTS.items()}
    pool["planner"] = [SEED_PROMPTS["planner"], SEED_PROMPTS["planner"] + f" Use the {PHRASE}."]
    result = run_stage2(ctx, pool)
    assert result["n_trials_complete"] == 10
    assert result["chosen"]["acc"] == 1.0 and result["chosen"]["workflow"][0] == 1
    assert result["chosen"]["prompt_index"]["planner"] == 1
    # ties on accuracy go to the cheaper workflow among the complete trials
    best = choose(completed(__import__("optuna").load_study(study_name=ctx.settings.study_name,
                                                             storage=ctx.folder.storage_url())))
    assert best.number == result["chosen"]["trial"]
    winners = [t for t in result["trials"] if t["acc"] == 1.0]
    assert result["chosen"]["llm_calls_per_task"] == min(t["llm_calls_per_task"] for t in winners)


def test_stage2_resume_counts_complete_trials(tmp_path):
    overrides = {"stage2": {"n_trials": 3, "minibatch": 1, "adapt_steps": 0,
                            "bounds": {"branches": [1, 1], "repair_rounds": [0, 0], "discussion_rounds": [0, 0],
                                       "role_tools": [False], "role_samples": [1, 1]}}}
    ctx, _ = context(tmp_path, planner_rule, overrides)
    pool = {r: [t] for r, t in SEED_PROMPTS.items()}
    run_stage2(ctx, pool)
    overrides["stage2"]["n_trials"] = 5
    ctx2, runner2 = context(tmp_path, planner_rule, overrides)
    result = run_stage2(ctx2, pool)
    assert result["n_trials_complete"] == 5 and len(result["trials"]) == 5
    # the space holds two workflows only, so every new trial is a cache hit
    assert runner2.calls == 0


def test_stage2_searches_role_tools_and_samples_and_keeps_the_winner(tmp_path):
    """Scores reward a Planner with its tool: the search finds it, the chosen spec carries it into the runner."""
    from harness.runtime.role_agent import RoleAgentConfig
    
    def rule(params, prompts, task, agents):
        planner = agents.get("planner")
        return bool(planner and "evaluate_expression" in planner.tools)

    overrides = {"stage2": {"n_trials": 8, "minibatch": 1, "adapt_steps": 0, "n_startup_trials": 8,
                            "bounds": {"branches": [1, 1], "repair_rounds": [0, 0], "discussion_rounds": [0, 0],
                                       "use_analyst": [False], "use_synthesizer": [False],
                                       "role_tools": [False, True], "role_samples": [1, 2]}}}
    ctx, runner = context(tmp_path, rule, overrides)
    result = run_stage2(ctx, {r: [t] for r, t in SEED_PROMPTS.items()})
    params = [t["params"] for t in result["trials"]]
    assert all("tools_planner" in p and "role_samples" in p for p in params)
    assert result["chosen"]["role_agents"]["planner"]["tools"] == ["evaluate_expression"]
    spec = Harness.from_dict(result["harness"])
    assert spec.role_agents["planner"].tools == ("evaluate_expression",)
    assert any(isinstance(a.get("planner"), RoleAgentConfig) for a in runner.seen_agents)  # runs got the agent
    plain = spec.with_workflow(spec.workflow)
    assert plain.identity_digest == spec.identity_digest != spec.with_changes(role_agents={}).identity_digest


def test_stage2_searches_the_code_tool_for_the_roles_that_read_data(tmp_path):
    """Scores reward an Analyst with run_python: the switch is searched and the chosen harness carries it; the
    Planner never gets it (it is not a data-reading role)."""

    def rule(params, prompts, task, agents):
        analyst = agents.get("analyst")
        return bool(analyst and "run_python" in analyst.tools)

    overrides = {"stage2": {"n_trials": 6, "minibatch": 1, "adapt_steps": 0, "n_startup_trials": 6,
                            "bounds": {"branches": [1, 1], "repair_rounds": [0, 0], "discussion_rounds": [0, 0],
                                       "use_analyst": [True], "use_synthesizer": [False],
                                       "role_tools": [False], "role_samples": [1, 1], "code_tool": [False, True]}}}
    ctx, _ = context(tmp_path, rule, overrides)
    result = run_stage2(ctx, {r: [t] for r, t in SEED_PROMPTS.items()})
    assert all("code_tool" in t["params"] for t in result["trials"])
    assert {t["params"]["code_tool"] for t in result["trials"]} == {False, True}
    spec = Harness.from_dict(result["harness"])
    assert spec.role_agents["analyst"].tools == ("run_python",) and "planner" not in spec.role_agents


@pytest.mark.parametrize("channel, values", [("evolve_rounds", [0, 4]), ("residual_seconds", [0.0, 20.0]),
                                             ("continue_unguided", [False, True])])
def test_stage2_searches_an_sr_channel_only_when_its_bounds_say_so(tmp_path, channel, values):
    """Scores reward the channel (the evolution rounds, the residual run, the continuation): with two values in its bounds it is
    searched and the chosen harness carries the rewarded one; without bounds (the default) no parameter is made
    and the seed's setting stands."""

    def rule(params, prompts, task, agents, sr_settings):
        return getattr(sr_settings, channel) == values[1]

    bounds = {"branches": [1, 1], "repair_rounds": [0, 0], "discussion_rounds": [0, 0], "use_analyst": [False],
              "use_synthesizer": [False], "role_tools": [False], "role_samples": [1, 1]}
    overrides = {"stage2": {"n_trials": 6, "minibatch": 1, "adapt_steps": 0, "n_startup_trials": 6,
                            "bounds": {**bounds, channel: values}}}
    ctx, _ = context(tmp_path / "searched", rule, overrides)
    result = run_stage2(ctx, {r: [t] for r, t in SEED_PROMPTS.items()})
    assert {t["params"][channel] for t in result["trials"]} == set(values)
    assert result["chosen"][channel] == values[1]
    assert Harness.from_dict(result["harness"]).sr_settings.model_dump()[channel] == values[1]
    overrides["stage2"]["bounds"] = bounds
    ctx, _ = context(tmp_path / "seed", rule, overrides)
    result = run_stage2(ctx, {r: [t] for r, t in SEED_PROMPTS.items()})
    assert all(channel not in t["params"] for t in result["trials"])
    assert Harness.from_dict(result["harness"]).sr_settings.model_dump().get(channel, 0) == 0


def test_fixed_pool_space_is_a_seeded_presample(tmp_path):
    s = OptimizeSettings.model_validate({"stage2": {"space": "fixed_pool", "fixed_pool_size": 5}}).stage2
    assert fixed_pool(s, 0) == fixed_pool(s, 0) and len(set(fixed_pool(s, 0))) == 5
    ctx, _ = context(tmp_path, lambda p, pr, t: p.use_analyst,
                     {"stage2": {"space": "fixed_pool", "fixed_pool_size": 4, "n_trials": 6, "minibatch": 1,
                                 "adapt_steps": 0}})
    result = run_stage2(ctx, {r: [t] for r, t in SEED_PROMPTS.items()})
    assert "workflow_index" in result["trials"][0]["params"]
    assert tuple(result["chosen"]["workflow"]) in {tuple(w) for w in result["fixed_pool"]}


@pytest.mark.parametrize("feedback", ["sr_diagnostics", "traces"])
def test_stage3_keeps_a_rewrite_only_when_it_wins_on_the_holdout_slice(tmp_path, feedback):
    overrides = {"stage3": {"steps": 2, "minibatch": 1, "holdout": 2, "feedback": feedback}}
    ctx, _ = context(tmp_path, planner_rule, overrides, n_train=5)
    start = ctx.base.with_workflow(WorkflowParams.from_tuple((0, 1, 0, 0, 0)))
    result = run_stage3(ctx, start)
    assert result["members"][0]["holdout_score"] == 0.0
    assert PHRASE in result["harness"]["prompts"]["planner"] and result["holdout_score"] == 1.0
    assert result["steps"][0]["accepted"] and result["steps"][0]["role"] == "planner"
    assert set(result["holdout_tasks"]).isdisjoint(result["feedback_tasks"])


def test_stage3_rejects_rewrites_that_do_not_help(tmp_path):
    ctx, _ = context(tmp_path, lambda p, pr, t: 0.0, {"stage3": {"steps": 2, "minibatch": 1, "holdout": 2}})
    result = run_stage3(ctx, ctx.base.with_workflow(WorkflowParams.from_tuple((0, 1, 1, 0, 0))))
    assert len(result["members"]) == 1 and not any(s["accepted"] for s in result["steps"])
    assert [s["role"] for s in result["steps"]] == ["planner", "diagnoser"]  # round-robin over the roles in use


def test_pareto_set_keeps_per_task_winners_only():
    def member(scores):
        return Member(Harness(prompts=SEED_PROMPTS, workflow=WorkflowParams()), summarize("d", [
            EvalRecord("d", t, 0, "refine", s) for t, s in scores.items()]), None, None, None)

    members = [member({"a": 1, "b": 0}), member({"a": 0, "b": 1}), member({"a": 0, "b": 0}), member({"a": 1, "b": 0})]
    assert pareto_members(members) == {0: 1, 1: 1, 3: 1}


KILLED_WORKER = """
import os, signal, sys
import optuna
from optimize.shared_study import make_storage
study = optuna.create_study(storage=make_storage(sys.argv[1], 1, 2, 1), study_name="s", load_if_exists=True)

def objective(trial):
    trial.set_user_attr("worker", "elsewhere:1")
    x = trial.suggest_int("x", 0, 9)
    if trial.number == 1:
        os.kill(os.getpid(), signal.SIGKILL)  # dies inside its second trial, heartbeat running
    return x

study.optimize(objective, n_trials=3)
"""


def test_a_killed_workers_trial_is_retried_and_exactly_n_trials_complete(tmp_path):
    """Optuna's heartbeat fails the dead worker's RUNNING trial, the retry callback queues it with its parameters,
    and the waiting worker runs it: n_trials COMPLETE, never more."""
    import subprocess
    import sys

    import optuna

    from optimize.shared_study import make_storage, run_until_complete

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    url = f"sqlite:///{tmp_path / 'o.db'}"
    proc = subprocess.run([sys.executable, "-c", KILLED_WORKER, url], cwd=Path(__file__).resolve().parents[1])
    assert proc.returncode == -9
    study = optuna.load_study(storage=make_storage(url, 1, 2, 1), study_name="s")
    assert [t.state.name for t in study.trials] == ["COMPLETE", "RUNNING"]
    killed = study.trials[1]

    def objective(trial):
        trial.set_user_attr("worker", "here:2")
        return trial.suggest_int("x", 0, 9)

    run_until_complete(study, objective, 4, [], lambda: False)  # waits for the heartbeat to go stale
    states = [t.state.name for t in study.trials]
    assert states.count("COMPLETE") == 4 and states[1] == "FAIL" and "RUNNING" not in states
    retry = [t for t in study.trials if t.system_attrs.get("failed_trial") == killed.number]
    assert len(retry) == 1 and retry[0].state.name == "COMPLETE" and retry[0].params == killed.params


def test_slots_and_twins_come_from_the_study_records(tmp_path):
    import optuna
    from optuna.distributions import IntDistribution
    from optuna.trial import TrialState

    from optimize.shared_study import join, slots_taken, twin

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(storage=f"sqlite:///{tmp_path / 'o.db'}", study_name="s")
    dist = {"x": IntDistribution(0, 9)}

    def add(state, x, worker, value=None, **system_attrs):
        study.add_trial(optuna.create_trial(state=state, params={"x": x}, distributions=dist, value=value,
                                            user_attrs={"worker": worker}, system_attrs=system_attrs))

    add(TrialState.COMPLETE, 1, "a", 1.0)  # 0
    add(TrialState.RUNNING, 2, "a")  # 1
    add(TrialState.COMPLETE, 3, "b", 3.0)  # 2
    add(TrialState.RUNNING, 1, "b")  # 3: another worker's COMPLETE trial 0 holds x=1
    add(TrialState.RUNNING, 3, "b")  # 4: its own trial 2 holds x=3: a repeat, not a twin
    add(TrialState.RUNNING, 2, "b")  # 5: trial 1 (earlier, RUNNING, other worker) holds x=2
    add(TrialState.RUNNING, 1, "b", failed_trial=0)  # 6: a retry always runs
    trials = study.get_trials(deepcopy=False)
    assert twin(trials, 3).number == 0 and twin(trials, 4) is None and twin(trials, 5).number == 1
    assert twin(trials, 1) is None and twin(trials, 6) is None  # trial 5 is later than trial 1
    # slots: COMPLETE ones and RUNNING ones numbered earlier
    assert not slots_taken(trials, 3, 4) and slots_taken(trials, 4, 4)
    assert slots_taken(trials, 6, 6) and not slots_taken(trials, 6, 7)
    assert not join(study)  # only this process joined so far
    study.set_user_attr("worker/elsewhere:1", 0.0)
    assert join(study)


def test_cached_rows_are_rescored_for_another_metric(tmp_path):
    ctx, runner = context(tmp_path, planner_rule)
    ctx.evaluator.evaluate(ctx.base, ctx.tasks.train[:1], stage="init")
    ctx2, runner2 = context(tmp_path, planner_rule, {"metric": "nmse"})
    summary = ctx2.evaluator.evaluate(ctx.base, ctx.tasks.train[:1], stage="init")
    assert runner2.calls == 0 and summary.score == pytest.approx(1.0 + 1e-6)


def test_heartbeat_storage_runs_the_study(tmp_path):
    overrides = {"stage2": {"n_trials": 2, "minibatch": 1, "adapt_steps": 0, "heartbeat_interval": 1,
                            "bounds": {"branches": [1, 1], "repair_rounds": [0, 0], "discussion_rounds": [0, 0]}}}
    ctx, _ = context(tmp_path, planner_rule, overrides)
    assert run_stage2(ctx, {r: [t] for r, t in SEED_PROMPTS.items()})["n_trials_complete"] == 2


def test_score_split_may_average_id_and_ood(tmp_path):
    from optimize.records import split_score

    metrics = {"valid": {"acc_0.01": 1.0}, "test_id": {"acc_0.01": 1.0}, "test_ood": {"acc_0.01": 0.0}}
    assert split_score(metrics, "test_id", "acc_0.01") == (1.0, "test_id")
    assert split_score(metrics, "test_id+test_ood", "acc_0.01") == (0.5, "test_id+test_ood")
    assert split_score({"valid": {"acc_0.01": 0.25}}, "test_id+test_ood", "acc_0.01") == (0.25, "valid")
    assert split_score({"test_id": {"acc_0.01": 1.0}}, "test_id+test_ood", "acc_0.01") == (1.0, "test_id")
    with pytest.raises(ValueError, match="unknown score split"):
        OptimizeSettings.model_validate({"score_split": "test_id+ood"})
    # log_nmse: -log10 NMSE per split (clipped), a blown-up split is the worst, a missing equation predicts the mean
    logs = {"test_id": {"nmse": 1e-8}, "test_ood": {"nmse": float("inf")}}
    assert split_score(logs, "test_id", "log_nmse") == (pytest.approx(8.0), "test_id")
    assert split_score(logs, "test_id+test_ood", "log_nmse")[0] == pytest.approx((8.0 - 3.0) / 2)
    assert split_score({"test_id": {"nmse": 0.0}}, "test_id", "log_nmse")[0] == pytest.approx(16.0)
    # rows stored under an ID-only objective are rescored, not rerun, under ID+OOD (what they lack is left out)
    ctx, runner = context(tmp_path, planner_rule)
    ctx.evaluator.evaluate(ctx.base, ctx.tasks.train[:1], stage="init")
    ctx2, runner2 = context(tmp_path, planner_rule, {"score_split": "test_id+test_ood"})
    again = ctx2.evaluator.evaluate(ctx.base, ctx.tasks.train[:1], stage="init")
    assert runner2.calls == 0 and again.n_cached == 1




def test_a_guard_hit_is_any_step_that_seconds_ended_including_an_engine_killed_at_its_deadline() -> None:
    from types import SimpleNamespace

    from harness.sr.workers import PAST_DEADLINE
    from optimize.records import guard_hits

    def sr(asked, done, error=None):
        return SimpleNamespace(kind="sr", error=error, seconds=1.0, candidates=[],
                               info={"plan": {"generations": asked}, "engine": {} if done is None else {"generations": done}})

    killed = f"operon failed: EngineFailure: the engine {PAST_DEADLINE} (60s + 15s grace) and its process was killed"
    state = SimpleNamespace(nodes=[
        sr(7, 7),  # finished its work: no hit
        sr(7, 5),  # stopped short by seconds
        sr(7, None, error=killed),  # killed at its deadline: no generations recorded at all
        sr(7, None, error="operon failed: EngineFailure: the engine's process died (signal 11)"),  # a crash: not seconds
        SimpleNamespace(kind="combine", error=None, seconds=8.0, candidates=[], info={"cap_seconds": 8.0}),
        SimpleNamespace(kind="role:planner", error="planner: unparseable output", seconds=120.0, candidates=[],
                        info={"finish_reasons": ["timeout"]}),  # the model's answer cut at the client's deadline
        SimpleNamespace(kind="role:analyst", error=None, seconds=30.0, candidates=[],
                        info={"finish_reasons": ["length", "stop"]}),  # max_tokens is work, not seconds
    ])
    assert guard_hits(state) == 4
