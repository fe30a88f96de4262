"""Stage 3 — reflective instruction refinement (GEPA-style), inside the workflow chosen by stage 2.

Training tasks are split (seeded) into a feedback set and a held-out slice. Each step samples a parent from the
Pareto set over the held-out slice's tasks (candidates that are best on at least one task, weighted by on how many),
runs it on a feedback minibatch, turns the runs into feedback — SR diagnostics (residual patterns, candidate
structures, what was tried and how it scored) or raw node traces (``feedback=traces``, the ablation) — and lets
the reflection model rewrite one role's instruction (round-robin over the roles the workflow uses). The child must
not lose on the minibatch, and is kept only if it wins on the held-out slice: a race against its parent on the
slice's tasks x race seeds (``accept=paired``, the default: ``optimize.race``), or, as ablations, a higher mean
than its parent on the slice at the run's seeds (``accept=mean``) or also when it beats every candidate on some
task there (``accept=pareto``, GEPA's). The result is the candidate with the best held-out-slice mean.
"""

from __future__ import annotations

import logging
import random
from dataclasses import dataclass
from typing import Any

from optimize.context import OptimizeContext
from optimize.evaluation import StageBudgetSpent
from optimize.records import EvalSummary
from optimize.feedback import sr_diagnostics_feedback, trace_feedback
from optimize.race import race, race_schedule
from optimize.rewrite import propose_rewrite
from optimize.settings import ROLE_ORDER
from workflows.harness import Harness
from optimize.tasks import minibatch, split_slice, stable_seed

log = logging.getLogger(__name__)
STAGE = "refine"


@dataclass
class Member:
    spec: Harness
    holdout: EvalSummary
    parent: int | None
    role: str | None
    step: int | None

    def to_dict(self, index: int) -> dict[str, Any]:
        return {"index": index, "parent": self.parent, "role": self.role, "step": self.step,
                "holdout_score": self.holdout.score, "per_task": self.holdout.per_task,
                "llm_calls_per_task": self.holdout.llm_calls_per_task, "digest": self.spec.identity_digest,
                "prompts": self.spec.used_prompts()}


def pareto_members(members: list[Member]) -> dict[int, int]:
    """Index -> number of held-out tasks on which the member ties the best score (only members with >= 1)."""
    tasks = sorted({t for m in members for t in m.holdout.per_task})
    counts: dict[int, int] = {}
    for task in tasks:
        best = max(m.holdout.per_task.get(task, 0.0) for m in members)
        for i, m in enumerate(members):
            if m.holdout.per_task.get(task, 0.0) >= best:
                counts[i] = counts.get(i, 0) + 1
    # drop members dominated by another (<= everywhere, < somewhere)
    def dominated(i: int) -> bool:
        a = members[i].holdout.per_task
        for j in counts:
            if j == i:
                continue
            b = members[j].holdout.per_task
            if all(b.get(t, 0) >= a.get(t, 0) for t in tasks) and any(b.get(t, 0) > a.get(t, 0) for t in tasks):
                return True
        return False

    return {i: c for i, c in counts.items() if not dominated(i)} or {0: 1}


def sample_parent(members: list[Member], rng: random.Random) -> int:
    counts = pareto_members(members)
    indices = sorted(counts)
    return rng.choices(indices, weights=[counts[i] for i in indices], k=1)[0]


def wins(child: EvalSummary, parent: EvalSummary, members: list[Member], accept: str) -> bool:
    """The ablations' tests on the held-out slice: ``mean`` = a higher mean; ``pareto`` = a higher mean or the best
    on some task. (``paired``, the default, is a race: :func:`refine_step`.)"""
    if child.score > parent.score:
        return True
    if accept != "pareto":
        return False
    for task, score in child.per_task.items():
        if all(score > m.holdout.per_task.get(task, 0.0) for m in members):
            return True
    return False


def best_member(members: list[Member]) -> int:
    return min(range(len(members)),
               key=lambda i: (-members[i].holdout.score, members[i].holdout.llm_calls_per_task, i))


def build_feedback(ctx: OptimizeContext, summary: EvalSummary) -> str:
    """SR diagnostics (default) or raw node traces (``feedback=traces``) of the parent's minibatch runs."""
    s, chars = ctx.settings.stage3, ctx.settings.rewrite.feedback_chars
    if s.feedback == "traces":
        return trace_feedback(summary.records, ctx.task_index, chars)
    return sr_diagnostics_feedback(summary.records, ctx.task_index, chars, drop_terms=s.drop_terms)


def refine_step(ctx: OptimizeContext, step: int, members: list[Member], parent_index: int, role: str,
                batch: list[Any], holdout_tasks: list[Any], roles: list[str]) -> dict[str, Any]:
    """One reflection step: feedback, rewrite, minibatch gate, held-out test; appends the child when it wins."""
    s = ctx.settings.stage3
    parent = members[parent_index]
    parent_mb = ctx.evaluator.evaluate(parent.spec, batch, ctx.seeds, stage=STAGE, label=f"step {step} parent")
    feedback = build_feedback(ctx, parent_mb)
    context = (f"The team runs the workflow w={parent.spec.workflow.as_tuple()} (analyst, branches, repair rounds, "
               f"discussion rounds, synthesizer); roles in use: {', '.join(roles)}.")
    rw = ctx.folder.journal(STAGE).get_or_make(
        f"{step}/{parent.spec.identity_digest}/{role}",
        lambda: propose_rewrite(ctx.rewriter, role, parent.spec.prompts[role], feedback, mode="reflect",
                                settings=ctx.settings.rewrite, seed=ctx.seed + 13 * step,
                                context=context).to_dict(),
    )
    row: dict[str, Any] = {"step": step, "parent": parent_index, "role": role, "minibatch": [t.name for t in batch],
                           "parent_minibatch": parent_mb.score, "reason": rw.get("reason"),
                           "rationale": rw.get("rationale"), "accepted": False}
    if not rw.get("text"):
        return row
    child = parent.spec.with_prompts(**{role: rw["text"]})
    child_mb = ctx.evaluator.evaluate(child, batch, ctx.seeds, stage=STAGE, label=f"step {step} child")
    row["child_minibatch"] = child_mb.score
    if s.minibatch_gate and child_mb.score < parent_mb.score:
        row["reason"] = "lost on the minibatch"
        return row
    if s.accept == "paired":
        result = race(child, parent.spec, race_schedule(holdout_tasks, ctx.race_seeds, ctx.seed + step),
                      ctx.settings.accept, ctx.evaluator.scorer(STAGE), max_pairs=s.race_pairs,
                      batch=ctx.settings.race_batch, labels=(f"step {step} holdout", f"step {step} parent"))
        row.update(paired=result.to_dict(), child_holdout=result.challenger_mean,
                   parent_holdout=result.incumbent_mean)
        won = result.accepted
        log.info("stage 3 step %d: %s rewrite against its parent: %s", step, role, result.summary())
    if s.accept != "paired" or won:  # the member's slice scores (after a won race: mostly its own runs, cached)
        child_hold = ctx.evaluator.evaluate(child, holdout_tasks, ctx.seeds, stage=STAGE,
                                            label=f"step {step} holdout")
    if s.accept != "paired":
        row.update(child_holdout=child_hold.score, parent_holdout=parent.holdout.score)
        won = wins(child_hold, parent.holdout, members, s.accept)
    if won:
        members.append(Member(child, child_hold, parent_index, role, step))
        row["accepted"] = True
        log.info("stage 3 step %d: %s rewrite kept (held-out %.3f vs %.3f)", step, role, child_hold.score,
                 parent.holdout.score)
    else:
        row["reason"] = "did not win on the held-out slice"
    return row


def run_stage3(ctx: OptimizeContext, start: Harness) -> dict[str, Any]:
    """Refine ``start``'s instructions; returns the stage-3 result (the caller saves it)."""
    s = ctx.settings.stage3
    feedback_tasks, holdout_tasks = split_slice(ctx.tasks.train, s.holdout, ctx.seed, STAGE)
    roles = [r for r in ROLE_ORDER if r in start.workflow.roles_used()]
    rng = random.Random(stable_seed(ctx.seed, STAGE, "parents"))
    steps: list[dict[str, Any]] = []
    members: list[Member] = []
    exhausted = False
    try:
        start_hold = ctx.evaluator.evaluate(start, holdout_tasks, ctx.seeds, stage=STAGE, label="refine start")
        members.append(Member(start, start_hold, None, None, None))
        for step in range(s.steps):
            batch = minibatch(feedback_tasks, s.minibatch, ctx.seed, STAGE, step)
            steps.append(refine_step(ctx, step, members, sample_parent(members, rng), roles[step % len(roles)],
                                     batch, holdout_tasks, roles))
    except StageBudgetSpent as exc:
        log.warning("stage 3: %s", exc)
        exhausted = True
    result: dict[str, Any] = {
        "stage": STAGE,
        "feedback": s.feedback,
        "feedback_tasks": [t.name for t in feedback_tasks],
        "holdout_tasks": [t.name for t in holdout_tasks],
        "members": [m.to_dict(i) for i, m in enumerate(members)],
        "steps": steps,
        "budget_exhausted": exhausted,
        "harness": start.to_dict(),
        "solver_runs": ctx.evaluator.stage_solver_runs(STAGE),
    }
    if members:
        best = best_member(members)
        result.update(pareto=sorted(pareto_members(members)), best=best, holdout_score=members[best].holdout.score,
                      harness=members[best].spec.to_dict())
    return result
