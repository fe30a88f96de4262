"""Seeds as Operon individuals: a sympy expression built into an Operon tree node by node (never through
``InfixParser``, which segfaults on inputs such as ``exp(-x)`` and silently truncates ``x*2``), scored the way
Operon scores (-R² after its linear scaling, length), and put in place of the worst parents of a population."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import sympy

from harness.core.candidates import Candidate
from harness.core.expression import ExpressionError, parse_expression
from harness.sr.backends import BackendUnavailable
from harness.sr.plan import operators_in


def _import_operon() -> tuple[Any, Any]:
    try:
        import pyoperon
        from pyoperon.sklearn import SymbolicRegressor
    except Exception as exc:  # pragma: no cover - pyoperon is a hard dependency
        raise BackendUnavailable(f"pyoperon cannot be imported ({exc}); install it with `pip install pyoperon`")
    return pyoperon, SymbolicRegressor


_FUNCS = {
    sympy.sin: "Sin", sympy.cos: "Cos", sympy.tan: "Tan", sympy.exp: "Exp", sympy.log: "Log",
    sympy.Abs: "Abs", sympy.tanh: "Tanh", sympy.sinh: "Sinh", sympy.cosh: "Cosh", sympy.asin: "Asin",
    sympy.acos: "Acos", sympy.atan: "Atan",
}


def sympy_to_tree(expr: sympy.Expr, hashes: dict[str, int]) -> Any:
    """An Operon tree for a sympy expression without free parameters (postfix: children, then parent;
    for a binary node the first operand comes right before it)."""
    op, _ = _import_operon()
    N = op.NodeType

    def node(kind: str) -> Any:
        return op.Node(getattr(N, kind))

    def const(value: float) -> list[Any]:
        n = op.Node(N.Constant)
        n.Value = float(value)
        return [n]

    def binary(kind: str, a: list[Any], b: list[Any]) -> list[Any]:
        return b + a + [node(kind)]

    def fold(kind: str, parts: list[list[Any]]) -> list[Any]:
        acc = parts[0]
        for p in parts[1:]:
            acc = binary(kind, acc, p)
        return acc

    def walk(e: sympy.Expr) -> list[Any]:
        if e.is_Symbol:
            if e.name not in hashes:
                raise ValueError(f"symbol {e.name} is not an input or feature")
            n = op.Node(N.Variable)
            n.HashValue = n.CalculatedHashValue = hashes[e.name]
            n.Value = 1.0
            return [n]
        if e.is_Number or e.is_NumberSymbol:
            value = float(e)
            if not math.isfinite(value):
                raise ValueError("non-finite constant")
            return const(value)
        if e.is_Add:
            return fold("Add", [walk(a) for a in e.args])
        if e.is_Mul:
            num = [a for a in e.args if not (a.is_Pow and a.exp.is_Number and a.exp < 0)]
            den = [sympy.Pow(a.base, -a.exp) for a in e.args if a.is_Pow and a.exp.is_Number and a.exp < 0]
            top = fold("Mul", [walk(a) for a in num]) if num else const(1.0)
            return binary("Div", top, fold("Mul", [walk(a) for a in den])) if den else top
        if e.is_Pow:
            base, ex = e.args
            if ex.is_Number and ex < 0:
                return binary("Div", const(1.0), walk(sympy.Pow(base, -ex)))
            if ex == 2:
                return walk(base) + [node("Square")]
            if ex == sympy.S.Half:
                return walk(base) + [node("Sqrt")]
            if ex == 3:
                return binary("Mul", walk(base) + [node("Square")], walk(base))
            return binary("Pow", walk(base), walk(ex))
        kind = _FUNCS.get(e.func)
        if kind is not None and len(e.args) == 1:
            return walk(e.args[0]) + [node(kind)]
        raise ValueError(f"no Operon node for {type(e).__name__}")

    return op.Tree(walk(expr)).UpdateNodes()


def _seed_individuals(op: Any, reg: Any, seeds: list[Candidate], names: list[str], variables: list[str],
                      X: np.ndarray, y: np.ndarray, warnings: list[str]) -> list[Any]:
    """Individuals for the seeds, with their fitted constants and honest fitness (-R², length)."""
    hashes = {names[i]: h for i, h in enumerate(reg.variables_)}
    ds = op.Dataset(np.asfortranarray(X))
    rows = op.Range(0, X.shape[0])
    dtable = op.DispatchTable()
    out = []
    for cand in seeds:
        try:
            expr = parse_expression(cand.expression, variables)
            tree = sympy_to_tree(expr.with_params(cand.params).sympy if expr.n_params else expr.sympy, hashes)
        except (ValueError, ExpressionError) as exc:
            warnings.append(f"seed {cand.expression[:60]} not injected into Operon: {exc}")
            continue
        pred = np.asarray(op.Evaluate(dtable, tree, ds, rows), dtype=np.float64).ravel()
        r2 = _scaled_r2(pred, y)
        ind = op.Individual(2)
        ind.Genotype = tree
        ind.SetFitness(-r2 if math.isfinite(r2) else float(np.finfo(np.float32).max), 0)
        ind.SetFitness(float(tree.Length), 1)
        out.append(ind)
    return out


def _seed_operators(seeds: list[Candidate], variables: list[str]) -> set[str]:
    """Operators the seeds use: the GP gets them too, so it can vary the seeds' own building blocks."""
    found: set[str] = set()
    for cand in seeds:
        try:
            found |= operators_in(cand.expression, variables)
        except ExpressionError:
            continue
    return found


def _scaled_r2(pred: np.ndarray, y: np.ndarray) -> float:
    """R² after the least-squares scale and offset Operon applies (its r2 objective)."""
    if not np.all(np.isfinite(pred)) or np.ptp(pred) == 0:
        return -math.inf
    A = np.column_stack([pred, np.ones_like(pred)])
    coef, *_ = np.linalg.lstsq(A, y, rcond=None)
    return 1.0 - float(np.mean((A @ coef - y) ** 2) / np.var(y))


def _inject(individuals: list[Any], seeds: list[Any], population_size: int) -> list[Any]:
    """Replace the worst parents (the first ``population_size`` entries) by the seed individuals."""
    n = min(len(seeds), max(1, population_size // 4))
    parents = range(min(population_size, len(individuals)))
    worst = sorted(parents, key=lambda i: -individuals[i].GetFitness(0))[:n]
    for i, ind in zip(worst, seeds[:n]):
        individuals[i] = ind
    return individuals
