"""Text feedback for rewrite calls, built from cached evaluation records (so it never needs a solver run).

- ``discovery_feedback``: stage 1 / adaptation — which equations were found, their errors, what failed.
- ``sr_diagnostics_feedback``: stage 3 default — residual patterns of the selected equation
  (``harness.core.residuals.residual_report``), candidate structures, what was tried and how it scored.
- ``trace_feedback``: stage 3 ablation — the raw node records of the runs (``nodes.jsonl``), bounded.
"""

from __future__ import annotations

import json
import logging
import math
from pathlib import Path
from typing import Any, Iterable, Sequence

from optimize.records import EvalRecord

log = logging.getLogger(__name__)


def _g(x: Any) -> str:
    try:
        x = float(x)
    except (TypeError, ValueError):
        return "n/a"
    return f"{x:.3g}" if math.isfinite(x) else "inf"


def _cut(text: str, n: int) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= n else text[: n - 3] + "..."


def _bounded(lines: Iterable[str], max_chars: int) -> str:
    out: list[str] = []
    used = 0
    for line in lines:
        if used + len(line) + 1 > max_chars:
            out.append("... [more omitted]")
            break
        out.append(line)
        used += len(line) + 1
    return "\n".join(out)


def _solved(rec: EvalRecord) -> bool:
    """At least 95 % of the task's in-domain test points within 1 % (acc_0.01), whatever the training metric is
    (under log_nmse a score of 1 is only an NMSE of 0.1)."""
    test_id = (rec.metrics or {}).get("test_id") or {}
    if "acc_0.01" in test_id:
        return float(test_id["acc_0.01"]) >= 1.0
    return rec.metric == "acc_0.01" and rec.score >= 1.0


def _outcome(rec: EvalRecord) -> str:
    if rec.equation is None:
        why = "; ".join(rec.errors[:2]) or rec.status
        return f"no equation found ({_cut(why, 160)})"
    verdict = "SOLVED" if _solved(rec) else "not solved"
    return f"{verdict}: {_cut(rec.equation, 160)} ({rec.metric}={_g(rec.score)}, nmse={_g(rec.nmse)})"


def _task_line(task: Any) -> str:
    inputs = ", ".join(task.input_names)
    desc = f" — {_cut(task.target_description, 80)}" if getattr(task, "target_description", "") else ""
    return f"Task {task.name} ({task.domain}): {task.target_name}({inputs}){desc}"


def discovery_feedback(records: Sequence[EvalRecord], tasks: dict[str, Any], max_chars: int = 2500) -> str:
    """What the current instruction achieved task by task."""
    solved = sum(1 for r in records if _solved(r))
    lines = [f"Solved {solved} of {len(records)} runs (solved: at least 95 % of the task's in-domain test points "
             "within 1 %)."]
    for rec in sorted(records, key=lambda r: r.score):
        task = tasks.get(rec.task)
        lines.append(_task_line(task) if task is not None else f"Task {rec.task}")
        lines.append("  " + _outcome(rec))
        if rec.errors:
            lines.append("  problems: " + _cut("; ".join(rec.errors[:3]), 200))
    return _bounded(lines, max_chars)


def _residual_summary(rec: EvalRecord, task: Any, drop_terms: bool) -> str:
    if rec.equation is None or task is None:
        return ""
    try:
        from harness.core.context import AgentContext
        from harness.core.residuals import residual_report

        report = residual_report(rec.equation, AgentContext(task=task, seed=rec.seed), drop_terms=drop_terms,
                                 max_terms=4)
        return str(report.get("summary", ""))
    except Exception as exc:  # noqa: BLE001 - diagnostics are best effort, feedback goes on without them
        log.debug("residual report failed for %s: %s", rec.task, exc)
        return ""


def sr_diagnostics_feedback(
    records: Sequence[EvalRecord], tasks: dict[str, Any], max_chars: int = 2500, drop_terms: bool = True
) -> str:
    """Residual patterns, candidate structures and search outcomes, worst tasks first."""
    solved = sum(1 for r in records if _solved(r))
    lines = [f"Solved {solved} of {len(records)} runs."]
    for rec in sorted(records, key=lambda r: r.score):
        task = tasks.get(rec.task)
        lines.append(_task_line(task) if task is not None else f"Task {rec.task}")
        lines.append("  selected " + _outcome(rec))
        residuals = _residual_summary(rec, task, drop_terms)
        if residuals:
            lines.append("  residuals: " + _cut(residuals, 300))
        if rec.top:
            tried = "; ".join(
                f"{_cut(c.get('equation', ''), 70)} [nmse {_g(c.get('valid_nmse'))}, size {c.get('complexity')}"
                f", {c.get('source') or '?'}]"
                for c in rec.top[:3]
            )
            lines.append("  candidates: " + tried)
        lines.append(f"  cost: {rec.llm_calls} model calls, {rec.solver_runs} SR runs, {_g(rec.seconds)} s")
        if rec.errors:
            lines.append("  problems: " + _cut("; ".join(rec.errors[:3]), 200))
    return _bounded(lines, max_chars)


def _node_lines(run_dir: str | None, per_node: int) -> list[str]:
    if not run_dir or not Path(run_dir).exists():
        return ["  (no trace recorded)"]
    lines = []
    for path in sorted(Path(run_dir).rglob("nodes.jsonl")):
        for raw in path.read_text(encoding="utf-8").splitlines():
            try:
                node = json.loads(raw)
            except json.JSONDecodeError:
                continue
            tools = ", ".join(f"{t.get('tool_name', '?')}:{'ok' if t.get('ok', True) else 'error'}"
                              for t in node.get("tool_results", []))
            text = f"  [{node.get('kind')}{'/' + str(node['branch']) if node.get('branch') else ''}] "
            text += _cut(node.get("response") or "", per_node)
            if tools:
                text += f" | tools: {tools}"
            if node.get("error"):
                text += f" | error: {_cut(node['error'], 120)}"
            lines.append(text)
    return lines or ["  (empty trace)"]


def trace_feedback(records: Sequence[EvalRecord], tasks: dict[str, Any], max_chars: int = 2500,
                   per_node: int = 200) -> str:
    """The raw execution traces (node records) of the runs, bounded: the ablation of SR diagnostics."""
    lines: list[str] = []
    for rec in sorted(records, key=lambda r: r.score):
        lines.append(f"Run on task {rec.task} (seed {rec.seed}), score {_g(rec.score)}:")
        lines.extend(_node_lines(rec.run_dir, per_node))
    return _bounded(lines, max_chars)
