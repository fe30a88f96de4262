"""Straight-line numpy code for whitelisted sympy trees (``sympy.lambdify`` is the fallback).

Every distinct subtree is computed once, which also shares common subexpressions between an expression and its
derivatives; compiled functions run under ``np.errstate(all="ignore")`` in their callers.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import sympy

from harness.core.vocabulary import UNARY_FUNCTIONS

__all__ = ["compile_exprs"]


_NP_FUNCS: dict[type, str] = {fn: np_name for fn, np_name in UNARY_FUNCTIONS.values()
                               if isinstance(fn, type) and np_name is not None}  # sqrt is a Pow in sympy
_NP_FUNCS[sympy.sign] = "sign"


class _Codegen:
    """Straight-line numpy code for sympy trees made of whitelisted nodes only.

    Why not only lambdify: it costs ~10-30 ms per expression (mostly dummifying), which
    dominates fitting small candidates.  Here every distinct subtree becomes one temporary,
    which also shares common subexpressions between an expression and its derivatives.
    Raises NotImplementedError on any other node; callers then fall back to lambdify.
    """

    def __init__(self, args: Sequence[sympy.Symbol]):
        self.names = {s: f"_a{i}" for i, s in enumerate(args)}
        self.lines: list[str] = []
        self.memo: dict[sympy.Basic, str] = {}
        self.constants: dict[str, np.float64] = {}

    def emit(self, e: sympy.Basic) -> str:
        if e in self.names:
            return self.names[e]
        if e in self.memo:
            return self.memo[e]
        code = self.node(e)
        if e.is_Atom or not e.args:
            return code
        name = f"_t{len(self.lines)}"
        self.lines.append(f"    {name} = {code}")
        self.memo[e] = name
        return name

    def node(self, e: sympy.Basic) -> str:
        if e.is_Number or e.is_NumberSymbol or (e.is_number and not e.free_symbols):
            name = f"_k{len(self.constants)}"
            self.constants[name] = np.float64(float(e))  # TypeError for complex values -> fallback
            return name
        if e.is_Symbol:
            raise NotImplementedError(f"unbound symbol {e}")
        if e.is_Add:
            return " + ".join(self.emit(a) for a in e.args)
        if e.is_Mul:
            num, den = [], []
            for f in e.args:
                if f.is_Pow and f.exp.is_Number and f.exp < 0:
                    den.append(self.emit(sympy.Pow(f.base, -f.exp)))
                else:
                    num.append(self.emit(f))
            text = " * ".join(num) if num else "1.0"
            return f"{text} / ({' * '.join(den)})" if den else text
        if e.is_Pow:
            base, ex = e.args
            if ex == sympy.S.Half:
                return f"_np.sqrt({self.emit(base)})"
            if ex.is_Integer and abs(int(ex)) <= 64:
                return f"{self.emit(base)} ** {int(ex)}"
            return f"{self.emit(base)} ** {self.emit(ex)}"
        if type(e) in _NP_FUNCS and len(e.args) == 1:
            return f"_np.{_NP_FUNCS[type(e)]}({self.emit(e.args[0])})"
        raise NotImplementedError(f"no numpy translation for {type(e).__name__}")

    @classmethod
    def compile(cls, args: Sequence[sympy.Symbol], outputs: Sequence[sympy.Expr], many: bool
                ) -> Callable[..., Any]:
        gen = cls(args)
        results = [gen.emit(o) for o in outputs]
        ret = f"[{', '.join(results)}]" if many else results[0]
        params = ", ".join(gen.names[s] for s in args)
        source = "\n".join([f"def _f({params}):", *gen.lines, f"    return {ret}"])
        namespace: dict[str, Any] = {"_np": np, **gen.constants}
        # The source is generated above from whitelisted sympy nodes only, never from user text.
        exec(compile(source, "<harness.core.expression>", "exec"), namespace)  # noqa: S102
        return namespace["_f"]


def compile_exprs(args: Sequence[sympy.Symbol], outputs: Sequence[sympy.Expr], many: bool) -> Callable[..., Any]:
    try:
        return _Codegen.compile(args, outputs, many)
    except (NotImplementedError, TypeError, ValueError, OverflowError, RecursionError):
        return sympy.lambdify(list(args), list(outputs) if many else outputs[0], modules="numpy", dummify=True)


