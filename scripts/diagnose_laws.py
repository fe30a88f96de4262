"""Why a law was missed: per solve, is its structure in the pool and lost at selection, never proposed, out of the
engine's reach (operators), or found with a wrong constant?

    python scripts/diagnose_laws.py RESULTS.jsonl [RESULTS.jsonl ...] [--arm harness] [--markdown out.md]
        [--split train|test] [--n-per-domain 3] [--llm-sr DATA/llm-sr]    # as the bench run loaded its tasks

Reads ``scripts/bench_harness.py`` records (each names its task and run folder) and, for every task with a
ground truth, the run's ``nodes.jsonl``: every equation the solve produced (the engine's fronts, the model's fitted
hypotheses, the term combination) and every hypothesis the model wrote (also those dropped). The law's additive
terms are compared with theirs as *skeletons* (numbers replaced by one placeholder, so ``0.3*sin(1.0*t)`` and
``c0*sin(c1*t)`` match):

- ``solved``: the selected equation is the law (``harness.core.symbolic``) and holds acc_0.01 in and out of domain;
- ``lost at selection``: an equation equivalent to the law is in the pool, another one was selected;
- ``wrong constant``: some equation holds every term of the law, none is equivalent (a frequency, a rate, an
  exponent is off; the term skeletons are right);
- ``unreachable``: the law needs an operator the harness's engine does not search (``abs``, ``tanh``);
- ``missing terms``: the rest; the table names each missing term and whether the model ever wrote it.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import sympy

import benchmarks
from harness.core.expression import ExpressionError, parse_expression
from harness.core.symbolic import task_symbolic_match
from harness.core.vocabulary import DEFAULT_OPERATORS

PLACEHOLDER = sympy.Symbol("C")
# sympy function class -> the plan operator that reaches it (what the engine must search for the term)
OPERATOR_OF = {sympy.sin: "sin", sympy.cos: "cos", sympy.exp: "exp", sympy.log: "log", sympy.Abs: "abs",
               sympy.tanh: "tanh", sympy.sinh: "sinh", sympy.cosh: "cosh", sympy.tan: "tan", sympy.atan: "atan"}


def skeleton(expr: sympy.Expr) -> sympy.Expr:
    """Numbers -> one placeholder, and a term's leading numeric factor dropped."""
    expr = sympy.sympify(expr)
    coeff, rest = expr.as_coeff_Mul()
    body = rest if coeff.is_Number else expr
    return body.replace(lambda e: e.is_Number and not e.is_Integer or (e.is_Integer and abs(e) > 3),
                        lambda e: PLACEHOLDER)


TINY = 1e-4  # numbers below this are the engine's leftovers (cos(1.4*t + 7e-6*v)): dropped before comparing


def terms(text: str, variables: list[str]) -> list[sympy.Expr]:
    try:
        expr = parse_expression(text, variables).sympy
    except (ExpressionError, ValueError, TypeError):
        return []
    expr = expr.xreplace({f: sympy.Integer(0) for f in expr.atoms(sympy.Float) if abs(float(f)) < TINY})
    expr = sympy.expand(expr, deep=False, mul=True, multinomial=False, power_exp=False, power_base=False,
                        log=False)
    return [skeleton(t) for t in sympy.Add.make_args(expr) if not t.is_Number]


def operators_needed(expr: sympy.Expr) -> set[str]:
    out = set()
    for node in sympy.preorder_traversal(expr):
        if isinstance(node, sympy.Function) and node.func in OPERATOR_OF:
            out.add(OPERATOR_OF[node.func])
        if isinstance(node, sympy.Pow) and not (node.exp.is_Integer and abs(node.exp) <= 3):
            out.add("pow" if node.exp not in (sympy.Rational(1, 2), -sympy.Rational(1, 2)) else "sqrt")
    return out


def nodes(run_dir: str | None) -> list[dict[str, Any]]:
    path = Path(run_dir or "") / "nodes.jsonl"
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def written_hypotheses(all_nodes: list[dict[str, Any]]) -> list[str]:
    out = []
    for node in all_nodes:
        output = (node.get("info") or {}).get("output") or {}
        out += [h.split("=", 1)[-1] if "=" in h and "==" not in h else h for h in output.get("hypotheses", []) or []]
    return out


def diagnose(task: Any, record: dict[str, Any], operators: list[str]) -> dict[str, Any]:
    variables = list(task.input_names)
    truth = task.ground_truth
    law_terms = terms(truth, variables)
    needed = operators_needed(parse_expression(truth, variables).sympy)
    all_nodes = nodes(record.get("run_dir"))
    pool = [c for n in all_nodes for c in (n.get("candidates") or [])] or list(record.get("pool") or [])
    pool.sort(key=lambda c: (c.get("metrics") or {}).get("valid", {}).get("nmse", float("inf")))
    found_by: dict[str, set[str]] = {str(t): set() for t in law_terms}
    for cand in pool:
        for t in terms(cand.get("equation", ""), variables):
            if str(t) in found_by:
                found_by[str(t)].add(cand.get("source", "?"))
    written = {str(t) for h in written_hypotheses(all_nodes) for t in terms(h, variables)}
    metrics = record.get("metrics") or {}
    acc = [float((metrics.get(s) or {}).get("acc_0.01", 0.0)) for s in ("test_id", "test_ood")]
    selected = record.get("equation") or ""
    complete = [c for c in pool if {str(t) for t in law_terms} <= {str(t) for t in terms(c.get("equation", ""),
                                                                                           variables)}]
    # the symbolic check costs seconds: the best few by validation error and those holding every term of the law
    equivalent = [c for c in pool[:5] + complete[:10] if _equivalent(task, c.get("equation", ""))]
    if _equivalent(task, selected):
        verdict = "solved" if min(acc) >= 1.0 else "solved (structure), acc_0.01 missed"
    elif equivalent:
        verdict = "lost at selection"
    elif complete:
        verdict = "wrong constant"
    elif needed - set(operators):
        verdict = f"unreachable ({', '.join(sorted(needed - set(operators)))})"
    else:
        verdict = "missing terms"
    missing = [t for t, src in found_by.items() if not src]
    return {"task": task.name, "seed": record.get("seed"), "verdict": verdict, "acc_0.01 ID/OOD": acc,
            "law": truth, "selected": selected[:160], "pool": len(pool),
            "terms found (by)": {t: sorted(src) for t, src in found_by.items() if src},
            "terms missing": missing, "missing terms the model wrote": [t for t in missing if t in written]}


def _equivalent(task: Any, equation: str) -> bool:
    if not equation:
        return False
    try:
        match = task_symbolic_match(task, equation)
    except Exception:  # noqa: BLE001 - a checker failure counts as "not the law"
        return False
    return bool(match and match.equivalent)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", nargs="+")
    parser.add_argument("--arm", default="harness", help="the arm (bench) or label (evals.db) to read; * = all")
    parser.add_argument("--markdown")
    parser.add_argument("--operators", nargs="*", default=list(DEFAULT_OPERATORS))
    parser.add_argument("--split", default="test", choices=("train", "test", "all"))
    parser.add_argument("--n-per-domain", type=int, default=3)
    parser.add_argument("--llm-sr", default="", help="the folder of the LLM-SR problems (their CSVs)")
    args = parser.parse_args(argv)
    records = []
    for path in args.results:  # bench_harness's results.jsonl, or an optimizer / rank_scales folder's evals.db
        if path.endswith(".db"):
            from optimize.cache import EvalCache

            cache = EvalCache(path)
            records += [{**r, "arm": r.get("label", "")} for r in cache.records()]
            cache.close()
        else:  # bench_harness: the harness arm's run folder is <out>/runs/<task>
            for line in Path(path).read_text().splitlines():
                if line.strip():
                    record = json.loads(line)
                    record.setdefault("run_dir", str(Path(path).parent / "runs" / record["task"]))
                    records.append(record)
    records = [r for r in records if args.arm in ("*", r.get("arm", "harness"))]
    names = sorted({r["task"] for r in records})
    tasks = {t.name: t for t in load(names, args.split, args.n_per_domain, args.llm_sr)}
    rows = [diagnose(tasks[r["task"]], r, args.operators) for r in records
            if r["task"] in tasks and tasks[r["task"]].ground_truth]
    lines = ["| task | seed | verdict | acc_0.01 ID / OOD | law's terms found (by) | missing (model wrote it?) |",
             "|---|---|---|---|---|---|"]
    for row in rows:
        found = "; ".join(f"`{t}` ({', '.join(s)})" for t, s in row["terms found (by)"].items()) or "none"
        missing = "; ".join(f"`{t}`" + (" (yes)" if t in row["missing terms the model wrote"] else " (no)")
                            for t in row["terms missing"]) or "none"
        acc = row["acc_0.01 ID/OOD"]
        lines.append(f"| {row['task']} | {row['seed']} | {row['verdict']} | {acc[0]:.0f} / {acc[1]:.0f} | {found} | "
                     f"{missing} |")
    text = "\n".join(lines) + "\n"
    print(text)
    if args.markdown:
        Path(args.markdown).write_text(text, encoding="utf-8")
    return 0


def load(names: list[str], split: str, n_per_domain: int, llm_sr: str) -> list[Any]:
    """The named tasks as ``scripts/bench_harness.py`` loads them: lsr_like's ``split``, the LLM-SR problems
    from their folder (with the laws of LLM-SR's two oscillators, ``benchmarks.sources.llm_sr``)."""
    out = []
    if any("_lsr_" in n for n in names):
        out += benchmarks.load_suite("lsr_like", split=split, n_per_domain=n_per_domain)
    if llm_sr and Path(llm_sr).is_dir() and any("_lsr_" not in n for n in names):
        out += benchmarks.load_suite("llm_sr", root=str(Path(llm_sr).resolve().parent))
    return [t for t in out if t.name in names]


if __name__ == "__main__":
    sys.exit(main())
