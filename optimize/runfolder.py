"""The run folder's saved state: one JSON result per finished stage, and journals of model-written prompts.

A stage reads the results of the stages before it from here, so ``stage=init``, ``search``, ``refine`` and
``freeze`` can run as separate processes on one ``hydra.run.dir``. Journals record every proposed rewrite under a
stable key before it is evaluated, so a resumed stage replays the same candidates instead of asking the model
again (the evaluation cache then makes their scores free).
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Any, Callable

from harness.engine.jsonio import write_json_atomic

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
