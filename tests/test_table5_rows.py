"""Table 5's rows come from a run's own freeze.json: the curve's means, the pairs against the start, and a stage that
accepted nothing named as such."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "table5_rows.py"
spec = importlib.util.spec_from_file_location("table5_rows", SCRIPT)
script = importlib.util.module_from_spec(spec)
spec.loader.exec_module(script)


def held(digest: str, hits: dict[str, tuple[float, float]], sa: float) -> dict:
    """A stage row whose held-out laws score acc_0.01 (ID, OOD) = hits[task] at seed 0 (every point: half that)."""
    tasks = {task: {"per_seed": {"0": {"acc_0.01_id": i, "acc_0.01_ood": o, "acc_all_0.01_id": i / 2,
                                       "acc_all_0.01_ood": o / 2, "acc_0.001_id": 0.0, "acc_0.001_ood": 0.0}}}
             for task, (i, o) in hits.items()}
    return {"digest": digest, "heldout": {"tasks": tasks, "sa": sa}}


def test_rows_from_a_run_folder(tmp_path) -> None:
    run = tmp_path / "runs" / "small_real_s0"
    run.mkdir(parents=True)
    rows = {"baseline": held("a", {"CRK1": (0.0, 0.0), "PO2": (1.0, 0.0)}, 0.0),
            "init": held("a", {"CRK1": (0.0, 0.0), "PO2": (1.0, 0.0)}, 0.0),
            "search": held("b", {"CRK1": (1.0, 1.0), "PO2": (1.0, 0.0)}, 0.5),
            "default": held("c", {"CRK1": (1.0, 0.0), "PO2": (1.0, 1.0)}, 0.5)}
    (run / "freeze.json").write_text(json.dumps({"rows": rows, "picked_stage": "search", "selected_stage": "default",
                                                 "heldout_seconds_per_run": 60.0}))
    (run / "harness.json").write_text(json.dumps({"provenance": {"seeds": [0], "heldout_tasks": ["CRK1", "PO2"],
                                                                 "preset": "small", "start": "initial",
                                                                 "settings": {"work_rate": 2.3}}}))
    out = script.table5_rows(run, "2026-12-07", "python -m optimize optimize=small")
    by = {r["harness"]: r for r in out}
    assert list(by) == ["initial harness (the start)", "after stage 1 (nothing accepted: the harness before it)",
                        "after stage 2 (the trained harness)", "shipped default (frozen by the gate)"]
    trained = by["after stage 2 (the trained harness)"]
    assert trained["acc_0.01"] == {"id": 1.0, "ood": 0.5} and trained["acc_all_0.01"] == {"id": 0.5, "ood": 0.25}
    assert trained["paired_vs_start"] == "2 / 2 / 0, 2 / 2 / 0" and trained["highlight"]
    assert by["after stage 1 (nothing accepted: the harness before it)"]["paired_vs_start"] == "the same harness"
    assert "CRK1, PO2" in trained["conditions"] and "60 s SR runs" in trained["conditions"]

    store = tmp_path / "results.jsonl"
    store.write_text(json.dumps({"table": "table5", "command": "python -m optimize optimize=small hydra.run.dir=x"})
                     + "\n")
    for _ in range(2):  # a second write replaces this run's rows, keeps the others
        assert script.main([str(run), "--write", str(store), "--command", "python -m optimize optimize=small"]) == 0
    assert len(store.read_text().splitlines()) == 1 + 4
