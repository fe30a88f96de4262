"""The README is the front door: short, inside the repository, and every command in it runs as written.

Each shell command of the README's ``bash`` blocks is checked without running a long job: a Hydra command
(``python -m harness solve|agent``, ``python -m optimize``) composes its config with the README's overrides; ``python
-m benchmarks`` parses; ``python -m harness view|serve`` and ``python scripts/*.py`` accept the README's flags
(``--help``); an install names extras the project has. Placeholders in angle brackets (``<timestamp>``) are filled
with a sample value, as a reader does. Run only by hand (named in ``BY_HAND``): the install + main job, the test
suite itself and a vLLM server. Inline commands of the tables are checked to name a real command or script.
"""

from __future__ import annotations

import ast
import importlib
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = sorted((ROOT / "docs").glob("*.md"))
MAX_LINES = 250
# Pages other work adds at the same time as this test; a link to one is allowed while it does not exist yet.
PENDING: set[str] = set()
BY_HAND = {  # first words -> why it is not run here
    "pip install": "the install itself (minutes of compiling, 1 GB of packages); the extras it names are checked",
    "python -m pytest": "the suite itself; .ci/run runs the same command",
    "vllm serve": "a GPU server, not a dependency of the project (docs/llm-backends.md has a measured check)",
}
PLACEHOLDER = re.compile(r"<[^<>]+>")


def _blocks(text: str, language: str) -> list[str]:
    return re.findall(rf"^```{language}\n(.*?)^```", text, flags=re.MULTILINE | re.DOTALL)


def readme_commands(text: str) -> list[list[str]]:
    """The shell commands of the README's bash blocks: continuations joined, comments dropped, ``&&`` split."""
    commands = []
    for block in _blocks(text, "bash"):
        for line in block.replace("\\\n", " ").splitlines():
            words = shlex.split(line, comments=True)
            while words:
                cut = words.index("&&") if "&&" in words else len(words)
                commands.append(words[:cut])
                words = words[cut + 1:]
    return [c for c in commands if c]


def _filled(words: list[str]) -> list[str]:
    return [PLACEHOLDER.sub("sample", w) for w in words]


def _compose(config: str, overrides: list[str]) -> None:
    from hydra import compose, initialize_config_dir

    from harness.app.cli import CONF_DIR
    from optimize.__main__ import register_config_bases

    register_config_bases()  # the pydantic models' `base` entries (llm, backend, executor, solve/agent, optimize)
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        compose(config_name=config, overrides=overrides)


def _accepts_flags(argv: list[str], words: list[str]) -> None:
    """``argv --help`` succeeds and names every ``--flag`` the README passes."""
    proc = subprocess.run([sys.executable, *argv, "--help"], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    for flag in (w.split("=", 1)[0] for w in words if w.startswith("--")):
        assert flag in proc.stdout, f"{' '.join(argv)} has no {flag}"


def check_command(words: list[str]) -> str:
    """Check one README command the way it would run; returns what was checked (for the failure message)."""
    line = " ".join(words)
    for start, why in BY_HAND.items():
        if line.startswith(start):
            if start == "pip install":
                extras = re.findall(r"\.\[([\w,-]+)\]", line)
                project = _pyproject()["project"]["optional-dependencies"]
                assert all(e in project for group in extras for e in group.split(",")), line
            return f"by hand: {why}"
    words = _filled(words)
    assert words[0] == "python", f"not a command this test knows how to check: {line}"
    if words[1:3] == ["-m", "harness"]:
        from harness.app.cli import COMMANDS

        command, args = words[3], words[4:]
        if command in ("view", "serve"):
            _accepts_flags(["-m", "harness", command], args)
            return "flags"
        _compose(COMMANDS[command][0], args)
        return "composed"
    if words[1:3] == ["-m", "optimize"]:
        assert "-m" not in words[3:], "a multirun: check it by hand or put it in docs/optimizer.md"
        _compose("optimize", words[3:])
        return "composed"
    if words[1:3] == ["-m", "benchmarks"]:
        from benchmarks.__main__ import build_parser

        build_parser().parse_known_args(words[3:])
        return "parsed"
    if words[1].startswith("scripts/"):
        assert (ROOT / words[1]).is_file(), words[1]
        _accepts_flags([words[1]], words[2:])
        return "flags"
    raise AssertionError(f"not a command this test knows how to check: {line}")


def _pyproject() -> dict:
    try:
        import tomllib
    except ImportError:  # Python 3.10: pip vendors the same reader
        from pip._vendor import tomli as tomllib
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def _links(path: Path) -> list[str]:
    text = path.read_text(encoding="utf-8")
    return [t for t in re.findall(r"\]\(([^)\s#]+)(?:#[^)]*)?\)", text) if "://" not in t]


# -- tests ---------------------------------------------------------------------------------------------------------
def test_readme_is_short_current_and_inside_the_repository() -> None:
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= MAX_LINES
    for page in [README, *DOCS]:
        body = page.read_text(encoding="utf-8")
        # a link may climb out of docs/ into the repository; nothing may name a path above it
        inside = re.sub(r"\]\((?:\.\./)+[^)\s]*\)", lambda m: "]()" if (page.parent / m.group(0)[2:-1].split("#")[0])
                        .resolve().is_relative_to(ROOT) else m.group(0), body)
        assert "../" not in inside, f"{page.name}: a path outside the repository"
        for target in _links(page):
            resolved = (page.parent / target).resolve()
            assert resolved.is_relative_to(ROOT), f"{page.name}: a link outside the repository: {target}"
            relative = resolved.relative_to(ROOT).as_posix() if resolved.is_relative_to(ROOT) else target
            assert resolved.exists() or relative in PENDING, f"{page.name}: broken link {target}"
    assert not re.search(r"\bissues?\b|\bsession\b|#\d+", text, flags=re.IGNORECASE), "development notes"


# A repository path in backticks (``scripts/x.py``, ``harness/llm/``, ``optimize/race.py::race``), or a module path
# with an attribute after its file (``benchmarks/sources/_io.check_target``).
NAMED_PATH = re.compile(r"`((?:harness|workflows|optimize|benchmarks|scripts|tests|docs)/[A-Za-z0-9_./-]+)"
                        r"(?:::[\w\[\]-]+)?`")


def _exists(named: str) -> bool:
    path = named.rstrip("./")
    if (ROOT / path).exists():
        return True
    module, _, attribute = path.rpartition(".")  # harness/sr/operon_trees._seed_individuals: a name in a file
    return bool(attribute) and (ROOT / f"{module}.py").exists()


def test_every_repository_path_the_docs_name_exists() -> None:
    """The docs cannot drift from the tree: a renamed or removed file fails here, not in a reader's hands."""
    missing = [(page.name, m.group(1)) for page in [README, *DOCS]
               for m in NAMED_PATH.finditer(page.read_text(encoding="utf-8")) if not _exists(m.group(1))]
    assert not missing, missing
    assert not _exists("scripts/no_such_script.py") and _exists("benchmarks/sources/_io.check_target")


def test_the_test_command_is_the_one_ci_runs() -> None:
    commands = [" ".join(c) for c in readme_commands(README.read_text(encoding="utf-8"))]
    suite = [c for c in commands if c.startswith("python -m pytest")]
    assert suite == ["python -m pytest -q -n 2"]  # two workers, each pinned to a core (tests/conftest.py)
    assert "pip install -e .[test]" in commands and "python -m optimize stage=all" in commands
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    assert "python3" + suite[0].removeprefix("python") in ci and 'python3 -m pip install -q -e ".[test]"' in ci


@pytest.mark.parametrize("words", readme_commands(README.read_text(encoding="utf-8")), ids=" ".join)
def test_every_readme_command_resolves(words: list[str]) -> None:
    assert check_command(words)


def test_a_wrong_override_in_a_readme_command_would_fail() -> None:
    with pytest.raises(Exception, match="nosuchkey"):
        check_command(["python", "-m", "harness", "solve", "data=my.csv", "nosuchkey=1"])
    with pytest.raises(AssertionError, match="--nosuchflag"):
        check_command(["python", "scripts/bench_harness.py", "--nosuchflag", "1"])


def test_readme_python_imports_resolve() -> None:
    for block in _blocks(README.read_text(encoding="utf-8"), "python"):
        compile(block, "README.md", "exec")
        for node in ast.walk(ast.parse(block)):
            if isinstance(node, ast.ImportFrom) and node.module:
                module = importlib.import_module(node.module)
                assert all(hasattr(module, alias.name) for alias in node.names), node.module
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    importlib.import_module(alias.name)


def test_inline_commands_of_the_tables_name_real_commands() -> None:
    from benchmarks.__main__ import build_parser
    from harness.app.cli import COMMANDS

    benchmark_commands = build_parser()._subparsers._group_actions[0].choices  # noqa: SLF001 - argparse's own
    for span in re.findall(r"`(python [^`]+)`", README.read_text(encoding="utf-8")):
        words = span.split() + [""]  # "python -m harness" alone names the program
        if words[1:3] == ["-m", "harness"] and words[3]:
            assert words[3] in {*COMMANDS, "view", "serve"}, span
        elif words[1:3] == ["-m", "benchmarks"] and words[3]:
            assert words[3] in benchmark_commands, span
        elif words[1].startswith("scripts/"):
            assert (ROOT / words[1]).is_file(), span
        else:
            assert words[1:3] in (["-m", "optimize"], ["-m", "pytest"], ["-m", "harness"]), span
