"""A seeded toy on which harness optimization provably helps — for tests, demos and CI smoke runs.

Every toy task is ``y = a*sin(x0) + b*x1**2`` (constants per task). The toy runs with an arithmetic-only SR
floor (``backend.operators=[add,sub,mul,div]``, set by ``TOY_SR_FLOOR`` users), so an unguided engine run cannot
write ``sin`` and misses the law, while a plan that adds ``sin`` and the right hypothesis solves it at once.
The scripted model (``respond``, used through ``llm=scripted``) plays every role and the prompt engineer:

- the Planner writes a *good* plan (the right hypothesis and the sin operator) only when its instruction
  contains ``PHRASE`` or the conversation carries the Analyst's hint (``HINT``); otherwise a plan with no
  hypothesis, so SR misses the equation and acc_0.01 is 0;
- the Analyst reports ``HINT``; the other roles answer with plain, valid but unhelpful output;
- the prompt engineer / reflection model returns the current instruction plus a sentence holding ``PHRASE``.

So stage 1 and stage 3 should find the phrase, stage 2 should switch the Analyst on (or pick the pooled Planner
prompt with the phrase), and a frozen harness from them solves unseen toy tasks.
"""

from __future__ import annotations

import json
import time
from typing import Any

import numpy as np

from harness.task import Task

PHRASE = "periodic hypothesis"
HINT = "TOY-HINT: the target looks periodic in x0 and quadratic in x1"
GOOD_SEED = "c0*sin(x0) + c1*x1**2"
GOOD_OPERATORS = ["add", "sub", "mul", "sin", "square"]
TOY_SR_FLOOR = ["add", "sub", "mul", "div"]  # the toy's SR operators: guidance has something to add
BAD_OPERATORS = ["add", "sub"]


def toy_tasks(n: int = 4, offset: int = 0, n_rows: int = 60, seed: int = 0) -> list[Task]:
    """``n`` toy tasks named ``toy_<offset+i>``; held-out sets use another ``offset`` (disjoint names)."""
    tasks = []
    for i in range(offset, offset + n):
        rng = np.random.default_rng([seed, i])
        a, b = float(rng.uniform(1.0, 3.0)), float(rng.uniform(0.5, 2.0))

        def draw(lo: float, hi: float, rows: int) -> tuple[np.ndarray, np.ndarray]:
            X = rng.uniform(lo, hi, size=(rows, 2))
            return X, a * np.sin(X[:, 0]) + b * X[:, 1] ** 2

        X, y = draw(-3.0, 3.0, n_rows)
        tasks.append(Task.from_arrays(
            X, y, name=f"toy_{i}", domain="toy", input_names=["x0", "x1"],
            input_descriptions=["angle-like input", "displacement-like input"], target_name="y",
            target_description="measured response", test_id=draw(-3.0, 3.0, n_rows // 2),
            test_ood=draw(3.0, 4.0, n_rows // 2), ground_truth=f"{a:.6g}*sin(x0) + {b:.6g}*x1**2",
        ))
    return tasks


def _text(messages: list[dict[str, Any]]) -> str:
    return "\n".join(str(m.get("content") or "") for m in messages)


def _system(messages: list[dict[str, Any]]) -> str:  # the rewrite prompts put their role in the system message
    return "\n".join(str(m.get("content") or "") for m in messages if m.get("role") == "system")


def rewrite_reply(messages: list[dict[str, Any]]) -> str:
    """The prompt engineer / reflection model: current instruction + the magic phrase."""
    user = str(messages[-1].get("content") or "")
    current = user.split("<<<", 1)[1].split(">>>", 1)[0].strip() if "<<<" in user else ""
    new = f"{current}\nAlways put the {PHRASE} (a sine of the angle-like input) among the seed equations."
    return json.dumps({"instruction": new, "rationale": "runs missed the periodic structure"})


def plan(good: bool) -> dict[str, Any]:
    """A PlanOutput-shaped plan: the right hypothesis and operators, or one that cannot fit the toy."""
    if good:
        return {"rationale": "periodic in x0, quadratic in x1", "operators": GOOD_OPERATORS,
                "hypotheses": [GOOD_SEED], "features": []}
    return {"rationale": "start with a linear model", "operators": BAD_OPERATORS, "hypotheses": [], "features": []}


def role_reply(role: str, messages: list[dict[str, Any]]) -> dict[str, Any]:
    """The toy's answer for ``role`` (the workflows.roles output schemas)."""
    if role == "analyst":
        return {"findings": [HINT], "operators": GOOD_OPERATORS, "hypotheses": []}
    if role == "diagnoser":
        return {"issues": ["the fit misses structure"], "evidence": ["residuals"], "missing_terms": []}
    good = role == "planner" and (PHRASE in _text(messages) or HINT in _text(messages))
    return plan(good)


def respond(messages: list[dict[str, Any]], **request: Any) -> str:
    """Scripted-provider entry point (``llm.extra.fn: optimize.toy:respond``)."""
    from workflows.roles import detect_role

    system = _system(messages)
    if "prompt engineer" in system or "reflection model" in system:
        return rewrite_reply(messages)
    role = detect_role(messages, request.get("response_format")) or "planner"
    return json.dumps(role_reply(role, messages))


def respond_slow(messages: list[dict[str, Any]], **request: Any) -> str:
    """``respond`` after a short sleep, so a test can kill a run between trials."""
    time.sleep(0.2)
    return respond(messages, **request)
