"""The per-domain bench script pools run folders with the compact solves it wrote earlier, and pairs arms."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "bench_domains.py"
spec = importlib.util.spec_from_file_location("bench_domains", SCRIPT)
bench_domains = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bench_domains)


def record(arm: str, task: str, seed: int, acc: float) -> dict:
    split = {"acc_0.01": acc, "acc_all_0.01": acc, "acc_0.001": acc, "nmse": 1e-9}
    return {"arm": arm, "task": task, "seed": seed, "metrics": {"test_id": split, "test_ood": split}}


def write(path: Path, records: list[dict]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")


def test_a_solves_file_pools_with_a_run_folder_and_the_later_source_wins(tmp_path) -> None:
    solves = tmp_path / "solves.jsonl"
    write(solves, [record("default harness", "CRK0", 0, 1.0), record("default harness", "PO7", 1, 0.0),
                   record("engine alone", "CRK0", 0, 0.0)])
    run = tmp_path / "run_s1"
    run.mkdir()
    write(run / "results.jsonl", [record("harness", "PO7", 1, 1.0), record("engine", "PO7", 1, 1.0)])
    arms = bench_domains.load_arms([f"default harness=default harness@{solves},harness@{run}",
                                    f"engine alone=engine alone@{solves},engine@{run}"])
    assert sorted(arms["default harness"]) == [("CRK0", 0), ("PO7", 1)]
    assert arms["default harness"][("PO7", 1)]["metrics"]["test_id"]["acc_0.01"] == 1.0  # the run folder's record
    p = bench_domains.paired(arms["engine alone"], arms["default harness"], "acc_0.01")
    assert (p["wins"], p["ties"], p["losses"]) == (0, 2, 2)  # CRK0 lost on both splits, PO7 tied on both
