"""Cached scoring of a harness configuration on tasks x seeds, with the cost accounting the paper reports.

Score of one (harness, task, seed) = acc_0.01 of the run's selected candidate on the task's ``test_id`` split, or
the mean over several splits (``score_split="test_id+test_ood"``) (the training objective; held-out tasks are scored
the same way, but only for the report). A task-set score is the
mean over tasks of the mean over seeds. Every evaluation is stored in :class:`~optimize.cache.EvalCache` under
(harness digest, task, seed) and written as one line of ``trace.jsonl``; a cached one costs nothing.

Solver budgets per stage are enforced here, in one place: once a stage has paid its ``max_solver_runs`` every new
(uncached) evaluation raises :class:`StageBudgetSpent`, and the stage stops with what it has.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import re
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from statistics import mean, median
from typing import Any, Callable, Sequence

import numpy as np

from optimize.cache import EvalCache
from optimize.settings import STAGE_ORDER
from workflows.harness import Harness, run_harness

log = logging.getLogger(__name__)

STAGES = (*STAGE_ORDER, "freeze")  # freeze: report-only runs, paid apart from the stages
TOP_K = 5
# Outcomes that say nothing about the harness (the runner raised, or every model call failed: a server was down),
# so they are not cached and a later run tries again.
UNCACHED = ("exception", "llm_unavailable")


class StageBudgetSpent(RuntimeError):
    """The stage has used its solver-execution budget; stop and keep what was found."""


@dataclass
class EvalRecord:
    """Outcome of one (harness, task, seed) run, as cached. ``top`` holds the best few candidates for feedback."""

    digest: str
    task: str
    seed: int
    stage: str
    score: float
    task_key: str = ""
    metric: str = "acc_0.01"
    split: str = "test_id"
    equation: str | None = None
    expression: str | None = None
    complexity: int | None = None
    metrics: dict[str, dict[str, float]] = field(default_factory=dict)
    top: list[dict[str, Any]] = field(default_factory=list)
    llm_calls: int = 0
    tokens: int = 0  # prompt + completion tokens of the solve's LLM calls (answers from the response cache count)
    solver_runs: int = 0
    seconds: float = 0.0
    status: str = "ok"
    errors: list[str] = field(default_factory=list)
    run_dir: str | None = None
    label: str = ""
    cached: bool = False

    @property
    def nmse(self) -> float:
        value = self.metrics.get(self.split.split("+")[0], {}).get("nmse")
        return float(value) if value is not None and math.isfinite(value) else math.inf

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out.pop("cached")
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any], cached: bool = True) -> "EvalRecord":
        known = set(cls.__dataclass_fields__)
        return cls(**{k: v for k, v in data.items() if k in known and k != "cached"}, cached=cached)


@dataclass
class EvalSummary:
    """A harness on a task set: mean score and costs, per-task scores (for Pareto sets) and the records."""

    digest: str
    score: float
    per_task: dict[str, float]
    records: list[EvalRecord]
    nmse_median: float
    llm_calls_per_task: float
    solver_runs_per_task: float
    seconds_per_task: float
    new_solver_runs: int
    n_cached: int
    n_new: int

    def to_dict(self) -> dict[str, Any]:
        """Everything but the records (those live in the cache and trace.jsonl)."""
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name != "records"}


def summarize(digest: str, records: list[EvalRecord]) -> EvalSummary:
    """Mean over tasks of the mean over seeds; costs per task are means over runs."""
    by_task: dict[str, list[float]] = {}
    for rec in records:
        by_task.setdefault(rec.task, []).append(rec.score)
    per_task = {task: mean(scores) for task, scores in by_task.items()}
    finite = [r.nmse for r in records if math.isfinite(r.nmse)]
    n = max(1, len(records))
    return EvalSummary(
        digest=digest,
        score=mean(per_task.values()) if per_task else 0.0,
        per_task=per_task,
        records=records,
        nmse_median=median(finite) if finite else math.inf,
        llm_calls_per_task=sum(r.llm_calls for r in records) / n,
        solver_runs_per_task=sum(r.solver_runs for r in records) / n,
        seconds_per_task=sum(r.seconds for r in records) / n,
        new_solver_runs=sum(r.solver_runs for r in records if not r.cached),
        n_cached=sum(1 for r in records if r.cached),
        n_new=sum(1 for r in records if not r.cached),
    )


def task_key(task: Any) -> str:
    """Cache identity of a task: its name plus a fingerprint of its data (a regenerated task with other
    constants under the same name must not hit the old rows)."""
    cached = getattr(task, "_optimize_key", None)
    if cached:
        return cached
    h = hashlib.sha256(task.name.encode("utf-8"))
    for split in task.splits().values():
        h.update(np.ascontiguousarray(split.X).tobytes())
        h.update(np.ascontiguousarray(split.y).tobytes())
    key = f"{task.name}#{h.hexdigest()[:10]}"
    try:
        object.__setattr__(task, "_optimize_key", key)
    except (AttributeError, TypeError):
        pass
    return key


def _safe_name(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text)[:80] or "task"


def _finite_or_none(value: Any) -> float | None:
    try:
        value = float(value)
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) else None


SCORE_SPLITS = ("train", "valid", "test_id", "test_ood")


def split_score(metrics: dict[str, dict[str, float]], score_split: str, metric: str) -> tuple[float, str]:
    """(score, splits used): ``metric`` on one split ("test_id") or the mean over several joined by "+"
    ("test_id+test_ood"; why: once in-domain accuracy saturates, out-of-domain accuracy is where harnesses still
    differ). Splits a task lacks are left out; with none of them the validation hold-out scores."""
    parts = [s for s in score_split.split("+") if s in metrics] or ["valid"]
    values = [_finite_or_none(metrics.get(s, {}).get(metric)) or 0.0 for s in parts]
    return sum(values) / len(values), "+".join(parts)


def _candidate_summary(cand: Any, split: str) -> dict[str, Any]:
    return {
        "equation": getattr(cand, "equation", str(cand)),
        "expression": getattr(cand, "expression", None),
        "complexity": getattr(cand, "complexity", None),
        "source": getattr(cand, "source", ""),
        "valid_nmse": _finite_or_none(cand.metric("valid", "nmse")) if hasattr(cand, "metric") else None,
        "score_nmse": _finite_or_none(cand.metric(split, "nmse")) if hasattr(cand, "metric") else None,
    }


Runner = Callable[..., Any]


class Evaluator:
    """Runs harnesses (``workflows.harness.run_harness``) on (task, seed) pairs that are not cached yet."""

    def __init__(
        self,
        run_dir: str | Path,
        llm: Any,
        *,
        cache: EvalCache | None = None,
        metric: str = "acc_0.01",
        score_split: str = "test_id",
        run_budget: Any = None,
        stage_limits: dict[str, int | None] | None = None,
        task_workers: int = 1,
        branch_workers: int | None = None,
        keep_run_dirs: bool = True,
        runner: Runner | None = None,
        time_scale: float = 1.0,
    ) -> None:
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.llm = llm
        self.cache = cache or EvalCache(self.run_dir / "evals.db")
        self.metric = metric
        self.score_split = score_split
        self.run_budget = run_budget
        self.stage_limits = dict(stage_limits or {})
        self.task_workers = max(1, int(task_workers))
        self.branch_workers = branch_workers
        self.keep_run_dirs = keep_run_dirs
        self._runner = runner
        self.time_scale = float(time_scale)
        self._trace_lock = threading.Lock()
        self._budget_lock = threading.Lock()
        self.trace_path = self.run_dir / "trace.jsonl"
        self.session = {"cache_hits": 0, "new_evaluations": 0, "solver_runs": 0}

    # -- accounting -----------------------------------------------------------------------------------------
    def spent(self) -> dict[str, dict[str, float]]:
        """What each stage paid (from the cache, so it survives restarts)."""
        return self.cache.totals_by_stage()

    def stage_solver_runs(self, stage: str) -> int:
        return int(self.spent().get(stage, {}).get("solver_runs", 0))

    def cumulative_solver_runs(self, order: Sequence[str] = STAGES) -> dict[str, int]:
        """Cumulative solver executions after each stage in ``order``."""
        totals = self.spent()
        out, running = {}, 0
        for stage in order:
            running += int(totals.get(stage, {}).get("solver_runs", 0))
            out[stage] = running
        return out

    def budget_left(self, stage: str) -> int | None:
        limit = self.stage_limits.get(stage)
        if limit is None:
            return None
        return max(0, int(limit) - self.stage_solver_runs(stage))

    # -- evaluation -----------------------------------------------------------------------------------------
    def as_run(self, spec: Harness, time_scale: float | None = None) -> Harness:
        """The harness as it is run: each SR run ``time_scale`` times its solve seconds (None: the training scale,
        the optimizer's shortcut for speed; 1: the harness's own solve budget). The cache key is the digest of what
        ran, so short training runs and full solves are never mixed up."""
        scale = self.time_scale if time_scale is None else float(time_scale)
        if scale == 1.0:
            return spec
        return spec.with_sr_settings(time_budget=spec.settings.time_budget * scale)

    def evaluate(
        self, spec: Harness, tasks: Sequence[Any], seeds: Sequence[int] = (0,), *, stage: str, label: str = "",
        reserve: int = 0, time_scale: float | None = None,
    ) -> EvalSummary:
        """Score ``spec`` on every (task, seed), its SR runs at ``time_scale`` of its solve seconds (None: the
        training scale; see :meth:`as_run`); raises :class:`StageBudgetSpent` when a new run is not affordable
        (fewer than ``reserve`` + 1 of the stage's solver executions left)."""
        spec = self.as_run(spec, time_scale)
        pairs = [(task, int(seed)) for task in tasks for seed in seeds]

        def one(pair: tuple[Any, int]) -> EvalRecord:
            return self.evaluate_one(spec, pair[0], pair[1], stage=stage, label=label, reserve=reserve,
                                     time_scale=1.0)

        if self.task_workers > 1 and len(pairs) > 1:
            with ThreadPoolExecutor(max_workers=self.task_workers, thread_name_prefix="eval") as pool:
                records = list(pool.map(one, pairs))
        else:
            records = [one(pair) for pair in pairs]
        return summarize(spec.identity_digest, records)

    def evaluate_one(
        self, spec: Harness, task: Any, seed: int, *, stage: str, label: str = "", reserve: int = 0,
        time_scale: float | None = None,
    ) -> EvalRecord:
        spec = self.as_run(spec, time_scale)
        digest = spec.identity_digest
        key = task_key(task)
        data = self.cache.get(digest, key, seed)
        if data is not None:
            record = self._rescored(EvalRecord.from_dict(data, cached=True))
            record.label = label or record.label
            self.session["cache_hits"] += 1
            self._trace(record, stage)
            return record
        with self._budget_lock:
            left = self.budget_left(stage)
            if left is not None and left <= reserve:
                raise StageBudgetSpent(
                    f"stage {stage!r} has spent its {self.stage_limits[stage]} solver executions"
                    + (f" (less the {reserve} reserved)" if reserve else "")
                )
        record = self._run(spec, task, seed, stage=stage, label=label)
        stored = record.status not in UNCACHED and self.cache.put(record.to_dict(), spec.to_dict())
        if stored or record.status in UNCACHED:
            self.session["new_evaluations"] += 1
            self.session["solver_runs"] += record.solver_runs
        else:  # another worker stored the same key first: use theirs, so everyone agrees on one result
            theirs = self.cache.get(digest, key, seed)
            if theirs is not None:
                record = EvalRecord.from_dict(theirs, cached=True)
        self._trace(record, stage)
        return record

    def _rescored(self, record: EvalRecord) -> EvalRecord:
        """A cached record scored with this evaluator's metric (rows keep every split's metrics, so a run with
        another ``metric`` / ``score_split`` reuses them without running anything)."""
        if record.metric == self.metric and record.split in (self.score_split, "valid"):
            return record
        record.score, record.split = split_score(record.metrics, self.score_split, self.metric)
        record.metric = self.metric
        return record

    def _run(self, spec: Harness, task: Any, seed: int, *, stage: str, label: str) -> EvalRecord:
        run_dir = None
        if self.keep_run_dirs:
            run_dir = self.run_dir / "runs" / stage / spec.identity_digest / f"{_safe_name(task.name)}_s{seed}"
        started = time.perf_counter()
        try:
            result = run_harness(spec, task, self.llm, seed=seed, budget=self.run_budget, run_dir=run_dir,
                                 max_workers=self.branch_workers, runner=self._runner)
        except (KeyboardInterrupt, SystemExit):
            raise
        except Exception as exc:  # noqa: BLE001 - a crashed run scores 0 and is not cached (it may be transient)
            log.warning("evaluation of %s on %s (seed %d) raised: %s", spec.identity_digest, task.name, seed, exc)
            return EvalRecord(
                digest=spec.identity_digest, task=task.name, task_key=task_key(task), seed=seed, stage=stage, score=0.0,
                metric=self.metric, split=self.score_split, seconds=time.perf_counter() - started,
                status="exception", errors=[f"{type(exc).__name__}: {exc}"[:500]],
                run_dir=str(run_dir) if run_dir else None, label=label, cached=False,
            )
        return self._record(spec, task, seed, stage, label, result, time.perf_counter() - started, run_dir)

    def _record(
        self, spec: Harness, task: Any, seed: int, stage: str, label: str, result: Any, seconds: float,
        run_dir: Path | None,
    ) -> EvalRecord:
        best = getattr(result, "best", None)
        split = self.score_split
        score = 0.0
        metrics: dict[str, dict[str, float]] = {}
        if best is not None:
            metrics = {
                s: {k: float(v) for k, v in m.items() if isinstance(v, (int, float))}
                for s, m in best.metrics.items()
            }
            # a task without the scored splits is scored on the validation hold-out
            score, split = split_score(metrics, self.score_split, self.metric)
        candidates = list(getattr(result, "candidates", None) or [])
        candidates.sort(key=lambda c: c.sort_key("valid") if hasattr(c, "sort_key") else (math.inf, 0, ""))
        all_errors = [str(e) for e in (getattr(result, "errors", None) or [])]
        llm_calls = int(getattr(result, "llm_calls", 0) or 0)
        status = str(getattr(result, "status", "ok"))
        if llm_calls and sum("call failed" in e for e in all_errors) >= llm_calls:
            status = "llm_unavailable"
        out_dir = getattr(result, "run_dir", None) or run_dir
        state = getattr(result, "state", None)
        counts = state.counts() if state is not None and hasattr(state, "counts") else {}
        return EvalRecord(
            digest=spec.identity_digest,
            task=task.name,
            task_key=task_key(task),
            seed=seed,
            stage=stage,
            score=float(score),
            metric=self.metric,
            split=split,
            equation=getattr(best, "equation", None),
            expression=getattr(best, "expression", None),
            complexity=getattr(best, "complexity", None),
            metrics=metrics,
            top=[_candidate_summary(c, split.split("+")[0]) for c in candidates[:TOP_K]],
            llm_calls=llm_calls,
            tokens=int(counts.get("prompt_tokens", 0) or 0) + int(counts.get("completion_tokens", 0) or 0),
            solver_runs=int(getattr(result, "solver_runs", 0) or 0),
            seconds=float(getattr(result, "seconds", None) or seconds),
            status=status,
            errors=[e[:300] for e in all_errors[:10]],
            run_dir=str(out_dir) if out_dir is not None else None,
            label=label,
            cached=False,
        )

    def _trace(self, record: EvalRecord, stage: str) -> None:
        line = {
            "time": round(time.time(), 3),
            "stage": stage,
            "label": record.label,
            "digest": record.digest,
            "task": record.task,
            "seed": record.seed,
            "cached": record.cached,
            "paid_by": record.stage,
            "score": record.score,
            "nmse": record.nmse if math.isfinite(record.nmse) else None,
            "equation": record.equation,
            "llm_calls": record.llm_calls,
            "solver_runs": record.solver_runs,
            "seconds": round(record.seconds, 3),
            "status": record.status,
        }
        with self._trace_lock, open(self.trace_path, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(line, ensure_ascii=False, default=str) + "\n")
