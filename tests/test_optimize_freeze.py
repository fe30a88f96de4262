"""The freeze gate: only a harness that wins its race against the shipped default is frozen, at the solve budget,
on validation tasks; what the report says when it lost or the evidence was too thin; the quick preset can accept."""

from __future__ import annotations

import pytest

from harness.app.artifact import FrozenHarness
from harness.core.task import TaskError
from workflows.harness import Harness

from tests.optimize_standins import PHRASE, context, planner_rule


# -- freeze: only what wins, at the solve budget -------------------------------------------------------------
def _fake_stage(ctx, stage: str, harness: Harness) -> None:
    ctx.folder.save_stage(stage, {"stage": stage, "harness": harness.to_dict()})


def test_freeze_keeps_the_seed_when_the_trained_harness_does_not_win(tmp_path):
    from optimize.freeze import run_freeze

    seen_seconds = []

    def rule(params, prompts, task):  # the trained prompt is worse: it loses every task
        return "worse" not in prompts["planner"]

    ctx, runner = context(tmp_path, rule, {"train_time_scale": 0.1, "freeze": {"time_scale": 0.5}})
    original = runner.__call__

    def spy(task, params, prompts, llm, **kw):
        seen_seconds.append(kw["sr_settings"].time_budget)
        return original(task, params, prompts, llm, **kw)

    ctx.evaluator._runner = spy
    trained = ctx.base.with_prompts(planner=ctx.base.prompts["planner"] + " worse")
    _fake_stage(ctx, "search", trained)
    result = run_freeze(ctx)
    assert result["picked_stage"] == "baseline"  # training-scale scores already prefer the seed
    assert result["selected_stage"] == "default" and result["gate"]["winner"] == "default"
    frozen = FrozenHarness.load(ctx.folder.harness_path)
    assert frozen.description() == ctx.default  # the shipped default is what gets frozen
    solve = ctx.base.settings.time_budget
    assert solve * 0.1 in seen_seconds and solve * 0.5 in seen_seconds  # stage curve vs gate
    assert frozen.sr_settings.time_budget == solve  # never the training shortcut


def test_freeze_says_a_trained_harness_that_lost_its_pairs_lost_them(tmp_path):
    from optimize.freeze import run_freeze

    def rule(params, prompts, task):  # the trained prompt loses every task
        return "worse" not in prompts["planner"]

    ctx, _ = context(tmp_path, rule, {"freeze": {"train": False}})
    _fake_stage(ctx, "refine", ctx.base.with_prompts(planner=ctx.base.prompts["planner"] + " worse"))
    gate = run_freeze(ctx)["gate"]
    assert gate["winner"] == "default" and gate["paired"]["losses"] > gate["paired"]["wins"]
    assert "too thin" not in gate["reason"]  # lost, not undecided
    assert "fell behind" in gate["reason"] or "lost more pairs than it won" in gate["reason"]


def test_freeze_gates_a_pick_that_only_wins_at_training_scale(tmp_path):
    from optimize.freeze import run_freeze

    ctx, _ = context(tmp_path, lambda p, pr, t: 1.0)  # everyone solves everything: no improvement possible
    trained = ctx.base.with_prompts(planner=ctx.base.prompts["planner"] + " " + PHRASE)
    _fake_stage(ctx, "refine", trained)
    result = run_freeze(ctx)
    assert result["picked_stage"] == "refine"  # ties go to the later stage at training scale ...
    assert result["gate"]["winner"] == "default" and result["selected_stage"] == "default"  # a tie never wins
    assert result["gate"]["verdict"] == "too thin" and result["gate"]["paired"]["ties"] == 2  # all its pairs tied
    assert "the evidence is too thin" in result["gate"]["reason"] and "scored higher" not in result["gate"]["reason"]


def test_freeze_takes_a_trained_harness_that_wins(tmp_path):
    from optimize.freeze import run_freeze
    from optimize.report import write_report

    ctx, _ = context(tmp_path, planner_rule)
    trained = ctx.base.with_prompts(planner=ctx.base.prompts["planner"] + " " + PHRASE)
    _fake_stage(ctx, "refine", trained)
    result = run_freeze(ctx)
    ctx.folder.save_stage("freeze", result)
    assert result["gate"]["winner"] == "candidate" and result["selected_stage"] == "refine"
    assert FrozenHarness.load(ctx.folder.harness_path).description() == trained
    report = write_report(ctx.folder.path).read_text()
    first = report.index("## Held-out tasks: shipped default (start) → trained → shipped default")
    assert first < report.index("## What was frozen, and why") < report.index("## Stages")
    assert "| stage 3: refinement (trained, **frozen**) | 1.000 |" in report
    assert "| shipped default | 0.000 |" in report and (ctx.folder.path / "score_per_stage.png").exists()


def test_freeze_decides_on_validation_tasks_a_pick_that_only_fits_its_training_tasks(tmp_path):
    """The stages chose the pick on the training tasks; the gate asks fresh tasks of the same distribution."""
    from optimize.freeze import run_freeze

    def rule(params, prompts, task):  # the trained prompt wins on the training tasks, loses on any other
        return (PHRASE in prompts["planner"]) == task.name.startswith("t")

    ctx, runner = context(tmp_path, rule, n_validation=3)
    trained = ctx.base.with_prompts(planner=ctx.base.prompts["planner"] + " " + PHRASE)
    _fake_stage(ctx, "refine", trained)
    result = run_freeze(ctx)
    assert result["picked_stage"] == "refine"  # best on the training tasks ...
    gate = result["gate"]
    assert gate["decided_on"] == "validation" and gate["winner"] == "default"  # ... not on fresh ones
    assert set(gate["default"]["validation"]["per_task"]) <= {"v0", "v1", "v2"} and "train" not in gate["default"]
    assert gate["verdict"] in ("behind", "cannot win") and gate["paired"]["wins"] == 0  # it lost where it was raced
    assert "validation tasks" in gate["reason"]
    frozen = FrozenHarness.load(ctx.folder.harness_path)
    assert frozen.description() == ctx.default and frozen.provenance["validation_tasks"] == ["v0", "v1", "v2"]


def test_the_quick_preset_accepts_a_clearly_better_candidate_at_every_decision(tmp_path):
    """The main job's own settings (quick.yaml: 8 training and 2 validation tasks, 2 seeds, races of 3-10 pairs) are
    able to accept: a Planner rewrite (stage 1), an SR choice (stage 2), a reflective rewrite (stage 3) and, at the
    gate, the trained harness over the shipped default, when each is clearly better (one level of -log10 NMSE per
    phrase, up to two, and one for the unguided run: every pair a win)."""
    from optimize.freeze import run_freeze
    from optimize.pipeline import run_stage
    from optimize.settings import load_preset

    def rule(params, prompts, task, agents, sr):
        level = min(prompts["planner"].count(PHRASE), 2) + bool(sr.unguided_run)
        return 1.0 - 10.0 ** -level  # the stand-in's NMSE is 1 - score: -log10 NMSE = level

    quick = load_preset("quick").model_dump()
    ctx, _ = context(tmp_path, rule, quick, n_train=quick["tasks"]["n_train"], n_validation=2, mechanics=False)
    assert ctx.settings.metric == "log_nmse" and ctx.race_seeds == [0, 1]
    s1 = run_stage(ctx, "init")
    assert s1["groups"][0]["candidates"][0]["rewrite"]["paired"]["verdict"] == "accepted"
    s2 = run_stage(ctx, "search")
    assert s2["confirmation"][0]["verdict"] == "accepted" and s2["chosen"]["unguided_run"] is True
    s3 = run_stage(ctx, "refine")
    assert [st["accepted"] for st in s3["steps"]] == [True]
    result = run_freeze(ctx)
    assert result["gate"]["verdict"] == "accepted" and result["selected_stage"] == "refine"
    frozen = FrozenHarness.load(ctx.folder.harness_path)
    assert frozen.prompts["planner"].count(PHRASE) == 2 and frozen.settings.unguided_run
    for race in (s1["groups"][0]["candidates"][0]["rewrite"]["paired"], s2["confirmation"][0],
                 s3["steps"][0]["paired"], result["gate"]["paired"]):
        assert race["clean_wins_needed"] is not None and race["clean_wins_needed"] <= race["max_pairs"]


def test_validation_tasks_are_a_disjoint_slice_of_the_training_suite():
    from optimize.tasks import load_task_sets

    spec = {"name": "s", "train": {"suite": "synthetic", "options": {"split": "train", "n_per_domain": 1}},
            "heldout": {"suite": "synthetic", "options": {"split": "test", "n_per_domain": 1, "seed": 9}}}
    sets = load_task_sets(spec, n_train=3, n_heldout=2, n_validation=3)
    names = sets.names()
    assert (len(names["train"]), len(names["validation"]), len(names["heldout"])) == (3, 3, 2)
    assert not set(names["train"]) & set(names["validation"])
    assert not (set(names["train"]) | set(names["validation"])) & set(names["heldout"])



def test_a_named_validation_split_and_a_fallback_when_the_benchmark_is_not_here(tmp_path):
    from optimize.tasks import load_task_sets

    spec = {"name": "s", "train": {"suite": "synthetic", "options": {"split": "train", "n_per_domain": 1}},
            "validation": {"suite": "synthetic", "options": {"split": "train", "n_per_domain": 1, "seed": 5}},
            "heldout": {"suite": "synthetic", "options": {"split": "test", "n_per_domain": 1, "seed": 9}}}
    sets = load_task_sets(spec, n_train=2, n_heldout=2, n_validation=2)
    validation = {t.name: t for t in sets.validation}
    assert len(validation) == 2 and all(t.metadata["seed"] == 5 for t in validation.values())
    assert sets.benchmark == "s" and not sets.note
    # the laws file is not on this "machine": the fallback benchmark is used, and the sets say so
    missing = {"name": "real", "train": {"suite": "lsr_synth_laws",
                                         "options": {"split": "train", "path": str(tmp_path / "absent.csv")}},
               "heldout": {"suite": "lsr_synth_laws", "options": {"split": "heldout", "path": str(tmp_path / "x.csv")}},
               "fallback": spec}
    used = load_task_sets(missing, n_train=2, n_heldout=1, n_validation=1)
    assert used.benchmark == "s" and "'real' needs files that are not on this machine" in used.note
    assert "absent.csv" in used.note and len(used.train) == 2
    with pytest.raises(TaskError, match="not found"):
        load_task_sets({k: v for k, v in missing.items() if k != "fallback"}, n_train=2, n_heldout=1)
