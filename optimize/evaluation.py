"""Cached scoring of a harness configuration on tasks x seeds, with the cost accounting the paper reports.

Score of one (harness, task, seed) = ``optimize.metric`` (acc_0.01, or log_nmse = -log10 NMSE, the quick and
small presets') of the run's selected candidate on ``score_split`` (one split, or the mean over several joined by
'+', e.g. ``test_id+test_ood``) (the training objective; held-out tasks are scored the same way, but only for the
report). A task-set score is the
mean over tasks of the mean over seeds. Every evaluation is stored in :class:`~optimize.cache.EvalCache` under
(harness digest, task, seed) and written as one line of ``trace.jsonl``; a cached one costs nothing.

Solver budgets per stage are enforced here, in one place: once a stage has paid its ``max_solver_runs`` every new
(uncached) evaluation raises :class:`StageBudgetSpent`, and the stage stops with what it has.

Where the runs happen is the executor's business (``harness.app.executor``; ``executor=local`` threads, the
default, or ``executor=ray``): either way the results come back to this process, which alone writes the evaluation
cache, ``trace.jsonl``, the response cache and the run folders, as each run finishes - so a killed optimizer
resumes from the cache and pays for no finished run twice.
"""

from __future__ import annotations

import itertools
import json
import logging
import math
import re
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Sequence

from harness.app.executor import ExecutorError, LocalExecutor, SolveExecutor
from harness.app.remote import absorb
from harness.llm.cache import CachedLLM
from optimize.cache import EvalCache
from optimize.records import (
    UNCACHED,
    EvalRecord,
    EvalSummary,
    build_record,
    exception_record,
    split_score,
    summarize,
    task_key,
)
from optimize.race import Scorer, StopRace
from optimize.remote import RemoteOutcome, RemoteSolve, run_remote_solve
from optimize.runfolder import InFlight, describe_left_over
from optimize.settings import STAGE_ORDER
from workflows.harness import Harness, run_harness

log = logging.getLogger(__name__)

STAGES = (*STAGE_ORDER, "freeze")  # freeze: report-only runs, paid apart from the stages


class StageBudgetSpent(RuntimeError):
    """The stage has used its solver-execution budget; stop and keep what was found."""


def _safe_name(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text)[:80] or "task"


Runner = Callable[..., Any]


class Evaluator:
    """Runs harnesses (``workflows.harness.run_harness``) on (task, seed) pairs that are not cached yet.

    ``executor``: where the runs happen (default: ``task_workers`` local threads sharing ``llm``). A remote one
    rebuilds the model on its workers from ``llm_config`` (the ``llm`` config mapping), so it needs that."""

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
        work_rate: float | None = None,
        time_guard: float = 3.0,
        executor: SolveExecutor | None = None,
        llm_config: Mapping[str, Any] | None = None,
        share_runs: bool = True,
        stop_at_exact: bool = False,
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
        self.work_rate = float(work_rate) if work_rate else None
        self.time_guard = float(time_guard)
        self._trace_lock = threading.Lock()
        self._budget_lock = threading.Lock()
        self.trace_path = self.run_dir / "trace.jsonl"
        self.session = {"cache_hits": 0, "new_evaluations": 0, "solver_runs": 0}
        self.executor: SolveExecutor = executor or LocalExecutor(self.task_workers)
        self.llm_config = dict(llm_config) if llm_config is not None else None
        self._solve_numbers = itertools.count()  # spreads a base_url list over remote solves, round-robin
        # SR runs no role influences (the unguided run) are made once per (task, seed, engine settings) and read by
        # every harness after (common random numbers; paid once). Local runs only: a remote worker has no cache.
        self.shared_runs = self.cache.shared_runs() if share_runs and not self.executor.remote else None
        self.stop_at_exact = bool(stop_at_exact)
        self.progress: Any = None  # a harness.app.progress.Progress: each run shown as it starts and ends
        # in_flight/: the solves running now, so a process killed by a native crash leaves where it was
        self.in_flight = InFlight(self.run_dir / "in_flight")
        for left in self.in_flight.left_over():
            log.warning("%s", describe_left_over(left))

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
    def as_run(self, spec: Harness, time_scale: float | None = None, by_work: bool | None = None) -> Harness:
        """The harness as it is run: each SR run ``time_scale`` times its solve seconds (None: the training scale,
        the optimizer's shortcut for speed, with ``stop_at_exact`` when the evaluator has it; 1: the harness's own
        solve budget). A shortened run is bounded by work when the evaluator has a ``work_rate``: it ends after
        that many generations per second of its share, with ``time_guard`` times the share as its seconds and
        every step after the engine ``time_guard`` times its seconds cap (guards: ``sr.time_guard``), so the same
        (harness, task, seed) always has the same outcome; ``by_work=True`` bounds a full-length run so too
        (``freeze.heldout_work``). The cache key is the digest of what ran, so short training runs and full solves
        are never mixed up."""
        training = time_scale is None
        scale = self.time_scale if training else float(time_scale)
        if training and self.stop_at_exact and not spec.settings.stop_at_exact:  # no further pay once solved
            spec = spec.with_sr_settings(stop_at_exact=True)
        work = bool(self.work_rate) and (scale < 1.0 if by_work is None else by_work)
        if scale == 1.0 and not work:
            return spec
        seconds = spec.settings.time_budget * scale
        if work:
            return spec.with_sr_settings(time_budget=seconds * self.time_guard, time_guard=self.time_guard,
                                         generations=max(1, round(self.work_rate * seconds)))
        return spec.with_sr_settings(time_budget=seconds)

    def evaluate(
        self, spec: Harness, tasks: Sequence[Any], seeds: Sequence[int] = (0,), *, stage: str, label: str = "",
        reserve: int = 0, time_scale: float | None = None, by_work: bool | None = None,
    ) -> EvalSummary:
        """Score ``spec`` on every (task, seed), its SR runs at ``time_scale`` of its solve seconds (None: the
        training scale; see :meth:`as_run`); raises :class:`StageBudgetSpent` when a new run is not affordable
        (fewer than ``reserve`` + 1 of the stage's solver executions left)."""
        spec = self.as_run(spec, time_scale, by_work)
        pairs = [(task, int(seed)) for task in tasks for seed in seeds]
        if self.executor.remote:
            records = self._evaluate_remote(spec, pairs, stage=stage, label=label, reserve=reserve)
        else:
            def one(pair: tuple[Any, int]) -> EvalRecord:
                return self.evaluate_one(spec, pair[0], pair[1], stage=stage, label=label, reserve=reserve,
                                         time_scale=1.0)

            records = self.executor.map(one, pairs)
        return summarize(spec.identity_digest, records)

    def evaluate_side_by_side(
        self, specs: Mapping[str, Harness], tasks: Sequence[Any], seeds: Sequence[int] = (0,), *, stage: str,
        time_scale: float | None = None, by_work: bool | None = None,
    ) -> dict[str, EvalSummary]:
        """Several harnesses on every (task, seed) of ``tasks`` x ``seeds`` (:meth:`evaluate_pairs`)."""
        return self.evaluate_pairs(specs, [(task, seed) for task in tasks for seed in seeds], stage=stage,
                                   time_scale=time_scale, by_work=by_work)

    def evaluate_pairs(
        self, specs: Mapping[str, Harness], pairs: Sequence[tuple[Any, int]], *, stage: str,
        time_scale: float | None = None, by_work: bool | None = None,
    ) -> dict[str, EvalSummary]:
        """Several harnesses on the same (task, seed) pairs, pair by pair (every harness on one pair, then the
        next), so a machine that gets busier or quieter meanwhile slows them alike: what the races and the stage
        curve read. Keyed as ``specs``; labels are the keys; each summary's records are in ``pairs``' order."""
        records: dict[str, list[EvalRecord]] = {name: [] for name in specs}
        for task, seed in pairs:
            for name, spec in specs.items():
                records[name] += self.evaluate(spec, [task], [seed], stage=stage, label=name,
                                               time_scale=time_scale, by_work=by_work).records
        return {name: summarize(self.as_run(specs[name], time_scale, by_work).identity_digest, recs)
                for name, recs in records.items()}

    def scorer(self, stage: str, time_scale: float | None = None) -> Scorer:
        """This evaluator as a race's scorer (``optimize.race``): harnesses on pairs, pair by pair; a spent stage
        budget ends the race with what it has."""

        def scores(specs: Mapping[str, Harness], pairs: Sequence[tuple[Any, int]]) -> dict[str, list[float]]:
            try:
                out = self.evaluate_pairs(specs, pairs, stage=stage, time_scale=time_scale)
            except StageBudgetSpent as exc:
                raise StopRace(str(exc)) from exc
            return {name: [r.score for r in summary.records] for name, summary in out.items()}

        return scores

    def evaluate_one(
        self, spec: Harness, task: Any, seed: int, *, stage: str, label: str = "", reserve: int = 0,
        time_scale: float | None = None,
    ) -> EvalRecord:
        """One (task, seed) in this process: the cached record, or a new run (budget permitting), stored."""
        spec = self.as_run(spec, time_scale)
        record = self._cached(spec, task, seed, stage=stage, label=label)
        if record is not None:
            return record
        self._check_budget(stage, reserve)
        return self._store(spec, self._run(spec, task, seed, stage=stage, label=label), stage)

    def _cached(self, spec: Harness, task: Any, seed: int, *, stage: str, label: str) -> EvalRecord | None:
        data = self.cache.get(spec.identity_digest, task_key(task), seed)
        if data is None:
            return None
        record = self._rescored(EvalRecord.from_dict(data, cached=True))
        record.label = label or record.label
        self.session["cache_hits"] += 1
        self._trace(record, stage)
        return record

    def _check_budget(self, stage: str, reserve: int) -> None:
        with self._budget_lock:
            left = self.budget_left(stage)
            if left is not None and left <= reserve:
                raise StageBudgetSpent(
                    f"stage {stage!r} has spent its {self.stage_limits[stage]} solver executions"
                    + (f" (less the {reserve} reserved)" if reserve else "")
                )

    def _store(self, spec: Harness, record: EvalRecord, stage: str) -> EvalRecord:
        """Cache (unless the outcome says nothing about the harness) and trace a new record."""
        stored = record.status not in UNCACHED and self.cache.put(record.to_dict(), spec.to_dict())
        if stored or record.status in UNCACHED:
            self.session["new_evaluations"] += 1
            self.session["solver_runs"] += record.solver_runs
        else:  # another worker stored the same key first: use theirs, so everyone agrees on one result
            theirs = self.cache.get(spec.identity_digest, record.task_key or record.task, record.seed)
            if theirs is not None:
                record = EvalRecord.from_dict(theirs, cached=True)
        self._trace(record, stage)
        return record

    def _evaluate_remote(self, spec: Harness, pairs: list[tuple[Any, int]], *, stage: str, label: str,
                         reserve: int) -> list[EvalRecord]:
        """The uncached pairs as :class:`~optimize.remote.RemoteSolve` jobs on the executor. The stage budget is
        checked as each job is dispatched (as a local thread checks when its run starts); each finished job is
        absorbed (run folder, response cache, usage), stored and traced here, at once."""
        if self.llm_config is None:
            raise ExecutorError(f"executor={self.executor.name} rebuilds the model on its workers from the llm "
                                "config: build the Evaluator with llm_config=")
        records: list[EvalRecord | None] = [self._cached(spec, task, seed, stage=stage, label=label)
                                            for task, seed in pairs]
        todo = [i for i, record in enumerate(records) if record is None]
        harness = spec.to_dict()

        def jobs() -> Iterator[RemoteSolve]:
            for i in todo:
                self._check_budget(stage, reserve)
                task, seed = pairs[i]
                run_dir = self._run_dir(spec, task, seed, stage)
                yield RemoteSolve(
                    harness=harness, task=task, seed=seed, llm=dict(self.llm_config or {}),
                    index=next(self._solve_numbers), stage=stage, label=label, metric=self.metric,
                    score_split=self.score_split, run_dir=str(run_dir) if run_dir else None, budget=self.run_budget,
                    branch_workers=self.branch_workers, cache_llm=isinstance(self.llm, CachedLLM),
                    runner=self._runner,
                )

        def failed(n: int, job: RemoteSolve, exc: BaseException) -> RemoteOutcome:
            log.warning("evaluation of %s on %s (seed %d) failed on the executor: %s", spec.identity_digest,
                        job.task.name, job.seed, exc)
            record = exception_record(spec, job.task, job.seed, stage, label, exc, 0.0, None, metric=self.metric,
                                      score_split=self.score_split)
            return RemoteOutcome(record.to_dict())

        def finished(n: int, outcome: RemoteOutcome) -> None:
            record = EvalRecord.from_dict(outcome.record, cached=False)
            absorb(outcome.shipment, run_dir=Path(record.run_dir) if record.run_dir else None, llm=self.llm)
            records[todo[n]] = self._store(spec, record, stage)

        self.executor.map(run_remote_solve, jobs(), on_result=finished, on_error=failed)
        return [r for r in records if r is not None]

    def _rescored(self, record: EvalRecord) -> EvalRecord:
        """A cached record scored with this evaluator's metric (rows keep every split's metrics, so a run with
        another ``metric`` / ``score_split`` reuses them without running anything)."""
        if record.metric == self.metric and record.split in (self.score_split, "valid"):
            return record
        record.score, record.split = split_score(record.metrics, self.score_split, self.metric)
        record.metric = self.metric
        return record

    def _run_dir(self, spec: Harness, task: Any, seed: int, stage: str) -> Path | None:
        if not self.keep_run_dirs:
            return None
        return self.run_dir / "runs" / stage / spec.identity_digest / f"{_safe_name(task.name)}_s{seed}"

    def _run(self, spec: Harness, task: Any, seed: int, *, stage: str, label: str) -> EvalRecord:
        run_dir = self._run_dir(spec, task, seed, stage)
        started = time.perf_counter()
        if self.progress is not None:
            self.progress.item(f"{label or 'run'}: {task.name} (seed {seed})")
        flight = self.in_flight.start(stage=stage, label=label, task=task.name, seed=seed, digest=spec.identity_digest)
        try:
            result = run_harness(spec, task, self.llm, seed=seed, budget=self.run_budget, run_dir=run_dir,
                                 max_workers=self.branch_workers, runner=self._runner, shared_runs=self.shared_runs)
        except (KeyboardInterrupt, SystemExit):
            raise
        except Exception as exc:  # noqa: BLE001 - a crashed run scores 0 and is not cached (it may be transient)
            log.warning("evaluation of %s on %s (seed %d) raised: %s", spec.identity_digest, task.name, seed, exc)
            return exception_record(spec, task, seed, stage, label, exc, time.perf_counter() - started, run_dir,
                                    metric=self.metric, score_split=self.score_split)
        finally:
            self.in_flight.end(flight)
        return build_record(spec, task, seed, stage, label, result, time.perf_counter() - started, run_dir,
                            metric=self.metric, score_split=self.score_split)

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
        if self.progress is not None:
            self.progress.advance(note="" if record.cached else
                                  f"{record.label or stage}: {record.task} s{record.seed} score {record.score:.3f} "
                                  f"({record.seconds:.0f} s, {record.llm_calls} model calls, {record.solver_runs} SR runs)")
