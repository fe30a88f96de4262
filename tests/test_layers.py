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
    """A copy of the source where the core imports the workflows must fail the check."""
    for name in ("harness", "workflows", "optimize", "benchmarks"):
        shutil.copytree(ROOT / name, tmp_path / name, ignore=shutil.ignore_patterns("__pycache__", "*.json", "*.md"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    task = tmp_path / "harness" / "core" / "task.py"
    task.write_text(task.read_text() + "\nfrom workflows.params import WorkflowParams  # noqa: E402,F401\n")
    proc = _lint(tmp_path, env={"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin"})
    assert proc.returncode != 0, proc.stdout[-2000:]
    assert "harness.core.task -> workflows.params" in proc.stdout


def test_type_only_references_point_down_but_for_the_named_ones() -> None:
    """The contract ignores imports under ``if TYPE_CHECKING:`` (``exclude_type_checking_imports``), so this keeps
    them honest: an upward one must be named here, with why. ``AgentContext.search`` (core) is typed by the SR
    layer's ``SearchSettings``, the settings the SR tools enforce; the core never imports it at run time."""
    import ast

    allowed = {("harness.core.context", "harness.sr.settings")}
    layers = ["optimize", "harness.app", "workflows", "harness.runtime", "harness.llm|harness.sr|harness.tools",
              "harness.core"]

    def rank(module: str) -> int | None:
        for i, names in enumerate(layers):
            if any(module == n or module.startswith(n + ".") for n in names.split("|")):
                return i
        return None

    upward = []
    for path in sorted((ROOT / "harness").rglob("*.py")) + sorted((ROOT / "workflows").rglob("*.py")):
        module = ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not (isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)):
                continue
            for inner in ast.walk(node):
                if isinstance(inner, ast.ImportFrom) and inner.module:
                    src, dst = rank(module), rank(inner.module)
                    if src is not None and dst is not None and dst < src and (module, inner.module) not in allowed:
                        upward.append(f"{module} -> {inner.module}")
    assert not upward, upward
