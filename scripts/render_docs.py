"""Render the docs' generated tables from their one source of truth, so no figure or option is written by hand twice.

Results come from ``docs/data/results.jsonl`` (one row per measured arm, with its date, command, conditions and
both Acc_0.01 readings); the SR options table from ``SRSettings``' field descriptions. Each table stands in a page
between ``<!-- generated: NAME -->`` and ``<!-- /generated -->``; this script rewrites what is between them.

    python scripts/render_docs.py           # rewrite the blocks
    python scripts/render_docs.py --check   # exit 1 and name the blocks that differ (tests/test_docs.py runs it)

To add a measurement: append its row to results.jsonl, then render.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "docs" / "data" / "results.jsonl"
BLOCK = re.compile(r"(<!-- generated: (?P<name>[\w-]+) -->\n)(?P<body>.*?)(<!-- /generated -->)", re.S)


def results(table: str) -> list[dict[str, Any]]:
    rows = [json.loads(line) for line in RESULTS.read_text(encoding="utf-8").splitlines() if line.strip()]
    return [r for r in rows if r["table"] == table]


def pair(reading: dict[str, float], bold: bool = False) -> str:
    text = f"{reading['id']:.3f} / {reading['ood']:.3f}"
    return f"**{text}**" if bold else text


def _table(header: list[str], lines: list[list[str]]) -> str:
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join(out + ["| " + " | ".join(cells) + " |" for cells in lines]) + "\n"


def _source(rows: list[dict[str, Any]]) -> str:
    """One line per distinct (date, command, conditions) among the table's rows, in their order."""
    seen = list(dict.fromkeys((r["date"], r["command"], r["conditions"]) for r in rows))
    return "".join(f"\nSource: `docs/data/results.jsonl` ({date}; `{command}`): {conditions}.\n"
                   for date, command, conditions in seen)


def hard_suite() -> str:
    rows = results("hard_suite")
    lines = [[f"**{r['arm']}**" if r.get("highlight") else r["arm"], pair(r["acc_0.01"], r.get("highlight")),
              pair(r["acc_all_0.01"], r.get("highlight")), pair(r["acc_0.001"], r.get("highlight")),
              f"**{r['sa']:.3f}**" if r.get("highlight") else f"{r['sa']:.3f}", str(r["seconds_per_task"])]
             for r in rows]
    return _table(["arm", "acc_0.01 ID / OOD (95 % of points)", "acc_0.01 ID / OOD (every point)",
                   "acc_0.001 ID / OOD (95 %)", "symbolic accuracy", "s / task"], lines) + _source(rows)


def hard_suite_readme() -> str:
    """The README's table: the rows of the hard-suite and precision tables that name a README arm, with their seeds."""
    rows = [r for r in results("hard_suite") + results("precision_test") if r.get("readme_arm")]
    lines = [[r["readme_arm"], r["seeds"], pair(r["acc_0.01"], r.get("highlight")),
              pair(r["acc_all_0.01"], r.get("highlight")), pair(r["acc_0.001"], r.get("highlight")),
              f"**{r['sa']:.3f}**" if r.get("highlight") else f"{r['sa']:.3f}", str(r["seconds_per_task"])]
             for r in rows]
    return _table(["arm", "seeds (date)", "acc_0.01 ID / OOD (95 %)", "acc_0.01 ID / OOD (every point)",
                   "acc_0.001 ID / OOD (95 %)", "symbolic accuracy", "s / task"], lines)


def precision(table: str) -> Callable[[], str]:
    """A before / after table of the precision polish and the ladder, paired in-solve (scripts/confirm_precision.py)."""
    def render() -> str:
        rows = results(table)
        lines = [[f"**{r['arm']}**" if r.get("highlight") else r["arm"], pair(r["acc_0.01"], r.get("highlight")),
                  pair(r["acc_all_0.01"], r.get("highlight")), pair(r["acc_0.001"], r.get("highlight")),
                  f"{r['sa']:.3f}", str(r["seconds_per_task"]), r.get("paired") or "–"] for r in rows]
        return _table(["arm", "acc_0.01 ID / OOD (95 %)", "acc_0.01 ID / OOD (every point)",
                       "acc_0.001 ID / OOD (95 %)", "symbolic accuracy", "median s / solve",
                       "paired vs before, (solve, split): 95 % / every point / acc_0.001; SA per solve (W / T / L)"],
                      lines) + _source(rows)
    return render


def oscillators() -> str:
    rows = results("oscillators_sparse")
    lines = [[r["seeds"], f"{pair(r['before']['acc_0.01'])} -> {pair(r['after']['acc_0.01'])}",
              f"{pair(r['before']['acc_all_0.01'])} -> {pair(r['after']['acc_all_0.01'])}",
              f"{r['paired']['id']}, {r['paired']['ood']}"] for r in rows]
    training = results("oscillators_sparse_training")
    lines += [[f"{r['seeds']}, the harder phys_osc **training** laws 12-15",
               f"{pair(r['before']['acc_0.01'])} -> {pair(r['after']['acc_0.01'])}",
               f"{pair(r['before']['acc_all_0.01'])} -> {pair(r['after']['acc_all_0.01'])}",
               f"{r['paired']['id']}, {r['paired']['ood']}"] for r in training]
    return _table(["seeds", "acc_0.01 ID / OOD (95 %) before -> after", "every point before -> after",
                   "paired ID, OOD (W / T / L)"], lines) + _source(rows)


def table5() -> str:
    rows = results("table5")
    lines = [[f"{r['seed']}", r["harness"], pair(r["acc_0.01"], r.get("highlight")),
              pair(r["acc_all_0.01"], r.get("highlight")),
              f"**{r['sa']:.3f}**" if r.get("highlight") else f"{r['sa']:.3f}", r["paired_vs_start"] or "–"]
             for r in rows]
    return _table(["engine seed", "harness", "acc_0.01 ID / OOD (95 %)", "acc_0.01 ID / OOD (every point)",
                   "symbolic accuracy", "paired against the start, (task, split) pairs: 95 % / every point"],
                  lines) + _source(rows)


def _option_rows(model: type, prefix: str) -> list[list[str]]:
    """A settings model's fields, nested models walked: option, default, description (``Field(description=...)``)."""
    from pydantic import BaseModel

    lines = []
    for name, field in model.model_fields.items():
        if isinstance(field.annotation, type) and issubclass(field.annotation, BaseModel):
            lines += _option_rows(field.annotation, f"{prefix}.{name}")
            continue
        default = field.get_default(call_default_factory=True)
        default = default.model_dump() if isinstance(default, BaseModel) else default
        shown = json.dumps(default) if not isinstance(default, str) else default
        lines.append([f"`{prefix}.{name}`", f"`{shown}`" if len(shown) <= 40 else f"(see `{model.__name__}`)",
                      (field.description or "").replace("|", "\\|")])
    return lines


def _options(model: type, prefix: str) -> str:
    return _table(["option", "default", "what it does"], _option_rows(model, prefix))


def sr_options() -> str:
    from workflows.params import SRSettings

    return _options(SRSettings, "sr")


def optimize_options() -> str:
    from optimize.settings import OptimizeSettings

    return _options(OptimizeSettings, "optimize")


def llm_options() -> str:
    from harness.llm.config import LLMConfig

    return _options(LLMConfig, "llm")


RENDERERS: dict[str, Callable[[], str]] = {
    "hard-suite": hard_suite, "hard-suite-readme": hard_suite_readme, "oscillators-sparse": oscillators,
    "table5": table5, "sr-options": sr_options, "llm-options": llm_options,
    "optimize-options": optimize_options, "precision-training": precision("precision_training"),
    "precision-test": precision("precision_test"), "precision-oscillators": precision("precision_oscillators"),
}
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def render(page: Path) -> tuple[str, list[str]]:
    """The page with its generated blocks rendered, and the names of the blocks it holds."""
    text = page.read_text(encoding="utf-8")
    names: list[str] = []

    def fill(m: re.Match[str]) -> str:
        name = m.group("name")
        if name not in RENDERERS:
            raise SystemExit(f"{page.name}: unknown generated block {name!r}; known: {', '.join(RENDERERS)}")
        names.append(name)
        return m.group(1) + RENDERERS[name]() + m.group(4)

    return BLOCK.sub(fill, text), names


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 if a block is out of date")
    args = parser.parse_args(argv)
    stale = []
    for page in PAGES:
        new, names = render(page)
        if new != page.read_text(encoding="utf-8"):
            stale.append(f"{page.relative_to(ROOT)} ({', '.join(names)})")
            if not args.check:
                page.write_text(new, encoding="utf-8")
    if stale:
        print(("out of date: " if args.check else "rendered: ") + "; ".join(stale))
    return 1 if stale and args.check else 0


if __name__ == "__main__":
    sys.exit(main())
