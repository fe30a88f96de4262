"""Typed view of the ``optimize`` config group (``conf/optimize/*.yaml``): budgets and switches per stage.

Validated once at start so a typo in an override fails before any model call, with pydantic's message.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from optimize.race import RaceRule
from optimize.rewrite import RewriteSettings

# The optimizer's stages in order: the seed harness, then stage 1 (prompt init), 2 (joint search), 3 (refinement).
STAGE_ORDER: tuple[str, ...] = ("baseline", "init", "search", "refine")
# The order in which the optimizer works through the roles (stage 2 adaptation, stage 3 reflection).
ROLE_ORDER: tuple[str, ...] = ("planner", "analyst", "diagnoser", "repairer", "synthesizer")


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class TaskSettings(_Model):
    """``n_validation``: tasks no stage scores (the benchmark's validation laws where it has them, else more draws of
    its training distribution; never held-out) on which freeze's gate decides between the trained harness and the
    shipped default; 0 = the gate scores the training tasks themselves."""

    n_train: int = Field(4, ge=1,
        description="Training tasks (the benchmark's training laws) the stages score on.")
    n_heldout: int = Field(2, ge=0,
        description="Held-out tasks (the benchmark's held-out laws) of the report's stage curve; they never decide "
                    "anything.")
    n_validation: int = Field(0, ge=0,
        description="Validation tasks (the benchmark's validation laws, or more draws of its training laws; never "
                    "seen by stages 1-3) the gate decides on; 0 = the training tasks.")


class Stage1Settings(_Model):
    """Candidates per role group = seed + (n_candidates - 1) rewrites; the seed text is scored on ``minibatch``
    tasks (the rewrite's feedback), each rewrite raced against the kept text on at most ``race_pairs`` pairs."""

    groups: list[list[str]] = Field(
        default_factory=lambda: [["planner"], ["analyst"], ["diagnoser", "repairer"], ["synthesizer"]],
        description="Role groups whose prompts are rewritten together, each inside its own small workflow.",
    )
    n_candidates: int = Field(2, ge=1, description="Texts per group: the start's text and n_candidates - 1 rewrites.")
    max_proposals: int | None = Field(None,
        description="Rewrite calls allowed per group (unset: twice the rewrites wanted).")
    minibatch: int | None = Field(2, ge=1,
        description="Training tasks the start's text is scored on, for the rewrite's feedback.")
    race_pairs: int = Field(8, ge=1, description="Pairs a rewrite races the kept text on, at most.")
    pool_size: int = Field(2, ge=1, description="Texts per role kept in the prompt pool stage 2 chooses from.")
    max_solver_runs: int | None = Field(None, description="The stage's budget in solver executions (unset: none).")


class Bounds(_Model):
    branches: tuple[int, int] = Field((1, 5), description="Planner -> SR branches, (low, high).")
    repair_rounds: tuple[int, int] = Field((0, 3), description="Diagnoser -> Repairer rounds per branch, (low, high).")
    discussion_rounds: tuple[int, int] = Field((0, 2), description="Cross-branch discussion rounds, (low, high).")
    use_analyst: list[bool] = Field(default_factory=lambda: [False, True],
        description="Whether the Analyst runs first: values to search.")
    use_synthesizer: list[bool] = Field(default_factory=lambda: [False, True],
        description="Whether the Synthesizer runs last: values to search.")
    role_tools: list[bool] = Field(default_factory=lambda: [False, True],
        description="Whether a used role gets its tools (one tool step before it answers): values to search.")
    role_samples: tuple[int, int] = Field((1, 2),
        description="Answers per role activation, ranked by how their hypotheses fit, (low, high).")
    code_tool: list[bool] = Field(default_factory=lambda: [False],
        description="The sandboxed run_python tool for the Analyst and Diagnoser (needs Landlock + seccomp): values "
                    "to search.")
    evolve_rounds: list[int] | None = Field(None,
        description="sr.evolve_rounds values to search (unset: the start's setting, no parameter).")
    residual_seconds: list[float] | None = Field(None,
        description="sr.residual_seconds values to search (unset: the start's setting).")
    continue_unguided: list[bool] | None = Field(None,
        description="sr.continue_unguided values to search (unset: the start's setting).")
    sparse_regression: list[bool] | None = Field(default_factory=lambda: [False, True],
        description="sr.sparse_regression values to search (a hand-made choice of the shipped default).")
    unguided_run: list[bool] | None = Field(default_factory=lambda: [False, True],
        description="sr.unguided_run values to search (a hand-made choice of the shipped default).")
    combine_terms: list[bool] | None = Field(default_factory=lambda: [False, True],
        description="sr.combine_terms values to search (a hand-made choice of the shipped default).")
    operators: list[str] | None = Field(default_factory=lambda: ["basic", "basic+pow"],
        description="Operator sets to search, by name (harness.core.vocabulary.OPERATOR_SETS).")

    @field_validator("operators")
    @classmethod
    def _operator_sets(cls, value: list[str] | None) -> list[str] | None:
        from harness.core.vocabulary import OPERATOR_SETS

        unknown = [v for v in value or [] if v not in OPERATOR_SETS]
        if unknown:
            raise ValueError(f"unknown operator sets {unknown}; known: {', '.join(OPERATOR_SETS)}")
        return value


class Stage2Settings(_Model):
    space: Literal["full", "fixed_pool"] = Field("full",
        description="full: the workflow and each role's prompt index; fixed_pool: an index into presampled workflows "
                    "(the ablation).")
    n_trials: int = Field(4, ge=1, description="Trials in all (a resumed or shared study counts the complete ones).")
    minibatch: int | None = Field(2, ge=1,
        description="Training tasks each trial is screened on against the start, at the first seed, dropped once "
                    "behind.")
    bounds: Bounds = Field(default_factory=Bounds, description="What a trial may choose.")
    fixed_pool_size: int = Field(8, ge=1, description="Workflows presampled for space=fixed_pool.")
    llm_penalty: float = Field(1e-4, ge=0.0, description="Objective penalty per LLM call per task.")
    n_startup_trials: int = Field(4, ge=1, description="Random trials before TPE models the results.")
    adapt_steps: int = Field(1, ge=0,
        description="Prompt rewrites tried inside the chosen workflow afterwards, each kept only when it wins a "
                    "race.")
    adapt_roles: int | None = Field(1, ge=0,
        description="Roles whose prompts the adaptation rewrites (unset: all used).")
    adapt_reserve: int = Field(0, ge=0, description="Solver executions kept back from the search for the adaptation.")
    confirm_top: int = Field(2, ge=0,
        description="Screened trials that gained most, raced in turn against the start, each at alpha / the number "
                    "raced (at most confirm_top).")
    race_pairs: int = Field(16, ge=1,
        description="Pairs a trial races the start on, at most (tasks where every trial tied come last).")
    heartbeat_interval: int = Field(10, ge=1,
        description="Seconds between a running trial's heartbeats (workers sharing the study).")
    grace_period: int | None = Field(None, ge=1,
        description="Seconds without a heartbeat before a trial is failed and retried (unset: twice the interval).")
    max_retry: int = Field(1, ge=0, description="Retries of a dead worker's trial, with its parameters.")
    max_solver_runs: int | None = Field(None, description="The stage's budget in solver executions (unset: none).")


class Stage3Settings(_Model):
    feedback: Literal["sr_diagnostics", "traces"] = Field("sr_diagnostics",
        description="What the reflection model reads: SR diagnostics (residual patterns, structures, outcomes) or raw "
                    "traces (the ablation).")
    steps: int = Field(2, ge=0, description="Reflective rewrites, one role at a time.")
    minibatch: int | None = Field(2, ge=1, description="Training tasks a child is first scored on against its parent.")
    holdout: int = Field(2, ge=1,
        description="Tasks of the held-out slice of the training tasks the child races its parent on.")
    minibatch_gate: bool = Field(True,
        description="A child that does worse than its parent on the minibatch is not raced.")
    accept: Literal["paired", "mean", "pareto"] = Field("paired",
        description="paired: the child must win a race against its parent; mean / pareto (GEPA's rules, kept for "
                    "ablations).")
    race_pairs: int = Field(8, ge=1, description="Pairs a child races its parent on, at most.")
    drop_terms: bool = Field(True, description="The reflection may also remove instructions, not only add them.")
    max_solver_runs: int | None = Field(None, description="The stage's budget in solver executions (unset: none).")


class FreezeSettings(_Model):
    """``evaluate``: the stage harnesses the report scores; ``train``: on the training tasks at the training scale;
    ``heldout``: on the held-out tasks at ``heldout_time_scale`` of their solve seconds (the stage curve, with the
    shipped default beside it; ``false`` scores only the starting harness, the stages' pick and the shipped
    default there). The gate: the stages' pick and the shipped default are scored on the validation tasks
    (``tasks.n_validation``; the training tasks when there are none) at ``time_scale`` of their solve seconds;
    the pick is frozen only when it wins a race against the shipped default on those tasks x the race seeds (at
    most ``race_pairs`` pairs; ``OptimizeSettings.accept``), else the shipped default is: a user never gets a
    worse solver than the default, and the report says whether the default stayed because the pick fell behind
    or because the evidence was too thin."""

    evaluate: list[str] = Field(default_factory=lambda: list(STAGE_ORDER),
        description="The stage harnesses the report scores.")
    race_pairs: int = Field(8, ge=1,
        description="Pairs the gate races the trained harness against the shipped default on, at most.")
    train: bool = Field(True,
        description="Also score every stage's harness on the training tasks at the training scale.")
    heldout: bool = Field(True,
        description="The stage curve on the held-out tasks (false: only the start, the pick and the shipped "
                    "default).")
    time_scale: float = Field(1.0, gt=0.0, le=1.0, description="The gate's share of the solve seconds.")
    heldout_work: bool = Field(False, description="Bound the held-out table's SR runs by work even at the full "
                               "solve seconds (`optimize.work_rate` x its seconds generations, the seconds a guard): "
                               "the table is then repeatable and may run beside other work.")
    heldout_time_scale: float = Field(1.0, gt=0.0, le=1.0,
        description="The held-out curve's share of the solve seconds.")

    @field_validator("evaluate")
    @classmethod
    def _known(cls, value: list[str]) -> list[str]:
        bad = set(value) - set(STAGE_ORDER)
        if bad:
            raise ValueError(f"unknown stages {sorted(bad)}")
        return value


class OptimizeSettings(_Model):
    preset: str = Field("quick", description="The preset's name (quick, small, paper), recorded in the provenance.")
    seed: Literal["initial", "default"] = Field("initial",
        description="The starting harness: initial (HarnessSR's: generic prompts, none of the hand-made SR choices) "
                    "or default (the shipped one).")
    storage: str | None = Field(None,
        description="Optuna storage URL for stage 2 (unset: sqlite in the run folder; any RDB URL for many workers).")
    study_name: str = Field("harness-sr-stage2", description="Stage 2's study name in the storage.")
    seeds: list[int] = Field(default_factory=lambda: [0],
        description="The run's engine seeds (the held-out curve's; races add the next integers).")
    metric: str = Field("acc_0.01", description="The score of one run: acc_0.01 or log_nmse (-log10 NMSE).")
    score_split: str = Field("test_id",
        description="The split(s) scored, joined by + for their mean (test_id+test_ood).")
    force: bool = Field(False, description="Rerun stages whose results the run folder already holds.")
    train_time_scale: float = Field(1.0, gt=0.0, le=1.0,
        description="Stages 1-3 run SR at this share of the solve seconds (the frozen harness keeps its own).")
    work_rate: float | None = Field(None, gt=0.0,
        description="Engine generations per second of a shortened SR run (training, gate, a shortened held-out "
                    "table): such a run ends after `work_rate` x its seconds generations, so one (harness, task, "
                    "seed) has one outcome, and its seconds become a guard of `time_guard` times them (a run that "
                    "reaches the guard is marked). Unset: every run ends by seconds, as a user's solve does. "
                    "`quick` sets 2.3, the rate its outcome matrix was recorded at, so its replays are its own; "
                    "scripts/calibrate_work.py measures a machine's rate and the spread of two evaluations.")
    time_guard: float = Field(3.0, ge=1.0,
        description="A work-bound run's seconds cap, as a multiple of the seconds its work is calibrated to; every "
                    "seconds cap after the engine (fits, combination, sparse regression, polish) is this many times "
                    "its usual length too (`sr.time_guard`).")
    task_workers: int = Field(1, ge=1, description="Tasks evaluated at once.")
    branch_workers: int | None = Field(1, description="SR runs of one solve at once (unset: by cores).")
    keep_run_dirs: bool = Field(True, description="Keep every evaluation's run folder (nodes.jsonl, result.json).")
    llm_cache: bool = Field(True,
        description="Cache model answers in llm_cache.db: a resumed or repeated stage pays for no call twice.")
    share_runs: bool = Field(True,
        description="Make the unguided run of a (task, seed) once and let every harness read it (local executor).")
    stop_at_exact: bool = Field(True,
        description="Training runs stop paying once an exact fit is in the pool (sr.stop_at_exact).")
    accept: RaceRule = Field(default_factory=lambda: RaceRule(min_net_wins=2, alpha=0.125, margin=0.01),
        description="The race rule of every acceptance (optimize.race).")
    race_seeds: int = Field(2, ge=1, description="Engine seeds per task the races draw pairs from.")
    race_batch: int = Field(2, ge=1, description="Pairs run per step of a race.")
    reflection_llm: dict[str, Any] | None = Field(None,
        description="The model that writes rewrites and reflections (any llm config; unset: the harness's own).")
    run_budget: dict[str, Any] = Field(default_factory=dict,
        description="Budget of each evaluation's solve (Budget fields).")
    tasks: TaskSettings = Field(default_factory=TaskSettings,
        description="How many training, validation and held-out tasks.")
    rewrite: RewriteSettings = Field(default_factory=RewriteSettings, description="Bounds on rewrite calls and texts.")
    stage1: Stage1Settings = Field(default_factory=Stage1Settings, description="Stage 1, prompt initialisation.")
    stage2: Stage2Settings = Field(default_factory=Stage2Settings, description="Stage 2, the joint search.")
    stage3: Stage3Settings = Field(default_factory=Stage3Settings, description="Stage 3, reflective refinement.")
    freeze: FreezeSettings = Field(default_factory=FreezeSettings,
        description="The gate and the report's held-out curve.")

    @field_validator("score_split")
    @classmethod
    def _known_splits(cls, value: str) -> str:
        bad = [s for s in value.split("+") if s not in ("train", "valid", "test_id", "test_ood")]
        if bad:
            raise ValueError(f"unknown score split(s) {bad}; use train, valid, test_id, test_ood, joined by '+'")
        return value

    def stage_limits(self) -> dict[str, int | None]:
        return {"init": self.stage1.max_solver_runs, "search": self.stage2.max_solver_runs,
                "refine": self.stage3.max_solver_runs}

    def race_lengths(self) -> dict[str, tuple[int, float]]:
        """Per acceptance, (the pairs its race can run, its alpha): the race's ``race_pairs`` or what its tasks x
        ``race_seeds`` hold, whichever is fewer."""
        t, seeds, s2 = self.tasks, self.race_seeds, self.stage2
        gate_tasks = t.n_validation or t.n_train
        return {
            "stage 1 (a rewrite against the kept text)": (min(self.stage1.race_pairs, t.n_train * seeds), self.accept.alpha),
            "stage 2 (a trial against the start)": (min(s2.race_pairs, t.n_train * seeds - (s2.minibatch or 0)),
                                                    self.accept.alpha / max(1, s2.confirm_top)),
            "stage 3 (a child against its parent)": (min(self.stage3.race_pairs, self.stage3.holdout * seeds),
                                                     self.accept.alpha),
            "the gate (the trained harness against the shipped default)": (
                min(self.freeze.race_pairs, gate_tasks * seeds), self.accept.alpha),
        }

    @model_validator(mode="after")
    def _every_race_can_accept(self) -> "OptimizeSettings":
        """No acceptance the settings make impossible: each race has at least the pairs the rule needs to accept
        (the wins without a loss of ``RaceRule.clean_wins_needed``)."""
        for name, (pairs, alpha) in self.race_lengths().items():
            if pairs < 1 or self.accept.clean_wins_needed(pairs, alpha) is None:
                raise ValueError(
                    f"{name} can never accept: its race has {max(pairs, 0)} pairs and the rule "
                    f"({self.accept.describe()}) needs more; raise its race_pairs, its tasks or race_seeds")
        return self


def load_preset(name: str, overrides: list[str] | tuple[str, ...] = ()) -> OptimizeSettings:
    """A preset (``harness/conf/optimize/<name>.yaml``) as ``python -m optimize optimize=<name>`` validates it: its
    keys over the model's defaults (the presets name only what they change), then ``overrides`` (dotted
    ``key=value`` items, as ``optimize.<key>=<value>`` on the command line) over the preset."""
    from pathlib import Path

    from omegaconf import OmegaConf

    path = Path(__file__).resolve().parents[1] / "harness" / "conf" / "optimize" / f"{name}.yaml"
    conf = OmegaConf.load(path)
    conf.pop("defaults", None)
    conf = OmegaConf.merge(conf, OmegaConf.from_dotlist(list(overrides)))
    data = OmegaConf.to_container(conf, resolve=True)
    return OptimizeSettings.model_validate(data)
