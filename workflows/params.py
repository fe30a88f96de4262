"""Workflow parameters w = (u_ana, b, t_rep, t_dis, u_syn) and the cost each shape implies.

The optimizer searches this space, so the counts here are the contract the runner must meet exactly: a run that
is not stopped by its budget makes ``expected_llm_calls`` role calls and ``expected_solver_runs`` SR runs.
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal, Sequence

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
    SR run and the limits of every plan) plus how the workflow uses the engine. Each field says what it does
    (``Field(description=...)``; the table in docs/options.md is generated from them, ``scripts/render_docs.py``).

    The defaults are the shipped harness's engine settings (``workflows.harness.shipped_harness``): a setting not
    given anywhere is what the default harness solves with. Why each default, with the measurements that decided
    it: docs/decisions.md.
    """

    carry_best_seed: bool = Field(True, description="Seed every repair, discussion and synthesis run with the "
                                  "branch's `carry_seeds` best equations so far, so refinement starts from what works.")
    carry_seeds: int = Field(3, ge=1, le=20, description="How many of the branch's best equations are carried.")
    continue_search: bool = Field(False, description="Later runs of a branch continue its Operon population "
                                  "(seeds injected) instead of starting afresh.")
    hypothesis_max_nmse: float = Field(1.0, gt=0, description="A hypothesis whose validation NMSE is above this "
                                       "(1 = no better than the mean) is dropped, with a note the next role reads.")
    selection: Literal["accuracy", "parsimony", "extrapolation", "ladder"] = Field(
        "ladder", description="How the final equation is picked: lowest validation NMSE (ties: simpler); the "
        "simplest within a factor 1 + `selection_tolerance` of it; among those, the one whose constants refitted "
        "on the inner rows best predict the most extreme rows; or the precision ladder (most validation points "
        "within 1 %, then 0.1 %, then error, then simplicity: harness.core.candidates.ladder_key).")
    selection_tolerance: float = Field(0.5, ge=0, description="The near-best factor of `parsimony` and "
                                       "`extrapolation`.")
    valid_split: Literal["random", "edge"] = Field("random", description="Validation rows: random rows of train, "
                                                   "or its most extreme inputs (validation then measures "
                                                   "extrapolation).")
    combine_terms: bool = Field(True, description="After the last SR run, small least-squares combinations of the "
                                "additive terms of the pool's best equations and of every hypothesis join the pool "
                                "when they beat its best validation NMSE by a clear factor (harness.core.combine).")
    seed_engine: bool = Field(True, description="Fitted hypotheses and carried equations seed the engine's "
                              "population; off, they enter only through the pool and the combination.")
    unguided_run: bool = Field(True, description="One more engine run beside the roles, the floor plan with no "
                               "seeds: its front joins the pool, so guidance can only add to what the engine alone "
                               "finds.")
    continue_unguided: bool = Field(False, description="The first guided run goes on from the unguided run's "
                                    "population (the hypotheses injected) instead of a fresh one.")
    evolve_rounds: int = Field(0, ge=0, le=50, description="Rounds of the evolution channel (LLM-SR's loop, "
                               "workflows.evolution): while a guided run goes on, the model proposes skeletons from "
                               "the pool's best; only rounds that end before the running SR runs (0 = off).")
    evolve_proposals: int = Field(3, ge=1, le=8, description="Skeletons the model proposes per evolution round.")
    residual_seconds: float = Field(0.0, ge=0, description="Seconds of a branch's first SR run given to a run on "
                                    "what the best kept hypothesis leaves unexplained, y - f(x); each f + g found "
                                    "there is refitted in full and joins the pool (at most half the run; 0 = off).")
    residual_candidates: int = Field(8, ge=1, le=32, description="Equations g of the residual run's front turned "
                                     "into f + g.")
    stop_at_exact: bool = Field(False, description="Once the pool holds an exact fit (validation NMSE at the "
                                "data's precision) the run makes no further role call or SR run (status "
                                "target_reached); the optimizer's training runs use it.")
    sparse_regression: bool = Field(True, description="After the last SR run, sparse regressions (SINDy's "
                                    "thresholding and a forward path) on generic libraries of the inputs' monomials, "
                                    "sines at the target's frequencies and the forms of a signed state; the best "
                                    "joins the pool when it beats its best by the combination's factor (only for a "
                                    "task with an input of both signs; docs/oscillators.md).")
    precision_polish: bool = Field(True, description="After the last SR run, the pool's best few are refitted on "
                                   "relative error, pruned of terms that carry nothing and their constants snapped "
                                   "to simple values (harness.core.precision); the results join the pool.")
    time_guard: float = Field(1.0, ge=1.0, le=1000.0, description="Every seconds cap of a solve's steps after "
                              "the engine (constant fits 2 s, refits of the engine's front 1 s, the combination 8 s, "
                              "sparse regression, the precision polish) this many times longer. With `generations` it "
                              "bounds a solve by work: `sr.generations=60 sr.time_budget=600 sr.time_guard=10` ends "
                              "every SR run after its generations and keeps the seconds only as guards, so the same "
                              "data and seed give the same equations on the same machine, loaded or not (the "
                              "optimizer's training runs: `optimize.work_rate`, `optimize.time_guard`).")
    term_library: dict[str, list[Annotated[str, StringConstraints(min_length=1, max_length=MAX_TERM_CHARS)]]] = \
        Field(default_factory=dict, description="Per task domain (\"any\" for every task) the additive terms known "
              "in that field, fitted like hypotheses before the first SR run; good fits join the pool and every term "
              "reaches the combination (empty = off).")

    # Fields added after harnesses were frozen, with the value at which they change nothing (what a harness that
    # predates them does, whatever today's default): at that value they are left out of a harness's identity
    # (workflows.identity), and a stored harness without the key gets it (Harness._sr_settings), so a new option
    # never changes the identity, the caches or the behaviour of the harnesses that came before it.
    NEUTRAL: ClassVar[dict[str, Any]] = {"precision_polish": False, "time_guard": 1.0}

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
        """How this harness fits and scores candidates: its validation split, the edge score its selection reads,
        and its seconds caps (``time_guard`` times the usual ones)."""
        return FitSettings(valid_split=self.valid_split, edge_check=self.selection == "extrapolation",
                           max_seconds=FitSettings.max_seconds * self.time_guard, time_guard=self.time_guard)
