"""Benchmark suites as lists of validated :class:`harness.core.task.Task`.

``load_suite(name, **options)`` is the one entry point (contract): ``synthetic`` (built in, default),
``lsr_synth_laws`` (LSR-Synth regenerated from its own laws: the optimizer's tasks), ``lsr_like`` (LSR-Synth's
recipe with our own laws, built in), ``lsr_transform``, ``llm_sr``, ``lsr_synth`` (the benchmark's HDF5 file),
``feynman``, ``csv`` (a user's own CSV/Parquet table) and ``folder`` (tasks in the LLM-SR layout, e.g. written by
``python -m benchmarks export``). Options may be given as strings (CLI ``key=value``, config
files) and are converted using each suite's option table, so every caller gets the same checks and messages.
"""

from __future__ import annotations

import json
import re
import zlib
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable

import numpy as np

from harness.core.task import Split, Task, TaskError

__all__ = ["SUITES", "Suite", "load_suite", "load_task", "list_suites", "subsample", "add_noise", "coerce_options"]


@dataclass(frozen=True)
class Suite:
    """A named loader and the options it takes: ``{option: (kind, help)}``, kind in int/float/str/list/bool/json."""

    name: str
    loader: Callable[..., list[Task]]
    description: str
    options: dict[str, tuple[str, str]] = field(default_factory=dict)


def _synthetic(**kw: Any) -> list[Task]:
    from benchmarks.sources.synthetic import synthetic_suite

    return synthetic_suite(**kw)


def _lsr_like(**kw: Any) -> list[Task]:
    from benchmarks.sources.lsr_like import lsr_like_suite

    return lsr_like_suite(**kw)


def _lsr_transform(**kw: Any) -> list[Task]:
    from benchmarks.sources.lsr_transform import load_lsr_transform

    return load_lsr_transform(**kw)


def _llm_sr(**kw: Any) -> list[Task]:
    from benchmarks.sources.llm_sr import load_llm_sr

    return load_llm_sr(**kw)


def _lsr_synth(**kw: Any) -> list[Task]:
    from benchmarks.sources.lsr_synth import load_lsr_synth

    return load_lsr_synth(**kw)


def _lsr_synth_laws(**kw: Any) -> list[Task]:
    from benchmarks.sources.lsr_synth_laws import load_lsr_synth_laws

    return load_lsr_synth_laws(**kw)


def _feynman(**kw: Any) -> list[Task]:
    from benchmarks.sources.feynman import load_feynman

    return load_feynman(**kw)


def _csv(path: str | None = None, target: str | None = None, **kw: Any) -> list[Task]:
    from benchmarks.sources.table import load_table

    if path is None or target is None:
        raise TaskError("suite 'csv' needs path=<file.csv|file.parquet> and target=<column>")
    return [load_table(path, target, **kw)]


def _folder(path: str | None = None) -> list[Task]:
    from benchmarks.sources.llm_sr import load_folders

    if path is None:
        raise TaskError("suite 'folder' needs path=<task folder or folder of task folders>")
    return load_folders(path)


_SIZES = {
    "n_train": ("int", "training rows per task (default 500)"),
    "n_test": ("int", "in-domain test rows per task (default 200)"),
    "n_ood": ("int", "out-of-domain test rows per task (default 200)"),
    "seed": ("int", "random seed (default 0)"),
}
_COMMON = {
    "max_rows": ("int", "keep at most this many rows per split (deterministic random subsample)"),
    "noise": ("float", "relative Gaussian noise on the train target, y*(1 + noise*N(0,1)) (default 0: none)"),
    "noise_tests": ("bool", "add the same noise to the test targets too (default false: tests stay exact)"),
}
_ROOT = {"root": ("str", "data folder (default $HARNESS_SR_DATA or <repo>/../shared/data)")}

SUITES: dict[str, Suite] = {
    s.name: s
    for s in (
        Suite("lsr_like", _lsr_like, "built-in LSR-Synth-grade tasks: LLM-SRBench's recipe (known + synthetic terms, "
              "long trajectories, 5,000 points, OOD = the end of the time axis), our own laws", {
            "n_per_domain": ("int", "tasks per domain (default 3)"),
            "domains": ("list", "phys_osc, chem_react, bio_pop_growth, matsci (or physics, chemistry, ...)"),
            "split": ("str", "all | train | test (laws from disjoint halves of the synthetic-term library)"),
            "names": ("list", "exact tasks, e.g. chem_react_lsr_03"),
            "n_points": ("int", "points per task before the split (default 5000)"),
            "ood_fraction": ("float", "share of the time axis (materials: of the points) held out as OOD (0.1)"),
            "test_fraction": ("float", "share of the in-domain points held out as the ID test (0.2)"),
            "seed": ("int", "random seed (default 0)"),
        }),
        Suite("lsr_transform", _lsr_transform, "LSR-Transform from the Feynman table: another variable solved for "
              "as the target (sympy), data where the solution holds, OOD above the training box", {
            "path": ("str", "FeynmanEquations.csv (default <root>/feynman/FeynmanEquations.csv)"),
            "split": ("str", "all | train | test (even / odd equation numbers)"),
            "names": ("list", "exact tasks, e.g. lsr_transform_I.6.2a_theta"),
            "n": ("int", "keep the first n tasks"),
            "ood_extend": ("float", "OOD range [high, high + ood_extend*(high-low)] per original variable (0.5)"),
            **{**_SIZES, "n_train": ("int", "training rows per task (default 2000)"),
               "n_test": ("int", "in-domain test rows per task (default 500)"),
               "n_ood": ("int", "out-of-domain test rows per task (default 500)")},
            **_ROOT,
        }),
        Suite("synthetic", _synthetic, "built-in LSR-Synth-like tasks of the earlier figures (easier: short "
              "windows, 3-digit constants; the engine alone solves most)", {
            "n_per_domain": ("int", "tasks per domain (default 3)"),
            "domains": ("list", "phys_osc, chem_react, bio_pop_growth, matsci (or physics, chemistry, ...)"),
            "split": ("str", "all | train | test (disjoint template halves)"),
            "names": ("list", "exact tasks, e.g. phys_osc_synth_03"),
            "n_trajectories": ("int", "trajectories per dynamics task (default 1)"),
            **_SIZES,
        }),
        Suite("llm_sr", _llm_sr, "the four LLM-SR problems (oscillator1, oscillator2, bactgrow, stressstrain)", {
            "names": ("list", "subset of problems"),
            **_ROOT,
        }),
        Suite("lsr_synth", _lsr_synth, "LSR-Synth problems of LLM-SRBench (local files, else the hub once)", {
            "path": ("str", "the HDF5 file (default <root>/llm-srbench/lsr_bench_data.hdf5, else downloaded)"),
            "folder": ("str", "a local copy of the hub repository: lsr_bench_data.hdf5 + data/lsr_synth_*.parquet"),
            "download": ("bool", "fetch nnheui/llm-srbench from the hub when nothing is local (default true)"),
            "names": ("list", "task names, e.g. PO0 or phys_osc/PO0"),
            "domains": ("list", "bio_pop_growth, chem_react, matsci, phys_osc"),
            **_ROOT,
        }),
        Suite("lsr_synth_laws", _lsr_synth_laws, "LSR-Synth regenerated from its own laws (109 of its 129 ground "
              "truths, the benchmark's recipe and problem names; a fixed train / validation / held-out split)", {
            "split": ("str", "all | train | validation | heldout (the fixed split: 57 / 12 / 40 laws) | other"),
            "n_per_domain": ("int", "the first n laws of each domain in the split's own (random) order"),
            "domains": ("list", "bio_pop_growth, chem_react, matsci, phys_osc (or biology, chemistry, ...)"),
            "names": ("list", "exact problems, e.g. PO0, CRK12"),
            "split_seed": ("int", "seed of the train / test_id partition of the first 4500 rows (default 0)"),
            "path": ("str", "the laws file (default <root>/lsr-synth-laws/laws.csv)"),
            **_ROOT,
        }),
        Suite("feynman", _feynman, "AI Feynman equations, inputs sampled in the table's ranges", {
            "path": ("str", "FeynmanEquations.csv (default <root>/feynman/FeynmanEquations.csv)"),
            "names": ("list", "equation file names, e.g. I.6.2a"),
            "numbers": ("list", "equation numbers (1-100)"),
            "n": ("int", "keep the first n equations"),
            "ood_extend": ("float", "OOD range [high, high + ood_extend*(high-low)] (default 0.5)"),
            **_SIZES,
            **_ROOT,
        }),
        Suite("csv", _csv, "your own table: one CSV or Parquet file and a target column", {
            "path": ("str", "the file (required)"),
            "target": ("str", "target column (required)"),
            "inputs": ("list", "input columns (default: all others)"),
            "descriptions": ("json", 'JSON object {"column": "description"}'),
            "name": ("str", "task name (default: file stem)"),
            "domain": ("str", "domain label"),
            "target_description": ("str", "what the target is"),
            "test_fraction": ("float", "in-domain test fraction (default 0.2)"),
            "seed": ("int", "split seed (default 0)"),
            "ood_column": ("str", "rows above a quantile of this column become the OOD test"),
            "ood_quantile": ("float", "quantile for ood_column (default 0.8)"),
            "ground_truth": ("str", "known formula over the input names, if any"),
        }),
        Suite("folder", _folder, "task folder(s) in the LLM-SR layout (train.csv, test_id.csv, test_ood.csv)", {
            "path": ("str", "a task folder or a folder of task folders (required)"),
        }),
    )
}
ALIASES = {"table": "csv", "parquet": "csv", "llm-sr": "llm_sr", "llmsr": "llm_sr", "lsr-synth": "lsr_synth",
           "lsr": "lsr_synth", "synth": "synthetic", "lsr-like": "lsr_like", "lsr-transform": "lsr_transform"}


def list_suites() -> list[Suite]:
    return list(SUITES.values())


def _suite(name: str) -> Suite:
    key = ALIASES.get(name, name)
    if key not in SUITES:
        raise TaskError(f"unknown suite {name!r}; choose from {sorted(SUITES)}")
    return SUITES[key]


def coerce_options(suite: str, options: dict[str, Any]) -> dict[str, Any]:
    """Check option names and convert string values (``"3"``, ``"a,b"``, ``"true"``) to the suite's types."""
    spec = {**_suite(suite).options, **_COMMON}
    unknown = sorted(set(options) - set(spec))
    if unknown:
        raise TaskError(f"suite {_suite(suite).name!r} takes no option(s) {unknown}; options: {sorted(spec)}")
    out: dict[str, Any] = {}
    for key, value in options.items():
        kind = spec[key][0]
        try:
            out[key] = _coerce(value, kind)
        except (TypeError, ValueError):  # json.JSONDecodeError is a ValueError
            raise TaskError(f"option {key}={value!r}: expected {kind}") from None
    return out


def _coerce(value: Any, kind: str) -> Any:
    if value is None:
        return None
    if kind == "list":
        if isinstance(value, str):
            return [v.strip() for v in value.split(",") if v.strip()]
        return list(value)
    if kind == "json":
        return json.loads(value) if isinstance(value, str) else dict(value)
    if kind == "int":
        return int(value)
    if kind == "float":
        return float(value)
    if kind == "bool":
        if isinstance(value, str):
            return value.strip().lower() in ("1", "true", "yes", "on")
        return bool(value)
    return str(value)


def load_suite(name: str = "synthetic", **options: Any) -> list[Task]:
    """Load a suite by name (see ``SUITES``); ``max_rows`` subsamples every split of every task."""
    suite = _suite(name)
    opts = coerce_options(suite.name, options)
    max_rows = opts.pop("max_rows", None)
    noise, noise_tests = opts.pop("noise", None), bool(opts.pop("noise_tests", False))
    tasks = suite.loader(**opts)
    seed = opts.get("seed", 0) or 0
    if max_rows is not None:
        tasks = [subsample(t, max_rows, seed=seed) for t in tasks]
    if noise:
        tasks = [add_noise(t, noise, tests=noise_tests, seed=seed) for t in tasks]
    return tasks


def subsample(task: Task, max_rows: int, seed: int = 0) -> Task:
    """The task with each split cut to at most ``max_rows`` random rows (order kept) - for fast runs."""
    if max_rows < 10:
        raise TaskError(f"max_rows must be >= 10, got {max_rows}")

    def cut(split, salt: int):
        if split is None or split.n <= max_rows:
            return split
        idx = np.sort(np.random.default_rng([seed, salt]).choice(split.n, max_rows, replace=False))
        return split.take(idx)

    meta = {**task.metadata, "max_rows": max_rows}
    return replace(task, train=cut(task.train, 0), test_id=cut(task.test_id, 1), test_ood=cut(task.test_ood, 2),
                   metadata=meta)


def add_noise(task: Task, level: float, *, tests: bool = False, seed: int = 0) -> Task:
    """The task with relative Gaussian noise on its train target, ``y * (1 + level * N(0, 1))`` (and on the test
    targets when ``tests``), seeded by (seed, task name, split); the level and splits go into the metadata.

    Relative: every point keeps its sign and scale, so targets near zero stay near zero and the acc_tau figures
    keep their meaning (an additive level times the RMS of y would swamp the points near an equilibrium)."""
    if not 0.0 <= level < 1.0:
        raise TaskError(f"noise must be in [0, 1), got {level}")
    name_key = zlib.crc32(task.name.encode("utf-8"))

    def noisy(split, salt: int):
        if split is None:
            return None
        rng = np.random.default_rng([seed, name_key, salt])
        return Split(split.X, split.y * (1.0 + level * rng.standard_normal(split.y.shape)))

    on = ["train"] + (["test_id", "test_ood"] if tests else [])
    meta = {**task.metadata, "noise": {"level": float(level), "kind": "relative gaussian", "splits": on}}
    return replace(task, train=noisy(task.train, 0),
                   test_id=noisy(task.test_id, 1) if tests else task.test_id,
                   test_ood=noisy(task.test_ood, 2) if tests else task.test_ood, metadata=meta)


_SYNTH_NAME = re.compile(r"^[a-z_]+_synth_\d+$")
_LSR_LIKE_NAME = re.compile(r"^[a-z_]+_lsr_\d+$")


def load_task(spec: str | Task, **options: Any) -> Task:
    """One task from a spec: a Task; ``"suite:name"`` (``"llm_sr:oscillator1"``, ``"csv:data.csv"`` with
    ``target=``); a task folder; a CSV/Parquet file (with ``target=``); or a bare known name
    (``oscillator1``, ``phys_osc_synth_03``, ``feynman_I.6.2a``)."""
    if isinstance(spec, Task):
        return spec
    spec = str(spec)
    suite, sep, rest = spec.partition(":")
    if sep and (suite in SUITES or suite in ALIASES):
        s = _suite(suite)
        if "names" in s.options:
            tasks = load_suite(s.name, names=[rest], **options)
        else:
            tasks = load_suite(s.name, path=rest, **options)
        return _one(tasks, spec)
    path = Path(spec)
    if path.is_dir():
        return _one(load_suite("folder", path=spec, **options), spec)
    if path.is_file():
        return _one(load_suite("csv", path=spec, **options), spec)
    from benchmarks.sources.llm_sr import PROBLEMS

    if spec in PROBLEMS:
        return _one(load_suite("llm_sr", names=[spec], **options), spec)
    if _SYNTH_NAME.match(spec):
        return _one(load_suite("synthetic", names=[spec], **options), spec)
    if _LSR_LIKE_NAME.match(spec):
        return _one(load_suite("lsr_like", names=[spec], **options), spec)
    if spec.startswith("lsr_transform_"):
        return _one(load_suite("lsr_transform", names=[spec], **options), spec)
    if spec.startswith("feynman_"):
        return _one(load_suite("feynman", names=[spec], **options), spec)
    raise TaskError(f"cannot resolve task spec {spec!r}: use 'suite:name', a task folder, or a CSV/Parquet file")


def _one(tasks: list[Task], spec: str) -> Task:
    if len(tasks) != 1:
        raise TaskError(f"task spec {spec!r} matched {len(tasks)} tasks, expected exactly one")
    return tasks[0]
