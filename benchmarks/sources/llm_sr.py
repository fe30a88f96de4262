"""The four LLM-SR problems, and any folder in the LLM-SR layout.

Layout: ``train.csv`` (required), ``test_id.csv`` and ``test_ood.csv`` (optional), each with a header row and the
target in the last column. An optional ``task.json`` (:class:`TaskInfo`: name, domain, descriptions, ground truth,
metadata; written by hand or by ``python -m benchmarks export``, whose folders so load back unchanged) says what
the numbers are. A description naming a column that ``train.csv`` lacks is an error, never silently dropped.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Iterable

from pydantic import BaseModel, ConfigDict, ValidationError

from benchmarks.sources._io import check_target, data_root, numeric_columns, read_table
from harness.core.task import Split, Task, TaskError, safe_identifier

PROBLEMS: dict[str, dict[str, Any]] = {
    # The two simulated oscillators' laws (LLM-SR's paper, appendix): with these constants they reproduce the files'
    # targets to float precision (train NMSE 4e-31 and 4e-33), so symbolic accuracy can be judged on them.
    "oscillator1": {
        "domain": "physics",
        "summary": "damped nonlinear oscillator with a driving force (simulated)",
        "descriptions": {"x": "position", "v": "velocity", "a": "acceleration"},
        "ground_truth": "0.8*sin(x) - 0.5*v**3 - 0.2*x**3 - 0.5*x*v - x*cos(x)",
    },
    "oscillator2": {
        "domain": "physics",
        "summary": "damped nonlinear oscillator with a driving force, time as an input (simulated)",
        "descriptions": {"t": "time", "x": "position", "v": "velocity", "a": "acceleration"},
        "ground_truth": "0.3*sin(t) - 0.5*v**3 - x*v - 5*x*exp(0.5*x)",
    },
    "bactgrow": {
        "domain": "biology",
        "summary": "E. coli growth rate (simulated)",
        "descriptions": {
            "b": "population density",
            "s": "substrate concentration",
            "temp": "temperature",
            "pH": "pH level",
            "db": "growth rate",
        },
    },
    "stressstrain": {
        "domain": "materials",
        "summary": "stress of an aluminium rod (6061-T651), elastic and plastic regions (measured)",
        "descriptions": {"strain": "strain", "temp": "temperature", "stress": "stress"},
    },
}
SPLIT_FILES = {"train": "train.csv", "test_id": "test_id.csv", "test_ood": "test_ood.csv"}


def load_folder(
    path: str | os.PathLike,
    *,
    name: str | None = None,
    domain: str | None = None,
    descriptions: dict[str, str] | None = None,
) -> Task:
    """Load one task folder in the LLM-SR layout (known LLM-SR problems get their descriptions)."""
    folder = Path(path)
    train_file = folder / SPLIT_FILES["train"]
    if not train_file.is_file():
        raise TaskError(f"folder {str(folder)!r} has no {SPLIT_FILES['train']} (LLM-SR layout)")
    saved = _read_task_json(folder / "task.json")
    known = PROBLEMS.get(folder.name, {})
    descs = {**known.get("descriptions", {}), **saved.get("descriptions", {}), **(descriptions or {})}

    header: list[str] | None = None
    splits: dict[str, Split] = {}
    for split, filename in SPLIT_FILES.items():
        file = folder / filename
        if not file.is_file():
            continue
        df = read_table(file)
        cols = list(df.columns)
        if len(cols) < 2:
            raise TaskError(f"file {str(file)!r}: needs at least one input column and a target column, got {cols}")
        if header is None:
            header = cols
        elif cols != header:
            raise TaskError(f"file {str(file)!r}: columns {cols} differ from train.csv columns {header}")
        data = numeric_columns(df, cols, file)
        if split == "train":
            check_target(data[:, -1], file, cols[-1])
        splits[split] = Split(data[:, :-1], data[:, -1])

    assert header is not None
    names: list[str] = []
    for col in header:
        names.append(safe_identifier(col, names))
    for source, given in (("task.json", saved.get("descriptions", {})), ("descriptions", descriptions or {})):
        stray = sorted(str(k) for k in given if k not in header and k not in names)
        if stray:
            where = f"file {str(folder / 'task.json')!r}" if source == "task.json" else f"folder {str(folder)!r}"
            raise TaskError(f"{where}: descriptions given for column(s) {stray} that are not in train.csv; "
                            f"columns are {header}")
    renamed = {c: n for c, n in zip(header, names) if c != n}
    inputs, target = names[:-1], names[-1]
    try:
        return Task(
            name=name or saved.get("name") or folder.name,
            domain=domain or saved.get("domain") or known.get("domain", ""),
            input_names=inputs,
            input_descriptions=[descs.get(c, descs.get(n, "")) for c, n in zip(header[:-1], inputs)],
            target_name=target,
            target_description=descs.get(header[-1], descs.get(target, "")),
            train=splits["train"],
            test_id=splits.get("test_id"),
            test_ood=splits.get("test_ood"),
            ground_truth=saved.get("ground_truth") or known.get("ground_truth"),
            metadata={
                "source": "llm_sr" if known else "folder",
                **saved.get("metadata", {}),
                "path": str(folder),
                **({"summary": known["summary"]} if known else {}),
                **({"renamed_columns": renamed} if renamed else {}),
            },
        )
    except TaskError as exc:
        raise TaskError(f"folder {str(folder)!r}: {exc}") from None


class TaskInfo(BaseModel):
    """``task.json``: what a task folder says besides its numbers; every field is optional.

    Written by hand: ``name``, ``domain``, ``descriptions`` (column -> text, the target's too), ``ground_truth`` (an
    expression over the input columns, for symbolic accuracy), ``metadata``. Written by ``python -m benchmarks
    export`` (``Task.to_dict``): ``input_names`` / ``input_descriptions`` / ``target_name`` / ``target_description``
    instead of ``descriptions``, and row counts, which are ignored (the CSV files are the data)."""

    model_config = ConfigDict(extra="ignore")

    name: str | None = None
    domain: str | None = None
    descriptions: dict[str, str] | None = None
    ground_truth: str | None = None
    metadata: dict[str, Any] = {}
    input_names: list[str] | None = None
    input_descriptions: list[str] | None = None
    target_name: str | None = None
    target_description: str | None = None

    def column_descriptions(self) -> dict[str, str]:
        if self.descriptions is not None:
            return dict(self.descriptions)
        out = dict(zip(self.input_names or [], self.input_descriptions or []))
        if self.target_name:
            out[self.target_name] = self.target_description or ""
        return out


def _read_task_json(path: Path) -> dict[str, Any]:
    """``task.json`` as a plain dict (``descriptions`` always column -> text); {} when the folder has none."""
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise TaskError(f"file {str(path)!r}: not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise TaskError(f"file {str(path)!r}: expected a JSON object")
    try:
        info = TaskInfo.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(x) for x in first.get("loc", ()))
        raise TaskError(f"file {str(path)!r}: {where}: {first.get('msg', 'invalid')}") from None
    out = info.model_dump(exclude_none=True, exclude={"input_names", "input_descriptions", "target_name",
                                                      "target_description"})
    out["descriptions"] = info.column_descriptions()
    return out


def load_llm_sr(names: Iterable[str] | None = None, *, root: str | os.PathLike | None = None) -> list[Task]:
    """The LLM-SR problems (all four by default) from ``<data root>/llm-sr/<problem>/``."""
    base = data_root(root) / "llm-sr"
    wanted = list(names) if names is not None else list(PROBLEMS)
    unknown = [n for n in wanted if n not in PROBLEMS and not (base / n).is_dir()]
    if unknown:
        raise TaskError(f"unknown LLM-SR problem(s) {unknown}; known: {sorted(PROBLEMS)}")
    missing = [n for n in wanted if not (base / n).is_dir()]
    if missing:
        raise TaskError(
            f"LLM-SR data not found for {missing} under {str(base)!r}; get the `data/` folder of "
            "github.com/deep-symbolic-mathematics/LLM-SR and pass root= or set $HARNESS_SR_DATA"
        )
    return [load_folder(base / n) for n in wanted]


def load_folders(path: str | os.PathLike) -> list[Task]:
    """A single task folder, or a folder of task folders (e.g. the output of ``benchmarks export``)."""
    folder = Path(path)
    if (folder / SPLIT_FILES["train"]).is_file():
        return [load_folder(folder)]
    subs = sorted(p for p in folder.iterdir() if (p / SPLIT_FILES["train"]).is_file()) if folder.is_dir() else []
    if not subs:
        raise TaskError(f"folder {str(path)!r} holds no task in the LLM-SR layout (no train.csv)")
    return [load_folder(p) for p in subs]

