"""Run a frozen harness over a task set and tabulate the results, the way papers report them.

Columns: Acc_0.01 / Acc_0.001 and NMSE on the in-domain and out-of-domain test splits, and symbolic accuracy
(``sa``: the found equation is the ground truth up to the truth's free constants, :mod:`harness.core.symbolic`; NaN
for tasks without a known truth, such as LLM-SR's real problems), per task and per domain. Acc_tau in two readings
(docs/results.md): ``acc_0.01`` = at least 95 % of the points within 1 % (SR-Scientist's evaluation code, so the
published PySR / LLM-SR / SR-Scientist figures), ``acc_all_0.01`` = every point within 1 %.

Each task's record is appended to ``results.jsonl`` as soon as it finishes, and a rerun with the same output
folder skips tasks already recorded — a killed benchmark loses at most the tasks in flight. A task that fails
(dead LLM server, engine crash, a Ray worker that died) is recorded with its error and scored as a miss, never
dropped.

Where the solves run is the executor's business (``harness.app.executor``: ``executor=local``, one at a time
unless ``executor.workers`` says more, or ``executor=ray``). A remote solve gets a plain :class:`BenchmarkSolve`
(the harness as JSON, the task, the seed, the LLM config) and rebuilds its client on the worker; its record and
run folder come back to this process, which alone writes ``results.jsonl`` and ``runs/<task>/``.
"""

from __future__ import annotations

import json
import math
import threading
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import pandas as pd

from harness.app.executor import LocalExecutor, SolveExecutor
from harness.app.progress import Progress
from harness.app.remote import Shipment, WorkerSession, absorb, worker_info, worker_llm_config
from harness.core.jsonio import json_safe, read_jsonl
from harness.core.task import Task

REPORT_METRICS = ("acc_0.01", "acc_all_0.01", "acc_0.001", "nmse")
SPLITS = ("test_id", "test_ood")


def _metric(record: dict[str, Any], split: str, name: str) -> float:
    value = record.get("metrics", {}).get(split, {}).get(name)
    try:
        value = float(value)
    except (TypeError, ValueError):
        return math.nan
    return value


def symbolic_record(task: Task, equation: str | None) -> dict[str, Any] | None:
    """The symbolic-accuracy verdict for a record (None when the task has no ground truth)."""
    from harness.core.symbolic import SymbolicMatch, task_symbolic_match

    if not task.ground_truth:
        return None
    if not equation:
        return SymbolicMatch(False, note="no equation").to_record()
    try:
        match = task_symbolic_match(task, equation)
    except Exception as exc:  # noqa: BLE001 - a checker failure is a recorded "no", never a lost benchmark
        return SymbolicMatch(False, note=f"check failed: {type(exc).__name__}: {exc}").to_record()
    return match.to_record() if match is not None else None


def task_record(task: Task, solution: Any, seconds: float) -> dict[str, Any]:
    """One row of the benchmark: the selected equation, metrics per split, symbolic accuracy and costs."""
    return {
        "task": task.name,
        "domain": task.domain,
        "status": getattr(solution, "status", "ok"),
        "equation": solution.equation,
        "ground_truth": task.ground_truth,
        "complexity": solution.complexity,
        "metrics": solution.metrics,
        "symbolic": symbolic_record(task, solution.equation),
        "llm_calls": solution.llm_calls,
        "solver_runs": solution.solver_runs,
        "seconds": round(seconds, 2),
        "run_dir": str(solution.run_dir) if solution.run_dir else None,
        "worker": worker_info().to_dict(),
    }


def failure_record(task: Task, error: str, seconds: float) -> dict[str, Any]:
    return {
        "task": task.name,
        "domain": task.domain,
        "status": "error",
        "error": error,
        "equation": None,
        "ground_truth": task.ground_truth,
        "metrics": {},
        "symbolic": symbolic_record(task, None),
        "llm_calls": None,
        "solver_runs": None,
        "seconds": round(seconds, 2),
        "worker": worker_info().to_dict(),
    }


def load_records(path: Path) -> list[dict[str, Any]]:
    """Records written so far; a torn last line (killed mid-write) is ignored."""
    return read_jsonl(path)


def _detail(exc: BaseException) -> str:
    return "".join(traceback.format_exception_only(type(exc), exc)).strip()


@dataclass(frozen=True)
class BenchmarkSolve:
    """One task of a benchmark as a plain job for a remote executor: the frozen harness as JSON (with its seal, so
    records name the same harness as locally, and its identity digest, checked on the worker: other code there
    would run another harness), the task, the seed, the LLM config (``index`` picks the endpoint of a
    ``base_url`` list) and the solve settings; ``run_dir`` is where the driver puts the run folder."""

    harness: dict[str, Any]
    identity: str  # the harness's identity digest on the driver
    task: Task
    seed: int
    llm: dict[str, Any]
    index: int
    run_dir: str
    backend: str | None = None
    sr_settings: dict[str, Any] | None = None
    budget: Any = None


@dataclass
class SolvedTask:
    """A remote solve's record and what the driver absorbs (its run folder)."""

    record: dict[str, Any]
    shipment: Shipment = field(default_factory=Shipment)


def solve_remote(job: BenchmarkSolve) -> SolvedTask:
    """Run ``job`` in this (worker) process; a failure is a recorded miss, as locally."""
    from harness.app.artifact import FrozenHarness

    harness = FrozenHarness.model_validate(job.harness)
    if harness.identity_digest != job.identity:
        raise RuntimeError(f"harness identity {harness.identity_digest} on this worker, {job.identity} on the "
                           "driver: the worker runs other code (install the same version on every node)")
    start = time.monotonic()
    with WorkerSession(worker_llm_config(job.llm, job.index), cache_llm=False) as session:
        try:
            solution = harness.solve(job.task, llm=session.client, backend=job.backend, budget=job.budget,
                                     run_dir=session.run_dir, seed=job.seed, sr_settings=job.sr_settings)
            record = task_record(job.task, solution, time.monotonic() - start)
        except Exception as exc:  # noqa: BLE001 - a failed task is a recorded miss, never a lost benchmark
            record = failure_record(job.task, _detail(exc), time.monotonic() - start)
        record["run_dir"] = job.run_dir  # where the driver unpacks the folder, not this worker's temporary one
        return SolvedTask(record, session.shipment())


def run_benchmark(
    harness: Any,
    tasks: Sequence[Task],
    out_dir: str | Path,
    *,
    seed: int = 0,
    llm: Any = None,
    backend: str | None = None,
    sr_settings: dict[str, Any] | None = None,
    budget: Any = None,
    on_record: Callable[[dict[str, Any]], None] | None = None,
    executor: SolveExecutor | None = None,
    progress: Progress | None = None,
) -> pd.DataFrame:
    """Solve every task with ``harness`` (a FrozenHarness), appending records as they finish; returns the
    per-task table. ``executor``: None = one task at a time in this process; a remote one needs ``llm`` as a
    config (a dict of LLMConfig fields, or None for the harness's own), not a client object. ``progress``: shows
    tasks done / total (a resumed run starts at the tasks already recorded), the task running and each result."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    results = out / "results.jsonl"
    done = {r["task"] for r in load_records(results)}
    todo = [task for task in tasks if task.name not in done]
    executor = executor or LocalExecutor(1)
    lock = threading.Lock()
    if progress is not None:
        progress.stage(f"solving {len(tasks)} tasks", total=len(tasks), done=len(tasks) - len(todo))
        if executor.remote and todo:
            progress.item(f"{len(todo)} tasks on executor={executor.name}")

    def write(record: dict[str, Any]) -> None:
        with lock, open(results, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(json_safe(record)) + "\n")
            fh.flush()
        if progress is not None:
            progress.advance(note=record_line(record))
        if on_record:
            on_record(record)

    if executor.remote:
        if llm is not None and hasattr(llm, "complete"):
            raise TypeError(f"executor={executor.name} rebuilds the model on each worker: pass llm as a config "
                            "(a dict of LLMConfig fields), not a client")
        config = harness.llm_config(llm).model_dump(mode="json")
        payload = harness.model_dump(mode="json")
        jobs = [BenchmarkSolve(harness=payload, identity=harness.identity_digest, task=task, seed=seed, llm=config,
                               index=i, run_dir=str(out / "runs" / task.name), backend=backend,
                               sr_settings=sr_settings, budget=budget) for i, task in enumerate(todo)]

        def finished(_: int, solved: SolvedTask) -> None:
            absorb(solved.shipment, run_dir=Path(solved.record["run_dir"]))
            write(solved.record)

        def crashed(_: int, job: BenchmarkSolve, exc: BaseException) -> SolvedTask:  # the worker process died
            return SolvedTask({**failure_record(job.task, _detail(exc), 0.0), "run_dir": job.run_dir})

        executor.map(solve_remote, jobs, on_result=finished, on_error=crashed)
    else:
        client = None
        if llm is not None and not hasattr(llm, "complete"):
            from harness.llm.factory import make_llm

            client = make_llm(harness.llm_config(llm))

        def solve_here(task: Task) -> dict[str, Any]:
            if progress is not None:
                progress.item(f"task {task.name}")
            start = time.monotonic()
            try:
                solution = harness.solve(task, llm=client or llm, backend=backend, budget=budget,
                                         run_dir=out / "runs" / task.name, seed=seed, sr_settings=sr_settings)
                return task_record(task, solution, time.monotonic() - start)
            except Exception as exc:  # a failed task is a recorded miss, never a lost benchmark
                return failure_record(task, _detail(exc), time.monotonic() - start)

        try:
            executor.map(solve_here, todo, on_result=lambda _, record: write(record))
        finally:
            if client is not None:
                client.close()
    names = {t.name for t in tasks}
    return results_table([r for r in load_records(results) if r["task"] in names])


def record_line(record: dict[str, Any]) -> str:
    """One record as one line: ``chem_react_lsr_01 ok acc_0.01 ID/OOD 1/0 SA 0 118 s <equation>``."""
    def flag(split: str) -> str:
        value = _metric(record, split, "acc_0.01")
        return "-" if math.isnan(value) else f"{value:.0f}"

    sa = (record.get("symbolic") or {}).get("equivalent")
    tail = record.get("equation") or record.get("error") or ""
    return (f"{record['task']} {record.get('status')} acc_0.01 ID/OOD {flag('test_id')}/{flag('test_ood')}"
            + ("" if sa is None else f" SA {int(bool(sa))}") + f" {float(record.get('seconds') or 0):.0f} s "
            + str(tail)[:100])


def _sa(record: dict[str, Any]) -> float:
    """1.0 / 0.0 when the task has a ground truth (a failure is 0), NaN otherwise."""
    symbolic = record.get("symbolic")
    if symbolic is None:
        return 0.0 if record.get("ground_truth") and record.get("status") == "error" else math.nan
    return 1.0 if symbolic.get("equivalent") else 0.0


def results_table(records: Sequence[dict[str, Any]]) -> pd.DataFrame:
    """Per-task table: accuracy and NMSE on ID and OOD, symbolic accuracy, LLM calls, seconds (failures are
    misses)."""
    rows = []
    for r in records:
        row: dict[str, Any] = {"task": r["task"], "domain": r.get("domain", ""), "status": r.get("status", "")}
        for split in SPLITS:
            tag = "id" if split == "test_id" else "ood"
            for name in REPORT_METRICS:
                value = _metric(r, split, name)
                if name.startswith("acc") and math.isnan(value):
                    value = 0.0  # a task without a result is a miss
                row[f"{name}_{tag}"] = value
        row["sa"] = _sa(r)
        row["llm_calls"] = r.get("llm_calls")
        row["seconds"] = r.get("seconds")
        row["equation"] = r.get("equation")
        rows.append(row)
    return pd.DataFrame(rows)


def summary_row(table: pd.DataFrame) -> dict[str, float]:
    """Task-set score: means of the accuracies, medians of NMSE, means of costs."""
    out: dict[str, float] = {"tasks": float(len(table))}
    for col in table.columns:
        if col.startswith("acc_") or col == "sa":  # sa: over the tasks with a known truth (NaN skipped)
            out[col] = float(table[col].mean())
        elif col.startswith("nmse_"):
            out[f"median_{col}"] = float(table[col].median())
    for col in ("llm_calls", "seconds"):
        out[f"mean_{col}"] = float(pd.to_numeric(table[col], errors="coerce").mean())
    return out


def markdown_table(table: pd.DataFrame) -> str:
    """The per-task table plus a mean row, as Markdown (for notes and reports)."""
    cols = ["task", "acc_0.01_id", "acc_all_0.01_id", "acc_0.001_id", "acc_0.01_ood", "acc_all_0.01_ood",
            "acc_0.001_ood", "nmse_id", "nmse_ood", "sa", "llm_calls", "seconds"]
    shown = table[[c for c in cols if c in table.columns]].copy()
    lines = ["| " + " | ".join(shown.columns) + " |", "|" + "---|" * len(shown.columns)]

    def fmt(v: Any) -> str:
        if isinstance(v, float):
            return f"{v:.3g}" if not math.isnan(v) else "nan"
        return str(v)

    for _, row in shown.iterrows():
        lines.append("| " + " | ".join(fmt(v) for v in row.values) + " |")
    summary = summary_row(table)
    mean_cells = ["**mean**"]
    for c in shown.columns[1:]:
        if c.startswith("acc_") or c == "sa":
            mean_cells.append(f"{summary[c]:.3g}")
        elif c.startswith("nmse_"):
            mean_cells.append(f"median {summary['median_' + c]:.3g}")
        else:
            mean_cells.append(f"{summary['mean_' + c]:.3g}")
    lines.append("| " + " | ".join(mean_cells) + " |")
    return "\n".join(lines)


def domain_table(table: pd.DataFrame) -> pd.DataFrame:
    """Per-domain scores: mean accuracies and SA, median NMSE, task counts (the way LLM-SRBench reports)."""
    if table.empty:
        return pd.DataFrame()
    rows = []
    for domain, group in table.groupby(table["domain"].fillna("").replace("", "(none)"), sort=True):
        summary = summary_row(group)
        rows.append({"domain": domain, **{k: v for k, v in summary.items() if not k.startswith("mean_")}})
    rows.append({"domain": "all", **{k: v for k, v in summary_row(table).items() if not k.startswith("mean_")}})
    return pd.DataFrame(rows)


def domain_markdown(table: pd.DataFrame) -> str:
    """:func:`domain_table` as Markdown."""
    domains = domain_table(table)
    if domains.empty:
        return ""
    cols = [c for c in ("domain", "tasks", "acc_0.01_id", "acc_all_0.01_id", "acc_0.001_id", "acc_0.01_ood",
                        "acc_all_0.01_ood", "acc_0.001_ood", "median_nmse_id", "median_nmse_ood", "sa")
            if c in domains.columns]
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for _, row in domains[cols].iterrows():
        cells = [str(row["domain"])] + [f"{v:.3g}" if isinstance(v, float) and not math.isnan(v) else
                                        ("nan" if isinstance(v, float) else str(v)) for v in row.values[1:]]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)
