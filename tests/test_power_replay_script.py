"""power_replay replays a matrix still being built on the seeds asked for: a partial second seed no longer shrinks
the replay to the few tasks complete at both, nor breaks it."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from optimize.matrix import Outcome, OutcomeMatrix

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "power_replay.py"
spec = importlib.util.spec_from_file_location("power_replay_script", SCRIPT)
script = importlib.util.module_from_spec(spec)
spec.loader.exec_module(script)


def outcome(arm: str, task: str, seed: int, nmse: float) -> Outcome:
    split = {"nmse": nmse, "acc_0.01": float(nmse < 1e-6), "acc_all_0.01": 0.0, "acc_0.001": 0.0,
             "frac_within_0.01": 0.5}
    return Outcome(arm=arm, task=task, seed=seed, metrics={"test_id": split, "test_ood": dict(split)}, guard_hits=0)


def test_a_partial_seed_is_left_out_when_the_replay_names_its_seeds(tmp_path, capsys) -> None:
    tasks = [f"T{i}" for i in range(8)]
    rows = []
    for arm, factor in (("initial", 1.0), ("shipped", 1e-3), ("combine", 1.0)):  # shipped: 3 decades better
        rows += [outcome(arm, t, 0, factor * 10.0 ** -(i % 3)) for i, t in enumerate(tasks)]
        rows += [outcome(arm, t, 1, factor * 0.5) for t in tasks[:2]]  # seed 1: two tasks so far
    path = tmp_path / "m.jsonl"
    OutcomeMatrix(rows, {"command": "test"}).save(path)
    common = ["--matrix", str(path), "--preset", "quick", "--replays", "5", "--stage2-replays", "5",
              "--smac-replays", "0", "--out", str(tmp_path / "t.md")]

    assert script.main(common) == 0
    assert "3 arms x 2 training tasks x 2 seeds = 4 complete pairs" in capsys.readouterr().out
    assert script.main([*common, "--seeds", "0"]) == 0  # replayed on seed 0's 8 tasks, seed 1's pairs left out
    out = capsys.readouterr().out
    assert "3 arms x 8 training tasks x 1 seeds = 8 complete pairs" in out
    assert "Outcomes with a step stopped by seconds: 0 of 30." in out
    assert "| shipped | " in out and "8 / 0 / 0" in out  # shipped's record over seed 0's pairs only


def test_stage_2_is_replayed_over_the_choices_as_the_stage_suggests_them(tmp_path, capsys) -> None:
    import optuna
    import pytest

    from optimize.matrix import space_arms
    from optimize.replay import suggest_arm
    from optimize.settings import Bounds

    trial = optuna.trial.FixedTrial({"unguided_run": True, "combine_terms": False, "operators": "basic+pow",
                                     "sparse_regression": True})
    assert suggest_arm(trial, [], Bounds()) == "unguided+pow+sparse"
    none = optuna.trial.FixedTrial({"unguided_run": False, "combine_terms": False, "operators": "basic",
                                    "sparse_regression": False})
    assert suggest_arm(none, [], Bounds()) == "initial"

    tasks = [f"T{i}" for i in range(12)]
    rows = [outcome(arm, t, s, (1e-4 if "unguided" in arm or arm == "all_four" else 1.0) * 10.0 ** -(i % 3))
            for arm in [*space_arms(), "shipped"] for i, t in enumerate(tasks) for s in (0, 1)]
    path = tmp_path / "space.jsonl"
    OutcomeMatrix(rows, {"command": "test"}).save(path)
    common = ["--matrix", str(path), "--preset", "quick", "--replays", "2", "--stage2-replays", "10",
              "--smac-replays", "0", "--out", str(tmp_path / "t.md"), "--set", "tasks.n_train=8",
              "--set", "stage2.race_pairs=8"]
    assert script.main([*common, "--space"]) == 0
    ended = capsys.readouterr().out.split("Where each ended (the matrix): ")[1].splitlines()[0]
    assert "shipped" not in ended  # the stage cannot reach another prompt: only the 16 combinations are replayed
    assert "unguided" in ended or "all_four" in ended

    partial = tmp_path / "partial.jsonl"
    OutcomeMatrix([r for r in rows if r.arm in ("initial", "shipped")], {"command": "test"}).save(partial)
    with pytest.raises(SystemExit, match="lacks"):
        script.main([*common, "--matrix", str(partial), "--space"])


def test_a_replay_on_the_jobs_own_tasks_judges_the_arms_on_every_pair(tmp_path, capsys) -> None:
    import pytest

    tasks = [f"T{i}" for i in range(8)]
    rows = []
    for arm, factor in (("initial", 1.0), ("shipped", 1e-3), ("combine", 1.0)):
        rows += [outcome(arm, t, 0, factor * 10.0 ** -(i % 3)) for i, t in enumerate(tasks)]
        rows += [outcome(arm, t, 1, factor * 0.5) for t in tasks[:3]]  # seed 1: the job's three tasks
    path = tmp_path / "m.jsonl"
    OutcomeMatrix(rows, {"command": "test"}).save(path)
    common = ["--matrix", str(path), "--preset", "quick", "--replays", "5", "--stage2-replays", "5",
              "--smac-replays", "0", "--out", str(tmp_path / "t.md")]

    assert script.main([*common, "--tasks", "T0", "T1", "T2"]) == 0
    out = capsys.readouterr().out
    assert "3 arms x 3 training tasks x 2 seeds = 6 complete pairs" in out  # the worlds: the named tasks only
    assert "judged over all 11 complete pairs" in out
    assert "| shipped | " in out and "11 / 0 / 0" in out  # the truth: seed 0's 8 pairs and seed 1's 3
    with pytest.raises(SystemExit, match="T5 not complete"):
        script.main([*common, "--tasks", "T0", "T5"])  # T5 has no seed-1 outcome


def test_the_stage_2_shapes_record_finds_a_dominant_arm_and_ranks_it_first(tmp_path, capsys) -> None:
    shapes_path = Path(__file__).resolve().parents[1] / "scripts" / "records" / "stage2_shapes.py"
    spec2 = importlib.util.spec_from_file_location("stage2_shapes", shapes_path)
    shapes = importlib.util.module_from_spec(spec2)
    spec2.loader.exec_module(shapes)
    tasks = [f"T{i}" for i in range(20)]
    rows = [outcome(arm, t, s, (1e-6 if arm == "all_four" else 1.0) * 10.0 ** -(i % 3))
            for arm in ("initial", "all_four", "combine", "pow") for i, t in enumerate(tasks) for s in (0, 1)]
    path = tmp_path / "m.jsonl"
    OutcomeMatrix(rows, {"command": "test"}).save(path)
    assert shapes.main(["--matrix", str(path), "--replays", "4", "--trials", "4", "--screen", "2", "--top", "1",
                        "--race", "12", "--ceiling", "2"]) == 0
    out = capsys.readouterr().out
    assert "better than initial: all_four" in out
    assert "| 10 | 6 | 2 | 24 | 1.000 |" in out  # small's own shape: six decades on every pair, every replay finds it
    assert "| 2 | 8 | 1.000 |" in out  # and two screening pairs rank it first
