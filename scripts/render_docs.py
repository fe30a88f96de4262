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


ROWS_RULE = ("† symbolic accuracy judged on the task's rows only, the rule before 2026-12-07, which accepts an "
             "equation that follows the law along the data's trajectory only; these solves' equations were not kept, "
             "so they cannot be re-scored ([results.md](results.md#symbolic-accuracy-off-the-trajectory))")


def sa_cell(row: dict[str, Any], value: float | None = None, bold: bool = False) -> str:
    """A symbolic-accuracy figure, marked † when it was judged on the task's rows only (the old rule)."""
    value = row["sa"] if value is None else value
    text = f"{value:.3f}" + ("†" if row.get("sa_rule") == "rows" else "")
    return f"**{text}**" if bold else text


def _source(rows: list[dict[str, Any]]) -> str:
    """One line per distinct (date, command, conditions) among the table's rows, in their order; the † note when a
    row's symbolic accuracy was judged by the old rule."""
    seen = list(dict.fromkeys((r["date"], r["command"], r["conditions"]) for r in rows))
    note = f"\n{ROWS_RULE}.\n" if any(r.get("sa_rule") == "rows" for r in rows) else ""
    return "".join(f"\nSource: `docs/data/results.jsonl` ({date}; `{command}`): {conditions}.\n"
                   for date, command, conditions in seen) + note


def hard_suite() -> str:
    rows = results("hard_suite")
    lines = [[f"**{r['arm']}**" if r.get("highlight") else r["arm"], pair(r["acc_0.01"], r.get("highlight")),
              pair(r["acc_all_0.01"], r.get("highlight")), pair(r["acc_0.001"], r.get("highlight")),
              sa_cell(r, bold=bool(r.get("highlight"))), str(r["seconds_per_task"])]
             for r in rows]
    return _table(["arm", "acc_0.01 ID / OOD (95 % of points)", "acc_0.01 ID / OOD (every point)",
                   "acc_0.001 ID / OOD (95 %)", "symbolic accuracy", "s / task"], lines) + _source(rows)


def precision(table: str) -> Callable[[], str]:
    """A before / after table of the precision polish and the ladder, paired in-solve (scripts/records/confirm_precision.py)."""
    def render() -> str:
        rows = results(table)
        lines = [[f"**{r['arm']}**" if r.get("highlight") else r["arm"], pair(r["acc_0.01"], r.get("highlight")),
                  pair(r["acc_all_0.01"], r.get("highlight")), pair(r["acc_0.001"], r.get("highlight")),
                  sa_cell(r), str(r["seconds_per_task"]), r.get("paired") or "–"] for r in rows]
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
              sa_cell(r, bold=bool(r.get("highlight"))), r["paired_vs_start"] or "–"]
             for r in rows]
    return _table(["engine seed", "harness", "acc_0.01 ID / OOD (95 %)", "acc_0.01 ID / OOD (every point)",
                   "symbolic accuracy", "paired against the start, (task, split) pairs: 95 % / every point"],
                  lines) + _source(rows)


DOMAIN_ORDER = ("chemistry", "biology", "physics", "materials", "all")


def _maybe(reading: dict[str, float] | None, key: str = "id") -> str:
    value = (reading or {}).get(key)
    return "–" if value is None else f"{value:.3f}"


def _both(reading: dict[str, float] | None) -> str:
    return f"{_maybe(reading, 'id')} / {_maybe(reading, 'ood')}"


def _ours(row: dict[str, Any], domain: str, bold: bool = False) -> list[str] | None:
    d = (row.get("domains") or {}).get(domain)
    if not d:
        return None
    cells = [_both(d["acc_0.01"]), _both(d["acc_all_0.01"]), _both(d["acc_0.001"]), f"{d['sa']:.3f}",
             f"{d['nmse_median']['id']:.2g} / {d['nmse_median']['ood']:.2g}", f"{d['seconds_per_task']}",
             f"{d['llm_calls_per_task']:g}"]
    return [f"**{c}**" for c in cells] if bold else cells


def _published(row: dict[str, Any], domain: str) -> list[str] | None:
    d = (row.get("domains") or {}).get(domain)
    if not d:
        return None
    return [_both(d.get("acc_0.01")), _both(d.get("acc_all_0.01")), _both(d.get("acc_0.001")),
            "–" if d.get("sa") is None else f"{d['sa']:.3f}", "–", "–", "–"]


def lsr_synth_domains() -> str:
    """Our arms on LSR-Synth's held-out laws per domain, each domain's published rows beside them (same readings)."""
    ours, published = results("lsr_synth_heldout"), results("published_lsr_synth")
    lines = []
    for domain in DOMAIN_ORDER:
        for r in ours:
            cells = _ours(r, domain, bold=bool(r.get("highlight")))
            if cells:
                lines.append([domain, f"{r['arm']} (ours)", str(r["domains"][domain]["pairs"]), *cells])
        for r in published:
            cells = _published(r, domain)
            if cells:
                n = (r["domains"][domain] or {}).get("n")
                lines.append([domain, f"{r['method']} ({r['model']}), published", str(n) if n else "–", *cells])
    header = ["domain", "arm", "(task, seed) pairs / problems", "acc_0.01 ID / OOD (95 %)",
              "acc_0.01 ID / OOD (every point)", "acc_0.001 ID / OOD (95 %)", "symbolic accuracy",
              "NMSE median ID / OOD", "s / task", "LLM calls / task"]
    notes = "".join(f"\nPublished: {r['method']} ({r['model']}): {r['source']}; {r['conditions']}; {r['note']}.\n"
                    for r in published)
    return _table(header, lines) + _source(ours) + _paired_and_misses(ours) + notes


def _paired_and_misses(rows: list[dict[str, Any]]) -> str:
    """Each arm paired against the reference, the data's floor, and where the reference misses and why."""
    out = []
    for r in rows:
        if r.get("paired"):
            cells = "; ".join(f"{reading} {p['wins']} / {p['ties']} / {p['losses']} (sign test p {p['p']:.2g})"
                              for reading, p in zip(("95 %", "every point", "acc_0.001"), r["paired"].values()))
            out.append(f"- {r['arm']} against {r['reference']}, (law, seed, split) pairs W / T / L: {cells}")
    reference = next((r for r in rows if r.get("misses") is not None), None)
    if reference is None:
        return "\n" + "\n".join(out) + "\n" if out else ""
    floor = ", ".join(f"{name} ({', '.join(k.replace('acc_all_0.01', 'every point') for k in keys)})"
                      for name, keys in reference.get("floor", {}).items())
    out.append(f"\nThe data's floor: the law itself, with its own constants, on the stored float32 data misses "
               f"{floor or 'nothing'}.")
    out.append(f"\nWhere the {reference['arm']} misses acc_0.01 (95 %), and why:\n")
    for domain, lines in reference["misses"].items():
        out += [f"- {domain}: {line}" for line in lines]
    return "\n" + "\n".join(out) + "\n"


def sa_rescore() -> str:
    """Symbolic accuracy of the same recorded solves under the old rule (the task's rows) and the new one (and off
    the trajectory), per store row and arm."""
    rows = results("sa_rescore")
    lines = [[r["suite"], arm, str(a["solves"]), f"{a['rows']:.3f}", f"{a['region']:.3f}", str(a["lost"]),
              str(a.get("gained", 0))] for r in rows for arm, a in [*r["arms"].items(), ("all", r["all"])]]
    return _table(["solves of", "arm", "solves", "SA on the rows (before 2026-12-07)", "SA on the rows and off them",
                   "yes -> no", "no -> yes"], lines) + _source(rows)


def _seed_cover(row: dict[str, Any]) -> str:
    """Which engine seeds a row pooled, and on how many laws each (a seed's run may cover fewer laws)."""
    cover = row.get("seed_pairs") or {}
    seeds = ", ".join(f"{s} ({cover[str(s)]} laws)" if str(s) in cover else str(s) for s in row["seeds"])
    return f"{seeds}; {row['date']}"


def lsr_synth_readme() -> str:
    """The README's table: every arm over all held-out laws, and the published rows (all problems) beside them."""
    ours, published = results("lsr_synth_heldout"), results("published_lsr_synth")
    lines = [[f"{r['arm']} (ours)", _seed_cover(r), *(_ours(r, "all", bold=bool(r.get("highlight"))) or [])[:4]]
             for r in ours if (r.get("domains") or {}).get("all")]
    lines += [[f"{r['method']} ({r['model']}), published", r.get("cite", "published"),
               *(_published(r, "all") or [])[:4]] for r in published if (r.get("domains") or {}).get("all")]
    return _table(["arm", "engine seeds (laws); date", "acc_0.01 ID / OOD (95 %)", "acc_0.01 ID / OOD (every point)",
                   "acc_0.001 ID / OOD (95 %)", "symbolic accuracy"], lines)


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
    "hard-suite": hard_suite, "oscillators-sparse": oscillators,
    "table5": table5, "sr-options": sr_options, "llm-options": llm_options,
    "optimize-options": optimize_options, "precision-training": precision("precision_training"),
    "precision-test": precision("precision_test"), "precision-oscillators": precision("precision_oscillators"),
    "lsr-synth-domains": lsr_synth_domains, "lsr-synth-readme": lsr_synth_readme, "sa-rescore": sa_rescore,
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
