"""Candidate equations and the deterministic selection rule shared by every search path."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Iterable


@dataclass
class Candidate:
    """One fitted equation: the skeleton with free parameters, its constants and metrics per split.

    ``expression`` is the skeleton in engine grammar over the task's input names (free parameters ``c0..cN``);
    ``equation`` is the same with the fitted constants written in as numbers (parseable by sympy).
    ``metrics`` maps split name ("train", "valid", "test_id", "test_ood") to the evaluator's metric dict.
    """

    expression: str
    params: list[float]
    equation: str
    complexity: int
    metrics: dict[str, dict[str, float]] = field(default_factory=dict)
    source: str = ""
    status: str = "ok"
    info: dict[str, Any] = field(default_factory=dict)

    def metric(self, split: str = "valid", name: str = "nmse") -> float:
        """A metric, +inf when missing or not finite (so it sorts last)."""
        value = self.metrics.get(split, {}).get(name)
        if value is None or not math.isfinite(value):
            return math.inf
        return float(value)

    def sort_key(self, split: str = "valid") -> tuple[float, int, str]:
        """Validation NMSE, then complexity, then text: a total, deterministic order."""
        return (self.metric(split, "nmse"), self.complexity, self.equation)

    def to_record(self) -> dict[str, Any]:
        return {
            "expression": self.expression,
            "params": [float(p) for p in self.params],
            "equation": self.equation,
            "complexity": int(self.complexity),
            "metrics": self.metrics,
            "source": self.source,
            "status": self.status,
            "info": self.info,
        }

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> "Candidate":
        return cls(
            expression=record["expression"],
            params=list(record.get("params", [])),
            equation=record["equation"],
            complexity=int(record["complexity"]),
            metrics=record.get("metrics", {}),
            source=record.get("source", ""),
            status=record.get("status", "ok"),
            info=record.get("info", {}),
        )


def select_best(candidates: Iterable[Candidate], split: str = "valid") -> Candidate | None:
    """Best validation NMSE, ties broken by lower complexity; ``None`` when nothing usable exists."""
    usable = [c for c in candidates if math.isfinite(c.metric(split, "nmse"))]
    if not usable:
        return None
    return min(usable, key=lambda c: c.sort_key(split))


def pareto_front(candidates: Iterable[Candidate], split: str = "valid") -> list[Candidate]:
    """Non-dominated candidates over (complexity, validation NMSE), sorted by complexity."""
    best_by_complexity: dict[int, Candidate] = {}
    for cand in candidates:
        if not math.isfinite(cand.metric(split, "nmse")):
            continue
        held = best_by_complexity.get(cand.complexity)
        if held is None or cand.sort_key(split) < held.sort_key(split):
            best_by_complexity[cand.complexity] = cand
    front: list[Candidate] = []
    best_err = math.inf
    for complexity in sorted(best_by_complexity):
        cand = best_by_complexity[complexity]
        err = cand.metric(split, "nmse")
        if err < best_err:
            front.append(cand)
            best_err = err
    return front


def dedupe(candidates: Iterable[Candidate]) -> list[Candidate]:
    """Drop repeated equations (same fitted text), keeping the first seen."""
    seen: set[str] = set()
    out: list[Candidate] = []
    for cand in candidates:
        if cand.equation in seen:
            continue
        seen.add(cand.equation)
        out.append(cand)
    return out
