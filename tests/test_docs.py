"""Docs that cannot drift: every repository path, script, script option, config key and code name that README.md
and docs/ state exists, every script is listed in docs/scripts.md, and every link to a page lands on a file and a
heading that are there."""

from __future__ import annotations

import dataclasses
import importlib
import re
import typing
from pathlib import Path

import pytest
from pydantic import BaseModel

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
PATH = re.compile(r"(?<![\w/.-])((?:harness|workflows|optimize|benchmarks|scripts|tests|docs|\.ci)/[\w./-]*\w)")
SPAN = re.compile(r"`([^`\n]+)`")
FENCE = re.compile(r"```[a-z]*\n(.*?)```", re.S)
LINK = re.compile(r"\]\(([\w./-]+\.md)?(?:#([\w-]+))?\)")
KEY = re.compile(r"(?<![\w./-])((?:optimize|sr|llm|executor|budget|freeze|stage[123]|tasks|accept)(?:\.[a-z_]\w*)+)"
                 r"(?![\w/])")
FILE_SUFFIXES = (".py", ".json", ".yaml", ".md", ".db", ".jsonl", ".png", ".csv", ".toml")


def _code(page: Path) -> list[str]:
    """The page's code: inline spans and the lines of its fenced blocks."""
    text = page.read_text(encoding="utf-8")
    lines = [line for block in FENCE.findall(text) for line in block.splitlines()]
    return SPAN.findall(FENCE.sub("", text)) + lines


def _exists(path: str) -> bool:
    """A path, or ``module/path.name`` (a module and a name in it, as CONTRACTS.md writes them)."""
    if (ROOT / path).exists():
        return True
    module = path.rsplit(".", 1)[0] if "." in path.rsplit("/", 1)[-1] else path
    return (ROOT / f"{module}.py").exists() or (ROOT / module / "__init__.py").exists()


def test_every_path_the_docs_name_exists() -> None:
    missing = sorted({f"{page.name}: {m}" for page in PAGES for m in PATH.findall(page.read_text(encoding="utf-8"))
                      if not any(ch in m for ch in "*<>{}") and not _exists(m)})
    assert not missing, "paths named in the docs that are not in the repository:\n" + "\n".join(missing)


def test_every_script_is_listed_in_scripts_md() -> None:
    listed = (ROOT / "docs" / "scripts.md").read_text(encoding="utf-8")
    unlisted = [str(p.relative_to(ROOT)) for p in sorted((ROOT / "scripts").rglob("*.py"))
                if str(p.relative_to(ROOT)) not in listed]
    assert not unlisted, f"scripts missing from docs/scripts.md: {unlisted}"


def test_every_record_names_the_decision_it_made() -> None:
    """A script under scripts/records/ is the record of a decision: decisions.md links it in that decision's row."""
    decisions = (ROOT / "docs" / "decisions.md").read_text(encoding="utf-8")
    unlinked = [p.name for p in sorted((ROOT / "scripts" / "records").glob("*.py"))
                if f"](../scripts/records/{p.name})" not in decisions]
    assert not unlinked, f"records that docs/decisions.md does not link: {unlinked}"


def _cli_sources(command: str) -> tuple[str, str] | None:
    """The program a documented command runs and its source text: a script, or the ``harness`` CLI."""
    m = re.search(r"scripts/([\w/]+\.py)", command)
    if m and (ROOT / "scripts" / m.group(1)).exists():
        return m.group(1), (ROOT / "scripts" / m.group(1)).read_text(encoding="utf-8")
    if re.search(r"(python -m harness|^harness|\bharness-sr)\b", command.strip()):
        return "harness", "\n".join(p.read_text(encoding="utf-8") for p in (ROOT / "harness" / "app").rglob("*.py"))
    return None


def test_every_command_line_option_the_docs_name_exists() -> None:
    """``python scripts/x.py ... --flag`` and ``python -m harness solve ... --flag``: the flag is the program's
    (a renamed option fails here)."""
    wrong = []
    for page in PAGES:
        for code in _code(page):
            for command in re.split(r"[;|&]+|\s#\s", code):
                program = _cli_sources(command)
                if program is None:
                    continue
                name, source = program
                wrong += [f"{page.name}: {name} {flag}" for flag in re.findall(r"(?<![\w-])(--[a-z][\w-]*)", command)
                          if f'"{flag}"' not in source and f"'{flag}'" not in source and flag != "--help"]
    assert not wrong, "options the docs give commands that they do not have:\n" + "\n".join(sorted(set(wrong)))


def _settings_roots() -> dict[str, type]:
    from harness.app.executor import ExecutorConfig
    from harness.core.context import Budget
    from harness.llm.config import LLMConfig
    from optimize.settings import OptimizeSettings
    from workflows.params import SRSettings

    roots: dict[str, type] = {"optimize": OptimizeSettings, "sr": SRSettings, "llm": LLMConfig,
                              "executor": ExecutorConfig, "budget": Budget}
    for name in ("freeze", "stage1", "stage2", "stage3", "tasks", "accept"):  # written without `optimize.`
        roots[name] = _field_type(OptimizeSettings, name)
    return roots


def _field_type(model: type, name: str) -> type | None:
    if isinstance(model, type) and issubclass(model, BaseModel):
        field = model.model_fields.get(name)
        annotation = field.annotation if field is not None else None
    elif dataclasses.is_dataclass(model):
        hints = typing.get_type_hints(model)
        annotation = hints.get(name) if name in {f.name for f in dataclasses.fields(model)} else None
    else:
        return None
    if annotation is None:
        return None
    for candidate in (annotation, *typing.get_args(annotation)):  # Optional[Model] -> Model
        if isinstance(candidate, type) and (issubclass(candidate, BaseModel) or dataclasses.is_dataclass(candidate)):
            return candidate
    return dict if typing.get_origin(annotation) is dict or annotation is dict else object


def _resolves(key: str, roots: dict[str, type]) -> bool:
    """A config key (a field path in the settings model its group names) or a code name (module.attribute)."""
    head, *rest = key.split(".")
    node: type | None = roots[head]
    for part in rest:
        if node is dict:
            return True  # free-form mapping (llm.extra.*)
        node = _field_type(node, part) if node is not None else None
        if node is None:
            break
    else:
        return True
    for prefix in ("", "optimize."):  # optimize.evaluation.Evaluator, freeze.save_once
        parts = (prefix + key).split(".")
        for i in range(len(parts), 0, -1):
            try:
                obj = importlib.import_module(".".join(parts[:i]))
            except ImportError:
                continue
            try:
                for attr in parts[i:]:
                    obj = getattr(obj, attr)
                return True
            except AttributeError:
                break
    return False


def test_every_config_key_and_code_name_the_docs_give_exists() -> None:
    roots = _settings_roots()
    unknown = sorted({f"{page.name}: {key}" for page in PAGES for code in _code(page) for key in KEY.findall(code)
                      if not key.endswith(FILE_SUFFIXES) and not _resolves(key, roots)})
    assert not unknown, "config keys / names in the docs that resolve to nothing:\n" + "\n".join(unknown)


def _anchors(page: Path) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces to hyphens."""
    headings = re.findall(r"^#+\s+(.*)$", page.read_text(encoding="utf-8"), re.M)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in headings}


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_links_between_pages_land(page: Path) -> None:
    broken = []
    for target, anchor in LINK.findall(page.read_text(encoding="utf-8")):
        dest = (page.parent / target).resolve() if target else page
        if not dest.exists():
            broken.append(f"{target} (no such page)")
        elif anchor and anchor not in _anchors(dest):
            broken.append(f"{target}#{anchor} (no such heading)")
    assert not broken, f"{page.name}: " + ", ".join(broken)


# -- one source of truth for figures ------------------------------------------------------------------------------
TRANSITION = re.compile(r"\b\d\.\d{3} / \d\.\d{3} -> \d\.\d{3} / \d\.\d{3}\b")
GENERATED = re.compile(r"<!-- generated: [\w-]+ -->\n.*?<!-- /generated -->", re.S)


def _render_docs():
    import importlib.util

    spec = importlib.util.spec_from_file_location("render_docs", ROOT / "scripts" / "render_docs.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_generated_tables_are_rendered_from_the_store() -> None:
    """A figure changed in a page's generated table, or a store row not rendered, fails here."""
    render = _render_docs()
    stale = [f"{page.name}" for page in render.PAGES if render.render(page)[0] != page.read_text(encoding="utf-8")]
    assert not stale, f"generated blocks out of date in {stale}: run python scripts/render_docs.py"
    used = {name for page in render.PAGES for name in render.render(page)[1]}
    assert used == set(render.RENDERERS), f"renderers no page uses: {set(render.RENDERERS) - used}"


def test_no_figure_is_stated_by_hand_twice() -> None:
    """A before -> after figure stands once: in a generated table (from docs/data/results.jsonl), or written by hand
    in one place only, never by hand beside the table that renders it."""
    generated, by_hand = set(), {}
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        generated |= {m for block in GENERATED.findall(text) for m in TRANSITION.findall(block)}
        for m in TRANSITION.findall(GENERATED.sub("", text)):
            by_hand.setdefault(m, []).append(page.name)
    twice = {m: pages for m, pages in by_hand.items() if len(pages) > 1 or m in generated}
    assert not twice, f"figures stated by hand more than once, or beside their generated table: {twice}"
