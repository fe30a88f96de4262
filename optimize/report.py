"""``report.md`` and its plots (matplotlib, Agg) from the saved stage results of a run folder.

Written from files only, so a report can be regenerated for any run folder:
``python -m optimize.report <run dir>``.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from optimize.costs import cost_rows, cost_table, early_stop_savings, llm_cache_stats
from optimize.report_format import CURVE, STAGES, fmt, stage_title
from optimize.report_plots import plot_history, plot_refinement, plot_stage_scores
from optimize.runfolder import RunFolder
from optimize.summary import learned

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
            f"| {stage_title(stage, freeze)}{mark} | {tuple(row.get('workflow', ()))} | {choices} | {fmt(train.get('score'))} | "
            f"{cumulative.get(stage, 0) if stage != 'baseline' else 0} | "
            f"{fmt(cost.get('llm_calls_per_task'), 1)} | {fmt(cost.get('seconds_per_task'), 1)} |"
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
    out = [f"## Held-out tasks: {stage_title('baseline', freeze)} → trained → shipped default", "",
           f"{n_tasks} held-out task(s), never seen by any stage; every harness with {seconds:g} s per SR run "
           f"({fmt(scale, 2)} of the solve seconds). acc_0.01 = share of tasks where at least 95 % of the test points "
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
        out.append(f"| {stage_title(stage, freeze)}{mark} | {fmt(held.get('acc_0.01_id'))} | {fmt(held.get('acc_0.01_ood'))} | "
                   f"{fmt(held.get('acc_all_0.01_id'))} | {fmt(held.get('acc_all_0.01_ood'))} | {fmt(held.get('sa'))} | "
                   f"{spent} | {fmt(held.get('llm_calls_per_task'), 1)} |")
    base, picked, default = (rows.get(s, {}).get("heldout") for s in ("baseline", freeze.get("picked_stage"),
                                                                        "default"))
    if base and picked and base.get("acc_0.01_mean") is not None and picked.get("acc_0.01_mean") is not None:
        out += ["", f"Climb from the start to the trained harness (acc_0.01, mean of ID and OOD): "
                f"{fmt(base['acc_0.01_mean'])} → {fmt(picked['acc_0.01_mean'])}"
                + (f"; shipped default {fmt(default['acc_0.01_mean'])}." if default and
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
           "truth up to its free constants (`harness/core/symbolic.py`).", "", head,
           "|" + "---|" * (len(DETAIL_COLUMNS) + 2)]
    for name in names:
        for stage in stages:
            detail = rows[stage]["heldout"]["tasks"].get(name)
            if detail is None:
                continue
            cells = [(f"{detail[key]:.3g}" if key.startswith("nmse") and detail.get(key) is not None else
                      fmt(detail.get(key), 1 if key in ("llm_calls", "solver_runs") else 3)) for key, _ in DETAIL_COLUMNS]
            out.append(f"| {name} | {stage_title(stage, freeze)} | " + " | ".join(cells) + " |")
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

            out.append(f"| {domain} | {stage_title(stage, freeze)} | {len(group)} | {fmt(mean_of('acc_0.01_id'))} | "
                       f"{fmt(mean_of('acc_0.01_ood'))} | {fmt(mean_of('acc_0.001_id'))} | "
                       f"{fmt(mean_of('acc_0.001_ood'))} | {fmt(mean_of('sa'))} |")
    return out + [""]


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
           f"| {decided_on} tasks ({fmt(gate.get('solve_seconds_per_run'), 0)} s per SR run) | mean score | "
           "acc_0.01 ID | acc_0.01 OOD | every point ID | every point OOD | SA | LLM calls / task |",
           "|---|---|---|---|---|---|---|---|"]
    for arm, name in (("candidate", "trained"), ("default", "shipped default")):
        row = (gate.get(arm) or {}).get(decided_on)
        if not row:
            continue
        out.append(f"| {name} | {fmt(row.get('score'))} | {fmt(row.get('acc_0.01_id'))} | {fmt(row.get('acc_0.01_ood'))} | "
                   f"{fmt(row.get('acc_all_0.01_id'))} | {fmt(row.get('acc_all_0.01_ood'))} | {fmt(row.get('sa'))} | "
                   f"{fmt(row.get('llm_calls_per_task'), 1)} |")
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
        table.append({"harness": stage_title(stage, freeze) + (f" ({', '.join(marks)})" if marks else ""),
                      "acc_0.01 ID": held.get("acc_0.01_id"), "acc_0.01 OOD": held.get("acc_0.01_ood"),
                      "every point ID": held.get("acc_all_0.01_id"), "every point OOD": held.get("acc_all_0.01_ood"),
                      "SA": held.get("sa")})
    n_tasks = len(((rows.get("baseline") or {}).get("heldout") or {}).get("tasks") or {})
    seconds = freeze.get("heldout_seconds_per_run") or 60 * (freeze.get("heldout_time_scale") or 1.0)
    title = (f"Held-out tasks ({n_tasks}, {seconds:g} s per SR run): {stage_title('baseline', freeze)} -> trained -> "
             "shipped default")
    gate = freeze.get("gate") or {}
    folder = RunFolder(Path(freeze.get("harness_path", "harness.json")).parent)
    stages = {s: folder.load_stage(s) for s in ("init", "search", "refine")}
    first = learned(freeze, stages["init"], stages["search"], stages["refine"],
                    cost_rows(folder.path, {**stages, "freeze": freeze}))
    notes = [*(line.replace("**", "") for line in first),
             f"Frozen: {stage_title(freeze.get('selected_stage', ''), freeze)}, because {gate.get('reason', '?')}.",
             *_task_lines(freeze),
             f"Harness: {freeze.get('harness_path', 'harness.json')}",
             f"Report: {Path(freeze.get('harness_path', 'harness.json')).with_name('report.md')}"]
    return title, table, notes


def _task_lines(freeze: dict[str, Any]) -> list[str]:
    """Which tasks the run trained, gated and reported on, and why when they are not the configured benchmark's."""
    tasks = freeze.get("tasks") or {}
    if not tasks:
        return []
    counts = " / ".join(f"{len(tasks.get(k) or [])} {k}" for k in ("train", "validation", "heldout"))
    line = f"Tasks: {tasks.get('benchmark') or 'the benchmark'}'s laws ({counts})."
    return [line] + ([f"Note: {tasks['note']}"] if tasks.get("note") else [])


def write_report(run_dir: str | Path) -> Path:
    """Write ``report.md`` (+ PNGs) into ``run_dir`` from its stage result files; returns the report path."""
    folder = RunFolder(run_dir)
    s1, s2, s3 = (folder.load_stage(s) for s in ("init", "search", "refine"))
    freeze = folder.load_stage("freeze") or {}
    out: list[str] = ["# Harness optimization report", ""]
    if freeze:
        out += [f"Final harness: `harness.json` ({stage_title(freeze.get('selected_stage', ''), freeze)}, digest "
                f"`{freeze.get('digest')}`).", ""]
        results = {"init": s1, "search": s2, "refine": s3, "freeze": freeze}
        out += [line + "\n" for line in learned(freeze, s1, s2, s3, cost_rows(folder.path, results))]
        out += [line + "\n" for line in _task_lines(freeze)]
        out += _headline(freeze)
        out += _gate_tables(freeze)
    out += ["## Stages", ""]
    out += _stage_table(freeze) if freeze else ["(freeze has not run yet: no per-stage scores)"]
    metric, scored = freeze.get("metric", "acc_0.01"), freeze.get("score_split", "test_id")
    out += ["", f"Training scores: mean over tasks of {metric} of the selected equation on each task's `{scored}` "
            "split (several joined by '+': their mean), at the training scale "
            f"({fmt(freeze.get('train_time_scale') or 1.0, 2)} of the solve seconds). "
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
    costs = cost_table(cost_rows(folder.path, {"init": s1, "search": s2, "refine": s3, "freeze": freeze}))
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
                           f"{' **(kept)**' if i == 0 else ''}{verdict} | {fmt(c.get('score'))} | "
                           f"{fmt(c.get('llm_calls_per_task'), 1)} |")
        out += ["", "A rewrite replaces the kept text only when it wins a race against it on the same pairs "
                f"({s1['groups'][0].get('accept_rule', '')}).", ""] if s1.get("groups") else [""]
    if s2:
        chosen = s2.get("chosen") or {}
        out += ["## Stage 2: joint search", "",
                f"Space `{s2.get('space')}`, {s2.get('n_trials_complete')} complete trials; "
                + ("no trial won a race against the start, which is kept" if chosen.get("start") else
                   f"chosen trial {chosen.get('trial', '–')}") + f": w = {tuple(chosen.get('workflow', ()))}, prompt indices "
                f"{chosen.get('prompt_index', {})}, SR choices {_sr_choices(chosen)}; minibatch {metric} "
                f"{fmt(s2.get('minibatch_score'))} after adaptation.", ""]
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
                f"{s3.get('pareto')}, best held-out-slice mean {fmt(s3.get('holdout_score'))}.", "",
                "| step | role | parent | minibatch parent → child | held-out slice parent → child | wins / ties / losses "
                "| kept | note |",
                "|---|---|---|---|---|---|---|---|"]
        for st in s3.get("steps", []):
            paired = st.get("paired") or {}
            wtl = f"{paired['wins']} / {paired['ties']} / {paired['losses']}" if paired else "–"
            note = paired.get("summary") or st.get("reason") or ""
            out.append(f"| {st['step']} | {st['role']} | {st['parent']} | {fmt(st.get('parent_minibatch'))} → "
                       f"{fmt(st.get('child_minibatch'))} | {fmt(st.get('parent_holdout'))} → {fmt(st.get('child_holdout'))} "
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
