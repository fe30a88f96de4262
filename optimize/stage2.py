"""Stage 2 — joint search of the workflow shape and the prompt assignment, with Optuna (seeded TPE).

Space: w = (use_analyst, branches, repair_rounds, discussion_rounds, use_synthesizer) x the pool index each role
uses (``space=full``), or an index into a fixed presampled pool of workflows x prompt indices (``space=fixed_pool``,
the ablation). Objective: mean acc_0.01 on a fixed training minibatch minus ``llm_penalty`` x LLM calls per task
(calls break ties). After the study the best trial is picked lexicographically (accuracy, then fewer calls) and
briefly adapted: a stage-1-style rewrite of its prompts inside the chosen workflow, kept only if it scores higher.

Resumable and shareable: the study lives in an RDB (``sqlite:///<run>/optuna.db`` or ``optimize.storage``) under a
fixed name with ``load_if_exists``; the run continues until ``n_trials`` trials are COMPLETE in total, so finished
trials are never redone. RUNNING trials left by a dead process on this host are failed and re-queued with their
parameters at start (optionally, for many hosts, Optuna's heartbeat + its retry callback), and the
evaluation cache makes the re-queued configuration's finished task runs free.
"""

from __future__ import annotations

import inspect
import logging
import os
import random
import socket
import time
import warnings
from typing import Any

import optuna
from optuna.storages import RDBStorage
from optuna.study import MaxTrialsCallback
from optuna.trial import FrozenTrial, Trial, TrialState

from harness.runtime.role_agent import RoleAgentConfig
from optimize.context import OptimizeContext
from optimize.evaluation import StageBudgetSpent
from optimize.feedback import discovery_feedback
from optimize.rewrite import propose_rewrite
from optimize.settings import ROLE_ORDER, Bounds, Stage2Settings
from optimize.tasks import minibatch, stable_seed
from workflows.harness import Harness
from workflows.identity import short_hash
from workflows.params import WorkflowParams
from workflows.roles import CODE_TOOL, CODE_TOOL_ROLES, ROLE_TOOLS, role_agent_settings

log = logging.getLogger(__name__)
STAGE = "search"


# -- storage and study ------------------------------------------------------------------------------------------
def retry_callback(max_retry: int) -> Any:
    """Optuna's re-queue-with-same-parameters callback (renamed in Optuna 4.9; both names work here)."""
    import optuna.storages as storages

    cls = getattr(storages, "RetryHeartbeatStaleTrialCallback", None) or storages.RetryFailedTrialCallback
    with warnings.catch_warnings():  # marked experimental; its behaviour is exactly what we want
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        return cls(max_retry=max_retry)


def make_storage(url: str, s: Stage2Settings) -> RDBStorage:
    """RDB storage; with ``heartbeat_interval`` set, stale trials of any worker are failed and retried."""
    kwargs: dict[str, Any] = {}
    if url.startswith("sqlite"):
        kwargs["engine_kwargs"] = {"connect_args": {"timeout": 60}}
    if s.heartbeat_interval:
        kwargs.update(
            heartbeat_interval=int(s.heartbeat_interval),
            grace_period=int(s.grace_period or 2 * s.heartbeat_interval),
        )
        names = inspect.signature(RDBStorage.__init__).parameters  # the callback's keyword was renamed in 4.9
        key = "heartbeat_stale_trial_callback" if "heartbeat_stale_trial_callback" in names else "failed_trial_callback"
        kwargs[key] = retry_callback(s.max_retry)
    with warnings.catch_warnings():  # heartbeats are marked experimental in Optuna
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        return RDBStorage(url, **kwargs)


def worker_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _split_worker(worker: str) -> tuple[str, int | None]:
    w_host, _, pid = str(worker).rpartition(":")
    return w_host, int(pid) if pid.isdigit() else None


def fail_dead_trials(study: optuna.Study, max_retry: int = 1) -> list[int]:
    """Fail RUNNING trials left by a dead process on this host, and re-queue their parameters.

    A trial names its worker (``host:pid``) first thing; one killed before that has no name, and counts as dead
    when every worker that ever joined the study ran on this host and none of them is alive. Workers on other
    hosts are left to Optuna's heartbeat (``stage2.heartbeat_interval``).
    """
    host, me = socket.gethostname(), os.getpid()
    joined = [_split_worker(k.split("/", 1)[1]) for k in study.user_attrs if k.startswith("worker/")]
    others_alive = any(h != host or (p not in (None, me) and _pid_alive(p)) for h, p in joined)
    failed = []
    for trial in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        worker = trial.user_attrs.get("worker")
        if worker is None:
            dead = not others_alive
        else:
            w_host, pid = _split_worker(worker)
            dead = w_host == host and pid is not None and pid != me and not _pid_alive(pid)
        if not dead:
            continue
        study._storage.set_trial_state_values(trial._trial_id, state=TrialState.FAIL)
        retry_callback(max_retry)(study, study._storage.get_trial(trial._trial_id))
        failed.append(trial.number)
    if failed:
        log.warning("stage 2: failed and re-queued trials %s left RUNNING by a dead process", failed)
    study.set_user_attr(f"worker/{worker_id()}", time.time())
    return failed


def open_study(ctx: OptimizeContext) -> optuna.Study:
    s = ctx.settings.stage2
    url = ctx.settings.storage or ctx.folder.storage_url()
    sampler = optuna.samplers.TPESampler(seed=ctx.seed, n_startup_trials=s.n_startup_trials)
    for attempt in range(5):  # workers starting together race to create the schema and the study: retry
        try:
            study = optuna.create_study(
                storage=make_storage(url, s), study_name=ctx.settings.study_name, direction="maximize",
                sampler=sampler, load_if_exists=True,
            )
            break
        except Exception as exc:  # noqa: BLE001 - sqlalchemy IntegrityError / OperationalError, DuplicatedStudyError
            if attempt == 4:
                raise
            log.info("stage 2: opening the study raced another worker (%s); retrying", type(exc).__name__)
            time.sleep(0.5 + attempt)
    others = live_workers(study)
    if others:  # workers sharing a study must not propose the same parameters: each gets its own sampler seed
        study.sampler = optuna.samplers.TPESampler(seed=stable_seed(ctx.seed, "tpe", others),
                                                   n_startup_trials=s.n_startup_trials)
    return study


def live_workers(study: optuna.Study) -> int:
    """Other workers of the study that may still run: live processes on this host, any on other hosts."""
    host, me = socket.gethostname(), os.getpid()
    joined = [_split_worker(k.split("/", 1)[1]) for k in study.user_attrs if k.startswith("worker/")]
    return sum(1 for h, p in joined if h != host or (p not in (None, me) and _pid_alive(p)))


# -- search space -----------------------------------------------------------------------------------------------
def sample_workflow(rng: random.Random, b: Bounds) -> WorkflowParams:
    return WorkflowParams(
        use_analyst=rng.choice(b.use_analyst),
        branches=rng.randint(*b.branches),
        repair_rounds=rng.randint(*b.repair_rounds),
        discussion_rounds=rng.randint(*b.discussion_rounds),
        use_synthesizer=rng.choice(b.use_synthesizer),
    )


def fixed_pool(s: Stage2Settings, seed: int) -> list[WorkflowParams]:
    """The ablation's presampled workflows: ``fixed_pool_size`` distinct draws from the bounds, seeded."""
    rng = random.Random(stable_seed(seed, "fixed_pool"))
    pool: list[WorkflowParams] = []
    for _ in range(100 * s.fixed_pool_size):
        w = sample_workflow(rng, s.bounds)
        if w not in pool:
            pool.append(w)
        if len(pool) >= s.fixed_pool_size:
            break
    return pool


def suggest(trial: Trial, s: Stage2Settings, pool_sizes: dict[str, int],
            workflows: list[WorkflowParams] | None) -> tuple[WorkflowParams, dict[str, int], dict[str, RoleAgentConfig]]:
    """Workflow, prompt indices and role agents of one trial (roles with a one-text pool get no prompt parameter;
    a bound with one value gets no parameter)."""
    if workflows is None:
        b = s.bounds
        w = WorkflowParams(
            use_analyst=trial.suggest_categorical("use_analyst", list(b.use_analyst)),
            branches=trial.suggest_int("branches", *b.branches),
            repair_rounds=trial.suggest_int("repair_rounds", *b.repair_rounds),
            discussion_rounds=trial.suggest_int("discussion_rounds", *b.discussion_rounds),
            use_synthesizer=trial.suggest_categorical("use_synthesizer", list(b.use_synthesizer)),
        )
    else:
        w = workflows[trial.suggest_categorical("workflow_index", list(range(len(workflows))))]
    idx = {
        role: (trial.suggest_categorical(f"prompt_{role}", list(range(n))) if n > 1 else 0)
        for role, n in pool_sizes.items()
    }
    return w, idx, suggest_role_agents(trial, s.bounds, w)


def suggest_role_agents(trial: Trial, b: Bounds, w: WorkflowParams) -> dict[str, RoleAgentConfig]:
    """Per role the workflow uses: its tools on or off (``tools_<role>``), and K answers (``role_samples``); the
    sandboxed code tool for the roles that read data (``code_tool``, one switch per trial)."""
    lo, hi = b.role_samples
    k = trial.suggest_int("role_samples", lo, hi) if hi > lo else lo
    options, code_options = sorted(set(b.role_tools)), sorted(set(b.code_tool))
    code = trial.suggest_categorical("code_tool", code_options) if len(code_options) > 1 else code_options[0]
    agents: dict[str, RoleAgentConfig] = {}
    for role in w.roles_used():
        tools = trial.suggest_categorical(f"tools_{role}", options) if len(options) > 1 else options[0]
        names = (ROLE_TOOLS[role] if tools else ()) + ((CODE_TOOL,) if code and role in CODE_TOOL_ROLES else ())
        if names or k > 1:
            agents[role] = RoleAgentConfig(tools=names, tool_steps=1, K=k)
    return agents


def spec_for(base: Harness, pool: dict[str, list[str]], w: WorkflowParams, idx: dict[str, int],
             agents: dict[str, RoleAgentConfig] | None = None) -> Harness:
    spec = base.with_workflow(w).with_prompts(**{role: pool[role][i] for role, i in idx.items()})
    return spec.with_changes(role_agents=dict(agents or {}))


# -- run --------------------------------------------------------------------------------------------------------
class _StopAfterFailures:
    """Stop the study when this worker's trials keep failing (a broken setup must not loop forever)."""

    def __init__(self, limit: int):
        self.limit, self.count = limit, 0

    def __call__(self, study: optuna.Study, trial: FrozenTrial) -> None:
        if trial.state == TrialState.FAIL:
            self.count += 1
            if self.count >= self.limit:
                log.error("stage 2: %d failed trials in this process, stopping", self.count)
                study.stop()


SLOT_POLL_SECONDS = 1.0
MAX_DUPLICATE_PRUNES = 8  # in a row, per process; then a repeated parameter set is evaluated (cache hit)


def claim_slot(study: optuna.Study, number: int, n_trials: int) -> bool:
    """May trial ``number`` run? Yes while COMPLETE trials plus earlier RUNNING ones leave a slot of ``n_trials``.

    Why: with several workers on one study each may start a trial while the last slot is still open, which ends
    with more than ``n_trials`` complete trials. Trial numbers are unique and ordered, so exactly one worker gets
    each slot; a later trial waits while earlier ones may still fail (and free their slot), and gives up once the
    slots are filled. Dead workers' trials are failed meanwhile (``fail_dead_trials``, Optuna's heartbeat).
    """
    while True:
        trials = study.get_trials(deepcopy=False)
        done = sum(t.state == TrialState.COMPLETE for t in trials)
        ahead = sum(t.state == TrialState.RUNNING and t.number < number for t in trials)
        if done + ahead < n_trials:
            return True
        if done >= n_trials:
            return False
        time.sleep(SLOT_POLL_SECONDS)
        fail_dead_trials(study)


def duplicate_of(study: optuna.Study, number: int, params: dict[str, Any]) -> int | None:
    """A COMPLETE or RUNNING trial of *another* worker with exactly these parameters, if any.

    Only other workers' trials count: one process's sampler repeating itself in a small space is a cache hit, as
    before; two processes evaluating the same point at once is the waste this prevents."""
    me = worker_id()
    for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.RUNNING)):
        if t.number != number and t.params == params and t.user_attrs.get("worker") not in (None, me):
            return t.number
    return None


def completed(study: optuna.Study) -> list[FrozenTrial]:
    return study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))


def choose(trials: list[FrozenTrial]) -> FrozenTrial | None:
    """Lexicographic pick: highest accuracy, then fewest LLM calls per task, then earliest."""
    usable = [t for t in trials if "acc" in t.user_attrs]
    if not usable:
        return None
    return min(usable, key=lambda t: (-t.user_attrs["acc"], t.user_attrs.get("llm_calls_per_task", 0), t.number))


def run_search(ctx: OptimizeContext, pool: dict[str, list[str]]) -> tuple[optuna.Study, list[WorkflowParams] | None]:
    """Create/resume the study and run trials until ``n_trials`` are COMPLETE or the solver budget is spent."""
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
    fail_dead_trials(study, s.max_retry)
    batch = minibatch(ctx.tasks.train, s.minibatch, ctx.seed, STAGE)
    pool_sizes = {role: len(pool[role]) for role in ROLE_ORDER if role in pool}
    repeats = {"n": 0}

    def objective(trial: Trial) -> float:
        trial.set_user_attr("worker", worker_id())
        if not claim_slot(trial.study, trial.number, s.n_trials):
            trial.study.stop()
            raise optuna.TrialPruned(f"{s.n_trials} trials are complete or running in other workers")
        w, idx, agents = suggest(trial, s, pool_sizes, workflows)
        spec = spec_for(ctx.base, pool, w, idx, agents)
        system_attrs = trial.study._storage.get_trial_system_attrs(trial._trial_id)
        queued = bool({"fixed_params", "failed_trial"} & set(system_attrs))  # a retry or enqueued point: on purpose
        twin = None if queued else duplicate_of(trial.study, trial.number, trial.params)
        if twin is not None and repeats["n"] < MAX_DUPLICATE_PRUNES:  # not a new trial: let the sampler draw again
            repeats["n"] += 1
            raise optuna.TrialPruned(f"same parameters as trial {twin}")
        repeats["n"] = 0  # (a small space may leave only repeats: then a repeat runs, from the evaluation cache)
        try:
            summary = ctx.evaluator.evaluate(spec, batch, ctx.seeds, stage=STAGE, label=f"trial {trial.number}",
                                             reserve=s.adapt_reserve)
        except StageBudgetSpent as exc:
            log.warning("stage 2: %s", exc)
            trial.study.stop()
            raise optuna.TrialPruned(str(exc)) from exc
        trial.set_user_attr("acc", summary.score)
        trial.set_user_attr("llm_calls_per_task", summary.llm_calls_per_task)
        trial.set_user_attr("seconds_per_task", summary.seconds_per_task)
        trial.set_user_attr("workflow", list(w.as_tuple()))
        trial.set_user_attr("prompt_index", idx)
        trial.set_user_attr("role_agents", {r: a.model_dump(mode="json") for r, a in agents.items()})
        trial.set_user_attr("digest", spec.identity_digest)
        trial.set_user_attr("new_evaluations", summary.n_new)
        trial.set_user_attr("cache_hits", summary.n_cached)
        log.info("stage 2 trial %d: w=%s prompts=%s role agents=%s acc=%.3f calls/task=%.1f (%d cached)",
                 trial.number, w.as_tuple(), idx, {r: (list(a.tools), a.K) for r, a in agents.items()},
                 summary.score, summary.llm_calls_per_task, summary.n_cached)
        return summary.score - s.llm_penalty * summary.llm_calls_per_task

    done = len(completed(study))
    left = ctx.evaluator.budget_left(STAGE)
    if done < s.n_trials and (left is None or left > s.adapt_reserve):
        log.info("stage 2: %d of %d trials complete, running the rest", done, s.n_trials)
        study.optimize(
            objective,
            n_trials=None,
            callbacks=[MaxTrialsCallback(s.n_trials, states=(TrialState.COMPLETE,)), _StopAfterFailures(s.n_trials)],
            catch=(Exception,),
            gc_after_trial=False,
        )
    return study, workflows


def adapt(ctx: OptimizeContext, spec: Harness, batch: list[Any]) -> tuple[Harness, list[dict[str, Any]]]:
    """Short stage-1-style rewrite of the chosen prompts inside the chosen workflow; keep only improvements."""
    s = ctx.settings.stage2
    journal = ctx.folder.journal(STAGE)
    roles = [r for r in ROLE_ORDER if r in spec.workflow.roles_used()]
    if s.adapt_roles is not None:
        roles = roles[: s.adapt_roles]
    current = ctx.evaluator.evaluate(spec, batch, ctx.seeds, stage=STAGE, label="adapt base")
    log_rows: list[dict[str, Any]] = []
    context = (f"The role runs inside the workflow w={spec.workflow.as_tuple()} (analyst, branches, repair rounds, "
               "discussion rounds, synthesizer).")
    for step in range(s.adapt_steps):
        for role in roles:
            feedback = discovery_feedback(current.records, ctx.task_index, ctx.settings.rewrite.feedback_chars)
            rw = journal.get_or_make(
                f"adapt/{spec.identity_digest}/{step}/{role}",
                lambda role=role, feedback=feedback: propose_rewrite(
                    ctx.rewriter, role, spec.prompts[role], feedback, mode="engineer",
                    settings=ctx.settings.rewrite.settings(), seed=ctx.seed + 7 * step, context=context,
                ).to_dict(),
            )
            row: dict[str, Any] = {"step": step, "role": role, "reason": rw.get("reason"), "kept": False}
            if rw.get("text"):
                child = spec.with_prompts(**{role: rw["text"]})
                summary = ctx.evaluator.evaluate(child, batch, ctx.seeds, stage=STAGE, label=f"adapt {role}")
                row.update(score=summary.score, base_score=current.score)
                if summary.score > current.score:
                    spec, current, row["kept"] = child, summary, True
            log_rows.append(row)
    return spec, log_rows


def trial_rows(study: optuna.Study) -> list[dict[str, Any]]:
    return [
        {"number": t.number, "state": t.state.name, "value": t.value, "params": t.params,
         **{k: t.user_attrs.get(k) for k in ("acc", "llm_calls_per_task", "workflow", "prompt_index", "digest",
                                              "new_evaluations", "cache_hits")}}
        for t in study.get_trials(deepcopy=False)
    ]


def run_stage2(ctx: OptimizeContext, pool: dict[str, list[str]]) -> dict[str, Any]:
    """Search, pick, adapt; returns the stage-2 result (the caller saves it)."""
    s = ctx.settings.stage2
    study, workflows = run_search(ctx, pool)
    best = choose(completed(study))
    batch = minibatch(ctx.tasks.train, s.minibatch, ctx.seed, STAGE)
    if best is None:
        log.warning("stage 2: no complete trial; keeping the stage-1 harness")
        spec = ctx.base.with_prompts(**{role: texts[0] for role, texts in pool.items()})
        chosen: dict[str, Any] = {}
    else:
        w = WorkflowParams.from_tuple(best.user_attrs["workflow"])
        agents = best.user_attrs.get("role_agents") or {}
        spec = spec_for(ctx.base, pool, w, {k: int(v) for k, v in best.user_attrs["prompt_index"].items()},
                        role_agent_settings(agents))
        chosen = {"trial": best.number, "acc": best.user_attrs["acc"],
                  "llm_calls_per_task": best.user_attrs.get("llm_calls_per_task"), "workflow": list(w.as_tuple()),
                  "prompt_index": best.user_attrs["prompt_index"], "role_agents": agents}
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
        "fixed_pool": [list(w.as_tuple()) for w in workflows] if workflows else None,
        "adaptation": adaptation,
        "minibatch": [t.name for t in batch],
        "minibatch_score": score,
        "trials": trial_rows(study),
        "harness": spec.to_dict(),
        "solver_runs": ctx.evaluator.stage_solver_runs(STAGE),
    }
