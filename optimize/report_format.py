"""How the report names stages and prints numbers: shared by its tables, plots and cost lines."""

from __future__ import annotations

import math
from typing import Any

from optimize.settings import STAGE_ORDER

STAGES = STAGE_ORDER
CURVE = (*STAGE_ORDER, "default")  # the rows of the held-out stage curve: the stages, then the reference
TITLES = {"baseline": "starting harness", "init": "stage 1: prompt init", "search": "stage 2: joint search",
          "refine": "stage 3: refinement", "default": "shipped default", "freeze": "freeze (report only)"}
START_TITLES = {"initial": "initial harness (HarnessSR's start)", "default": "shipped default (start)"}


def stage_title(stage: str, freeze: dict[str, Any]) -> str:
    if stage == "baseline":
        return START_TITLES.get(freeze.get("start", ""), TITLES["baseline"])
    return TITLES.get(stage, stage)


def fmt(x: Any, digits: int = 3) -> str:
    if x is None:
        return "–"
    try:
        x = float(x)
    except (TypeError, ValueError):
        return str(x)
    if not math.isfinite(x):
        return "inf"
    return f"{x:.{digits}f}"
