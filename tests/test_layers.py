"""The import contract (pyproject.toml ``[tool.importlinter]``) holds, and it would catch an upward import."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _lint(cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    exe = shutil.which("lint-imports") or str(Path(sys.executable).with_name("lint-imports"))
    return subprocess.run([exe, "--no-cache"], cwd=cwd, capture_output=True, text=True, timeout=300, env=env)


def test_the_layer_contracts_are_kept() -> None:
    proc = _lint(ROOT)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert "0 broken" in proc.stdout


def test_an_upward_import_breaks_the_contract(tmp_path: Path) -> None:
    """A copy of the source where the engine imports the workflows must fail the check."""
    for name in ("harness", "workflows", "optimize", "benchmarks"):
        shutil.copytree(ROOT / name, tmp_path / name, ignore=shutil.ignore_patterns("__pycache__", "*.json", "*.md"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    task = tmp_path / "harness" / "engine" / "task.py"
    task.write_text(task.read_text() + "\nfrom workflows.params import WorkflowParams  # noqa: E402,F401\n")
    proc = _lint(tmp_path, env={"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin"})
    assert proc.returncode != 0, proc.stdout[-2000:]
    assert "harness.engine.task -> workflows.params" in proc.stdout
