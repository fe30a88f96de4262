"""The optimizer's test stand-ins: tasks, a runner that scores a harness by what its prompts and workflow say
(1 when the Planner instruction holds the magic phrase, ...), a scripted rewriting model, and the context builder
the stage and freeze tests share."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np

from harness.core.candidates import Candidate
from harness.core.task import Task
from optimize.context import build_context
from optimize.settings import OptimizeSettings
from optimize.tasks import TaskSets
from tests.doubles import SCRIPTED, ScriptedLLM
from workflows.params import expected_llm_calls, expected_solver_runs

PHRASE = "periodic hypothesis"
ROLES = ("analyst", "planner", "diagnoser", "repairer", "synthesizer")
SEED_PROMPTS = {r: f"You are the {r.title()} of a symbolic regression team. Do the {r} job well." for r in ROLES}


def make_tasks(n: int, prefix: str = "t") -> list[Task]:
    rng = np.random.default_rng(0)
    out = []
    for i in range(n):
        X = rng.uniform(-1, 1, size=(30, 2))
        y = X[:, 0] + (i + 1) * X[:, 1]
        out.append(Task.from_arrays(X, y, name=f"{prefix}{i}", test_id=(X[:10], y[:10])))
    return out


class FakeRunner:
    """Scores by rule and counts calls, like ``workflows.runner.run_workflow`` would report them."""

    def __init__(self, rule):
        self.rule = rule
        self.calls = 0

    def __call__(self, task, params, prompts, llm, **kw):
        self.calls += 1
        self.seen_agents = [*getattr(self, "seen_agents", []), kw.get("role_agents") or {}]
        extra = [kw.get("role_agents") or {}, kw.get("sr_settings")][: self.rule.__code__.co_argcount - 3]
        score = float(self.rule(params, prompts, task, *extra))
        cand = Candidate(expression="c0*x0", params=[1.0], equation="1.0*x0", complexity=3,
                         metrics={"valid": {"nmse": 1.0 - score + 1e-6},
                                  "test_id": {"acc_0.01": score, "nmse": 1.0 - score + 1e-6}})
        return SimpleNamespace(best=cand, candidates=[cand], front=[cand], llm_calls=expected_llm_calls(params),
                               solver_runs=expected_solver_runs(params, kw.get("sr_settings")), seconds=0.0,
                               status="ok", errors=[],
                               run_dir=kw.get("run_dir"))


def engineer(messages, **request):
    """Scripted prompt engineer / reflection model: appends the magic phrase to the current instruction."""
    text = messages[-1]["content"]
    current = text.split("<<<", 1)[1].split(">>>", 1)[0].strip()
    new = f"{current} Always seed the plan with the {PHRASE}."
    return json.dumps({"instruction": new, "rationale": "the runs missed periodic structure"})


# The mechanics tests below start from the shipped default, accept any win (one pair decides) and search no SR
# choice unless they say so; the tests of the initial seed, the paired rule and the SR-choice search set their own.
MECHANICS = {"seed": "default", "accept": {"min_net_wins": 1, "alpha": 1.0, "margin": 0.0}, "race_seeds": 1,
             "stage1": {"race_pairs": 2}, "stage3": {"race_pairs": 2}, "freeze": {"race_pairs": 2},
             "stage2": {"confirm_top": 1, "race_pairs": 4,
                        "bounds": {"unguided_run": None, "combine_terms": None, "operators": None,
                                   "sparse_regression": None}}}


def merged(base: dict, over: dict) -> dict:
    out = dict(base)
    for key, value in over.items():
        out[key] = merged(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def context(tmp_path: Path, rule, overrides: dict | None = None, n_train: int = 4, llm=None, n_validation: int = 0,
            mechanics: bool = True):
    settings = OptimizeSettings.model_validate(merged(MECHANICS, overrides or {}) if mechanics else (overrides or {}))
    runner = FakeRunner(rule)
    tasks = TaskSets(make_tasks(n_train), make_tasks(2, "h"), validation=make_tasks(n_validation, "v"))
    ctx = build_context(tmp_path, settings, llm_config={"provider": SCRIPTED}, backend_config={"name": "operon"},
                        benchmark_config={}, llm=llm or ScriptedLLM(fn=engineer),
                        tasks=tasks, runner=runner, prompts=SEED_PROMPTS)
    return ctx, runner


def planner_rule(params, prompts, task):
    return PHRASE in prompts["planner"]


