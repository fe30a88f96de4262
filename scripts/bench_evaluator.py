"""Speed/accuracy benchmark of harness.core.evaluator.fit against the LLM-SR evaluation style.

Prints figures; it is not a test.  A fixed, seeded set of candidate expressions (3-5 constants,
two variables) is fitted to noise-free data generated from known constants:

* ours: parse + compile + ``fit`` (least squares, analytic Jacobian, seeded restarts) in-process;
* LLM-SR / LLM-SRBench style: one fresh ``python -c`` process per candidate that fits a
  10-slot ``params`` vector with ``scipy.optimize.minimize(method='BFGS')`` from all ones,
  as LLM-SR's evaluator does (run on a subset to keep the benchmark short).

Usage: python scripts/bench_evaluator.py [--candidates 50] [--rows 10000] [--llmsr 20]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from harness.core.evaluator import fit, score
from harness.core.expression import parse_expression

VARIABLES = ["x0", "x1"]
# Term templates: "a" slots are signed amplitudes, "b" slots positive rates/frequencies.
TERMS = [
    "{a}*x0", "{a}*x1", "{a}*x0**2", "{a}*x0*x1", "{a}", "{a}*sin({b}*x0)", "{a}*cos({b}*x1)",
    "{a}*exp(-{b}*x0)", "{a}*log(1 + {b}*x1**2)", "{a}*x1/(1 + {b}*x0**2)", "{a}*tanh({b}*x1)",
    "{a}*sqrt(x0 + {b})",
]


def make_candidates(n: int, seed: int = 12345) -> list[tuple[str, np.ndarray]]:
    """Seeded expressions written with c{i}, and their true constants."""
    rng = np.random.default_rng(seed)
    out: list[tuple[str, np.ndarray]] = []
    while len(out) < n:
        target = int(rng.integers(3, 6))
        terms, consts, used = [], [], set()
        while len(consts) < target:
            t = TERMS[int(rng.integers(len(TERMS)))]
            need = t.count("{")
            if t in used or len(consts) + need > target:
                if len(used) == len(TERMS):
                    break
                continue
            used.add(t)
            slots = {}
            for slot in ("a", "b"):
                if "{" + slot + "}" in t:
                    value = rng.uniform(0.5, 2.0)
                    if slot == "a" and rng.random() < 0.5:
                        value = -value
                    slots[slot] = f"c{len(consts)}"
                    consts.append(value)
            terms.append(t.format(**slots))
        if len(consts) == target:
            out.append((" + ".join(terms), np.array(consts)))
    return out


def make_data(text: str, true: np.ndarray, rows: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    X = np.random.default_rng(seed).uniform(0.1, 3.0, (rows, len(VARIABLES)))
    return X, parse_expression(text, VARIABLES)(X, true)


def rel_error(params: np.ndarray, true: np.ndarray) -> float:
    """Largest relative error of the fitted constants (inf if any is not finite)."""
    p = np.asarray(params, dtype=float)[: true.size]
    return float(np.max(np.abs(p - true) / np.abs(true))) if np.all(np.isfinite(p)) else float("inf")


def run_ours(cands: list[tuple[str, np.ndarray]], data: list[tuple[np.ndarray, np.ndarray]]) -> list[dict]:
    """Per candidate: wall time of parse + compile + fit, constant error and NMSE."""
    rows = []
    for (text, true), (X, y) in zip(cands, data):
        t0 = time.perf_counter()
        res = fit(parse_expression(text, VARIABLES), X, y, n_starts=4, seed=0, max_seconds=2.0)
        rows.append({"seconds": time.perf_counter() - t0, "err": rel_error(res.params, true),
                     "nmse": res.metrics["nmse"]})
    return rows


CHILD = """
import json, sys
import numpy as np
from scipy.optimize import minimize
d = np.load(sys.argv[1])
X, y = d["X"], d["y"]
def equation(x0, x1, params):
    return {body}
def loss(params):
    return np.mean((equation(X[:, 0], X[:, 1], params) - y) ** 2)
result = minimize(lambda params: loss(params), [1.0] * 10, method="BFGS")
print(json.dumps({{"params": result.x.tolist(), "loss": float(result.fun)}}))
"""


def to_llmsr(text: str) -> str:
    """c{i} -> params[i], functions via np., as an LLM writes an LLM-SR equation skeleton."""
    e = parse_expression(text, VARIABLES)
    body = e.to_string()
    for name in ("sin", "cos", "exp", "log", "tanh", "sqrt"):
        body = body.replace(f"{name}(", f"np.{name}(")
    for i in sorted(range(len(e.parameters) + 1), reverse=True):
        body = body.replace(f"c{i}", f"params[{i}]")
    return body


def run_llmsr(cands: list[tuple[str, np.ndarray]], data: list[tuple[np.ndarray, np.ndarray]],
              tmp: Path) -> list[dict]:
    """Per candidate: wall time of one fresh process fitting the LLM-SR way, error and NMSE."""
    rows = []
    for k, ((text, true), (X, y)) in enumerate(zip(cands, data)):
        path = tmp / f"data{k}.npz"
        np.savez(path, X=X, y=y)
        code = CHILD.format(body=to_llmsr(text))
        t0 = time.perf_counter()
        proc = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, timeout=120)
        seconds = time.perf_counter() - t0
        if proc.returncode != 0:
            rows.append({"seconds": seconds, "err": float("inf"), "nmse": float("inf")})
            continue
        params = np.array(json.loads(proc.stdout.strip().splitlines()[-1])["params"])
        nmse = score(parse_expression(text, VARIABLES), params, X, y)["nmse"]  # 10-slot vector read by index
        rows.append({"seconds": seconds, "err": rel_error(params, true), "nmse": nmse})
    return rows


def line(name: str, rows: list[dict]) -> str:
    seconds = sum(r["seconds"] for r in rows)
    err = np.array([r["err"] for r in rows])
    return (f"{name:<34} {len(rows):>3} cands {seconds:7.2f} s {len(rows) / seconds:8.2f} fits/s  "
            f"recovered: {np.mean(err < 1e-6):6.1%} (<1e-6) {np.mean(err < 1e-3):6.1%} (<1e-3)  "
            f"median NMSE {np.median([r['nmse'] for r in rows]):.2e}")


def startup_seconds(repeats: int = 3) -> float:
    """Cost of a bare fresh process importing numpy and scipy.optimize."""
    t0 = time.perf_counter()
    for _ in range(repeats):
        subprocess.run([sys.executable, "-c", "import numpy, scipy.optimize"], check=True)
    return (time.perf_counter() - t0) / repeats


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--candidates", type=int, default=50)
    ap.add_argument("--rows", type=int, default=10_000)
    ap.add_argument("--llmsr", type=int, default=20, help="candidates run the LLM-SR way (subset)")
    args = ap.parse_args()

    cands = make_candidates(args.candidates)
    data = [make_data(text, true, args.rows, seed=k) for k, (text, true) in enumerate(cands)]
    print(f"{len(cands)} candidates, {args.rows} rows, 3-5 constants each; e.g. {cands[0][0]}")
    ours = run_ours(cands, data)
    n_sub = min(args.llmsr, len(cands))
    with tempfile.TemporaryDirectory() as tmp:
        llmsr = run_llmsr(cands[:n_sub], data[:n_sub], Path(tmp))
    print(line("ours: in-process least_squares", ours))
    print(line(f"ours, first {n_sub} of the same run", ours[:n_sub]))
    print(line(f"LLM-SR style, first {n_sub} (subset)", llmsr))
    ratio = sum(r["seconds"] for r in llmsr) / sum(r["seconds"] for r in ours[:n_sub])
    print(f"throughput ratio on the same {n_sub} candidates: ours / LLM-SR = {ratio:.1f}x")
    print(f"(of which process start + numpy/scipy import: {startup_seconds():.2f} s per LLM-SR candidate)")


if __name__ == "__main__":
    main()
