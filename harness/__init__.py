"""HarnessSR: agentic symbolic regression with a harness trained once, frozen and reused.

``from harness import HarnessRegressor, FrozenHarness`` — both load lazily, so ``import harness`` stays light.
"""

from typing import Any

__all__ = ["FrozenHarness", "HarnessRegressor", "Solution", "ArtifactError"]

_LAZY = {
    "FrozenHarness": "harness.app.artifact",
    "Solution": "harness.app.solution",
    "ArtifactError": "harness.app.artifact",
    "HarnessRegressor": "harness.app.regressor",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'harness' has no attribute {name!r}")
