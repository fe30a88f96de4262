"""Tools a model may call: the interface (``BaseTool``, the ``TOOLS`` registry), the data-analysis tools and the
sandboxed code tool."""

from harness.core.exports import lazy_exports

__all__, __getattr__, __dir__ = lazy_exports(__name__, {
    "BaseTool": "harness.tools.base",
    "TOOLS": "harness.tools.base",
    "ToolCallResult": "harness.tools.base",
    "ToolRunAbort": "harness.tools.base",
})
