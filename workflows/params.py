"""Workflow parameters w = (u_ana, b, t_rep, t_dis, u_syn) and the cost each shape implies.

The optimizer searches this space, so the counts here are the contract the runner must meet exactly: a run that
is not stopped by its budget makes ``expected_llm_calls`` role calls and ``expected_solver_runs`` SR runs.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, Sequence

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, field_validator

from harness.core.context import FitSettings
from harness.runtime.role_agent import coerce_role_agents, role_calls
from harness.sr.settings import EngineSettings

MAX_LIBRARY_TERMS = 24  # per domain: each is a fit before the first SR run
MAX_TERM_CHARS = 200


class WorkflowParams(BaseModel):
    """Shape of one workflow: optional Analyst, b branches, repair and discussion rounds, optional Synthesizer."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    use_analyst: bool = False
    branches: int = Field(1, ge=1, le=5)
    repair_rounds: int = Field(0, ge=0, le=3)
    discussion_rounds: int = Field(0, ge=0, le=2)
    use_synthesizer: bool = False

    @classmethod
    def from_tuple(cls, w: Sequence[int | bool]) -> "WorkflowParams":
        """Build from the paper's tuple (u_ana, b, t_rep, t_dis, u_syn)."""
        if len(w) != 5:
            raise ValueError(f"workflow tuple needs 5 entries (u_ana, b, t_rep, t_dis, u_syn), got {len(w)}")
        u_ana, b, t_rep, t_dis, u_syn = w
        if u_ana not in (0, 1) or u_syn not in (0, 1):
            raise ValueError(f"u_ana and u_syn must be 0 or 1, got {u_ana!r} and {u_syn!r}")
        return cls(
            use_analyst=bool(u_ana),
            branches=int(b),
            repair_rounds=int(t_rep),
            discussion_rounds=int(t_dis),
            use_synthesizer=bool(u_syn),
        )

    def as_tuple(self) -> tuple[int, int, int, int, int]:
        return (
            int(self.use_analyst),
            self.branches,
            self.repair_rounds,
            self.discussion_rounds,
            int(self.use_synthesizer),
        )

    def roles_used(self) -> list[str]:
        """Roles this shape calls at least once (the prompts it actually depends on)."""
        roles = ["planner"]
        if self.use_analyst:
            roles.insert(0, "analyst")
        if self.repair_rounds:
            roles += ["diagnoser", "repairer"]
        if self.use_synthesizer:
            roles.append("synthesizer")
        return roles


# Stage-1 local workflows (one per role being optimised), see docs/CONTRACTS.md.
LOCAL_WORKFLOWS: dict[str, WorkflowParams] = {
    "planner": WorkflowParams.from_tuple((0, 1, 0, 0, 0)),
    "analyst": WorkflowParams.from_tuple((1, 1, 0, 0, 0)),
    "diagnoser": WorkflowParams.from_tuple((0, 1, 1, 0, 0)),
    "repairer": WorkflowParams.from_tuple((0, 1, 1, 0, 0)),
    "synthesizer": WorkflowParams.from_tuple((0, 2, 0, 0, 1)),
}


def role_activations(params: WorkflowParams) -> dict[str, int]:
    """How often a full run activates each role (discussion updates are Planner activations)."""
    b = params.branches
    return {
        "analyst": int(params.use_analyst),
        "planner": b + b * params.discussion_rounds,
        "diagnoser": b * params.repair_rounds,
        "repairer": b * params.repair_rounds,
        "synthesizer": int(params.use_synthesizer),
    }


def expected_llm_calls(params: WorkflowParams, role_agents: dict[str, Any] | None = None) -> int:
    """Model responses of a full run: analyst + planners + (diagnoser+repairer) rounds + discussion updates +
    synthesizer, one each for a plain role; a role agent with tools or K > 1 makes ``tool_steps + K`` per
    activation (``RoleAgentConfig.llm_calls``)."""
    return role_calls(coerce_role_agents(role_agents), role_activations(params))


def engine_seed(seed: int, branch: int, step: int, after_unguided: bool) -> int:
    """The engine seed of a branch's SR run: distinct per branch and step, and never the task's own seed (the
    unguided run's) when ``after_unguided``, so no run repeats another."""
    return (seed * 1000 + 50 * branch + step + int(after_unguided)) % (2**31)


def expected_solver_runs(params: WorkflowParams, sr_settings: "SRSettings | dict[str, Any] | None" = None) -> int:
    """SR runs of a full run, each of ``time_budget`` seconds: one after every plan (planner, repair, discussion,
    synthesizer), plus the unguided run when ``sr_settings.unguided_run`` is on. (A branch's residual run,
    ``SRSettings.residual_seconds``, takes its seconds out of the branch's first run, so it is not counted.)"""
    b = params.branches
    unguided = int(SRSettings.coerce(sr_settings).unguided_run) if sr_settings is not None else 0
    return b + b * params.repair_rounds + b * params.discussion_rounds + int(params.use_synthesizer) + unguided


class SRSettings(EngineSettings):
    """A harness's SR settings: the engine settings (``harness.sr.settings.EngineSettings``: the **floor** of every
    SR run and the limits of every plan) plus how the workflow uses the engine.

    ``carry_best_seed`` seeds every repair, discussion and synthesis run with the branch's ``carry_seeds`` best
    equations so far, so refinement starts from what works (a split search keeps what a longer one would). Hypotheses are fitted before the run; those whose validation NMSE is
    above ``hypothesis_max_nmse`` (1 = no better than predicting the mean) are dropped, with a note the next role
    reads. ``selection`` picks the final equation: "accuracy" = lowest validation NMSE (ties: simpler);
    "parsimony" = the simplest candidate within a factor ``1 + selection_tolerance`` of the lowest validation NMSE.
    "extrapolation" = among those near-best ones, the one whose constants refitted on the inner training rows
    best predict the most extreme rows (every candidate then also gets an "edge" score).
    ``valid_split``: "random" rows of train, or the "edge" rows (the most extreme inputs), so validation measures
    extrapolation, which is what out-of-domain data asks of an equation.
    ``combine_terms``: after the last SR run, small least-squares combinations of the additive terms of the pool's
    best equations and of every hypothesis (also those too poor alone) join the pool when they beat its best
    validation NMSE by a clear factor (``harness.core.combine``): the model's terms and the engine's meet.
    ``seed_engine``: fitted hypotheses (and carried equations) seed the engine's population; off, every SR run is
    exactly the unguided search and the model's equations enter only through the pool and the combination.
    ``unguided_run``: one more engine run, the floor plan with the task's seed and no seeds, beside the roles: its
    front joins the pool, so the pool always holds what the engine alone finds and guidance can only add to it
    (the guided runs then explore other seeds and the model's starting points).
    ``continue_unguided``: the first branch's first guided run goes on from the unguided run's population (the
    model's hypotheses injected) instead of a fresh one, so the solve holds one search as long as the engine
    alone's plus the guidance, not two half-length ones (needs the unguided run to finish first: one engine slot).
    ``evolve_rounds``: the evolution channel (``workflows.evolution``, LLM-SR's loop): while a guided SR run is
    going, the model (otherwise idle then) proposes ``evolve_proposals`` skeletons per round from the pool's best
    so far, our evaluator fits their constants and they join the pool; at most this many rounds, and only rounds
    that fit before the running SR runs end, so the solve takes no longer (0 = off).
    ``term_library``: per task domain (``Task.domain``, e.g. "chemistry"; "any" for every task) the additive terms
    known in that field, in the grammar over the task's input names, numbers as starting values (e.g.
    ``-0.1*A/(1 + 0.5*A)``). Before the first SR runs each term, and their sum, is fitted like a hypothesis: good
    fits join the pool (not the engine's seeds: as seeds they crowded out the model's), and every term reaches
    the combination (a field's textbook terms, which a small model does not recall; empty = off).
    ``residual_seconds``: of a branch's first SR run, this many seconds go to an engine run on what the best kept
    hypothesis (the model's, or the library's) leaves unexplained, y - f(x). Each of the ``residual_candidates``
    most accurate equations g on that run's front gives f + g, refitted in full, which joins the pool (source
    "residual") and the combination. Why: the model's known part of a law is often right while the engine misses
    the unusual terms beside it; on the residual those terms are the whole target, often over fewer inputs, and a
    run from scratch must find the known part first. The solve's SR seconds stay the same (at most half the
    branch's first run; 0 = off; no kept hypothesis = no residual run).

    ``sparse_regression``: after the last SR run, sparse regressions of the target on generic libraries
    (``harness.core.basis``): the inputs' monomials up to degree 3, ``sin``/``cos`` of each input at unit
    frequency and at the dominant frequencies of the target and of what the pool's best leaves (a periodogram),
    their products with the inputs, and in a second, wider library the classical forms of a signed state (``abs``,
    ``tanh``, couplings localized near rest); SINDy's thresholding and a forward stepwise path pick the terms,
    each sparse fit is refitted with every constant free, and the best joins the pool only when it beats the pool's
    best validation NMSE by the combination's factor (a third of one SR run's seconds, 1 to 20 s; only for a task
    with an input taking both signs, a state around its equilibrium; why on: docs/oscillators.md).
    ``stop_at_exact``: once the pool holds an exact fit (validation NMSE at the data's precision,
    ``harness.core.candidates.NMSE_FLOOR``), the run makes no further role call or SR run (status
    ``target_reached``); the optimizer's training runs use it to stop paying for tasks already solved.

    The defaults are the shipped harness's engine settings (``workflows.harness.shipped_harness``; why each:
    docs/decisions.md): a setting not given anywhere is what the default harness solves with.
    """

    carry_best_seed: bool = True
    carry_seeds: int = Field(3, ge=1, le=20)
    continue_search: bool = False  # later runs of a branch continue its Operon population (seeds injected)
    hypothesis_max_nmse: float = Field(1.0, gt=0)
    selection: Literal["accuracy", "parsimony", "extrapolation"] = "accuracy"
    selection_tolerance: float = Field(0.5, ge=0)
    valid_split: Literal["random", "edge"] = "random"
    combine_terms: bool = True
    seed_engine: bool = True
    unguided_run: bool = True
    continue_unguided: bool = False
    evolve_rounds: int = Field(0, ge=0, le=50)
    evolve_proposals: int = Field(3, ge=1, le=8)
    residual_seconds: float = Field(0.0, ge=0)
    residual_candidates: int = Field(8, ge=1, le=32)
    stop_at_exact: bool = False
    sparse_regression: bool = True
    term_library: dict[str, list[Annotated[str, StringConstraints(min_length=1, max_length=MAX_TERM_CHARS)]]] = \
        Field(default_factory=dict)

    @field_validator("term_library")
    @classmethod
    def _library_size(cls, value: dict[str, list[str]]) -> dict[str, list[str]]:
        for domain, terms in value.items():
            if len(terms) > MAX_LIBRARY_TERMS:
                raise ValueError(f"term_library[{domain!r}] has {len(terms)} terms; at most {MAX_LIBRARY_TERMS}")
        return value

    def library_terms(self, domain: str) -> list[str]:
        """The library's terms for a task of this domain (its own, then those for every task), each once."""
        return list(dict.fromkeys(self.term_library.get(domain, []) + self.term_library.get("any", [])))

    @classmethod
    def coerce(cls, value: "SRSettings | dict[str, Any] | None") -> "SRSettings":
        if isinstance(value, SRSettings):
            return value
        return cls.model_validate(dict(value or {}))

    def updated(self, **overrides: Any) -> "SRSettings":
        """A validated copy with some fields replaced (``model_copy`` would skip validation)."""
        return SRSettings.model_validate({**self.model_dump(), **overrides}) if overrides else self

    def fit_settings(self) -> FitSettings:
        """How this harness fits and scores candidates: its validation split, and the edge score its selection reads."""
        return FitSettings(valid_split=self.valid_split, edge_check=self.selection == "extrapolation")
