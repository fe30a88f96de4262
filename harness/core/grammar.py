"""The expression grammar: a whitelisted ``ast`` walk that turns untrusted text into a sympy tree.

Only a whitelist of node kinds is turned into sympy objects, built directly with sympy constructors; anything
else raises :class:`ExpressionError` with a message that names the offending part, so a model can correct
itself. The function names come from ``harness.core.vocabulary``. :func:`parse_tree` is the entry point;
``harness.core.expression.parse_expression`` wraps its result in an :class:`~harness.core.expression.Expression`.
"""

from __future__ import annotations

import ast
import math
import re
import unicodedata
import warnings
from collections.abc import Callable, Sequence

import numpy as np
import sympy

from harness.core.vocabulary import (
    BINARY_FUNCTIONS,
    FUNCTION_ALIASES,
    UNARY_FUNCTIONS,
    grammar_functions,
)

__all__ = ["ExpressionError", "ALLOWED_FUNCTIONS", "parse_tree"]

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



def parse_tree(text: str, variables: Sequence[str], *, constants_as_params: bool = False,
               max_nodes: int = 200, max_depth: int = 32) -> tuple[sympy.Expr, tuple[str, ...], dict[str, float]]:
    """Untrusted text -> (sympy tree, checked variable names, initial values of the free parameters)."""
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
    return expr, names, builder.initial
