"""HarnessSR workflows: roles (prompts/<role>.md + fixed output schemas) composed by parameters
w = (u_ana, b, t_rep, t_dis, u_syn) around SR engine runs. Entry point: ``workflows.runner.run_workflow``."""

from harness.core.exports import lazy_exports

__all__, __getattr__, __dir__ = lazy_exports(__name__, {
    "WorkflowParams": "workflows.params",
    "SRSettings": "workflows.params",
    "expected_llm_calls": "workflows.params",
    "expected_solver_runs": "workflows.params",
    "ROLE_NAMES": "workflows.roles",
    "default_prompts": "workflows.roles",
    "Harness": "workflows.harness",
    "shipped_harness": "workflows.harness",
    "initial_harness": "workflows.harness",
    "run_harness": "workflows.harness",
    "run_workflow": "workflows.runner",
    "WorkflowResult": "workflows.runner",
})
