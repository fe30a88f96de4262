"""LSR-Transform-style tasks from the Feynman table (suite ``lsr_transform``): LLM-SRBench's transformation.

The recipe (Shojaee et al. 2025, arXiv 2504.10415, section 2.1), step by step:

1. **Equations**: the rows of ``FeynmanEquations.csv`` (formula, output, variables and their sampling ranges).
2. **Pivot**: every input variable in turn becomes the new target; the old output becomes an input.
3. **Symbolic transformation**: ``sympy.solve(Eq(output, formula), pivot)`` (inputs positive, as their ranges
   are; 10 s per solve).
4. **Solvability**: a solution must be analytic in the engine grammar (no ``LambertW``, ``Piecewise`` or
   imaginary unit) and *unique on the sampled domain*: on rows drawn from the table's ranges, exactly one solution
   branch gives back the pivot's sampled value (relative error 1e-6) on at least 95% of the rows where it is real,
   and it holds on at least half of the domain.
5. **Data refinement**: rows are kept where that branch is real and reproduces the pivot (the target is the
   sampled pivot itself, so the ground truth reproduces the data by construction). OOD rows come from the box
   just above every training range, ``[high, high + ood_extend * (high - low)]``, refined the same way.
6. **Context**: the variables' meanings from a short glossary of the Feynman symbols (:data:`GLOSSARY`); the
   original equation is kept in the metadata, never in the descriptions a model reads.

Equations the recipe cannot transform are skipped with the reason (``skipped=`` list; logged). Every
(equation, pivot) that passes is a task, named ``lsr_transform_<Filename>_<pivot>``. ``split="train" | "test"``
halves the *equations* (even / odd row numbers), so a harness tuned on one half never saw the other half's laws
in any transformed form.

The transformed formulas are computed once per table and code version and kept in the cache folder
(``$HARNESS_SR_CACHE`` or the platform's user cache dir), keyed by the table's sha256: sympy's solve over the
whole table takes minutes, sampling takes a second.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np
import sympy

from benchmarks.sources._io import data_root
from benchmarks.sources.feynman import Equation, read_equations
from harness.core.expression import ExpressionError, _run_with_timeout, parse_expression
from harness.core.paths import cache_dir
from harness.core.resources import usable_cpus
from harness.core.task import Split, Task, TaskError, safe_identifier

log = logging.getLogger(__name__)
RECIPE_VERSION = 1  # bump when the transformation rules change: the cache is keyed by it
SOLVE_TIMEOUT_S = 10.0
REPRODUCE_RTOL = 1e-6
BRANCH_PURITY = 0.95  # a branch must give the pivot back on this share of the rows where it is real
MIN_COVERAGE = 0.5  # ... and hold on at least this share of the sampled domain
PROBE_ROWS = 2000
MAX_DRAWS = 8
SPLITS = ("all", "train", "test")

# What the symbols of the Feynman table stand for (descriptions a model reads; numbers name the body or state).
GLOSSARY: dict[str, str] = {
    "A": "area", "A_vec": "vector potential", "B": "magnetic field strength", "Bx": "magnetic field, x component",
    "By": "magnetic field, y component", "Bz": "magnetic field, z component", "C": "capacitance",
    "D": "diffusion coefficient", "E_den": "energy density", "E_n": "energy", "Ef": "electric field strength",
    "F": "force", "G": "gravitational constant", "H": "magnetic field intensity", "I": "electric current",
    "I1": "intensity of the first wave", "I2": "intensity of the second wave", "I_0": "saturation current",
    "Int": "intensity", "Int_0": "intensity of a single source", "Jz": "angular momentum, z component",
    "K": "kinetic energy", "L": "angular momentum", "L_rad": "spectral radiance", "M": "magnetization",
    "Nn": "normal force", "Pol": "polarization", "Pwr": "power", "T": "temperature", "T1": "temperature of the first body",
    "T2": "temperature of the second body", "U": "potential energy", "V": "volume", "V1": "initial volume",
    "V2": "final volume", "Volt": "voltage", "Y": "Young's modulus", "a": "acceleration",
    "alpha": "dimensionless coefficient (polarizability or amplitude ratio)", "beta": "dimensionless coefficient",
    "c": "speed of light (or of the wave)", "chi": "electric susceptibility", "d": "distance",
    "d1": "object distance", "d2": "image distance", "delta": "phase difference", "epsilon": "electric permittivity",
    "f": "probability density or frequency", "flux": "energy flux", "foc": "focal length",
    "g": "gravitational acceleration", "g_": "g-factor", "gamma": "adiabatic index", "h": "Planck constant",
    "j": "current density", "k": "wave number (or spring constant)", "k_spring": "spring constant",
    "kappa": "thermal conductivity", "kb": "Boltzmann constant", "lambd": "wavelength", "m": "mass",
    "m1": "mass of the first body", "m2": "mass of the second body", "m_0": "rest mass", "mob": "mobility",
    "mom": "magnetic moment", "mu": "friction coefficient", "mu_S": "shear modulus", "mu_drift": "drift mobility",
    "n": "number (count, index of refraction or density)", "n_0": "reference number density",
    "n_rho": "number density", "omega": "angular frequency", "omega_0": "natural angular frequency",
    "p": "momentum", "p_d": "electric dipole moment", "pr": "pressure", "prob": "probability", "q": "electric charge",
    "q1": "charge of the first body", "q2": "charge of the second body", "r": "distance (radius)",
    "r1": "first distance", "r2": "second distance", "rho": "density", "rho_c": "charge density",
    "rho_c_0": "rest charge density", "sigma": "standard deviation (or Poisson ratio)",
    "sigma_den": "surface charge density", "t": "time", "t1": "time in the moving frame", "tau": "torque",
    "theta": "angle", "theta1": "first angle", "theta2": "second angle", "u": "velocity", "v": "velocity",
    "v1": "combined velocity", "w": "velocity", "x": "position", "x1": "first position coordinate",
    "x2": "second position coordinate", "x3": "third position coordinate", "y": "position",
    "y1": "first y coordinate", "y2": "second y coordinate", "y3": "third y coordinate", "z": "height",
    "z1": "first z coordinate", "z2": "second z coordinate",
}


@dataclass(frozen=True)
class Transform:
    """One (equation, pivot) that passed the recipe: the pivot as a formula over the other variables + output."""

    filename: str
    number: int
    pivot: str  # the table's name of the new target
    target: str  # its engine-safe name
    inputs: tuple[str, ...]  # engine-safe names: the other variables, then the old output
    sources: tuple[str, ...]  # the table's names of those inputs (the old output last)
    formula: str  # the ground truth over ``inputs``
    original: str  # the table's formula (output = original)
    output: str

    @property
    def task_name(self) -> str:
        return f"lsr_transform_{self.filename}_{self.pivot}"


def _describe(name: str, was_output: bool = False) -> str:
    base = GLOSSARY.get(name, f"variable {name!r} of the equation")
    return base + (" (a measured quantity of the system)" if was_output else "")


def _positive(expr: sympy.Expr) -> tuple[sympy.Expr, dict[sympy.Symbol, sympy.Symbol]]:
    back = {}
    forward = {}
    for s in expr.free_symbols:
        p = sympy.Symbol(s.name, positive=True)
        forward[s], back[p] = p, s
    return expr.xreplace(forward), back


def _solve(eq: Equation, pivot: str) -> tuple[list[str], str, tuple[str, ...], tuple[str, ...]] | str:
    """Candidate branches as engine-grammar strings (+ target and inputs), or the reason there are none."""
    names = [eq.renamed.get(v, v) for v in eq.variables]
    target = eq.renamed.get(pivot, pivot)
    others = [n for n in names if n != target]
    out_name = safe_identifier(eq.output, others)
    inputs = tuple(others + [out_name])
    sources = tuple([v for v in eq.variables if v != pivot] + [eq.output])
    try:
        expr = parse_expression(eq.ground_truth, names, max_nodes=1000, max_depth=64).sympy
    except ExpressionError as exc:
        return f"cannot parse the formula: {exc}"
    positive, back = _positive(expr)
    piv = next((s for s in positive.free_symbols if s.name == target), None)
    if piv is None:
        return "the pivot does not occur in the formula"
    out = sympy.Symbol(out_name, real=True)
    try:
        solutions = _run_with_timeout(lambda: sympy.solve(sympy.Eq(out, positive), piv), SOLVE_TIMEOUT_S)
    except (NotImplementedError, ValueError, TypeError, RecursionError) as exc:
        return f"sympy cannot solve for it ({type(exc).__name__})"
    if solutions is None:
        return f"sympy.solve did not finish in {SOLVE_TIMEOUT_S:g} s"
    if not solutions:
        return "sympy finds no solution"
    branches, reasons = [], []
    for sol in solutions:
        sol = sympy.sympify(sol).xreplace(back)
        if sol.has(sympy.I) or sol.has(sympy.Piecewise) or sol.has(sympy.LambertW):
            reasons.append("not analytic in the grammar (imaginary unit, Piecewise or LambertW)")
            continue
        text = str(sol)
        try:
            parse_expression(text, inputs, max_nodes=1000, max_depth=64)
        except ExpressionError as exc:
            reasons.append(f"outside the grammar: {exc}")
            continue
        branches.append(text)
    if not branches:
        return "; ".join(sorted(set(reasons))) or "no usable solution"
    return branches, target, inputs, sources


def _sample_original(eq: Equation, ranges: Sequence[tuple[float, float]], n: int, rng: np.random.Generator
                     ) -> tuple[np.ndarray, np.ndarray]:
    names = [eq.renamed.get(v, v) for v in eq.variables]
    f = parse_expression(eq.ground_truth, names, max_nodes=1000, max_depth=64)
    lows, highs = np.array([lo for lo, _ in ranges]), np.array([hi for _, hi in ranges])
    X = rng.uniform(lows, highs, size=(n, len(ranges)))
    with np.errstate(all="ignore"):
        return X, f(X)


def _new_rows(eq: Equation, pivot: str, X: np.ndarray, out: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(inputs of the transformed task, the pivot's values) from original rows; non-finite outputs dropped."""
    j = eq.variables.index(pivot)
    ok = np.isfinite(out)
    keep = [i for i in range(X.shape[1]) if i != j]
    return np.column_stack([X[ok][:, keep], out[ok]]), X[ok][:, j]


def _reproduces(formula: str, inputs: Sequence[str], X: np.ndarray, pivot_values: np.ndarray) -> np.ndarray:
    with np.errstate(all="ignore"):
        pred = parse_expression(formula, inputs, max_nodes=1000, max_depth=64)(X)
    return np.isfinite(pred) & (np.abs(pred - pivot_values) <= REPRODUCE_RTOL * np.maximum(1.0, np.abs(pivot_values)))


def transform(eq: Equation, pivot: str, seed: int = 0) -> Transform | str:
    """The recipe's steps 3-4 for one (equation, pivot): a :class:`Transform`, or why it is skipped."""
    solved = _solve(eq, pivot)
    if isinstance(solved, str):
        return solved
    branches, target, inputs, sources = solved
    rng = np.random.default_rng([seed, eq.number, eq.variables.index(pivot)])
    X, out = _sample_original(eq, eq.ranges, PROBE_ROWS, rng)
    Xn, piv = _new_rows(eq, pivot, X, out)
    if len(piv) < PROBE_ROWS // 2:
        return "the original formula is not finite on most of its ranges"
    good = []
    for formula in branches:
        with np.errstate(all="ignore"):
            real = np.isfinite(parse_expression(formula, inputs, max_nodes=1000, max_depth=64)(Xn))
        hits = _reproduces(formula, inputs, Xn, piv)
        if real.sum() and hits.sum() >= BRANCH_PURITY * real.sum() and hits.mean() >= MIN_COVERAGE:
            good.append((formula, hits.mean()))
    if not good:
        return "no solution branch gives the pivot back on the sampled domain"
    if len(good) > 1:
        return f"not unique: {len(good)} branches give the pivot back on the sampled domain"
    formula = good[0][0]
    return Transform(eq.filename, eq.number, pivot, target, inputs, sources, formula, eq.formula, eq.output)


def _table_digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()[:16]


def transforms(path: str | os.PathLike | None = None, *, root: str | os.PathLike | None = None,
               skipped: list[tuple[str, str]] | None = None, use_cache: bool = True,
               workers: int | None = None) -> list[Transform]:
    """Every (equation, pivot) of the table that passes the recipe, in table order; the rest go to ``skipped``
    as (``<Filename>:<pivot>``, reason). Cached per table digest and recipe version; computed by ``workers``
    child processes (default: one per core, at most 4)."""
    file = Path(path) if path is not None else data_root(root) / "feynman" / "FeynmanEquations.csv"
    equations = read_equations(file)
    cache = cache_dir() / "lsr_transform" / f"v{RECIPE_VERSION}-{_table_digest(file)}.json"
    if use_cache and cache.is_file():
        try:
            data = json.loads(cache.read_text(encoding="utf-8"))
            if skipped is not None:
                skipped.extend((a, b) for a, b in data["skipped"])
            return [_transform_from_json(t) for t in data["transforms"]]
        except (OSError, ValueError, KeyError, TypeError):
            log.warning("ignoring an unreadable LSR-Transform cache %s", cache)
    found, missed = [], []
    for (eq, pivot), result in zip(_pairs(equations), _solve_all(file, equations, workers)):
        if isinstance(result, str):
            missed.append((f"{eq.filename}:{pivot}", result))
        else:
            found.append(result)
    if use_cache:
        try:
            cache.parent.mkdir(parents=True, exist_ok=True)
            tmp = cache.with_suffix(f".tmp{os.getpid()}")
            tmp.write_text(json.dumps({"transforms": [t.__dict__ for t in found], "skipped": missed}), "utf-8")
            os.replace(tmp, cache)
        except OSError as exc:
            log.warning("could not write the LSR-Transform cache %s: %s", cache, exc)
    if skipped is not None:
        skipped.extend(missed)
    return found


def _pairs(equations: Sequence[Equation]) -> list[tuple[Equation, str]]:
    return [(eq, pivot) for eq in equations for pivot in eq.variables]


def _solve_all(file: Path, equations: Sequence[Equation], workers: int | None) -> list[Transform | str]:
    """:func:`transform` of every (equation, pivot), in order. Several workers are plain children
    (``python -m benchmarks.sources.lsr_transform FILE K N``, each the pairs ``i % N == K``, one JSON list on
    stdout): a solve's 10 s timer is SIGALRM, which needs each solve in a main thread, and a plain child neither
    re-imports the caller's ``__main__`` (spawn) nor copies its threads (fork)."""
    pairs = _pairs(equations)
    n = max(1, min(workers or min(usable_cpus(), 4), len(pairs)))
    if n == 1:
        return [transform(eq, pivot) for eq, pivot in pairs]
    procs = [subprocess.Popen([sys.executable, "-m", __name__, str(file), str(k), str(n)], stdout=subprocess.PIPE,
                              text=True) for k in range(n)]
    results: list[Transform | str | None] = [None] * len(pairs)
    for k, proc in enumerate(procs):
        out, _ = proc.communicate()
        if proc.returncode != 0:
            raise RuntimeError(f"an LSR-Transform worker failed (exit {proc.returncode}); run with workers=1 to see why")
        for i, item in zip(range(k, len(pairs), n), json.loads(out)):
            results[i] = item if isinstance(item, str) else _transform_from_json(item)
    return results  # type: ignore[return-value]


def _transform_from_json(item: dict[str, Any]) -> Transform:
    return Transform(**{**item, "inputs": tuple(item["inputs"]), "sources": tuple(item["sources"])})


def _worker(argv: Sequence[str]) -> None:
    file, k, n = Path(argv[0]), int(argv[1]), int(argv[2])
    out = os.fdopen(os.dup(1), "w")  # the answer's channel; anything printed on the way goes to stderr
    os.dup2(2, 1)
    results = [transform(eq, pivot) for eq, pivot in _pairs(read_equations(file))[k::n]]
    json.dump([r if isinstance(r, str) else r.__dict__ for r in results], out)
    out.close()


def _refined(eq: Equation, tr: Transform, ranges: Sequence[tuple[float, float]], n: int,
             rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """``n`` rows of the transformed task drawn in ``ranges`` where the branch holds (fewer if it keeps failing)."""
    Xs, ys, have = [], [], 0
    for _ in range(MAX_DRAWS):
        X, out = _sample_original(eq, ranges, max(2 * n, 64), rng)
        Xn, piv = _new_rows(eq, tr.pivot, X, out)
        ok = _reproduces(tr.formula, tr.inputs, Xn, piv)
        Xs.append(Xn[ok])
        ys.append(piv[ok])
        have += int(ok.sum())
        if have >= n:
            break
    return np.concatenate(Xs)[:n], np.concatenate(ys)[:n]


def make_task(eq: Equation, tr: Transform, *, n_train: int = 2000, n_test: int = 500, n_ood: int = 500,
              seed: int = 0, ood_extend: float = 0.5) -> Task:
    rng = np.random.default_rng([seed, eq.number, eq.variables.index(tr.pivot), 1])
    X, y = _refined(eq, tr, eq.ranges, n_train + n_test, rng)
    if len(y) < n_train + n_test:
        raise TaskError(f"{tr.task_name}: only {len(y)} of {n_train + n_test} rows where the solution holds")
    ood_ranges = [(hi, hi + ood_extend * (hi - lo)) for lo, hi in eq.ranges]
    test_ood, note = None, ""
    if n_ood:
        Xo, yo = _refined(eq, tr, ood_ranges, n_ood, rng)
        if len(yo) == n_ood:
            test_ood = Split(Xo, yo)
        else:
            note = f"OOD dropped: the solution holds on only {len(yo)} of {n_ood} OOD rows"
    descriptions = [_describe(s, was_output=(i == len(tr.sources) - 1)) for i, s in enumerate(tr.sources)]
    return Task(
        name=tr.task_name,
        domain="physics",
        input_names=list(tr.inputs),
        input_descriptions=descriptions,
        target_name=tr.target,
        target_description=_describe(tr.pivot),
        train=Split(X[:n_train], y[:n_train]),
        test_id=Split(X[n_train:], y[n_train:]) if n_test else None,
        test_ood=test_ood,
        ground_truth=tr.formula,
        metadata={
            "source": "lsr_transform",
            "filename": eq.filename,
            "number": eq.number,
            "pivot": tr.pivot,
            "original_output": eq.output,
            "original_formula": eq.formula,
            "ranges": {n: list(r) for n, r in zip(eq.variables, eq.ranges)},
            "ood_ranges": {n: list(r) for n, r in zip(eq.variables, ood_ranges)},
            "seed": seed,
            "split": "train" if eq.number % 2 == 0 else "test",
            **({"note": note} if note else {}),
        },
    )


def load_lsr_transform(path: str | os.PathLike | None = None, *, split: str = "all",
                       names: Iterable[str] | None = None, n: int | None = None, n_train: int = 2000,
                       n_test: int = 500, n_ood: int = 500, seed: int = 0, ood_extend: float = 0.5,
                       root: str | os.PathLike | None = None, skipped: list[tuple[str, str]] | None = None
                       ) -> list[Task]:
    """Transformed Feynman tasks of ``split`` (train = even equation numbers, test = odd); ``names`` pick tasks
    (``lsr_transform_I.6.2a_theta``), ``n`` keeps the first n."""
    if split not in SPLITS:
        raise TaskError(f"split must be one of {SPLITS}, got {split!r}")
    file = Path(path) if path is not None else data_root(root) / "feynman" / "FeynmanEquations.csv"
    equations = {e.filename: e for e in read_equations(file)}
    found = transforms(file, skipped=skipped)
    if names is not None:
        wanted = list(names)
        known = {t.task_name for t in found}
        missing = [w for w in wanted if w not in known]
        if missing:
            raise TaskError(f"LSR-Transform task(s) {missing} not found (names look like "
                            f"'lsr_transform_I.6.2a_theta'; {len(known)} tasks)")
        found = [t for t in found if t.task_name in wanted]
    elif split != "all":
        found = [t for t in found if (t.number % 2 == 0) == (split == "train")]
    tasks: list[Task] = []
    for tr in found:
        if n is not None and len(tasks) >= n:
            break
        try:
            tasks.append(make_task(equations[tr.filename], tr, n_train=n_train, n_test=n_test, n_ood=n_ood,
                                   seed=seed, ood_extend=ood_extend))
        except TaskError as exc:
            log.warning("skipping %s: %s", tr.task_name, exc)
            if skipped is not None:
                skipped.append((tr.task_name, str(exc)))
    return tasks


if __name__ == "__main__":
    _worker(sys.argv[1:])
