"""Search plans: what an SR engine should try, validated so that nonsense from a small model still runs.

A plan comes from a language model (often a small one), a config file or code; ``harness.sr.plan_validation``
turns anything into a runnable plan (``validate_plan``), and ``harness.sr.settings`` widens it to the harness's
floor (``SearchSettings.admit``). Once admitted, a plan stays a :class:`SearchPlan` down to the engine.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from harness.core.expression import parse_expression
from harness.core.vocabulary import (
    BINARY_OPERATORS,
    DEFAULT_OPERATORS,
    OPERATORS,
    UNARY_OPERATORS,
    sympy_function_names,
)

__all__ = [
    "OPERATORS",
    "BINARY_OPERATORS",
    "UNARY_OPERATORS",
    "DEFAULT_OPERATORS",
    "PlanLimits",
    "SearchPlan",
    "default_plan",
    "operators_in",
]

_SYMPY_FUNCS: dict[str, str] = sympy_function_names()  # sympy function class names -> vocabulary


class PlanLimits(BaseModel):
    """What the caller allows; plans are clipped into these bounds (and the clipping is reported)."""

    model_config = ConfigDict(extra="ignore")

    min_length: int = 5
    max_length: int = 60
    min_depth: int = 2
    max_depth: int = 16
    min_time: float = 1.0
    max_time: float = 300.0
    min_generations: int = 1
    max_generations: int = 100_000
    min_population: int = 20
    max_population: int = 5000
    max_seeds: int = 20
    max_features: int = 6
    max_seed_nodes: int = 60
    max_notes: int = 10
    max_note_chars: int = 300


class SearchPlan(BaseModel):
    """One SR engine run. Seeds are hypotheses in engine grammar over the task's inputs; ``features`` maps a
    new column name to an expression over the inputs (given to the engine as data, substituted back later)."""

    model_config = ConfigDict(extra="forbid")

    operators: list[str] = Field(default_factory=lambda: list(DEFAULT_OPERATORS))
    max_length: int = 30
    max_depth: int = 10
    time_budget: float = 10.0
    generations: int = 10_000
    population_size: int = 500
    seeds: list[str] = Field(default_factory=list)
    features: dict[str, str] = Field(default_factory=dict)
    constraints: list[str] = Field(default_factory=list)
    loss: Literal["mse", "relative"] = "mse"
    seed: int = 0
    extras: dict[str, Any] = Field(default_factory=dict)

    @property
    def binary_operators(self) -> list[str]:
        return [o for o in self.operators if o in BINARY_OPERATORS]

    @property
    def unary_operators(self) -> list[str]:
        return [o for o in self.operators if o in UNARY_OPERATORS]

    def summary(self) -> str:
        """One line for logs and tool output."""
        parts = [
            f"ops={','.join(self.operators)}",
            f"max_length={self.max_length}",
            f"max_depth={self.max_depth}",
            f"time={self.time_budget:g}s",
            f"pop={self.population_size}",
        ]
        if self.seeds:
            parts.append(f"seeds={len(self.seeds)}")
        if self.features:
            parts.append("features=" + ",".join(f"{k}={v}" for k, v in self.features.items()))
        if self.loss != "mse":
            parts.append(f"loss={self.loss}")
        return " ".join(parts)


def default_plan(**overrides: Any) -> SearchPlan:
    """The plan used when nothing usable is given: arithmetic plus common smooth functions."""
    return SearchPlan(**overrides)


def operators_in(text: str, variables: list[str] | tuple[str, ...]) -> set[str]:
    """Vocabulary operators an expression uses (so a seed's functions can be added to the search)."""
    import sympy

    expr = parse_expression(text, list(variables)).sympy
    found: set[str] = set()
    for node in sympy.preorder_traversal(expr):
        if isinstance(node, sympy.Add):
            found.add("add")
        elif isinstance(node, sympy.Mul):
            found.add("mul")
            if any(f.is_Pow and f.exp.is_Number and f.exp < 0 for f in node.args):
                found.add("div")
        elif isinstance(node, sympy.Pow):
            ex = node.exp
            if ex == 2:
                found.add("square")
            elif ex == sympy.S.Half:
                found.add("sqrt")
            elif ex == -1:
                found.add("div")
            elif not (ex.is_Integer and 0 < int(ex) <= 3):
                found.add("pow")
            else:
                found.add("mul")
        elif isinstance(node, sympy.Function):
            name = _SYMPY_FUNCS.get(type(node).__name__)
            if name:
                found.add(name)
    return found


# ----------------------------------------------------------------------------------------------- validation
