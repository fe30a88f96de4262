"""Tests for harness.core.expression: safety of the parser, round trips, numerics."""

from __future__ import annotations

import contextlib
import pickle
import tempfile
import warnings
from pathlib import Path

import numpy as np
import pytest
import sympy
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness.core.expression import Expression, ExpressionError, parse_expression

VARS = ["x", "v"]

HOSTILE = [
    "__import__('os').system('touch SENTINEL')",
    "().__class__.__bases__[0].__subclasses__()",
    "open('f','w')",
    "open('SENTINEL','w').write('x')",
    "lambda: 1",
    "[x for x in y]",
    "x.real",
    "'str'",
    "np.random.seed(1)",
    "np.load('f')",
    "eval('1')",
    "exec('open(\"SENTINEL\",\"w\")')",
    "9**9**9**9",
    "+".join(["x"] * 10000),
    "+".join(["x"] * 1200),
    "sin(" * 60 + "x" + ")" * 60,
    "(" * 300 + "x" + ")" * 300,
    "-" * 3000 + "x",
    "x if v else 1",
    "x < v",
    "x and v",
    "{'a': 1}",
    "(x, v)",
    "f'{x}'",
    "sin(x=1)",
    "sin(*x)",
    "params[x]",
    "params[-1]",
    "params[0:2]",
    "__builtins__",
    "x.__class__",
    "np.sin.__globals__",
    "math.sin(x)",
    "import os",
    "x; open('SENTINEL','w')",
    "(y := 1)",
    "1e999",
    "1e15*1e15*x",
    "sin(exp(exp(100))) + x",
    "sin(x + exp(700)*exp(700)*exp(700))",
    "pi**pi**pi**pi",
    "asin(2) + x",
    "2**60",
    "12345678901234567890",
    "1" * 5000,
    "True",
    "None",
    "1j",
    "x // v",
    "x % 2",
    "x @ v",
    "1/0",
    "log(0)",
    "sqrt(-1)",
    "",
    "   ",
]


@contextlib.contextmanager
def sentinel_dir():
    with tempfile.TemporaryDirectory() as tmp, contextlib.chdir(tmp):
        yield Path(tmp)


@pytest.mark.parametrize("text", HOSTILE, ids=lambda t: repr(t[:40]))
def test_hostile_strings_are_rejected_without_side_effects(text: str) -> None:
    with sentinel_dir() as tmp:
        with pytest.raises(ExpressionError):
            parse_expression(text, VARS)
        assert not (tmp / "SENTINEL").exists()
        assert not (tmp / "f").exists()


def test_error_messages_name_the_culprit() -> None:
    with pytest.raises(ExpressionError, match=r"unknown function 'foo'; allowed: .*sin"):
        parse_expression("foo(x)", VARS)
    with pytest.raises(ExpressionError, match=r"unknown name 'z'; variables are x, v; parameters are c0\.\.cN"):
        parse_expression("x + z", VARS)
    with pytest.raises(ExpressionError, match=r"x\.real"):
        parse_expression("x.real + 1", VARS)
    with pytest.raises(ExpressionError, match="max_nodes"):
        parse_expression("+".join(f"c{i}*x" for i in range(80)), VARS)


def test_limits_are_configurable() -> None:
    text = "+".join(f"c{i}*x" for i in range(5))
    with pytest.raises(ExpressionError):
        parse_expression(text, VARS, max_nodes=10)
    assert parse_expression(text, VARS).complexity > 10
    nested = "sin(" * 5 + "x" + ")" * 5
    with pytest.raises(ExpressionError, match="max_depth"):
        parse_expression(nested, VARS, max_depth=3)
    # a long flat sum is not deep nesting
    assert parse_expression("+".join(f"c{i}*x" for i in range(40)), VARS).n_params == 40


TOKENS = ["x", "v", "c0", "c12", "params", "[", "]", "(", ")", "+", "-", "*", "/", "**", "^", "sin", "exp",
          "np", "numpy", ".", ",", "'", '"', "1", "2.5", "1e308", "0", "pi", " ", "__import__", "os", "system",
          "open", "lambda", ":", "__class__", "for", "in", "=", "eval", "SENTINEL", "touch", "#", "\\", "\n",
          "pow", "abs", "Abs", "square", "_", "e", "j", "9", "%", "//", "<", "!", "@", "{", "}"]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.sampled_from(TOKENS), min_size=1, max_size=25).map("".join))
def test_fuzz_parses_or_raises_expression_error(text: str) -> None:
    with sentinel_dir() as tmp:
        try:
            expr = parse_expression(text, VARS)
        except ExpressionError:
            pass
        else:
            assert isinstance(expr, Expression)
            with warnings.catch_warnings():
                warnings.simplefilter("error")
                out = expr(np.ones((3, 2)))
            assert out.shape == (3,) and out.dtype == np.float64
        assert not (tmp / "SENTINEL").exists()


ROUND_TRIP = [
    "x*sin(v) + c0*x**2",
    "x^2 - v/3",
    "np.exp(-params[1]*x)*params[0]",
    "numpy.sin(x) + np.cos(v)",
    "exp(1)*x + pi",
    "abs(x) + arcsin(v/10) + arccos(v/10) + arctan(x)",
    "asin(v/10) + acos(v/10) + atan(x)",
    "sqrt(abs(x)) / (1 + v**2)",
    "pow(x, 3) + square(v) + cube(x)",
    "tanh(x) + sinh(v) - cosh(x*v)",
    "log(x**2 + 1) - tan(v/4)",
    "-x - v",
    "0.1*x + 1e-5*v - 2.5e3",
    "x**(1/3) + v**-2",
    "c0 + c1*x + c2*x**2 + c3*x**3",
]


@pytest.mark.parametrize("text", ROUND_TRIP)
def test_str_round_trip(text: str) -> None:
    a = parse_expression(text, VARS)
    b = parse_expression(str(a), VARS)
    assert a.parameters == b.parameters
    rng = np.random.default_rng(1)
    X = rng.uniform(0.5, 3.0, (50, 2))
    p = rng.uniform(0.5, 2.0, a.n_params)
    np.testing.assert_allclose(a(X, p), b(X, p), rtol=1e-12)
    assert a == b or sympy.simplify(a.sympy - b.sympy) == 0


def test_params_canonicalisation_and_alignment() -> None:
    e = parse_expression("params[0]*x + params[3]*v", VARS)
    assert e.parameters == ("c0", "c3") and e.n_params == 2
    assert str(e) == str(parse_expression("c0*x + c3*v", VARS))
    X = np.array([[1.0, 2.0], [3.0, 4.0]])
    np.testing.assert_allclose(e(X, [2.0, 5.0]), 2 * X[:, 0] + 5 * X[:, 1])
    ten = np.arange(10.0)  # LLM-SR style 10-slot vector, read by index
    np.testing.assert_allclose(e(X, ten), 0 * X[:, 0] + 3 * X[:, 1])
    np.testing.assert_array_equal(e.initial_params, [1.0, 1.0])


def test_constants_as_params() -> None:
    e = parse_expression("c0*x + 2.5*x**2 + 3*exp(-0.5*v)", VARS, constants_as_params=True)
    assert e.parameters == ("c0", "c1", "c2", "c3")
    np.testing.assert_array_equal(e.initial_params, [1.0, 2.5, 3.0, -0.5])
    assert sympy.Integer(2) in e.sympy.atoms(sympy.Integer)  # exponent stays an integer
    X = np.array([[1.0, 2.0]])
    ref = parse_expression("x + 2.5*x**2 + 3*exp(-0.5*v)", VARS)
    np.testing.assert_allclose(e(X), ref(X))
    plain = parse_expression("2.5*x", VARS)
    assert plain.n_params == 0 and plain.initial_params.shape == (0,)


@pytest.mark.parametrize("text,expected", [
    ("x", 1), ("x + v", 3), ("x - v", 3), ("x / v", 3), ("1/x", 3), ("-x", 2), ("sqrt(x)", 2),
    ("x*sin(v) + c0*x**2", 10), ("c0*exp(-c1*x)", 7), ("x/2", 3), ("sin(x)*cos(v)", 5),
    ("c0*x**2 + c1*x + c2", 11),
])
def test_complexity(text: str, expected: int) -> None:
    assert parse_expression(text, VARS).complexity == expected


def test_compiled_function_matches_numpy() -> None:
    rng = np.random.default_rng(0)
    X = rng.uniform(0.1, 2.0, (200, 2))
    x, v = X.T
    e = parse_expression("c0*np.sin(c1*x) + c2*log(v)*sqrt(x) - abs(x - v)^2 / (1 + tanh(v))", VARS)
    p = np.array([1.3, -0.7, 2.0])
    ref = p[0] * np.sin(p[1] * x) + p[2] * np.log(v) * np.sqrt(x) - np.abs(x - v) ** 2 / (1 + np.tanh(v))
    np.testing.assert_allclose(e(X, p), ref, rtol=1e-13)
    assert e(X, p).dtype == np.float64


def test_scalar_results_broadcast_and_one_variable() -> None:
    e = parse_expression("c0 + 2", ["x"])
    out = e(np.zeros((4, 1)), [1.0])
    np.testing.assert_array_equal(out, [3.0] * 4)
    np.testing.assert_array_equal(parse_expression("x*2", ["x"])(np.arange(3.0)), [0.0, 2.0, 4.0])
    with pytest.raises(ValueError):
        e(np.zeros((4, 2)))


def test_overflow_is_quiet() -> None:
    e = parse_expression("exp(c0*x) / (x - 1) + log(v) + sqrt(v) + arcsin(x)", VARS)
    X = np.array([[1000.0, -1.0], [1.0, 0.0], [0.5, 4.0]])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = e(X, [1.0])
        zero = parse_expression("c0/c1", VARS)(X, [1.0, 0.0])
        big = parse_expression("c0**c1", VARS)(X, [10.0, 1000.0])
    assert not np.isfinite(out[:2]).any() and np.isfinite(out[2])
    assert np.isinf(zero).all() and np.isinf(big).all()


def test_with_params_and_to_string() -> None:
    e = parse_expression("c0*sin(c1*x) + v", VARS)
    p = [1.2345678901234567, -0.1]
    fixed = e.with_params(p)
    assert fixed.n_params == 0
    X = np.random.default_rng(0).uniform(-1, 1, (10, 2))
    np.testing.assert_allclose(fixed(X), e(X, p), rtol=1e-14, atol=1e-15)
    text = e.to_string(p, names=["time", "speed"])
    assert "time" in text and "speed" in text and "1.2345678901234567" in text
    again = parse_expression(text, ["time", "speed"])
    np.testing.assert_allclose(again(X), e(X, p), rtol=1e-14, atol=1e-15)
    assert e.to_string() == str(e)
    sq = parse_expression("c0**2 + x**c1", VARS)
    text = sq.to_string([-0.5, -2.0])
    np.testing.assert_allclose(parse_expression(text, VARS)(X), sq(X, [-0.5, -2.0]), rtol=1e-14)
    with pytest.raises(ExpressionError):
        e.with_params([np.nan, 1.0])


def test_simplified_latex_and_pickle() -> None:
    e = parse_expression("sin(x)**2 + cos(x)**2 + c0*x - c0*x + v*v", VARS)
    s = e.simplified()
    assert s.complexity < e.complexity and s.n_params == 0
    X = np.random.default_rng(0).uniform(-1, 1, (10, 2))
    np.testing.assert_allclose(s(X), 1 + X[:, 1] ** 2)
    assert "\\sin" in parse_expression("sin(x)", VARS).latex()
    e2 = pickle.loads(pickle.dumps(e))
    np.testing.assert_allclose(e2(X, [1.0]), e(X, [1.0]))


def test_pyoperon_style_and_power_caret() -> None:
    e = parse_expression("((X1 * 0.5) + sin(X2)) - (X1 ^ 2)", ["X1", "X2"])
    X = np.array([[2.0, 0.0]])
    np.testing.assert_allclose(e(X), [1.0 - 4.0])


def test_bad_variable_names() -> None:
    for bad in (["sin"], ["c0"], ["x", "x"], ["a b"], ["params"], ["__x"]):
        with pytest.raises(ExpressionError):
            parse_expression("1", bad)


_leaf = st.sampled_from(["x", "v", "c0", "c1", "params[2]", "pi", "2", "0.5", "3.25", "1e-3"])
_grammar = st.recursive(
    _leaf,
    lambda sub: st.one_of(
        st.tuples(sub, st.sampled_from(["+", "-", "*", "/", "**", "^"]), sub).map(lambda t: f"({t[0]}{t[1]}{t[2]})"),
        st.tuples(st.sampled_from(["sin", "np.cos", "exp", "log", "sqrt", "abs", "tanh", "arctan", "square", "-"]),
                  sub).map(lambda t: f"{t[0]}({t[1]})"),
    ),
    max_leaves=12,
)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_grammar)
def test_fuzz_grammar_round_trip(text: str) -> None:
    try:
        a = parse_expression(text, VARS)
    except ExpressionError:
        return  # e.g. a constant subexpression dividing by zero
    b = parse_expression(str(a), VARS)
    assert b.parameters == a.parameters
    X = np.random.default_rng(2).uniform(0.2, 1.5, (20, 2))
    p = np.linspace(0.7, 1.3, a.n_params)
    ya, yb = a(X, p), b(X, p)
    np.testing.assert_allclose(ya, yb, rtol=1e-9, atol=1e-12)


def test_a_hypothesis_written_as_an_equation_keeps_its_right_hand_side() -> None:
    """Models write "v = -c0*x" or "a(x, v) = ..." for the target: the right-hand side is the hypothesis; a
    comparison is not an assignment."""
    from harness.core.expression import right_hand_side

    assert right_hand_side("v = -c0 * x + c1") == "-c0 * x + c1"
    assert right_hand_side("  a(x, v) = -x - v") == "-x - v"
    assert right_hand_side("dv_dt=x**2") == "x**2"
    assert right_hand_side("-c0*x") == "-c0*x" and right_hand_side("x == 1") == "x == 1"
    assert right_hand_side("x <= 1") == "x <= 1"
