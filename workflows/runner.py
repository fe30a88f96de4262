"""Run one workflow: optional Analyst, b branches of Planner -> SR with repair rounds, cross-branch discussion,
optional Synthesizer, then deterministic selection. With ``sr.unguided_run`` the engine's own unguided run starts
first, beside the roles, and its front joins the pool.

Branches run in threads (role calls are I/O-bound); SR runs are CPU-bound, so a semaphore caps how many run at
once. Every step is a node of the run's :class:`SearchRunState`, so a finished or crashed run can be inspected.
Budget: an LLM call is made only while no resource is spent, and it is counted before it is made (a failed call
still counts), so the recorded count equals ``expected_llm_calls`` whenever the budget never stops the run.
An SR run that follows a plan already paid for ignores the LLM budget (the plan would otherwise be wasted).
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from harness.sr.settings import DEFAULT_BACKEND
from harness.core.candidates import Candidate
from harness.core.context import Budget, BudgetTracker, RunStatus
from harness.core.resources import usable_cpus
from harness.runtime.interaction import RunControl
from harness.runtime.role_agent import RoleAgentConfig
from harness.runtime.state import SearchRunState
from workflows.evidence import (
    Branch,
    analysis_evidence,
    describe,
    residual_evidence,
    shared_results,
    with_term,
)
from workflows.evolution import EvolutionSteps
from workflows.params import SRSettings, WorkflowParams
from workflows.roles import AnalystOutput, DiagnosisOutput, PlanOutput, default_prompts
from workflows.role_steps import RoleSteps
from workflows.run_core import EXACT_FIT, SharedRuns
from workflows.sr_steps import SRSteps


@dataclass
class WorkflowResult:
    """Outcome of :func:`run_workflow`: the selected candidate, the pool, and what the run used."""

    best: Candidate | None
    candidates: list[Candidate]
    front: list[Candidate]
    llm_calls: int
    solver_runs: int
    seconds: float
    status: RunStatus
    run_dir: Path | None
    errors: list[str] = field(default_factory=list)
    stop_reason: str | None = None
    state: SearchRunState | None = None


def default_max_workers() -> int:
    """Concurrent SR runs: 1 on small machines (each engine run wants a core), up to 4 on big ones."""
    return max(1, min(4, usable_cpus() // 4))


def _coerce_budget(budget: Budget | BudgetTracker | dict[str, Any] | None) -> BudgetTracker:
    if isinstance(budget, BudgetTracker):
        return budget
    if isinstance(budget, dict):
        return BudgetTracker(Budget(**{k: v for k, v in budget.items() if v is not None}))
    return BudgetTracker(budget)


class _WorkflowRun(RoleSteps, SRSteps, EvolutionSteps):
    """One workflow run: its shared state and bookkeeping (:class:`workflows.run_core.WorkflowRun`), the role
    steps, the SR steps and the evolution channel, and here the phases that order them."""

    # -- steps ----------------------------------------------------------------------------------------------

    # -- phases ---------------------------------------------------------------------------------------------
    def analyst(self) -> None:
        evidence = analysis_evidence(self.ctx, self.task.target_name)
        pseudo = Branch(index=-1, label="analyst")
        out = self.role_call("analyst", pseudo, evidence=evidence)
        self.analyst_node = pseudo.last_node
        if isinstance(out, AnalystOutput):
            parts = list(out.findings)
            if out.operators:
                parts.append("Suggested operators: " + ", ".join(out.operators))
            if out.hypotheses:
                parts.append("Suggested hypotheses: " + "; ".join(out.hypotheses))
            self.findings = "\n".join(f"- {p}" for p in parts)

    def branch_start(self, br: Branch) -> None:
        """Planner -> SR, then repair rounds of Diagnoser -> Repairer -> SR."""
        note = f"You plan {br.label} of {self.params.branches}." + (
            " Explore a different form than the other branches would." if self.params.branches > 1 else "")
        plan = self.role_call("planner", br, mode="initial", parent=self.analyst_node, findings=self.findings,
                              history=br.history, note=note)
        if plan is None:
            return
        assert isinstance(plan, PlanOutput)
        br.plan = plan
        br.history.append(f"planner: {plan.summary()}")
        if self.sr_step(br, plan, "initial") is None and self.stopped:
            return
        for r in range(self.params.repair_rounds):
            evidence = residual_evidence(self.ctx, br)
            diag = self.role_call("diagnoser", br, mode=f"repair {r + 1}", parent=br.last_node,
                                  evidence=evidence, history=br.history)
            if diag is None:
                return
            assert isinstance(diag, DiagnosisOutput)
            br.history.append(f"diagnoser: {diag.summary()}")
            evidence = (f"Diagnosis: {diag.summary(600)}\nEvidence cited: {'; '.join(diag.evidence)[:400]}\n"
                        f"Current plan: {br.plan.summary()}\nBest equation: {describe(br.best())}")
            plan = self.role_call("repairer", br, mode=f"repair {r + 1}", parent=br.last_node, evidence=evidence,
                                  history=br.history, fallback=br.plan)
            if plan is None:
                return
            assert isinstance(plan, PlanOutput)
            held = br.best()
            if held is not None and diag.missing_terms:
                added = [with_term(held.expression, t, self.ctx.variables) for t in diag.missing_terms]
                plan = plan.model_copy(update={"hypotheses": list(dict.fromkeys(
                    [h for h in added if h] + list(plan.hypotheses)))})
            br.plan = plan
            br.history.append(f"repairer: {plan.summary()}")
            if self.sr_step(br, plan, f"repair {r + 1}") is None and self.stopped:
                return

    def branch_discuss(self, br: Branch, round_no: int, shared: str) -> None:
        """One discussion update: the Planner sees every branch's results and revises this branch's plan."""
        plan = self.role_call("planner", br, mode="discussion", parent=br.last_node, findings=self.findings,
                              history=br.history, shared=shared, fallback=br.plan)
        if plan is None:
            return
        assert isinstance(plan, PlanOutput)
        br.plan = plan
        br.history.append(f"planner (discussion {round_no}): {plan.summary()}")
        self.sr_step(br, plan, f"discussion {round_no}")

    def synthesize(self, branches: list[Branch]) -> None:
        synth = Branch(index=len(branches), label="synthesis")
        synth.candidates = [c for br in branches for c in br.candidates]
        plan = self.role_call("synthesizer", synth, findings=self.findings, shared=shared_results(self.state, branches))
        if plan is None:
            return
        assert isinstance(plan, PlanOutput)
        synth.plan = plan
        self.sr_step(synth, plan, "synthesis")

    def run(self) -> WorkflowResult:
        t0 = time.perf_counter()
        p = self.params
        branches = [Branch(index=i, label=f"branch {i + 1}") for i in range(p.branches)]
        status, crash = RunStatus.COMPLETED, None
        unguided = None
        if self.control is not None:
            self.control.bind(self.ctx.cancel_event, self._record_user, self.tracker)
        if self.settings.unguided_run:  # started first, so it holds the engine slot while the roles think
            unguided = threading.Thread(target=self._guarded, args=(self.unguided, "unguided run"),
                                        name="unguided-sr", daemon=True)
            unguided.start()
        evolution = None
        if self.settings.evolve_rounds:
            evolution = threading.Thread(target=self._guarded, args=(self.evolve, "evolution"), name="evolution",
                                         daemon=True)
            evolution.start()
        try:
            if p.use_analyst:
                self.analyst()
            self._parallel(branches, self.branch_start)
            for d in range(1, p.discussion_rounds + 1):
                if self.stopped:
                    break
                snapshot = {br.index: shared_results(self.state, branches, br) for br in branches}
                self._parallel(branches, lambda br, d=d: self.branch_discuss(br, d, snapshot[br.index]))
            if p.use_synthesizer and not self.stopped:
                self.synthesize(branches)
            self.window.close()
            if evolution is not None:
                evolution.join()
            if unguided is not None:
                unguided.join()
            if self.settings.sparse_regression and not self.ctx.cancelled():
                self.sparse()
            if self.settings.combine_terms and not self.ctx.cancelled():
                self.combine()
            if self.settings.precision_polish and not self.ctx.cancelled():
                self.polish()
        except Exception as exc:  # keep what was found; the caller sees the error
            crash = f"{type(exc).__name__}: {exc}"
            self._error(f"workflow crashed: {crash}")
        self.window.close()
        for thread in (evolution, unguided):  # their answers are kept even when the roles crashed
            if thread is not None and thread.is_alive():
                thread.join()
        if crash:
            status = RunStatus.FAILED
        elif self.ctx.cancelled() or (self.control is not None and self.control.stop_requested):
            status = RunStatus.CANCELLED
        elif self.stop_reason == EXACT_FIT:
            status = RunStatus.TARGET_REACHED
        elif self.stop_reason:
            status = RunStatus.BUDGET_EXHAUSTED
        if self.control is not None:
            self.control.close()
        candidates = self.state.candidates
        best = self.state.best()
        self.state.finish(status, crash or self.stop_reason)
        used = self.tracker.snapshot()
        return WorkflowResult(
            best=best, candidates=candidates, front=self.state.front(), llm_calls=int(used["llm_calls"]),
            solver_runs=int(used["solver_runs"]), seconds=time.perf_counter() - t0, status=status,
            run_dir=self.state.run_dir, errors=list(self.errors), stop_reason=self.stop_reason, state=self.state,
        )

    def _guarded(self, fn: Callable[[], None], label: str) -> None:
        """Run ``fn``; a crash is recorded as the run's error and the rest of the run goes on."""
        try:
            fn()
        except Exception as exc:
            self._error(f"{label} crashed: {type(exc).__name__}: {exc}")

    def _parallel(self, branches: list[Branch], fn: Callable[[Branch], None]) -> None:
        """Run ``fn`` for every branch concurrently; a crashing branch is recorded, the others go on."""

        def guarded(br: Branch) -> None:
            self._guarded(lambda: fn(br), br.label)

        if len(branches) == 1:
            guarded(branches[0])
            return
        with ThreadPoolExecutor(max_workers=len(branches), thread_name_prefix="branch") as pool:
            list(pool.map(guarded, branches))


def run_workflow(
    task: Any,
    params: WorkflowParams | tuple[int, ...] | dict[str, Any],
    prompts: dict[str, str] | None,
    llm: Any,
    *,
    backend: str = DEFAULT_BACKEND,
    sr_settings: SRSettings | dict[str, Any] | None = None,
    budget: Budget | BudgetTracker | dict[str, Any] | None = None,
    seed: int = 0,
    run_dir: str | Path | None = None,
    max_workers: int | None = None,
    on_node: Callable[[Any], None] | None = None,
    cancel_event: threading.Event | None = None,
    warm_start: Sequence[str] = (),
    role_agents: dict[str, RoleAgentConfig | dict[str, Any]] | None = None,
    control: RunControl | None = None,
    shared_runs: SharedRuns | None = None,
) -> WorkflowResult:
    """Run the workflow ``params`` with role ``prompts`` (None = ours) on ``task``; see the module docstring.

    ``on_node`` is called with every recorded node (progress display); ``cancel_event`` stops the run early.
    ``warm_start``: equations (e.g. a previous fit's Pareto front) refitted on this task and seeded into every
    branch's first SR run, as hypotheses are (only the ones that fit join).
    ``role_agents``: per role, the tools it may call before answering and K answers (``RoleAgentConfig``);
    a role not named is one structured call.
    ``control``: the user's queued guidance (every later role prompt carries it) and pause / resume / stop,
    taken before each role call and SR run (``harness.runtime.interaction``).
    ``shared_runs``: where the unguided run is read from when another run already made it with the same task,
    seed and engine settings (``workflows.run_core.SharedRuns``; the optimizer's evaluation cache), else written.
    """
    if isinstance(params, dict):
        params = WorkflowParams.model_validate(params)
    elif not isinstance(params, WorkflowParams):
        params = WorkflowParams.from_tuple(params)
    if prompts is None:
        prompts = default_prompts()
    run = _WorkflowRun(
        task, params, dict(prompts), llm, backend=backend, sr_settings=SRSettings.coerce(sr_settings),
        budget=_coerce_budget(budget), seed=int(seed), run_dir=Path(run_dir) if run_dir is not None else None,
        max_workers=max_workers or default_max_workers(), on_node=on_node, warm_start=warm_start,
        role_agents=role_agents, control=control, shared_runs=shared_runs,
    )
    if cancel_event is not None:
        run.ctx.cancel_event = cancel_event
    return run.run()
