"""One point of the search space: role prompts + workflow shape + SR settings, and its content digest.

The digest is the cache key of every evaluation, so it covers exactly what changes a run's outcome: the prompts
of the roles the workflow actually calls (an unused role's text cannot change a run, so trials that differ only
there share cached results), the workflow, the SR backend and its settings, and the LLM identity.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field, replace
from typing import Any

from workflows.params import WorkflowParams


def canonical_json(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, ensure_ascii=False, default=str, separators=(",", ":"))


def short_hash(obj: Any, n: int = 16) -> str:
    return hashlib.sha256(canonical_json(obj).encode("utf-8")).hexdigest()[:n]


def roles_used(workflow: WorkflowParams) -> list[str]:
    """Roles a workflow calls at least once (discussion updates are Planner calls)."""
    return list(workflow.roles_used())


@dataclass(frozen=True)
class HarnessSpec:
    """What the optimizer varies. ``llm`` holds only the settings that change outputs (never keys)."""

    prompts: dict[str, str]
    workflow: WorkflowParams
    backend: str = "operon"
    sr_settings: dict[str, Any] = field(default_factory=dict)
    llm: dict[str, Any] = field(default_factory=dict)

    def used_prompts(self) -> dict[str, str]:
        return {role: self.prompts.get(role, "") for role in roles_used(self.workflow)}

    def digest(self) -> str:
        return short_hash(
            {
                "prompts": self.used_prompts(),
                "workflow": list(self.workflow.as_tuple()),
                "backend": self.backend,
                "sr_settings": self.sr_settings,
                "llm": self.llm,
            },
            n=20,
        )

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
        )
