"""The state one workflow run shares between its steps, typed, and its bookkeeping: what the role steps
(:class:`workflows.role_steps.RoleSteps`), the SR steps (:class:`workflows.sr_steps.SRSteps`) and the evolution
channel (:class:`workflows.evolution.EvolutionSteps`) read and write. Each of them is a :class:`WorkflowRun`; the
runner (:mod:`workflows.runner`) combines them and adds the phases.

Threads share it: role calls run per branch, the unguided run and the evolution channel beside them, so
``_lock`` guards the errors, the stop reason, the guidance and the poor hypotheses.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Any, Callable, Protocol, Sequence

from harness.core.candidates import NMSE_FLOOR, Candidate
from harness.core.context import AgentContext, BudgetTracker
from harness.core.task import Task
from harness.llm.base import LLMClient
from harness.runtime.interaction import RunControl
from harness.runtime.nodes import NodeKind
from harness.runtime.role_agent import RoleAgentConfig
from harness.runtime.state import SearchRunState
from harness.sr.tools import RunSRSearchTool
from workflows.params import SRSettings, WorkflowParams, expected_llm_calls, expected_solver_runs
from workflows.roles import ROLE_NAMES, role_agent_settings


EXACT_FIT = "an exact fit was found (sr.stop_at_exact)"


class GuidedWindow:
    """The guided SR runs in flight and when they should end (monotonic seconds); closed once no more will start."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._ends: dict[int, float] = {}
        self._next = 0
        self._closed = False

    def enter(self, seconds: float) -> int:
        with self._cond:
            self._next += 1
            self._ends[self._next] = time.monotonic() + max(0.0, float(seconds))
            self._cond.notify_all()
            return self._next

    def leave(self, token: int) -> None:
        with self._cond:
            self._ends.pop(token, None)
            self._cond.notify_all()

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    def seconds_left(self) -> float | None:
        """Wait until a guided run is going, then the seconds until the last running one should end; ``None``
        once the window is closed and nothing runs."""
        with self._cond:
            self._cond.wait_for(lambda: self._ends or self._closed)
            if not self._ends:
                return None
            return max(self._ends.values()) - time.monotonic()

    def wait_change(self, timeout: float) -> None:
        """Wait until a run starts or ends, the window closes, or ``timeout`` seconds pass."""
        with self._cond:
            seen = (tuple(self._ends), self._closed)
            self._cond.wait_for(lambda: (tuple(self._ends), self._closed) != seen, timeout=max(0.0, timeout))


class SharedRuns(Protocol):
    """A store of SR runs that no role influences (the unguided run of a task and seed at the same engine
    settings), so every harness that would make the same run reads the one already made: the optimizer's
    candidates then share it exactly (common random numbers) and pay for it once. Values are JSON-safe dicts."""

    def get(self, key: str) -> dict[str, Any] | None: ...

    def put(self, key: str, value: dict[str, Any]) -> None: ...


class WorkflowRun:
    """State and bookkeeping of one workflow run (one instance per run; not reusable)."""

    def __init__(
        self,
        task: Task,
        params: WorkflowParams,
        prompts: dict[str, str],
        llm: LLMClient,
        *,
        backend: str,
        sr_settings: SRSettings,
        budget: BudgetTracker,
        seed: int,
        run_dir: Path | None,
        max_workers: int,
        on_node: Callable[[Any], None] | None,
        warm_start: Sequence[str] = (),
        role_agents: dict[str, RoleAgentConfig] | None = None,
        control: RunControl | None = None,
        shared_runs: SharedRuns | None = None,
    ):
        self.shared_runs = shared_runs  # the unguided run read from / written to it
        self.control = control  # the user's queued guidance and pause / stop, taken before each role call and SR run
        self.guidance: list[str] = []  # every message delivered so far: each later role call sees them
        missing = [r for r in params.roles_used() if not (prompts.get(r) or "").strip()]
        if missing:
            raise ValueError(f"no prompt for role(s) {missing}; roles are {', '.join(ROLE_NAMES)}")
        self.role_agents = role_agent_settings(role_agents)
        self.task, self.params, self.prompts, self.llm = task, params, prompts, llm
        self.backend, self.settings, self.tracker, self.seed = backend, sr_settings, budget, seed
        self.on_node = on_node
        self.warm_start = list(dict.fromkeys(str(e) for e in warm_start if e))  # a previous fit's front
        config = {
            "workflow": params.model_dump(),
            "backend": backend,
            "sr_settings": sr_settings.model_dump(),
            "seed": seed,
            "expected_llm_calls": expected_llm_calls(params, self.role_agents),
            "role_agents": {r: c.model_dump() for r, c in self.role_agents.items()},
            "expected_solver_runs": expected_solver_runs(params, sr_settings),
        }
        self.state = SearchRunState(run_dir, budget=budget, task=task, config=config,
                                    selection=sr_settings.selection,
                                    selection_tolerance=sr_settings.selection_tolerance)
        # The SR step is a call of the run_sr_search tool, under the harness's floor (a plan only widens it).
        self.search = sr_settings.search_settings(backend)
        self.ctx = AgentContext(task=task, seed=seed, workspace=run_dir, llm=llm, state=self.state,
                                budget=budget.scoped(("solver_runs", "seconds")), fit=sr_settings.fit_settings(),
                                search=self.search)
        self.sr_tool = RunSRSearchTool(self.ctx)
        self.sr_gate = threading.Semaphore(max(1, max_workers))
        self._lock = threading.Lock()
        self.errors: list[str] = []
        self.stop_reason: str | None = None
        self.findings = ""
        self.analyst_node: int | None = None
        self.poor_hypotheses: list[Candidate] = []  # fitted but too poor alone: their terms may still be right
        self.library: tuple[list[Candidate], list[str]] | None = None  # the term library, fitted once (sr_steps)
        self._library_lock = threading.Lock()
        self.window = GuidedWindow()  # the guided SR runs in flight: the evolution channel proposes only then
        self.run_id = f"{os.getpid()}-{id(self)}-{time.time_ns()}"

    # -- bookkeeping ----------------------------------------------------------------------------------------
    def _error(self, text: str) -> None:
        with self._lock:
            self.errors.append(text[:500])

    def _stop(self, reason: str) -> None:
        with self._lock:
            self.stop_reason = self.stop_reason or reason

    @property
    def stopped(self) -> bool:
        return self.stop_reason is not None or self.ctx.cancelled()

    def _record(self, kind: NodeKind, **fields: Any) -> int:
        node = self.state.add_node(kind, **fields)
        if self.on_node is not None:
            try:
                self.on_node(node)
            except Exception:  # a progress display must never break a run
                pass
        return node.id

    def exact_found(self) -> bool:
        """With ``SRSettings.stop_at_exact``: True (and the run stops) once the pool holds an exact fit."""
        if not self.settings.stop_at_exact:
            return False
        if self.stop_reason == EXACT_FIT:
            return True
        best = self.state.best()
        if best is None or not best.metric("valid") <= NMSE_FLOOR:
            return False
        self._stop(EXACT_FIT)
        return True

    def _boundary(self, where: str) -> bool:
        """A safe boundary (before a role call or an SR run): park while the user paused, keep their messages for
        the next prompts; False once the user stopped the run, or once an exact fit makes the rest needless
        (``SRSettings.stop_at_exact``)."""
        if self.exact_found():
            return False
        if self.control is None:
            return True
        texts = self.control.checkpoint(where)
        if texts:
            with self._lock:
                self.guidance += texts
        if self.control.stop_requested:
            self._stop("stopped by the user")
            return False
        return True

    def _record_user(self, kind: Any, **fields: Any) -> Any:
        """Record a user message or control, hung off the latest node."""
        last = self.state.nodes[-1].id if self.state.nodes else None
        return self._record(kind, parent=last, **fields)
