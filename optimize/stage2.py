"""Stage 2 — joint search of the workflow shape, the prompt assignment and the SR choices, with Optuna (seeded TPE),
its candidates raced against the stage's start.

Space: w = (use_analyst, branches, repair_rounds, discussion_rounds, use_synthesizer) x the pool index each role
uses (``space=full``), or an index into a fixed presampled pool of workflows x prompt indices (``space=fixed_pool``,
the ablation), x the SR settings the shipped default chose by hand (the unguided run, the term combination, the
operator set, the sparse regression) and the SR channels.

Each trial is *screened* (:func:`screen_trial`): raced against the start (stage 1's harness) on a minibatch of
training tasks at the first seed, pair by pair, and dropped as soon as it falls behind; its objective is its gain
over the start on the pairs it ran (:func:`screening_gain`), less ``llm_penalty`` x LLM calls per task. Then the best
trials that gained (:func:`eligible`) race the start in turn on the other pairs of the training tasks x race seeds
(:func:`confirm_by_race`; tasks on which every screened trial tied the start come last: they carry no information),
each at alpha / k so the stage as a whole accepts a harness no better than its start with probability <= alpha: the
first accepted is the stage's choice, else the start stays. Then a brief adaptation: a stage-1-style rewrite of its
prompts inside the chosen workflow, kept only when it wins a race. ``optimize.replay`` runs the same screening and
confirmation on recorded outcomes to measure how often this finds a gain that is there.

Resumable and shareable: the study lives in an RDB (``sqlite:///<run>/optuna.db`` or ``optimize.storage``) under a
fixed name with ``load_if_exists``; the run continues until ``n_trials`` trials are COMPLETE in total, so finished
trials are never redone. Several workers may share it (``optimize.shared_study``): Optuna's heartbeat fails and
retries the trial of a dead worker (the evaluation cache makes its finished task runs free), a callback and the
trial numbers keep the count exact, and a parameter set another worker ran or runs is pruned.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import optuna
from optuna.trial import FrozenTrial, Trial, TrialState

from optimize.context import OptimizeContext
from optimize.evaluation import StageBudgetSpent
from optimize.feedback import discovery_feedback
from optimize.race import Pair, pair_key, race, race_schedule
from optimize.search_space import fixed_pool, spec_for, suggest, suggest_sr_channels
from optimize.screening import (confirm_by_race, eligible, screen_trial, screening_gain,
                                uninformative_tasks)
from optimize.rewrite import propose_rewrite
from optimize.settings import ROLE_ORDER
from optimize.shared_study import join, make_storage, run_until_complete, slots_taken, twin, worker_id
from optimize.tasks import minibatch, stable_seed
from workflows.harness import Harness
from workflows.identity import short_hash
from workflows.params import WorkflowParams
from workflows.roles import role_agent_settings

log = logging.getLogger(__name__)
STAGE = "search"


# -- storage and study ------------------------------------------------------------------------------------------
def open_study(ctx: OptimizeContext) -> optuna.Study:
    s = ctx.settings.stage2
    url = ctx.settings.storage or ctx.folder.storage_url()
    sampler = optuna.samplers.TPESampler(seed=ctx.seed, n_startup_trials=s.n_startup_trials)
    for attempt in range(5):  # workers starting together race to create the schema and the study: retry
        try:
            storage = make_storage(url, s.heartbeat_interval, s.grace_period, s.max_retry)
            study = optuna.create_study(
                storage=storage, study_name=ctx.settings.study_name, direction="maximize",
                sampler=sampler, load_if_exists=True,
            )
            break
        except Exception as exc:  # noqa: BLE001 - sqlalchemy IntegrityError / OperationalError, DuplicatedStudyError
            if attempt == 4:
                raise
            log.info("stage 2: opening the study raced another worker (%s); retrying", type(exc).__name__)
            time.sleep(0.5 + attempt)
    if join(study):  # workers sharing a study must not propose the same parameters: each gets its own sampler seed
        study.sampler = optuna.samplers.TPESampler(seed=stable_seed(ctx.seed, "tpe", worker_id()),
                                                   n_startup_trials=s.n_startup_trials)
    return study


# -- run --------------------------------------------------------------------------------------------------------
class _StopAfterFailures:
    """Stop the study when this worker's trials keep failing (a broken setup must not loop forever)."""

    def __init__(self, limit: int):
        self.limit, self.count = limit, 0

    @property
    def stopped(self) -> bool:
        return self.count >= self.limit

    def __call__(self, study: optuna.Study, trial: FrozenTrial) -> None:
        if trial.state == TrialState.FAIL:
            self.count += 1
            if self.stopped:
                log.error("stage 2: %d failed trials in this process, stopping", self.count)
                study.stop()


MAX_DUPLICATE_PRUNES = 8  # in a row, per process; then a repeated parameter set is evaluated (cache hit)


def completed(study: optuna.Study) -> list[FrozenTrial]:
    return study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))


def ranked(trials: list[FrozenTrial]) -> list[FrozenTrial]:
    """Complete trials, best first: not dropped, highest gain over the start, fewest LLM calls per task, earliest."""
    usable = [t for t in trials if "acc" in t.user_attrs]
    return sorted(usable, key=lambda t: (bool(t.user_attrs.get("dropped")), -t.user_attrs.get("gain", 0.0),
                                         t.user_attrs.get("llm_calls_per_task", 0), t.number))


def choose(trials: list[FrozenTrial]) -> FrozenTrial | None:
    """Lexicographic pick: not dropped, highest gain, then fewest LLM calls per task, then earliest."""
    order = ranked(trials)
    return order[0] if order else None


def trial_spec(ctx: OptimizeContext, pool: dict[str, list[str]], trial: FrozenTrial) -> tuple[Harness, dict[str, Any]]:
    """The harness a complete trial ran, and what it chose (for the stage result)."""
    w = WorkflowParams.from_tuple(trial.user_attrs["workflow"])
    agents = trial.user_attrs.get("role_agents") or {}
    channels = trial.user_attrs.get("sr_channels")
    if channels is None:  # a trial stored before SR_CHANNELS kept its one channel on its own
        old = trial.user_attrs.get("evolve_rounds")
        channels = {} if old is None else {"evolve_rounds": old}
    spec = spec_for(ctx.base, pool, w, {k: int(v) for k, v in trial.user_attrs["prompt_index"].items()},
                    role_agent_settings(agents), channels)
    return spec, {"trial": trial.number, "acc": trial.user_attrs["acc"], "gain": trial.user_attrs.get("gain"),
                  "llm_calls_per_task": trial.user_attrs.get("llm_calls_per_task"), "workflow": list(w.as_tuple()),
                  "prompt_index": trial.user_attrs["prompt_index"], "role_agents": agents, **channels}


def screening_pairs(ctx: OptimizeContext) -> list[Pair]:
    """Where every trial is first looked at: a seeded minibatch of the training tasks at the run's first seed."""
    batch = minibatch(ctx.tasks.train, ctx.settings.stage2.minibatch, ctx.seed, STAGE)
    return [(task, ctx.seeds[0]) for task in batch]


def run_search(ctx: OptimizeContext, pool: dict[str, list[str]], start: Harness
               ) -> tuple[optuna.Study, list[WorkflowParams] | None]:
    """Create/resume the study and run trials until ``n_trials`` are COMPLETE or the solver budget is spent; each
    trial screened against ``start``."""
    s = ctx.settings.stage2
    study = open_study(ctx)
    pool_digest = short_hash(pool)
    held = study.user_attrs.get("pool_digest")
    if held is None:
        study.set_user_attr("pool_digest", pool_digest)
        study.set_user_attr("space", s.space)
    elif held != pool_digest or study.user_attrs.get("space") != s.space:
        raise RuntimeError(
            f"study {ctx.settings.study_name!r} was started with another prompt pool or space; "
            "use a new run folder or another optimize.study_name"
        )
    workflows = fixed_pool(s, ctx.seed) if s.space == "fixed_pool" else None
    if workflows is not None:
        study.set_user_attr("fixed_pool", [list(w.as_tuple()) for w in workflows])
    pairs = screening_pairs(ctx)
    scores = ctx.evaluator.scorer(STAGE)
    pool_sizes = {role: len(pool[role]) for role in ROLE_ORDER if role in pool}
    repeats, halt = {"n": 0}, {"budget": False}

    def objective(trial: Trial) -> float:
        trial.set_user_attr("worker", worker_id())
        w, idx, agents = suggest(trial, s, pool_sizes, workflows)
        channels = suggest_sr_channels(trial, s.bounds)
        spec = spec_for(ctx.base, pool, w, idx, agents, channels)
        trials = trial.study.get_trials(deepcopy=False)
        if slots_taken(trials, trial.number, s.n_trials):
            trial.study.stop()
            raise optuna.TrialPruned(f"{s.n_trials} trials are complete or running in other workers")
        same = twin(trials, trial.number)
        if same is not None and repeats["n"] < MAX_DUPLICATE_PRUNES:  # not a new trial: let the sampler draw again
            repeats["n"] += 1
            raise optuna.TrialPruned(f"same parameters as trial {same.number}")
        repeats["n"] = 0  # (a small space may leave only repeats: then a repeat runs, from the evaluation cache)
        result = screen_trial(spec, start, pairs, ctx.settings.accept, scores, batch=ctx.settings.race_batch,
                              label=f"trial {trial.number}")
        if result is None:
            log.warning("stage 2: the stage's solver budget is spent")
            halt["budget"] = True
            trial.study.stop()
            raise optuna.TrialPruned("the stage's solver budget is spent")
        ran = [p for p in pairs if pair_key(p) in set(map(tuple, result.pairs))]
        summary = ctx.evaluator.evaluate_pairs({f"trial {trial.number}": spec}, ran, stage=STAGE)[f"trial {trial.number}"]
        trial.set_user_attr("acc", result.challenger_mean)
        trial.set_user_attr("gain", screening_gain(result))
        trial.set_user_attr("dropped", result.verdict == "behind")
        trial.set_user_attr("screen", {**result.record.to_dict(), "diffs": list(result.record.diffs),
                                       "pairs": [list(p) for p in result.pairs]})
        trial.set_user_attr("llm_calls_per_task", summary.llm_calls_per_task)
        trial.set_user_attr("seconds_per_task", summary.seconds_per_task)
        trial.set_user_attr("workflow", list(w.as_tuple()))
        trial.set_user_attr("prompt_index", idx)
        trial.set_user_attr("role_agents", {r: a.model_dump(mode="json") for r, a in agents.items()})
        trial.set_user_attr("sr_channels", channels)
        trial.set_user_attr("digest", spec.identity_digest)
        trial.set_user_attr("new_evaluations", summary.n_new)
        trial.set_user_attr("cache_hits", summary.n_cached)
        log.info("stage 2 trial %d: w=%s prompts=%s role agents=%s sr=%s: %s against the start on %d screening "
                 "pairs (gain %+.3f)%s", trial.number, w.as_tuple(), idx,
                 {r: (list(a.tools), a.K) for r, a in agents.items()}, channels, result.record.summary(),
                 len(result.pairs), screening_gain(result), ", dropped" if result.verdict == "behind" else "")
        return screening_gain(result) - s.llm_penalty * summary.llm_calls_per_task

    failures = _StopAfterFailures(s.n_trials)

    def halted() -> bool:
        left = ctx.evaluator.budget_left(STAGE)
        return halt["budget"] or failures.stopped or (left is not None and left <= s.adapt_reserve)

    log.info("stage 2: %d of %d trials complete", len(completed(study)), s.n_trials)
    run_until_complete(study, objective, s.n_trials, [failures], halted)
    return study, workflows


def adapt(ctx: OptimizeContext, spec: Harness, batch: list[Any]) -> tuple[Harness, list[dict[str, Any]]]:
    """Short stage-1-style rewrite of the chosen prompts inside the chosen workflow; a rewrite is kept only when it
    wins a race against the current prompts (the training tasks x race seeds, at most ``stage1.race_pairs``)."""
    s = ctx.settings.stage2
    journal = ctx.folder.journal(STAGE)
    roles = [r for r in ROLE_ORDER if r in spec.workflow.roles_used()]
    if s.adapt_roles is not None:
        roles = roles[: s.adapt_roles]
    log_rows: list[dict[str, Any]] = []
    if not s.adapt_steps or not roles:
        return spec, log_rows
    current = ctx.evaluator.evaluate(spec, batch, ctx.seeds, stage=STAGE, label="adapt base")
    schedule = race_schedule(ctx.tasks.train, ctx.race_seeds, ctx.seed)
    context = (f"The role runs inside the workflow w={spec.workflow.as_tuple()} (analyst, branches, repair rounds, "
               "discussion rounds, synthesizer).")
    for step in range(s.adapt_steps):
        for role in roles:
            feedback = discovery_feedback(current.records, ctx.task_index, ctx.settings.rewrite.feedback_chars)
            rw = journal.get_or_make(
                f"adapt/{spec.identity_digest}/{step}/{role}",
                lambda role=role, feedback=feedback: propose_rewrite(
                    ctx.rewriter, role, spec.prompts[role], feedback, mode="engineer",
                    settings=ctx.settings.rewrite, seed=ctx.seed + 7 * step, context=context,
                ).to_dict(),
            )
            row: dict[str, Any] = {"step": step, "role": role, "reason": rw.get("reason"), "kept": False}
            if rw.get("text"):
                child = spec.with_prompts(**{role: rw["text"]})
                result = race(child, spec, schedule, ctx.settings.accept, ctx.evaluator.scorer(STAGE),
                              max_pairs=ctx.settings.stage1.race_pairs, batch=ctx.settings.race_batch,
                              labels=(f"adapt {role}", "adapt base"))
                row.update(score=result.challenger_mean, base_score=result.incumbent_mean, **result.to_dict())
                if result.accepted:
                    spec, row["kept"] = child, True
                    current = ctx.evaluator.evaluate(spec, batch, ctx.seeds, stage=STAGE, label="adapt base")
            log_rows.append(row)
    return spec, log_rows


def trial_rows(study: optuna.Study) -> list[dict[str, Any]]:
    return [
        {"number": t.number, "state": t.state.name, "value": t.value, "params": t.params,
         **{k: t.user_attrs.get(k) for k in ("acc", "gain", "dropped", "screen", "llm_calls_per_task", "workflow",
                                              "prompt_index", "digest", "new_evaluations", "cache_hits")}}
        for t in study.get_trials(deepcopy=False)
    ]


def screened_rows(ctx: OptimizeContext, pool: dict[str, list[str]], study: optuna.Study) -> list[dict[str, Any]]:
    """The complete trials as the racing functions read them (key, candidate, gain, dropped, screening record)."""
    rows = []
    for trial in ranked(completed(study)):
        if "screen" not in trial.user_attrs:  # a trial stored before screening: no record against the start
            continue
        spec, chosen = trial_spec(ctx, pool, trial)
        screen = trial.user_attrs["screen"]
        rows.append({"key": spec.identity_digest, "candidate": spec, "chosen": chosen, "number": trial.number,
                     "gain": float(trial.user_attrs.get("gain", 0.0)), "dropped": bool(trial.user_attrs.get("dropped")),
                     "calls": float(trial.user_attrs.get("llm_calls_per_task", 0.0)),
                     "pairs": [tuple(p) for p in screen["pairs"]], "diffs": screen["diffs"]})
    return rows


def run_stage2(ctx: OptimizeContext, pool: dict[str, list[str]]) -> dict[str, Any]:
    """Search with screening, race the best trials against the start, adapt; returns the stage-2 result (the
    caller saves it)."""
    s = ctx.settings.stage2
    start = ctx.base.with_prompts(**{role: texts[0] for role, texts in pool.items()})  # stage 1's harness
    study, workflows = run_search(ctx, pool, start)
    pairs = screening_pairs(ctx)
    rows = screened_rows(ctx, pool, study)
    retired = uninformative_tasks(rows, ctx.settings.accept.margin)
    schedule = race_schedule(ctx.tasks.train, ctx.race_seeds, ctx.seed, exclude=[pair_key(p) for p in pairs],
                             last=retired)
    candidates = eligible(rows, start.identity_digest, max(1, s.confirm_top))
    kept = {"trial": None, "start": True, "workflow": list(start.workflow.as_tuple()),
            "prompt_index": {role: 0 for role in start.prompts}, "role_agents": {}}
    spec, chosen, results = start, kept, []
    if not rows:
        log.warning("stage 2: no complete trial; keeping the stage-1 harness")
    elif s.confirm_top == 0:
        best = next((r for r in rows if not r["dropped"]), None)
        spec, chosen = (best["candidate"], best["chosen"]) if best else (start, kept)
    elif candidates:
        winner, results = confirm_by_race(candidates, start, schedule, ctx.settings.accept, ctx.evaluator.scorer(STAGE),
                                          max_pairs=s.race_pairs, batch=ctx.settings.race_batch)
        if winner is not None:
            spec = winner
            chosen = next(r["chosen"] for r in candidates if r["candidate"] is winner)
    confirmation = [{"trial": row["number"], **result.to_dict()} for row, result in zip(candidates, results)]
    for row in confirmation:
        log.info("stage 2: trial %s against the start: %s", row["trial"], row["summary"])
    if not candidates and rows:
        log.info("stage 2: no trial gained on the screening pairs without falling behind; the start stays")
    batch = minibatch(ctx.tasks.train, s.minibatch, ctx.seed, STAGE)
    adaptation: list[dict[str, Any]] = []
    try:
        spec, adaptation = adapt(ctx, spec, batch)
        final = ctx.evaluator.evaluate(spec, batch, ctx.seeds, stage=STAGE, label="stage 2 final")
        score = final.score
    except StageBudgetSpent as exc:
        log.warning("stage 2 adaptation: %s", exc)
        score = chosen.get("acc")
    return {
        "stage": STAGE,
        "space": s.space,
        "study_name": ctx.settings.study_name,
        "n_trials_complete": len(completed(study)),
        "chosen": chosen,
        "confirmation": confirmation,
        "confirmation_pairs": [list(pair_key(p)) for p in schedule[: s.race_pairs]],
        "screening_pairs": [list(pair_key(p)) for p in pairs],
        "uninformative_tasks": retired,
        "dropped_trials": [r["number"] for r in rows if r["dropped"]],
        "accept_rule": ctx.settings.accept.describe(),
        "fixed_pool": [list(w.as_tuple()) for w in workflows] if workflows else None,
        "adaptation": adaptation,
        "minibatch": [t.name for t in batch],
        "minibatch_score": score,
        "trials": trial_rows(study),
        "harness": spec.to_dict(),
        "solver_runs": ctx.evaluator.stage_solver_runs(STAGE),
    }
