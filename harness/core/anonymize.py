"""Anonymized tasks: inputs renamed ``x1..xn``, the target ``y``, nothing else that could name the law.

Why: a model may recall a law from a variable called ``temperature`` or a task called ``damped_oscillator`` rather
than find it in the data. SRHarness and LLM-SRBench's reviewers separate the two by solving the same data with
the names taken away. An anonymized task keeps the numbers (every split, row order, ground truth rewritten in the
new names, so symbolic accuracy still works) and drops the rest: descriptions, the task's name and domain and its
metadata. :class:`Anonymized` keeps the renaming so a result can be read back in the original names::

    anon = anonymize(task)
    solution = harness.solve(anon.task)            # every prompt sees x1, x2, y only
    print(anon.restore(solution.equation))         # the equation in the task's own names
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from harness.core.task import Task

__all__ = ["ANONYMOUS_NAME", "Anonymized", "anonymize", "rename_variables"]

ANONYMOUS_NAME = "anonymous"  # the task name every prompt sees (a name can carry the law: "ideal_gas_law")
TARGET = "y"


def rename_variables(text: str, mapping: dict[str, str]) -> str:
    """``text`` (an expression in the engine grammar) with each variable of ``mapping`` renamed, in one pass.

    Whole identifiers only: ``x1`` is not touched inside ``x10``, ``c1x1`` or ``np.x1``."""
    if not mapping:
        return text
    names = sorted(mapping, key=len, reverse=True)
    pattern = re.compile(r"(?<![\w.])(" + "|".join(re.escape(n) for n in names) + r")(?!\w)")
    return pattern.sub(lambda m: mapping[m.group(1)], text)


@dataclass(frozen=True)
class Anonymized:
    """An anonymized task (``task``, what the solver sees) and the way back to the original names."""

    task: Task
    original_name: str
    names: dict[str, str] = field(default_factory=dict)  # anonymized name -> original name (inputs, then target)

    def restore(self, equation: str | None) -> str | None:
        """``equation`` over ``x1..xn`` written in the original variable names (None stays None)."""
        return None if equation is None else rename_variables(equation, self.names)

    def to_dict(self) -> dict[str, Any]:
        """What a run folder records (``anonymization.json``): the task's name and the renaming."""
        return {"original_name": self.original_name, "names": dict(self.names)}


def anonymize(task: Task) -> Anonymized:
    """``task`` with inputs ``x1..xn``, target ``y``, no descriptions, name ``anonymous``, no domain or metadata."""
    new_inputs = [f"x{i}" for i in range(1, len(task.input_names) + 1)]
    to_new = dict(zip(task.input_names, new_inputs))
    truth = rename_variables(task.ground_truth, to_new) if task.ground_truth else None
    hidden = Task(
        name=ANONYMOUS_NAME,
        domain="",
        input_names=new_inputs,
        input_descriptions=[""] * len(new_inputs),
        target_name=TARGET,
        target_description="",
        train=task.train,
        test_id=task.test_id,
        test_ood=task.test_ood,
        ground_truth=truth,
        metadata={"anonymized": True},
    )
    names = {new: old for old, new in to_new.items()}
    names[TARGET] = task.target_name
    return Anonymized(task=hidden, original_name=task.name, names=names)
