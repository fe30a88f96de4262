"""``report.md`` and its plots (matplotlib, Agg) from the saved stage results of a run folder.

Written from files only, so a report can be regenerated for any run folder:
``python -m optimize.report <run dir>``.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any

from optimize.cache import EvalCache
from optimize.runfolder import RunFolder
from optimize.settings import STAGE_ORDER

STAGES = STAGE_ORDER
CURVE = (*STAGE_ORDER, "default")
TITLES = {"baseline": "starting harness", "init": "stage 1: prompt init", "search": "stage 2: joint search",
          "refine": "stage 3: refinement", "default": "shipped default", "freeze": "freeze (report only)"}
START_TITLES = {"initial": "initial harness (HarnessSR's start)", "default": "shipped default (start)"}


def _title(stage: str, freeze: dict[str, Any]) -> str:
    if stage == "baseline":
        return START_TITLES.get(freeze.get("start", ""), TITLES["baseline"])
    return TITLES.get(stage, stage)


def _f(x: Any, digits: int = 3) -> str:
    if x is None:
        return "–"
    try:
        x = float(x)
    except (TypeError, ValueError):
        return str(x)
    if not math.isfinite(x):
        return "inf"
    return f"{x:.{digits}f}"


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_stage_scores(rows: dict[str, Any], path: Path, metric: str = "acc_0.01",
                      freeze: dict[str, Any] | None = None) -> Path | None:
    """The stage curve: on the held-out tasks, acc_0.01 in both readings (95 % of points, every point; mean of ID
    and OOD) after each stage, the shipped default beside it; without held-out rows, the training score."""
    stages = [s for s in CURVE if s in rows]
    held = [s for s in stages if (rows[s].get("heldout") or {}).get("acc_0.01_mean") is not None]
    if not stages:
        return None
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7.0, 3.8))
    width = 0.38
    if held:
        series = (("acc_0.01_mean", "acc_0.01, 95 % of points", "tab:blue"),
                  ("acc_all_0.01_mean", "acc_0.01, every point", "tab:orange"))
        labels = [_title(s, freeze or {}).replace(" (", "\n(").replace(": ", ":\n") for s in held]
        for k, (key, label, color) in enumerate(series):
            values = [rows[s]["heldout"].get(key) or 0.0 for s in held]
            ax.bar([i + (k - 0.5) * width for i in range(len(held))], values, width, label=label, color=color)
        ax.set_xticks(range(len(held)), labels, fontsize=7)
        ax.set_ylabel("held-out tasks, mean of ID and OOD")
    else:
        values = [((rows[s].get("train") or {}).get("score") or 0.0) for s in stages]
        ax.bar(range(len(stages)), values, width, label=f"training tasks, {metric}", color="tab:blue")
        ax.set_xticks(range(len(stages)), [_title(s, freeze or {}).replace(": ", ":\n") for s in stages], fontsize=7)
        ax.set_ylabel(f"mean {metric}")
    ax.set_ylim(0, 1.05)
    ax.set_title("Score after each stage")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_history(trials: list[dict[str, Any]], path: Path, metric: str = "acc_0.01") -> Path | None:
    done = [t for t in trials if t.get("state") == "COMPLETE" and t.get("value") is not None]
    if not done:
        return None
    plt = _plt()
    from matplotlib.ticker import MaxNLocator

    done.sort(key=lambda t: t["number"])
    xs = [t["number"] for t in done]
    ys = [t["value"] for t in done]
    best, run = [], -math.inf
    for y in ys:
        run = max(run, y)
        best.append(run)
    fig, ax = plt.subplots(figsize=(6.5, 3.4))
    ax.scatter(xs, ys, s=18, label="trial objective", color="tab:blue")
    ax.step(xs, best, where="post", color="tab:red", label="best so far")
    ax.set_xlabel("trial")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_ylabel(f"{metric} − penalty × LLM calls")
    ax.set_title("Stage 2 optimization history")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_refinement(steps: list[dict[str, Any]], start: float | None, path: Path,
                    metric: str = "acc_0.01") -> Path | None:
    tried = [s for s in steps if s.get("child_holdout") is not None or s.get("child_minibatch") is not None]
    if not steps or start is None:
        return None
    plt = _plt()
    from matplotlib.ticker import MaxNLocator

    fig, ax = plt.subplots(figsize=(6.5, 3.4))
    best, run = [], start
    for s in steps:
        if s.get("accepted"):
            run = max(run, s.get("child_holdout") or run)
        best.append(run)
    ax.step([s["step"] for s in steps], best, where="post", color="tab:green", label="best held-out-slice mean")
    xs = [s["step"] for s in tried if s.get("child_holdout") is not None]
    ys = [s["child_holdout"] for s in tried if s.get("child_holdout") is not None]
    if xs:
        ax.scatter(xs, ys, color="tab:gray", s=18, label="child (held-out slice)")
    ax.set_xlabel("refinement step")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_ylabel(f"mean {metric}")
    ax.set_ylim(-0.05, 1.05)
    ax.set_title("Stage 3 reflective refinement")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _stage_table(freeze: dict[str, Any]) -> list[str]:
    rows, metric = freeze.get("rows", {}), freeze.get("metric", "acc_0.01")
    cumulative = freeze.get("solver_runs_cumulative", {})
    lines = [
        f"| stage | workflow w | hand-made SR choices | training {metric} (training scale) | cumulative solver "
        "executions | LLM calls / task | seconds / task |",
        "|---|---|---|---|---|---|---|",
    ]
    for stage in STAGES:
        if stage not in rows:
            continue
        row = rows[stage]
        train, held = row.get("train") or {}, row.get("heldout") or {}
        cost = train or held
        mark = " **(frozen)**" if freeze.get("selected_stage") == stage else ""
        choices = ", ".join(f"{k}={v if not isinstance(v, list) else '+'.join(v)}"
                            for k, v in (row.get("sr_choices") or {}).items()) or "none"
        lines.append(
            f"| {_title(stage, freeze)}{mark} | {tuple(row.get('workflow', ()))} | {choices} | {_f(train.get('score'))} | "
            f"{cumulative.get(stage, 0) if stage != 'baseline' else 0} | "
            f"{_f(cost.get('llm_calls_per_task'), 1)} | {_f(cost.get('seconds_per_task'), 1)} |"
        )
    return lines


def _headline(freeze: dict[str, Any]) -> list[str]:
    """The first table: on the held-out tasks, the starting harness, each stage's harness and the shipped default,
    both Acc_0.01 readings and symbolic accuracy, at the same SR seconds."""
    rows = freeze.get("rows", {})
    curve = [s for s in CURVE if (rows.get(s) or {}).get("heldout")]
    if not curve:
        return []
    scale = freeze.get("heldout_time_scale") or 1.0
    seconds = freeze.get("heldout_seconds_per_run") or 60 * scale
    cumulative = freeze.get("solver_runs_cumulative", {})
    first = rows[curve[0]]["heldout"]
    n_tasks = len(first.get("tasks") or {})
    out = [f"## Held-out tasks: {_title('baseline', freeze)} → trained → shipped default", "",
           f"{n_tasks} held-out task(s), never seen by any stage; every harness with {seconds:g} s per SR run "
           f"({_f(scale, 2)} of the solve seconds). acc_0.01 = share of tasks where at least 95 % of the test points "
           "are within 1 % (SR-Scientist's reading, used by the published PySR / SR-Scientist / HarnessSR figures); "
           "every point = all points within 1 %. SA = the selected equation is the ground truth up to its constants.",
           "", "| harness | acc_0.01 ID | acc_0.01 OOD | every point ID | every point OOD | SA | solver executions "
           "(cumulative, training) | LLM calls / task |", "|---|---|---|---|---|---|---|---|"]
    for stage in curve:
        held = rows[stage]["heldout"]
        marks = []
        if freeze.get("picked_stage") == stage:
            marks.append("trained")
        if freeze.get("selected_stage") == stage:
            marks.append("**frozen**")
        mark = f" ({', '.join(marks)})" if marks else ""
        spent = "–" if stage == "default" else (0 if stage == "baseline" else cumulative.get(stage, 0))
        out.append(f"| {_title(stage, freeze)}{mark} | {_f(held.get('acc_0.01_id'))} | {_f(held.get('acc_0.01_ood'))} | "
                   f"{_f(held.get('acc_all_0.01_id'))} | {_f(held.get('acc_all_0.01_ood'))} | {_f(held.get('sa'))} | "
                   f"{spent} | {_f(held.get('llm_calls_per_task'), 1)} |")
    base, picked, default = (rows.get(s, {}).get("heldout") for s in ("baseline", freeze.get("picked_stage"),
                                                                        "default"))
    if base and picked and base.get("acc_0.01_mean") is not None and picked.get("acc_0.01_mean") is not None:
        out += ["", f"Climb from the start to the trained harness (acc_0.01, mean of ID and OOD): "
                f"{_f(base['acc_0.01_mean'])} → {_f(picked['acc_0.01_mean'])}"
                + (f"; shipped default {_f(default['acc_0.01_mean'])}." if default and
                   default.get("acc_0.01_mean") is not None else ".")]
    return out + [""]


DETAIL_COLUMNS = (("acc_0.01_id", "acc_0.01 ID"), ("acc_all_0.01_id", "every point ID"),
                  ("acc_0.001_id", "acc_0.001 ID"), ("acc_0.01_ood", "acc_0.01 OOD"),
                  ("acc_all_0.01_ood", "every point OOD"), ("acc_0.001_ood", "acc_0.001 OOD"), ("nmse_id", "NMSE ID"),
                  ("nmse_ood", "NMSE OOD"), ("sa", "SA"), ("llm_calls", "LLM calls"), ("solver_runs", "solver runs"))


def _heldout_tables(freeze: dict[str, Any]) -> list[str]:
    """Per held-out task and per domain, each stage's harness: Acc and NMSE ID / OOD, symbolic accuracy, costs."""
    rows = freeze.get("rows", {})
    stages = [s for s in CURVE if s in rows and (rows[s].get("heldout") or {}).get("tasks")]
    if not stages:
        return []
    names = sorted({t for s in stages for t in rows[s]["heldout"]["tasks"]})
    head = "| task | stage | " + " | ".join(label for _, label in DETAIL_COLUMNS) + " |"
    out = ["## Held-out tasks", "", "Means over seeds (NMSE: median). SA = the selected equation is the ground "
           "truth up to its free constants (`harness/engine/symbolic.py`).", "", head,
           "|" + "---|" * (len(DETAIL_COLUMNS) + 2)]
    for name in names:
        for stage in stages:
            detail = rows[stage]["heldout"]["tasks"].get(name)
            if detail is None:
                continue
            cells = [(f"{detail[key]:.3g}" if key.startswith("nmse") and detail.get(key) is not None else
                      _f(detail.get(key), 1 if key in ("llm_calls", "solver_runs") else 3)) for key, _ in DETAIL_COLUMNS]
            out.append(f"| {name} | {_title(stage, freeze)} | " + " | ".join(cells) + " |")
    out += ["", "| domain | stage | tasks | acc_0.01 ID | acc_0.01 OOD | acc_0.001 ID | acc_0.001 OOD | SA |",
            "|---|---|---|---|---|---|---|---|"]
    domains = sorted({d.get("domain") or "(none)" for s in stages for d in rows[s]["heldout"]["tasks"].values()})
    for domain in domains:
        for stage in stages:
            group = [d for d in rows[stage]["heldout"]["tasks"].values() if (d.get("domain") or "(none)") == domain]
            if not group:
                continue

            def mean_of(key: str) -> float | None:
                values = [d[key] for d in group if d.get(key) is not None]
                return sum(values) / len(values) if values else None

            out.append(f"| {domain} | {_title(stage, freeze)} | {len(group)} | {_f(mean_of('acc_0.01_id'))} | "
                       f"{_f(mean_of('acc_0.01_ood'))} | {_f(mean_of('acc_0.001_id'))} | "
                       f"{_f(mean_of('acc_0.001_ood'))} | {_f(mean_of('sa'))} |")
    return out + [""]


def _record_tokens(record: dict[str, Any]) -> int:
    """A solve's tokens: stored with the record, else read from its run folder (rows from before tokens were kept)."""
    if record.get("tokens"):
        return int(record["tokens"])
    result = Path(record.get("run_dir") or "") / "result.json"
    try:
        counts = json.loads(result.read_text(encoding="utf-8")).get("counts") or {}
    except (OSError, ValueError):
        return 0
    return int(counts.get("prompt_tokens", 0) or 0) + int(counts.get("completion_tokens", 0) or 0)


def cost_rows(run_dir: Path, results: dict[str, dict[str, Any] | None]) -> list[dict[str, Any]]:
    """What each stage paid. Evaluations, solver executions, LLM calls and tokens of the solves come from the
    evaluation cache (exact over every process and resume); wall time and the model's paid calls (solves, rewrites,
    reflections) and cache hits from the stage results (every process that finished the stage, summed)."""
    path = Path(run_dir) / "evals.db"
    if not path.exists():
        return []
    cache = EvalCache(path)
    try:
        totals = cache.totals_by_stage()
        tokens: dict[str, int] = {}
        for record in cache.records():
            tokens[record.get("stage", "")] = tokens.get(record.get("stage", ""), 0) + _record_tokens(record)
    finally:
        cache.close()
    rows = []
    for stage in ("init", "search", "refine", "freeze"):
        paid, cost = totals.get(stage, {}), (results.get(stage) or {}).get("cost") or {}
        if not paid and not cost:
            continue
        rows.append({"stage": stage, "wall_seconds": cost.get("wall_seconds"),
                     "evaluations": paid.get("evaluations", 0), "solver_runs": paid.get("solver_runs", 0),
                     "solve_llm_calls": paid.get("llm_calls", 0), "solve_tokens": tokens.get(stage, 0),
                     "llm_calls_paid": cost.get("llm_calls_paid"),
                     "tokens_paid": (cost["prompt_tokens"] + cost["completion_tokens"]) if cost else None,
                     "llm_cache_hits": cost.get("llm_cache_hits")})
    return rows


def _cost_table(rows: list[dict[str, Any]]) -> list[str]:
    if not rows:
        return []

    def total(key: str) -> Any:
        values = [r[key] for r in rows]
        return None if any(v is None for v in values) else sum(values)

    lines = ["| stage | wall time | evaluations run | solver executions | LLM calls in those solves | tokens in those "
             "solves | LLM calls paid (solves + rewrites + reflections) | tokens paid | calls answered by the cache |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows + [{"stage": "**total**", **{k: total(k) for k in rows[0] if k != "stage"}}]:
        wall = f"{r['wall_seconds'] / 60:.1f} min" if r["wall_seconds"] is not None else "–"
        lines.append(f"| {TITLES.get(r['stage'], r['stage'])} | {wall} | {r['evaluations']} | {r['solver_runs']} | "
                     f"{r['solve_llm_calls']} | {r['solve_tokens']} | {_f(r['llm_calls_paid'], 0)} | "
                     f"{_f(r['tokens_paid'], 0)} | {_f(r['llm_cache_hits'], 0)} |")
    return lines + ["", "Freeze = scoring every stage's harness for this report (not part of training). Wall time "
                    "and paid calls: the processes that finished the stage, summed (a run killed mid-stage is not "
                    "counted; \"–\" where a stage ran before they were recorded)."]


def early_stop_savings(run_dir: Path) -> dict[str, int] | None:
    """Training runs that stopped at an exact fit (``SRSettings.stop_at_exact``): how many, and the SR runs and
    role calls a full run of their harness would have made beyond what they did."""
    from workflows.harness import Harness
    from workflows.params import expected_llm_calls, expected_solver_runs

    path = Path(run_dir) / "evals.db"
    if not path.exists():
        return None
    cache = EvalCache(path)
    try:
        stopped = [r for r in cache.records() if r.get("status") == "target_reached"]
        out = {"runs": len(stopped), "solver_runs": 0, "llm_calls": 0, "shared_runs": cache.shared_count()}
        for record in stopped:
            spec = cache.spec(record["digest"])
            if spec is None:
                continue
            harness = Harness.from_dict(spec)
            out["solver_runs"] += max(0, expected_solver_runs(harness.workflow, harness.sr_settings)
                                      - int(record.get("solver_runs", 0)))
            out["llm_calls"] += max(0, expected_llm_calls(harness.workflow, harness.role_agents)
                                    - int(record.get("llm_calls", 0)))
        return out
    finally:
        cache.close()


def llm_cache_stats(run_dir: Path) -> dict[str, int] | None:
    """Stored answers and hits of the run's LLM response cache (hits as counted by the processes that ran)."""
    import sqlite3

    path = Path(run_dir) / "llm_cache.db"
    if not path.exists():
        return None
    with sqlite3.connect(path, timeout=30) as conn:
        stored = conn.execute("SELECT COUNT(*) FROM responses").fetchone()[0]
        row = conn.execute("SELECT name FROM sqlite_master WHERE name = 'hits'").fetchone()
        hits = conn.execute("SELECT COALESCE(SUM(n), 0) FROM hits").fetchone()[0] if row else 0
    return {"stored": int(stored), "hits": int(hits)}


def _sr_choices(chosen: dict[str, Any]) -> str:
    """The hand-made SR choices a stage-2 pick holds, as the trial recorded them."""
    names = ("unguided_run", "combine_terms", "operators", "sparse_regression")
    held = {k: chosen[k] for k in names if k in chosen}
    return ", ".join(f"{k}={v}" for k, v in held.items()) if held else "those of the start"


def _gate_tables(freeze: dict[str, Any]) -> list[str]:
    """What was frozen and why: the trained harness against the shipped default on the tasks that decide."""
    gate = freeze.get("gate")
    if not gate:
        return []
    decided_on = gate.get("decided_on", "validation")
    out = ["## What was frozen, and why", "", f"{gate.get('reason', '')}.", "",
           f"| {decided_on} tasks ({_f(gate.get('solve_seconds_per_run'), 0)} s per SR run) | mean score | "
           "acc_0.01 ID | acc_0.01 OOD | every point ID | every point OOD | SA | LLM calls / task |",
           "|---|---|---|---|---|---|---|---|"]
    for arm, name in (("candidate", "trained"), ("default", "shipped default")):
        row = (gate.get(arm) or {}).get(decided_on)
        if not row:
            continue
        out.append(f"| {name} | {_f(row.get('score'))} | {_f(row.get('acc_0.01_id'))} | {_f(row.get('acc_0.01_ood'))} | "
                   f"{_f(row.get('acc_all_0.01_id'))} | {_f(row.get('acc_all_0.01_ood'))} | {_f(row.get('sa'))} | "
                   f"{_f(row.get('llm_calls_per_task'), 1)} |")
        if gate.get("candidate_digest") == gate.get("default_digest"):
            break
    return out + [""]


def closing_summary(freeze: dict[str, Any]) -> tuple[str, list[dict[str, Any]], list[str]]:
    """What ``python -m optimize`` prints at the end: the held-out rows (start, stages, shipped default; both Acc_0.01
    readings and symbolic accuracy), what was frozen and why, where the files are."""
    rows = freeze.get("rows") or {}
    table = []
    for stage in CURVE:
        held = (rows.get(stage) or {}).get("heldout")
        if not held:
            continue
        marks = [m for m, s in (("trained", freeze.get("picked_stage")), ("frozen", freeze.get("selected_stage")))
                 if s == stage]
        table.append({"harness": _title(stage, freeze) + (f" ({', '.join(marks)})" if marks else ""),
                      "acc_0.01 ID": held.get("acc_0.01_id"), "acc_0.01 OOD": held.get("acc_0.01_ood"),
                      "every point ID": held.get("acc_all_0.01_id"), "every point OOD": held.get("acc_all_0.01_ood"),
                      "SA": held.get("sa")})
    n_tasks = len(((rows.get("baseline") or {}).get("heldout") or {}).get("tasks") or {})
    seconds = freeze.get("heldout_seconds_per_run") or 60 * (freeze.get("heldout_time_scale") or 1.0)
    title = (f"Held-out tasks ({n_tasks}, {seconds:g} s per SR run): {_title('baseline', freeze)} -> trained -> "
             "shipped default")
    gate = freeze.get("gate") or {}
    notes = [f"Frozen: {_title(freeze.get('selected_stage', ''), freeze)}, because {gate.get('reason', '?')}.",
             f"Harness: {freeze.get('harness_path', 'harness.json')}",
             f"Report: {Path(freeze.get('harness_path', 'harness.json')).with_name('report.md')}"]
    return title, table, notes


def write_report(run_dir: str | Path) -> Path:
    """Write ``report.md`` (+ PNGs) into ``run_dir`` from its stage result files; returns the report path."""
    folder = RunFolder(run_dir)
    s1, s2, s3 = (folder.load_stage(s) for s in ("init", "search", "refine"))
    freeze = folder.load_stage("freeze") or {}
    out: list[str] = ["# Harness optimization report", ""]
    if freeze:
        out += [f"Final harness: `harness.json` ({_title(freeze.get('selected_stage', ''), freeze)}, digest "
                f"`{freeze.get('digest')}`).", ""]
        out += _headline(freeze)
        out += _gate_tables(freeze)
    out += ["## Stages", ""]
    out += _stage_table(freeze) if freeze else ["(freeze has not run yet: no per-stage scores)"]
    metric, scored = freeze.get("metric", "acc_0.01"), freeze.get("score_split", "test_id")
    out += ["", f"Training scores: mean over tasks of {metric} of the selected equation on each task's `{scored}` "
            "split (several joined by '+': their mean), at the training scale "
            f"({_f(freeze.get('train_time_scale') or 1.0, 2)} of the solve seconds). "
            "Cumulative solver executions count SR runs the optimizer paid for (each cached once per harness, task "
            "and seed; a shared unguided run once per task and seed); report-only scoring is counted apart.", ""]
    plots = []
    if freeze.get("rows"):
        plots.append(plot_stage_scores(freeze["rows"], folder.path / "score_per_stage.png", metric, freeze))
    if s2:
        plots.append(plot_history(s2.get("trials", []), folder.path / "optimization_history.png", metric))
    if s3:
        plots.append(plot_refinement(s3.get("steps", []), (s3.get("members") or [{}])[0].get("holdout_score"),
                                     folder.path / "refinement.png", metric))
    for p in plots:
        if p is not None:
            out += [f"![{p.stem}]({p.name})", ""]
    out += _heldout_tables(freeze)
    costs = _cost_table(cost_rows(folder.path, {"init": s1, "search": s2, "refine": s3, "freeze": freeze}))
    if freeze.get("rows") or costs:
        spent = freeze.get("solver_runs_cumulative", {})
        out += ["## Cost", "", f"Cumulative solver executions after stages 1 / 2 / 3: {spent.get('init', 0)} / "
                f"{spent.get('search', 0)} / {spent.get('refine', 0)}.", ""] + costs + [""]
    saved = early_stop_savings(folder.path)
    if saved and (saved["runs"] or saved["shared_runs"]):
        out += [f"Paid once, read many times: {saved['shared_runs']} unguided runs were made once per task, seed and "
                f"engine settings and shared by every harness that makes them. Early stop at an exact fit: "
                f"{saved['runs']} training runs stopped once their pool held an exact fit, saving "
                f"{saved['solver_runs']} SR runs and {saved['llm_calls']} role calls.", ""]
    cache = llm_cache_stats(folder.path)
    if cache:
        out += [f"LLM response cache (`llm_cache.db`): {cache['stored']} answers stored; {cache['hits']} calls were "
                "answered from it (a resumed or repeated stage pays for no call twice).", ""]
    if s1:
        out += ["## Stage 1: prompt pool", "",
                f"| role group | workflow | candidate | mean {metric} on its pairs | LLM calls / task |",
                "|---|---|---|---|---|"]
        for g in s1.get("groups", []):
            for i, c in enumerate(g.get("candidates", [])):
                paired = (c.get("rewrite") or {}).get("paired") or {}
                verdict = (f" (against {paired.get('against')}: {paired.get('summary') or paired.get('verdict')})"
                           if paired else "")
                out.append(f"| {'+'.join(g['roles'])} | {tuple(g['workflow'])} | {c.get('origin')}"
                           f"{' **(kept)**' if i == 0 else ''}{verdict} | {_f(c.get('score'))} | "
                           f"{_f(c.get('llm_calls_per_task'), 1)} |")
        out += ["", "A rewrite replaces the kept text only when it wins a race against it on the same pairs "
                f"({s1['groups'][0].get('accept_rule', '')}).", ""] if s1.get("groups") else [""]
    if s2:
        chosen = s2.get("chosen") or {}
        out += ["## Stage 2: joint search", "",
                f"Space `{s2.get('space')}`, {s2.get('n_trials_complete')} complete trials; "
                + ("no trial won a race against the start, which is kept" if chosen.get("start") else
                   f"chosen trial {chosen.get('trial', '–')}") + f": w = {tuple(chosen.get('workflow', ()))}, prompt indices "
                f"{chosen.get('prompt_index', {})}, SR choices {_sr_choices(chosen)}; minibatch {metric} "
                f"{_f(s2.get('minibatch_score'))} after adaptation.", ""]
        dropped, retired = s2.get("dropped_trials") or [], s2.get("uninformative_tasks") or []
        out += [f"Every trial was screened against the start on {len(s2.get('screening_pairs') or [])} pairs; "
                f"{len(dropped)} fell behind and were dropped" + (f" (trials {dropped})" if dropped else "") + "."
                + (f" Every screened trial tied the start on {', '.join(retired)}: those tasks carry no information "
                   "and the races took them last." if retired else ""), ""]
        for c in s2.get("confirmation", []):
            out.append(f"- trial {c.get('trial')} raced the start: {c.get('summary') or c.get('verdict')}")
        if not s2.get("confirmation") and not chosen.get("trial"):
            out.append("- no trial gained on the screening pairs without falling behind: no race was run")
        if s2.get("confirmation") is not None:
            out += ["", f"Rule: {s2.get('accept_rule', '')}." if s2.get("accept_rule") else "", ""]
        kept = [a for a in s2.get("adaptation", []) if a.get("kept")]
        out += [f"Adaptation: {len(s2.get('adaptation', []))} rewrites tried, {len(kept)} kept.", ""]
    if s3:
        out += ["## Stage 3: reflective refinement", "",
                f"Feedback `{s3.get('feedback')}`; {len(s3.get('members', []))} candidates kept, Pareto set "
                f"{s3.get('pareto')}, best held-out-slice mean {_f(s3.get('holdout_score'))}.", "",
                "| step | role | parent | minibatch parent → child | held-out slice parent → child | wins / ties / losses "
                "| kept | note |",
                "|---|---|---|---|---|---|---|---|"]
        for st in s3.get("steps", []):
            paired = st.get("paired") or {}
            wtl = f"{paired['wins']} / {paired['ties']} / {paired['losses']}" if paired else "–"
            note = paired.get("summary") or st.get("reason") or ""
            out.append(f"| {st['step']} | {st['role']} | {st['parent']} | {_f(st.get('parent_minibatch'))} → "
                       f"{_f(st.get('child_minibatch'))} | {_f(st.get('parent_holdout'))} → {_f(st.get('child_holdout'))} "
                       f"| {wtl} | {'yes' if st.get('accepted') else 'no'} | {note} |")
        out.append("")
    out += ["## Files", "", "`harness.json` (frozen harness), `optuna.db` (stage-2 study), `evals.db` (evaluation "
            "cache), `trace.jsonl` (one line per evaluation), `runs/<stage>/<digest>/<task>_s<seed>/` (per-task run "
            "folders), `stage*_*.json` (stage results), `journal_*.jsonl` (proposed rewrites).", ""]
    path = folder.report_path
    path.write_text("\n".join(out), encoding="utf-8")
    return path


if __name__ == "__main__":  # pragma: no cover
    print(write_report(sys.argv[1] if len(sys.argv) > 1 else "."))
