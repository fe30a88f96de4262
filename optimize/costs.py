"""What a run paid, per stage, read from its files: solver executions, model calls and tokens, wall time, early
stops and the LLM response cache (the report's cost section)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from optimize.cache import EvalCache
from optimize.report_format import TITLES, fmt

def _record_tokens(record: dict[str, Any]) -> int:
    """A solve's tokens: stored with the record, else read from its run folder (rows from before tokens were kept)."""
    if record.get("tokens"):
        return int(record["tokens"])
    result = Path(record.get("run_dir") or "") / "result.json"
    try:
        counts = json.loads(result.read_text(encoding="utf-8")).get("counts") or {}
    except (OSError, ValueError):
        return 0
    return int(counts.get("prompt_tokens", 0) or 0) + int(counts.get("completion_tokens", 0) or 0)


def cost_rows(run_dir: Path, results: dict[str, dict[str, Any] | None]) -> list[dict[str, Any]]:
    """What each stage paid. Evaluations, solver executions, LLM calls and tokens of the solves come from the
    evaluation cache (exact over every process and resume); wall time and the model's paid calls (solves, rewrites,
    reflections) and cache hits from the stage results (every process that finished the stage, summed)."""
    path = Path(run_dir) / "evals.db"
    if not path.exists():
        return []
    cache = EvalCache(path)
    try:
        totals = cache.totals_by_stage()
        tokens: dict[str, int] = {}
        for record in cache.records():
            tokens[record.get("stage", "")] = tokens.get(record.get("stage", ""), 0) + _record_tokens(record)
    finally:
        cache.close()
    rows = []
    for stage in ("init", "search", "refine", "freeze"):
        paid, cost = totals.get(stage, {}), (results.get(stage) or {}).get("cost") or {}
        if not paid and not cost:
            continue
        rows.append({"stage": stage, "wall_seconds": cost.get("wall_seconds"),
                     "evaluations": paid.get("evaluations", 0), "solver_runs": paid.get("solver_runs", 0),
                     "solve_llm_calls": paid.get("llm_calls", 0), "solve_tokens": tokens.get(stage, 0),
                     "llm_calls_paid": cost.get("llm_calls_paid"),
                     "tokens_paid": (cost["prompt_tokens"] + cost["completion_tokens"]) if cost else None,
                     "llm_cache_hits": cost.get("llm_cache_hits")})
    return rows


def cost_table(rows: list[dict[str, Any]]) -> list[str]:
    if not rows:
        return []

    def total(key: str) -> Any:
        values = [r[key] for r in rows]
        return None if any(v is None for v in values) else sum(values)

    lines = ["| stage | wall time | evaluations run | solver executions | LLM calls in those solves | tokens in those "
             "solves | LLM calls paid (solves + rewrites + reflections) | tokens paid | calls answered by the cache |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows + [{"stage": "**total**", **{k: total(k) for k in rows[0] if k != "stage"}}]:
        wall = f"{r['wall_seconds'] / 60:.1f} min" if r["wall_seconds"] is not None else "–"
        lines.append(f"| {TITLES.get(r['stage'], r['stage'])} | {wall} | {r['evaluations']} | {r['solver_runs']} | "
                     f"{r['solve_llm_calls']} | {r['solve_tokens']} | {fmt(r['llm_calls_paid'], 0)} | "
                     f"{fmt(r['tokens_paid'], 0)} | {fmt(r['llm_cache_hits'], 0)} |")
    return lines + ["", "Freeze = scoring every stage's harness for this report (not part of training). Wall time "
                    "and paid calls: the processes that finished the stage, summed (a run killed mid-stage is not "
                    "counted; \"–\" where a stage ran before they were recorded)."]


def early_stop_savings(run_dir: Path) -> dict[str, int] | None:
    """Training runs that stopped at an exact fit (``SRSettings.stop_at_exact``): how many, and the SR runs and
    role calls a full run of their harness would have made beyond what they did."""
    from workflows.harness import Harness
    from workflows.params import expected_llm_calls, expected_solver_runs

    path = Path(run_dir) / "evals.db"
    if not path.exists():
        return None
    cache = EvalCache(path)
    try:
        stopped = [r for r in cache.records() if r.get("status") == "target_reached"]
        out = {"runs": len(stopped), "solver_runs": 0, "llm_calls": 0, "shared_runs": cache.shared_count()}
        for record in stopped:
            spec = cache.spec(record["digest"])
            if spec is None:
                continue
            harness = Harness.from_dict(spec)
            out["solver_runs"] += max(0, expected_solver_runs(harness.workflow, harness.sr_settings)
                                      - int(record.get("solver_runs", 0)))
            out["llm_calls"] += max(0, expected_llm_calls(harness.workflow, harness.role_agents)
                                    - int(record.get("llm_calls", 0)))
        return out
    finally:
        cache.close()


def llm_cache_stats(run_dir: Path) -> dict[str, int] | None:
    """Stored answers and hits of the run's LLM response cache (hits as counted by the processes that ran)."""
    import sqlite3

    path = Path(run_dir) / "llm_cache.db"
    if not path.exists():
        return None
    with sqlite3.connect(path, timeout=30) as conn:
        stored = conn.execute("SELECT COUNT(*) FROM responses").fetchone()[0]
        row = conn.execute("SELECT name FROM sqlite_master WHERE name = 'hits'").fetchone()
        hits = conn.execute("SELECT COALESCE(SUM(n), 0) FROM hits").fetchone()[0] if row else 0
    return {"stored": int(stored), "hits": int(hits)}
