"""The engine settings of a solve, typed from the harness down to the engine; the floor, defined and enforced here.

:class:`EngineSettings` are a harness's engine settings (``workflows.params.SRSettings`` adds the workflow's own
on top). They define the **floor**, the plan an unguided run searches (:meth:`EngineSettings.floor`), and the
limits a plan is clipped to (:meth:`EngineSettings.limits`). :meth:`EngineSettings.search_settings` builds, once
per run, the :class:`SearchSettings` that every ``run_sr_search`` call of that run is held to; the run carries
them as ``AgentContext.search``. :meth:`SearchSettings.admit` is the one step from a model's raw answer to a
runnable :class:`SearchPlan`: repaired (``validate_plan``), then widened to the floor (:func:`widen_to_floor`).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, field_validator

from harness.core.vocabulary import COSTLY_OPERATORS, DEFAULT_OPERATORS, OPERATORS
from harness.sr.plan import PlanLimits, SearchPlan
from harness.sr.plan_validation import validate_plan

__all__ = ["DEFAULT_BACKEND", "MAX_EXTRA_OPERATORS", "EngineSettings", "SearchSettings", "search_settings",
           "widen_to_floor"]

DEFAULT_BACKEND = "operon"  # the SR engine a run uses unless told (`backend=`): the one spelling of the default
MAX_EXTRA_OPERATORS = 0  # operators a plan may add beyond the floor's: none (docs/decisions.md)


class EngineSettings(BaseModel):
    """What every SR run of a harness searches at least (the floor) and at most (the limits).

    A plan adds operators (at most ``max_extra_operators``), hypotheses (seeds, at most ``max_seeds``) and derived
    features (at most ``max_features``), and never searches fewer operators, a shorter length, a smaller population
    or less time than these. ``extras`` are engine keyword options passed through to every run (``SearchPlan.extras``).
    """

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    time_budget: float = Field(60.0, gt=0, validation_alias=AliasChoices("time_budget", "max_time", "time"),
                               description="Seconds of one SR run (every run's floor; a plan cannot ask for less).")
    population_size: int = Field(500, ge=2, validation_alias=AliasChoices("population_size", "population"),
                                 description="The engine's population: every run's floor.")
    generations: int = Field(10_000, ge=1, validation_alias=AliasChoices("generations", "niterations"),
                             description="Generations at most per run (the seconds usually end a run first).")
    max_length: int = Field(30, ge=5, le=60, description="Longest expression (tree nodes) the engine searches.")
    max_depth: int = Field(10, ge=2, le=16, description="Deepest expression tree the engine searches.")
    loss: Literal["mse", "relative"] = Field("mse", description="The engine's fitness: squared error, or relative "
                                             "squared error for targets that span decades.")
    max_seeds: int = Field(8, ge=0, le=20, description="Hypotheses a plan may seed into the engine's population.")
    operators: list[str] = Field(default_factory=lambda: list(DEFAULT_OPERATORS),
                                 description="The engine's operators: every run searches at least these "
                                             "(harness.core.vocabulary).")
    max_extra_operators: int = Field(MAX_EXTRA_OPERATORS, ge=0, le=10,
                                     description="Operators a plan may add beyond `operators`.")
    max_features: int = Field(0, ge=0, le=10, description="Derived input features a plan may define.")
    extras: dict[str, Any] = Field(default_factory=dict,
                                   description="Engine keyword options passed through to every run.")

    @field_validator("operators", mode="before")
    @classmethod
    def _known_operators(cls, value: Any) -> Any:
        if isinstance(value, str):
            value = [v.strip() for v in value.split(",") if v.strip()]
        unknown = [v for v in value or [] if v not in OPERATORS]
        if unknown:
            raise ValueError(f"unknown operators {unknown}; known: {', '.join(OPERATORS)}")
        return value

    def floor(self) -> SearchPlan:
        """The plan of an unguided run: what every guided run must at least search."""
        return SearchPlan(operators=list(self.operators), max_length=self.max_length, max_depth=self.max_depth,
                          time_budget=self.time_budget, generations=self.generations,
                          population_size=self.population_size, loss=self.loss, extras=dict(self.extras))

    def limits(self) -> PlanLimits:
        """What a plan may ask for at most: never more than these settings."""
        return PlanLimits(max_length=self.max_length, max_depth=self.max_depth, max_time=self.time_budget,
                          min_time=min(1.0, self.time_budget), max_population=max(self.population_size, 2),
                          min_population=min(20, self.population_size), max_generations=self.generations,
                          max_seeds=self.max_seeds, max_features=self.max_features)

    def search_settings(self, backend: str, *, floor: bool = True) -> "SearchSettings":
        """The settings every SR run of one solve is held to; the one builder (workflow runner, ``agent`` command).

        ``floor=False`` holds plans to the limits only: the free agent of ``python -m harness agent`` chooses its
        own plans, as it always has."""
        return SearchSettings(backend=backend, limits=self.limits(), floor=self.floor() if floor else None,
                              max_extra_operators=self.max_extra_operators)


class SearchSettings(BaseModel):
    """What every ``run_sr_search`` call of a run is held to: the engine, the limits a plan is clipped to, the
    floor it is widened to (none: limits only) and how many operators beyond the floor's a plan may add."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    backend: str = DEFAULT_BACKEND
    limits: PlanLimits = Field(default_factory=PlanLimits)
    floor: SearchPlan | None = None
    max_extra_operators: int = Field(MAX_EXTRA_OPERATORS, ge=0, le=10)

    @field_validator("backend")
    @classmethod
    def _backend_name(cls, value: str) -> str:
        name = value.strip().lower()
        if not name:
            raise ValueError("backend must name an SR engine (operon, pysr, llm, hybrid or auto)")
        return name

    def admit(self, raw: dict[str, Any] | SearchPlan | str | None,
              variables: list[str] | tuple[str, ...]) -> tuple[SearchPlan, list[str]]:
        """A runnable plan out of anything a model or code wrote: repaired and clipped to the limits
        (``validate_plan``), then widened to the floor; with the list of what was changed, in plain words."""
        floor = self.floor
        plan, changes = validate_plan(raw, variables, self.limits,
                                      default_operators=floor.operators if floor is not None else None)
        if floor is not None:
            plan = widen_to_floor(plan, floor, max_extra_operators=self.max_extra_operators, changes=changes)
        return plan, changes


def search_settings(context: Any) -> SearchSettings:
    """The run's search settings (``AgentContext.search``); a context without them gets the defaults (limits only)."""
    settings = getattr(context, "search", None)
    if settings is None:
        return SearchSettings()
    if not isinstance(settings, SearchSettings):
        raise TypeError(f"AgentContext.search must be a SearchSettings, got {type(settings).__name__}")
    return settings


def widen_to_floor(plan: SearchPlan, floor: SearchPlan, *, max_extra_operators: int = MAX_EXTRA_OPERATORS,
                   changes: list[str] | None = None) -> SearchPlan:
    """The plan, widened so it searches at least the space of ``floor`` (an unguided run's plan).

    Why: guidance must only widen the engine's search. A plan may add operators (at most ``max_extra_operators``
    beyond the floor's, since every extra one slows the search, and none of the ``COSTLY_OPERATORS``, which slow
    every generation several times over), seeds, features and notes; it never has fewer operators, a shorter
    length or depth, a smaller population or less time or fewer generations than the floor.
    """
    notes = changes if changes is not None else []
    extra = [o for o in plan.operators if o not in floor.operators]
    costly = [o for o in extra if o in COSTLY_OPERATORS]
    if costly:
        _note(notes, f"did not add {', '.join(costly)}: each slows the engine 2-5x per generation, which shrinks a "
                     "timed search (put it in the harness's own operators to search with it)")
        extra = [o for o in extra if o not in COSTLY_OPERATORS]
    if len(extra) > max_extra_operators:
        _note(notes, f"kept the first {max_extra_operators} extra operators; dropped {', '.join(extra[max_extra_operators:])}")
        extra = extra[:max_extra_operators]
    dropped = [o for o in floor.operators if o not in plan.operators]
    if dropped:
        _note(notes, f"kept the harness's operators {', '.join(dropped)} (a plan can add operators, not remove them)")
    # the harness's engine options and loss are not the plan's to change
    update: dict[str, Any] = {"operators": list(floor.operators) + extra, "loss": floor.loss,
                              "extras": {**plan.extras, **floor.extras}}
    for name in ("max_length", "max_depth", "population_size", "time_budget", "generations"):
        mine, base = getattr(plan, name), getattr(floor, name)
        if mine < base:
            _note(notes, f"raised {name} {mine:g} -> {base:g} (the harness's floor)")
            update[name] = base
    return plan.model_copy(update=update)


def _note(notes: list[str], text: str) -> None:
    if text not in notes:
        notes.append(text)
