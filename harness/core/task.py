"""A symbolic-regression task: named inputs, a target, and train / in-domain / out-of-domain splits.

Validation happens once, at construction, so every later stage (prompts, fitting, scoring) can trust the
arrays: float64, finite, matching shapes, and names an expression can refer to without clashing with the
expression grammar (``sin``, ``pi``, ``c0``, ``params`` ...). Errors are :class:`TaskError` and say what is wrong
and where, because a user feeding their own table must be able to fix it from the message alone.
"""

from __future__ import annotations

import keyword
import re
import unicodedata
import warnings
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from harness.core.vocabulary import grammar_functions

__all__ = ["Split", "Task", "TaskError", "RESERVED_NAMES", "MIN_TRAIN_ROWS", "check_name", "safe_identifier"]

MIN_TRAIN_ROWS = 10
MAX_ABS_VALUE = 1e30  # Operon computes in single precision (max ~3.4e38); squares of larger values overflow
CONSTANT_RTOL = 1e-12  # a target whose range is below this fraction of its magnitude is constant

# Names the expression grammar gives a meaning (functions, constants, parameter vectors, module prefixes).
RESERVED_NAMES: frozenset[str] = frozenset(
    """
    sin cos tan sinh cosh tanh arcsin arccos arctan arcsinh arccosh arctanh asin acos atan asinh acosh atanh atan2
    arctan2 exp exp2 expm1 log log2 log10 log1p ln sqrt cbrt square cube abs sign floor ceil round min max minimum
    maximum pow power absolute Abs sigmoid relu erf erfc gamma lgamma sinc heaviside where mod
    pi e E inf nan Inf NaN euler_gamma
    params np numpy math sympy
    """.split()
) | frozenset(grammar_functions())
_PARAM_NAME = re.compile(r"^c\d+$")


class TaskError(ValueError):
    """A task or its data is unusable; the message names the task/file, column and problem."""


class TaskDataMissing(TaskError):
    """The files a task source reads are not on this machine (the message says where they were looked for and
    where to get them): a caller with another source to fall back on may say so and use it."""


def is_constant(y: Any) -> bool:
    """True when the target's range is at most ``CONSTANT_RTOL`` of its largest magnitude: the one test (the table
    loaders and :class:`Task` use it). Relative, so the scale of the units never decides: a target of order 1e-13
    that varies six-fold is data, one of order 1e13 that varies in its 13th digit is a constant."""
    y = np.asarray(y, dtype=np.float64)
    spread = float(np.ptp(y)) if y.size else 0.0
    return spread == 0.0 or spread <= CONSTANT_RTOL * float(np.max(np.abs(y)))


def check_name(name: Any, what: str = "input") -> str:
    """Return ``name`` if an expression may use it as a variable, else raise TaskError saying why."""
    if not isinstance(name, str) or not name:
        raise TaskError(f"{what} name {name!r} must be a non-empty string")
    if not name.isidentifier() or keyword.iskeyword(name) or name.startswith("__"):
        raise TaskError(f"{what} name {name!r} is not a valid Python identifier (use letters, digits, '_'; no leading '__')")
    if name in RESERVED_NAMES or _PARAM_NAME.match(name):
        raise TaskError(f"{what} name {name!r} clashes with a reserved name of the expression grammar")
    return name


def safe_identifier(name: str, taken: Iterable[str] = ()) -> str:
    """Turn any column/variable label into a valid, unreserved, unused identifier (``'stress (MPa)'`` -> ``stress_MPa``)."""
    text = str(name).strip()
    if not text.isidentifier():
        text = re.sub(r"\W+", "_", text).strip("_") or "x"
    if text.startswith("__"):
        text = text.lstrip("_") or "x"
    if text[0].isdigit():
        text = "x_" + text
    if keyword.iskeyword(text) or text in RESERVED_NAMES or _PARAM_NAME.match(text):
        text += "_"
    taken = set(taken)
    out, k = text, 1
    while out in taken:
        out, k = f"{text}_{k}", k + 1
    return out


@dataclass(frozen=True, eq=False, repr=False)  # eq on arrays is ambiguous: compare .X/.y explicitly
class Split:
    """One block of rows: ``X`` (n, d) float64 inputs in ``Task.input_names`` order, ``y`` (n,) float64 target."""

    X: np.ndarray
    y: np.ndarray

    def __post_init__(self) -> None:
        for label, value in (("X", self.X), ("y", self.y)):
            if np.iscomplexobj(value):
                raise TaskError(f"{label} is complex-valued; symbolic regression needs real numbers (pass the real "
                                "part, the imaginary part or the magnitude as separate targets)")
        y_raw = np.asarray(self.y)
        if y_raw.ndim == 2 and y_raw.shape[1] > 1:
            raise TaskError(f"y must be one target column, got shape {y_raw.shape} ({y_raw.shape[1]} columns); "
                            "fit one target at a time")
        X = np.asarray(self.X, dtype=np.float64)
        y = np.asarray(self.y, dtype=np.float64)
        if X.ndim == 1:
            X = X.reshape(-1, 1)
        if X.ndim != 2:
            raise TaskError(f"X must be 2-D (rows, inputs), got shape {X.shape}")
        if y.ndim == 2 and y.shape[1] == 1:
            y = y[:, 0]
        if y.ndim != 1:
            raise TaskError(f"y must be 1-D, got shape {y.shape}")
        if X.shape[0] != y.shape[0]:
            raise TaskError(f"X has {X.shape[0]} rows but y has {y.shape[0]}")
        object.__setattr__(self, "X", np.ascontiguousarray(X))
        object.__setattr__(self, "y", np.ascontiguousarray(y))

    @property
    def n(self) -> int:
        return int(self.y.shape[0])

    def __len__(self) -> int:
        return self.n

    def __repr__(self) -> str:
        return f"Split(n={self.X.shape[0]}, d={self.X.shape[1]})"

    def take(self, index: np.ndarray) -> "Split":
        """Rows ``index`` as a new split (copies)."""
        return Split(self.X[index], self.y[index])


def _as_split(value: Any) -> Split | None:
    if value is None or isinstance(value, Split):
        return value
    if isinstance(value, (tuple, list)) and len(value) == 2:
        return Split(value[0], value[1])
    raise TaskError(f"a split must be a Split or an (X, y) pair, got {type(value).__name__}")


def _nfkc(name: str) -> str:
    return unicodedata.normalize("NFKC", name)


def _fmt(v: float) -> str:
    return f"{v:.4g}"


@dataclass(eq=False)
class Task:
    """A regression problem. ``ground_truth`` (if known) is in the engine grammar over ``input_names``;
    it is never shown in :meth:`card` because cards go into prompts."""

    name: str
    domain: str
    input_names: list[str]
    input_descriptions: list[str]
    target_name: str
    target_description: str
    train: Split
    test_id: Split | None = None
    test_ood: Split | None = None
    ground_truth: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name.strip():
            raise TaskError(f"task name must be a non-empty string, got {self.name!r}")
        where = f"task {self.name!r}"
        self.domain = "" if self.domain is None else str(self.domain)
        self.input_names = self._normalised_names(list(self.input_names or []), where)
        if not self.input_names:
            raise TaskError(f"{where}: needs at least one input")
        for n in self.input_names:
            try:
                check_name(n, "input")
            except TaskError as exc:
                raise TaskError(f"{where}: {exc}") from None
        dupes = sorted({n for n in self.input_names if self.input_names.count(n) > 1})
        if dupes:
            raise TaskError(f"{where}: duplicate input names {dupes}")
        if isinstance(self.target_name, str):
            self.target_name = _nfkc(self.target_name)
        if not isinstance(self.target_name, str) or not self.target_name.isidentifier():
            raise TaskError(f"{where}: target name {self.target_name!r} is not a valid Python identifier")
        if self.target_name in self.input_names:
            raise TaskError(f"{where}: target name {self.target_name!r} is also an input name")
        descs = ["" if d is None else str(d) for d in (self.input_descriptions or [])]
        if len(descs) > len(self.input_names):
            raise TaskError(f"{where}: {len(descs)} input descriptions for {len(self.input_names)} inputs")
        self.input_descriptions = descs + [""] * (len(self.input_names) - len(descs))
        self.target_description = "" if self.target_description is None else str(self.target_description)
        if self.ground_truth is not None and not isinstance(self.ground_truth, str):
            raise TaskError(f"{where}: ground_truth must be a string or None")
        self.metadata = dict(self.metadata or {})  # keeps a "normalised_names" note set above
        self.train = _as_split(self.train)
        if self.train is None:
            raise TaskError(f"{where}: a train split is required")
        self.test_id = _as_split(self.test_id)
        self.test_ood = _as_split(self.test_ood)
        for split_name, split in self.splits().items():
            self._check_split(split_name, split)
        if self.train.n < MIN_TRAIN_ROWS:
            raise TaskError(f"{where}: train has {self.train.n} rows, at least {MIN_TRAIN_ROWS} are needed")
        y = self.train.y
        if is_constant(y):
            raise TaskError(f"{where}: target {self.target_name!r} is constant on train ({_fmt(float(y[0]))})")

    def _normalised_names(self, names: list[str], where: str) -> list[str]:
        """Names in Unicode NFKC form, the form Python's parser gives identifiers (``µ`` U+00B5 -> ``μ``).

        Why: an expression is parsed with ``ast``, which normalises identifiers, so a column named ``µ`` could
        never be referred to and every model using it would be rejected. Renames are noted in ``metadata``."""
        out, renamed = [], {}
        for n in names:
            norm = _nfkc(n) if isinstance(n, str) else n
            if norm != n:
                renamed[n] = norm
            out.append(norm)
        if renamed:
            clash = sorted({n for n in out if out.count(n) > 1})
            if clash:
                raise TaskError(f"{where}: input names {sorted(renamed)} become {clash} under Unicode NFKC "
                                "normalisation (as Python reads identifiers) and clash; rename the columns")
            self.metadata = {**dict(self.metadata or {}), "normalised_names": renamed}
            warnings.warn(f"{where}: input names normalised to Unicode NFKC (as Python reads identifiers): "
                          + ", ".join(f"{a!r} -> {b!r}" for a, b in renamed.items()), stacklevel=3)
        return out

    def _check_split(self, split_name: str, split: Split) -> None:
        where = f"task {self.name!r}, split {split_name!r}"
        d = len(self.input_names)
        if split.X.shape[1] != d:
            raise TaskError(f"{where}: X has {split.X.shape[1]} columns but there are {d} input names")
        if split.n == 0:
            raise TaskError(f"{where}: no rows")
        for j, col in enumerate(list(self.input_names) + [self.target_name]):
            values = split.X[:, j] if j < d else split.y
            bad = np.flatnonzero(~np.isfinite(values))
            if bad.size:
                first = "NaN" if np.isnan(values[bad[0]]) else "inf"
                raise TaskError(f"{where}: column {col!r} has {bad.size} non-finite value(s) (NaN or inf), first "
                                f"{first} at row {bad[0]}")
            big = float(np.max(np.abs(values)))
            if big > MAX_ABS_VALUE:
                raise TaskError(f"{where}: column {col!r} has values up to {big:.3g}; the SR engine computes in single "
                                f"precision (|value| < 3.4e38, and squares must fit): rescale the column (e.g. "
                                f"divide by 1e{int(np.floor(np.log10(big)))}) so its values stay below {MAX_ABS_VALUE:g}")

    # ------------------------------------------------------------------ construction helpers
    @classmethod
    def from_arrays(
        cls,
        X: Any,
        y: Any,
        *,
        name: str = "task",
        domain: str = "",
        input_names: Sequence[str] | None = None,
        input_descriptions: Sequence[str] | None = None,
        target_name: str = "y",
        target_description: str = "",
        test_id: Split | tuple[Any, Any] | None = None,
        test_ood: Split | tuple[Any, Any] | None = None,
        ground_truth: str | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> "Task":
        """Build a task from plain arrays; inputs default to ``x0..x{d-1}``."""
        train = Split(X, y)
        names = list(input_names) if input_names is not None else [f"x{i}" for i in range(train.X.shape[1])]
        return cls(
            name=name,
            domain=domain,
            input_names=names,
            input_descriptions=list(input_descriptions or []),
            target_name=target_name,
            target_description=target_description,
            train=train,
            test_id=_as_split(test_id),
            test_ood=_as_split(test_ood),
            ground_truth=ground_truth,
            metadata=dict(metadata or {}),
        )

    # ------------------------------------------------------------------ views
    def splits(self) -> dict[str, Split]:
        """The splits present, in the order train, test_id, test_ood."""
        out = {"train": self.train}
        if self.test_id is not None:
            out["test_id"] = self.test_id
        if self.test_ood is not None:
            out["test_ood"] = self.test_ood
        return out

    def train_valid(self, valid_fraction: float = 0.2, seed: int = 0, mode: str = "random") -> tuple[Split, Split]:
        """Deterministic hold-out of train; both parts keep the original row order.

        ``mode="random"``: a seeded random subset. ``mode="edge"``: the rows with the most extreme inputs (largest
        distance from the median in any input, measured in ranks), so validation asks an equation to
        extrapolate a little, as out-of-domain data will. Ties are broken by a seeded shuffle.
        """
        if not 0.0 < float(valid_fraction) < 1.0:
            raise TaskError(f"valid_fraction must be in (0, 1), got {valid_fraction}")
        if mode not in ("random", "edge"):
            raise TaskError(f"valid split mode must be 'random' or 'edge', got {mode!r}")
        n = self.train.n
        n_valid = min(n - 1, max(1, int(round(n * float(valid_fraction)))))
        perm = np.random.default_rng(seed).permutation(n)
        if mode == "edge":
            X = self.train.X
            ranks = np.argsort(np.argsort(X, axis=0, kind="stable"), axis=0, kind="stable") / max(1, n - 1)
            extremeness = np.abs(ranks - 0.5).max(axis=1) if X.shape[1] else np.zeros(n)
            order = perm[np.argsort(-extremeness[perm], kind="stable")]
            valid_idx, train_idx = np.sort(order[:n_valid]), np.sort(order[n_valid:])
        else:
            valid_idx, train_idx = np.sort(perm[:n_valid]), np.sort(perm[n_valid:])
        return self.train.take(train_idx), self.train.take(valid_idx)

    def fingerprint(self) -> str:
        """``name#<sha256 of the names and every split's data, 10 hex>``: the identity of a task's content for
        caches and engine workers (a task regenerated under the same name with other data must not hit the old
        entries; the same arrays under renamed columns are another task, since equations name the columns).
        Computed once."""
        key = self.__dict__.get("_fingerprint")
        if key is None:
            import hashlib

            h = hashlib.sha256(self.name.encode("utf-8"))
            h.update(repr((list(self.input_names), self.target_name)).encode("utf-8"))
            for split in self.splits().values():
                h.update(np.ascontiguousarray(split.X).tobytes())
                h.update(np.ascontiguousarray(split.y).tobytes())
            key = self.__dict__["_fingerprint"] = f"{self.name}#{h.hexdigest()[:10]}"
        return key

    def row_counts(self) -> dict[str, int]:
        return {k: s.n for k, s in self.splits().items()}

    def to_dict(self) -> dict[str, Any]:
        """Light JSON-able summary for run records (no arrays)."""
        out: dict[str, Any] = {
            "name": self.name,
            "domain": self.domain,
            "input_names": list(self.input_names),
            "input_descriptions": list(self.input_descriptions),
            "target_name": self.target_name,
            "target_description": self.target_description,
            "ground_truth": self.ground_truth,
        }
        out.update({f"n_{k}": v for k, v in self.row_counts().items()})
        out["metadata"] = dict(self.metadata)
        return out

    def card(self, max_chars: int = 1500) -> str:
        """Compact prompt text: variables, descriptions and train statistics (never the ground truth).

        Long descriptions are shortened first, then trailing inputs are summarised, so the text always fits
        ``max_chars`` and always keeps the header, the target and the row counts.
        """
        head = f"Task: {self.name}" + (f" (domain: {self.domain})" if self.domain else "")
        rows = "Rows: " + ", ".join(f"{k} {v}" for k, v in self.row_counts().items())

        def stats(v: np.ndarray) -> str:
            return f"min {_fmt(v.min())}, max {_fmt(v.max())}, mean {_fmt(v.mean())}, std {_fmt(v.std())}"

        def line(name: str, desc: str, v: np.ndarray, width: int | None) -> str:
            if width is not None and len(desc) > width:
                desc = desc[: width - 3].rstrip() + "..." if width >= 8 else ""
            return f"- {name}" + (f": {desc}" if desc else "") + f" [{stats(v)}]"

        for width in (None, 80, 30, 0):
            target = "Target " + line(self.target_name, self.target_description, self.train.y, width)[2:]
            lines = [head, target, "Inputs (train statistics):"]
            inputs = [
                line(n, d, self.train.X[:, j], width)
                for j, (n, d) in enumerate(zip(self.input_names, self.input_descriptions))
            ]
            text = "\n".join(lines + inputs + [rows])
            if len(text) <= max_chars:
                return text
        # Still too long: keep the inputs that fit and name the rest.
        kept: list[str] = []
        for i, item in enumerate(inputs):
            rest = self.input_names[i + 1 :]
            note = [f"... and {len(rest)} more inputs: " + ", ".join(rest)] if rest else []
            if len("\n".join(lines + kept + [item] + note + [rows])) > max_chars:
                break
            kept.append(item)
        rest = self.input_names[len(kept) :]
        if rest:
            kept.append(f"... and {len(rest)} more inputs: " + ", ".join(rest))
        text = "\n".join(lines + kept + [rows])
        return text if len(text) <= max_chars else text[: max(0, max_chars - 3)] + "..."

    def __repr__(self) -> str:
        counts = ", ".join(f"{k}={v}" for k, v in self.row_counts().items())
        return f"Task({self.name!r}, domain={self.domain!r}, inputs={self.input_names}, target={self.target_name!r}, {counts})"
