"""LLM proposals and Operon in one search: the model's skeletons seed the GP, and both sets are pooled.

Why: a language model is good at the shape of an equation (which variables combine how) and bad at constants
and small corrections; the GP is the opposite. Fitted LLM skeletons and the plan's hypotheses are injected
into Operon's population (see operon_backend), so the GP starts from them instead of from random trees.
"""

from __future__ import annotations

import math
import time
from typing import Any

from harness.core.candidates import Candidate
from harness.core.context import AgentContext, BudgetExhausted
from harness.sr.backends import MIN_ENGINE_SECONDS, BackendUnavailable, EngineRun
from harness.sr.operon_backend import run_operon
from harness.sr.plan import SearchPlan

__all__ = ["run_llm", "run_hybrid", "llm_proposals", "MAX_INJECTED"]

MAX_INJECTED = 12  # best LLM candidates given to the GP as seeds
DEFAULT_N = 4


def _generator() -> Any:
    try:
        from harness.sr.llm_generator import generate_equations
    except ImportError as exc:  # the generator module is optional for the engines
        raise BackendUnavailable(f"the LLM equation generator is not available ({exc})") from None
    return generate_equations


def _n_proposals(plan: SearchPlan) -> int:
    try:
        n = int(plan.extras.get("llm_n", DEFAULT_N))
    except (TypeError, ValueError):
        n = DEFAULT_N
    return max(1, min(n, 16))


def llm_proposals(plan: SearchPlan, context: AgentContext, warnings: list[str]) -> list[Candidate]:
    """Fitted LLM skeletons for this plan; an unusable model or spent LLM budget becomes a warning."""
    if context.llm is None:
        warnings.append("no language model in the context; searched with the plan's seeds only")
        return []
    generate = _generator()
    feedback = "; ".join(plan.constraints)
    try:
        return list(generate(context, plan, n=_n_proposals(plan), feedback=feedback))
    except BudgetExhausted as exc:
        warnings.append(f"LLM proposals skipped: {exc}")
    except Exception as exc:  # LLMError and friends: the GP still runs
        warnings.append(f"LLM proposals failed ({type(exc).__name__}: {str(exc)[:160]})")
    return []


def run_llm(plan: SearchPlan, context: AgentContext, *, max_seconds: float | None = None) -> EngineRun:
    """LLM proposals only (no GP): the model writes skeletons, the engine fits and scores them."""
    if context.llm is None:
        raise BackendUnavailable("backend 'llm' needs a language model in the context (context.llm)")
    generate = _generator()
    t0 = time.perf_counter()
    cands = list(generate(context, plan, n=_n_proposals(plan), feedback="; ".join(plan.constraints)))
    return EngineRun(candidates=cands, info={"n_llm": len(cands), "seconds": round(time.perf_counter() - t0, 3)})


def run_hybrid(plan: SearchPlan, context: AgentContext, *, max_seconds: float | None = None,
               proposals: list[Candidate] | None = None) -> EngineRun:
    """LLM skeletons (or the given ``proposals``) plus the plan's seeds injected into Operon; all pooled."""
    t0 = time.perf_counter()
    total = float(max_seconds if max_seconds is not None else plan.time_budget)
    warnings: list[str] = []
    if proposals is None:
        proposals = llm_proposals(plan, context, warnings)
    usable = sorted((c for c in proposals if math.isfinite(c.metric("train", "nmse"))), key=lambda c: c.sort_key())
    left = max(MIN_ENGINE_SECONDS, total - (time.perf_counter() - t0))
    run = run_operon(plan, context, max_seconds=left, seed_pool=usable[:MAX_INJECTED])
    pooled = list(proposals) + [c for c in run.candidates if not any(c is p for p in proposals)]
    info = dict(run.info, n_llm=len(proposals), n_llm_injected=min(len(usable), MAX_INJECTED))
    return EngineRun(candidates=pooled, warnings=warnings + run.warnings, info=info)
