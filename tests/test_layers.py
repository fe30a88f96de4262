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


def test_a_type_only_cycle_inside_a_package_breaks_the_contract(tmp_path: Path) -> None:
    """Imports under ``if TYPE_CHECKING:`` count (``exclude_type_checking_imports = false``): a reader follows them
    too. A copy of the source where the failure policy names the client interface for a type (the circle
    harness/llm/base.py <-> failures.py that stood until 2026-12-07) must fail the check."""
    for name in ("harness", "workflows", "optimize", "benchmarks"):
        shutil.copytree(ROOT / name, tmp_path / name, ignore=shutil.ignore_patterns("__pycache__", "*.json", "*.md"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    failures = tmp_path / "harness" / "llm" / "failures.py"
    failures.write_text(failures.read_text() + "\nfrom typing import TYPE_CHECKING  # noqa: E402\n\nif TYPE_CHECKING:\n"
                        "    from harness.llm.base import LLMClient  # noqa: F401\n")
    proc = _lint(tmp_path, env={"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin"})
    assert proc.returncode != 0, proc.stdout[-2000:]
    assert "No cycles are allowed in harness.llm" in proc.stdout and ".failures -> .base" in proc.stdout


def _package_loops(root: Path) -> list[str]:
    """Modules that import their own package (``from pkg import x``) while ``pkg/__init__.py`` imports a module of
    the package: a loop through the package's ``__init__`` that the contracts above do not see."""
    import ast

    loops = []
    for init in sorted(p for name in ("harness", "workflows", "optimize", "benchmarks")
                       for p in (root / name).rglob("__init__.py")):
        package = ".".join(init.parent.relative_to(root).parts)
        eager = any(isinstance(n, ast.ImportFrom) and (n.module or "").startswith(package + ".")
                    for n in ast.parse(init.read_text(encoding="utf-8")).body)
        if not eager:
            continue
        for module in sorted(init.parent.glob("*.py")):
            if module.name == "__init__.py":
                continue
            for node in ast.walk(ast.parse(module.read_text(encoding="utf-8"))):
                if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module == package:
                    loops.append(f"{package}.{module.stem} -> {package} (its __init__ imports the package's modules)")
    return loops


def test_no_module_loops_back_through_its_packages_init(tmp_path: Path) -> None:
    assert not _package_loops(ROOT), _package_loops(ROOT)
    # and the check sees one: a module importing its package from inside
    serve = tmp_path / "harness" / "app" / "serve"
    shutil.copytree(ROOT / "harness" / "app" / "serve", serve, ignore=shutil.ignore_patterns("__pycache__", "static"))
    runs = serve / "runs.py"
    runs.write_text(runs.read_text().replace("import harness.app.serve.admission as admission",
                                             "from harness.app.serve import admission"))
    assert _package_loops(tmp_path) == ["harness.app.serve.runs -> harness.app.serve (its __init__ imports the "
                                        "package's modules)"]
