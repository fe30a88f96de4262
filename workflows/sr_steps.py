"""The SR side of a workflow run: hypotheses screened by fitting, a role's plan admitted under the harness's floor
and run by the engine (one ``sr`` node per run), the engine's unguided run, a branch's residual run, and the term
combination at the end.

The state these steps use is the run's (:class:`workflows.run_core.WorkflowRun`: the agent context ``ctx``,
``settings``, ``sr_tool`` and ``sr_gate`` (at most ``max_workers`` engine runs at once), the pool, the budget).
"""

from __future__ import annotations

import hashlib
import json
import math
import time
from dataclasses import asdict, replace
from typing import Any, Callable

import numpy as np

from harness.core.basis import signed_inputs, sparse_candidates
from harness.core.candidates import NMSE_FLOOR, Candidate, pareto_front, select_best
from harness.core.combine import GUIDED_SOURCES, CombineSettings, combine_terms
from harness.core.context import AgentContext, BudgetExhausted, evaluate_candidate
from harness.core.expression import ExpressionError, parse_expression, right_hand_side
from harness.core.precision import polish as polish_candidate
from harness.core.task import Split
from harness.runtime.nodes import NodeKind, NodeType
from harness.sr.plan import SearchPlan
from harness.sr.tools import RunSRSearchTool
from harness.tools.base import ToolCallResult
from workflows.evidence import Branch, describe, short_equation
from workflows.params import engine_seed
from workflows.roles import PlanOutput
from workflows.run_core import SharedRuns, WorkflowRun

ENGINE_INFO_KEYS = ("generations", "gp_seconds", "n_seeds", "n_injected", "continued", "front_size")
PRECISION_SECONDS = 10.0  # the precision polish's share of a solve, at most (several refits of a few candidates)
PRECISION_TOP = 3  # the pool's best candidates polished
SPARSE_SECONDS = 20.0  # the sparse regression's share of a solve: a third of one SR run's seconds, 1 to 20 s (3
# libraries, refits most promising first: 5-15 s on ~3,000 rows after 60 s runs, 2 cores)


def shared_run_key(task: Any, plan: SearchPlan, backend: str, fit: Any) -> str:
    """What decides an unguided run's outcome: the task's content, the admitted plan (engine seed, seconds,
    operators, ...), the engine and how candidates are fitted and scored."""
    text = json.dumps({"task": task.fingerprint(), "plan": plan.model_dump(mode="json"), "backend": backend,
                       "fit": asdict(fit)}, sort_keys=True, default=str)
    return "unguided:" + hashlib.sha256(text.encode("utf-8")).hexdigest()[:32]


class SRSteps(WorkflowRun):
    """Engine-side steps of a workflow run (see the module docstring)."""

    def screen_hypotheses(self, texts: list[str], source: str = "hypothesis") -> tuple[list[Candidate], list[str]]:
        """Fit the plan's hypotheses now (the evaluator is fast): good ones seed the engine and join the pool,
        bad ones are dropped with a note the next role reads."""
        kept: list[Candidate] = []
        notes: list[str] = []
        limit = self.settings.hypothesis_max_nmse
        for text in dict.fromkeys(right_hand_side(t) for t in texts):  # "v = -c0*x" is the hypothesis -c0*x
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

    def library_hypotheses(self) -> tuple[list[Candidate], list[str]]:
        """The term library for the task's domain, fitted once per run (branches share it): each term over the
        task's inputs alone and, when there are several, their sum with every constant free. Terms naming other
        inputs are dropped with a note; poor fits go where the combination finds their terms."""
        with self._library_lock:  # branches starting together wait for the one fit
            if self.library is None:
                terms, notes = [], []
                for text in self.settings.library_terms(self.ctx.task.domain):
                    try:
                        parse_expression(text, self.ctx.variables, constants_as_params=True)
                        terms.append(text)
                    except ExpressionError as exc:
                        notes.append(f"library term {text[:60]!r} dropped: {str(exc)[:120]}")
                texts = terms + ([" + ".join(f"({t})" for t in terms)] if len(terms) > 1 else [])
                kept, fit_notes = self.screen_hypotheses(texts, source="library")
                self.library = (kept, notes + fit_notes)
            return self.library

    def sr_step(self, branch: Branch, plan: PlanOutput, step: str) -> Candidate | None:
        """Screen the plan's hypotheses, admit the plan (repaired, widened to the harness's floor) and run the
        engine; the branch keeps what it finds."""
        s = self.settings
        raw = plan.to_raw_plan()  # the role's answer in plan vocabulary; a SearchPlan once admitted below
        good, notes = self.screen_hypotheses(list(raw.get("seeds", [])))
        if step == "initial" and self.warm_start:  # warm start: the previous front, refitted, seeds every branch
            warm, warm_notes = self.screen_hypotheses(self.warm_start, source="warm_start")
            good, notes = warm + good, warm_notes + notes
        seeds = [c.expression for c in sorted(good, key=lambda c: c.sort_key())]
        if step == "initial":  # the domain's known terms (SRSettings.term_library) join the pool, not the seeds
            library, library_notes = self.library_hypotheses()
            good, notes = good + library, notes + library_notes
        if s.carry_best_seed and step != "initial":  # refinement starts from what works so far
            carried = [c.expression for c in sorted(branch.candidates, key=lambda c: c.sort_key())
                       if math.isfinite(c.metric("valid"))]
            seeds = list(dict.fromkeys(carried))[: s.carry_seeds] + seeds
        if not s.seed_engine:  # the engine runs exactly the unguided search; the fitted hypotheses stay in the pool
            seeds = []
        raw.update(seeds=list(dict.fromkeys(seeds))[: s.max_seeds],
                   seed=engine_seed(self.seed, branch.index, branch.steps, s.unguided_run))
        continues_unguided = step == "initial" and branch.index == 0 and self.continues_unguided
        if s.continue_search or continues_unguided:  # the engine keeps the population; the next run goes on
            raw["extras"] = {"population_key": self.population_key(branch.index),
                             "continue_population": step != "initial" or continues_unguided}
        admitted, changes = self.search.admit(raw, self.ctx.variables)
        base = self.residual_base(good) if step == "initial" else None
        residual_seconds = 0.0
        if base is not None:  # the residual run's seconds come out of this run's
            residual_seconds = min(s.residual_seconds, admitted.time_budget / 2)
            admitted = admitted.model_copy(update={"time_budget": admitted.time_budget - residual_seconds})
            changes = [*changes, f"time_budget: {residual_seconds:g} s go to the residual run"]
        ran = self._engine_call(f"sr-{branch.index}-{branch.steps}", admitted, changes, branch, step, good, notes)
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
        if base is not None and not self.stopped:
            self.residual_run(branch, base, residual_seconds)
        return found

    def residual_base(self, good: list[Candidate]) -> Candidate | None:
        """The kept hypothesis (the model's, the library's) a residual run builds on: the best by validation NMSE,
        unless it is already exact; ``None`` when residual runs are off or nothing was kept."""
        if self.settings.residual_seconds <= 0:
            return None
        usable = [c for c in good if c.source in GUIDED_SOURCES and NMSE_FLOOR < c.metric("valid") < 1.0]
        return min(usable, key=lambda c: c.sort_key()) if usable else None

    def residual_run(self, branch: Branch, base: Candidate, seconds: float) -> None:
        """An engine run on y - f(x) (``SRSettings.residual_seconds``), recorded as an ``sr`` node whose
        candidates are f + g for the front's equations g, every constant refitted on the task."""
        task = self.ctx.task
        try:
            f = parse_expression(base.equation, self.ctx.variables)
            with np.errstate(all="ignore"):
                fx = np.asarray(f(task.train.X), dtype=float) * np.ones(task.train.n)
        except (ExpressionError, TypeError, ValueError, ZeroDivisionError) as exc:
            branch.history.append(f"residual run skipped: {str(exc)[:120]}")
            return
        if not np.all(np.isfinite(fx)):
            branch.history.append("residual run skipped: the base equation is not finite on every training row")
            return
        residual_task = replace(task, name=f"{task.name}-residual", train=Split(task.train.X, task.train.y - fx),
                                test_id=None, test_ood=None, ground_truth=None, metadata={})
        rctx = AgentContext(task=residual_task, seed=self.ctx.seed, fit=self.ctx.fit, budget=self.ctx.budget,
                            cancel_event=self.ctx.cancel_event, search=self.search)
        plan, changes = self.search.admit(
            self.settings.floor().model_copy(update={"seed": engine_seed(self.seed, branch.index, 99, True)}),
            self.ctx.variables)
        plan = plan.model_copy(update={"time_budget": seconds})

        def lift(found: list[Candidate]) -> list[Candidate]:
            out = []
            for g in pareto_front(found)[-self.settings.residual_candidates:]:
                try:
                    out.append(evaluate_candidate(f"({base.equation}) + ({g.equation})", self.ctx,
                                                  source="residual", constants_as_params=True))
                except ExpressionError:
                    continue
            return [c for c in out if math.isfinite(c.metric("valid"))]

        ran = self._engine_call(f"sr-{branch.index}-residual", plan, [*changes, f"target: y - ({base.equation})"],
                                branch, "residual", [], [], tool=RunSRSearchTool(rctx), lift=lift)
        if ran is None:
            return
        node_id, found_here, error = ran
        branch.last_node = node_id
        branch.candidates.extend(found_here)
        best = select_best(found_here)
        branch.history.append(f"SR run on the residual of {short_equation(base.equation, 60)}: "
                              + (f"failed: {error[:160]}" if error else f"best {describe(best)}"))

    def _engine_call(self, call_id: str, plan: SearchPlan, changes: list[str], branch: Branch, step: str,
                     good: list[Candidate], notes: list[str], *, tool: Any = None,
                     lift: Callable[[list[Candidate]], list[Candidate]] | None = None, shared_key: str | None = None,
                     ) -> tuple[int, list[Candidate], str | None] | None:
        """One call of the SR tool (``tool``: another context's, e.g. a residual run's; at most ``max_workers``
        at once), recorded as an ``sr`` node holding the engine's candidates (through ``lift`` when they solve
        another target) and the fitted hypotheses ``good``; ``None`` when the run must stop. With ``shared_key``
        the run is read from (or, once made, written to) the run's :class:`SharedRuns` store."""
        if not self._boundary("sr run"):
            return None
        call = self._shared_call(shared_key, call_id, plan)
        if call is None:
            with self.sr_gate:
                if self.ctx.cancelled():
                    self._stop("cancelled")
                    return None
                if branch.index != -2 and self.exact_found():  # the unguided run may have solved it meanwhile
                    return None
                guided = branch.index >= 0  # the evolution channel proposes while these run, not the unguided one
                token = self.window.enter(plan.time_budget) if guided else None
                try:
                    call = (tool or self.sr_tool).call_plan(plan, changes, call_id=call_id)
                finally:
                    if token is not None:
                        self.window.leave(token)
            if shared_key is not None and call.ok and not (call.result or {}).get("error") and not self.stopped:
                self.shared_runs.put(shared_key, {"result": call.result, "result_str": call.result_str,
                                                  "seconds": call.seconds})
        if not call.ok and (call.error or "").startswith(BudgetExhausted.__name__):
            self._stop(call.error.split(": ", 1)[-1])
            return None
        record = call.result if call.ok else {}
        error = record.get("error") if call.ok else call.error
        shared = {"shared_run": shared_key, "made_by_this_run": call.seconds > 0} if shared_key is not None else {}
        if error:
            self._error(f"{branch.label} sr ({step}): {error}")
        engine = [Candidate.from_record(r) for r in record.get("candidates", [])]
        found_here = good + (lift(engine) if lift is not None else engine)
        summary = {k: v for k, v in record.items() if k not in ("candidates", "front", "best", "info")}
        node_id = self._record(
            NodeKind.of(NodeType.SR), parent=branch.last_node, branch=branch.label, candidates=found_here,
            seconds=call.seconds, error=error,
            tool_results=[replace(call, result=summary)],
            info={"step": step, "plan": record.get("plan"), "plan_changes": record.get("plan_changes", [])[:20],
                  "hypothesis_notes": notes[:10], "warnings": record.get("warnings", [])[:10],
                  "backend_used": record.get("backend_used"),
                  "engine": {k: v for k, v in (record.get("info") or {}).items() if k in ENGINE_INFO_KEYS},
                  **shared},
        )
        return node_id, found_here, error

    def _shared_call(self, key: str | None, call_id: str, plan: SearchPlan) -> ToolCallResult | None:
        """The stored result of a shared run as this run's tool call (taking no time), or None."""
        if key is None:
            return None
        held = self.shared_runs.get(key)
        if not held or not isinstance(held.get("result"), dict):
            return None
        return ToolCallResult(tool_name=self.sr_tool.name, ok=True, result=held["result"],
                              result_str=str(held.get("result_str", "")), seconds=0.0, call_id=call_id,
                              arguments={"plan": plan.model_dump(mode="json")})

    def unguided(self) -> None:
        """The engine alone, as an unguided run searches (the floor plan, the task's seed, no seeds), beside the
        roles: its front joins the pool, so guidance can only add to what the engine finds by itself."""
        update: dict[str, Any] = {"seed": self.seed}
        if self.continues_unguided:  # kept for the first branch's guided run (SRSettings.continue_unguided)
            update["extras"] = {"population_key": self.population_key(0), "continue_population": False}
        plan, changes = self.search.admit(self.settings.floor().model_copy(update=update), self.ctx.variables)
        key = None
        if self.shared_runs is not None and not self.continues_unguided:  # a kept population is this run's own
            key = shared_run_key(self.ctx.task, plan, self.backend, self.ctx.fit)
        self._engine_call("sr-unguided", plan, changes, Branch(index=-2, label="unguided"), "unguided", [], [],
                          shared_key=key)

    @property
    def continues_unguided(self) -> bool:
        return self.settings.unguided_run and self.settings.continue_unguided

    def population_key(self, branch: int) -> str:
        """Where the engine keeps a branch's population between its runs (``SRSettings.continue_search``)."""
        return f"{self.run_id}/{branch}"

    def sparse(self) -> None:
        """Sparse regression over generic libraries (``SRSettings.sparse_regression``, ``harness.core.basis``):
        the best sparse fit joins the pool when its validation NMSE beats the pool's best by the combination's
        factor (``CombineSettings.min_gain``), so it never displaces a near-equal fit; bounded by the time left.
        Only for a task with a signed input (a state around its equilibrium): on the training pools of tasks
        without one (time, concentrations, populations, temperatures) it joined and lost two picks out of domain,
        its monomials of time extrapolating poorly, and won none (docs/oscillators.md)."""
        left = self.tracker.seconds_left()
        if left is not None and left <= 1.0:
            return
        if not signed_inputs(self.ctx.train.X):  # no state around an equilibrium: what the libraries are for
            return
        pool = [c for c in self.state.candidates if math.isfinite(c.metric("valid"))]
        best = select_best(pool)
        if best is not None and best.metric("valid") <= NMSE_FLOOR:
            return
        t0 = time.perf_counter()
        residual = self.ctx.train.y
        if best is not None:
            try:
                with np.errstate(all="ignore"):
                    pred = np.asarray(parse_expression(best.equation, self.ctx.variables)(self.ctx.train.X),
                                      dtype=float) * np.ones(self.ctx.train.y.size)
                if np.all(np.isfinite(pred)):
                    residual = self.ctx.train.y - pred
            except (ExpressionError, TypeError, ValueError, ZeroDivisionError):
                pass
        budget = min(SPARSE_SECONDS, max(1.0, self.settings.time_budget / 3))  # short runs, a short channel
        budget *= self.settings.time_guard  # a solve bound by work: the seconds only a guard
        if left is not None:
            budget = min(budget, left - 0.5)
        found, info = sparse_candidates(self.ctx, residual, deadline=t0 + budget, pool=pool)
        top = select_best(found)
        limit = (best.metric("valid") if best is not None else math.inf) / CombineSettings().min_gain
        kept = [top] if top is not None and top.metric("valid") <= limit else []
        parent = max((n.id for n in self.state.nodes if n.type is NodeType.SR), default=None)
        self._record(NodeKind.of(NodeType.COMBINE), parent=parent, candidates=kept,
                     seconds=time.perf_counter() - t0,
                     info={"channel": "sparse regression", **info, "kept": len(kept), "cap_seconds": round(budget, 3),
                           "best_sparse_valid_nmse": top.metric("valid") if top is not None else None})

    def polish(self) -> None:
        """The pool's best few refitted on relative error, pruned and their constants snapped
        (``harness.core.precision``; ``SRSettings.precision_polish``): what they become joins the pool and the
        selection decides. A sixth of one SR run's seconds (10 s at the solve's 60 s, 2.5 s at `small`'s 15 s
        training runs, at least 0.25 s), within what the run has left."""
        left = self.tracker.seconds_left()
        if left is not None and left <= 0.5:
            return
        seconds = min(PRECISION_SECONDS, max(0.25, self.settings.time_budget / 6)) * self.settings.time_guard
        if left is not None:
            seconds = min(seconds, left - 0.5)
        t0, deadline = time.perf_counter(), time.monotonic() + seconds
        best = self.state.top(PRECISION_TOP)
        found = [c for cand in best for c in polish_candidate(cand, self.ctx, deadline=deadline)]
        parent = max((n.id for n in self.state.nodes if n.type is NodeType.SR), default=None)
        self._record(NodeKind.of(NodeType.COMBINE), parent=parent, candidates=found, seconds=time.perf_counter() - t0,
                     info={"channel": "precision polish", "polished": len(best), "found": len(found),
                           "cap_seconds": round(seconds, 3)})

    def combine(self) -> None:
        """Least-squares combinations of the pool's terms (engine fronts, hypotheses, poor hypotheses) that beat
        the pool's best validation NMSE by a clear factor join the pool; bounded by the run's time left."""
        left = self.tracker.seconds_left()
        if left is not None and left <= 0.5:
            return
        settings = CombineSettings(max_seconds=CombineSettings.max_seconds * self.settings.time_guard)
        if left is not None:
            settings = replace(settings, max_seconds=min(settings.max_seconds, left - 0.5))
        t0 = time.perf_counter()
        found, info = combine_terms(self.state.candidates, self.ctx, settings, extra_sources=self.poor_hypotheses)
        parent = max((n.id for n in self.state.nodes if n.type is NodeType.SR), default=None)
        self._record(NodeKind.of(NodeType.COMBINE), parent=parent, candidates=found, seconds=time.perf_counter() - t0,
                     info={**info, "terms_from": sorted({o for c in found for o in c.info.get("terms_from", [])}),
                           "cap_seconds": round(settings.max_seconds, 3)})
