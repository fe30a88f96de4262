"""Freeze — score each stage's harness on all training and held-out tasks, pick the final one, write harness.json.

Reads everything from the run folder (stage result files), so ``stage=freeze`` works as its own process. The final
harness is the stage harness with the best *training* score (ties: fewer LLM calls per task, then the later
stage); held-out tasks are scored for the report only and never influence the choice. Report-only runs are paid
under the stage ``freeze``, so the cumulative solver executions of stages 1-3 stay what the optimizer itself used.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from harness.artifact import FrozenHarness
from optimize.context import OptimizeContext, llm_identity
from optimize.spec import HarnessSpec

log = logging.getLogger(__name__)
STAGE = "freeze"
STAGE_ORDER = ("baseline", "init", "search", "refine")
STAGE_TITLES = {"baseline": "seed harness", "init": "stage 1 (prompt init)", "search": "stage 2 (joint search)",
                "refine": "stage 3 (reflective refinement)"}


IDENTITY_FIELDS = ("prompts", "workflow", "backend", "sr_settings", "llm")


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
            if held is not None and all(getattr(held, k) == getattr(frozen, k) for k in IDENTITY_FIELDS):
                log.info("harness.json already holds this harness (%s), frozen by another worker; kept", held.digest)
                return held
        frozen.save(path)
        return frozen


def stage_specs(ctx: OptimizeContext) -> dict[str, HarnessSpec]:
    """The harness each finished stage produced (baseline = seed prompts + default workflow)."""
    specs = {"baseline": ctx.base}
    for stage in ("init", "search", "refine"):
        result = ctx.folder.load_stage(stage)
        if result and result.get("harness"):
            specs[stage] = HarnessSpec.from_dict(result["harness"])
    return specs


def _row(summary: Any) -> dict[str, Any] | None:
    if summary is None:
        return None
    return {"score": summary.score, "per_task": summary.per_task, "nmse_median": summary.nmse_median,
            "llm_calls_per_task": summary.llm_calls_per_task, "solver_runs_per_task": summary.solver_runs_per_task,
            "seconds_per_task": summary.seconds_per_task}


def evaluate_stages(ctx: OptimizeContext, specs: dict[str, HarnessSpec]) -> dict[str, dict[str, Any]]:
    f = ctx.settings.freeze
    rows: dict[str, dict[str, Any]] = {}
    for stage in STAGE_ORDER:
        if stage not in specs or stage not in f.evaluate:
            continue
        spec = specs[stage]
        train = held = None
        if f.train:
            train = ctx.evaluator.evaluate(spec, ctx.tasks.train, ctx.seeds, stage=STAGE, label=f"{stage} train")
        if f.heldout and ctx.tasks.heldout:
            held = ctx.evaluator.evaluate(spec, ctx.tasks.heldout, ctx.seeds, stage=STAGE, label=f"{stage} heldout")
        rows[stage] = {"title": STAGE_TITLES[stage], "digest": spec.digest(),
                       "workflow": list(spec.workflow.as_tuple()), "train": _row(train), "heldout": _row(held)}
        log.info("freeze: %s train %.3f held-out %s", stage, train.score if train else float("nan"),
                 f"{held.score:.3f}" if held else "-")
    return rows


def pick_final(specs: dict[str, HarnessSpec], rows: dict[str, dict[str, Any]]) -> str:
    """Best training score; ties go to fewer LLM calls per task, then to the later stage."""
    scored = [s for s in STAGE_ORDER if s in rows and rows[s]["train"] is not None]
    if not scored:
        return [s for s in STAGE_ORDER if s in specs][-1]
    order = {s: i for i, s in enumerate(STAGE_ORDER)}
    return max(scored, key=lambda s: (rows[s]["train"]["score"], -rows[s]["train"]["llm_calls_per_task"], order[s]))


def run_freeze(ctx: OptimizeContext) -> dict[str, Any]:
    """Evaluate stage harnesses, save ``harness.json`` (FrozenHarness) and return the freeze result."""
    from harness.artifact import FrozenHarness

    specs = stage_specs(ctx)
    rows = evaluate_stages(ctx, specs)
    final = pick_final(specs, rows)
    spec = specs[final]
    spent = ctx.evaluator.spent()
    cumulative = ctx.evaluator.cumulative_solver_runs(("init", "search", "refine"))
    provenance = {
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "selected_stage": final,
        "scores": {stage: {"train": (row["train"] or {}).get("score"), "heldout": (row["heldout"] or {}).get("score")}
                   for stage, row in rows.items()},
        "stage_rows": rows,
        "solver_runs_cumulative": cumulative,
        "solver_runs_by_stage": {k: v.get("solver_runs", 0) for k, v in spent.items()},
        "llm_calls_by_stage": {k: v.get("llm_calls", 0) for k, v in spent.items()},
        "optimizer_llm_usage": dict(getattr(getattr(ctx.llm, "usage", None), "snapshot", dict)()),
        "harness_llm": llm_identity(ctx.llm_config),
        "reflection_llm": llm_identity(ctx.reflection_config) if ctx.reflection_config else "the harness's own model",
        "seeds": ctx.seeds,
        "seed": ctx.seed,
        "training_tasks": [t.name for t in ctx.tasks.train],
        "heldout_tasks": [t.name for t in ctx.tasks.heldout],
        "benchmark": ctx.benchmark_config,
        "preset": ctx.settings.preset,
        "settings": ctx.settings.model_dump(),
    }
    frozen = FrozenHarness.create(dict(spec.prompts), spec.workflow, backend=spec.backend,
                                  sr_settings=dict(spec.sr_settings), llm=ctx.llm_config, provenance=provenance)
    frozen = save_once(frozen, ctx.folder.harness_path)
    log.info("froze the %s harness (%s) to %s", final, frozen.digest, ctx.folder.harness_path)
    return {"stage": STAGE, "selected_stage": final, "rows": rows, "solver_runs_cumulative": cumulative,
            "harness_path": str(ctx.folder.harness_path), "digest": frozen.digest}
