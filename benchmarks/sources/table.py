"""A user's own data: one CSV or Parquet file plus the name of the target column.

Column labels become safe identifiers (``'stress (MPa)'`` -> ``stress_MPa``); the original labels are kept as
default descriptions and in ``metadata['renamed_columns']``. Splits are deterministic: an optional out-of-domain
block (rows above a quantile of ``ood_column``), then a random in-domain test fraction of the rest.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np

from benchmarks.sources._io import (
    check_target,
    numeric_columns,
    random_partition,
    read_table,
)
from harness.core.task import Split, Task, TaskError, safe_identifier


def load_table(
    path: str | os.PathLike,
    target: str,
    *,
    inputs: Sequence[str] | None = None,
    descriptions: Mapping[str, str] | None = None,
    target_description: str | None = None,
    name: str | None = None,
    domain: str = "",
    test_fraction: float = 0.2,
    seed: int = 0,
    ood_column: str | None = None,
    ood_quantile: float = 0.8,
    ground_truth: str | None = None,
) -> Task:
    """Load ``path`` with ``target`` as the target and ``inputs`` (default: every other column) as inputs."""
    file = Path(path)
    df = read_table(file)
    cols = list(df.columns)
    if target not in cols:
        raise TaskError(f"file {str(file)!r}: target column {target!r} not found; columns are {cols}")
    if inputs is None:
        inputs = [c for c in cols if c != target]
        hint = " (pass inputs=[...] to choose the input columns)"
    else:
        inputs = list(inputs)
        hint = ""
        missing = [c for c in inputs if c not in cols]
        if missing:
            raise TaskError(f"file {str(file)!r}: input column(s) {missing} not found; columns are {cols}")
        if target in inputs:
            raise TaskError(f"file {str(file)!r}: target column {target!r} is also listed as an input")
    if not inputs:
        raise TaskError(f"file {str(file)!r}: no input columns besides the target {target!r}")
    descs = dict(descriptions or {})
    stray = sorted(set(descs) - set(inputs) - {target})
    if stray:
        raise TaskError(f"file {str(file)!r}: descriptions given for column(s) {stray} that are not inputs or "
                        f"target; inputs are {list(inputs)}, target {target!r}")
    if not 0.0 <= test_fraction < 1.0:
        raise TaskError(f"test_fraction must be in [0, 1), got {test_fraction}")
    try:
        data = numeric_columns(df, list(inputs) + [target], file)
    except TaskError as exc:
        raise TaskError(f"{exc}{hint}") from None
    X, y = data[:, :-1], data[:, -1]
    check_target(y, file, target)

    ood_idx = np.zeros(0, dtype=int)
    keep = np.arange(y.shape[0])
    if ood_column is not None:
        if ood_column not in cols:
            raise TaskError(f"file {str(file)!r}: ood_column {ood_column!r} not found; columns are {cols}")
        if not 0.0 < ood_quantile < 1.0:
            raise TaskError(f"ood_quantile must be in (0, 1), got {ood_quantile}")
        values = numeric_columns(df, [ood_column], file)[:, 0]
        threshold = float(np.quantile(values, ood_quantile))
        is_ood = values > threshold
        if not is_ood.any():
            raise TaskError(
                f"file {str(file)!r}: no rows of column {ood_column!r} lie above its {ood_quantile} quantile "
                f"({threshold:.6g}); choose another ood_column or quantile"
            )
        ood_idx, keep = np.flatnonzero(is_ood), np.flatnonzero(~is_ood)
    rest, held = random_partition(keep.size, test_fraction, seed)
    train_idx, test_idx = keep[rest], keep[held]

    names: list[str] = []
    for col in list(inputs) + [target]:
        names.append(safe_identifier(col, names))
    renamed = {c: n for c, n in zip(list(inputs) + [target], names) if c != n}
    default = {c: (c if c in renamed else "") for c in renamed.keys() | set(inputs) | {target}}
    try:
        return Task(
            name=name or file.stem,
            domain=domain,
            input_names=names[:-1],
            input_descriptions=[descs.get(c, default[c]) for c in inputs],
            target_name=names[-1],
            target_description=target_description if target_description is not None else descs.get(target, default[target]),
            train=Split(X[train_idx], y[train_idx]),
            test_id=Split(X[test_idx], y[test_idx]) if test_idx.size else None,
            test_ood=Split(X[ood_idx], y[ood_idx]) if ood_idx.size else None,
            ground_truth=ground_truth,
            metadata={
                "source": "table",
                "path": str(file),
                "seed": seed,
                "test_fraction": test_fraction,
                **({"ood_column": ood_column, "ood_quantile": ood_quantile} if ood_column else {}),
                **({"renamed_columns": renamed} if renamed else {}),
            },
        )
    except TaskError as exc:
        raise TaskError(f"file {str(file)!r}: {exc}") from None
