"""Safe expression engine: text written by models or SR engines -> sympy -> compiled numpy.

Why a hand-written ``ast`` walker: candidate equations come from language models and other
untrusted sources, so the text is never given to ``eval``/``exec``/``sympify``.  Only a
whitelist of node kinds is turned into sympy objects, built directly with sympy constructors;
anything else raises :class:`ExpressionError` with a message that names the offending part, so
a model can correct itself.

Conventions
-----------
* Free parameters are ``c0..cN`` (``params[i]`` is canonicalised to ``c{i}``).  ``parameters``
  holds only the parameters that occur, sorted by index; a params vector is aligned with that
  tuple.  A longer vector indexed by parameter number (LLM-SR's 10-slot ``params``) is also
  accepted when the tuple has gaps (see :meth:`Expression.evaluate`).
* ``complexity`` counts nodes as PySR does, measured on the sympy tree: every operator,
  function, variable and constant is one node; subtraction and division are counted as the
  binary operators they are written as (``x - y`` and ``x / y`` are 3, not sympy's
  ``Add(x, Mul(-1, y))``), ``-x`` is 2 (negation), ``sqrt(x)`` is 2 and ``1/x`` is 3.
* Symbols are real (``real=True``) so that simplification is valid for real data.
* Constants: literals must be finite with ``|value| <= 1e15``; every constant subtree must be a
  finite float64, and functions of constants other than small exact ones (``exp(1)``,
  ``sqrt(2)``) are folded to floats while parsing, so sympy never evaluates something like
  ``sin(exp(exp(100)))`` exactly (which would hang).
* Compilation: the sympy tree is turned into straight-line numpy code by a small generator
  (every distinct subtree computed once; ``sympy.lambdify`` is the fallback) and cached on the
  object, as is the Jacobian compiled from ``sympy.diff``.  Calls run under
  ``np.errstate(all="ignore")``: overflow and invalid values give inf/nan quietly.
"""

from __future__ import annotations

import re
import signal
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import sympy
from sympy.printing.str import StrPrinter

from harness.core.codegen import compile_exprs as _compile
from harness.core.grammar import (
    ALLOWED_FUNCTIONS,
    SIMPLIFY_MAX_COMPLEXITY,
    ExpressionError,
    _constants_ok,
    _param_index,
    _var_symbol,
    parse_tree,
)

__all__ = ["ExpressionError", "Expression", "parse_expression", "ALLOWED_FUNCTIONS"]


# ----------------------------------------------------------------------------- complexity

def _is_negated(term: sympy.Expr) -> bool:
    coeff = term.as_coeff_Mul()[0] if term.is_Mul else None
    return coeff is not None and coeff.is_Number and coeff < 0


def _complexity(e: sympy.Expr) -> int:
    """PySR-style node count on a sympy tree (see module docstring)."""
    if e.is_Atom:
        return 1
    if e.is_Add:
        total = len(e.args) - 1
        negatives = 0
        for t in e.args:
            if _is_negated(t):
                negatives += 1
                total += _complexity(-t)  # written as subtraction
            else:
                total += _complexity(t)
        return total + (1 if negatives == len(e.args) else 0)  # leading unary minus
    if e.is_Mul:
        coeff, rest = e.as_coeff_Mul()
        if coeff == -1:
            return 1 + _complexity(rest)
        num, den = [], []
        for f in e.args:
            if f.is_Pow and f.exp.is_Number and f.exp < 0:
                den.append(sympy.Pow(f.base, -f.exp))
            else:
                num.append(f)
        cost = sum(_complexity(f) for f in num) + max(len(num) - 1, 0) if num else 1
        if den:
            cost += 1 + sum(_complexity(f) for f in den) + len(den) - 1
        return cost
    if e.is_Pow:
        base, ex = e.args
        if ex == sympy.S.Half:
            return 1 + _complexity(base)
        if ex.is_Number and ex < 0:
            return 2 + _complexity(sympy.Pow(base, -ex))
        return 1 + _complexity(base) + _complexity(ex)
    return 1 + sum(_complexity(a) for a in e.args)


# ----------------------------------------------------------------------------- printing

class _Printer(StrPrinter):
    """sympy's str printer, adjusted so the output reparses with :func:`parse_expression`."""

    def __init__(self, names: Mapping[str, str] | None = None, values: Mapping[str, float] | None = None):
        super().__init__({"full_prec": True})
        self._names = dict(names or {})
        self._values = dict(values or {})

    def _print_Float(self, expr: sympy.Float) -> str:
        return repr(float(expr))

    def _print_Exp1(self, expr: Any) -> str:
        return "exp(1)"

    def _print_Abs(self, expr: sympy.Abs) -> str:
        return f"abs({self._print(expr.args[0])})"

    def _print_Symbol(self, expr: sympy.Symbol) -> str:
        if expr.name in self._values:
            value = float(self._values[expr.name])
            return repr(value) if value >= 0 else f"({value!r})"  # keeps -0.5**2 from misparsing
        return self._names.get(expr.name, expr.name)


_ASSIGNMENT = re.compile(r"^\s*[A-Za-z_][\w.]*(\([^()]*\))?\s*=(?!=)")


def right_hand_side(text: str) -> str:
    """``"a = -c0*x"`` -> ``"-c0*x"``: models often write a hypothesis as an equation for the target (under any
    name, with or without arguments, ``f(x) = ...``); a comparison (``==``, ``<=``) is left alone."""
    if not isinstance(text, str):
        return text
    match = _ASSIGNMENT.match(text)
    return text[match.end():].strip() if match else text


def parse_expression(text: str, variables: Sequence[str], *, constants_as_params: bool = False,
                     max_nodes: int = 200, max_depth: int = 32) -> Expression:
    """Parse untrusted expression text into an :class:`Expression` (never evaluating it)."""
    expr, names, initial = parse_tree(text, variables, constants_as_params=constants_as_params,
                                      max_nodes=max_nodes, max_depth=max_depth)
    result = Expression(expr, names, initial)
    if result.complexity > max_nodes:
        raise ExpressionError(f"expression too complex: {result.complexity} nodes > max_nodes={max_nodes}")
    return result


# ----------------------------------------------------------------------------- Expression

def _run_with_timeout(fn: Callable[[], Any], seconds: float) -> Any:
    """Run ``fn`` under a SIGALRM timer when possible (main thread, POSIX); None on timeout."""
    if threading.current_thread() is not threading.main_thread() or not hasattr(signal, "setitimer"):
        return fn()

    class _Alarm(Exception):
        pass

    def _handler(signum: int, frame: Any) -> None:
        raise _Alarm()

    old = signal.signal(signal.SIGALRM, _handler)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        return fn()
    except _Alarm:
        return None
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


class Expression:
    """A parsed, whitelisted expression with free parameters; compiled lazily and cached."""

    def __init__(self, expr: sympy.Expr, variables: Sequence[str],
                 initial_params: Mapping[str, float] | None = None):
        if not isinstance(expr, sympy.Expr):
            raise TypeError("Expression takes a sympy expression; use parse_expression() for text")
        self.sympy: sympy.Expr = expr
        self.variables: tuple[str, ...] = tuple(variables)
        free = {s.name: s for s in self.sympy.free_symbols}
        unknown = [n for n in free if n not in self.variables and _param_index(n) is None]
        if unknown:
            raise ExpressionError(f"unknown symbols {sorted(unknown)}; variables are {self.variables}")
        pnames = sorted((n for n in free if _param_index(n) is not None and n not in self.variables),
                        key=lambda n: _param_index(n))
        self.parameters: tuple[str, ...] = tuple(pnames)
        self.n_params: int = len(pnames)
        init = dict(initial_params or {})
        self.initial_params: np.ndarray = np.array([float(init.get(n, 1.0)) for n in pnames], dtype=np.float64)
        self._var_symbols = [free.get(n, _var_symbol(n)) for n in self.variables]
        self._param_symbols = [free[n] for n in pnames]
        self._param_index = [_param_index(n) for n in pnames]
        self._complexity: int | None = None
        self._fn: Callable[..., Any] | None = None
        self._jac: Callable[..., Any] | None | bool = None

    # -- descriptive
    @property
    def complexity(self) -> int:
        if self._complexity is None:
            self._complexity = _complexity(self.sympy)
        return self._complexity

    def __str__(self) -> str:
        return _Printer().doprint(self.sympy)

    def __repr__(self) -> str:
        return f"Expression({str(self)!r}, variables={self.variables})"

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, Expression) and self.variables == other.variables
                and self.sympy == other.sympy)

    def __hash__(self) -> int:
        return hash((self.variables, self.sympy))

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_fn"] = None
        state["_jac"] = None  # compiled functions do not pickle; rebuilt on demand
        return state

    def param_symbols(self) -> list[sympy.Symbol]:
        """The free parameters' symbols, in parameter order."""
        return list(self._param_symbols)

    def latex(self) -> str:
        return sympy.latex(self.sympy)

    def to_string(self, params: Sequence[float] | np.ndarray | None = None,
                  names: Sequence[str] | Mapping[str, str] | None = None) -> str:
        """Text with constants written in (when given) and variables optionally renamed."""
        values = {}
        if params is not None:
            p = self._align(params)
            values = {n: float(v) for n, v in zip(self.parameters, p)}
        if names is None:
            mapping = {}
        elif isinstance(names, Mapping):
            mapping = dict(names)
        else:
            names = list(names)
            if len(names) != len(self.variables):
                raise ValueError(f"names has {len(names)} entries for {len(self.variables)} variables")
            mapping = dict(zip(self.variables, names))
        return _Printer(mapping, values).doprint(self.sympy)

    # -- derived expressions
    def with_params(self, params: Sequence[float] | np.ndarray) -> Expression:
        """The same expression with the constants written in as numbers (no free parameters)."""
        p = self._align(params)
        if not np.all(np.isfinite(p)):
            raise ExpressionError(f"cannot write non-finite parameter values into an expression: {p}")
        subs = {s: sympy.Float(float(v)) for s, v in zip(self._param_symbols, p)}
        return Expression(self.sympy.xreplace(subs), self.variables)

    def simplified(self, timeout: float = 2.0) -> Expression:
        """sympy.simplify, skipped for big trees and bounded in time; returns self if no gain."""
        if self.complexity > SIMPLIFY_MAX_COMPLEXITY:
            return self
        try:
            result = _run_with_timeout(lambda: sympy.simplify(self.sympy), timeout)
        except Exception:  # sympy internals can fail on odd inputs; simplification is optional
            return self
        if result is None or not isinstance(result, sympy.Expr) or not _constants_ok(result):
            return self
        init = dict(zip(self.parameters, self.initial_params))
        try:
            candidate = Expression(result, self.variables, init)
            parse_expression(str(candidate), self.variables, max_nodes=10**6, max_depth=10**3)
        except (ExpressionError, RecursionError):
            return self  # simplify introduced a function outside the whitelist
        return candidate if candidate.complexity <= self.complexity else self

    # -- numerics
    def _align(self, params: Sequence[float] | np.ndarray | None) -> np.ndarray:
        """Params aligned with ``parameters``; a longer vector is read by parameter index."""
        if params is None:
            return self.initial_params
        p = np.asarray(params, dtype=np.float64).ravel()
        if p.size == self.n_params or self.n_params == 0:
            return p[: self.n_params]
        if self.n_params and p.size > max(self._param_index):
            return p[self._param_index]
        raise ValueError(f"expected {self.n_params} parameter values for {self.parameters}, got {p.size}")

    @staticmethod
    def columns(X: np.ndarray, n_variables: int) -> list[np.ndarray]:
        """Split X (n, d) into contiguous float64 columns (1-D X allowed for one variable)."""
        X = np.asarray(X, dtype=np.float64)
        if X.ndim == 1 and n_variables <= 1:
            X = X.reshape(-1, 1)
        if X.ndim != 2 or X.shape[1] != n_variables:
            raise ValueError(f"X must have shape (n, {n_variables}), got {X.shape}")
        return [np.ascontiguousarray(X[:, j]) for j in range(n_variables)]

    def _compiled(self) -> Callable[..., Any]:
        if self._fn is None:
            self._fn = _compile(self._var_symbols + self._param_symbols, [self.sympy], many=False)
        return self._fn

    def evaluate(self, columns: Sequence[np.ndarray], params: Sequence[float] | np.ndarray | None = None,
                 n: int | None = None) -> np.ndarray:
        """Evaluate on pre-split columns (fast path used by the fitter); returns (n,) float64."""
        p = [np.float64(v) for v in self._align(params)]
        n = len(columns[0]) if columns else (n or 1)
        with np.errstate(all="ignore"):
            try:
                out = self._compiled()(*columns, *p)
            except (ZeroDivisionError, OverflowError, FloatingPointError):
                return np.full(n, np.nan)
            out = np.asarray(out, dtype=np.float64)
        if out.shape != (n,):
            out = np.broadcast_to(out, (n,)).copy()
        return out

    def __call__(self, X: np.ndarray, params: Sequence[float] | np.ndarray | None = None) -> np.ndarray:
        X = np.asarray(X, dtype=np.float64)
        cols = self.columns(X, len(self.variables))
        return self.evaluate(cols, params, n=X.shape[0])

    def _compiled_jacobian(self) -> Callable[..., Any] | None:
        if self._jac is None:
            try:
                derivs = [sympy.diff(self.sympy, s) for s in self._param_symbols]
                if any(d.has(sympy.Derivative, sympy.Subs) for d in derivs):
                    raise ValueError("unevaluated derivative")
                self._jac = _compile(self._var_symbols + self._param_symbols, derivs, many=True)
            except Exception:  # fall back to finite differences in the fitter
                self._jac = False
        return self._jac or None

    def jacobian(self, columns: Sequence[np.ndarray], params: Sequence[float] | np.ndarray | None = None,
                 n: int | None = None) -> np.ndarray | None:
        """Analytic d(expr)/d(params) as (n, n_params), or None if unavailable."""
        fn = self._compiled_jacobian()
        if fn is None:
            return None
        p = [np.float64(v) for v in self._align(params)]
        n = len(columns[0]) if columns else (n or 1)
        J = np.empty((n, self.n_params))
        with np.errstate(all="ignore"):
            try:
                cols = fn(*columns, *p)
            except (ZeroDivisionError, OverflowError, FloatingPointError):
                return None
            for j, c in enumerate(cols):
                J[:, j] = c
        return J
