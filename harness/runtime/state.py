"""Search state of one run: every node, the global candidate pool, the Pareto front and the budget.

Branches run concurrently, so every mutation holds one lock. The state persists as it grows: one JSON line per
node in ``nodes.jsonl`` (flushed and fsynced, so a crash loses nothing already done), the prompts in
``messages.jsonl`` (one line per distinct prompt, keyed by the node's ``messages_digest``), ``run.json`` at start
and end, and ``result.json`` at the end (written to a temporary file, then renamed, so readers never see half a
file).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import threading
import time
from pathlib import Path
from typing import Any, Iterable

from harness.core.candidates import Candidate, pareto_front, select
from harness.core.context import BudgetTracker, RunStatus
from harness.core.jsonio import json_restore, json_safe, write_json_atomic
from harness.runtime.nodes import Node, NodeKind, Relation, SearchCoordinate, relation_between

RESPONSE_LIMIT = 4000
NODES_FILE = "nodes.jsonl"
MESSAGES_FILE = "messages.jsonl"
RUN_FILE = "run.json"
RESULT_FILE = "result.json"


def messages_digest(messages: list[dict[str, Any]] | None) -> str | None:
    """sha256 of the prompt messages (canonical JSON), so identical prompts are recognisable in traces."""
    if messages is None:
        return None
    blob = json.dumps(messages, sort_keys=True, default=str, ensure_ascii=False)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


def _bounded(text: str | None, limit: int = RESPONSE_LIMIT) -> str:
    text = text or ""
    if len(text) <= limit:
        return text
    return text[: limit - 40] + f"\n... [{len(text) - limit + 40} characters cut]"


def task_summary(task: Any) -> dict[str, Any]:
    """Small description of a task for run.json (duck-typed so any Task-like object works)."""
    if task is None:
        return {}
    if isinstance(task, dict):
        return dict(task)
    if callable(getattr(task, "to_dict", None)):
        return task.to_dict()
    out: dict[str, Any] = {}
    for key in ("name", "domain", "input_names", "target_name", "ground_truth"):
        if hasattr(task, key):
            value = getattr(task, key)
            out[key] = list(value) if isinstance(value, (list, tuple)) else value
    for split in ("train", "test_id", "test_ood"):
        data = getattr(task, split, None)
        if data is not None and hasattr(data, "y"):
            out[f"n_{split}"] = int(len(data.y))
    return out


class SearchRunState:
    """Nodes, candidate pool and budget of one run; persisted under ``run_dir`` when one is given."""

    def __init__(
        self,
        run_dir: str | Path | None = None,
        *,
        budget: BudgetTracker | None = None,
        task: Any = None,
        config: dict[str, Any] | None = None,
        split: str = "valid",
        selection: str = "accuracy",
        selection_tolerance: float = 0.5,
    ):
        self.run_dir = Path(run_dir) if run_dir is not None else None
        self.selection, self.selection_tolerance = selection, float(selection_tolerance)
        self.budget = budget
        self.task = task_summary(task)
        self.config = dict(config or {})
        self.split = split
        self.nodes: list[Node] = []
        self.status = "running"
        self.error: str | None = None
        self.started = time.time()
        self.ended: float | None = None
        self._pool: dict[str, Candidate] = {}
        self._origin: dict[str, int | None] = {}
        self._lock = threading.RLock()
        self._nodes_fh = None
        self._messages_seen: set[str] = set()
        self.source_dir = self.run_dir  # where a loaded state came from
        if self.run_dir is not None:
            self.run_dir.mkdir(parents=True, exist_ok=True)
            old = self.run_dir / NODES_FILE
            if old.exists():  # a new run in an old folder: keep the old trace aside instead of mixing ids
                k = 0
                while (aside := old.with_name(f"nodes.{int(self.started)}.{k}.jsonl")).exists():
                    k += 1
                old.rename(aside)
                prompts = self.run_dir / MESSAGES_FILE
                if prompts.exists():
                    prompts.rename(aside.with_name(aside.name.replace("nodes.", "messages.", 1)))
            self._write_run_json()

    # -- recording ------------------------------------------------------------------------------------------
    def add_node(
        self,
        kind: NodeKind | str,
        *,
        at: SearchCoordinate | None = None,
        parent: int | None = None,
        branch: str | None = None,
        messages: list[dict[str, Any]] | None = None,
        response: str | None = "",
        tool_results: Iterable[Any] = (),
        candidates: Iterable[Candidate] = (),
        prompt_tokens: int = 0,
        completion_tokens: int = 0,
        seconds: float = 0.0,
        error: str | None = None,
        info: dict[str, Any] | None = None,
        relation: Relation | None = None,
    ) -> Node:
        """Record a node (and its candidates into the pool) and append it to nodes.jsonl.

        ``kind`` is checked (:class:`NodeKind`); ``at`` is its place in the R-C-L-K search (none for role calls
        and SR steps of a workflow); the edge to ``parent`` gets its relation from the two kinds unless one is
        given."""
        kind = NodeKind.parse(kind)
        at = at or SearchCoordinate()
        cands = list(candidates)
        records = [r.to_record() if hasattr(r, "to_record") else dict(r) for r in tool_results]
        with self._lock:
            if relation is None and parent is not None and 0 <= parent < len(self.nodes):
                relation = relation_between(self.nodes[parent].kind, kind)
            node = Node(
                id=len(self.nodes),
                kind=kind,
                R=at.R,
                C=at.C,
                L=at.L,
                K=at.K,
                parent=parent,
                relation=relation,
                branch=branch,
                messages_digest=messages_digest(messages),
                response=_bounded(response),
                tool_results=records,
                candidates=[c.to_record() for c in cands],
                prompt_tokens=int(prompt_tokens or 0),
                completion_tokens=int(completion_tokens or 0),
                seconds=round(float(seconds or 0.0), 6),
                error=error,
                time=round(time.time(), 3),
                budget=self.budget_used(),
                info=dict(info or {}),
            )
            self.nodes.append(node)
            self._add_to_pool(cands, node.id)
            if messages is not None and node.messages_digest not in self._messages_seen:
                self._messages_seen.add(node.messages_digest)
                self._append_line({"digest": node.messages_digest, "messages": json_safe(messages)}, MESSAGES_FILE)
            self._append_line(node.to_record())
        return node

    def add_candidates(self, candidates: Iterable[Candidate], node_id: int | None = None) -> int:
        """Pool candidates as soon as a tool finds them (first equation wins); returns how many were new.

        This only updates the in-memory pool, so other branches and the progress summary see them at once; they
        are persisted with the node that reports the tool call (``add_node(candidates=...)``), which also
        becomes their origin when ``node_id`` is not given here.
        """
        with self._lock:
            return self._add_to_pool(list(candidates), node_id)

    def _add_to_pool(self, candidates: list[Candidate], node_id: int | None) -> int:
        new = 0
        for cand in candidates:
            if cand.equation in self._pool:
                if self._origin.get(cand.equation) is None:
                    self._origin[cand.equation] = node_id
                continue
            self._pool[cand.equation] = cand
            self._origin[cand.equation] = node_id
            new += 1
        return new

    def _append_line(self, record: dict[str, Any], name: str = NODES_FILE) -> None:
        if self.run_dir is None:
            return
        if name != NODES_FILE:  # rare (once per distinct prompt): open, append, close
            with open(self.run_dir / name, "a", encoding="utf-8") as fh:
                fh.write(json.dumps(record, ensure_ascii=False) + "\n")
            return
        if self._nodes_fh is None:
            self._nodes_fh = open(self.run_dir / NODES_FILE, "a", encoding="utf-8")
        self._nodes_fh.write(json.dumps(record, ensure_ascii=False) + "\n")
        self._nodes_fh.flush()
        os.fsync(self._nodes_fh.fileno())

    # -- queries --------------------------------------------------------------------------------------------
    @property
    def candidates(self) -> list[Candidate]:
        with self._lock:
            return list(self._pool.values())

    def origin(self, equation: str) -> int | None:
        """Id of the node that first produced ``equation``."""
        return self._origin.get(equation)

    def best(self) -> Candidate | None:
        """The selected equation under the run's selection rule (see ``harness.core.candidates.select``)."""
        return select(self.candidates, self.selection, self.selection_tolerance, self.split)

    def front(self) -> list[Candidate]:
        return pareto_front(self.candidates, self.split)

    def top(self, k: int) -> list[Candidate]:
        """The ``k`` best candidates by validation NMSE then complexity (unscored ones excluded)."""
        usable = [c for c in self.candidates if math.isfinite(c.metric(self.split, "nmse"))]
        return sorted(usable, key=lambda c: c.sort_key(self.split))[: max(0, k)]

    def budget_used(self) -> dict[str, Any]:
        return dict(self.budget.snapshot()) if self.budget is not None else {}

    def budget_left(self) -> dict[str, Any]:
        """What is left of each limited resource (unlimited ones are left out)."""
        if self.budget is None or getattr(self.budget, "budget", None) is None:
            return {}
        used = self.budget_used()
        limits = self.budget.budget
        pairs = {
            "llm_calls": getattr(limits, "max_llm_calls", None),
            "tokens": getattr(limits, "max_tokens", None),
            "solver_runs": getattr(limits, "max_solver_runs", None),
            "seconds": getattr(limits, "max_seconds", None),
        }
        return {k: max(0, round(lim - used.get(k, 0), 3)) for k, lim in pairs.items() if lim is not None}

    def counts(self) -> dict[str, Any]:
        with self._lock:
            by_kind: dict[str, int] = {}
            for node in self.nodes:
                by_kind[str(node.kind)] = by_kind.get(str(node.kind), 0) + 1
            return {
                "nodes": len(self.nodes),
                "nodes_by_kind": by_kind,
                "errors": sum(1 for n in self.nodes if n.error),
                "tool_calls": sum(len(n.tool_results) for n in self.nodes),
                "candidates": len(self._pool),
                "prompt_tokens": sum(n.prompt_tokens for n in self.nodes),
                "completion_tokens": sum(n.completion_tokens for n in self.nodes),
            }

    def progress_summary(self, max_chars: int = 800, k: int = 3) -> str:
        """Bounded text for the next prompt: best equations, what was tried, budget left."""
        lines: list[str] = []
        top = self.top(k)
        if top:
            lines.append("Best equations so far (validation NMSE, complexity):")
            for i, cand in enumerate(top, 1):
                eq = cand.equation if len(cand.equation) <= 160 else cand.equation[:157] + "..."
                lines.append(f"{i}. {eq}  [nmse={cand.metric(self.split):.3g}, complexity={cand.complexity}]")
        else:
            lines.append("No scored equation yet.")
        counts = self.counts()
        tools: dict[str, int] = {}
        with self._lock:
            for node in self.nodes:
                for rec in node.tool_results:
                    name = rec.get("tool_name", "?")
                    tools[name] = tools.get(name, 0) + 1
        tried = ", ".join(f"{n} x{c}" for n, c in sorted(tools.items())) or "no tool calls"
        lines.append(f"Tried: {counts['nodes']} steps, {counts['candidates']} distinct equations; {tried}.")
        left = self.budget_left()
        if left:
            lines.append("Budget left: " + ", ".join(f"{k}={v}" for k, v in left.items()) + ".")
        text = "\n".join(lines)
        if len(text) > max_chars:
            text = text[: max(0, max_chars - 4)] + " ..."
        return text

    # -- persistence ----------------------------------------------------------------------------------------
    def _run_record(self) -> dict[str, Any]:
        return {
            "task": self.task,
            "config": self.config,
            "started": self.started,
            "ended": self.ended,
            "status": self.status,
            "error": self.error,
        }

    def _write_run_json(self) -> None:
        if self.run_dir is not None:
            write_json_atomic(self.run_dir / RUN_FILE, self._run_record())

    def result(self) -> dict[str, Any]:
        """What result.json holds: best candidate, front, counts, metrics per split, budget, status."""
        best = self.best()
        return {
            "status": self.status,
            "error": self.error,
            "best": best.to_record() if best else None,
            "metrics": dict(best.metrics) if best else {},
            "front": [c.to_record() for c in self.front()],
            "counts": self.counts(),
            "budget_used": self.budget_used(),
            "budget_left": self.budget_left(),
            "started": self.started,
            "ended": self.ended,
        }

    def finish(self, status: RunStatus | str, error: str | None = None) -> dict[str, Any]:
        """Close the run: write result.json (atomically) and the final run.json; returns the result."""
        with self._lock:
            self.status = status
            self.error = error
            self.ended = time.time()
            result = self.result()
            if self.run_dir is not None:
                write_json_atomic(self.run_dir / RESULT_FILE, result)
                self._write_run_json()
            if self._nodes_fh is not None:
                self._nodes_fh.close()
                self._nodes_fh = None
        return result

    @classmethod
    def load(cls, run_dir: str | Path) -> "SearchRunState":
        """Rebuild nodes and pool from a run folder, read-only (nothing is written back).

        A torn last line (a crash mid-write) is skipped.
        """
        run_dir = Path(run_dir)
        state = cls(None)
        state.run_dir = run_dir
        run_file = run_dir / RUN_FILE
        if run_file.exists():
            run = json_restore(json.loads(run_file.read_text(encoding="utf-8")))
            state.task = run.get("task", {})
            state.config = run.get("config", {})
            state.started = run.get("started", state.started)
            state.ended = run.get("ended")
            state.status = RunStatus.parse(run.get("status", "unknown"))  # older files: "aborted", "error"
            state.error = run.get("error")
        nodes_file = run_dir / NODES_FILE
        if nodes_file.exists():
            for line in nodes_file.read_text(encoding="utf-8").splitlines():
                if not line.strip():
                    continue
                try:
                    node = Node.from_record(json.loads(line))
                except (json.JSONDecodeError, TypeError, ValueError):
                    continue
                state.nodes.append(node)
                state._add_to_pool([Candidate.from_record(r) for r in node.candidates], node.id)
        state.run_dir = None  # a loaded state is for inspection: never append to the original files
        state.source_dir = run_dir
        return state
