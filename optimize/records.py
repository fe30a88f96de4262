"""What one (harness, task, seed) evaluation produced: :class:`EvalRecord` and how it is built from a run.

Its own module because a record is built wherever the run happens - in the optimizer's process (local executor)
or on a Ray worker (``optimize.remote``) - and both must produce the same record from the same run.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, fields
from statistics import mean, median
from pathlib import Path
from typing import Any


from harness.app.remote import worker_info
from workflows.harness import Harness

TOP_K = 5
# Outcomes that say nothing about the harness (the runner raised, or every model call failed: a server was down),
# so they are not cached and a later run tries again.
UNCACHED = ("exception", "llm_unavailable")


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
    worker: dict[str, Any] = field(default_factory=dict)  # who ran it (harness.app.remote.WorkerInfo)
    guard_hits: int = 0  # steps that seconds stopped, so the outcome depends on the machine (guard_hits below)
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


def task_key(task: Any) -> str:
    """Cache identity of a task: its name plus a fingerprint of its data (``Task.fingerprint``: a regenerated task
    with other constants under the same name must not hit the old rows)."""
    return task.fingerprint()


def _finite_or_none(value: Any) -> float | None:
    try:
        value = float(value)
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) else None


SCORE_SPLITS = ("train", "valid", "test_id", "test_ood")


# A derived metric: -log10 NMSE, clipped to [NMSE_RANGE]: bigger is better, one unit = ten times lower error. The
# optimizer's training score in the `quick` and `small` presets (docs/optimizer.md: at 15 s it orders harnesses as at 60 s, Kendall tau
# 0.87, where acc_0.01 ties on most tasks). A run without an equation scores as predicting the mean (0).
LOG_NMSE = "log_nmse"
NMSE_RANGE = (1e-16, 1e3)


def metric_value(split_metrics: dict[str, float], metric: str) -> float:
    if metric == LOG_NMSE:
        nmse = _finite_or_none(split_metrics.get("nmse"))
        nmse = NMSE_RANGE[1] if nmse is None and split_metrics else (1.0 if nmse is None else nmse)
        return -math.log10(min(max(nmse, NMSE_RANGE[0]), NMSE_RANGE[1]))
    return _finite_or_none(split_metrics.get(metric)) or 0.0


def split_score(metrics: dict[str, dict[str, float]], score_split: str, metric: str) -> tuple[float, str]:
    """(score, splits used): ``metric`` on one split ("test_id") or the mean over several joined by "+"
    ("test_id+test_ood"; why: once in-domain accuracy saturates, out-of-domain accuracy is where harnesses still
    differ). Splits a task lacks are left out; with none of them the validation hold-out scores. ``log_nmse`` is
    -log10 of the split's NMSE (``metric_value``)."""
    parts = [s for s in score_split.split("+") if s in metrics] or ["valid"]
    values = [metric_value(metrics.get(s, {}), metric) for s in parts]
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


def guard_hits(state: Any) -> int:
    """The steps of a solve that seconds stopped, so that its outcome depends on the machine: SR runs that ended
    before the generations their plan asked for (below the engine's default of 10,000, i.e. a work-bound run) or
    whose process was killed at its deadline (a loaded machine: the run then has no outcome of its own), steps
    after the engine that reached their seconds cap (``cap_seconds`` in the node's info), constant fits cut
    short by theirs (status "timeout"), and model answers the client's deadline cut short (finish reason
    "timeout")."""
    from harness.sr.workers import PAST_DEADLINE

    hits = 0
    for node in getattr(state, "nodes", None) or []:
        info = getattr(node, "info", None) or {}
        if str(getattr(node, "kind", "")) == "sr":
            asked = (info.get("plan") or {}).get("generations")
            done = (info.get("engine") or {}).get("generations")
            hits += asked is not None and done is not None and int(asked) < 10_000 and int(done) < int(asked)
            hits += PAST_DEADLINE in str(getattr(node, "error", "") or "")
        hits += sum(reason == "timeout" for reason in info.get("finish_reasons") or [info.get("finish_reason")])
        cap = info.get("cap_seconds")
        hits += cap is not None and float(getattr(node, "seconds", 0.0) or 0.0) >= float(cap)
        hits += sum((c.get("status") if isinstance(c, dict) else getattr(c, "status", "")) == "timeout"
                    for c in getattr(node, "candidates", None) or [])
    return int(hits)


def build_record(
    spec: Harness, task: Any, seed: int, stage: str, label: str, result: Any, seconds: float,
    run_dir: Path | None, *, metric: str, score_split: str,
) -> EvalRecord:
    """The record of a finished run (``run_harness``'s result): the selected candidate's metrics and score, the
    best few candidates, costs and status."""
    best = getattr(result, "best", None)
    split = score_split
    score = 0.0
    metrics: dict[str, dict[str, float]] = {}
    if best is not None:
        metrics = {
            s: {k: float(v) for k, v in m.items() if isinstance(v, (int, float))}
            for s, m in best.metrics.items()
        }
        # a task without the scored splits is scored on the validation hold-out
        score, split = split_score(metrics, score_split, metric)
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
        metric=metric,
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
        worker=worker_info().to_dict(),
        guard_hits=guard_hits(state),
        cached=False,
    )


def exception_record(spec: Harness, task: Any, seed: int, stage: str, label: str, exc: BaseException,
                     seconds: float, run_dir: Path | str | None, *, metric: str, score_split: str) -> EvalRecord:
    """A run that raised (or whose worker died): score 0, status ``exception``, never cached (it may be
    transient, so a later run tries again)."""
    return EvalRecord(
        digest=spec.identity_digest, task=task.name, task_key=task_key(task), seed=seed, stage=stage, score=0.0,
        metric=metric, split=score_split, seconds=seconds, status="exception",
        errors=[f"{type(exc).__name__}: {exc}"[:500]], run_dir=str(run_dir) if run_dir else None, label=label,
        worker=worker_info().to_dict(), cached=False,
    )


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
