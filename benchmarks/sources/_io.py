"""Shared file helpers for the loaders: where the data lives, reading tables, and error messages users can act on.

Every problem found in a file is raised as a TaskError naming the file, the column and the row, because the
person fixing it is looking at that file.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Sequence

import numpy as np
import pandas as pd

from harness.core.task import TaskError, is_constant

ENV_DATA_ROOT = "HARNESS_SR_DATA"
REPO_ROOT = Path(__file__).resolve().parents[2]


def data_root(root: str | os.PathLike | None = None) -> Path:
    """The benchmark data folder: ``root`` if given, else ``$HARNESS_SR_DATA``, else ``<repo>/../shared/data``."""
    if root is not None:
        return Path(root).expanduser()
    env = os.environ.get(ENV_DATA_ROOT)
    if env:
        return Path(env).expanduser()
    return (REPO_ROOT.parent / "shared" / "data").resolve()


def _refuse_duplicate_columns(path: Path) -> None:
    """pandas renames a repeated header (``x, x`` -> ``x, x.1``) without a word; a repeated name is a mistake."""
    import csv

    try:
        with open(path, newline="", encoding="utf-8") as fh:
            header = [h.strip() for h in next(csv.reader(fh, skipinitialspace=True), [])]
    except (OSError, UnicodeDecodeError, csv.Error):
        return  # pandas reports unreadable files itself
    dupes = sorted({h for h in header if header.count(h) > 1})
    if dupes:
        raise TaskError(f"file {str(path)!r}: column name(s) {dupes} appear more than once in the header; "
                        "give every column its own name")


def read_table(path: str | os.PathLike) -> pd.DataFrame:
    """Read a CSV (header row required) or Parquet file into a DataFrame; clear errors for the usual mistakes."""
    path = Path(path)
    if not path.is_file():
        raise TaskError(f"file {str(path)!r} does not exist")
    suffix = path.suffix.lower()
    if suffix in (".parquet", ".pq"):
        try:
            df = pd.read_parquet(path)
        except ImportError as exc:
            raise TaskError(
                f"file {str(path)!r}: reading Parquet needs pyarrow or fastparquet (pip install pyarrow), "
                f"or convert the file to CSV ({exc})"
            ) from None
        except Exception as exc:  # corrupt file: say which one
            raise TaskError(f"file {str(path)!r}: cannot read Parquet: {exc}") from None
    else:
        try:
            df = pd.read_csv(path, skipinitialspace=True)
        except pd.errors.EmptyDataError:
            raise TaskError(f"file {str(path)!r} is empty") from None
        except (pd.errors.ParserError, UnicodeDecodeError) as exc:
            raise TaskError(f"file {str(path)!r}: cannot parse as CSV: {exc}") from None
        df.columns = [str(c).strip() for c in df.columns]
        if len(df.columns) and all(_is_number(c) for c in df.columns):  # before the duplicates: "1,1,3" is data
            raise TaskError(f"file {str(path)!r} has no header row (first line is numbers); add column names")
        _refuse_duplicate_columns(path)
    if df.shape[0] == 0:
        raise TaskError(f"file {str(path)!r} has a header but no data rows")
    return df


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def numeric_columns(df: pd.DataFrame, columns: Sequence[str], path: str | os.PathLike) -> np.ndarray:
    """``df[columns]`` as a float64 array; a TaskError names the first non-numeric or missing value (1-based row)."""
    line_note = Path(path).suffix.lower() not in (".parquet", ".pq")
    out = np.empty((df.shape[0], len(columns)), dtype=np.float64)
    for j, col in enumerate(columns):
        raw = df[col]
        values = pd.to_numeric(raw, errors="coerce")
        bad_text = values.isna().to_numpy() & raw.notna().to_numpy()
        if bad_text.any():
            i = int(np.flatnonzero(bad_text)[0])
            raise TaskError(
                f"file {str(path)!r}: column {col!r} is not numeric: value {raw.iloc[i]!r} at {_row(i, line_note)}"
            )
        arr = values.to_numpy(dtype=np.float64, na_value=np.nan)
        bad = ~np.isfinite(arr)
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            what = "NaN/missing value" if np.isnan(arr[i]) else f"infinite value {arr[i]}"
            raise TaskError(
                f"file {str(path)!r}: {what} in column {col!r} at {_row(i, line_note)} ({int(bad.sum())} bad in total)"
            )
        out[:, j] = arr
    return out


def _row(i: int, line_note: bool) -> str:
    return f"row {i + 1} (line {i + 2} of the file)" if line_note else f"row {i + 1}"


def check_target(y: np.ndarray, path: str | os.PathLike, column: str, min_rows: int = 10) -> None:
    """Reject files a regression cannot learn from: too few rows or a constant target."""
    if y.shape[0] < min_rows:
        raise TaskError(f"file {str(path)!r}: only {y.shape[0]} rows, at least {min_rows} are needed")
    if is_constant(y):
        raise TaskError(f"file {str(path)!r}: target column {column!r} is constant ({y[0]:.6g})")


def random_partition(n: int, fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Deterministic (rest, held-out) index split; both sorted so row order is kept."""
    k = int(round(n * fraction))
    perm = np.random.default_rng(seed).permutation(n)
    return np.sort(perm[k:]), np.sort(perm[:k])
