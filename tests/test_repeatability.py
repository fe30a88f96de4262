"""One evaluation, one outcome: the main job run twice with the same seed on the same machine freezes the same
harness when its training runs are bound by work (optimize.work_rate), and does not when they are bound by seconds."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from harness.app.artifact import FrozenHarness
from tests.test_optimize_app import TINY, run_app


def test_the_same_seed_freezes_the_same_harness_when_training_runs_are_bound_by_work(tmp_path):
    """Two runs of the main job with the same seed on the same machine: with work-bound training evaluations
    (optimize.work_rate; each SR run ends after its generations, its seconds only a guard) every evaluation has
    one outcome, so both runs score the same, decide the same and freeze the same harness."""
    # the engine's own generations cap off (TINY's 20 would bound the runs by work already): training runs of
    # 0.05 s, bound by 20 generations each with the work rate, the seconds a guard
    timed = [a for a in TINY if not a.startswith("backend.generations=")]
    # guards wide enough that a busy machine (the suite's other worker) never reaches one: the toy's shares are
    # fractions of a second (the precision polish's cap is 0.25 s x the guard)
    work = ["optimize.work_rate=400", "optimize.time_guard=100"]
    folders = [tmp_path / "first", tmp_path / "second"]
    for folder in folders:
        run_app("stage=all", *timed, *work, f"hydra.run.dir={folder}")
    frozen = [FrozenHarness.load(f / "harness.json") for f in folders]
    assert frozen[0].identity_digest == frozen[1].identity_digest

    def outcomes(folder: Path) -> list[tuple]:
        with sqlite3.connect(folder / "evals.db") as conn:
            return sorted(conn.execute("SELECT digest, task, seed, stage, score FROM evals").fetchall())

    first, second = outcomes(folders[0]), outcomes(folders[1])
    assert first and first == second  # every (harness, task, seed) scored alike, in every stage
    for name in ("stage2_search.json", "freeze.json"):
        a, b = (json.loads((f / name).read_text()) for f in folders)
        if name == "freeze.json":
            keys = ("verdict", "wins", "ties", "losses", "mean_diff", "pairs")
            assert [a["gate"]["paired"][k] for k in keys] == [b["gate"]["paired"][k] for k in keys]
        else:
            assert a["chosen"] == b["chosen"]
    with sqlite3.connect(folders[0] / "evals.db") as conn:  # and no training run reached its seconds guard
        records = [json.loads(r[0]) for r in conn.execute("SELECT record FROM evals")]
    assert records and not any(r.get("guard_hits") for r in records)
