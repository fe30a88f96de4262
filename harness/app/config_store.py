"""Config defaults have one source: the pydantic models. Hydra sees them as ``base`` entries of the config
groups (its ConfigStore), and every YAML file under ``harness/conf`` only says what differs from them.

``llm/base`` = :class:`LLMConfig`, ``backend/base`` = ``name: operon`` + :class:`SRSettings`, ``executor/base`` =
:class:`~harness.app.executor.ExecutorConfig` (where solves run), and the sections of
the ``solve`` and ``agent`` commands (:class:`AgentConfig`, :class:`Budget`, :class:`FitSettings`). The optimizer
adds ``optimize/base`` (``OptimizeSettings``) the same way. Registering twice is harmless.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from hydra.core.config_store import ConfigStore
from pydantic import BaseModel

from harness.sr.settings import DEFAULT_BACKEND
from harness.app.executor import ExecutorConfig
from harness.core.context import Budget, FitSettings
from harness.llm.config import LLMConfig
from harness.runtime.agent_config import AgentConfig
from workflows.params import SRSettings


def defaults_of(model: type, **changes: Any) -> dict[str, Any]:
    """A pydantic model's or dataclass's defaults as plain YAML-able values (tuples as lists), with ``changes``."""
    instance = model()
    data = instance.model_dump(mode="json") if isinstance(instance, BaseModel) else dataclasses.asdict(instance)
    return {k: (list(v) if isinstance(v, tuple) else v) for k, v in {**data, **changes}.items()}


def register_bases() -> None:
    cs = ConfigStore.instance()
    # extra: null (not {}) so that a whole dict can be given on the command line: llm.extra={...}
    cs.store(group="llm", name="base", node=defaults_of(LLMConfig, extra=None))
    cs.store(group="backend", name="base", node={"name": DEFAULT_BACKEND, **defaults_of(SRSettings)})
    # runtime_env: null (not {}) so that a whole dict can be given: executor.runtime_env={working_dir: .}
    cs.store(group="executor", name="base", node=defaults_of(ExecutorConfig))
    cs.store(name="agent_base", node={"agent": defaults_of(AgentConfig),
                                      "fit": defaults_of(FitSettings), "budget": defaults_of(Budget)})
    cs.store(name="solve_base", node={"budget": defaults_of(Budget)})
