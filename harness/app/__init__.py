"""The application shell: frozen harness load/solve, the scikit-learn regressor, exports, the viewer and the CLIs.

The only part of ``harness`` that may import ``workflows``.
"""

from harness.core.exports import lazy_exports

__all__, __getattr__, __dir__ = lazy_exports(__name__, {
    "FrozenHarness": "harness.app.artifact",
    "ArtifactError": "harness.app.artifact",
    "HarnessRegressor": "harness.app.regressor",
    "Solution": "harness.app.solution",
    "select_index": "harness.app.export",
    "latex_table": "harness.app.export",
})
