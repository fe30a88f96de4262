"""The one vocabulary of functions and operators: what the expression grammar parses, what plans and engines
call their primitives, and how models tend to misspell them.

Everything else derives from these tables: the grammar's functions (``expression``), the plan operators and
their aliases (``harness.sr.plan``), the engine translations (Operon, PySR), prompt texts and the role schemas'
``enum``. Adding a function here is the whole change.
"""

from __future__ import annotations

import sympy


def _square(a: sympy.Expr) -> sympy.Expr:
    return sympy.Pow(a, 2)


def _cube(a: sympy.Expr) -> sympy.Expr:
    return sympy.Pow(a, 3)


# Canonical unary functions: name -> (sympy builder, numpy function name or None when built from powers).
UNARY_FUNCTIONS: dict[str, tuple[object, str | None]] = {
    "sin": (sympy.sin, "sin"), "cos": (sympy.cos, "cos"), "tan": (sympy.tan, "tan"),
    "exp": (sympy.exp, "exp"), "log": (sympy.log, "log"), "sqrt": (sympy.sqrt, "sqrt"), "abs": (sympy.Abs, "abs"),
    "tanh": (sympy.tanh, "tanh"), "sinh": (sympy.sinh, "sinh"), "cosh": (sympy.cosh, "cosh"),
    "asin": (sympy.asin, "arcsin"), "acos": (sympy.acos, "arccos"), "atan": (sympy.atan, "arctan"),
    "square": (_square, None), "cube": (_cube, None),
}
# Other spellings the grammar accepts for them (numpy's names, sympy's printed Abs).
FUNCTION_ALIASES: dict[str, str] = {"arcsin": "asin", "arccos": "acos", "arctan": "atan",
                                    "absolute": "abs", "Abs": "abs"}
# Two-argument functions of the grammar (``pow(a, b)``); infix + - * / ** need no name.
BINARY_FUNCTIONS: tuple[str, ...] = ("pow", "power")

# Plan / engine operators: the binary ones, every unary function, and two engine primitives the grammar writes
# with arithmetic (inv(a) = 1/a, neg(a) = -a).
BINARY_OPERATORS: tuple[str, ...] = ("add", "sub", "mul", "div", "pow")
UNARY_OPERATORS: tuple[str, ...] = tuple(UNARY_FUNCTIONS) + ("inv", "neg")
OPERATORS: tuple[str, ...] = BINARY_OPERATORS + UNARY_OPERATORS
BASE_OPERATORS: tuple[str, ...] = ("add", "sub", "mul", "div")  # every search has these
# ``pow`` (a**b, Operon fits a constant exponent like any constant) reaches fractional powers such as P**0.33 and
# A**1.5: on 8 lsr_like training laws (seed 0, 2 x 60 s) it lifted the harness from SA 0.125 to 0.375 (SA by the
# rows-only rule before 2026-12-07) and acc_0.001 OOD 0.125 to 0.500 (docs/decisions.md).
DEFAULT_OPERATORS: tuple[str, ...] = BASE_OPERATORS + ("sin", "cos", "exp", "log", "sqrt", "square", "pow")
# The engine's basic operator set (the default without ``pow``): what HarnessSR's initial harness searches with.
BASIC_OPERATORS: tuple[str, ...] = tuple(o for o in DEFAULT_OPERATORS if o != "pow")
# Named operator sets a harness optimizer chooses among (``optimize`` stage 2's ``operators`` bound): a name per set,
# because a search space needs hashable choices and a report needs words, not lists.
OPERATOR_SETS: dict[str, tuple[str, ...]] = {
    "basic": BASIC_OPERATORS,
    "basic+pow": DEFAULT_OPERATORS,
    "basic+pow+tanh": DEFAULT_OPERATORS + ("tanh",),
    "basic+pow+abs": DEFAULT_OPERATORS + ("abs",),
}


def operator_set_name(operators: "list[str] | tuple[str, ...]") -> str | None:
    """The name of the set holding exactly these operators (any order), or None."""
    wanted = set(operators)
    return next((name for name, ops in OPERATOR_SETS.items() if set(ops) == wanted), None)
# Operators that make every Operon generation several times slower (scripts/bench_operator_cost.py, 4 training
# tasks, median generations/s against the default operators: cosh 0.21x, sinh 0.22x, atan 0.24x, tan 0.35x,
# acos 0.45x, asin 0.48x; tanh, abs, pow, cube, inv, neg about 1x). An SR run has a fixed time, so a plan adding
# one shrinks the search; only the harness's own operators may include them.
COSTLY_OPERATORS: tuple[str, ...] = ("cosh", "sinh", "atan", "tan", "acos", "asin")

# The functions named to a small model in role prompts (short on purpose; the grammar accepts all of the above).
PROMPT_FUNCTIONS: tuple[str, ...] = ("sin", "cos", "tan", "exp", "log", "sqrt", "abs", "tanh")

# Spellings models actually write for operators (PySR/Julia symbols, numpy names, words).
OPERATOR_ALIASES: dict[str, str] = {
    "+": "add", "plus": "add", "sum": "add", "addition": "add",
    "-": "sub", "minus": "sub", "subtract": "sub", "subtraction": "sub",
    "*": "mul", "mult": "mul", "times": "mul", "multiply": "mul", "multiplication": "mul", "prod": "mul",
    "/": "div", "divide": "div", "division": "div", "truediv": "div",
    "^": "pow", "**": "pow", "power": "pow", "powabs": "pow",
    "ln": "log", "log_abs": "log", "logabs": "log", "sqrt_abs": "sqrt", "sqrtabs": "sqrt", "fabs": "abs",
    "sq": "square", "pow2": "square", "cb": "cube", "pow3": "cube", "reciprocal": "inv", "negate": "neg",
    **FUNCTION_ALIASES,
}


def grammar_functions() -> tuple[str, ...]:
    """Every function name the expression grammar accepts, canonical names first."""
    return tuple(UNARY_FUNCTIONS) + tuple(a for a in FUNCTION_ALIASES if a != "Abs") + ("pow",)


def sympy_function_names() -> dict[str, str]:
    """sympy function class name -> canonical name (``Abs`` -> ``abs``), for reading operators out of trees."""
    return {fn.__name__: name for name, (fn, np_name) in UNARY_FUNCTIONS.items() if isinstance(fn, type)}


def operator_list_text() -> str:
    """The operators as a model reads them in a tool description: ``add sub mul ...``."""
    return " ".join(OPERATORS)
