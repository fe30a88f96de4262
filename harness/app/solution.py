"""What a solve returns: the selected equation with its metrics and the Pareto front (PySR-style DataFrame),
written to and read back from a run folder's ``result.json``."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np


def front_frame(candidates: list[Any], variables: list[str]) -> Any:
    """Pareto front as a PySR-style DataFrame: complexity, loss (valid NMSE), score, equation, sympy_format."""
    import pandas as pd

    from harness.core.expression import parse_expression

    rows = []
    prev: tuple[float, int] | None = None
    for cand in sorted(candidates, key=lambda c: c.complexity):
        loss = cand.metric("valid", "nmse")
        if prev is None or not (loss > 0 and prev[0] > 0) or cand.complexity == prev[1]:
            score = 0.0
        else:
            score = -(math.log(loss) - math.log(prev[0])) / (cand.complexity - prev[1])
        prev = (loss, cand.complexity)
        try:
            sym = parse_expression(cand.equation, variables).sympy
        except ValueError:
            sym = None
        rows.append({"complexity": cand.complexity, "loss": loss, "score": score, "equation": cand.equation,
                     "sympy_format": sym})
    return pd.DataFrame(rows, columns=["complexity", "loss", "score", "equation", "sympy_format"])


@dataclass
class Solution:
    """The selected equation of a solve, with its metrics per split and what the solve cost."""

    equation: str | None
    sympy: Any
    latex: str | None
    parameters: dict[str, float]
    metrics: dict[str, dict[str, float]]
    front: Any  # pandas DataFrame
    input_names: list[str]
    complexity: int | None = None
    skeleton: str | None = None
    run_dir: Path | None = None
    llm_calls: int = 0
    solver_runs: int = 0
    seconds: float = 0.0
    status: str = ""
    errors: list[str] = field(default_factory=list)
    candidate: Any = None
    harness_digest: str | None = None

    @classmethod
    def from_result(cls, result: Any, task: Any, harness_digest: str | None = None) -> "Solution":
        from harness.core.expression import parse_expression

        names = list(task.input_names)
        best = result.best
        sym = latex = None
        if best is not None:
            expr = parse_expression(best.equation, names)
            sym, latex = expr.sympy, expr.latex()
        return cls(
            equation=best.equation if best else None, sympy=sym, latex=latex,
            parameters={f"c{i}": float(p) for i, p in enumerate(best.params)} if best else {},
            metrics=dict(best.metrics) if best else {}, front=front_frame(result.front, names), input_names=names,
            complexity=best.complexity if best else None, skeleton=best.expression if best else None,
            run_dir=result.run_dir, llm_calls=result.llm_calls, solver_runs=result.solver_runs,
            seconds=result.seconds, status=str(result.status), errors=list(result.errors), candidate=best,
            harness_digest=harness_digest,
        )

    @classmethod
    def from_record(cls, record: dict[str, Any], run_dir: Path | None = None) -> "Solution":
        """A solution back from its ``result.json`` record (what :meth:`to_record` wrote)."""
        import pandas as pd

        from harness.core.expression import ExpressionError, parse_expression

        names = list(record.get("input_names") or [])
        equation = record.get("expression")
        sym = parse_expression(equation, names).sympy if equation else None
        rows = []
        for row in record.get("pareto_front") or []:
            try:
                row_sym = parse_expression(row["equation"], names).sympy
            except (ExpressionError, KeyError, TypeError):
                row_sym = None
            rows.append({**row, "sympy_format": row_sym})
        front = pd.DataFrame(rows, columns=["complexity", "loss", "score", "equation", "sympy_format"])
        return cls(
            equation=equation, sympy=sym, latex=record.get("latex"), parameters=dict(record.get("parameters") or {}),
            metrics=dict(record.get("metrics") or {}), front=front, input_names=names,
            complexity=record.get("complexity"), skeleton=record.get("skeleton"), run_dir=run_dir,
            llm_calls=int(record.get("llm_calls") or 0), solver_runs=int(record.get("solver_runs") or 0),
            seconds=float(record.get("seconds") or 0.0), status=str(record.get("status") or ""),
            errors=list(record.get("errors") or []), harness_digest=record.get("harness_digest"),
        )

    def predict(self, X: Any) -> np.ndarray:
        """Evaluate the selected equation on rows of X (columns in ``input_names`` order)."""
        if self.equation is None:
            raise RuntimeError("the solve found no usable equation")
        from harness.core.expression import parse_expression

        return parse_expression(self.equation, self.input_names)(np.asarray(X, dtype=float))

    def to_record(self) -> dict[str, Any]:
        front = []
        for row in self.front.to_dict("records") if self.front is not None else []:
            front.append({**row, "sympy_format": str(row["sympy_format"]) if row["sympy_format"] is not None else None})
        return {
            "expression": self.equation,
            "latex": self.latex,
            "skeleton": self.skeleton,
            "parameters": self.parameters,
            "complexity": self.complexity,
            "input_names": self.input_names,
            "metrics": self.metrics,
            "pareto_front": front,
            "llm_calls": self.llm_calls,
            "solver_runs": self.solver_runs,
            "seconds": round(self.seconds, 3),
            "status": self.status,
            "errors": self.errors[:50],
            "harness_digest": self.harness_digest,
        }

    def write_result(self, path: Path, base: dict[str, Any] | None = None) -> None:
        """result.json: the run state's record plus the selected expression, metrics and Pareto front."""
        from harness.core.jsonio import write_json_atomic

        write_json_atomic(Path(path), {**(base or {}), **self.to_record()})

    def __repr__(self) -> str:
        test = self.metrics.get("test_id", {}).get("nmse")
        extra = f", test_id nmse={test:.3g}" if test is not None else ""
        return f"Solution({self.equation!r}, status={self.status!r}{extra})"
