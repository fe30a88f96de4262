"""PySR (``pysr.PySRRegressor``) as an optional SR engine.

PySR runs SymbolicRegression.jl and installs Julia on its first import, which needs network access. Any failure
to import or to start Julia becomes :class:`BackendUnavailable` with instructions, so ``auto`` can fall back to
Operon. Equations come back through the project's expression engine and are refitted in float64, exactly like
Operon's, so candidates from both engines are comparable.
"""

from __future__ import annotations

import inspect
import math
import time
from typing import Any

import numpy as np

from harness.core.context import AgentContext
from harness.core.expression import parse_expression
from harness.core.vocabulary import UNARY_OPERATORS
from harness.sr.backends import BackendUnavailable, EngineRun
from harness.sr.operon_backend import (
    compute_features,
    engine_candidates,
    feature_column_names,
    fit_context,
    seed_candidates,
)
from harness.sr.plan import SearchPlan

__all__ = ["run_pysr", "pysr_kwargs", "import_pysr", "INSTALL_HINT"]

SOURCE = "pysr"
INSTALL_HINT = (
    "install it with `pip install -e .[pysr]`, then run `python -c \"import pysr\"` once with network access so "
    "that it installs Julia and SymbolicRegression.jl (or point PYTHON_JULIAPKG_EXE / PYTHON_JULIAPKG_PROJECT "
    "at an existing Julia installation); until then use backend 'operon'"
)

_BINARY = {"add": "+", "sub": "-", "mul": "*", "div": "/", "pow": "^"}
_UNARY = {op: op for op in UNARY_OPERATORS}
# extras a plan may pass through, with their types
_EXTRAS: dict[str, type] = {"populations": int, "parsimony": float, "ncycles_per_iteration": int,
                            "weight_optimize": float, "adaptive_parsimony_scaling": float}
_RELATIVE_LOSS = "loss(prediction, target) = ((prediction - target) / (abs(target) + 1e-12))^2"


def import_pysr() -> Any:
    """``pysr.PySRRegressor``, or BackendUnavailable saying what to install."""
    try:
        from pysr import PySRRegressor
    except ImportError as exc:
        raise BackendUnavailable(f"pysr is not installed ({exc}); {INSTALL_HINT}") from None
    except Exception as exc:  # Julia download/precompile failures surface as arbitrary exceptions
        raise BackendUnavailable(f"pysr failed to start Julia ({type(exc).__name__}: {str(exc)[:200]}); "
                                 f"{INSTALL_HINT}") from None
    return PySRRegressor


def _julia_guess(text: str, variables: list[str]) -> str:
    """A seed in Julia syntax for PySR's ``guesses``: free parameters written in (PySR knows no c0), ``^``."""
    expr = parse_expression(text, variables)
    return expr.to_string(expr.initial_params if expr.n_params else None).replace("**", "^")


def pysr_kwargs(plan: SearchPlan, variable_names: list[str], max_seconds: float,
                warnings: list[str] | None = None, guesses: list[str] | None = None) -> dict[str, Any]:
    """PySRRegressor keyword arguments for ``plan`` (before filtering by the installed version's signature).

    ``guesses`` (engine grammar) default to the plan's seeds; pass fitted seeds to start PySR from their constants.
    """
    warnings = warnings if warnings is not None else []
    binary = [_BINARY[o] for o in plan.operators if o in _BINARY]
    unary = list(dict.fromkeys(_UNARY[o] for o in plan.operators if o in _UNARY))
    kwargs: dict[str, Any] = {
        "binary_operators": binary,
        "unary_operators": unary,
        "maxsize": int(plan.max_length),
        "maxdepth": int(plan.max_depth),
        "niterations": int(plan.generations),
        "population_size": max(20, min(int(plan.population_size), 1000)),
        "timeout_in_seconds": float(max_seconds),
        "deterministic": True,
        "parallelism": "serial",
        "random_state": int(plan.seed),
        "variable_names": list(variable_names),
        "verbosity": 0,
        "progress": False,
        "model_selection": "accuracy",
        "temp_equation_file": True,
        "delete_tempfiles": True,
    }
    if plan.loss == "relative":
        kwargs["elementwise_loss"] = _RELATIVE_LOSS
    guesses = plan.seeds if guesses is None else guesses
    if guesses:
        kwargs["guesses"] = [_julia_guess(g, variable_names) for g in guesses]
    for key, value in plan.extras.items():
        kind = _EXTRAS.get(key)
        if kind is None:
            warnings.append(f"pysr: ignored extra {key!r}")
            continue
        try:
            number = kind(value)
        except (TypeError, ValueError):
            warnings.append(f"pysr: extra {key}={value!r} is not a {kind.__name__}; ignored")
            continue
        if isinstance(number, float) and not math.isfinite(number):
            warnings.append(f"pysr: extra {key}={value!r} is not finite; ignored")
            continue
        kwargs[key] = number
    return kwargs


def supported_kwargs(regressor_cls: Any, kwargs: dict[str, Any], warnings: list[str]) -> dict[str, Any]:
    """Drop arguments the installed PySR does not take (``guesses`` is recent), saying which."""
    params = inspect.signature(regressor_cls.__init__).parameters
    if any(p.kind is p.VAR_KEYWORD for p in params.values()):
        return kwargs
    out = {k: v for k, v in kwargs.items() if k in params}
    dropped = sorted(set(kwargs) - set(out))
    if dropped:
        warnings.append(f"pysr: this version does not take {', '.join(dropped)}; ignored")
    return out


def run_pysr(plan: SearchPlan, context: AgentContext, *, max_seconds: float | None = None) -> EngineRun:
    """Run PySR on the train split; its equations are refitted in float64 by the project's engine."""
    regressor_cls = import_pysr()
    t0 = time.perf_counter()
    total = float(max_seconds if max_seconds is not None else plan.time_budget)
    warnings: list[str] = []
    X, y = context.train.X, context.train.y
    features, extra = compute_features(plan, context, X, warnings)
    internal = feature_column_names(features, context.variables)
    names = list(context.variables) + [internal[f] for f in features]
    X_eng = np.column_stack([X, extra]) if features else X
    seeds = seed_candidates(plan.seeds, fit_context(context, plan), "seed", warnings)

    fitted = [c.equation for c in seeds if math.isfinite(c.metric("train", "nmse"))]
    kwargs = pysr_kwargs(plan, names, max(1.0, 0.8 * total - (time.perf_counter() - t0)), warnings,
                         guesses=fitted)
    model = regressor_cls(**supported_kwargs(regressor_cls, kwargs, warnings))
    try:
        model.fit(X_eng, y)
    except Exception as exc:  # Julia not installed, package resolution offline, ...
        raise BackendUnavailable(f"pysr fit failed ({type(exc).__name__}: {str(exc)[:200]}); {INSTALL_HINT}") from None

    texts = [str(e) for e in model.equations_["sympy_format"]]
    replacements = {internal[f]: text for f, text in features.items()}
    ctx = fit_context(context, plan, engine_output=True)
    candidates = engine_candidates(texts, ctx, replacements, SOURCE, warnings, t0 + total)
    info = {"n_equations": len(texts), "features": features}
    return EngineRun(candidates=seeds + candidates, warnings=warnings, info=info)
