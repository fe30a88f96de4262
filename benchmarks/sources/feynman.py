"""AI Feynman equations (``FeynmanEquations.csv``): inputs sampled uniformly in each variable's range, target from
the formula.

The formula is parsed by the harness expression engine (never ``eval``), after renaming variables that clash with
the grammar (``gamma`` -> ``gamma_``) and spelling ``ln`` as ``log``. Equations the engine cannot parse or
evaluate are skipped with a recorded reason. OOD inputs come from the range just above each training range,
``[high, high + ood_extend * (high - low)]``.
"""

from __future__ import annotations

import logging
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

import numpy as np
import pandas as pd

from benchmarks.sources._io import data_root, read_table
from harness.core.task import Split, Task, TaskError, safe_identifier

log = logging.getLogger(__name__)
FUNCTION_ALIASES = {"ln": "log"}  # spellings in the table the engine writes differently
_IDENT = re.compile(r"(?<![\w.])([A-Za-z_]\w*)")
MAX_DRAWS = 6  # batches of fresh samples tried when some rows evaluate to nan/inf


@dataclass
class Equation:
    """One row of the Feynman table, with variables renamed to engine-safe identifiers."""

    filename: str
    number: int
    output: str
    formula: str
    variables: list[str]
    ranges: list[tuple[float, float]]
    renamed: dict[str, str] = field(default_factory=dict)
    note: str = ""

    @property
    def task_name(self) -> str:
        return f"feynman_{self.filename}"

    @property
    def ground_truth(self) -> str:
        """The formula in the engine grammar over the renamed variables."""
        def repl(m: re.Match) -> str:
            word = m.group(1)
            return self.renamed.get(word, FUNCTION_ALIASES.get(word, word))

        return _IDENT.sub(repl, self.formula)


def read_equations(path: str | os.PathLike | None = None, *, root: str | os.PathLike | None = None) -> list[Equation]:
    """All equations of the table (no sampling)."""
    file = Path(path) if path is not None else data_root(root) / "feynman" / "FeynmanEquations.csv"
    df = read_table(file)
    need = ["Filename", "Number", "Output", "Formula"]
    missing = [c for c in need if c not in df.columns]
    if missing:
        raise TaskError(f"file {str(file)!r}: column(s) {missing} missing; is this FeynmanEquations.csv?")
    out = []
    for i, row in df.iterrows():
        if pd.isna(row["Formula"]) or pd.isna(row["Filename"]):
            continue
        variables, ranges, k = [], [], 1
        while f"v{k}_name" in df.columns:
            name = row[f"v{k}_name"]
            if isinstance(name, str) and name.strip():
                try:
                    low, high = float(row[f"v{k}_low"]), float(row[f"v{k}_high"])
                except (TypeError, ValueError, KeyError):
                    raise TaskError(f"file {str(file)!r}: bad range for v{k} ({name}) at row {i + 1}") from None
                variables.append(name.strip())
                ranges.append((low, high))
            k += 1
        renamed: dict[str, str] = {}
        for v in variables:
            safe = safe_identifier(v, [*renamed.values(), *(x for x in variables if x != v)])
            if safe != v:
                renamed[v] = safe
        declared = row.get("# variables")
        note = ""
        if declared is not None and not pd.isna(declared) and int(declared) != len(variables):
            note = f"table says {int(declared)} variables but lists {len(variables)}; using the listed ones"
        out.append(
            Equation(
                filename=str(row["Filename"]).strip(),
                number=int(row["Number"]),
                output=str(row["Output"]).strip(),
                formula=str(row["Formula"]).strip(),
                variables=variables,
                ranges=ranges,
                renamed=renamed,
                note=note,
            )
        )
    return out


def _sample(expr: Any, ranges: list[tuple[float, float]], n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """``n`` rows with finite targets, drawing fresh batches if some rows give nan/inf; fewer if it keeps failing."""
    lows = np.array([lo for lo, _ in ranges])
    highs = np.array([hi for _, hi in ranges])
    Xs, ys, have = [], [], 0
    for _ in range(MAX_DRAWS):
        X = rng.uniform(lows, highs, size=(max(n, 16), len(ranges)))
        y = expr(X)
        ok = np.isfinite(y)
        Xs.append(X[ok])
        ys.append(y[ok])
        have += int(ok.sum())
        if have >= n:
            break
    return np.concatenate(Xs)[:n], np.concatenate(ys)[:n]


def make_task(
    eq: Equation, *, n_train: int = 500, n_test: int = 200, n_ood: int = 200, seed: int = 0, ood_extend: float = 0.5
) -> Task:
    """Sample one equation; raises TaskError (with the reason) if it cannot be parsed or sampled."""
    from harness.core.expression import ExpressionError, parse_expression

    names = [eq.renamed.get(v, v) for v in eq.variables]
    if not names:
        raise TaskError(f"{eq.filename}: no variables listed")
    try:
        expr = parse_expression(eq.ground_truth, names, max_nodes=1000, max_depth=64)
    except ExpressionError as exc:
        raise TaskError(f"{eq.filename}: engine cannot parse {eq.ground_truth!r}: {exc}") from None
    rng = np.random.default_rng([seed, eq.number])
    X, y = _sample(expr, eq.ranges, n_train + n_test, rng)
    if y.shape[0] < n_train + n_test:
        raise TaskError(f"{eq.filename}: only {y.shape[0]} of {n_train + n_test} samples give a finite target")
    ood_ranges = [(hi, hi + ood_extend * (hi - lo)) for lo, hi in eq.ranges]
    test_ood, ood_note = None, ""
    if n_ood > 0:
        Xo, yo = _sample(expr, ood_ranges, n_ood, rng)
        if yo.shape[0] == n_ood:
            test_ood = Split(Xo, yo)
        else:
            ood_note = f"OOD dropped: only {yo.shape[0]} of {n_ood} OOD samples give a finite target"
    target = safe_identifier(eq.output, names)
    try:
        return Task(
            name=eq.task_name,
            domain="physics",
            input_names=names,
            input_descriptions=[
                (f"'{v}' in the table; " if v in eq.renamed else "") + f"sampled uniformly in [{lo:g}, {hi:g}]"
                for v, (lo, hi) in zip(eq.variables, eq.ranges)
            ],
            target_name=target,
            target_description=f"output '{eq.output}' of Feynman equation {eq.filename}",
            train=Split(X[:n_train], y[:n_train]),
            test_id=Split(X[n_train:], y[n_train:]) if n_test > 0 else None,
            test_ood=test_ood,
            ground_truth=eq.ground_truth,
            metadata={
                "source": "feynman",
                "filename": eq.filename,
                "number": eq.number,
                "formula": eq.formula,
                "ranges": {n: list(r) for n, r in zip(names, eq.ranges)},
                "ood_ranges": {n: list(r) for n, r in zip(names, ood_ranges)},
                "seed": seed,
                **({"renamed": eq.renamed} if eq.renamed else {}),
                **({"note": "; ".join(x for x in (eq.note, ood_note) if x)} if (eq.note or ood_note) else {}),
            },
        )
    except TaskError as exc:
        raise TaskError(f"{eq.filename}: {exc}") from None


def load_feynman(
    path: str | os.PathLike | None = None,
    *,
    names: Iterable[str] | None = None,
    numbers: Iterable[int] | None = None,
    n: int | None = None,
    n_train: int = 500,
    n_test: int = 200,
    n_ood: int = 200,
    seed: int = 0,
    ood_extend: float = 0.5,
    root: str | os.PathLike | None = None,
    skipped: list[tuple[str, str]] | None = None,
) -> list[Task]:
    """Sampled Feynman tasks; ``names`` match the Filename (``I.6.2a``) or task name, ``n`` keeps the first n.

    Each equation gets its own seeded generator, so a subset gives the same data as the full set. Equations
    that cannot be parsed or sampled are logged and appended to ``skipped`` as ``(filename, reason)``.
    """
    equations = read_equations(path, root=root)
    if names is not None:
        wanted = list(names)
        known = {e.filename for e in equations} | {e.task_name for e in equations}
        missing = [w for w in wanted if w not in known]
        if missing:
            raise TaskError(f"Feynman equation(s) {missing} not found (names look like 'I.6.2a')")
        equations = [e for e in equations if e.filename in wanted or e.task_name in wanted]
    if numbers is not None:
        nums = {int(k) for k in numbers}
        equations = [e for e in equations if e.number in nums]
    tasks: list[Task] = []
    for eq in equations:
        if n is not None and len(tasks) >= n:
            break
        try:
            tasks.append(make_task(eq, n_train=n_train, n_test=n_test, n_ood=n_ood, seed=seed, ood_extend=ood_extend))
        except TaskError as exc:
            log.warning("skipping Feynman equation %s: %s", eq.filename, exc)
            if skipped is not None:
                skipped.append((eq.filename, str(exc)))
    return tasks
