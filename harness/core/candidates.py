"""Candidate equations and their deterministic selection rules: :func:`select_best` (the accuracy rule, used inside
pools) and :func:`select`, the final pick under ``sr.selection`` (the precision ladder in the shipped harness)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Iterable

NMSE_FLOOR = 1e-14  # below this, validation errors are rounding noise and count as equal


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
        try:  # records read back from JSON may hold "inf"/"nan" as text
            value = float(value)
        except (TypeError, ValueError):
            return math.inf
        return value if math.isfinite(value) else math.inf

    def sort_key(self, split: str = "valid") -> tuple[float, int, float, str]:
        """Validation NMSE (to ~2% and floored at 1e-14), then complexity, then exact NMSE, then text.

        Why the rounding: two exact fits differ only in rounding noise (1e-32 vs 5e-32); the simpler one should
        win, not the one whose noise terms happened to cancel better. The key stays a total, deterministic order.
        """
        nmse = self.metric(split, "nmse")
        return (_decades(nmse, 2), self.complexity, nmse, self.equation)

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


SELECTION_RULES = ("accuracy", "parsimony", "extrapolation", "ladder")
LADDER = ("frac_within_0.01", "frac_within_0.001")  # shares of validation points within 1 %, then 0.1 %


def ladder_key(cand: "Candidate", split: str = "valid") -> tuple[float, ...]:
    """Sort key of the precision ladder: more points within 1 %, then within 0.1 % (to 0.01), then the lower
    error (in decades), then the simpler equation. An exact law beats an approximation with a lower bulk error
    but fewer precise points (targets spanning decades, settled tails: ``harness.core.precision``)."""
    shares = tuple(-round(cand.metric(split, key), 2) if math.isfinite(cand.metric(split, key)) else 0.0
                   for key in LADDER)
    return (*shares, _decades(cand.metric(split, "nmse"), 1), cand.complexity)


def select(candidates: Iterable[Candidate], rule: str = "accuracy", tolerance: float = 0.5,
           split: str = "valid") -> Candidate | None:
    """The final equation under a selection ``rule``.

    "accuracy": :func:`select_best`. "parsimony": the simplest candidate whose validation NMSE is within a factor
    ``1 + tolerance`` of the best one (errors below 1e-14 count as equal). Why: among near-equal fits the simpler
    equation is more often the true law, and true laws extrapolate; the most complex near-best one rarely does.
    "extrapolation": among the same near-best candidates, the lowest NMSE on split "edge" (constants refitted on
    the inner training rows, scored on the most extreme ones: ``harness.core.context.edge_metrics``; to ~25%),
    then the simplest. Candidates without an edge score rank last, so with none it is "parsimony".
    "ladder": :func:`ladder_key` over every usable candidate.
    """
    if rule not in SELECTION_RULES:
        raise ValueError(f"unknown selection rule {rule!r}; choose one of {', '.join(SELECTION_RULES)}")
    candidates = list(candidates)
    best = select_best(candidates, split)
    if best is None or rule == "accuracy":
        return best
    if rule == "ladder":
        return min((c for c in candidates if math.isfinite(c.metric(split, "nmse"))), key=lambda c: ladder_key(c, split))
    limit = max(best.metric(split, "nmse"), NMSE_FLOOR) * (1.0 + float(tolerance))
    near = [c for c in candidates if c.metric(split, "nmse") <= limit]
    if rule == "extrapolation":
        return min(near, key=lambda c: (_decades(c.metric("edge", "nmse"), 1), c.complexity) + c.sort_key(split))
    return min(near, key=lambda c: (c.complexity,) + c.sort_key(split))


def _decades(nmse: float, digits: int) -> float:
    """log10 of an error floored at ``NMSE_FLOOR``, rounded (``digits`` = 1: buckets of ~25%); inf stays inf."""
    return round(math.log10(max(nmse, NMSE_FLOOR)), digits) if math.isfinite(nmse) else math.inf


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
