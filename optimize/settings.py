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
    """``n_validation``: fresh tasks of the training distribution (never seen by stages 1-3, never held-out) on
    which freeze's gate decides trained vs seed; 0 = the gate scores the training tasks themselves."""

    n_train: int = Field(4, ge=1)
    n_heldout: int = Field(2, ge=0)
    n_validation: int = Field(0, ge=0)


class Stage1Settings(_Model):
    """Candidates per role group = seed + (n_candidates - 1) rewrites; the seed text is scored on ``minibatch``
    tasks (the rewrite's feedback), each rewrite raced against the kept text on at most ``race_pairs`` pairs."""

    groups: list[list[str]] = Field(
        default_factory=lambda: [["planner"], ["analyst"], ["diagnoser", "repairer"], ["synthesizer"]]
    )
    n_candidates: int = Field(2, ge=1)
    max_proposals: int | None = None  # rewrite calls allowed per group (default 2 x rewrites wanted)
    minibatch: int | None = Field(2, ge=1)
    race_pairs: int = Field(8, ge=1)
    pool_size: int = Field(2, ge=1)
    max_solver_runs: int | None = None


class Bounds(_Model):
    branches: tuple[int, int] = (1, 5)
    repair_rounds: tuple[int, int] = (0, 3)
    discussion_rounds: tuple[int, int] = (0, 2)
    use_analyst: list[bool] = Field(default_factory=lambda: [False, True])
    use_synthesizer: list[bool] = Field(default_factory=lambda: [False, True])
    # Role agents: per used role, whether it gets its tools (workflows.roles.ROLE_TOOLS, one tool step before
    # it answers), and K answers per activation (shared by the roles), ranked by how their hypotheses fit.
    role_tools: list[bool] = Field(default_factory=lambda: [False, True])
    role_samples: tuple[int, int] = (1, 2)
    # The sandboxed run_python tool for the Analyst and Diagnoser (workflows.roles.CODE_TOOL_ROLES), on or off for
    # the whole trial; off by default (it needs Landlock + seccomp, or HARNESS_SR_SANDBOX=process).
    code_tool: list[bool] = Field(default_factory=lambda: [False])
    # The evolution channel (SRSettings.evolve_rounds, workflows/evolution.py): rounds to search over; None keeps
    # the seed harness's setting (no parameter).
    evolve_rounds: list[int] | None = None
    # The residual run (SRSettings.residual_seconds, workflows/sr_steps.py): seconds of a branch's first run to
    # search over; None keeps the seed harness's setting (no parameter).
    residual_seconds: list[float] | None = None
    # The seeded run going on from the unguided run's population (SRSettings.continue_unguided): values to search
    # over; None keeps the seed harness's setting (no parameter).
    continue_unguided: list[bool] | None = None
    # The hand-made SR choices of the shipped default (workflows.harness.INITIAL_SR_CHOICES), searched by default so
    # the optimizer can find them from HarnessSR's initial harness: the unguided run beside the roles, the term
    # combination and the sparse regression after the last run, and the engine's operator set (names of
    # harness.core.vocabulary.OPERATOR_SETS).
    sparse_regression: list[bool] | None = Field(default_factory=lambda: [False, True])
    unguided_run: list[bool] | None = Field(default_factory=lambda: [False, True])
    combine_terms: list[bool] | None = Field(default_factory=lambda: [False, True])
    operators: list[str] | None = Field(default_factory=lambda: ["basic", "basic+pow"])

    @field_validator("operators")
    @classmethod
    def _operator_sets(cls, value: list[str] | None) -> list[str] | None:
        from harness.core.vocabulary import OPERATOR_SETS

        unknown = [v for v in value or [] if v not in OPERATOR_SETS]
        if unknown:
            raise ValueError(f"unknown operator sets {unknown}; known: {', '.join(OPERATOR_SETS)}")
        return value


class Stage2Settings(_Model):
    space: Literal["full", "fixed_pool"] = "full"
    n_trials: int = Field(4, ge=1)
    minibatch: int | None = Field(2, ge=1)
    bounds: Bounds = Field(default_factory=Bounds)
    fixed_pool_size: int = Field(8, ge=1)
    llm_penalty: float = Field(1e-4, ge=0.0)
    n_startup_trials: int = Field(4, ge=1)
    adapt_steps: int = Field(1, ge=0)
    adapt_roles: int | None = Field(1, ge=0)
    adapt_reserve: int = Field(0, ge=0)
    # Every trial is first screened against the stage's start (stage 1's harness) on ``minibatch`` training tasks
    # at the first seed, pair by pair, and dropped once it falls behind; then the best ``confirm_top`` trials that
    # gained there, in order, race the start on the other pairs (training tasks x OptimizeSettings.race_seeds,
    # tasks on which every trial tied last) for at most ``race_pairs`` pairs each, at alpha / confirm_top: the
    # first accepted is the stage's choice, else the start stays (optimize.race; docs/optimizer.md).
    confirm_top: int = Field(2, ge=0)
    race_pairs: int = Field(16, ge=1)
    # Workers sharing the study (optimize.shared_study): each running trial records a heartbeat every
    # heartbeat_interval seconds; one silent for grace_period (None: twice the interval) is failed and retried
    # max_retry times with its parameters.
    heartbeat_interval: int = Field(10, ge=1)
    grace_period: int | None = Field(None, ge=1)
    max_retry: int = Field(1, ge=0)
    max_solver_runs: int | None = None


class Stage3Settings(_Model):
    feedback: Literal["sr_diagnostics", "traces"] = "sr_diagnostics"
    steps: int = Field(2, ge=0)
    minibatch: int | None = Field(2, ge=1)
    holdout: int = Field(2, ge=1)
    minibatch_gate: bool = True
    # paired: the child must win a race against its parent on the held-out slice's tasks x race seeds, at most
    # race_pairs pairs (OptimizeSettings.accept); mean / pareto (GEPA: also kept when it is best on some task):
    # the earlier rules on the slice at the run's seeds, as ablations
    accept: Literal["paired", "mean", "pareto"] = "paired"
    race_pairs: int = Field(8, ge=1)
    drop_terms: bool = True
    max_solver_runs: int | None = None


class FreezeSettings(_Model):
    """``evaluate``: the stage harnesses the report scores; ``train``: on the training tasks at the training scale;
    ``heldout``: on the held-out tasks at ``heldout_time_scale`` of their solve seconds (the stage curve, with the
    shipped default beside it; ``false`` scores only the starting harness, the frozen pick and the shipped
    default there). The gate: the stages' pick and the shipped default are scored on the validation tasks
    (``tasks.n_validation``; the training tasks when there are none) at ``time_scale`` of their solve seconds;
    the pick is frozen only when it wins a race against the shipped default on those tasks x the race seeds (at
    most ``race_pairs`` pairs; ``OptimizeSettings.accept``), else the shipped default is: a user never gets a
    worse solver than the default, and the report says whether the default stayed because the pick fell behind
    or because the evidence was too thin."""

    evaluate: list[str] = Field(default_factory=lambda: list(STAGE_ORDER))
    race_pairs: int = Field(8, ge=1)
    train: bool = True
    heldout: bool = True
    time_scale: float = Field(1.0, gt=0.0, le=1.0)
    heldout_time_scale: float = Field(1.0, gt=0.0, le=1.0)

    @field_validator("evaluate")
    @classmethod
    def _known(cls, value: list[str]) -> list[str]:
        bad = set(value) - set(STAGE_ORDER)
        if bad:
            raise ValueError(f"unknown stages {sorted(bad)}")
        return value


class OptimizeSettings(_Model):
    preset: str = "quick"
    # The starting harness: "initial" = HarnessSR's (generic role prompts, w = (0, 1, 0, 0, 0), none of the shipped
    # default's hand-made SR choices: workflows.harness.initial_harness); "default" = the shipped default
    # (workflows.harness.shipped_harness), to train on from there. (The top-level `seed` seeds the random draws.)
    seed: Literal["initial", "default"] = "initial"
    storage: str | None = None
    study_name: str = "harness-sr-stage2"
    seeds: list[int] = Field(default_factory=lambda: [0])
    metric: str = "acc_0.01"
    score_split: str = "test_id"  # or several joined by "+": "test_id+test_ood" scores their mean
    force: bool = False
    # Training shortcut: every SR run of stages 1-3 gets this share of the harness's solve seconds (the frozen
    # harness keeps its own; freeze.time_scale decides the gate's). Stated in the report.
    train_time_scale: float = Field(1.0, gt=0.0, le=1.0)
    task_workers: int = Field(1, ge=1)
    branch_workers: int | None = 1
    keep_run_dirs: bool = True
    llm_cache: bool = True  # llm_cache.db in the run folder: a resumed or repeated stage pays for no call twice
    # The unguided run of a (task, seed) at the same engine settings is made once and read by every harness after
    # (common random numbers; paid once): evals.db's shared_runs table. Local executor only.
    share_runs: bool = True
    # Training runs stop paying (no further role call or SR run) once an exact fit is in the pool
    # (SRSettings.stop_at_exact); the report counts the runs and calls saved.
    stop_at_exact: bool = True
    # Every acceptance (stage-1 rewrites, stage 2's choice, stage-3 children, freeze's gate) is a race on common
    # (task, seed) pairs, decided by a signed-rank test (optimize.race; false accepts at most alpha per decision, and
    # stage 2 splits alpha between the trials it races). race_seeds: engine seeds per task the races draw pairs
    # from (the run's seeds, then the next integers); race_batch: pairs run per step of a race.
    accept: RaceRule = Field(default_factory=lambda: RaceRule(min_net_wins=2, alpha=0.125, margin=0.01))
    race_seeds: int = Field(2, ge=1)
    race_batch: int = Field(2, ge=1)
    # GEPA's reflection_lm: the model that writes stage-1 rewrites and stage-3 reflections (any `llm` config, e.g.
    # {provider: openai, base_url: ..., model: ...}); None = the harness's own model.
    reflection_llm: dict[str, Any] | None = None
    run_budget: dict[str, Any] = Field(default_factory=dict)
    tasks: TaskSettings = Field(default_factory=TaskSettings)
    rewrite: RewriteSettings = Field(default_factory=RewriteSettings)
    stage1: Stage1Settings = Field(default_factory=Stage1Settings)
    stage2: Stage2Settings = Field(default_factory=Stage2Settings)
    stage3: Stage3Settings = Field(default_factory=Stage3Settings)
    freeze: FreezeSettings = Field(default_factory=FreezeSettings)

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


def load_preset(name: str) -> OptimizeSettings:
    """A preset (``harness/conf/optimize/<name>.yaml``) as ``python -m optimize optimize=<name>`` validates it: its
    keys over the model's defaults (the presets name only what they change)."""
    from pathlib import Path

    from omegaconf import OmegaConf

    path = Path(__file__).resolve().parents[1] / "harness" / "conf" / "optimize" / f"{name}.yaml"
    data = OmegaConf.to_container(OmegaConf.load(path), resolve=True)
    data.pop("defaults", None)
    return OptimizeSettings.model_validate(data)
