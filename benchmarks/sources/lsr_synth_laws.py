"""LSR-Synth regenerated from its own laws (suite ``lsr_synth_laws``): LLM-SRBench's ground truths, the benchmark's
recipe, the benchmark's problem names.

The laws: ``laws.csv`` (default ``<data root>/lsr-synth-laws/laws.csv``; columns ``domain, name, inputs`` (the
benchmark's column order, ``;``-separated), ``symbolic_expression, param_names, gt_params, numerical_expression``),
the benchmark's ground truths as tabulated in github.com/Phoinikas03/FunctionEvolve
(``datasets/llm-srbench/gt_expressions.csv``). The recipe, measured from four problems the benchmark released
(CRK0, BPG0, PO0, MatSci0; ``tests/test_lsr_synth_laws.py`` checks it against them):

- one trajectory per problem on :data:`N_POINTS` evenly spaced points (``numpy.linspace``); chem_react: t 0..60,
  A(0) = 1; bio_pop_growth: t 1..60, P(1) = 1; phys_osc: t 0..40, x(0) = 1, v(0) = 0, x' = v, v' = the law (the
  problem's columns are the inputs its law names, in the benchmark's order: x, t, v for most); matsci, no ODE:
  epsilon 0..0.6 and T 273..573 evenly spaced over the same rows (collinear, as in the benchmark);
- SciPy's ``solve_ivp`` with its defaults (RK45, rtol 1e-3, atol 1e-6) on those times: that reproduces the
  released states to float32 rounding (tighter tolerances or other integrators differ by 1e-3 and more);
- the target is the law at the states; OOD = the last 10 % of the rows (500), train (4000) and test_id (500) a
  seeded random partition of the rest; every value stored as float32, as the benchmark stores it, so a fit meets
  the same floor (a law evaluated at float32-rounded states is off by up to 1e-2 relative where terms cancel).

Every one of the 109 laws integrates over its whole range with these settings (``solve_ivp`` status 0, finite
states); a law that does not is an error naming it, never a silently shortened trajectory.

The fixed split (:data:`SPLITS`): training / validation / held-out laws, stratified by domain in LSR-Synth's
proportions (24 / 36 / 25 / 44 of 129): 40 held-out, 12 validation, the other 57 training. Drawn once by
shuffling each domain's names (natural order) with ``random.Random(f"lsr-synth-split-{domain}")`` and taking
held-out, validation, training in that order; each list below is in that shuffled order, so the first ``n`` of
a part are a random sample of it. A law outside the lists (the 20 problems kept apart from this project, for a
user whose file has all 129) is in part ``other``.
"""

from __future__ import annotations

import csv
import functools
import os
import re
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

import numpy as np
from scipy.integrate import solve_ivp

from benchmarks.sources._io import data_root
from benchmarks.sources.lsr_synth import DOMAIN_LABELS, DOMAINS
from harness.core.expression import Expression, ExpressionError, parse_expression
from harness.core.task import Split, Task, TaskDataMissing, TaskError

LAWS_FILE = Path("lsr-synth-laws") / "laws.csv"
COLUMNS = ("domain", "name", "inputs", "symbolic_expression", "param_names", "gt_params", "numerical_expression")
N_POINTS = 5000
N_OOD = 500
N_TEST_ID = 500
PARTS = ("train", "validation", "heldout")

SPLITS: dict[str, dict[str, tuple[str, ...]]] = {
    "heldout": {
        "bio_pop_growth": ("BPG7", "BPG12", "BPG6", "BPG1", "BPG4", "BPG8", "BPG5"),
        "chem_react": ("CRK21", "CRK12", "CRK35", "CRK5", "CRK34", "CRK8", "CRK13", "CRK33", "CRK6", "CRK0", "CRK16"),
        "matsci": ("MatSci14", "MatSci8", "MatSci2", "MatSci19", "MatSci4", "MatSci24", "MatSci22", "MatSci25"),
        "phys_osc": ("PO7", "PO43", "PO18", "PO15", "PO27", "PO29", "PO39", "PO28", "PO13", "PO31", "PO19", "PO4",
                     "PO2", "PO22"),
    },
    "validation": {
        "bio_pop_growth": ("BPG16", "BPG17"),
        "chem_react": ("CRK25", "CRK20", "CRK14", "CRK7"),
        "matsci": ("MatSci21", "MatSci10"),
        "phys_osc": ("PO37", "PO33", "PO8", "PO25"),
    },
    "train": {
        "bio_pop_growth": ("BPG10", "BPG15", "BPG11", "BPG2", "BPG14", "BPG18", "BPG0", "BPG3", "BPG22", "BPG23"),
        "chem_react": ("CRK27", "CRK30", "CRK10", "CRK4", "CRK18", "CRK17", "CRK9", "CRK31", "CRK26", "CRK24",
                       "CRK28", "CRK23", "CRK2", "CRK32", "CRK11", "CRK1"),
        "matsci": ("MatSci18", "MatSci20", "MatSci9", "MatSci16", "MatSci0", "MatSci13", "MatSci7", "MatSci11",
                   "MatSci28", "MatSci6"),
        "phys_osc": ("PO26", "PO6", "PO21", "PO42", "PO11", "PO9", "PO1", "PO30", "PO34", "PO38", "PO10", "PO24",
                     "PO23", "PO17", "PO0", "PO16", "PO3", "PO32", "PO35", "PO41", "PO36"),
    },
}


@dataclass(frozen=True)
class Recipe:
    """How a domain's problems are sampled: the time span and initial state of its ODE (None: no ODE)."""

    span: tuple[float, float]
    initial: tuple[float, ...] | None
    state: tuple[str, ...] = ()  # the ODE's state variables, in solve_ivp's order


RECIPES: dict[str, Recipe] = {  # in the order tasks are listed
    "bio_pop_growth": Recipe((1.0, 60.0), (1.0,), ("P",)),
    "chem_react": Recipe((0.0, 60.0), (1.0,), ("A",)),
    "matsci": Recipe((0.0, 0.6), None),  # epsilon's range; T runs over MATSCI_T on the same rows
    "phys_osc": Recipe((0.0, 40.0), (1.0, 0.0), ("x", "v")),
}
MATSCI_T = (273.0, 573.0)


@dataclass(frozen=True)
class SynthLaw:
    """One LSR-Synth problem's law: ``law`` (constants written in) is the ground truth the task carries."""

    domain: str
    name: str
    inputs: tuple[str, ...]
    symbolic: str
    param_names: tuple[str, ...]
    params: tuple[float, ...]
    law: str

    @property
    def part(self) -> str:
        return part_of(self.name)


def part_of(name: str) -> str:
    """``train``, ``validation``, ``heldout`` (the fixed split) or ``other`` (a law outside it)."""
    return next((p for p in PARTS if any(name in names for names in SPLITS[p].values())), "other")


def laws_path(path: str | os.PathLike | None = None, root: str | os.PathLike | None = None) -> Path:
    """The laws file: ``path`` if given, else ``<data root>/lsr-synth-laws/laws.csv``."""
    return Path(path).expanduser() if path is not None else data_root(root) / LAWS_FILE


def _natural(name: str) -> tuple[str, int]:
    digits = re.sub(r"\D", "", name)
    return name.rstrip("0123456789"), int(digits) if digits else -1


def _stamp(file: str) -> tuple[int, int] | None:
    """The file's (mtime, size): the caches below key on it, so an edited file is read again."""
    try:
        stat = os.stat(file)
    except OSError:
        return None
    return stat.st_mtime_ns, stat.st_size


@functools.lru_cache(maxsize=8)
def _read(file: str, stamp: tuple[int, int] | None = None) -> tuple[SynthLaw, ...]:
    where = f"laws file {file!r}"
    try:
        with open(file, newline="", encoding="utf-8") as fh:
            rows = list(csv.DictReader(fh))
    except FileNotFoundError:
        raise TaskDataMissing(
            f"{where} not found: it holds LSR-Synth's ground truths (columns {', '.join(COLUMNS)}; from "
            "github.com/Phoinikas03/FunctionEvolve, datasets/llm-srbench/gt_expressions.csv). Give path=<laws.csv>, "
            "root=<data folder holding lsr-synth-laws/> or set HARNESS_SR_DATA; the built-in suite lsr_like needs "
            "no files") from None
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise TaskError(f"{where}: not a readable CSV file ({exc})") from None
    missing = [c for c in COLUMNS if rows and c not in rows[0]]
    if not rows or missing:
        raise TaskError(f"{where}: needs a header with columns {list(COLUMNS)}; missing {missing or 'every row'}")
    out = []
    for i, row in enumerate(rows, start=2):
        domain, name = row["domain"].strip(), row["name"].strip()
        if domain not in RECIPES:
            raise TaskError(f"{where}, line {i}: domain {domain!r} is not one of {sorted(RECIPES)}")
        inputs = tuple(s.strip() for s in row["inputs"].split(";") if s.strip())
        known = [n for n, _ in DOMAINS[domain][2]]
        if not inputs or any(n not in known for n in inputs):
            raise TaskError(f"{where}, line {i} ({name}): inputs {list(inputs)} must be among {domain}'s {known}")
        try:
            parse_expression(row["numerical_expression"], list(inputs))
            params = tuple(float(v) for v in row["gt_params"].split(";") if v.strip())
        except (ExpressionError, ValueError) as exc:
            raise TaskError(f"{where}, line {i} ({name}): {exc}") from None
        out.append(SynthLaw(domain, name, inputs, row["symbolic_expression"].strip(),
                            tuple(s.strip() for s in row["param_names"].split(";") if s.strip()), params,
                            row["numerical_expression"].strip()))
    names = [law.name for law in out]
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise TaskError(f"{where}: problem(s) {repeated} appear more than once")
    return tuple(sorted(out, key=lambda law: (law.domain, _natural(law.name))))


def read_laws(path: str | os.PathLike | None = None, root: str | os.PathLike | None = None) -> list[SynthLaw]:
    """Every law in the file, checked (known domain, inputs among the domain's, a law in the engine's grammar)."""
    file = str(laws_path(path, root))
    return list(_read(file, _stamp(file)))


def _rhs(law: Expression, inputs: tuple[str, ...], recipe: Recipe):
    """``f(t, state)`` for solve_ivp: the law's value at (t, state), with x' = v for the oscillators."""
    oscillator = len(recipe.state) == 2

    def rhs(t: float, s: np.ndarray) -> list[float]:
        env = {"t": t, **{name: s[i] for i, name in enumerate(recipe.state)}}
        value = float(law.evaluate([np.array([float(env[n])]) for n in inputs], n=1)[0])
        return [s[1], value] if oscillator else [value]

    return rhs


def trajectory(law: SynthLaw) -> tuple[np.ndarray, np.ndarray, dict]:
    """The problem's 5,000 rows in time order, float64 before storage: (inputs in the law's column order, target,
    how they were made). Raises TaskError when the ODE cannot be integrated over the whole range."""
    recipe = RECIPES[law.domain]
    expr = parse_expression(law.law, list(law.inputs))
    t = np.linspace(*recipe.span, N_POINTS)
    if recipe.initial is None:
        columns = {"epsilon": t, "T": np.linspace(*MATSCI_T, N_POINTS)}
        info = {"grid": {"epsilon": list(recipe.span), "T": list(MATSCI_T)}}
    else:
        with np.errstate(all="ignore"):
            sol = solve_ivp(_rhs(expr, law.inputs, recipe), recipe.span, list(recipe.initial), t_eval=t)
        if sol.status != 0 or sol.y.shape[1] != N_POINTS or not np.all(np.isfinite(sol.y)):
            raise TaskError(f"LSR-Synth law {law.name}: the ODE cannot be integrated over t = {recipe.span} with "
                            f"solve_ivp's defaults ({sol.message}); no shortened trajectory is substituted")
        columns = {"t": t, **{name: sol.y[i] for i, name in enumerate(recipe.state)}}
        info = {"span": list(recipe.span), "initial": dict(zip(recipe.state, recipe.initial)),
                "integrator": "scipy solve_ivp defaults (RK45, rtol 1e-3, atol 1e-6)", "nfev": int(sol.nfev)}
    X = np.column_stack([columns[n] for n in law.inputs])
    with np.errstate(all="ignore"):
        y = expr(X)
    if not np.all(np.isfinite(y)):
        raise TaskError(f"LSR-Synth law {law.name}: the target is not finite on {int((~np.isfinite(y)).sum())} rows")
    return X, y, info


def regenerate(law: SynthLaw, split_seed: int = 0) -> Task:
    """The problem as the benchmark makes it: float32 values, OOD the last 500 rows, train / test_id a seeded
    partition (4000 / 500) of the first 4500."""
    X, y, info = trajectory(law)
    X, y = X.astype(np.float32).astype(np.float64), y.astype(np.float32).astype(np.float64)
    n_id = N_POINTS - N_OOD
    order = np.random.default_rng([split_seed, zlib.crc32(law.name.encode())]).permutation(n_id)
    test_rows, train_rows = order[:N_TEST_ID], order[N_TEST_ID:]
    target, target_desc, described = DOMAINS[law.domain]
    desc = dict(described)
    return Task(
        name=law.name,
        domain=DOMAIN_LABELS[law.domain],
        input_names=list(law.inputs),
        input_descriptions=[desc[n] for n in law.inputs],
        target_name=target,
        target_description=target_desc,
        train=Split(X[train_rows], y[train_rows]),
        test_id=Split(X[test_rows], y[test_rows]),
        test_ood=Split(X[n_id:], y[n_id:]),
        ground_truth=law.law,
        metadata={
            "source": "lsr_synth_laws",
            "lsr_domain": law.domain,
            "split": law.part,
            "symbolic_expression": law.symbolic,
            "param_names": list(law.param_names),
            "gt_params": list(law.params),
            "stored_as": "float32",
            "split_seed": split_seed,
            "ood_window": [float(X[n_id:, 0].min()), float(X[:, 0].max())] if law.domain == "matsci" else
                          [float(np.linspace(*RECIPES[law.domain].span, N_POINTS)[n_id]), RECIPES[law.domain].span[1]],
            **info,
        },
    )


@functools.lru_cache(maxsize=512)
def _cached(file: str, stamp: tuple[int, int] | None, name: str, split_seed: int) -> Task:
    law = next(law for law in _read(file, stamp) if law.name == name)
    return regenerate(law, split_seed)


def load_lsr_synth_laws(names: Iterable[str] | None = None, domains: Iterable[str] | None = None,
                        split: str = "all", n_per_domain: int | None = None, split_seed: int = 0,
                        path: str | os.PathLike | None = None, root: str | os.PathLike | None = None) -> list[Task]:
    """Tasks of the laws in ``split`` (all | train | validation | heldout | other), optionally only ``domains``
    and the first ``n_per_domain`` of each (the split's own order), or exact ``names``. Cached in memory: tasks
    are read-only by contract."""
    if split not in ("all", "other", *PARTS):
        raise TaskError(f"split must be one of all, {', '.join(PARTS)}, other; got {split!r}")
    file = str(laws_path(path, root))
    stamp = _stamp(file)
    laws = list(_read(file, stamp))
    wanted_domains = [_domain_key(d) for d in domains] if domains is not None else list(RECIPES)
    if names is not None:
        wanted = [str(n) for n in names]
        known = {law.name for law in laws}
        unknown = [n for n in wanted if n not in known]
        if unknown:
            raise TaskError(f"laws file {file!r} has no problem(s) {unknown}")
        chosen = [law for n in wanted for law in laws if law.name == n]
    else:
        chosen = []
        for domain in wanted_domains:
            members = [law for law in laws if law.domain == domain and (split == "all" or law.part == split)]
            if split in PARTS:  # the part's own (random) order, so the first n are a sample of it
                order = SPLITS[split][domain]
                members.sort(key=lambda law: order.index(law.name))
            chosen += members[:n_per_domain] if n_per_domain is not None else members
    return [_cached(file, stamp, law.name, int(split_seed)) for law in chosen]


def _domain_key(domain: str) -> str:
    labels = {label: key for key, label in DOMAIN_LABELS.items()}
    key = labels.get(domain, domain)
    if key not in RECIPES:
        raise TaskError(f"unknown LSR-Synth domain {domain!r}; choose from {sorted(RECIPES)}")
    return key
