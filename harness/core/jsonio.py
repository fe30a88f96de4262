"""Strict-JSON helpers shared by run records, artifacts and optimizer journals.

Why one module: every file we write must stay strict JSON (no NaN/Infinity tokens), survive numpy and pydantic
values, and be replaced atomically so a reader — or a resumed run — never sees half a file.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any


def json_safe(obj: Any) -> Any:
    """Plain JSON values only: non-finite floats become strings, numpy and pydantic values are converted."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else str(obj)
    if obj is None or isinstance(obj, (str, int, bool)):
        return obj
    if isinstance(obj, dict):
        return {str(k): json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_safe(v) for v in obj]
    if hasattr(obj, "model_dump"):  # pydantic models
        return json_safe(obj.model_dump(mode="json"))
    if hasattr(obj, "tolist"):  # numpy arrays and scalars
        try:
            return json_safe(obj.tolist())
        except (TypeError, ValueError):
            return str(obj)
    return str(obj)


def json_restore(obj: Any) -> Any:
    """Inverse of :func:`json_safe` for the non-finite floats."""
    if isinstance(obj, str) and obj in ("inf", "-inf", "nan"):
        return float(obj)
    if isinstance(obj, dict):
        return {k: json_restore(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [json_restore(v) for v in obj]
    return obj


def write_text_atomic(path: str | os.PathLike, text: str) -> Path:
    """Write ``text`` through a temporary file in the same folder, fsync, then ``os.replace``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()
    return path


def write_json_atomic(path: str | os.PathLike, data: Any) -> Path:
    """Strict JSON of ``data`` written atomically."""
    return write_text_atomic(path, json.dumps(json_safe(data), indent=2, ensure_ascii=False))


def read_jsonl(path: str | os.PathLike) -> list[Any]:
    """The JSON lines of a file written line by line; a torn last line (a killed writer) is skipped."""
    path = Path(path)
    if not path.exists():
        return []
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return out
