"""Stage 2's search space: what one Optuna trial chooses (the workflow w, the prompt each role uses, role agents,
the SR channels and the shipped default's hand-made SR choices) and the harness it makes."""

from __future__ import annotations

import random
from typing import Any

from optuna.trial import Trial

from harness.core.vocabulary import OPERATOR_SETS
from harness.runtime.role_agent import RoleAgentConfig
from optimize.settings import Bounds, Stage2Settings
from optimize.tasks import stable_seed
from workflows.harness import Harness
from workflows.params import WorkflowParams
from workflows.roles import CODE_TOOL, CODE_TOOL_ROLES, ROLE_TOOLS

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


# SRSettings fields stage 2 searches where Bounds lists values: the SR channels, and the shipped default's
# hand-made choices (workflows.harness.INITIAL_SR_CHOICES; ``operators`` by the name of an OPERATOR_SETS entry)
SR_CHANNELS = ("evolve_rounds", "residual_seconds", "continue_unguided", "unguided_run", "combine_terms", "operators",
               "sparse_regression")


def suggest_sr_channels(trial: Trial, b: Bounds) -> dict[str, Any]:
    """The SR settings of this trial: the channels (``evolve_rounds``: LLM-SR's proposal rounds,
    ``residual_seconds``: the residual run, ``continue_unguided``: the seeded run continuing the unguided run's
    population) and the hand-made choices (``unguided_run``, ``combine_terms``, ``operators``: a set's name,
    ``sparse_regression``); a
    field without values keeps the seed's setting (no parameter)."""
    out: dict[str, Any] = {}
    for name in SR_CHANNELS:
        values = getattr(b, name)
        if values:
            options = sorted(set(values), key=str)
            out[name] = trial.suggest_categorical(name, options) if len(options) > 1 else options[0]
    return out


def sr_settings_of(channels: dict[str, Any]) -> dict[str, Any]:
    """The channels as SRSettings fields (an operator set's name -> its operators)."""
    out = dict(channels)
    if isinstance(out.get("operators"), str):
        out["operators"] = list(OPERATOR_SETS[out["operators"]])
    return out


def spec_for(base: Harness, pool: dict[str, list[str]], w: WorkflowParams, idx: dict[str, int],
             agents: dict[str, RoleAgentConfig] | None = None, sr_channels: dict[str, Any] | None = None) -> Harness:
    spec = base.with_workflow(w).with_prompts(**{role: pool[role][i] for role, i in idx.items()})
    if sr_channels:
        spec = spec.with_sr_settings(**sr_settings_of(sr_channels))
    return spec.with_changes(role_agents=dict(agents or {}))
