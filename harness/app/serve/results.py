"""What a finished run shows: the equation as MathML, its metrics, exports (sympy, LaTeX, Python), its files.

Reuses the static viewer's MathML (``harness.app.view.mathml``) so the live page and ``view.html`` agree."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Sequence

import sympy

from harness.app.view import PLOTS, mathml

RESULT_KEYS = ("status", "errors", "complexity", "llm_calls", "solver_runs", "seconds")


def exports(equation: str, names: Sequence[str]) -> dict[str, str]:
    """The equation for other tools: sympy text, LaTeX, and a NumPy Python function of the inputs."""
    from harness.core.expression import ExpressionError, parse_expression

    try:
        expr = parse_expression(equation, list(names)).sympy
    except (ExpressionError, TypeError, ValueError) as exc:
        return {"error": f"cannot export: {exc}"}
    from sympy.printing.numpy import NumPyPrinter

    body = NumPyPrinter({"fully_qualified_modules": True}).doprint(expr)
    python = f"import numpy\n\n\ndef f({', '.join(names)}):\n    return {body}\n"
    return {"sympy": str(expr), "latex": sympy.latex(expr), "python": python}


def result_payload(run_dir: Path) -> dict[str, Any] | None:
    """The run's result.json, trimmed for the page, with MathML, exports and the names of its plots."""
    try:
        record = json.loads((run_dir / "result.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    names = list(record.get("input_names") or []) or _input_names(run_dir)
    best = record.get("best") if isinstance(record.get("best"), dict) else {}
    equation = record.get("expression") or best.get("equation")
    out: dict[str, Any] = {k: record.get(k) for k in RESULT_KEYS if k in record}
    out.update(equation=equation, metrics=record.get("metrics") or best.get("metrics") or {},
               front=[{k: c.get(k) for k in ("equation", "complexity", "loss", "score")}
                      for c in (record.get("pareto_front") or [])[:30] if isinstance(c, dict)],
               plots=[p for p in PLOTS if (run_dir / p).is_file()], view=(run_dir / "view.html").is_file(),
               run_dir=str(run_dir))
    if equation:
        out["mathml"] = mathml(equation, names)
        out["exports"] = exports(equation, names)
    return out


def _input_names(run_dir: Path) -> list[str]:
    try:
        run = json.loads((run_dir / "run.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []
    return list((run.get("task") or {}).get("input_names") or [])
