"""HarnessSR workflows: roles (prompts/<role>.md + fixed output schemas) composed by parameters
w = (u_ana, b, t_rep, t_dis, u_syn) around SR engine runs. Entry point: ``workflows.runner.run_workflow``."""

from typing import Any

_LAZY = {
    "WorkflowParams": "workflows.params",
    "SRSettings": "workflows.params",
    "expected_llm_calls": "workflows.params",
    "expected_solver_runs": "workflows.params",
    "ROLE_NAMES": "workflows.roles",
    "default_prompts": "workflows.roles",
    "run_workflow": "workflows.runner",
    "WorkflowResult": "workflows.runner",
}
__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'workflows' has no attribute {name!r}")
