"""The run folder's saved state: one JSON result per finished stage, journals of model-written prompts, and the
solves in flight.

A stage reads the results of the stages before it from here, so ``stage=init``, ``search``, ``refine`` and
``freeze`` can run as separate processes on one ``hydra.run.dir``. Journals record every proposed rewrite under a
stable key before it is evaluated, so a resumed stage replays the same candidates instead of asking the model
again (the evaluation cache then makes their scores free). ``in_flight/`` names the solves running now, a file per
process (:class:`InFlight`): after a process dies without a word (a native crash, a kill), it says in which stage,
on which task and seed, and the next run on the folder says so before it resumes.
"""

from __future__ import annotations

import itertools
import json
import logging
import os
import socket
import threading
import time
from pathlib import Path
from typing import Any, Callable

from harness.core.jsonio import write_json_atomic

log = logging.getLogger(__name__)

STAGE_FILES = {"baseline": "stage0_baseline.json", "init": "stage1_init.json", "search": "stage2_search.json",
               "refine": "stage3_refine.json", "freeze": "freeze.json"}


class Journal:
    """Append-only JSONL map from key to value; the first value written for a key wins."""

    def __init__(self, path: Path):
        self.path = path
        self._lock = threading.Lock()
        self._data: dict[str, Any] = {}
        if path.exists():
            for line in path.read_text(encoding="utf-8").splitlines():
                try:
                    entry = json.loads(line)
                except json.JSONDecodeError:
                    continue  # a torn last line from a crash
                self._data.setdefault(entry["key"], entry["value"])

    def get(self, key: str, default: Any = None) -> Any:
        return self._data.get(key, default)

    def __contains__(self, key: str) -> bool:
        return key in self._data

    def put(self, key: str, value: Any) -> Any:
        with self._lock:
            if key in self._data:
                return self._data[key]
            self._data[key] = value
            with open(self.path, "a", encoding="utf-8") as fh:
                fh.write(json.dumps({"key": key, "value": value}, ensure_ascii=False, default=str) + "\n")
                fh.flush()
                os.fsync(fh.fileno())
            return value

    def get_or_make(self, key: str, make: Callable[[], Any]) -> Any:
        if key in self._data:
            return self._data[key]
        return self.put(key, make())


class RunFolder:
    """Paths and saved stage results of one optimization run."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.mkdir(parents=True, exist_ok=True)

    def stage_file(self, stage: str) -> Path:
        return self.path / STAGE_FILES[stage]

    def save_stage(self, stage: str, result: dict[str, Any]) -> Path:
        path = self.stage_file(stage)
        write_json_atomic(path, result)
        return path

    def load_stage(self, stage: str) -> dict[str, Any] | None:
        path = self.stage_file(stage)
        if not path.exists():
            return None
        return json.loads(path.read_text(encoding="utf-8"))

    def journal(self, stage: str) -> Journal:
        return Journal(self.path / f"journal_{stage}.jsonl")

    @property
    def harness_path(self) -> Path:
        return self.path / "harness.json"

    @property
    def report_path(self) -> Path:
        return self.path / "report.md"

    def storage_url(self) -> str:
        return f"sqlite:///{(self.path / 'optuna.db').resolve()}"


class InFlight:
    """``in_flight/<host>_<pid>.json``: the solves this process is running (stage, label, task, seed, harness digest,
    start), rewritten atomically as each starts and ends; one file per process, so workers sharing the folder never
    overwrite each other. A process that ends normally leaves an empty list; one that died leaves what it was doing,
    which :meth:`left_over` reads back (and moves to ``in_flight/stopped/``, where the folder keeps saying it)."""

    def __init__(self, folder: Path):
        self.folder = folder
        self.path = folder / f"{socket.gethostname()}_{os.getpid()}.json"
        self._lock = threading.Lock()
        self._runs: dict[int, dict[str, Any]] = {}
        self._ids = itertools.count()

    def left_over(self) -> list[dict[str, Any]]:
        """What processes of this host that are gone were running when they stopped (none if they finished)."""
        found = []
        host = socket.gethostname()
        for path in sorted(self.folder.glob(f"{host}_*.json")):
            try:
                data = json.loads(path.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                continue
            pid = int(data.get("pid", 0))
            if pid == os.getpid() or _alive(pid) or not data.get("runs"):
                continue
            found.append(data)
            (self.folder / "stopped").mkdir(exist_ok=True)
            os.replace(path, self.folder / "stopped" / path.name)
        return found

    def start(self, **run: Any) -> int:
        with self._lock:
            key = next(self._ids)
            self._runs[key] = {**run, "started": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
            self._write()
            return key

    def end(self, key: int) -> None:
        with self._lock:
            self._runs.pop(key, None)
            self._write()

    def _write(self) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        write_json_atomic(self.path, {"pid": os.getpid(), "host": socket.gethostname(),
                                      "runs": list(self._runs.values())})


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: alive
        return True
    return True


def describe_left_over(data: dict[str, Any]) -> str:
    """One line on where an earlier process stopped (for the log of the run that resumes)."""
    runs = "; ".join(f"stage {r.get('stage')}, {r.get('label') or 'a run'} on {r.get('task')} (seed {r.get('seed')}, "
                     f"harness {r.get('digest')}, started {r.get('started')})" for r in data.get("runs", []))
    return (f"the previous process on this folder (pid {data.get('pid')}) stopped without finishing: {runs}. "
            "Resuming: finished runs are read from evals.db; that one runs again (in_flight/stopped/ keeps the "
            "record)")
