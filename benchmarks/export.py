"""Write tasks as folders in the LLM-SR layout, so any LLM-SR-style tool (or ``load_suite("folder")``) can read them.

Each task folder holds ``train.csv``, ``test_id.csv``, ``test_ood.csv`` (header row, inputs then target, full
float64 precision) and ``task.json`` (descriptions, ground truth, metadata) so the folder loads back unchanged.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Iterable

import numpy as np

from harness.core.task import Split, Task


def _folder_name(name: str) -> str:
    return re.sub(r"[^\w.-]+", "_", name).strip("._") or "task"


def _write_split(split: Split, header: list[str], file: Path) -> None:
    data = np.column_stack([split.X, split.y])
    np.savetxt(file, data, delimiter=",", header=",".join(header), comments="", fmt="%.17g")


def export_task(task: Task, out_dir: str | os.PathLike) -> Path:
    """Write one task under ``out_dir/<task name>/``; returns that folder."""
    folder = Path(out_dir) / _folder_name(task.name)
    folder.mkdir(parents=True, exist_ok=True)
    header = list(task.input_names) + [task.target_name]
    present = task.splits()
    for split_name in ("train", "test_id", "test_ood"):
        file = folder / f"{split_name}.csv"
        if split_name in present:
            _write_split(present[split_name], header, file)
        elif file.exists():  # a stale split from an earlier export would be read back as this task's
            file.unlink()
    info = task.to_dict()
    (folder / "task.json").write_text(json.dumps(info, indent=2, default=_json_default) + "\n", encoding="utf-8")
    return folder


def export_tasks(tasks: Iterable[Task], out_dir: str | os.PathLike) -> list[Path]:
    return [export_task(t, out_dir) for t in tasks]


def _json_default(value: object) -> object:
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, Path):
        return str(value)
    return repr(value)
