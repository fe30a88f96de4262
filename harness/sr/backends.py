"""SR backends by name, and the one entry point every search goes through: :func:`run_search`.

Why one entry point: the plan is validated, the budget is checked and charged, the engine's time is capped by
the seconds the run has left, and every result comes back in the same :class:`SearchOutcome` shape — whatever
engine ran. Engines live in their own modules and are imported lazily, so a missing optional engine (PySR
needs Julia) never breaks the others.
"""

from __future__ import annotations

import importlib
import math
import time
from dataclasses import dataclass, field
from typing import Any, Protocol

from harness.core.candidates import Candidate, dedupe, pareto_front, select_best
from harness.core.context import AgentContext, BudgetExhausted
from harness.core.resources import engine_run
from harness.sr.plan import PlanLimits, SearchPlan
from harness.sr.settings import DEFAULT_BACKEND, MAX_EXTRA_OPERATORS, SearchSettings

__all__ = [
    "BACKENDS",
    "BackendUnavailable",
    "EngineRun",
    "SearchOutcome",
    "run_search",
    "run_plan",
    "backend_names",
    "MIN_ENGINE_SECONDS",
    "SRBackend",
    "load_backend",
]

MIN_ENGINE_SECONDS = 1.0  # engines count time in whole seconds; less than this left means the budget is spent

# name -> "module:function" of an :class:`SRBackend`, imported when first used
BACKENDS: dict[str, str] = {
    "operon": "harness.sr.operon_backend:run_operon",
    "pysr": "harness.sr.pysr_backend:run_pysr",
    "llm": "harness.sr.hybrid:run_llm",
    "hybrid": "harness.sr.hybrid:run_hybrid",
}


class BackendUnavailable(RuntimeError):
    """An engine cannot run here (not installed, no Julia, ...); the message says what to install."""


@dataclass
class EngineRun:
    """What one engine returns: scored candidates, warnings for the caller, engine-specific details."""

    candidates: list[Candidate]
    warnings: list[str] = field(default_factory=list)
    info: dict[str, Any] = field(default_factory=dict)


class SRBackend(Protocol):
    """What an SR engine is: one search under a validated plan, at most ``max_seconds`` long, scored by the
    context's evaluator. Raises :class:`BackendUnavailable` when it cannot run here."""

    def __call__(self, plan: SearchPlan, context: AgentContext, *, max_seconds: float) -> EngineRun: ...


@dataclass
class SearchOutcome:
    """The result of one :func:`run_search` call, the same for every backend."""

    backend: str
    backend_used: str
    plan: SearchPlan
    plan_changes: list[str] = field(default_factory=list)
    candidates: list[Candidate] = field(default_factory=list)
    best: Candidate | None = None
    front: list[Candidate] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    seconds: float = 0.0
    error: str | None = None
    info: dict[str, Any] = field(default_factory=dict)

    def to_record(self) -> dict[str, Any]:
        """JSON-able form; ``candidates``/``best``/``front`` are candidate records (the agent picks them up)."""
        return {
            "backend": self.backend,
            "backend_used": self.backend_used,
            "plan": self.plan.model_dump(),
            "plan_changes": list(self.plan_changes),
            "candidates": [c.to_record() for c in self.candidates],
            "best": self.best.to_record() if self.best else None,
            "front": [c.to_record() for c in self.front],
            "warnings": list(self.warnings),
            "seconds": round(self.seconds, 3),
            "error": self.error,
            "info": self.info,
        }


def backend_names() -> list[str]:
    return sorted(BACKENDS) + ["auto"]


def load_backend(name: str) -> SRBackend:
    """The engine registered as ``name`` (a KeyError names the known ones)."""
    if name not in BACKENDS:
        raise KeyError(f"unknown SR engine {name!r}; known: {', '.join(sorted(BACKENDS))}")
    module, func = BACKENDS[name].split(":")
    engine: SRBackend = getattr(importlib.import_module(module), func)
    return engine


def _engine_seconds(plan: SearchPlan, context: AgentContext) -> float:
    """min(plan time, run seconds left); raises BudgetExhausted when too little is left to run an engine."""
    left = context.budget.seconds_left()
    if left is not None and left < MIN_ENGINE_SECONDS:
        raise BudgetExhausted(f"only {left:.1f}s of the time budget left; an engine run needs "
                              f"{MIN_ENGINE_SECONDS:g}s")
    return plan.time_budget if left is None else min(plan.time_budget, left)


def _run_engine(name: str, plan: SearchPlan, context: AgentContext, seconds: float,
                warnings: list[str]) -> EngineRun:
    """One engine run: in a worker process for native engines (a crash is a failed run), else in-process.

    A worker that dies while running a seeded search is retried once without seeds in the time left (the
    seeded warm start is the path that has crashed Operon on large data), so the engine's own answer survives.
    """
    from harness.sr import workers

    if name not in workers.PROCESS_ENGINES or workers.in_process_requested():
        return load_backend(name)(plan, context, max_seconds=seconds)
    t0 = time.perf_counter()
    try:
        return workers.run_in_worker(name, plan, context, max_seconds=seconds)
    except workers.EngineFailure as exc:
        left = seconds - (time.perf_counter() - t0)
        if not plan.seeds or "died" not in str(exc) or left < MIN_ENGINE_SECONDS or context.cancelled():
            raise
        warnings.append(f"{name}: {exc} on the seeded search; retried without seeds for {left:.0f}s")
        return workers.run_in_worker(name, plan.model_copy(update={"seeds": []}), context, max_seconds=left)


def run_search(
    plan: SearchPlan | dict[str, Any] | str | None,
    context: AgentContext,
    backend: str = DEFAULT_BACKEND,
    *,
    limits: PlanLimits | dict[str, Any] | None = None,
    floor: SearchPlan | dict[str, Any] | None = None,
    max_extra_operators: int = MAX_EXTRA_OPERATORS,
) -> SearchOutcome:
    """Admit ``plan`` (anything: validated, clipped to ``limits``, widened to ``floor`` when given) and run it
    (:func:`run_plan`). For scripts and tests; a run's tools admit plans under its ``SearchSettings``."""
    settings = SearchSettings(backend=backend or DEFAULT_BACKEND, limits=limits or PlanLimits(), floor=floor,
                              max_extra_operators=max_extra_operators)
    valid_plan, changes = settings.admit(plan, context.variables)
    return run_plan(valid_plan, context, settings.backend, changes=changes)


def run_plan(plan: SearchPlan, context: AgentContext, backend: str = DEFAULT_BACKEND, *,
             changes: list[str] | tuple[str, ...] = ()) -> SearchOutcome:
    """Run an admitted plan as it is: charge one solver run, run ``backend`` for at most the plan's time (capped
    by the seconds the run has left) and pool its candidates. ``changes``: what admitting the plan changed.

    ``auto`` runs PySR when it imports and works, else Operon (the fallback is recorded in ``warnings``).
    Engine failures are returned in ``error``; only :class:`BudgetExhausted` propagates (the run must stop).
    """
    t0 = time.perf_counter()
    name = str(backend or DEFAULT_BACKEND).strip().lower()
    outcome = SearchOutcome(backend=name, backend_used=name, plan=plan, plan_changes=list(changes))
    if name not in BACKENDS and name != "auto":
        outcome.error = f"unknown backend {backend!r}; choose one of {', '.join(backend_names())}"
        return outcome
    context.budget.check()
    seconds = _engine_seconds(plan, context)
    if context.cancelled():
        outcome.error = "cancelled before the engine started"
        return outcome
    context.budget.add_solver()

    order = ["pysr", "operon"] if name == "auto" else [name]
    for engine_name in order:
        try:
            with engine_run():
                run = _run_engine(engine_name, plan, context, seconds, outcome.warnings)
        except BackendUnavailable as exc:
            if engine_name != order[-1]:
                outcome.warnings.append(f"{engine_name} unavailable, fell back to {order[-1]}: {exc}")
                seconds = _remaining(seconds, t0, context)
                continue
            outcome.error = f"{engine_name} unavailable: {exc}"
            break
        except BudgetExhausted:
            raise
        except Exception as exc:  # an engine bug must not kill the run; the caller sees the reason
            outcome.error = f"{engine_name} failed: {type(exc).__name__}: {exc}"
            break
        outcome.backend_used = engine_name
        outcome.candidates = dedupe(sorted(run.candidates, key=lambda c: c.sort_key()))
        outcome.warnings += run.warnings
        outcome.info = run.info
        break
    outcome.best = select_best(outcome.candidates)
    outcome.front = pareto_front(outcome.candidates)
    outcome.seconds = time.perf_counter() - t0
    return outcome


def _remaining(seconds: float, t0: float, context: AgentContext) -> float:
    """Seconds left for a fallback engine after a failed attempt (at least the engine minimum)."""
    left = seconds - (time.perf_counter() - t0)
    budget_left = context.budget.seconds_left()
    if budget_left is not None:
        left = min(left, budget_left)
    return max(MIN_ENGINE_SECONDS, left if math.isfinite(left) else MIN_ENGINE_SECONDS)
