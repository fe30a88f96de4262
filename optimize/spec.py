"""One point of the search space: role prompts + workflow shape + SR settings, and its content digest.

The digest is the cache key of every evaluation, so it covers exactly what changes a run's outcome: the prompts
of the roles the workflow actually calls (an unused role's text cannot change a run, so trials that differ only
there share cached results), the workflow, the role agents, the SR backend and its settings, and the LLM
identity: ``workflows.identity``, the same definition a frozen harness's ``identity_digest`` uses.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from workflows.identity import harness_identity, identity_digest
from workflows.params import WorkflowParams
from workflows.roles import role_agent_settings

# The order in which the optimizer works through the roles (stage 2 adaptation, stage 3 reflection).
ROLE_ORDER = ("planner", "analyst", "diagnoser", "repairer", "synthesizer")


@dataclass(frozen=True)
class HarnessSpec:
    """What the optimizer varies. ``llm`` holds only the settings that change outputs (never keys)."""

    prompts: dict[str, str]
    workflow: WorkflowParams
    backend: str = "operon"
    sr_settings: dict[str, Any] = field(default_factory=dict)
    llm: dict[str, Any] = field(default_factory=dict)
    role_agents: dict[str, Any] = field(default_factory=dict)  # {role: RoleAgentConfig}; none = plain calls

    def __post_init__(self) -> None:
        object.__setattr__(self, "role_agents", role_agent_settings(self.role_agents))

    def used_prompts(self) -> dict[str, str]:
        return {role: self.prompts.get(role, "") for role in self.workflow.roles_used()}

    def identity(self) -> dict[str, Any]:
        return harness_identity(prompts=self.prompts, workflow=self.workflow, backend=self.backend,
                                sr_settings=self.sr_settings, llm=self.llm, role_agents=self.role_agents)

    def digest(self) -> str:
        return identity_digest(self.identity())

    def with_prompts(self, **prompts: str) -> "HarnessSpec":
        return replace(self, prompts={**self.prompts, **prompts})

    def with_workflow(self, workflow: WorkflowParams) -> "HarnessSpec":
        return replace(self, workflow=workflow)

    def to_dict(self) -> dict[str, Any]:
        return {
            "prompts": dict(self.prompts),
            "workflow": self.workflow.model_dump(),
            "backend": self.backend,
            "sr_settings": dict(self.sr_settings),
            "llm": dict(self.llm),
            "role_agents": {r: c.model_dump(mode="json") for r, c in self.role_agents.items()},
            "digest": self.digest(),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "HarnessSpec":
        return cls(
            prompts=dict(data["prompts"]),
            workflow=WorkflowParams.model_validate(data["workflow"]),
            backend=data.get("backend", "operon"),
            sr_settings=dict(data.get("sr_settings") or {}),
            llm=dict(data.get("llm") or {}),
            role_agents=dict(data.get("role_agents") or {}),
        )
