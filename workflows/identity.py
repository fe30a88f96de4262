"""What makes two harnesses the same harness: one definition for the optimizer's cache keys and frozen files
(``workflows.harness.Harness.identity_digest``).

The identity covers exactly what changes a run's outcome: the prompts of the roles the workflow calls (an unused
role's text cannot change a run), the workflow, the role agents of those roles, the SR backend and its settings,
and the LLM settings that change outputs (never keys or URLs). A frozen file's ``digest`` is a different thing:
the seal over the whole file, provenance included.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, Mapping

from pydantic import BaseModel

from workflows.params import WorkflowParams

LLM_IDENTITY_KEYS = ("provider", "model", "model_path", "temperature", "max_tokens")


def canonical_json(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, ensure_ascii=False, default=str, separators=(",", ":"))


def short_hash(obj: Any, n: int = 16) -> str:
    return hashlib.sha256(canonical_json(obj).encode("utf-8")).hexdigest()[:n]


def llm_identity(config: Any) -> dict[str, Any]:
    """The LLM settings that change outputs, from an ``LLMConfig`` or a mapping: provider, model, model path,
    temperature, max tokens, and a named answering function (``extra.fn``, e.g. a test double). Never keys."""
    data = config.model_dump() if isinstance(config, BaseModel) else dict(config or {})
    out = {k: data[k] for k in LLM_IDENTITY_KEYS if data.get(k) is not None}
    fn = (data.get("extra") or {}).get("fn")
    if isinstance(fn, str):
        out["extra"] = {"fn": fn}
    return out


def harness_identity(*, prompts: Mapping[str, str], workflow: WorkflowParams, backend: str,
                     sr_settings: Mapping[str, Any], llm: Mapping[str, Any],
                     role_agents: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The identity as plain JSON (no ``role_agents`` key when the used roles are all plain calls)."""
    used = workflow.roles_used()
    identity: dict[str, Any] = {
        "prompts": {role: prompts.get(role, "") for role in used},
        "workflow": list(workflow.as_tuple()),
        "backend": backend,
        "sr_settings": dict(sr_settings),
        "llm": dict(llm),
    }
    agents = {role: (cfg.model_dump(mode="json") if isinstance(cfg, BaseModel) else dict(cfg))
              for role, cfg in (role_agents or {}).items() if role in used}
    if agents:
        identity["role_agents"] = agents
    return identity


def identity_digest(identity: Mapping[str, Any]) -> str:
    return short_hash(dict(identity), n=20)
