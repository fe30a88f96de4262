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

import math
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Sequence

from harness.engine.candidates import Candidate, select_best
from harness.engine.combine import CombineSettings, combine_terms
from harness.engine.context import (
    AgentContext,
    Budget,
    BudgetExhausted,
    BudgetTracker,
    RunStatus,
    evaluate_candidate,
)
from harness.runtime.role_agent import RoleAgent, RoleAgentConfig
from harness.runtime.state import SearchRunState
from harness.sr.tools import RunSRSearchTool
from workflows.evidence import (
    Branch,
    analysis_evidence,
    describe,
    residual_evidence,
    shared_results,
    short_equation,
    with_term,
)
from workflows.params import (
    SRSettings,
    WorkflowParams,
    engine_seed,
    expected_llm_calls,
    expected_solver_runs,
)
from workflows.prompting import build_messages
from workflows.roles import (
    ROLE_NAMES,
    AnalystOutput,
    DiagnosisOutput,
    PlanOutput,
    RoleOutput,
    fallback_output,
    output_model,
    response_format,
    role_agent_settings,
    salvage_truncated,
)

ENGINE_INFO_KEYS = ("generations", "gp_seconds", "n_seeds", "n_injected", "continued", "front_size")
ENGINE_RESERVE_MARGIN_S = 1.0  # kept on top of one engine run's time for its refit and bookkeeping



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
    return max(1, min(4, (os.cpu_count() or 1) // 4))


def _coerce_budget(budget: Budget | BudgetTracker | dict[str, Any] | None) -> BudgetTracker:
    if isinstance(budget, BudgetTracker):
        return budget
    if isinstance(budget, dict):
        return BudgetTracker(Budget(**{k: v for k, v in budget.items() if v is not None}))
    return BudgetTracker(budget)


class _WorkflowRun:
    """State and steps of one workflow run (one instance per run; not reusable)."""

    def __init__(
        self,
        task: Any,
        params: WorkflowParams,
        prompts: dict[str, str],
        llm: Any,
        *,
        backend: str,
        sr_settings: SRSettings,
        budget: BudgetTracker,
        seed: int,
        run_dir: Path | None,
        max_workers: int,
        on_node: Callable[[Any], None] | None,
        warm_start: Sequence[str] = (),
        role_agents: dict[str, RoleAgentConfig] | None = None,
    ):
        missing = [r for r in params.roles_used() if not (prompts.get(r) or "").strip()]
        if missing:
            raise ValueError(f"no prompt for role(s) {missing}; roles are {', '.join(ROLE_NAMES)}")
        self.role_agents = role_agent_settings(role_agents)
        self.task, self.params, self.prompts, self.llm = task, params, prompts, llm
        self.backend, self.settings, self.tracker, self.seed = backend, sr_settings, budget, seed
        self.on_node = on_node
        self.warm_start = list(dict.fromkeys(str(e) for e in warm_start if e))  # a previous fit's front
        config = {
            "workflow": params.model_dump(),
            "backend": backend,
            "sr_settings": sr_settings.model_dump(),
            "seed": seed,
            "expected_llm_calls": expected_llm_calls(params, self.role_agents),
            "role_agents": {r: c.model_dump() for r, c in self.role_agents.items()},
            "expected_solver_runs": expected_solver_runs(params, sr_settings),
        }
        self.state = SearchRunState(run_dir, budget=budget, task=task, config=config,
                                    selection=sr_settings.selection,
                                    selection_tolerance=sr_settings.selection_tolerance)
        # The SR step is a call of the run_sr_search tool, under the harness's floor (a plan only widens it).
        extras = {"backend": backend, "plan_limits": sr_settings.limits(), "plan_floor": sr_settings.floor(),
                  "max_extra_operators": sr_settings.max_extra_operators}
        self.ctx = AgentContext(task=task, seed=seed, workspace=run_dir, budget=budget.scoped(("solver_runs", "seconds")), llm=llm,
                                state=self.state, fit=sr_settings.fit_settings(),
                                extras=extras)  # type: ignore[arg-type]
        self.sr_tool = RunSRSearchTool(self.ctx)
        self.sr_gate = threading.Semaphore(max(1, max_workers))
        self._lock = threading.Lock()
        self.errors: list[str] = []
        self.stop_reason: str | None = None
        self.findings = ""
        self.analyst_node: int | None = None
        self.poor_hypotheses: list[Candidate] = []  # fitted but too poor alone: their terms may still be right
        self.run_id = f"{os.getpid()}-{id(self)}-{time.time_ns()}"

    # -- bookkeeping ----------------------------------------------------------------------------------------
    def _error(self, text: str) -> None:
        with self._lock:
            self.errors.append(text[:500])

    def _stop(self, reason: str) -> None:
        with self._lock:
            self.stop_reason = self.stop_reason or reason

    @property
    def stopped(self) -> bool:
        return self.stop_reason is not None or self.ctx.cancelled()

    def _record(self, kind: str, **fields: Any) -> int:
        node = self.state.add_node(kind, **fields)
        if self.on_node is not None:
            try:
                self.on_node(node)
            except Exception:  # a progress display must never break a run
                pass
        return node.id

    def _reserve_llm_calls(self, n: int = 1) -> bool:
        """Count ``n`` model responses if nothing is spent yet; otherwise stop scheduling and say no."""
        with self._lock:
            if self.ctx.cancelled():
                self.stop_reason = self.stop_reason or "cancelled"
                return False
            reason = self.stop_reason or self.tracker.exhausted()
            if reason:
                self.stop_reason = reason
                return False
            self.tracker.add_llm(n)
            return True

    def llm_seconds(self) -> float | None:
        """Seconds a role call may take: what the run has left, less one engine run (so a hung or slow model
        never costs the engine's answer); ``None`` when the run has no time limit."""
        left = self.tracker.seconds_left()
        if left is None:
            return None
        return left - (self.settings.time_budget + ENGINE_RESERVE_MARGIN_S)

    # -- steps ----------------------------------------------------------------------------------------------
    def role_call(
        self, role: str, branch: Branch | None, *, mode: str = "", parent: int | None = None,
        fallback: RoleOutput | None = None, **parts: Any,
    ) -> RoleOutput | None:
        """One activation of ``role``, run by the runtime's role agent (tool steps, K answers ranked by how their
        hypotheses fit); ``None`` when the budget stopped the run. Failures use a fallback."""
        messages = build_messages(role, self.prompts[role], self.task, mode=mode, **parts)
        call_seed = self.seed * 1000 + (branch.index + 1 if branch else 0) * 100 + (branch.steps if branch else 0)
        agent = RoleAgent(self.llm, self.ctx, self.state, role, self.role_agents.get(role),
                          reserve=self._reserve_llm_calls, seconds_left=self.llm_seconds, on_node=self.on_node)
        answer = agent.answer(messages, output_model(role), response_format(role), seed=call_seed, parent=parent,
                              branch=branch.label if branch else None, info={"mode": mode},
                              rank=lambda out: self.rank_output(out, branch), salvage=salvage_truncated)
        if answer is None:
            return None
        out = answer.output
        if out is None:
            self._error(answer.error or f"{role}: no output")
            out = fallback if fallback is not None else fallback_output(role)
        if branch is not None:
            branch.last_node = answer.node_id
            branch.steps += 1
        return out

    def rank_output(self, out: RoleOutput, branch: Branch | None) -> float:
        """How good an answer looks by what it proposes, fitted now: the best validation NMSE among its hypotheses
        (a Diagnoser's missing terms added to the branch's best equation); inf when it proposes nothing that fits."""
        from harness.engine.expression import ExpressionError

        texts: list[str] = list(getattr(out, "hypotheses", []) or [])
        held = branch.best() if branch is not None else None
        if isinstance(out, DiagnosisOutput) and held is not None:
            texts = [h for h in (with_term(held.expression, t, self.ctx.variables) for t in out.missing_terms) if h]
        best = math.inf
        for text in dict.fromkeys(texts):
            try:
                err = evaluate_candidate(text, self.ctx, source="ranking", constants_as_params=True).metric("valid")
            except ExpressionError:
                continue
            best = min(best, err) if math.isfinite(err) else best
        return best

    def screen_hypotheses(self, texts: list[str], source: str = "hypothesis") -> tuple[list[Candidate], list[str]]:
        """Fit the plan's hypotheses now (the evaluator is fast): good ones seed the engine and join the pool,
        bad ones are dropped with a note the next role reads."""
        from harness.engine.expression import ExpressionError

        kept: list[Candidate] = []
        notes: list[str] = []
        limit = self.settings.hypothesis_max_nmse
        for text in dict.fromkeys(texts):
            try:
                cand = evaluate_candidate(text, self.ctx, source=source, constants_as_params=True)
            except ExpressionError as exc:
                notes.append(f"hypothesis {text[:60]!r} dropped: {str(exc)[:120]}")
                continue
            err = cand.metric("valid")
            if err > limit:
                if math.isfinite(err):
                    with self._lock:
                        self.poor_hypotheses.append(cand)
                notes.append(f"hypothesis {short_equation(cand.expression, 60)!r} dropped: valid NMSE {err:.3g}"
                             + (" (worse than predicting the mean)" if err >= 1 else ""))
                continue
            kept.append(cand)
        return kept, notes

    def sr_step(self, branch: Branch, plan: PlanOutput, step: str) -> Candidate | None:
        """Screen the plan's hypotheses, widen the plan to the harness's floor and run the engine; the branch
        keeps what it finds."""
        s = self.settings
        raw = plan.to_raw_plan()
        good, notes = self.screen_hypotheses(list(raw.get("seeds", [])))
        if step == "initial" and self.warm_start:  # warm start: the previous front, refitted, seeds every branch
            warm, warm_notes = self.screen_hypotheses(self.warm_start, source="warm_start")
            good, notes = warm + good, warm_notes + notes
        seeds = [c.expression for c in sorted(good, key=lambda c: c.sort_key())]
        if s.carry_best_seed and step != "initial":  # refinement starts from what works so far
            carried = [c.expression for c in sorted(branch.candidates, key=lambda c: c.sort_key())
                       if math.isfinite(c.metric("valid"))]
            seeds = list(dict.fromkeys(carried))[: s.carry_seeds] + seeds
        if not s.seed_engine:  # the engine runs exactly the unguided search; the fitted hypotheses stay in the pool
            seeds = []
        raw.update(seeds=list(dict.fromkeys(seeds))[: s.max_seeds],
                   seed=engine_seed(self.seed, branch.index, branch.steps, s.unguided_run))
        if s.continue_search:  # the engine keeps this branch's population and the next run goes on from it
            raw["extras"] = {"population_key": f"{self.run_id}/{branch.index}",
                             "continue_population": step != "initial"}
        ran = self._engine_call(f"sr-{branch.index}-{branch.steps}", raw, branch, step, good, notes)
        if ran is None:
            return None
        node_id, found_here, error = ran
        branch.last_node = node_id
        branch.steps += 1
        branch.candidates.extend(found_here)
        found = select_best(found_here)
        for note in notes[:3]:
            branch.history.append(note)
        if good:
            branch.history.append("hypotheses kept: " + "; ".join(
                f"{short_equation(c.equation, 80)} [valid NMSE {c.metric('valid'):.3g}]" for c in good[:3]))
        if error:
            branch.history.append(f"SR run ({step}) failed: {error[:200]}")
        else:
            branch.history.append(f"SR run ({step}): best {describe(found)}")
        return found

    def _engine_call(self, call_id: str, raw: dict[str, Any], branch: Branch, step: str, good: list[Candidate],
                     notes: list[str]) -> tuple[int, list[Candidate], str | None] | None:
        """One call of the SR tool (at most ``max_workers`` at once), recorded as an ``sr`` node holding the
        engine's candidates and the fitted hypotheses ``good``; ``None`` when the run must stop."""
        with self.sr_gate:
            if self.ctx.cancelled():
                self._stop("cancelled")
                return None
            call = self.sr_tool(call_id=call_id, plan=raw)
        if not call.ok and (call.error or "").startswith(BudgetExhausted.__name__):
            self._stop(call.error.split(": ", 1)[-1])
            return None
        record = call.result if call.ok else {}
        error = record.get("error") if call.ok else call.error
        if error:
            self._error(f"{branch.label} sr ({step}): {error}")
        found_here = good + [Candidate.from_record(r) for r in record.get("candidates", [])]
        summary = {k: v for k, v in record.items() if k not in ("candidates", "front", "best", "info")}
        node_id = self._record(
            "sr", parent=branch.last_node, branch=branch.label, candidates=found_here,
            seconds=call.seconds, error=error,
            tool_results=[replace(call, result=summary)],
            info={"step": step, "plan": record.get("plan"), "plan_changes": record.get("plan_changes", [])[:20],
                  "hypothesis_notes": notes[:10], "warnings": record.get("warnings", [])[:10],
                  "backend_used": record.get("backend_used"),
                  "engine": {k: v for k, v in (record.get("info") or {}).items() if k in ENGINE_INFO_KEYS}},
        )
        return node_id, found_here, error

    def unguided(self) -> None:
        """The engine alone, as an unguided run searches (the floor plan, the task's seed, no seeds), beside the
        roles: its front joins the pool, so guidance can only add to what the engine finds by itself."""
        plan = self.settings.floor().model_dump(exclude={"seeds", "features", "constraints"})
        self._engine_call("sr-unguided", {**plan, "seed": self.seed}, Branch(index=-2, label="unguided"),
                          "unguided", [], [])

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

    def combine(self) -> None:
        """Least-squares combinations of the pool's terms (engine fronts, hypotheses, poor hypotheses) that beat
        the pool's best validation NMSE by a clear factor join the pool; bounded by the run's time left."""
        left = self.tracker.seconds_left()
        if left is not None and left <= 0.5:
            return
        settings = CombineSettings()
        if left is not None:
            settings = replace(settings, max_seconds=min(settings.max_seconds, left - 0.5))
        t0 = time.perf_counter()
        found, info = combine_terms(self.state.candidates, self.ctx, settings, extra_sources=self.poor_hypotheses)
        parent = max((n.id for n in self.state.nodes if n.kind == "sr"), default=None)
        self._record("combine", parent=parent, candidates=found, seconds=time.perf_counter() - t0,
                     info={**info, "terms_from": sorted({o for c in found for o in c.info.get("terms_from", [])})})

    def run(self) -> WorkflowResult:
        t0 = time.perf_counter()
        p = self.params
        branches = [Branch(index=i, label=f"branch {i + 1}") for i in range(p.branches)]
        status, crash = RunStatus.COMPLETED, None
        unguided = None
        if self.settings.unguided_run:  # started first, so it holds the engine slot while the roles think
            unguided = threading.Thread(target=self._guarded, args=(self.unguided, "unguided run"),
                                        name="unguided-sr", daemon=True)
            unguided.start()
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
            if unguided is not None:
                unguided.join()
            if self.settings.combine_terms and not self.ctx.cancelled():
                self.combine()
        except Exception as exc:  # keep what was found; the caller sees the error
            crash = f"{type(exc).__name__}: {exc}"
            self._error(f"workflow crashed: {crash}")
        if unguided is not None and unguided.is_alive():  # its answer is kept even when the roles crashed
            unguided.join()
        if crash:
            status = RunStatus.FAILED
        elif self.ctx.cancelled():
            status = RunStatus.CANCELLED
        elif self.stop_reason:
            status = RunStatus.BUDGET_EXHAUSTED
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
    backend: str = "operon",
    sr_settings: SRSettings | dict[str, Any] | None = None,
    budget: Budget | BudgetTracker | dict[str, Any] | None = None,
    seed: int = 0,
    run_dir: str | Path | None = None,
    max_workers: int | None = None,
    on_node: Callable[[Any], None] | None = None,
    cancel_event: threading.Event | None = None,
    warm_start: Sequence[str] = (),
    role_agents: dict[str, RoleAgentConfig | dict[str, Any]] | None = None,
) -> WorkflowResult:
    """Run the workflow ``params`` with role ``prompts`` (None = ours) on ``task``; see the module docstring.

    ``on_node`` is called with every recorded node (progress display); ``cancel_event`` stops the run early.
    ``warm_start``: equations (e.g. a previous fit's Pareto front) refitted on this task and seeded into every
    branch's first SR run, as hypotheses are (only the ones that fit join).
    ``role_agents``: per role, the tools it may call before answering and K answers (``RoleAgentConfig``);
    a role not named is one structured call.
    """
    if isinstance(params, dict):
        params = WorkflowParams.model_validate(params)
    elif not isinstance(params, WorkflowParams):
        params = WorkflowParams.from_tuple(params)
    if prompts is None:
        from workflows.roles import default_prompts

        prompts = default_prompts()
    run = _WorkflowRun(
        task, params, dict(prompts), llm, backend=backend, sr_settings=SRSettings.coerce(sr_settings),
        budget=_coerce_budget(budget), seed=int(seed), run_dir=Path(run_dir) if run_dir is not None else None,
        max_workers=max_workers or default_max_workers(), on_node=on_node, warm_start=warm_start,
        role_agents=role_agents,
    )
    if cancel_event is not None:
        run.ctx.cancel_event = cancel_event
    return run.run()
