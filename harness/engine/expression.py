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

import ast
import math
import re
import signal
import threading
import unicodedata
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import sympy
from sympy.printing.str import StrPrinter

from harness.engine.vocabulary import (
    BINARY_FUNCTIONS,
    FUNCTION_ALIASES,
    UNARY_FUNCTIONS,
    grammar_functions,
)

__all__ = ["ExpressionError", "Expression", "parse_expression", "ALLOWED_FUNCTIONS"]

MAX_TEXT_CHARS = 5000
MAX_LITERAL = 1e15
MAX_LITERAL_CHARS = 64
MAX_PARAM_INDEX = 999
SIMPLIFY_MAX_COMPLEXITY = 60


class ExpressionError(ValueError):
    """Raised for text that is not an allowed expression; the message names the culprit."""


_UNARY: dict[str, Callable[[sympy.Expr], sympy.Expr]] = {
    **{name: fn for name, (fn, _) in UNARY_FUNCTIONS.items()},
    **{alias: UNARY_FUNCTIONS[name][0] for alias, name in FUNCTION_ALIASES.items()},
}
_FLOAT_FUNCS: dict[str, Callable[[np.float64], np.float64]] = {
    name: getattr(np, np_name) for name, (_, np_name) in UNARY_FUNCTIONS.items() if np_name is not None
}
_FLOAT_FUNCS.update({alias: _FLOAT_FUNCS[name] for alias, name in FUNCTION_ALIASES.items() if name in _FLOAT_FUNCS})
_BINARY: dict[str, Callable[[sympy.Expr, sympy.Expr], sympy.Expr]] = {name: sympy.Pow for name in BINARY_FUNCTIONS}
ALLOWED_FUNCTIONS: tuple[str, ...] = grammar_functions()
_NUMPY_PREFIXES = ("np", "numpy")
_RESERVED = set(_UNARY) | set(_BINARY) | {"pi", "params", "np", "numpy"}
_PARAM_RE = re.compile(r"c(\d+)\Z")
_BAD_CONSTANTS = (sympy.zoo, sympy.oo, -sympy.oo, sympy.nan, sympy.I)


def _number_ok(a: sympy.Number) -> bool:
    """Finite and printable as literals that reparse (|value|, numerator, denominator <= 1e15)."""
    if isinstance(a, sympy.Rational):
        return abs(a.p) <= MAX_LITERAL and a.q <= MAX_LITERAL
    try:
        value = float(a)
    except (OverflowError, TypeError, ValueError):
        return False
    return math.isfinite(value) and abs(value) <= MAX_LITERAL


def _constants_ok(expr: sympy.Expr) -> bool:
    """True when no undefined/complex value appeared and every number is a moderate literal."""
    if any(expr.has(b) for b in _BAD_CONSTANTS):
        return False
    return all(_number_ok(a) for a in expr.atoms(sympy.Number))


def _small_exact(arg: sympy.Expr) -> bool:
    """A constant that sympy may keep exact inside a function: small rational, or one times pi."""
    for r in (arg, arg / sympy.pi):
        if r.is_Rational and abs(r.p) <= 1000 and r.q <= 1000:
            return True
    return False


def _var_symbol(name: str) -> sympy.Symbol:
    return sympy.Symbol(name, real=True)


def _param_index(name: str) -> int | None:
    m = _PARAM_RE.match(name)
    return int(m.group(1)) if m else None


def _check_variables(variables: Sequence[str]) -> tuple[str, ...]:
    if isinstance(variables, str):
        variables = [variables]
    # Python's parser reads identifiers in Unicode NFKC form (``µ`` U+00B5 is read as ``μ`` U+03BC), so the
    # names are compared in that form too; the Expression's variables are the normalised names.
    names = tuple(unicodedata.normalize("NFKC", n) if isinstance(n, str) else n for n in variables)
    for name in names:
        if not isinstance(name, str) or not name.isidentifier() or name.startswith("__"):
            raise ExpressionError(f"variable name {name!r} is not a plain identifier")
        if name in _RESERVED or _param_index(name) is not None:
            raise ExpressionError(f"variable name {name!r} clashes with a function, constant or parameter name")
    if len(set(names)) != len(names):
        raise ExpressionError(f"duplicate variable names in {names}")
    return names


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


# ----------------------------------------------------------------------------- parsing

class _Builder:
    """Turns a whitelisted ``ast`` tree into a sympy expression."""

    def __init__(self, text: str, variables: tuple[str, ...], constants_as_params: bool,
                 max_depth: int, first_free_index: int):
        self.text = text
        self.variables = variables
        self.constants_as_params = constants_as_params
        self.max_depth = max_depth
        self.next_index = first_free_index
        self.initial: dict[str, float] = {}

    # -- helpers
    def where(self, node: ast.AST) -> str:
        seg = ast.get_source_segment(self.text, node) or type(node).__name__
        return seg if len(seg) <= 80 else seg[:77] + "..."

    def fail(self, node: ast.AST, why: str) -> ExpressionError:
        return ExpressionError(f"{why}: '{self.where(node)}'")

    def unknown_name(self, name: str) -> ExpressionError:
        return ExpressionError(
            f"unknown name '{name}'; variables are {', '.join(self.variables) or '(none)'}; "
            f"parameters are c0..cN or params[i]; constant pi; functions: {', '.join(ALLOWED_FUNCTIONS)}")

    def param(self, index: int, node: ast.AST) -> sympy.Symbol:
        if index > MAX_PARAM_INDEX:
            raise self.fail(node, f"parameter index above {MAX_PARAM_INDEX}")
        name = f"c{index}"
        self.initial.setdefault(name, 1.0)
        return _var_symbol(name)

    def number(self, node: ast.Constant, sign: int, in_exponent: bool) -> sympy.Expr:
        value = node.value
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            kind = "strings" if isinstance(value, (str, bytes)) else f"{type(value).__name__} literals"
            raise self.fail(node, f"{kind} are not allowed")
        seg = ast.get_source_segment(self.text, node) or ""
        if len(seg) > MAX_LITERAL_CHARS:
            raise self.fail(node, "numeric literal too long")
        if not math.isfinite(value) or abs(value) > MAX_LITERAL:
            raise self.fail(node, f"numeric literal out of range (|value| must be <= {MAX_LITERAL:g})")
        value = sign * value
        integral = isinstance(value, int) or float(value).is_integer()
        if self.constants_as_params and not (in_exponent and integral and abs(value) <= 10):
            name = f"c{self.next_index}"
            self.next_index += 1
            self.initial[name] = float(value)
            return _var_symbol(name)
        return sympy.Integer(value) if isinstance(value, int) else sympy.Float(value)

    # -- main walk
    def build(self, node: ast.AST, depth: int = 0, in_exponent: bool = False) -> sympy.Expr:
        if depth > self.max_depth:
            raise self.fail(node, f"expression nested deeper than max_depth={self.max_depth}")
        if isinstance(node, ast.Constant):
            return self.number(node, 1, in_exponent)
        if isinstance(node, ast.Name):
            return self.name(node)
        if isinstance(node, ast.BinOp):
            return self.binop(node, depth, in_exponent)
        if isinstance(node, ast.UnaryOp):
            if isinstance(node.op, ast.USub) and isinstance(node.operand, ast.Constant):
                return self.number(node.operand, -1, in_exponent)
            if isinstance(node.op, ast.USub):
                return -self.build(node.operand, depth + 1, in_exponent)
            if isinstance(node.op, ast.UAdd):
                return self.build(node.operand, depth + 1, in_exponent)
            raise self.fail(node, "only unary + and - are allowed")
        if isinstance(node, ast.Call):
            return self.call(node, depth)
        if isinstance(node, ast.Subscript):
            return self.subscript(node)
        if isinstance(node, ast.Attribute):
            if isinstance(node.value, ast.Name) and node.value.id in _NUMPY_PREFIXES and node.attr == "pi":
                return sympy.pi
            raise self.fail(node, "attribute access is not allowed (only np./numpy. functions and np.pi)")
        raise self.fail(node, f"{type(node).__name__} is not allowed in an expression")

    def name(self, node: ast.Name) -> sympy.Expr:
        name = node.id
        if name.startswith("__"):
            raise self.fail(node, "dunder names are not allowed")
        if name in self.variables:
            return _var_symbol(name)
        index = _param_index(name)
        if index is not None:
            return self.param(index, node)
        if name == "pi":
            return sympy.pi
        if name in _UNARY or name in _BINARY:
            raise self.fail(node, f"function '{name}' must be called with arguments")
        if name == "params":
            raise self.fail(node, "use params[i] with an integer index i")
        raise self.unknown_name(name)

    def binop(self, node: ast.BinOp, depth: int, in_exponent: bool) -> sympy.Expr:
        op = node.op
        if isinstance(op, (ast.Add, ast.Sub)):
            terms = [self.build(n, depth + 1, in_exponent) * s
                     for n, s in self.chain(node, (ast.Add, ast.Sub), ast.Sub)]
            return self.constant(node, sympy.Add(*terms))
        if isinstance(op, (ast.Mult, ast.Div)):
            factors = []
            for n, s in self.chain(node, (ast.Mult, ast.Div), ast.Div):
                f = self.build(n, depth + 1, in_exponent)
                if s == -1 and f.is_zero:
                    raise self.fail(n, "division by zero")
                factors.append(f if s == 1 else self.power(n, f, sympy.Integer(-1)))
            return self.constant(node, sympy.Mul(*factors))
        if isinstance(op, ast.Pow):
            base = self.build(node.left, depth + 1, in_exponent)
            ex = self.build(node.right, depth + 1, True)
            return self.power(node, base, ex)
        symbol = {ast.FloorDiv: "//", ast.Mod: "%", ast.MatMult: "@", ast.LShift: "<<", ast.RShift: ">>",
                  ast.BitOr: "|", ast.BitAnd: "&", ast.BitXor: "^"}.get(type(op), type(op).__name__)
        raise self.fail(node, f"operator '{symbol}' is not allowed (use + - * / ** ^)")

    @staticmethod
    def chain(node: ast.BinOp, ops: tuple[type, ...], negative: type) -> list[tuple[ast.AST, int]]:
        """Flatten a left-associative chain (a+b-c+...) without recursion, so long sums
        do not count as deep nesting."""
        items: list[tuple[ast.AST, int]] = []
        cur: ast.AST = node
        while isinstance(cur, ast.BinOp) and isinstance(cur.op, ops):
            items.append((cur.right, -1 if isinstance(cur.op, negative) else 1))
            cur = cur.left
        items.append((cur, 1))
        return items[::-1]

    def constant(self, node: ast.AST, expr: sympy.Expr) -> sympy.Expr:
        """Every constant subtree must be a finite real float64 (keeps sympy's own
        evaluation of later nodes cheap: no astronomically large or complex constants)."""
        parts = [a for a in expr.args if not a.free_symbols] if expr.free_symbols else [expr]
        for part in parts:  # e.g. the coefficient exp(3500) that sympy folded out of a product
            try:
                value = float(part)
            except (TypeError, ValueError, OverflowError):
                value = math.nan
            if not math.isfinite(value):
                raise self.fail(node, "constant subexpression is not a finite real number")
        return expr

    def power(self, node: ast.AST, base: sympy.Expr, ex: sympy.Expr) -> sympy.Expr:
        """Pow, with constant folding guarded so that ``9**9**9**9`` cannot run away."""
        if base.free_symbols or ex.free_symbols:
            return self.constant(node, sympy.Pow(base, ex))
        try:
            value = float(base) ** float(ex)  # both already checked finite
        except (OverflowError, ZeroDivisionError):
            raise self.fail(node, "constant power overflows or divides by zero") from None
        if isinstance(value, complex) or not math.isfinite(value) or abs(value) > MAX_LITERAL:
            raise self.fail(node, "constant power is not a finite real number of moderate size")
        small = ex.is_Rational and abs(ex.p) <= 64 * ex.q and ex.q <= 64
        if small and (base.is_Rational or ex.is_Integer):
            exact = sympy.Pow(base, ex)  # cheap: small exponent, moderate value
            # kept exact only if it prints as something that parses back: pi**-36 prints as 1/pi**36,
            # whose pi**36 is too large a constant, so such a value becomes a float literal instead
            printable = value != 0 and abs(1.0 / value) <= MAX_LITERAL
            if (not isinstance(exact, sympy.Number) and printable) or (
                    isinstance(exact, sympy.Number) and _number_ok(exact)):
                return exact
        return sympy.Float(value)

    def function(self, node: ast.AST, name: str, arg: sympy.Expr) -> sympy.Expr:
        """Apply a whitelisted function; constant arguments other than small exact ones
        (``exp(1)``, ``sqrt(2)``, ``sin(pi/6)``) are folded to a float here, because
        sympy's exact evaluation of e.g. ``sin(exp(exp(100)))`` can take forever."""
        if arg.free_symbols or _small_exact(arg):
            return self.constant(node, _UNARY[name](arg))
        with np.errstate(all="ignore"):
            value = float(_FLOAT_FUNCS[name](np.float64(float(arg))))
        if not math.isfinite(value):
            raise self.fail(node, f"{name}() of this constant is not a finite real number")
        return sympy.Float(value)

    def call(self, node: ast.Call, depth: int) -> sympy.Expr:
        func = node.func
        if isinstance(func, ast.Name):
            name = func.id
        elif (isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name)
              and func.value.id in _NUMPY_PREFIXES):
            name = func.attr
        else:
            raise self.fail(func, "only plain or np./numpy. function calls are allowed")
        if node.keywords:
            raise self.fail(node, "keyword arguments are not allowed")
        if any(isinstance(a, ast.Starred) for a in node.args):
            raise self.fail(node, "starred arguments are not allowed")
        if name in _UNARY:
            arity = 1
        elif name in _BINARY:
            arity = 2
        else:
            raise ExpressionError(f"unknown function '{name}'; allowed: {', '.join(ALLOWED_FUNCTIONS)}")
        if len(node.args) != arity:
            raise self.fail(node, f"function '{name}' takes {arity} argument(s), got {len(node.args)}")
        args = [self.build(a, depth + 1, in_exponent=(i == 1)) for i, a in enumerate(node.args)]
        if arity == 2:
            return self.power(node, *args)
        if name in ("square", "cube"):
            return self.power(node, args[0], sympy.Integer(2 if name == "square" else 3))
        return self.function(node, name, args[0])

    def subscript(self, node: ast.Subscript) -> sympy.Expr:
        idx = node.slice
        if (isinstance(node.value, ast.Name) and node.value.id == "params" and isinstance(idx, ast.Constant)
                and type(idx.value) is int and idx.value >= 0):
            return self.param(idx.value, node)
        raise self.fail(node, "only params[i] with a non-negative integer i may be subscripted")


def _prescan(tree: ast.AST, limit: int) -> int:
    """Count nodes (iteratively) and return the first parameter index not named in the text."""
    highest = -1
    for count, node in enumerate(ast.walk(tree)):
        if count > limit:
            raise ExpressionError(f"expression too large (more than {limit} syntax nodes)")
        if isinstance(node, ast.Name):
            idx = _param_index(node.id)
            if idx is not None:
                highest = max(highest, idx)
        elif (isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant)
              and type(node.slice.value) is int):
            highest = max(highest, node.slice.value)
    return min(highest + 1, MAX_PARAM_INDEX + 1)


def parse_expression(text: str, variables: Sequence[str], *, constants_as_params: bool = False,
                     max_nodes: int = 200, max_depth: int = 32) -> Expression:
    """Parse untrusted expression text into an :class:`Expression` (never evaluating it)."""
    names = _check_variables(variables)
    if not isinstance(text, str):
        raise ExpressionError(f"expression must be a string, got {type(text).__name__}")
    if len(text) > MAX_TEXT_CHARS:
        raise ExpressionError(f"expression text too long ({len(text)} > {MAX_TEXT_CHARS} characters)")
    if not text.strip():
        raise ExpressionError("empty expression")
    source = text.strip().replace("^", "**")
    try:
        with warnings.catch_warnings():  # e.g. "invalid decimal literal" is a SyntaxWarning
            warnings.simplefilter("ignore", SyntaxWarning)
            tree = ast.parse(source, mode="eval")
    except SyntaxError as exc:
        raise ExpressionError(f"syntax error: {exc.msg} (at column {exc.offset})") from None
    except (RecursionError, MemoryError, ValueError) as exc:
        raise ExpressionError(f"expression cannot be parsed: {type(exc).__name__}: {str(exc)[:100]}") from None
    first_free = _prescan(tree, 6 * max_nodes + 50)
    builder = _Builder(source, names, constants_as_params, max_depth, first_free)
    try:
        expr = builder.build(tree.body)
    except RecursionError:
        raise ExpressionError("expression nested too deeply") from None
    if not isinstance(expr, sympy.Expr) or not _constants_ok(expr):
        raise ExpressionError(f"expression is undefined, not real or folds to a constant beyond 1e15 (sympy "
                              f"gives {str(expr)[:80]!r}); check divisions by zero, log(0), roots of negatives")
    result = Expression(expr, names, builder.initial)
    if result.complexity > max_nodes:
        raise ExpressionError(f"expression too complex: {result.complexity} nodes > max_nodes={max_nodes}")
    return result


# ----------------------------------------------------------------------------- compiling

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
        exec(compile(source, "<harness.engine.expression>", "exec"), namespace)  # noqa: S102
        return namespace["_f"]


def _compile(args: Sequence[sympy.Symbol], outputs: Sequence[sympy.Expr], many: bool) -> Callable[..., Any]:
    try:
        return _Codegen.compile(args, outputs, many)
    except (NotImplementedError, TypeError, ValueError, OverflowError, RecursionError):
        return sympy.lambdify(list(args), list(outputs) if many else outputs[0], modules="numpy", dummify=True)


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
