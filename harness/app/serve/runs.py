"""Runs of the web app: each solve in its own thread, at most ``max_runs`` at once (the rest queued), every one
steerable through its :class:`~harness.runtime.interaction.RunControl`, and one model client per model settings
shared by all runs (the embedded model is loaded once).

Why threads in this process: the SR engine already runs in worker processes and the model is in-process; one
server process keeps a single copy of the model, and a failing run ends as ``failed`` with its error while the
server goes on serving.
"""

from __future__ import annotations

import json
import logging
import secrets
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import harness.app.serve.admission as admission
from harness.app.serve.config import ServeSettings, load_settings
from harness.app.serve.models import RunRequest
from harness.app.serve.results import result_payload
from harness.app.serve.workspace import Workspace, WorkspaceError
from harness.runtime.interaction import RunControl

log = logging.getLogger(__name__)
FINAL = ("done", "failed", "stopped")
STATUS_FILE = "status.json"
REQUEST_FILE = "request.json"


@dataclass
class Prepared:
    """A request checked and loaded: what the run thread needs."""

    harness: Any
    task: Any
    llm_config: Any
    budget: Any
    sr: dict[str, Any]
    seed: int
    agent: Any = None  # an AgentConfig: the interactive agent runs instead of the workflow
    search: Any = None  # the agent's SR settings (the harness's, with the request's overrides; no floor)


@dataclass
class LiveRun:
    id: str
    run_dir: Path
    request: dict[str, Any]
    control: RunControl = field(default_factory=RunControl)
    state: str = "queued"  # queued | running | done | failed | stopped
    error: str | None = None
    created: float = field(default_factory=time.time)
    thread: threading.Thread | None = None
    client: str = ""  # the address that started it (the per-client cap on unfinished runs)

    def status(self) -> str:
        """The public status: running splits into paused (the user paused) and waiting (for the user)."""
        if self.state == "running":
            if self.control.paused:
                return "paused"
            if self.control.phase == "waiting":
                return "waiting"
        return self.state


class RunManager:
    """Starts, steers and lists the workspace's runs (see the module docstring)."""

    def __init__(self, workspace: Workspace, *, max_runs: int = 1, make_client: Callable[[Any], Any] | None = None,
                 settings: ServeSettings | None = None):
        self.workspace = workspace
        self.settings = settings or load_settings()
        self._slots = threading.Semaphore(max(1, int(max_runs)))
        self._runs: dict[str, LiveRun] = {}
        self._clients: dict[str, Any] = {}
        self._lock = threading.Lock()
        self._make_client = make_client
        self._closing = False

    # -- starting -------------------------------------------------------------------------------------------
    def prepare(self, req: RunRequest) -> Prepared:
        """Check everything a run needs before it is queued, so a bad request is a 4xx, not a failed run."""
        from pydantic import ValidationError

        from harness.app.artifact import ArtifactError, FrozenHarness
        from harness.app.cli_support import config_error
        from harness.core.task import TaskError

        limits = self.settings.limits
        try:
            harness = FrozenHarness.resolve(self.workspace.harness_file(req.harness))
            llm_config = admission.llm_config(self.settings, harness, req.llm)
            budget = admission.budget(limits, req)
            settings = admission.sr_settings(limits, harness, req.sr)
            agent = search = None
            if req.agent is not None:
                agent = admission.agent_config(limits, req.agent)
                search = settings.search_settings(harness.backend, floor=False)
            task = self._task(req)
        except WorkspaceError:
            raise
        except ValidationError as exc:
            raise WorkspaceError(config_error(exc)) from None
        except (ArtifactError, TaskError, OSError, ValueError, TypeError) as exc:
            raise WorkspaceError(str(exc).splitlines()[0][:300] if str(exc) else type(exc).__name__) from None
        return Prepared(harness, task, llm_config, budget, dict(req.sr), req.seed, agent, search)

    def _task(self, req: RunRequest) -> Any:
        if req.suite is not None:
            import benchmarks

            suite = req.suite.partition(":")[0]
            if suite not in ("synthetic", "lsr_like"):
                raise WorkspaceError("suite must be a built-in generated suite: synthetic:<task> or lsr_like:<task>")
            return benchmarks.load_task(req.suite)
        from benchmarks.sources import table

        path = self.workspace.data_file(req.data or "")
        target = req.target
        if target is None:
            import pandas as pd

            target = str(pd.read_csv(path, nrows=0).columns[-1])
        descriptions = {k: v for k, v in req.descriptions.items() if v}
        return table.load_table(path, target, inputs=req.inputs, name=req.name,
                                descriptions={k: v for k, v in descriptions.items() if k != target},
                                target_description=descriptions.get(target), ood_column=req.ood_column)

    def submit(self, req: RunRequest, client: str = "") -> LiveRun:
        """Queue a checked run; it starts when a slot is free. A client (address) with ``max_runs_per_client``
        unfinished runs gets a 429 (one page cannot fill the queue for everyone)."""
        with self._lock:
            self._check_client_cap(client)  # before the work of loading the data, and again when it is counted
        prepared = self.prepare(req)
        run_id = time.strftime("%Y%m%d-%H%M%S") + "-" + secrets.token_hex(3)
        run_dir = self.workspace.run_dir(run_id)
        run = LiveRun(run_id, run_dir, req.model_dump(), client=client)
        with self._lock:
            self._check_client_cap(client)
            self._runs[run_id] = run  # counted from now on: two requests at once cannot both pass the cap
        try:
            run_dir.mkdir(parents=True)
            (run_dir / REQUEST_FILE).write_text(json.dumps(run.request, indent=1), encoding="utf-8")
        except OSError:
            with self._lock:
                self._runs.pop(run_id, None)
            raise
        self._save_status(run)
        run.thread = threading.Thread(target=self._work, args=(run, prepared), name=f"run-{run_id}", daemon=True)
        run.thread.start()
        return run

    def _check_client_cap(self, client: str) -> None:
        cap = self.settings.limits.max_runs_per_client
        if sum(1 for r in self._runs.values() if r.client == client and r.state not in FINAL) >= cap:
            raise admission.Refused(f"this client has {cap} unfinished runs, the server's limit (--limit "
                                    "max_runs_per_client=...): wait for one to end or stop one", status=429)

    def _client(self, config: Any) -> Any:
        """One client per model settings, shared by every run (so the embedded model is loaded once)."""
        key = json.dumps(config.model_dump(mode="json"), sort_keys=True, default=str)
        with self._lock:
            if key not in self._clients:
                if self._make_client is not None:
                    self._clients[key] = self._make_client(config)
                else:
                    from harness.llm.factory import make_llm

                    self._clients[key] = make_llm(config)
            return self._clients[key]

    def _work(self, run: LiveRun, p: Prepared) -> None:
        while not self._slots.acquire(timeout=0.25):  # queued: a stop before the start ends it here
            if run.control.stop_requested or self._closing:
                run.state, run.error = "stopped", "stopped before it started"
                self._save_status(run)
                return
        try:
            if run.control.stop_requested or self._closing:
                run.state, run.error = "stopped", "stopped before it started"
                return
            run.state = "running"
            self._save_status(run)
            solution = None
            if p.agent is not None:
                status, errors, found = self._run_agent(run, p)
            else:
                solution = p.harness.solve(p.task, llm=self._client(p.llm_config), budget=p.budget,
                                           run_dir=run.run_dir, seed=p.seed, sr_settings=p.sr, max_workers=1,
                                           control=run.control)
                status, errors, found = str(solution.status), solution.errors, solution.equation
            self._write_extras(run.run_dir, p.task, solution)
            run.state = {"cancelled": "stopped", "failed": "failed", "failed_llm": "failed"}.get(status, "done")
            if run.state != "done" or found is None:
                run.error = "; ".join(errors[:3]) or (None if run.state != "failed" else status)
            if run.state == "done" and found is None:
                run.state, run.error = "failed", run.error or "no usable equation found"
        except Exception as exc:  # a failing run is `failed` with its error; the server goes on
            log.exception("run %s failed", run.id)
            run.state, run.error = "failed", f"{type(exc).__name__}: {exc}"[:500]
        finally:
            self._slots.release()
            self._save_status(run)

    def _run_agent(self, run: LiveRun, p: Prepared) -> tuple[str, list[str], Any]:
        """The R-C-L-K agent, interactive: a turn without a tool call waits for the user's message."""
        from harness.core.context import AgentContext, BudgetTracker
        from harness.runtime.agent import SRAgent

        ctx = AgentContext(task=p.task, seed=p.seed, workspace=run.run_dir, budget=BudgetTracker(p.budget))
        ctx.search = p.search
        agent = SRAgent(self._client(p.llm_config), ctx, p.agent, run_dir=run.run_dir, control=run.control,
                        run_info={"command": "serve", "request": run.request})
        result = agent.run()
        return str(result.status), [result.error] if result.error else [], result.best

    @staticmethod
    def _write_extras(run_dir: Path, task: Any, solution: Any) -> None:
        """The plots and view.html of ``python -m harness solve`` / ``view``; a convenience, never fatal."""
        from harness.app.solve_cli import write_plots
        from harness.app.view import write_view

        try:
            if solution is not None and solution.equation is not None:
                write_plots(run_dir, task, solution)
            write_view(run_dir)
        except Exception:
            log.warning("plots / view of %s not written", run_dir, exc_info=True)

    def _save_status(self, run: LiveRun) -> None:
        record = {"status": run.state, "error": run.error, "created": run.created}
        try:
            (run.run_dir / STATUS_FILE).write_text(json.dumps(record), encoding="utf-8")
        except OSError:
            log.warning("status of %s not written", run.id, exc_info=True)

    # -- steering -------------------------------------------------------------------------------------------
    def live(self, run_id: str) -> LiveRun:
        self.workspace.run_dir(run_id)  # checks the id's form
        run = self._runs.get(run_id)
        if run is None:
            if (self.workspace.runs_dir / run_id).is_dir():
                raise WorkspaceError(f"run {run_id} is not running in this server", status=409)
            raise WorkspaceError(f"no such run: {run_id!r}", status=404)
        return run

    def control(self, run_id: str, action: str, text: str | None = None) -> str:
        run = self.live(run_id)
        if run.state in FINAL:
            raise WorkspaceError(f"run {run_id} is {run.state}", status=409)
        try:
            if action == "message":
                run.control.send(text or "")
            else:
                getattr(run.control, action)()
        except ValueError as exc:
            raise WorkspaceError(str(exc), status=409) from None
        return run.status()

    # -- reading --------------------------------------------------------------------------------------------
    def info(self, run_id: str, *, with_result: bool = True) -> dict[str, Any]:
        run_dir = self.workspace.run_dir(run_id)
        if not run_dir.is_dir():
            raise WorkspaceError(f"no such run: {run_id!r}", status=404)
        run = self._runs.get(run_id)
        saved = _read_json(run_dir / STATUS_FILE) or {}
        if run is not None:
            status, error, created = run.status(), run.error, run.created
        else:  # a run of an earlier server: its saved status (one that never finished was interrupted)
            status = saved.get("status") or "failed"
            error = saved.get("error")
            if status not in FINAL:
                status, error = "stopped", "interrupted: the server stopped during the run"
            created = float(saved.get("created") or run_dir.stat().st_mtime)
        nodes = run_dir / "nodes.jsonl"
        info: dict[str, Any] = {
            "id": run_id, "status": status, "error": error, "created": created,
            "request": _read_json(run_dir / REQUEST_FILE) or {}, "live": run is not None and status not in FINAL,
            "nodes": sum(1 for _ in nodes.open("rb")) if nodes.is_file() else 0,
            "queued_messages": run.control.queued if run is not None else 0,
        }
        if with_result and status in FINAL:
            info["result"] = result_payload(run_dir)
        return info

    def list(self) -> list[dict[str, Any]]:
        runs = [p.name for p in self.workspace.runs_dir.iterdir() if p.is_dir()]
        out = []
        for run_id in sorted(runs, reverse=True):
            try:
                out.append(self.info(run_id, with_result=False))
            except WorkspaceError:
                continue
        return out

    def final(self, run_id: str) -> bool:
        run = self._runs.get(run_id)
        return run is None or run.state in FINAL

    def shutdown(self, wait_s: float = 10.0) -> None:
        """Stop every run (twice: running engines are killed), wait a little, close the model clients."""
        self._closing = True
        runs = list(self._runs.values())
        for run in runs:
            if run.state not in FINAL:
                run.control.stop()
                run.control.stop()
        deadline = time.monotonic() + wait_s
        for run in runs:
            if run.thread is not None:
                run.thread.join(max(0.0, deadline - time.monotonic()))
        for client in self._clients.values():
            try:
                client.close()
            except Exception:
                pass


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
