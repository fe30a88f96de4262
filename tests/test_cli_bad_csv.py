"""``python -m harness solve`` on bad CSV files: rc 2, one line saying what is wrong (and where), nothing written
outside the run folder, before any work. The cases run in-process through the CLI's own entry point (the
Hydra app); one runs as a real subprocess, the way a user starts it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness.app.cli import main

ROOT = Path(__file__).resolve().parent.parent
GOOD = "a,b,y\n" + "".join(f"{i},{i % 7},{2 * i + i % 7}\n" for i in range(1, 31))
BAD: dict[str, tuple[bytes, str, str]] = {  # name -> (file content, target, what the message says)
    "text_in_target": (GOOD.replace("\n5,5,15\n", "\n5,5,fifteen\n").encode(), "y",
                       "column 'y' is not numeric: value 'fifteen' at row 5 (line 6 of the file)"),
    "missing_value": (GOOD.replace("\n7,0,14\n", "\n7,,14\n").encode(), "y", "NaN/missing value in column 'b'"),
    "infinite_value": (GOOD.replace("\n3,3,9\n", "\ninf,3,9\n").encode(), "y", "infinite value inf in column 'a'"),
    "no_such_target": (GOOD.encode(), "z", "'z'"),
    "empty_file": (b"", "y", "is empty"),
    "header_only": (b"a,b,y\n", "y", "no data rows"),
    "no_header": (GOOD.split("\n", 1)[1].encode(), "y", "no header row"),
    "duplicate_columns": (GOOD.replace("a,b,y", "a,a,y", 1).encode(), "y", "appear more than once"),
    "constant_target": (("a,b,y\n" + "".join(f"{i},{i % 7},4.25\n" for i in range(30))).encode(), "y",
                        "target column 'y' is constant (4.25)"),
    "tiny_constant": (("a,b,y\n" + "".join(f"{i},{i % 7},4.33031e-13\n" for i in range(30))).encode(), "y",
                      "target column 'y' is constant (4.33031e-13)"),
    "too_few_rows": (b"a,b,y\n1,2,3\n2,3,5\n3,4,8\n", "y", "only 3 rows"),
    "ragged_rows": (GOOD.replace("\n9,2,20\n", "\n9,2,20,1,1\n").encode(), "y", "cannot parse as CSV"),
    "not_text": (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\xff\xfe" * 20, "y", "bad.csv"),
    "target_only": (b"y\n" + b"".join(b"%d\n" % i for i in range(30)), "y", "bad.csv"),
}


def _files(folder: Path, skip: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*")
            if p.is_file() and not p.is_relative_to(skip)}


@pytest.mark.parametrize("case", sorted(BAD))
def test_a_bad_csv_is_rc_2_and_one_line(case: str, tmp_path: Path, capsys: pytest.CaptureFixture,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    content, target, reason = BAD[case]
    data, run = tmp_path / "data" / "bad.csv", tmp_path / "run"
    data.parent.mkdir()
    data.write_bytes(content)
    monkeypatch.chdir(tmp_path)
    before = _files(tmp_path, run)
    rc = main(["solve", f"data={data}", f"target={target}", "llm=tiny", f"hydra.run.dir={run}"])
    out = capsys.readouterr()
    lines = [line for line in (out.out + out.err).splitlines() if line.strip()]
    assert rc == 2, (case, out)
    assert len(lines) == 1 and lines[0].startswith("error: ") and reason in lines[0], (case, lines)
    assert "Traceback" not in out.err
    assert _files(tmp_path, run) == before  # the data untouched, nothing new beside it or in the working folder
    assert not (run / "nodes.jsonl").exists() and not (run / "result.json").exists()  # no work was started


def test_the_real_command_on_a_bad_csv(tmp_path: Path) -> None:
    """As a user runs it: no run folder named, so the default one under the working folder; a long message stays
    on one line at any terminal width."""
    data = tmp_path / ("a_rather_long_folder_name_" * 3) / "measurements.csv"
    data.parent.mkdir()
    data.write_bytes(BAD["text_in_target"][0])
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    proc = subprocess.run([sys.executable, "-m", "harness", "solve", f"data={data}", "target=y"], cwd=cwd,
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, "COLUMNS": "60", "PYTHONPATH": str(ROOT)})
    lines = [line for line in (proc.stdout + proc.stderr).splitlines() if line.strip()]
    assert proc.returncode == 2 and len(lines) == 1 and "line 6 of the file" in lines[0], proc
    written = [p.relative_to(cwd) for p in cwd.rglob("*") if p.is_file()]
    assert all(p.parts[:2] == ("runs", "solve") for p in written), written  # only inside the run folder
    assert sorted(p.name for p in data.parent.iterdir()) == ["measurements.csv"]


def _scaled_csv(path: Path, scale: float, rows: int = 400) -> None:
    """y = scale * (u*x + 0.5*u): at 1e-13 the target's range is ~4e-13 (it varies about ten-fold)."""
    import numpy as np

    rng = np.random.default_rng(0)
    u, x = rng.uniform(1, 3, rows), rng.uniform(0.5, 3, rows)
    y = scale * (u * x + 0.5 * u)
    path.write_text("u,x,y\n" + "".join(f"{float(a)!r},{float(b)!r},{float(c)!r}\n" for a, b, c in zip(u, x, y)))


@pytest.mark.parametrize("scale", [1e-13, 1e13])
def test_a_target_far_from_order_one_is_data_and_solves(scale: float, tmp_path: Path,
                                                        capsys: pytest.CaptureFixture) -> None:
    """The constant check is relative (harness.core.task.is_constant, the one test): a target of order 1e-13
    was refused as "constant (4.33e-13)" by the table loader's absolute floor; and the engine searches it
    rescaled, so the law is found at either scale."""
    import json

    from tests.doubles import SCRIPTED

    data, run = tmp_path / "small.csv", tmp_path / "run"
    _scaled_csv(data, scale)
    rc = main(["solve", f"data={data}", "target=y", f"llm.provider={SCRIPTED}", "sr.time_budget=2",
               "sr.population_size=50", "sr.generations=20", "budget.max_seconds=60", f"hydra.run.dir={run}"])
    assert rc == 0, capsys.readouterr().out[-2000:]
    result = json.loads((run / "result.json").read_text())
    assert result["metrics"]["test_id"]["nmse"] < 1e-10 and result["metrics"]["test_id"]["acc_0.001"] == 1.0


def test_constant_is_relative_to_the_targets_own_scale() -> None:
    import numpy as np

    from harness.core.task import is_constant

    rng = np.random.default_rng(0)
    varied = rng.uniform(1, 6, 400)
    for scale in (1e-13, 1.0, 1e13):
        assert not is_constant(scale * varied)
        assert is_constant(np.full(400, 4.33031 * scale))
        assert is_constant(scale * (1.0 + 1e-14 * varied))  # varies in its 14th digit: float noise, not data
    assert is_constant(np.zeros(10)) and is_constant(np.array([]))
