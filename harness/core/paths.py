"""Where derived files live between runs: the assembled embedded model, LSR-Transform's solved formulas.

One folder for the project: ``$HARNESS_SR_CACHE`` when set, else the platform's user cache folder (platformdirs;
``~/.cache/harness-sr`` on Linux). A leaf module, so every layer (LLM clients, task sources) can use it.
"""

from __future__ import annotations

import os
from pathlib import Path

CACHE_ENV = "HARNESS_SR_CACHE"


def cache_dir() -> Path:
    """``$HARNESS_SR_CACHE`` or the platform's user cache folder."""
    env = os.environ.get(CACHE_ENV)
    if env:
        return Path(env).expanduser()
    import platformdirs

    return Path(platformdirs.user_cache_dir("harness-sr"))
