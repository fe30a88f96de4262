"""Stage 1 — role-prompt initialisation.

Each role group is optimised inside its small local workflow (Planner (0,1,0,0,0); Analyst (1,1,0,0,0);
Diagnoser+Repairer together (0,1,1,0,0); Synthesizer (0,2,0,0,1)) so its score reflects that role and little
else. Candidates are the seed text plus rewrites by the prompt engineer, each seeing the kept text's discovery
feedback on a seeded minibatch of training tasks. A rewrite replaces the incumbent (at first the seed text) only
when it wins a race against it (``optimize.race``: the training tasks x race seeds in a seeded order, at most
``race_pairs`` pairs, dropped once it falls behind); the incumbent is the role's stage-1 text and the next
rewrite's parent. The incumbent and the best-scoring other texts (their mean on the pairs they raced), up to
``pool_size`` per role, form the prompt pool that stage 2 assigns from.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from optimize.context import OptimizeContext
from optimize.evaluation import StageBudgetSpent
from optimize.records import EvalSummary
from optimize.feedback import discovery_feedback
from optimize.race import race, race_schedule
from optimize.rewrite import propose_rewrite
from optimize.tasks import minibatch
from workflows.params import LOCAL_WORKFLOWS

log = logging.getLogger(__name__)
STAGE = "init"


@dataclass
class PromptCandidate:
    """One set of role instructions tried in stage 1 (not an equation: that is ``harness.core.Candidate``)."""

    prompts: dict[str, str]
    origin: str
    summary: EvalSummary | None = None
    rewrite: dict[str, Any] = field(default_factory=dict)

    @property
    def score(self) -> float:
        return self.summary.score if self.summary else -1.0

    def rank_key(self, index: int) -> tuple[float, float, int]:
        calls = self.summary.llm_calls_per_task if self.summary else float("inf")
        return (-self.score, calls, index)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"prompts": self.prompts, "origin": self.origin, "rewrite": self.rewrite}
        if self.summary:
            out.update(score=self.summary.score, per_task=self.summary.per_task,
                       llm_calls_per_task=self.summary.llm_calls_per_task,
                       seconds_per_task=self.summary.seconds_per_task, digest=self.summary.digest)
        return out


def _pairs(schedule: list[Any], result: Any) -> list[Any]:
    """The schedule's pairs a race ran (its first ones, in order)."""
    return list(schedule[: len(result.pairs)])


def group_name(roles: list[str]) -> str:
    return "+".join(roles)


def _ranked(cands: list[PromptCandidate]) -> list[PromptCandidate]:
    return [c for _, c in sorted(enumerate(cands), key=lambda p: p[1].rank_key(p[0])) if c.summary is not None]


def optimise_group(ctx: OptimizeContext, roles: list[str], prompts: dict[str, str]) -> dict[str, Any]:
    """Candidates for one role group in its local workflow; returns the group's record (best first)."""
    s = ctx.settings.stage1
    name = group_name(roles)
    workflow = LOCAL_WORKFLOWS[roles[0]]
    base = ctx.base.with_workflow(workflow).with_prompts(**prompts)
    batch = minibatch(ctx.tasks.train, s.minibatch, ctx.seed, STAGE, name)
    journal = ctx.folder.journal(STAGE)
    schedule = race_schedule(ctx.tasks.train, ctx.race_seeds, ctx.seed, first=[t.name for t in batch])
    cands = [PromptCandidate({r: prompts[r] for r in roles}, "seed")]
    incumbent = cands[0]
    exhausted = False
    try:
        cands[0].summary = ctx.evaluator.evaluate(base, batch, ctx.seeds, stage=STAGE, label=f"{name} seed")
        max_proposals = s.max_proposals if s.max_proposals is not None else 2 * max(0, s.n_candidates - 1)
        for k in range(max_proposals):
            if len(cands) >= s.n_candidates:
                break
            parent = incumbent
            feedback = discovery_feedback(parent.summary.records, ctx.task_index, ctx.settings.rewrite.feedback_chars)
            new: dict[str, str] = {}
            info: dict[str, Any] = {}
            for role in roles:
                avoid = tuple(c.prompts[role] for c in cands)
                rw = journal.get_or_make(
                    f"{name}/{k}/{role}",
                    lambda role=role, avoid=avoid: propose_rewrite(
                        ctx.rewriter, role, parent.prompts[role], feedback, mode="engineer",
                        settings=ctx.settings.rewrite, seed=ctx.seed + 101 * k, avoid=avoid,
                    ).to_dict(),
                )
                info[role] = {key: rw.get(key) for key in ("rationale", "reason", "attempts")}
                if rw.get("text"):
                    new[role] = rw["text"]
            if len(new) < len(roles):  # a role got no usable rewrite: nothing to evaluate
                log.info("stage 1 %s: proposal %d rejected (%s)", name, k, info)
                continue
            cand = PromptCandidate(new, f"rewrite {k} of {parent.origin}", rewrite=info)
            cands.append(cand)
            child, kept = base.with_prompts(**new), base.with_prompts(**parent.prompts)
            result = race(child, kept, schedule, ctx.settings.accept, ctx.evaluator.scorer(STAGE),
                          max_pairs=s.race_pairs, batch=ctx.settings.race_batch,
                          labels=(f"{name} rewrite {k}", f"{name} {parent.origin}"))
            cand.summary = ctx.evaluator.evaluate_pairs({"c": child}, _pairs(schedule, result), stage=STAGE)["c"]
            cand.rewrite["paired"] = {**result.to_dict(), "against": parent.origin}
            if result.accepted:
                incumbent = cand
            log.info("stage 1 %s: rewrite %d against %s: %s", name, k, parent.origin, result.summary())
            if result.note:  # the stage's budget is spent
                exhausted = True
                break
    except StageBudgetSpent as exc:
        log.warning("stage 1 %s: %s", name, exc)
        exhausted = True
    others = [c for c in _ranked(cands) if c is not incumbent]
    ranked = [incumbent, *others] if incumbent.summary is not None else (_ranked(cands) or cands[:1])
    return {
        "roles": roles,
        "workflow": list(workflow.as_tuple()),
        "minibatch": [t.name for t in batch],
        "candidates": [c.to_dict() for c in ranked],
        "accept_rule": ctx.settings.accept.describe(),
        "budget_exhausted": exhausted,
    }


def build_pool(groups: list[dict[str, Any]], seeds: dict[str, str], pool_size: int) -> dict[str, list[str]]:
    """Per role: distinct texts of the top candidates of its group, best first; roles never optimised keep the seed."""
    pool = {role: [text] for role, text in seeds.items()}
    for group in groups:
        for role in group["roles"]:
            texts: list[str] = []
            for cand in group["candidates"]:
                text = cand["prompts"][role]
                if text not in texts:
                    texts.append(text)
                if len(texts) >= pool_size:
                    break
            pool[role] = texts or pool[role]
    return pool


def run_stage1(ctx: OptimizeContext) -> dict[str, Any]:
    """Optimise every role group in turn; returns (and the caller saves) the stage-1 result with the pool."""
    s = ctx.settings.stage1
    seeds = dict(ctx.base.prompts)
    current = dict(seeds)  # later groups run with the winners of earlier ones (Planner first)
    groups = []
    for roles in s.groups:
        unknown = [r for r in roles if r not in seeds]
        if unknown:
            raise ValueError(f"stage 1: unknown roles {unknown}")
        groups.append(optimise_group(ctx, list(roles), current))
        current.update(groups[-1]["candidates"][0]["prompts"])
        if groups[-1]["budget_exhausted"]:
            break
    pool = build_pool(groups, seeds, s.pool_size)
    best = {role: texts[0] for role, texts in pool.items()}
    return {
        "stage": STAGE,
        "groups": groups,
        "pool": pool,
        "best_prompts": best,
        "harness": ctx.base.with_prompts(**best).to_dict(),
        "solver_runs": ctx.evaluator.stage_solver_runs(STAGE),
    }
