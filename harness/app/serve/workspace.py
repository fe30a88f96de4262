"""The workspace folder behind ``python -m harness serve``: every path a request names is confined to it.

Layout: ``uploads/<id>.csv`` (+ ``<id>.json``: original name, columns), ``runs/<run id>/`` (a run folder as
``python -m harness solve`` writes it, plus ``request.json``), and whatever the user keeps there (CSV files,
frozen harness files). Why confinement here: the server takes paths from the network, so ``..``, absolute paths
and symlinks that lead out are refused before anything is read or written.
"""

from __future__ import annotations

import io
import json
import re
import secrets
from pathlib import Path
from typing import Any

MAX_UPLOAD_BYTES = 50 * 1024 * 1024
PREVIEW_ROWS = 20
PLOT_POINTS = 400
UPLOAD_ID = re.compile(r"^up-[0-9a-f]{12}$")
RUN_ID = re.compile(r"^[0-9]{8}-[0-9]{6}-[0-9a-f]{6}$")


class WorkspaceError(ValueError):
    """A request named something the workspace cannot give: the message is the one-line reason (HTTP 4xx)."""

    def __init__(self, message: str, status: int = 400):
        super().__init__(message)
        self.status = status


class Workspace:
    """Paths under one root folder; see the module docstring."""

    def __init__(self, root: str | Path):
        self.root = Path(root).expanduser().resolve()
        for sub in ("uploads", "runs"):
            (self.root / sub).mkdir(parents=True, exist_ok=True)

    @property
    def runs_dir(self) -> Path:
        return self.root / "runs"

    def resolve(self, relative: str, *, must_exist: bool = True) -> Path:
        """``relative`` inside the workspace, or a WorkspaceError: no absolute paths, no ``..``, no symlink out."""
        text = str(relative or "").strip()
        if not text:
            raise WorkspaceError("empty path")
        if "\x00" in text:
            raise WorkspaceError("invalid path")
        rel = Path(text)
        if rel.is_absolute() or text.startswith(("/", "\\", "~")):
            raise WorkspaceError(f"path {text!r} must be relative to the workspace")
        if ".." in rel.parts:
            raise WorkspaceError(f"path {text!r} leaves the workspace ('..')")
        path = (self.root / rel).resolve()
        if not path.is_relative_to(self.root):
            raise WorkspaceError(f"path {text!r} leads out of the workspace (a symlink)")
        if must_exist and not path.exists():
            raise WorkspaceError(f"no such file in the workspace: {text!r}", status=404)
        return path

    def run_dir(self, run_id: str) -> Path:
        """``runs/<run_id>``; a run folder that is a symlink (or leads out) is no run: results routes read only
        what is in the workspace."""
        if not RUN_ID.fullmatch(run_id or ""):
            raise WorkspaceError(f"no such run: {run_id!r}", status=404)
        path = self.runs_dir / run_id
        if path.is_symlink() or (path.exists() and not path.resolve().is_relative_to(self.runs_dir)):
            raise WorkspaceError(f"no such run: {run_id!r}", status=404)
        return path

    # -- uploads ------------------------------------------------------------------------------------------------
    def save_upload(self, filename: str, content: bytes) -> dict[str, Any]:
        """Check the bytes are a numeric CSV table, store them under ``uploads/``; returns the upload's summary."""
        if len(content) > MAX_UPLOAD_BYTES:
            raise WorkspaceError(f"file larger than {MAX_UPLOAD_BYTES // (1024 * 1024)} MB", status=413)
        if not content.strip():
            raise WorkspaceError("empty file")
        frame = read_csv_bytes(content)
        upload_id = f"up-{secrets.token_hex(6)}"
        (self.root / "uploads" / f"{upload_id}.csv").write_bytes(content)
        meta = {"id": upload_id, "name": Path(filename or "data.csv").name[:200], "columns": list(frame.columns),
                "rows": int(len(frame))}
        (self.root / "uploads" / f"{upload_id}.json").write_text(json.dumps(meta), encoding="utf-8")
        return meta

    def data_file(self, data: str) -> Path:
        """An upload id or a CSV path relative to the workspace."""
        if UPLOAD_ID.fullmatch(data or ""):
            path = self.root / "uploads" / f"{data}.csv"
            if not path.is_file():
                raise WorkspaceError(f"no such upload: {data!r}", status=404)
            return path
        path = self.resolve(data)
        if not path.is_file():
            raise WorkspaceError(f"data {data!r} is not a file")
        return path

    def harness_file(self, harness: str | None) -> str:
        """``default`` or a frozen harness file in the workspace (its absolute path)."""
        if not harness or harness == "default":
            return "default"
        path = self.resolve(harness)
        if path.is_relative_to(self.runs_dir) or path.is_relative_to(self.root / "uploads"):
            raise WorkspaceError(f"harness {harness!r}: a harness file is one the operator keeps in the workspace, "
                                 "not in runs/ or uploads/")
        return str(path)

    def harness_files(self) -> list[str]:
        """Frozen harness files in the workspace (JSON files with a digest and a workflow), for the page's list."""
        found = []
        for path in sorted(self.root.rglob("*.json"))[:2000]:
            if path.is_relative_to(self.runs_dir) or path.is_relative_to(self.root / "uploads") or path.is_symlink():
                continue
            try:
                data = json.loads(path.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                continue
            if isinstance(data, dict) and "digest" in data and "workflow" in data:
                found.append(str(path.relative_to(self.root)))
        return found


def read_csv_bytes(content: bytes) -> Any:
    """A pandas frame of a CSV with a header and numeric columns, or a WorkspaceError saying what is wrong."""
    import pandas as pd

    try:
        frame = pd.read_csv(io.BytesIO(content))
    except (ValueError, UnicodeDecodeError, pd.errors.ParserError) as exc:
        raise WorkspaceError(f"not a readable CSV file: {str(exc).splitlines()[0][:200]}") from None
    if frame.shape[1] < 2:
        raise WorkspaceError("a CSV needs at least two columns (inputs and a target)")
    if len(frame) < 5:
        raise WorkspaceError(f"only {len(frame)} data rows; at least 5 are needed")
    bad = [str(c) for c in frame.columns if not pd.api.types.is_numeric_dtype(frame[c])]
    if bad:
        raise WorkspaceError(f"non-numeric column(s) {bad[:5]}: every column must hold numbers")
    return frame


def preview(path: Path) -> dict[str, Any]:
    """Columns, the first rows and an even sample of rows (for the page's table and its scatter plots)."""
    frame = read_csv_bytes(path.read_bytes())
    step = max(1, len(frame) // PLOT_POINTS)
    sample = frame.iloc[::step].head(PLOT_POINTS)

    def rows(part: Any) -> list[list[float | None]]:
        return [[None if v != v else float(v) for v in row] for row in part.itertuples(index=False)]

    return {"columns": [str(c) for c in frame.columns], "rows": int(len(frame)), "head": rows(frame.head(PREVIEW_ROWS)),
            "sample": rows(sample)}
