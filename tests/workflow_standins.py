"""What the workflow tests share: tiny engine settings, the task they run on and the scripted role model."""

from __future__ import annotations

import benchmarks
from tests.doubles import ScriptedLLM, scripted_role_output

TINY = {"time_budget": 1, "population_size": 20, "generations": 3, "max_length": 15,
        "unguided_run": False}  # the engine-only run is tested on its own


def workflow_task():
    return benchmarks.load_suite("synthetic", names=["chem_react_synth_00"], n_train=60, n_test=30, n_ood=30)[0]


def scripted() -> ScriptedLLM:
    return ScriptedLLM(fn=scripted_role_output)
