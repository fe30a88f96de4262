"""A harness, described once: role prompts + workflow + SR engine and its settings + LLM settings + role agents.

:class:`Harness` is what the optimizer varies and caches by (its :attr:`~Harness.identity_digest`), and what a
frozen file stores (``harness.app.artifact.FrozenHarness`` = a Harness + provenance + a seal). :func:`run_harness`
is the one way a harness runs on a task. :func:`shipped_harness` is *the* default - the harness
``harness=default`` solves with, the optimizer's seed, the Hydra base of the engine settings and what
``scripts/make_default_harness.py`` writes - so there is exactly one place that says what it is.
:func:`initial_harness` beside it is HarnessSR's starting point (generic prompts, none of the hand-made SR
choices, :data:`INITIAL_SR_CHOICES`), where the optimizer starts with ``optimize.seed=initial``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from harness.sr.settings import DEFAULT_BACKEND
from harness.core.vocabulary import BASIC_OPERATORS
from harness.runtime.role_agent import RoleAgentConfig
from harness.sr.backends import backend_names
from workflows.identity import harness_identity, identity_digest, llm_identity
from workflows.params import SRSettings, WorkflowParams
from workflows.roles import ROLE_NAMES, default_prompts, initial_prompts, role_agent_settings

# The shipped harness: one Planner call beside the engine's own unguided run, then one run seeded with the
# Planner's fitted hypotheses, w = (0, 1, 0, 0, 0); the engine settings are SRSettings' defaults (60 s per run).
# Why each choice: docs/decisions.md.
SHIPPED_WORKFLOW = WorkflowParams.from_tuple((0, 1, 0, 0, 0))
SHIPPED_BACKEND = DEFAULT_BACKEND
SHIPPED_LLM: dict[str, Any] = {"provider": "local", "model": "qwen2.5-coder-1.5b-instruct", "temperature": 0.7,
                               "max_tokens": 384}
# HarnessSR's initial harness (the optimizer's ``seed=initial``): the generic role prompts and the shipped workflow
# w = (0, 1, 0, 0, 0), without the SR choices the shipped default makes by hand. Each hand-made choice is one
# SRSettings field; its shipped value is that field's default, its initial value is here. The optimizer's stage 2
# searches every one of them (optimize.settings.Bounds), so it can find the shipped default's choices or others.
#   unguided_run: the engine's own run beside the roles (initial: one SR run, seeded by the Planner);
#   combine_terms: least-squares combinations of the pool's terms after the last run (initial: none);
#   operators: the engine's operator set (initial: the basic set, no ``pow``);
#   sparse_regression: sparse regressions on generic libraries after the last run (initial: none).
INITIAL_SR_CHOICES: dict[str, Any] = {"unguided_run": False, "combine_terms": False,
                                      "operators": list(BASIC_OPERATORS), "sparse_regression": False}


class Harness(BaseModel):
    """Everything that decides how a harness solves a task (what :func:`run_harness` needs, nothing more)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    prompts: dict[str, str]
    workflow: WorkflowParams
    backend: str = SHIPPED_BACKEND
    sr_settings: SRSettings = Field(default_factory=SRSettings)  # its JSON form is stored in full
    llm: dict[str, Any] = Field(default_factory=dict)
    role_agents: dict[str, RoleAgentConfig] = Field(default_factory=dict)  # none: every role one structured call

    @field_validator("workflow", mode="before")
    @classmethod
    def _workflow(cls, v: Any) -> Any:
        return WorkflowParams.from_tuple(v) if isinstance(v, (list, tuple)) else v

    @field_validator("backend")
    @classmethod
    def _backend(cls, v: str) -> str:
        if v not in backend_names():
            raise ValueError(f"unknown SR backend {v!r}; choose one of {', '.join(backend_names())}")
        return v

    @field_validator("sr_settings", mode="before")
    @classmethod
    def _sr_settings(cls, v: Any) -> SRSettings:
        """Typed here; dumped in full (defaults written out) into files and identities, so a later change of
        defaults cannot change a stored harness. A stored harness that predates an option (the key is missing)
        gets its neutral value (``SRSettings.NEUTRAL``), not today's default: it keeps its behaviour and digest."""
        if isinstance(v, Mapping):
            v = {**{k: n for k, n in SRSettings.NEUTRAL.items() if k not in v}, **v}
        return SRSettings.coerce(v)

    @field_validator("role_agents", mode="before")
    @classmethod
    def _role_agents(cls, v: Any) -> Any:
        return role_agent_settings(v)

    @model_validator(mode="after")
    def _prompts_cover_the_workflow(self) -> "Harness":
        unknown = sorted(set(self.prompts) - set(ROLE_NAMES))
        if unknown:
            raise ValueError(f"prompts for unknown role(s) {unknown}; roles are {', '.join(ROLE_NAMES)}")
        missing = [r for r in self.workflow.roles_used() if not (self.prompts.get(r) or "").strip()]
        if missing:
            raise ValueError(f"the workflow uses role(s) {missing} but has no prompt for them")
        return self

    # -- identity -------------------------------------------------------------------------------------------
    def identity(self) -> dict[str, Any]:
        sr = {k: v for k, v in self.sr_settings.model_dump(mode="json").items()
              if k not in SRSettings.NEUTRAL or v != SRSettings.NEUTRAL[k]}  # a later option at its neutral value
        return harness_identity(prompts=self.prompts, workflow=self.workflow, backend=self.backend, sr_settings=sr,
                                llm=self.llm, role_agents=self.role_agents)

    @property
    def identity_digest(self) -> str:
        """The optimizer's cache key: what changes a run's outcome (``workflows.identity``)."""
        return identity_digest(self.identity())

    @property
    def settings(self) -> SRSettings:
        return self.sr_settings

    def used_prompts(self) -> dict[str, str]:
        return {role: self.prompts.get(role, "") for role in self.workflow.roles_used()}

    # -- copies ---------------------------------------------------------------------------------------------
    def with_changes(self, **changes: Any) -> Any:
        """A validated copy with some fields replaced (``model_copy`` would skip validation)."""
        return type(self).model_validate({**self._fields(), **changes})

    def with_prompts(self, **prompts: str) -> Any:
        return self.with_changes(prompts={**self.prompts, **prompts})

    def with_workflow(self, workflow: WorkflowParams) -> Any:
        return self.with_changes(workflow=workflow)

    def with_sr_settings(self, **settings: Any) -> Any:
        return self.with_changes(sr_settings=self.sr_settings.updated(**settings))

    def description(self) -> "Harness":
        """Just the description (a frozen harness without its provenance and seal)."""
        return Harness.model_validate(self._fields())

    def _fields(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in Harness.model_fields}

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON, with the identity digest (run folders and reports store harnesses so)."""
        data = Harness.model_dump(self.description(), mode="json")
        data["digest"] = self.identity_digest
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "Harness":
        return Harness.model_validate({k: v for k, v in dict(data).items() if k in Harness.model_fields})


def shipped_harness(*, llm: Any = None, backend: str | None = None,
                    sr_settings: Mapping[str, Any] | None = None) -> Harness:
    """The default harness: our prompts (``workflows/prompts``), :data:`SHIPPED_WORKFLOW`, the engine's default
    settings (``SRSettings()``) and the embedded model. ``llm``/``backend``/``sr_settings`` swap the model, the
    engine or its settings (the optimizer's seed takes the model and engine config it trains with)."""
    return Harness(prompts=default_prompts(), workflow=SHIPPED_WORKFLOW, backend=backend or SHIPPED_BACKEND,
                   sr_settings=dict(sr_settings) if sr_settings is not None else SRSettings().model_dump(mode="json"),
                   llm=llm_identity(llm) if llm is not None else dict(SHIPPED_LLM))


def initial_harness(*, llm: Any = None, backend: str | None = None,
                    sr_settings: Mapping[str, Any] | None = None) -> Harness:
    """HarnessSR's starting point: :func:`shipped_harness` with the generic prompts (``workflows/prompts/initial``)
    and the hand-made choices at their initial values (:data:`INITIAL_SR_CHOICES`). ``sr_settings`` (e.g. an engine
    config's) replace the engine settings first; a hand-made field there at its shipped value is then reset, one
    the caller set to anything else (an operator set of their own) is kept."""
    base = shipped_harness(llm=llm, backend=backend, sr_settings=sr_settings)
    shipped = SRSettings().model_dump(mode="json")
    reset = {k: v for k, v in INITIAL_SR_CHOICES.items() if _same(getattr(base.sr_settings, k), shipped[k])}
    return base.with_changes(prompts=initial_prompts()).with_sr_settings(**reset)


def _same(a: Any, b: Any) -> bool:
    return set(a) == set(b) if isinstance(a, list) and isinstance(b, list) else a == b


def hand_made_choices(harness: Harness) -> dict[str, Any]:
    """The hand-made SR choices ``harness`` makes: each :data:`INITIAL_SR_CHOICES` field whose value differs from
    the initial one, with its value (``{}`` for the initial harness)."""
    settings = harness.settings
    return {name: getattr(settings, name) for name, initial in INITIAL_SR_CHOICES.items()
            if not _same(getattr(settings, name), initial)}


STARTING_HARNESSES: dict[str, Callable[..., Harness]] = {"initial": initial_harness, "default": shipped_harness}


def run_harness(harness: Harness, task: Any, llm: Any, *, seed: int = 0, sr_settings: Mapping[str, Any] | None = None,
                backend: str | None = None, budget: Any = None, run_dir: str | Path | None = None,
                max_workers: int | None = None, on_node: Callable[[Any], None] | None = None,
                warm_start: Sequence[str] = (), runner: Callable[..., Any] | None = None, control: Any = None,
                shared_runs: Any = None) -> Any:
    """Run ``harness`` on ``task`` with the client ``llm``: the workflow's ``WorkflowResult``.

    ``sr_settings`` overrides single engine settings for this run only (e.g. the optimizer's shorter training
    runs); ``runner`` replaces ``workflows.runner.run_workflow`` (tests); ``control`` is a
    ``harness.runtime.interaction.RunControl`` (the user's guidance, pause / stop); ``shared_runs`` a
    ``workflows.run_core.SharedRuns`` store for the runs no role influences (the optimizer's)."""
    if runner is None:
        from workflows.runner import run_workflow as runner
    settings = harness.sr_settings.updated(**dict(sr_settings or {}))
    return runner(task, harness.workflow, dict(harness.prompts), llm, backend=backend or harness.backend,
                  sr_settings=settings, role_agents=harness.role_agents, budget=budget, seed=seed, run_dir=run_dir,
                  max_workers=max_workers, on_node=on_node, warm_start=warm_start,
                  **({"control": control} if control is not None else {}),
                  **({"shared_runs": shared_runs} if shared_runs is not None else {}))
