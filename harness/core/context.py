"""Run context: what a tool or role needs from the run without the model ever seeing raw arrays.

``AgentContext`` carries the task, its train/valid split, fitting settings, the workspace folder, the budget and
the cancellation flag. ``evaluate_candidate`` is the single path from an expression text to a scored
:class:`Candidate`: parse with the engine, fit constants on train in float64, score on every split.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Collection
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any

import numpy as np

from harness.core.candidates import Candidate
from harness.core.task import Split, Task


class BudgetExhausted(Exception):
    """Raised when a run would exceed its budget; the run stops and keeps what it has."""


@dataclass
class Budget:
    """Limits of one run; ``None`` means unlimited."""

    max_llm_calls: int | None = None
    max_solver_runs: int | None = None
    max_seconds: float | None = None
    max_tokens: int | None = None

    def __post_init__(self) -> None:
        for name in ("max_llm_calls", "max_solver_runs", "max_seconds", "max_tokens"):
            value = getattr(self, name)
            if value is None:
                continue
            positive = name == "max_seconds"  # zero calls/runs/tokens is a meaningful limit; zero seconds is not
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0 or (positive and value == 0):
                kind = "a positive number" if positive else "a number >= 0"
                raise ValueError(f"budget.{name} must be {kind} or null (unlimited), got {value!r}")


class RunStatus(str, Enum):
    """How a run ended: the one vocabulary of the agent runtime, the workflow runner and their saved files.
    A ``str``: it compares, prints and serialises as its value."""

    __str__ = str.__str__
    __format__ = str.__format__

    COMPLETED = "completed"
    TARGET_REACHED = "target_reached"
    BUDGET_EXHAUSTED = "budget_exhausted"
    CANCELLED = "cancelled"  # a stop from the caller (cancel event, operator)
    FAILED_LLM = "failed_llm"  # the model could not be reached
    FAILED = "failed"  # a crash; what was found is kept

    @classmethod
    def parse(cls, text: str) -> "RunStatus | str":
        """A saved status, with the spellings of older files ("aborted", "error"); unknown text stays text."""
        text = {"aborted": "cancelled", "error": "failed"}.get(text, text)
        try:
            return cls(text)
        except ValueError:
            return text


BUDGET_LIMITS: tuple[str, ...] = ("llm_calls", "solver_runs", "tokens", "seconds")


@dataclass
class _Usage:
    """The counters themselves, shared by every scope of one tracker."""

    started: float = field(default_factory=time.monotonic)
    llm_calls: int = 0
    tokens: int = 0
    solver_runs: int = 0
    tool_calls: int = 0
    paused: float = 0.0  # seconds the user held the run (paused, or waiting for a message): not spent
    lock: threading.Lock = field(default_factory=threading.Lock)


class BudgetTracker:
    """Thread-safe counters of what a run has used, checked against its :class:`Budget`.

    ``scoped`` gives a view on the same counters that checks fewer limits: inside a workflow an SR run checks only
    solver runs and seconds, because the runner keeps the LLM limits itself (a role call past them is skipped, not
    an SR run)."""

    def __init__(self, budget: Budget | None = None, *, checks: Collection[str] = BUDGET_LIMITS,
                 _usage: _Usage | None = None):
        unknown = set(checks) - set(BUDGET_LIMITS)
        if unknown:
            raise ValueError(f"unknown budget limits {sorted(unknown)}; known: {', '.join(BUDGET_LIMITS)}")
        self.budget = budget or Budget()
        self.checks = frozenset(checks)
        self._usage = _usage or _Usage()

    def scoped(self, checks: Collection[str]) -> "BudgetTracker":
        """The same counters and budget, checked against ``checks`` only."""
        return BudgetTracker(self.budget, checks=checks, _usage=self._usage)

    started = property(lambda self: self._usage.started)
    llm_calls = property(lambda self: self._usage.llm_calls)
    tokens = property(lambda self: self._usage.tokens)
    solver_runs = property(lambda self: self._usage.solver_runs)
    tool_calls = property(lambda self: self._usage.tool_calls)

    def elapsed(self) -> float:
        return time.monotonic() - self._usage.started - self._usage.paused

    def add_paused(self, seconds: float) -> None:
        """Time the user held the run at a boundary does not count against ``max_seconds``."""
        with self._usage.lock:
            self._usage.paused += max(0.0, float(seconds))

    def add_llm(self, calls: int = 1, tokens: int = 0) -> None:
        with self._usage.lock:
            self._usage.llm_calls += calls
            self._usage.tokens += tokens

    def add_solver(self, runs: int = 1) -> None:
        with self._usage.lock:
            self._usage.solver_runs += runs

    def add_tool(self, calls: int = 1) -> None:
        with self._usage.lock:
            self._usage.tool_calls += calls

    def exhausted(self) -> str | None:
        """Why the budget is spent (among the limits this scope checks), or ``None`` while some is left."""
        b, u, on = self.budget, self._usage, self.checks
        if "llm_calls" in on and b.max_llm_calls is not None and u.llm_calls >= b.max_llm_calls:
            return f"LLM call budget spent ({u.llm_calls}/{b.max_llm_calls})"
        if "solver_runs" in on and b.max_solver_runs is not None and u.solver_runs >= b.max_solver_runs:
            return f"solver budget spent ({u.solver_runs}/{b.max_solver_runs})"
        if "tokens" in on and b.max_tokens is not None and u.tokens >= b.max_tokens:
            return f"token budget spent ({u.tokens}/{b.max_tokens})"
        if "seconds" in on and b.max_seconds is not None and self.elapsed() >= b.max_seconds:
            return f"time budget spent ({self.elapsed():.1f}s/{b.max_seconds}s)"
        return None

    def check(self) -> None:
        reason = self.exhausted()
        if reason:
            raise BudgetExhausted(reason)

    def seconds_left(self) -> float | None:
        if self.budget.max_seconds is None:
            return None
        return max(0.0, self.budget.max_seconds - self.elapsed())

    def snapshot(self) -> dict[str, Any]:
        u = self._usage
        with u.lock:
            return {"llm_calls": u.llm_calls, "tokens": u.tokens, "solver_runs": u.solver_runs,
                    "tool_calls": u.tool_calls, "seconds": round(self.elapsed(), 3)}


@dataclass
class FitSettings:
    """How candidate constants are fitted (see harness.core.evaluator.fit)."""

    n_starts: int = 4
    max_seconds: float = 2.0
    loss: str = "mse"
    # every seconds cap of a solve's steps after the engine (these fits, the refits of the engine's front, the
    # combination, sparse regression, the precision polish) is this many times its usual length: a solve bound by
    # work (workflows.params.SRSettings.time_guard) keeps them only as guards, so a loaded machine changes nothing
    time_guard: float = 1.0
    valid_fraction: float = 0.2
    valid_split: str = "random"  # "random" | "edge" (Task.train_valid)
    edge_check: bool = False  # also score split "edge" (see edge_metrics): what the "extrapolation" selection reads


@dataclass
class AgentContext:
    """Everything a run's tools and roles share. Built once per (task, run)."""

    task: Task
    seed: int = 0
    workspace: Path | None = None
    fit: FitSettings = field(default_factory=FitSettings)
    budget: BudgetTracker = field(default_factory=BudgetTracker)
    cancel_event: threading.Event = field(default_factory=threading.Event)
    llm: Any = None
    state: Any = None  # the SearchRunState when a run records one
    # what the run's SR tools are held to: a harness.sr.settings.SearchSettings (None: harness.sr's defaults); typed
    # as Any because the core never imports the layer above it, not even for a type (pyproject's import contracts)
    search: Any = None
    extras: dict[str, Any] = field(default_factory=dict)  # per-run caches of tools (e.g. an experience buffer)
    _train: Split | None = field(default=None, init=False, repr=False)
    _valid: Split | None = field(default=None, init=False, repr=False)
    _edge_rows: tuple[Split, Split] | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        self._train, self._valid = self.task.train_valid(self.fit.valid_fraction, seed=self.seed,
                                                            mode=self.fit.valid_split)

    @property
    def train(self) -> Split:
        assert self._train is not None
        return self._train

    @property
    def valid(self) -> Split:
        assert self._valid is not None
        return self._valid

    @property
    def variables(self) -> list[str]:
        return list(self.task.input_names)

    def eval_splits(self) -> dict[str, Split]:
        """Splits a candidate is scored on: train, valid, and the task's test splits where present."""
        out = {"train": self.train, "valid": self.valid}
        if self.task.test_id is not None:
            out["test_id"] = self.task.test_id
        if self.task.test_ood is not None:
            out["test_ood"] = self.task.test_ood
        return out

    def cancelled(self) -> bool:
        return self.cancel_event.is_set()

    def edge_rows(self) -> tuple[Split, Split]:
        """(inner, edge): the task's train rows split by extremeness (``Task.train_valid(mode="edge")``)."""
        if self._edge_rows is None:
            self._edge_rows = self.task.train_valid(self.fit.valid_fraction, seed=self.seed, mode="edge")
        return self._edge_rows


def edge_metrics(expr: Any, params: np.ndarray, context: AgentContext) -> dict[str, float]:
    """How well a skeleton extrapolates a little: refit its constants on the inner rows of train (from ``params``),
    then score the outer rows (the most extreme inputs).

    Why: a near-exact fit with the wrong form (a spurious cos term, an extra power) fits the whole training range
    but drifts once its constants must carry it past the rows they were fitted on; the true law does not. The
    search itself still fits all rows (an edge *validation* split starves it of the most informative ones).
    """
    from harness.core.evaluator import fit, score

    inner, edge = context.edge_rows()
    if not expr.n_params:
        return score(expr, params, edge.X, edge.y)
    expr.initial_params = np.asarray(params, dtype=float)
    result = fit(expr, inner.X, inner.y, n_starts=1, seed=context.seed, max_seconds=context.fit.max_seconds,
                 loss=context.fit.loss)
    return score(expr, np.asarray(result.params, dtype=float), edge.X, edge.y)


def add_edge_scores(candidates: list[Candidate], task: Task, seed: int = 0) -> None:
    """Give each candidate lacking one its edge score (from its skeleton and fitted constants), in place.

    For stored pools (a benchmark's, an optimizer's run folders), so selection rules can be compared afterwards.
    A skeleton that no longer parses scores +inf and says why.
    """
    from harness.core.expression import ExpressionError, parse_expression

    ctx = AgentContext(task=task, seed=seed, fit=FitSettings(edge_check=True))
    for cand in candidates:
        if "edge" in cand.metrics:
            continue
        try:
            expr = parse_expression(cand.expression, task.input_names)
            cand.metrics["edge"] = edge_metrics(expr, np.asarray(cand.params, dtype=float), ctx)
        except (ExpressionError, ValueError) as exc:
            cand.metrics["edge"] = {"nmse": float("inf"), "error": str(exc)[:200]}


def evaluate_candidate(
    text: str,
    context: AgentContext,
    *,
    source: str = "",
    initial_params: np.ndarray | list[float] | None = None,
    constants_as_params: bool = False,
    count_solver_run: bool = False,
) -> Candidate:
    """Parse ``text``, fit its constants on train, score every split. Raises ``ExpressionError`` on bad text.

    ``constants_as_params`` turns numeric literals into free parameters first (used for engine output written
    in single precision, so its constants are refitted in float64 starting from the engine's values).
    """
    from harness.core.evaluator import fit, score
    from harness.core.expression import ExpressionError, parse_expression

    expr = parse_expression(text, context.variables, constants_as_params=constants_as_params)
    if count_solver_run:
        context.budget.add_solver()
    if initial_params is not None and expr.n_params:
        start = np.asarray(initial_params, dtype=float)
        if start.shape == (expr.n_params,):
            expr.initial_params = start
    result = fit(
        expr,
        context.train.X,
        context.train.y,
        n_starts=context.fit.n_starts,
        seed=context.seed,
        max_seconds=context.fit.max_seconds,
        loss=context.fit.loss,
    )
    params = np.asarray(result.params, dtype=float)
    equation = expr.to_string(params)
    try:  # a finished run's answer must survive printing and re-parsing (degenerate fits give 1e164 factors)
        parse_expression(equation, context.variables, max_nodes=1000, max_depth=128)
    except ExpressionError as exc:
        raise ExpressionError(f"fitted equation cannot be written back ({exc}); candidate dropped") from None
    metrics = {"train": result.metrics}
    for name, split in context.eval_splits().items():
        if name == "train":
            continue
        metrics[name] = score(expr, params, split.X, split.y)
    if context.fit.edge_check:
        metrics["edge"] = edge_metrics(expr, params, context)
    return Candidate(
        expression=str(expr),
        params=[float(p) for p in params],
        equation=equation,
        complexity=int(expr.complexity),
        metrics=metrics,
        source=source,
        status=result.status,
        info={"fit_message": result.message, "fit_seconds": round(result.seconds, 4)},
    )
