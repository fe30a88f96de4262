"""Selection rules compared on stored candidate pools: post hoc and exact (the final pick never changes a search).

    python scripts/compare_selection.py RUN_FOLDER [RUN_FOLDER ...] [--suite synthetic]
        [--option split=train --option n_per_domain=2 --option seed=0 --option max_rows=300]

Every solve folder under the given folders (``run.json`` + ``nodes.jsonl``: a harness solve, an optimizer
evaluation) is one pool. Its task is rebuilt from the suite and checked against ``run.json``; each candidate gets
the edge score (``harness.core.context.add_edge_scores``) where the pool lacks it; each rule picks one equation.
Prints mean acc_0.01 / acc_0.001 on test_id and test_ood per rule, over pools and over tasks, plus "any" (the
best candidate in the pool: what no rule can beat). Use it on *training* tasks to choose a harness's selection;
a table on held-out tasks only reports.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path
from typing import Any

import pandas as pd

import benchmarks
from harness.core.candidates import Candidate, dedupe, select
from harness.core.context import add_edge_scores

RULES = [("accuracy", 0.0), ("parsimony", 0.5), ("extrapolation", 0.5), ("extrapolation", 3.0),
         ("extrapolation", 9.0)]
FIGURES = [("test_id", "acc_0.01"), ("test_id", "acc_0.001"), ("test_ood", "acc_0.01"), ("test_ood", "acc_0.001")]


def solve_folders(roots: list[Path]) -> list[Path]:
    return sorted({p.parent for root in roots for p in root.rglob("run.json") if (p.parent / "nodes.jsonl").exists()})


def pool(folder: Path) -> list[Candidate]:
    cands = []
    for line in (folder / "nodes.jsonl").read_text(encoding="utf-8").splitlines():
        if line.strip():
            cands += [Candidate.from_record(c) for c in json.loads(line).get("candidates") or []]
    return dedupe(c for c in cands if math.isfinite(c.metric("valid")))


def figure(cand: Candidate | None, split: str, name: str) -> float:
    return float((cand.metrics.get(split) or {}).get(name) or 0.0) if cand else 0.0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folders", nargs="+", type=Path)
    parser.add_argument("--suite", default="synthetic")
    parser.add_argument("--option", action="append", default=[], help="suite option key=value (repeatable)")
    args = parser.parse_args(argv)

    options = dict(o.split("=", 1) for o in args.option)
    tasks = {t.name: t for t in benchmarks.load_suite(args.suite, **options)}
    rows: list[dict[str, Any]] = []
    skipped: list[str] = []
    t0 = time.perf_counter()
    for folder in solve_folders(args.folders):
        run = json.loads((folder / "run.json").read_text(encoding="utf-8"))
        meta = run.get("task") or {}
        task = tasks.get(meta.get("name"))
        if task is None or task.train.n != meta.get("n_train") or task.ground_truth != meta.get("ground_truth"):
            skipped.append(f"{folder}: task {meta.get('name')!r} not in the suite as given")
            continue
        cands = pool(folder)
        if not cands:
            continue
        add_edge_scores(cands, task, int((run.get("config") or {}).get("seed", 0)))
        picks = {f"{rule} {tol:g}" if tol else rule: select(cands, rule, tol) for rule, tol in RULES}
        for label, cand in picks.items():
            row = {"pool": str(folder), "task": task.name, "rule": label, "equation": cand.equation if cand else None}
            row.update({f"{n} {'ID' if s == 'test_id' else 'OOD'}": figure(cand, s, n) for s, n in FIGURES})
            rows.append(row)
        row = {"pool": str(folder), "task": task.name, "rule": "any (upper bound)", "equation": None}
        row.update({f"{n} {'ID' if s == 'test_id' else 'OOD'}": max(figure(c, s, n) for c in cands)
                    for s, n in FIGURES})
        rows.append(row)
    if not rows:
        print("no pools found", *skipped, sep="\n")
        return 1
    df = pd.DataFrame(rows)
    cols = [f"{n} {'ID' if s == 'test_id' else 'OOD'}" for s, n in FIGURES]
    order = list(dict.fromkeys(df["rule"]))
    by_pool = df.groupby("rule", sort=False)[cols].mean().reindex(order)
    by_pool.insert(0, "pools", df.groupby("rule", sort=False).size().reindex(order))
    by_task = df.groupby(["rule", "task"], sort=False)[cols].mean().groupby("rule", sort=False).mean().reindex(order)
    by_task.insert(0, "tasks", df.groupby("rule", sort=False)["task"].nunique().reindex(order))
    print(f"{df['pool'].nunique()} pools, {df['task'].nunique()} tasks, {time.perf_counter() - t0:.0f} s")
    print("\n### mean over pools\n\n" + by_pool.to_markdown(floatfmt=".3f"))
    print("\n### mean over tasks (each task's pools averaged first)\n\n" + by_task.to_markdown(floatfmt=".3f"))
    if skipped:
        print(f"\nskipped {len(skipped)} folders, e.g. {skipped[0]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
