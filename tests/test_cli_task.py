"""What a user says about their data on the command line: ``describe=``, ``inputs=``, ``task.json``, column-name
mistakes, and ``task.anonymize=true`` (no name or description of the task may reach any prompt)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from harness import FrozenHarness
from harness.app.cli import main as cli
from harness.core.anonymize import anonymize, rename_variables
from harness.core.task import Task
from tests import doubles
from tests.doubles import SCRIPTED

TINY = ["sr.time_budget=1", "sr.population_size=20", "sr.generations=3", "sr.max_length=15"]
RECORDING = [f"llm.provider={SCRIPTED}", "llm.extra={fn: tests.doubles.recording_role_output}"]


def _frame(n: int, seed: int, names: tuple[str, str, str] = ("x", "t", "y")) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    a, b = rng.uniform(1, 3, n), rng.uniform(-2, 2, n)
    return pd.DataFrame({names[0]: a, names[1]: b, names[2]: 2.5 * a * b + 1.2 * a**2})


def _prompts() -> str:
    """Every message of every request the recording double received, as one text."""
    return "\n".join(str(m.get("content") or "") for request in doubles.RECEIVED for m in request)


def _solve(tmp_path: Path, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, list[str]]:
    doubles.RECEIVED.clear()
    rc = cli(["solve", *args, f"hydra.run.dir={tmp_path / 'run'}"])
    captured = capsys.readouterr()
    return rc, [line for line in (captured.out + captured.err).splitlines() if line.strip()]


def test_describe_reaches_the_planners_prompt(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    csv = tmp_path / "my.csv"
    _frame(150, 0).to_csv(csv, index=False)
    rc, _ = _solve(tmp_path, capsys, f"data={csv}", "target=y",
                   'describe={x: "distance from the pivot", t: "time since release", y: "restoring force"}',
                   *RECORDING, *TINY)
    assert rc == 0
    planner = [req for req in doubles.RECEIVED if doubles.detect_role(req) == "planner"]
    assert planner, "the Planner was never called"
    text = "\n".join(str(m.get("content") or "") for m in planner[0])
    for description in ("distance from the pivot", "time since release", "restoring force"):
        assert description in text


def test_inputs_chooses_the_columns(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    csv = tmp_path / "my.csv"
    frame = _frame(150, 0)
    frame["noise"] = np.random.default_rng(3).normal(size=len(frame))
    frame.to_csv(csv, index=False)
    rc, _ = _solve(tmp_path, capsys, f"data={csv}", "target=y", "inputs=[x,t]", *RECORDING, *TINY)
    assert rc == 0
    result = json.loads((tmp_path / "run" / "run.json").read_text())
    assert result["task"]["input_names"] == ["x", "t"]
    assert "noise" not in _prompts()


@pytest.mark.parametrize("override, named", [
    ("target=force", "'force'"),
    ('describe={x: "distance", w: "width"}', "'w'"),
    ("inputs=[x,w]", "'w'"),
])
def test_a_wrong_column_name_is_rc_2_and_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                  override: str, named: str) -> None:
    csv = tmp_path / "my.csv"
    _frame(60, 0).to_csv(csv, index=False)
    rc, lines = _solve(tmp_path, capsys, f"data={csv}", override, *RECORDING)
    assert rc == 2
    assert len(lines) == 1 and lines[0].startswith("error:") and named in lines[0], lines
    assert not doubles.RECEIVED  # refused before any work
    assert not (tmp_path / "run" / "result.json").exists()


def _task_folder(tmp_path: Path, names: tuple[str, str, str], info: dict | None) -> Path:
    folder = tmp_path / "folder"
    folder.mkdir()
    _frame(150, 0, names).to_csv(folder / "train.csv", index=False)
    _frame(50, 1, names).to_csv(folder / "test_id.csv", index=False)
    _frame(50, 2, names).to_csv(folder / "test_ood.csv", index=False)
    if info is not None:
        (folder / "task.json").write_text(json.dumps(info))
    return folder


def test_task_json_of_a_folder_is_read_and_checked(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    info = {"name": "lever", "domain": "physics", "ground_truth": "2.5*x*t + 1.2*x**2",
            "descriptions": {"x": "arm length", "t": "applied load", "y": "torque"}}
    folder = _task_folder(tmp_path, ("x", "t", "y"), info)
    rc, _ = _solve(tmp_path, capsys, f"data={folder}", 'describe={t: "load on the arm"}', *RECORDING, *TINY)
    assert rc == 0
    run = json.loads((tmp_path / "run" / "run.json").read_text())["task"]
    assert (run["name"], run["domain"], run["ground_truth"]) == ("lever", "physics", "2.5*x*t + 1.2*x**2")
    assert run["input_descriptions"] == ["arm length", "load on the arm"]  # describe= overrides task.json
    assert run["target_description"] == "torque" and "arm length" in _prompts()

    for override, named in (("target=x", "'y'"), ('describe={w: "width"}', "'w'"), ("inputs=[x]", "inputs=")):
        rc, lines = _solve(tmp_path, capsys, f"data={folder}", override, *RECORDING)
        assert rc == 2 and len(lines) == 1 and named in lines[0], lines
    (folder / "task.json").write_text(json.dumps({"descriptions": {"x": "arm", "speed": "not a column"}}))
    rc, lines = _solve(tmp_path, capsys, f"data={folder}", *RECORDING)
    assert rc == 2 and len(lines) == 1 and "task.json" in lines[0] and "'speed'" in lines[0], lines
    (folder / "task.json").write_text(json.dumps({"descriptions": ["arm", "load"]}))
    rc, lines = _solve(tmp_path, capsys, f"data={folder}", *RECORDING)
    assert rc == 2 and len(lines) == 1 and "descriptions" in lines[0], lines


# -- anonymized ----------------------------------------------------------------------------------------------------
SECRETS = {
    "columns": ("zorblax_pressure", "quindle_volume", "flurbic_energy"),
    "descriptions": ("gauge reading of the Zorblax chamber", "volume of the Quindle vessel",
                     "energy stored in the flurbic spring"),
    "task": ("boyle_vortmann_law", "thermoquux", "pV equals the Vortmann quaxitude"),
}
DISTINCTIVE = ("zorblax", "quindle", "flurbic", "vortmann", "thermoquux", "quaxitude")  # in no prompt of ours


def test_anonymized_solve_sends_no_name_or_description_to_any_prompt(tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    info = {"name": SECRETS["task"][0], "domain": SECRETS["task"][1],
            "ground_truth": "2.5*zorblax_pressure*quindle_volume + 1.2*zorblax_pressure**2",
            "metadata": {"law": SECRETS["task"][2]},
            "descriptions": dict(zip(SECRETS["columns"], SECRETS["descriptions"]))}
    folder = _task_folder(tmp_path, SECRETS["columns"], info)
    # every role the workflow has: Analyst, two branches, a repair round, a discussion round, the Synthesizer
    everything = FrozenHarness.default().with_changes(workflow=(1, 2, 1, 1, 1)).save(tmp_path / "all_roles.json")
    rc, lines = _solve(tmp_path, capsys, f"harness={everything}", f"data={folder}", "task.anonymize=true",
                       *RECORDING, *TINY)
    assert rc == 0, lines
    roles = {doubles.detect_role(req) for req in doubles.RECEIVED}
    assert {"analyst", "planner", "diagnoser", "repairer", "synthesizer"} <= roles, roles
    text = _prompts().lower()
    for secret in (*SECRETS["columns"], *SECRETS["descriptions"], *SECRETS["task"], *DISTINCTIVE):
        assert secret.lower() not in text, f"{secret!r} reached a prompt"
    assert "x1" in text and "x2" in text  # the data did reach the model, under the new names
    run = tmp_path / "run"
    assert json.loads((run / "anonymization.json").read_text()) == {
        "original_name": SECRETS["task"][0],
        "names": {"x1": "zorblax_pressure", "x2": "quindle_volume", "y": "flurbic_energy"}}
    assert "in the task's names" in "\n".join(lines)

    rc, lines = _solve(tmp_path, capsys, f"data={folder}", *RECORDING, *TINY)  # the check can fail: named, they do
    assert rc == 0, lines
    assert all(word in _prompts().lower() for word in ("zorblax", "quindle", "flurbic", "thermoquux"))


def test_anonymize_renames_the_truth_and_restores_equations() -> None:
    rng = np.random.default_rng(0)
    X = rng.uniform(1, 2, size=(40, 2))
    task = Task.from_arrays(X, X[:, 0] * X[:, 1], name="secret", domain="physics", input_names=["v", "v1"],
                            input_descriptions=["velocity", "other"], target_name="p", target_description="momentum",
                            ground_truth="v*v1 + 0*v", metadata={"summary": "momentum"})
    anon = anonymize(task)
    hidden = anon.task
    assert (hidden.name, hidden.domain, hidden.metadata) == ("anonymous", "", {"anonymized": True})
    assert hidden.input_names == ["x1", "x2"] and hidden.target_name == "y"
    assert hidden.input_descriptions == ["", ""] and hidden.target_description == ""
    assert hidden.ground_truth == "x1*x2 + 0*x1" and np.array_equal(hidden.train.X, task.train.X)
    assert anon.restore("c0*x1 + sin(x2)/x1") == "c0*v + sin(v1)/v"
    assert rename_variables("x1*x10 + np.x1", {"x1": "a", "x10": "b"}) == "a*b + np.x1"
    assert "secret" not in hidden.card() and "velocity" not in hidden.card()
