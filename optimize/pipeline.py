"""Runs the stages in order on one run folder, skipping stages whose result file exists (unless ``force``).

Each stage reads what it needs from the saved results of the earlier ones, so ``stage=init|search|refine|freeze``
can run as separate processes; a missing earlier stage falls back to the seed harness (with a warning).
"""

from __future__ import annotations

import logging
import os
import time
from typing import Any

from optimize.context import OptimizeContext
from optimize.freeze import run_freeze
from optimize.report import write_report
from workflows.harness import Harness
from optimize.stage1 import run_stage1
from optimize.stage2 import run_stage2
from optimize.stage3 import run_stage3

log = logging.getLogger(__name__)
ORDER = ("init", "search", "refine", "freeze")
STAGE_NAMES = {"init": "stage 1: prompt initialisation", "search": "stage 2: joint search",
               "refine": "stage 3: reflective refinement", "freeze": "freeze: gate and held-out tasks"}


def prompt_pool(ctx: OptimizeContext) -> dict[str, list[str]]:
    """Stage 1's pool, or the seed prompts (one text per role) when stage 1 has not run."""
    s1 = ctx.folder.load_stage("init")
    if s1 and s1.get("pool"):
        return {role: list(texts) for role, texts in s1["pool"].items()}
    log.warning("no stage-1 result in %s: stage 2 uses the seed prompts as its pool", ctx.folder.path)
    return {role: [text] for role, text in ctx.base.prompts.items()}


def refine_start(ctx: OptimizeContext) -> Harness:
    """Stage 2's harness, else stage 1's, else the seed harness."""
    for stage in ("search", "init"):
        result = ctx.folder.load_stage(stage)
        if result and result.get("harness"):
            return Harness.from_dict(result["harness"])
    log.warning("no stage-1/2 result in %s: stage 3 refines the seed harness", ctx.folder.path)
    return ctx.base


def llm_paid(ctx: OptimizeContext) -> dict[str, float]:
    """LLM usage so far of this process's model clients (the harness's and the reflection model): calls and
    tokens actually paid for (behind the response cache), and the calls the cache answered instead."""
    out = {"llm_calls_paid": 0, "prompt_tokens": 0, "completion_tokens": 0, "llm_seconds": 0.0, "llm_cache_hits": 0}
    clients = {id(c): c for c in (ctx.llm, ctx.reflection_llm) if c is not None}
    for client in clients.values():
        out["llm_cache_hits"] += int(getattr(client, "hits", 0) or 0)
        usage = getattr(getattr(client, "inner", client), "usage", None)
        if usage is not None:
            snap = usage.snapshot()
            out["llm_calls_paid"] += int(snap["calls"])
            out["prompt_tokens"] += int(snap["prompt_tokens"])
            out["completion_tokens"] += int(snap["completion_tokens"])
            out["llm_seconds"] += float(snap["seconds"])
    return out


def run_stage(ctx: OptimizeContext, stage: str) -> dict[str, Any]:
    """Run one stage and save its result with what it cost (wall time, LLM usage), added to what earlier runs of
    the stage cost (freeze reruns every time; ``force`` reruns any stage)."""
    earlier = (ctx.folder.load_stage(stage) or {}).get("cost") or {}
    started, before = time.perf_counter(), llm_paid(ctx)
    result = _run_stage(ctx, stage)
    after = llm_paid(ctx)
    spent = {"wall_seconds": time.perf_counter() - started, **{k: after[k] - before[k] for k in after}}
    result["cost"] = {k: round(float(earlier.get(k, 0) or 0) + v, 1) for k, v in spent.items()}
    result["cost"]["pids"] = [*earlier.get("pids", []), os.getpid()]
    ctx.folder.save_stage(stage, result)
    return result


def _run_stage(ctx: OptimizeContext, stage: str) -> dict[str, Any]:
    if stage == "init":
        result = run_stage1(ctx)
    elif stage == "search":
        result = run_stage2(ctx, prompt_pool(ctx))
    elif stage == "refine":
        result = run_stage3(ctx, refine_start(ctx))
    elif stage == "freeze":
        result = run_freeze(ctx)
    else:
        raise ValueError(f"unknown stage {stage!r}; use init, search, refine, freeze or all")
    return result


def run_pipeline(ctx: OptimizeContext, stage: str = "all") -> dict[str, Any]:
    """Run ``stage`` (or all four), then write the report; returns the results of the stages run or loaded."""
    stages = ORDER if stage == "all" else (stage,)
    results: dict[str, Any] = {}
    for name in stages:
        saved = ctx.folder.load_stage(name)
        if saved is not None and name != "freeze" and not ctx.settings.force:
            log.info("stage %s already finished in %s: skipped (optimize.force=true reruns it)", name, ctx.folder.path)
            results[name] = saved
            continue
        log.info("stage %s: starting", name)
        if ctx.evaluator.progress is not None:
            ctx.evaluator.progress.stage(STAGE_NAMES[name])
        results[name] = run_stage(ctx, name)
        log.info("stage %s: done (cumulative solver executions %s)", name,
                 ctx.evaluator.cumulative_solver_runs(("init", "search", "refine")))
    report = write_report(ctx.folder.path)
    log.info("report: %s", report)
    return results
