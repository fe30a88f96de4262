"""Speed/accuracy benchmark of harness.evaluator.fit against the LLM-SR evaluation style.

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

from harness.evaluator import fit, score
from harness.expression import parse_expression

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


def recovered(params: np.ndarray, true: np.ndarray) -> bool:
    p = np.asarray(params, dtype=float)[: true.size]
    return bool(np.all(np.isfinite(p)) and np.max(np.abs(p - true) / np.abs(true)) < 1e-6)


def run_ours(cands: list[tuple[str, np.ndarray]], data: list[tuple[np.ndarray, np.ndarray]]) -> dict:
    t0 = time.perf_counter()
    rec, nmse = [], []
    for (text, true), (X, y) in zip(cands, data):
        res = fit(parse_expression(text, VARIABLES), X, y, n_starts=4, seed=0, max_seconds=2.0)
        rec.append(recovered(res.params, true))
        nmse.append(res.metrics["nmse"])
    return {"seconds": time.perf_counter() - t0, "n": len(cands), "rec": rec, "nmse": nmse}


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
              tmp: Path) -> dict:
    paths = []
    for k, (X, y) in enumerate(data):
        paths.append(tmp / f"data{k}.npz")
        np.savez(paths[-1], X=X, y=y)
    t0 = time.perf_counter()
    outs = []
    for (text, _), path in zip(cands, paths):
        code = CHILD.format(body=to_llmsr(text))
        proc = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, timeout=60)
        outs.append(json.loads(proc.stdout.strip().splitlines()[-1]) if proc.returncode == 0 else None)
    seconds = time.perf_counter() - t0
    rec, nmse = [], []
    for (text, true), (X, y), out in zip(cands, data, outs):
        if out is None:
            rec.append(False)
            nmse.append(float("inf"))
            continue
        params = np.array(out["params"])
        rec.append(recovered(params, true))
        nmse.append(score(parse_expression(text, VARIABLES), params, X, y)["nmse"])  # 10-slot vector by index
    return {"seconds": seconds, "n": len(cands), "rec": rec, "nmse": nmse}


def line(name: str, r: dict) -> str:
    return (f"{name:<38} {r['n']:>3} cands {r['seconds']:8.2f} s  {r['n'] / r['seconds']:8.2f} fits/s  "
            f"recovered(<1e-6) {np.mean(r['rec']):6.1%}  median NMSE {np.median(r['nmse']):.2e}")


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
    sub = slice(0, min(args.llmsr, len(cands)))
    ours_sub = run_ours(cands[sub], data[sub])
    with tempfile.TemporaryDirectory() as tmp:
        llmsr = run_llmsr(cands[sub], data[sub], Path(tmp))
    print(line("ours: fit (in-process, LM + jacobian)", ours))
    print(line(f"ours on the first {llmsr['n']}", ours_sub))
    print(line(f"LLM-SR style on the first {llmsr['n']} (subset)", llmsr))
    speed_ours = ours_sub["n"] / ours_sub["seconds"]
    speed_llmsr = llmsr["n"] / llmsr["seconds"]
    print(f"throughput ratio on the same {llmsr['n']} candidates: ours / LLM-SR = {speed_ours / speed_llmsr:.1f}x")


if __name__ == "__main__":
    main()
