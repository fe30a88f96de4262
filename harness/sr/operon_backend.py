"""Operon (``pyoperon.sklearn.SymbolicRegressor``) as the default SR engine.

Settings that matter, measured on pyoperon 0.6.2 (see tests/test_sr_operon.py):

* ``optimizer_iterations`` defaults to 0, i.e. no constant fitting inside the GP; we turn it on.
* The built-in model selection (minimum description length) can pick a linear model over the exact one, so we
  take the whole Pareto front (objectives r2 + length) and select by validation error ourselves.
* Operon computes in single precision: every front model is re-parsed by the project's engine and its
  constants are refitted in float64 (``evaluate_candidate(..., constants_as_params=True)``).
* There is no seeding parameter. Seeds are injected by fitting one generation, replacing the worst parents in
  ``individuals_`` with trees built from the seeds, and refitting with ``warm_start=True``. The trees are built
  node by node from the engine's sympy form, never with ``InfixParser`` (it segfaults on inputs such as
  ``exp(-x)`` and silently truncates ``x*2``).
* ``max_time`` is an int (seconds) and is honoured; with ``n_threads=1`` and a fixed ``random_state`` a
  generation-limited run is deterministic.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import re
import time
from typing import Any

import numpy as np
import sympy

from harness.core.candidates import Candidate
from harness.core.context import AgentContext, evaluate_candidate
from harness.core.expression import Expression, ExpressionError, parse_expression
from harness.core.vocabulary import COSTLY_OPERATORS, OPERATORS
from harness.sr.backends import EngineRun
from harness.sr.operon_trees import _import_operon, _inject, _seed_individuals, _seed_operators, sympy_to_tree
from harness.sr.plan import SearchPlan

__all__ = ["run_operon", "operon_kwargs", "OPERON_SYMBOLS", "compute_features", "feature_column_names",
           "substitute_features", "sympy_to_tree", "engine_candidates", "seed_candidates", "fit_context"]

SOURCE = "operon"
DEFAULT_OPTIMIZER_ITERATIONS = 25  # 10 and 50 recovered fewer benchmark tasks at 10 s (scripts/bench_engines.py)
MODEL_PRECISION = 9  # decimals written by the formatter; float32 holds ~7 significant digits anyway
UNIT_TOLERANCE = 1e-5  # |w| within this of 1 counts as a unit weight (float32 prints 1 as 0.99999994)
REFIT_SECONDS = 1.0  # per front model; the GP's constants are a good start, so one LM start suffices
ORDER_ONE = (1e-6, 1e9)  # a target whose largest |value| lies outside this range is rescaled for the engine

# plan vocabulary -> Operon primitive (only those whose printed form the expression engine parses back)
OPERON_SYMBOLS: dict[str, str] = {
    **{op: op for op in OPERATORS if op not in ("cube", "inv", "neg")},
    "cube": "square", "inv": "div", "neg": "sub",  # Operon has no cube/inv/neg; these reach them by search
}

# extras a plan may pass through to the regressor, with the bounds they are clipped to
_EXTRAS: dict[str, tuple[type, float, float]] = {
    "optimizer_iterations": (int, 0, 100),
    "local_search_probability": (float, 0.0, 1.0),
    "tournament_size": (int, 2, 50),
    "mutation_probability": (float, 0.0, 1.0),
    "crossover_probability": (float, 0.0, 1.0),
    "initialization_max_length": (int, 2, 60),
    "n_threads": (int, 1, 64),
}
# extras about the run rather than the regressor: continue a population kept from an earlier run
_RUN_EXTRAS = ("population_key", "continue_population")
MAX_KEPT_POPULATIONS = 8
_POPULATIONS: dict[str, Any] = {}  # population_key -> fitted regressor, in the process that ran it (a worker)

_CHOICE_EXTRAS: dict[str, tuple[str, ...]] = {
    "offspring_generator": ("basic", "os", "brood", "poly"),
    "reinserter": ("keep-best", "replace-worst"),
    "optimizer": ("lm", "lbfgs"),
}


# ------------------------------------------------------------------------------------------- plan -> kwargs

def operon_kwargs(plan: SearchPlan, gp_seconds: int, warnings: list[str] | None = None) -> dict[str, Any]:
    """SymbolicRegressor keyword arguments for ``plan`` (unknown or out-of-range extras are reported)."""
    warnings = warnings if warnings is not None else []
    symbols = sorted({OPERON_SYMBOLS[o] for o in plan.operators if o in OPERON_SYMBOLS} | {"add", "mul"})
    kwargs: dict[str, Any] = {
        "allowed_symbols": ",".join(symbols + ["constant", "variable"]),
        "objectives": ["r2", "length"],
        "optimizer_iterations": DEFAULT_OPTIMIZER_ITERATIONS,
        "max_length": int(plan.max_length),
        "max_depth": int(plan.max_depth),
        "population_size": int(plan.population_size),
        "generations": int(plan.generations),
        "max_evaluations": 2**62,  # the default (1e6) silently ends longer runs; time and generations rule
        "max_time": max(1, int(gp_seconds)),
        "random_state": int(plan.seed),
        "n_threads": 1,
    }
    for key, value in plan.extras.items():
        if key in _RUN_EXTRAS:
            continue
        if key in _EXTRAS:
            kind, lo, hi = _EXTRAS[key]
            try:
                number = kind(value)
            except (TypeError, ValueError):
                warnings.append(f"operon: extra {key}={value!r} is not a {kind.__name__}; ignored")
                continue
            if not math.isfinite(number):
                warnings.append(f"operon: extra {key}={value!r} is not finite; ignored")
                continue
            kwargs[key] = kind(min(max(number, lo), hi))
        elif key in _CHOICE_EXTRAS and value in _CHOICE_EXTRAS[key]:
            kwargs[key] = value
        else:
            warnings.append(f"operon: ignored extra {key!r}")
    return kwargs


# ------------------------------------------------------------------------------------------- features

def compute_features(plan: SearchPlan, context: AgentContext, X: np.ndarray,
                     warnings: list[str]) -> tuple[dict[str, str], np.ndarray]:
    """Evaluate the plan's derived features on X; features that are not finite everywhere are dropped."""
    kept: dict[str, str] = {}
    columns: list[np.ndarray] = []
    for name, text in plan.features.items():
        try:
            values = parse_expression(text, context.variables)(X)
        except ExpressionError as exc:
            warnings.append(f"feature {name}={text} dropped: {exc}")
            continue
        if not np.all(np.isfinite(values)):
            warnings.append(f"feature {name}={text} dropped: not finite on every training row")
            continue
        if np.ptp(values) == 0:
            warnings.append(f"feature {name}={text} dropped: constant on the training rows")
            continue
        kept[name] = text
        columns.append(values)
    extra = np.column_stack(columns) if columns else np.empty((X.shape[0], 0))
    return kept, extra


def feature_column_names(features: dict[str, str], variables: list[str]) -> dict[str, str]:
    """Names the engine sees for feature columns; chosen so they cannot clash with inputs or functions."""
    out: dict[str, str] = {}
    for i, name in enumerate(features):
        label = f"F{i}_"
        while label in variables:
            label += "_"
        out[name] = label
    return out


def substitute_features(text: str, replacements: dict[str, str]) -> str:
    """Replace feature column names by their parenthesised expressions (whole-word matches only)."""
    for name, expr in replacements.items():
        text = re.sub(rf"\b{re.escape(name)}\b", f"({expr})", text)
    return text


# ------------------------------------------------------------------------------------------- the run

def fit_context(context: AgentContext, plan: SearchPlan, *, engine_output: bool = False) -> AgentContext:
    """A shallow copy (same budget, state, cancel flag) fitting with the plan's loss; for engine output one
    start and a short cap suffice, since the engine's constants are already close."""
    ctx = copy.copy(context)
    ctx.fit = dataclasses.replace(context.fit, loss=plan.loss)
    if engine_output:
        ctx.fit = dataclasses.replace(ctx.fit, n_starts=1,
                                      max_seconds=min(ctx.fit.max_seconds, REFIT_SECONDS * ctx.fit.time_guard))
    return ctx


def target_scale(y: np.ndarray) -> float:
    """A power of ten that brings the target to order one for the engine when it is far from it (else 1).

    Why: Operon computes in float32 and its models are written with ``MODEL_PRECISION`` decimals, so on a target
    of order 1e-13 every model came out a constant (below ~1e-9 the printed constants alone are zeros). The engine
    searches ``y * scale``; its models are divided by the scale again and refitted in float64 on the real target.
    Targets of ordinary size are searched as they are, so the engine's measured behaviour on them is unchanged."""
    peak = float(np.max(np.abs(y))) if y.size else 0.0
    if not math.isfinite(peak) or peak == 0.0 or ORDER_ONE[0] <= peak <= ORDER_ONE[1]:
        return 1.0
    return 10.0 ** -math.floor(math.log10(peak))


def _front_texts(reg: Any, names: list[str]) -> list[str]:
    """Front models as text, most accurate first (so a refit cut short by time keeps the best ones)."""
    texts = []
    def accuracy(model: dict[str, Any]) -> tuple[float, int]:
        mse = float(model.get("mean_squared_error", math.inf))
        return (mse if math.isfinite(mse) else math.inf, int(model.get("length", 0)))

    for model in sorted(reg.pareto_front_, key=accuracy):
        try:
            texts.append(reg.get_model_string(model["tree"], MODEL_PRECISION, names=names))
        except Exception:  # a model the formatter cannot print is skipped
            continue
    return texts


def engine_candidates(texts: list[str], context: AgentContext, replacements: dict[str, str],
                      source: str, warnings: list[str], deadline: float | None = None) -> list[Candidate]:
    """Engine output -> scored Candidates: substitute features, merge numbers (via sympy), refit in float64."""
    out: list[Candidate] = []
    skipped: list[str] = []
    for text in texts:
        if context.cancelled() or (deadline is not None and time.perf_counter() > deadline and out):
            warnings.append(f"stopped refitting after {len(out)} of {len(texts)} models (time or cancel)")
            break
        full = substitute_features(text, replacements)
        try:
            # numbers are merged first (Operon puts a weight on every variable), then become free parameters
            merged = parse_expression(full, context.variables, max_nodes=400, max_depth=64)
            cand = evaluate_candidate(str(merged), context, source=source, constants_as_params=True)
        except ExpressionError as exc:
            skipped.append(f"{full[:60]}: {exc}"[:160])
            continue
        cand = _prefer_unit_weights(merged, cand, context, source)
        cand.info["engine_text"] = full[:500]
        out.append(cand)
    if skipped:
        warnings.append(f"{len(skipped)} engine model(s) rejected by the expression engine, e.g. {skipped[0]}")
    return out


def _prefer_unit_weights(expr: Expression, cand: Candidate, context: AgentContext, source: str) -> Candidate:
    """Operon writes a weight on every variable; weights that came out as ±1 are noise in the equation.
    Refit with them fixed to ±1 and keep that simpler form when it fits (almost) as well on validation."""
    units = {f: sympy.Integer(round(float(f))) for f in expr.sympy.atoms(sympy.Float)
             if abs(abs(float(f)) - 1.0) < UNIT_TOLERANCE}
    if not units:
        return cand
    try:
        simpler = Expression(expr.sympy.xreplace(units), expr.variables)
        alt = evaluate_candidate(str(simpler), context, source=source, constants_as_params=True)
    except ExpressionError:
        return cand
    err, alt_err = cand.metric("valid"), alt.metric("valid")
    if alt.complexity < cand.complexity and alt_err <= err * (1.0 + 1e-6) + 1e-14:
        return alt
    return cand


def seed_candidates(seeds: list[str], context: AgentContext, source: str,
                    warnings: list[str]) -> list[Candidate]:
    """Fit the plan's seed expressions (their numbers are starting values) so they join the pool."""
    out = []
    for text in seeds:
        try:
            out.append(evaluate_candidate(text, context, source=source, constants_as_params=True))
        except ExpressionError as exc:
            warnings.append(f"seed {text[:60]} rejected: {exc}")
    return out


def run_operon(plan: SearchPlan, context: AgentContext, *, max_seconds: float | None = None,
               seed_pool: list[Candidate] | None = None, source: str = SOURCE) -> EngineRun:
    """Run Operon on the task's train split and return its refitted Pareto front (plus the fitted seeds).

    ``seed_pool`` adds already fitted candidates (e.g. from an LLM) to the injected seeds.
    """
    op, SymbolicRegressor = _import_operon()
    t0 = time.perf_counter()
    total = float(max_seconds if max_seconds is not None else plan.time_budget)
    deadline = t0 + total
    warnings: list[str] = []
    ctx = fit_context(context, plan, engine_output=True)
    X = context.train.X
    scale = target_scale(context.train.y)
    y = context.train.y * scale  # what the engine searches; its models are scaled back before the refit

    features, extra = compute_features(plan, context, X, warnings)
    internal = feature_column_names(features, context.variables)
    names = list(context.variables) + [internal[f] for f in features]
    X_eng = np.column_stack([X, extra]) if features else X
    replacements = {internal[f]: features[f] for f in features}

    seeds = seed_candidates(plan.seeds, fit_context(context, plan), "seed", warnings) + list(seed_pool or [])
    usable_seeds = [c for c in seeds if math.isfinite(c.metric("train", "nmse"))]

    reserve = min(0.3 * total, 0.5 + 0.1 * total)  # time kept for the float64 refit of the front
    gp_seconds = int(max(1.0, math.floor(total - reserve - (time.perf_counter() - t0))))
    # the GP may vary the seeds' building blocks, except operators that would slow every generation (the seeds
    # themselves are injected and scored whatever they use). A continued population keeps its own operators.
    key = plan.extras.get("population_key")
    held = _POPULATIONS.get(str(key)) if key and plan.extras.get("continue_population") else None
    plan_shape = (X_eng.shape[1], operon_kwargs(plan, 1)["allowed_symbols"])  # what a kept population must match
    if held is not None and getattr(held, "_harness_shape", None) != plan_shape:
        held = None
        warnings.append("the kept population searched other inputs or operators; this run starts afresh")
    seed_ops = _seed_operators(usable_seeds, context.variables) - set(plan.operators) - set(COSTLY_OPERATORS)
    search_plan = plan.model_copy(update={"operators": plan.operators + sorted(seed_ops)}) \
        if seed_ops and held is None else plan
    kwargs = operon_kwargs(search_plan, gp_seconds, warnings)
    info: dict[str, Any] = {"gp_seconds": gp_seconds, "allowed_symbols": kwargs["allowed_symbols"],
                            "features": features, "n_seeds": len(usable_seeds)}
    if scale != 1.0:
        info["target_scale"] = scale

    done_before = 0
    if held is not None:
        # continue the earlier run's population (same inputs and operators), with the new seeds injected: a
        # split search then searches what one longer run would, plus the guidance
        reg = held
        if usable_seeds:
            individuals = _seed_individuals(op, reg, usable_seeds, names, context.variables, X_eng, y, warnings)
            reg.individuals_ = _inject(list(reg.individuals_), individuals, kwargs["population_size"])
            info["n_injected"] = min(len(individuals), max(1, kwargs["population_size"] // 4))
        left = int(max(1.0, math.floor(total - reserve - (time.perf_counter() - t0))))
        reg.set_params(warm_start=True, generations=kwargs["generations"], max_time=left,
                       random_state=int(plan.seed))
        info["continued"] = str(key)
        reg.fit(X_eng, y)
    elif usable_seeds and kwargs["generations"] > 1:
        reg = SymbolicRegressor(**{**kwargs, "generations": 1})
        reg.fit(X_eng, y)
        done_before = 1  # the generation that made the population the seeds are injected into
        individuals = _seed_individuals(op, reg, usable_seeds, names, context.variables, X_eng, y, warnings)
        reg.individuals_ = _inject(list(reg.individuals_), individuals, kwargs["population_size"])
        info["n_injected"] = min(len(individuals), max(1, kwargs["population_size"] // 4))
        left = int(max(1.0, math.floor(total - reserve - (time.perf_counter() - t0))))
        reg.set_params(warm_start=True, generations=kwargs["generations"] - 1, max_time=left)
        if not context.cancelled():
            reg.fit(X_eng, y)
        else:
            done_before = 0  # stats_ still counts the first fit
    else:
        reg = SymbolicRegressor(**kwargs)
        reg.fit(X_eng, y)
    if key:
        reg._harness_shape = getattr(reg, "_harness_shape", None) or plan_shape
        _POPULATIONS.pop(str(key), None)
        _POPULATIONS[str(key)] = reg
        while len(_POPULATIONS) > MAX_KEPT_POPULATIONS:
            _POPULATIONS.pop(next(iter(_POPULATIONS)))
    info["generations"] = int(reg.stats_.get("generations", 0)) + done_before  # the run's, all its fits
    info["gp_wall_seconds"] = round(time.perf_counter() - t0, 3)

    texts = _front_texts(reg, names)
    if scale != 1.0:
        texts = [f"({text}) / {scale!r}" for text in texts]
    info["front_size"] = len(texts)
    candidates = engine_candidates(texts, ctx, replacements, source, warnings, deadline)
    return EngineRun(candidates=seeds + candidates, warnings=warnings, info=info)
