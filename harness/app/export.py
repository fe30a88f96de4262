"""A found equation out of the harness: PySR's model selection rules, a LaTeX table of the front, and the
equation as a JAX function or a PyTorch module with trainable constants (via sympy's printers).

JAX and PyTorch are optional: they are imported only when asked for, with a message that says what to install.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np
import sympy

from harness.core.expression import parse_expression

MODEL_SELECTIONS = ("accuracy", "best", "score")
BEST_LOSS_FACTOR = 1.5  # PySR's "best": highest score among equations with loss within 1.5x of the most accurate


def select_index(front: Any, rule: str) -> int:
    """Row of ``front`` (a PySR-style table: complexity, loss, score, equation) that ``rule`` picks.

    PySR's meanings: ``accuracy`` = lowest loss; ``score`` = highest score (the drop in log loss per unit of
    complexity against the next simpler equation); ``best`` = highest score among the equations whose loss is
    below 1.5 times the lowest. The loss here is the validation NMSE (data held out of the search).
    """
    if rule not in MODEL_SELECTIONS:
        raise ValueError(f"model_selection must be one of {', '.join(MODEL_SELECTIONS)}, got {rule!r}")
    if front is None or len(front) == 0:
        raise ValueError("the Pareto front is empty: nothing to select")
    loss = np.array([float(v) if v is not None else math.nan for v in front["loss"]], dtype=float)
    score = np.nan_to_num(np.array(front["score"], dtype=float), nan=-math.inf)
    finite = np.isfinite(loss)
    if not finite.any():
        return int(len(front) - 1)
    if rule == "accuracy":
        return int(np.nanargmin(np.where(finite, loss, np.inf)))
    if rule == "score":
        return int(np.argmax(np.where(finite, score, -np.inf)))
    eligible = finite & (loss <= BEST_LOSS_FACTOR * np.nanmin(loss[finite]))
    return int(np.argmax(np.where(eligible, score, -np.inf)))


def latex_table(front: Any, names: Sequence[str], *, indices: Sequence[int] | None = None, precision: int = 3,
                columns: Sequence[str] = ("equation", "complexity", "loss")) -> str:
    """The front (or the rows ``indices``) as a LaTeX ``tabular`` (booktabs rules, equations in math mode)."""
    known = {"equation", "complexity", "loss", "score"}
    if unknown := [c for c in columns if c not in known]:
        raise ValueError(f"unknown columns {unknown}; choose from {sorted(known)}")
    rows = list(range(len(front))) if indices is None else list(indices)
    headers = {"equation": "Equation", "complexity": "Complexity", "loss": "Loss", "score": "Score"}
    align = "".join("l" if c == "equation" else "c" for c in columns)
    lines = [f"\\begin{{tabular}}{{@{{}}{align}@{{}}}}", "\\toprule",
             " & ".join(headers[c] for c in columns) + " \\\\", "\\midrule"]
    for i in rows:
        row = front.iloc[i]
        cells = []
        for c in columns:
            if c == "equation":
                expr = parse_expression(row["equation"], names).sympy
                rounded = expr.xreplace({f: sympy.Float(f, precision) for f in expr.atoms(sympy.Float)})
                cells.append(f"${sympy.latex(rounded)}$")
            elif c == "complexity":
                cells.append(str(int(row["complexity"])))
            else:
                cells.append(f"{float(row[c]):.{precision}g}")
        lines.append(" & ".join(cells) + " \\\\")
    lines += ["\\bottomrule", "\\end{tabular}"]
    return "\n".join(lines)


def _skeleton(equation: str, names: Sequence[str]) -> tuple[Any, list[sympy.Symbol], list[sympy.Symbol], np.ndarray]:
    """The equation with its numbers as constants c0.., the variable and constant symbols, the values."""
    expr = parse_expression(equation, names, constants_as_params=True)
    free = {s.name: s for s in expr.sympy.free_symbols}
    variables = [free.get(n, sympy.Symbol(n)) for n in expr.variables]
    constants = [free[p] for p in expr.parameters]
    return expr.sympy, variables, constants, np.asarray(expr.initial_params, dtype=float)


def _need(module: str, what: str) -> Any:
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise ImportError(f"{what} needs {module}, which is not installed here: pip install {module}") from exc


def jax_function(equation: str, names: Sequence[str]) -> dict[str, Any]:
    """PySR's ``jax()`` shape: ``{"callable": f(X, parameters), "parameters": jnp.ndarray}`` (X: rows x inputs).

    The constants are a separate argument so they can be differentiated and trained with JAX.
    """
    jnp = _need("jax.numpy", "jax() export")
    expr, variables, constants, values = _skeleton(equation, names)
    fn = sympy.lambdify([*variables, *constants], expr, modules="jax")
    n_vars = len(variables)

    def evaluate(X: Any, parameters: Any) -> Any:
        X = jnp.asarray(X)
        return fn(*(X[:, j] for j in range(n_vars)), *(parameters[k] for k in range(len(constants)))) + 0 * X[:, 0]

    return {"callable": evaluate, "parameters": jnp.asarray(values)}


def torch_module(equation: str, names: Sequence[str]) -> Any:
    """PySR's ``pytorch()`` shape: a ``torch.nn.Module`` whose forward(X) computes the equation; its constants
    are ``nn.Parameter``s (float64 unless you call ``.float()``), so the equation can be trained further."""
    torch = _need("torch", "pytorch() export")
    expr, variables, constants, values = _skeleton(equation, names)
    fn = sympy.lambdify([*variables, *constants], expr, modules="torch")
    n_vars = len(variables)

    class SymbolicEquation(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.constants = torch.nn.Parameter(torch.tensor(values, dtype=torch.float64))
            self.equation = equation

        def forward(self, X: Any) -> Any:
            out = fn(*(X[:, j] for j in range(n_vars)), *(self.constants[k] for k in range(len(constants))))
            return out + 0 * X[:, 0]  # a constant equation still gives one value per row

        def extra_repr(self) -> str:
            return f"equation={self.equation!r}"

    return SymbolicEquation()
