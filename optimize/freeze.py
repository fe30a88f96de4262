"""Freeze - pick the stages' harness, gate it against the shipped default, write harness.json, score the curve.

Reads everything from the run folder (stage result files), so ``stage=freeze`` works as its own process. The pick
is the stage harness with the best *training* score (ties: fewer LLM calls per task, then the later stage; the last
stage when training scores are off); it is frozen only if it wins a race against the shipped default
(``optimize.race``) on the validation tasks (the training tasks when there are none) at ``freeze.time_scale`` of
the solve seconds (``gate``), else the shipped default is: a user never gets a worse solver than the default. The
held-out tasks are scored at ``freeze.heldout_time_scale`` (the solve seconds in ``small`` and ``paper``) for the
report only - the starting harness, each stage's harness and the shipped default (the stage curve), or with
``freeze.heldout: false`` just the start, the pick and the default - and never influence a choice. Report-only
runs are paid under the stage ``freeze``, so the cumulative solver executions of stages 1-3 stay what the
optimizer itself used.
"""

from __future__ import annotations

import logging
import math
import time
from statistics import median
from typing import Any

from harness.app.artifact import FrozenHarness
from optimize.context import OptimizeContext
from optimize.race import race, race_schedule
from optimize.report_format import CURVE, TITLES
from optimize.settings import STAGE_ORDER
from workflows.harness import Harness, hand_made_choices
from workflows.identity import llm_identity

log = logging.getLogger(__name__)
STAGE = "freeze"


def save_once(frozen: FrozenHarness, path: Any) -> FrozenHarness:
    """Write ``frozen`` unless the folder already holds the same harness (same prompts, workflow, engine and
    LLM settings; provenance aside), which is then kept: several workers finishing one run freeze one file and
    one digest. A lock serialises the check and the write across processes."""
    import fcntl
    from pathlib import Path

    path = Path(path)
    with open(path.with_name(path.name + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if path.exists():
            try:
                held = FrozenHarness.load(path)
            except Exception:  # noqa: BLE001 - unreadable or from an older schema: replace it
                held = None
            if held is not None and held.identity_digest == frozen.identity_digest:
                log.info("harness.json already holds this harness (%s), frozen by another worker; kept", held.digest)
                return held
        frozen.save(path)
        return frozen


def stage_specs(ctx: OptimizeContext) -> dict[str, Harness]:
    """The harness each finished stage produced (baseline = the starting harness)."""
    specs = {"baseline": ctx.base}
    for stage in ("init", "search", "refine"):
        result = ctx.folder.load_stage(stage)
        if result and result.get("harness"):
            specs[stage] = Harness.from_dict(result["harness"])
    return specs


DETAIL_METRICS = (("test_id", "acc_0.01"), ("test_id", "acc_all_0.01"), ("test_id", "acc_0.001"),
                  ("test_ood", "acc_0.01"), ("test_ood", "acc_all_0.01"), ("test_ood", "acc_0.001"),
                  ("test_id", "nmse"), ("test_ood", "nmse"))


def task_details(records: list[Any], tasks: list[Any]) -> dict[str, dict[str, Any]]:
    """Per task (means over seeds): Acc / NMSE on ID and OOD, symbolic accuracy, LLM calls and solver runs.

    SA is the share of seeds whose selected equation is the task's ground truth up to its free constants
    (:mod:`harness.core.symbolic`); None for tasks without a known truth.
    """
    from harness.core.symbolic import task_symbolic_match

    by_name = {t.name: t for t in tasks}
    grouped: dict[str, list[Any]] = {}
    for rec in records:
        grouped.setdefault(rec.task, []).append(rec)
    out: dict[str, dict[str, Any]] = {}
    for name, recs in grouped.items():
        task = by_name.get(name)
        row: dict[str, Any] = {"domain": getattr(task, "domain", ""), "seeds": len(recs)}
        for split, metric in DETAIL_METRICS:
            values = [r.metrics.get(split, {}).get(metric) for r in recs]
            values = [float(v) for v in values if v is not None and math.isfinite(float(v))]
            default = 0.0 if metric.startswith("acc") else None  # a run without a result is a miss
            row[f"{metric}_{'id' if split == 'test_id' else 'ood'}"] = (
                (median(values) if metric == "nmse" else sum(values) / len(recs)) if values else default)
        sa = None
        if task is not None and task.ground_truth:
            verdicts = []
            for r in recs:
                try:
                    match = task_symbolic_match(task, r.equation)
                except Exception:  # noqa: BLE001 - a checker failure counts as "not the truth"
                    match = None
                verdicts.append(bool(match and match.equivalent))
            sa = sum(verdicts) / len(verdicts)
        row["sa"] = sa
        row["llm_calls"] = sum(r.llm_calls for r in recs) / len(recs)
        row["solver_runs"] = sum(r.solver_runs for r in recs) / len(recs)
        row["equation"] = recs[0].equation
        # per seed, so two harnesses can be paired on (task, seed) later (scripts/make_default_harness.py)
        row["per_seed"] = {str(r.seed): {f"{metric}_{'id' if split == 'test_id' else 'ood'}":
                                         r.metrics.get(split, {}).get(metric) for split, metric in DETAIL_METRICS}
                           for r in recs}
        out[name] = row
    return out


def _row(summary: Any, tasks: list[Any] | None = None) -> dict[str, Any] | None:
    if summary is None:
        return None
    row = {"score": summary.score, "per_task": summary.per_task, "nmse_median": summary.nmse_median,
           "llm_calls_per_task": summary.llm_calls_per_task, "solver_runs_per_task": summary.solver_runs_per_task,
           "seconds_per_task": summary.seconds_per_task}
    if tasks is not None:
        row["tasks"] = task_details(summary.records, tasks)
        known = [d["sa"] for d in row["tasks"].values() if d["sa"] is not None]
        row["sa"] = sum(known) / len(known) if known else None
        for key in ("acc_0.01_id", "acc_0.01_ood", "acc_all_0.01_id", "acc_all_0.01_ood"):
            values = [d.get(key) or 0.0 for d in row["tasks"].values()]
            row[key] = sum(values) / len(values) if values else None
        if row["acc_0.01_id"] is not None:
            row["acc_0.01_mean"] = (row["acc_0.01_id"] + row["acc_0.01_ood"]) / 2
            row["acc_all_0.01_mean"] = (row["acc_all_0.01_id"] + row["acc_all_0.01_ood"]) / 2
    return row


def evaluate_stages(ctx: OptimizeContext, specs: dict[str, Harness], picked: str | None = None
                    ) -> dict[str, dict[str, Any]]:
    """Each stage's harness (and the shipped default, ``default``) on the training tasks at the training scale
    (``freeze.train``) and on the held-out tasks at ``freeze.heldout_time_scale`` (``freeze.heldout``; when off,
    only the start, ``picked`` and the default are scored there), side by side: every harness on one held-out task
    before the next (``Evaluator.evaluate_side_by_side``)."""
    f = ctx.settings.freeze
    curve = {stage: (ctx.default if stage == "default" else specs[stage]) for stage in CURVE
             if stage == "default" or (stage in specs and stage in f.evaluate)}
    train = {stage: ctx.evaluator.evaluate(spec, ctx.tasks.train, ctx.seeds, stage=STAGE, label=f"{stage} train")
             for stage, spec in curve.items() if f.train and stage != "default"}
    on_held = {stage: spec for stage, spec in curve.items() if f.heldout or stage in ("baseline", "default", picked)}
    held = ctx.evaluator.evaluate_side_by_side(on_held, ctx.tasks.heldout, ctx.seeds, stage=STAGE,
                                               time_scale=f.heldout_time_scale,
                                               by_work=True if f.heldout_work else None) if ctx.tasks.heldout else {}
    rows: dict[str, dict[str, Any]] = {}
    for stage, spec in curve.items():
        if stage not in train and stage not in held:
            continue
        rows[stage] = {"title": TITLES[stage], "digest": spec.identity_digest,
                       "workflow": list(spec.workflow.as_tuple()), "sr_choices": hand_made_choices(spec),
                       "train": _row(train.get(stage), ctx.tasks.train),
                       "heldout": _row(held.get(stage), ctx.tasks.heldout)}
        log.info("freeze: %s train %s held-out %s", stage, f"{train[stage].score:.3f}" if stage in train else "-",
                 f"{held[stage].score:.3f}" if stage in held else "-")
    return rows


def pick_final(specs: dict[str, Harness], rows: dict[str, dict[str, Any]]) -> str:
    """Best training score; ties go to fewer LLM calls per task, then to the later stage; without training
    scores, the last stage that ran."""
    scored = [s for s in STAGE_ORDER if s in rows and rows[s]["train"] is not None]
    if not scored:
        return [s for s in STAGE_ORDER if s in specs][-1]
    order = {s: i for i, s in enumerate(STAGE_ORDER)}
    return max(scored, key=lambda s: (rows[s]["train"]["score"], -rows[s]["train"]["llm_calls_per_task"], order[s]))


def gate(ctx: OptimizeContext, default: Harness, candidate: Harness) -> dict[str, Any]:
    """Freeze only what wins (GEPA / HarnessSR accept only improvements): the candidate races the shipped default
    on the validation tasks (the benchmark's validation laws, or fresh draws of its training distribution; no stage
    scored them; the training tasks when there are none) x the race seeds, at ``freeze.time_scale`` of their solve seconds, for at most
    ``freeze.race_pairs`` pairs; it is kept only when the race accepts it. Otherwise the default is frozen, and the
    verdict says why in the race's words: the candidate fell behind, or the evidence was too thin to decide (the
    pairs seen and what the rule needed), never that a harness that scored better on those pairs is worse."""
    scale = ctx.settings.freeze.time_scale
    rule = ctx.settings.accept
    deciding, decided_on = (ctx.tasks.validation, "validation") if ctx.tasks.validation else (ctx.tasks.train, "train")
    out: dict[str, Any] = {"time_scale": scale, "default_digest": default.identity_digest,
                           "candidate_digest": candidate.identity_digest, "decided_on": decided_on,
                           "solve_seconds_per_run": default.settings.time_budget * scale, "rule": rule.describe()}
    if candidate.identity_digest == default.identity_digest:
        summary = ctx.evaluator.evaluate_side_by_side({"default": default}, deciding, ctx.seeds, stage=STAGE,
                                                      time_scale=scale)["default"]
        out["default"] = out["candidate"] = {decided_on: _row(summary, deciding)}
        out["winner"], out["verdict"] = "default", "same"
        out["reason"] = "the optimizer's pick is the shipped default itself"
        log.info("freeze gate: %s", out["reason"])
        return out
    schedule = race_schedule(deciding, ctx.race_seeds, ctx.seed)
    result = race(candidate, default, schedule, rule, ctx.evaluator.scorer(STAGE, time_scale=scale),
                  max_pairs=ctx.settings.freeze.race_pairs, batch=ctx.settings.race_batch,
                  labels=("candidate", "default"))
    ran = schedule[: len(result.pairs)]
    summaries = ctx.evaluator.evaluate_pairs({"default": default, "candidate": candidate}, ran, stage=STAGE,
                                             time_scale=scale)
    for name in ("default", "candidate"):
        out[name] = {decided_on: _row(summaries[name], deciding)}
    out["paired"] = result.to_dict()
    out["verdict"] = result.verdict
    out["winner"] = "candidate" if result.accepted else "default"
    where = f"on the {decided_on} tasks at {scale:g} of the solve seconds"
    if result.accepted:
        out["reason"] = f"the trained harness beat the shipped default {where}: {result.summary()}; it is frozen"
    elif result.verdict == "behind":
        out["reason"] = (f"the trained harness fell behind the shipped default {where}: {result.summary()}; the "
                         "shipped default is frozen")
    elif result.record.net < 0 and result.challenger_mean < result.incumbent_mean:
        out["reason"] = (f"the trained harness lost more pairs than it won against the shipped default {where}: "
                         f"{result.summary()}; the shipped default is frozen")
    else:
        lead = ("the trained harness scored higher on these pairs, but "
                if result.challenger_mean > result.incumbent_mean else "")
        out["reason"] = (f"{lead}the evidence is too thin to say it is better than the shipped default {where}: "
                         f"{result.summary()}; the shipped default is frozen (it is never replaced on thin "
                         "evidence)")
    log.info("freeze gate: %s", out["reason"])
    return out


def run_freeze(ctx: OptimizeContext) -> dict[str, Any]:
    """Pick the stages' harness, gate it against the shipped default, save ``harness.json`` (FrozenHarness), score
    the held-out curve and return the freeze result."""
    specs = stage_specs(ctx)
    f = ctx.settings.freeze
    picked = pick_final(specs, _train_rows(ctx, specs))
    verdict = gate(ctx, ctx.default, specs[picked])
    final = picked if verdict["winner"] == "candidate" else "default"
    spec = specs[picked] if final == picked else ctx.default
    rows = evaluate_stages(ctx, specs, picked=picked)
    spent = ctx.evaluator.spent()
    cumulative = ctx.evaluator.cumulative_solver_runs(("init", "search", "refine"))
    provenance = {
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "start": ctx.settings.seed,
        "selected_stage": final,
        "picked_stage": picked,
        "gate": verdict,
        "train_time_scale": ctx.settings.train_time_scale,
        "heldout_time_scale": f.heldout_time_scale,
        "scores": {stage: {"train": (row["train"] or {}).get("score"), "heldout": (row["heldout"] or {}).get("score")}
                   for stage, row in rows.items()},
        "heldout": {stage: {k: (row["heldout"] or {}).get(k) for k in HEADLINE_KEYS}
                    for stage, row in rows.items() if row.get("heldout")},
        "stage_rows": rows,
        "solver_runs_cumulative": cumulative,
        "solver_runs_by_stage": {k: v.get("solver_runs", 0) for k, v in spent.items()},
        "llm_calls_by_stage": {k: v.get("llm_calls", 0) for k, v in spent.items()},
        "shared_runs": ctx.evaluator.cache.shared_count(),
        "optimizer_llm_usage": dict(getattr(getattr(ctx.llm, "usage", None), "snapshot", dict)()),
        "harness_llm": llm_identity(ctx.llm_config),
        "reflection_llm": llm_identity(ctx.reflection_config) if ctx.reflection_config else "the harness's own model",
        "seeds": ctx.seeds,
        "seed": ctx.seed,
        "training_tasks": [t.name for t in ctx.tasks.train],
        "validation_tasks": [t.name for t in ctx.tasks.validation],
        "heldout_tasks": [t.name for t in ctx.tasks.heldout],
        "benchmark": ctx.benchmark_config,
        **({"tasks_note": ctx.tasks.note} if ctx.tasks.note else {}),
        "preset": ctx.settings.preset,
        "settings": ctx.settings.model_dump(),
    }
    frozen = FrozenHarness.from_harness(spec.with_changes(llm=llm_identity(ctx.llm_config)), provenance)
    frozen = save_once(frozen, ctx.folder.harness_path)
    log.info("froze the %s harness (%s) to %s", TITLES.get(final, final), frozen.digest, ctx.folder.harness_path)
    return {"stage": STAGE, "start": ctx.settings.seed, "selected_stage": final, "picked_stage": picked,
            "gate": verdict, "train_time_scale": ctx.settings.train_time_scale,
            "heldout_time_scale": f.heldout_time_scale,
            "heldout_seconds_per_run": ctx.default.settings.time_budget * f.heldout_time_scale,
            "rows": rows, "solver_runs_cumulative": cumulative,
            "metric": ctx.settings.metric, "score_split": ctx.settings.score_split,
            "tasks": {"benchmark": ctx.tasks.benchmark, "note": ctx.tasks.note, **ctx.tasks.names()},
            "guard_hits": sum(int(r.get("guard_hits") or 0) for r in ctx.evaluator.cache.records()),
            "harness_path": str(ctx.folder.harness_path), "digest": frozen.digest}


HEADLINE_KEYS = ("acc_0.01_id", "acc_0.01_ood", "acc_0.01_mean", "acc_all_0.01_id", "acc_all_0.01_ood",
                 "acc_all_0.01_mean", "sa", "llm_calls_per_task", "solver_runs_per_task", "seconds_per_task")


def _train_rows(ctx: OptimizeContext, specs: dict[str, Harness]) -> dict[str, dict[str, Any]]:
    """Training scores of the stage harnesses (``freeze.train``; empty when off): what picks the final stage."""
    if not ctx.settings.freeze.train:
        return {}
    rows = {}
    for stage in STAGE_ORDER:
        if stage in specs and stage in ctx.settings.freeze.evaluate:
            summary = ctx.evaluator.evaluate(specs[stage], ctx.tasks.train, ctx.seeds, stage=STAGE,
                                             label=f"{stage} train")
            rows[stage] = {"train": _row(summary)}
    return rows
