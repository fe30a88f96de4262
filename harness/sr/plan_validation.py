"""``validate_plan``: a runnable :class:`~harness.sr.plan.SearchPlan` out of anything a model, a config file or
code wrote, with the list of what was changed in plain language (the floor is applied after it, by
``harness.sr.settings.SearchSettings.admit``: guidance only widens).

It never fails on content: it coerces types, drops what no engine can do (unknown operators, unparseable seeds
and features), clips sizes and times to limits. Seeds and features are checked with the project's expression
engine, so every text that reaches an engine has already been parsed safely.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

from harness.core.expression import ExpressionError, parse_expression, right_hand_side
from harness.core.task import RESERVED_NAMES
from harness.core.vocabulary import (
    BASE_OPERATORS,
    DEFAULT_OPERATORS,
    OPERATOR_ALIASES,
    OPERATORS,
)
from harness.sr.plan import PlanLimits, SearchPlan

__all__ = ["validate_plan"]

_KEY_ALIASES: dict[str, str] = {
    "ops": "operators", "functions": "operators", "operator_set": "operators", "allowed_operators": "operators",
    "primitives": "operators", "allowed_symbols": "operators",
    "maxsize": "max_length", "max_size": "max_length", "size": "max_length", "length": "max_length",
    "max_complexity": "max_length", "complexity": "max_length", "max_nodes": "max_length",
    "maxdepth": "max_depth", "depth": "max_depth",
    "time": "time_budget", "time_budget_s": "time_budget", "seconds": "time_budget", "timeout": "time_budget",
    "timeout_in_seconds": "time_budget", "max_time": "time_budget", "time_limit": "time_budget",
    "niterations": "generations", "iterations": "generations", "n_generations": "generations",
    "population": "population_size", "pop_size": "population_size", "populationsize": "population_size",
    "hypotheses": "seeds", "seed_expressions": "seeds", "guesses": "seeds", "initial_expressions": "seeds",
    "skeletons": "seeds", "expressions": "seeds",
    "derived_features": "features", "feature": "features", "new_features": "features",
    "notes": "constraints", "constraint": "constraints", "hints": "constraints",
    "loss_function": "loss", "objective": "loss", "elementwise_loss": "loss",
    "random_state": "seed", "random_seed": "seed", "rng_seed": "seed",
    "backend_options": "extras", "options": "extras", "extra": "extras",
}
_LOSS_ALIASES: dict[str, str] = {
    "mse": "mse", "l2": "mse", "l2distloss()": "mse", "l2distloss": "mse", "squared": "mse", "rmse": "mse",
    "nmse": "mse", "mean_squared_error": "mse", "least_squares": "mse",
    "relative": "relative", "rel": "relative", "relative_mse": "relative", "mape": "relative",
    "relative_error": "relative", "percent": "relative",
}


class _Changes(list):
    """The list of changes, with a helper that keeps messages short."""

    def note(self, text: str) -> None:
        text = text if len(text) <= 240 else text[:237] + "..."
        if text not in self:
            self.append(text)


def _short(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _as_number(value: Any, kind: type) -> float | int | None:
    """Coerce ints, floats and numeric strings ('30', '10s', '1e3'); None when impossible."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        number = float(value)
    elif isinstance(value, str):
        m = re.search(r"[-+]?\d*\.?\d+(?:[eE][-+]?\d+)?", value)
        if not m:
            return None
        number = float(m.group(0))
    else:
        return None
    if not math.isfinite(number):
        return None
    return int(round(number)) if kind is int else number


def _as_list(value: Any) -> list[Any] | None:
    if value is None:
        return []
    if isinstance(value, (list, tuple, set)):
        return list(value)
    if isinstance(value, str):
        return [value]
    return None


def _load_raw(raw: Any, changes: _Changes) -> dict[str, Any]:
    """Turn a plan given as SearchPlan, dict, JSON text or anything else into a dict of fields."""
    if raw is None:
        return {}
    if isinstance(raw, SearchPlan):
        return raw.model_dump()
    if isinstance(raw, dict):
        return dict(raw)
    if isinstance(raw, (bytes, bytearray)):
        raw = raw.decode("utf-8", "replace")
    if isinstance(raw, str):
        text = raw.strip()
        if not text:
            return {}
        start, end = text.find("{"), text.rfind("}")
        if start >= 0 and end > start:
            try:
                data = json.loads(text[start : end + 1])
                if isinstance(data, dict):
                    return data
            except json.JSONDecodeError as exc:
                changes.note(f"plan text is not valid JSON ({exc.msg}); using the default plan")
                return {}
        changes.note("plan text contains no JSON object; using the default plan")
        return {}
    changes.note(f"plan of type {type(raw).__name__} is not a JSON object; using the default plan")
    return {}


def _normalise_keys(data: dict[str, Any], changes: _Changes) -> dict[str, Any]:
    fields = set(SearchPlan.model_fields)
    out: dict[str, Any] = {}
    for key, value in data.items():
        k = str(key).strip().lower().replace("-", "_").replace(" ", "_")
        if k in ("binary_operators", "unary_operators"):  # PySR-style split lists join the one list
            items = _as_list(value) or []
            out.setdefault("operators", [])
            if isinstance(out["operators"], list):
                out["operators"] = out["operators"] + items
            continue
        k = _KEY_ALIASES.get(k, k)
        if k not in fields:
            changes.note(f"ignored unknown field {str(key)[:40]!r}")
            continue
        if k in out and k != "operators":
            changes.note(f"field {str(key)[:40]!r} repeats {k!r}; kept the first")
            continue
        out[k] = value
    return out


def _operators(value: Any, changes: _Changes) -> list[str]:
    items = _as_list(value)
    if items is None:
        changes.note(f"operators must be a list of names, got {_short(value)}; using the default operators")
        return list(DEFAULT_OPERATORS)
    names: list[str] = []
    for item in items:
        if not isinstance(item, str):
            changes.note(f"dropped operator {_short(item)} (not a name)")
            continue
        for token in re.split(r"[,\s;|]+", item.strip()):
            if not token:
                continue
            t = token.strip().strip("'\"").lower()
            t = re.sub(r"\(.*\)$", "", t) or t  # 'sin(x)' -> 'sin'
            t = t.removeprefix("np.").removeprefix("numpy.")
            name = OPERATOR_ALIASES.get(t, t)
            if name not in OPERATORS:
                changes.note(f"dropped unknown operator {token[:30]!r} (known: {', '.join(OPERATORS)})")
                continue
            if name not in names:
                names.append(name)
    missing = [b for b in BASE_OPERATORS if b not in names]
    if not names:
        changes.note("no usable operators given; using the default operators")
        return list(DEFAULT_OPERATORS)
    if missing:
        changes.note(f"added the basic arithmetic operators {', '.join(missing)} (every search needs them)")
        names = list(BASE_OPERATORS) + [n for n in names if n not in BASE_OPERATORS]
    return names


def _clip_number(name: str, value: Any, default: float, lo: float, hi: float, kind: type,
                 changes: _Changes) -> float | int:
    number = _as_number(value, kind)
    if number is None:
        changes.note(f"{name}={_short(value)} is not a number; using {default:g}")
        return kind(default)
    if isinstance(value, str):
        changes.note(f"{name}: read {_short(value)} as {number:g}")
    elif kind is int and float(value) != number:
        changes.note(f"{name}: rounded {value:g} to {number}")
    clipped = min(max(number, lo), hi)
    if clipped != number:
        changes.note(f"{name}={number:g} is outside [{lo:g}, {hi:g}]; clipped to {clipped:g}")
    return kind(clipped)


def _expression_texts(value: Any, what: str, changes: _Changes) -> list[Any]:
    items = _as_list(value)
    if items is None:
        if isinstance(value, dict):
            return list(value.values())
        changes.note(f"{what} must be a list of expressions, got {_short(value)}; ignored")
        return []
    return items


def _seeds(value: Any, variables: list[str], limits: PlanLimits, changes: _Changes) -> list[str]:
    out: list[str] = []
    for item in _expression_texts(value, "seeds", changes):
        if isinstance(item, dict):  # {"expression": "..."} records
            item = item.get("expression") or item.get("equation") or item.get("expr")
        if not isinstance(item, str):
            changes.note(f"dropped seed {_short(item)} (not a string)")
            continue
        text = right_hand_side(item.strip())  # "y = x*v" -> "x*v"
        try:
            expr = parse_expression(text, variables, max_nodes=limits.max_seed_nodes)
        except ExpressionError as exc:
            changes.note(f"dropped seed {text[:60]!r}: {exc}")
            continue
        canon = str(expr)
        if not any(s.name in variables for s in expr.sympy.free_symbols):
            changes.note(f"dropped seed {text[:60]!r}: it uses no input variable")
            continue
        if canon in out:
            continue
        if len(out) >= limits.max_seeds:
            changes.note(f"kept the first {limits.max_seeds} seeds; dropped {text[:40]!r} and later ones")
            break
        out.append(canon)
    return out


def _features(value: Any, variables: list[str], limits: PlanLimits, changes: _Changes) -> dict[str, str]:
    """Features as {name: expression}; accepts a dict, 'name = expr' strings or bare expressions."""
    pairs: list[tuple[str | None, Any]] = []
    if isinstance(value, dict):
        pairs = [(str(k), v) for k, v in value.items()]
    else:
        items = _as_list(value)
        if items is None:
            changes.note(f"features must be a list or object of expressions, got {_short(value)}; ignored")
            return {}
        for item in items:
            if isinstance(item, dict):
                pairs.append((item.get("name"), item.get("expression") or item.get("expr") or item.get("formula")))
            elif isinstance(item, str) and "=" in item and "==" not in item:
                name, expr = item.split("=", 1)
                pairs.append((name.strip(), expr.strip()))
            else:
                pairs.append((None, item))
    out: dict[str, str] = {}
    seen: set[str] = set()
    for name, text in pairs:
        if not isinstance(text, str) or not text.strip():
            changes.note(f"dropped feature {_short(text)} (not an expression string)")
            continue
        try:
            expr = parse_expression(text, variables, max_nodes=limits.max_seed_nodes)
        except ExpressionError as exc:
            changes.note(f"dropped feature {text[:60]!r}: {exc}")
            continue
        if expr.n_params:
            changes.note(f"dropped feature {text[:60]!r}: it has free parameters {', '.join(expr.parameters)}")
            continue
        canon = str(expr)
        if canon in variables or not expr.sympy.free_symbols:
            changes.note(f"dropped feature {text[:60]!r}: it is a plain input or a constant")
            continue
        if canon in seen:
            continue
        if len(out) >= limits.max_features:
            changes.note(f"kept the first {limits.max_features} features; dropped {text[:40]!r} and later ones")
            break
        label = name if isinstance(name, str) and name.isidentifier() else None
        if label is None or label in variables or label in out or label in RESERVED_NAMES or re.match(r"c\d+$", label):
            label = _free_name(len(out), variables, out)
            if name:
                changes.note(f"feature name {str(name)[:30]!r} unusable; named it {label}")
        out[label] = canon
        seen.add(canon)
    return out


def _free_name(i: int, variables: list[str], taken: dict[str, str]) -> str:
    k = i
    while f"f{k}" in variables or f"f{k}" in taken:
        k += 1
    return f"f{k}"


def _notes(value: Any, limits: PlanLimits, changes: _Changes) -> list[str]:
    items = _as_list(value)
    if items is None:
        items = [json.dumps(value, default=str)] if isinstance(value, dict) else [str(value)]
    out = []
    for item in items[: limits.max_notes]:
        text = item if isinstance(item, str) else json.dumps(item, default=str)
        out.append(text[: limits.max_note_chars])
    if len(items) > limits.max_notes:
        changes.note(f"kept the first {limits.max_notes} constraint notes")
    return out


def validate_plan(
    raw: dict[str, Any] | SearchPlan | str | None,
    variables: list[str] | tuple[str, ...],
    limits: PlanLimits | dict[str, Any] | None = None,
    *,
    default_operators: list[str] | None = None,
) -> tuple[SearchPlan, list[str]]:
    """Make a runnable plan out of anything; return it with the list of what was changed or ignored.

    Never raises on plan content: the caller always gets a plan an engine can run. ``default_operators``: the
    operators of a plan that names none (the floor's, under ``SearchSettings.admit``; else the built-in default).
    """
    variables = list(variables)
    lim = limits if isinstance(limits, PlanLimits) else PlanLimits(**(limits or {}))
    changes = _Changes()
    data = _normalise_keys(_load_raw(raw, changes), changes)
    base = SearchPlan()
    fields: dict[str, Any] = {}

    if "operators" in data:
        fields["operators"] = _operators(data["operators"], changes)
    fields["max_length"] = _clip_number(
        "max_length", data.get("max_length", base.max_length), base.max_length, lim.min_length, lim.max_length,
        int, changes)
    fields["max_depth"] = _clip_number(
        "max_depth", data.get("max_depth", base.max_depth), base.max_depth, lim.min_depth, lim.max_depth, int,
        changes)
    fields["time_budget"] = _clip_number(
        "time_budget", data.get("time_budget", min(base.time_budget, lim.max_time)), base.time_budget,
        lim.min_time, lim.max_time, float, changes)
    fields["generations"] = _clip_number(
        "generations", data.get("generations", base.generations), base.generations, lim.min_generations,
        lim.max_generations, int, changes)
    fields["population_size"] = _clip_number(
        "population_size", data.get("population_size", base.population_size), base.population_size,
        lim.min_population, lim.max_population, int, changes)
    if "seed" in data:
        number = _as_number(data["seed"], int)
        if number is None:
            changes.note(f"seed={_short(data['seed'])} is not an integer; using 0")
        fields["seed"] = abs(int(number or 0)) % (2**31)
    if "loss" in data:
        key = str(data["loss"]).strip().lower()
        loss = _LOSS_ALIASES.get(key)
        if loss is None:
            changes.note(f"unknown loss {_short(data['loss'])} (use 'mse' or 'relative'); using 'mse'")
            loss = "mse"
        fields["loss"] = loss
    if "seeds" in data:
        fields["seeds"] = _seeds(data["seeds"], variables, lim, changes)
    if "features" in data:
        fields["features"] = _features(data["features"], variables, lim, changes)
    if "constraints" in data:
        fields["constraints"] = _notes(data["constraints"], lim, changes)
    if "extras" in data:
        if isinstance(data["extras"], dict):
            fields["extras"] = {str(k)[:40]: v for k, v in data["extras"].items()}
        else:
            changes.note(f"extras must be an object, got {_short(data['extras'])}; ignored")
    if "operators" not in data and default_operators is not None:
        fields["operators"] = list(default_operators)
    return SearchPlan(**fields), list(changes)
