"""The runtime: search state and the agents (the R-C-L-K SRAgent and the role agent built on it)."""

from harness.core.exports import lazy_exports

__all__, __getattr__, __dir__ = lazy_exports(__name__, {
    "SearchRunState": "harness.runtime.state",
    "Node": "harness.runtime.nodes",
    "NodeKind": "harness.runtime.nodes",
    "NodeType": "harness.runtime.nodes",
    "SearchCoordinate": "harness.runtime.nodes",
    "SRAgent": "harness.runtime.agent",
    "AgentConfig": "harness.runtime.agent",
    "RoleAgent": "harness.runtime.role_agent",
    "RoleAgentConfig": "harness.runtime.role_agent",
    "RunControl": "harness.runtime.interaction",
})
