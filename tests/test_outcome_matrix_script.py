"""The outcome-matrix script continues a matrix from its export when the run folder is gone, and only then."""

from __future__ import annotations

import argparse
import importlib.util
from pathlib import Path
from types import SimpleNamespace

import pytest

from optimize.matrix import Outcome, OutcomeMatrix

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "outcome_matrix.py"
spec = importlib.util.spec_from_file_location("outcome_matrix_script", SCRIPT)
script = importlib.util.module_from_spec(spec)
spec.loader.exec_module(script)


def args(**changes) -> argparse.Namespace:
    base = dict(out="runs/m", suite="lsr_synth_laws", per_domain=1, seeds=[0, 1], time_scale=0.05, work_rate=2.3,
                time_guard=20.0, arms=None, space=False)
    return argparse.Namespace(**{**base, **changes})


class NothingCached:
    """An evaluator whose cache holds nothing (a fresh run folder)."""
    time_guard = 20.0
    cache = SimpleNamespace(get=lambda *key: None)

    def as_run(self, spec):
        return spec


def test_an_export_resumes_only_the_same_matrix_and_is_written_again_with_the_new_outcomes(tmp_path) -> None:
    arms = {"initial": SimpleNamespace(identity_digest="sha256:a"),
            "shipped": SimpleNamespace(identity_digest="sha256:b")}
    tasks = [SimpleNamespace(name="CRK1", domain="chemistry", fingerprint=lambda: "f")]
    header = script.header_of(NothingCached(), arms, tasks, args())
    earlier = tmp_path / "earlier.jsonl"
    OutcomeMatrix([Outcome("initial", "CRK1", 0, "chemistry", {"test_id": {"log_nmse": 3.0}})],
                  {**header, "machine": "another CPU, 2 cores"}).save(earlier)

    kept = script.resumed(earlier, header)  # the machine differs: still one matrix
    assert list(kept.outcomes) == [("initial", "CRK1", 0)]
    with pytest.raises(SystemExit, match="work_rate"):
        script.resumed(earlier, script.header_of(NothingCached(), arms, tasks, args(work_rate=4.0)))
    with pytest.raises(SystemExit, match="arms"):
        script.resumed(earlier, {**header, "arms": {"initial": "sha256:other", "shipped": "sha256:b"}})
    with pytest.raises(SystemExit, match="arms"):  # an arm dropped
        script.resumed(earlier, {**header, "arms": {"initial": "sha256:a"}})
    grown = {**header, "arms": {**header["arms"], "unguided+combine": "sha256:c"}}  # --space: arms added
    assert list(script.resumed(earlier, grown).outcomes) == [("initial", "CRK1", 0)]

    written = tmp_path / "again.jsonl"
    script.export(NothingCached(), arms, tasks, args(), written, kept)
    again = OutcomeMatrix.load(written)
    assert list(again.outcomes) == [("initial", "CRK1", 0)]  # nothing new was run: the earlier outcome, kept
    assert again.header["machine"].startswith("another CPU, 2 cores (the earlier outcomes); ")
