"""Close, not exact: why a solve passes acc_0.01 but fails acc_0.001 or "every point" (issue 55's diagnosis).

    python scripts/records/diagnose_precision.py [--matrix docs/data/outcome_matrix.jsonl] [--arm shipped]
        [--markdown out.md]

Reads the outcome matrix (``scripts/outcome_matrix.py``: lsr_like *training* laws, two seeds; each record holds the
selected equation and its test metrics), rebuilds each task as the matrix loaded it, and for every (solve, test
split) in the precision gap - acc_0.01 passed (95 % of points within 1 %) and acc_0.001 or every point within 1 %
failed - tries, in order, what ``harness.core.precision`` can do to the selected equation, each fitted on the
task's training rows and judged on that test split:

- ``constants off``: the same skeleton refitted by least squares from more starts closes the gap;
- ``a tail the fit ignores``: only the refit on relative error closes it (the target spans decades or settles);
- ``a spurious extra term``: pruning a term closes it;
- ``constants near simple values``: snapping them closes it;
- ``missing term(s)``: none closes it, and the selected equation's terms are a subset of the law's (as skeletons);
- ``a different form that approximates``: none closes it, and it holds a term the law does not.
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # scripts/: diagnose_laws' term skeletons

import benchmarks  # noqa: E402
from diagnose_laws import terms  # noqa: E402
from harness.core.context import AgentContext, evaluate_candidate  # noqa: E402
from harness.core.expression import ExpressionError  # noqa: E402
from harness.core.precision import prune_terms, refit_relative, snap_constants  # noqa: E402

SPLITS = ("test_id", "test_ood")


def load_matrix(path: str, arm: str) -> tuple[dict[str, Any], list[dict[str, Any]], dict[str, Any]]:
    """The outcome matrix's header, the solves of ``arm``, and its tasks rebuilt as the matrix loaded them."""
    lines = Path(path).read_text(encoding="utf-8").splitlines()
    header = json.loads(lines[0])["header"]
    solves = [r for r in (json.loads(line) for line in lines[1:] if line.strip()) if r.get("arm") == arm]
    tasks = {t.name: t for t in benchmarks.load_suite("lsr_like", split="train", n_per_domain=header["per_domain"],
                                                      seed=0, max_rows=1000)}
    return header, solves, tasks


def in_gap(metrics: dict[str, float]) -> bool:
    return metrics.get("acc_0.01", 0) >= 1 and (metrics.get("acc_0.001", 0) < 1 or metrics.get("acc_all_0.01", 0) < 1)


def closes(cand: Any, split: str) -> bool:
    """Every point within 1 % and 95 % within 0.1 % on the split: the gap is closed."""
    if cand is None:
        return False
    m = cand.metrics.get(split, {})
    return m.get("acc_0.001", 0) >= 1 and m.get("acc_all_0.01", 0) >= 1


def reason(task: Any, equation: str, split: str, seed: int) -> str:
    ctx = AgentContext(task, seed=seed)
    try:
        current = evaluate_candidate(equation, ctx, source="selected", constants_as_params=True)
    except ExpressionError as exc:
        return f"unparseable ({exc})"
    more = copy.copy(ctx)
    more.fit = replace(ctx.fit, n_starts=16)
    if closes(evaluate_candidate(current.equation, more, source="refit", constants_as_params=True), split):
        return "constants off"
    relative = refit_relative(current, ctx, n_starts=16)
    if closes(relative, split):
        return "a tail the fit ignores"
    start = relative if relative is not None else current
    if closes(prune_terms(start, ctx), split):
        return "a spurious extra term"
    if closes(snap_constants(start, ctx), split):
        return "constants near simple values"
    law = {str(t) for t in terms(task.ground_truth, list(task.input_names))}
    found = {str(t) for t in terms(current.equation, list(task.input_names))}
    return "missing term(s)" if found <= law else "a different form that approximates"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--matrix", default="docs/data/outcome_matrix.jsonl")
    parser.add_argument("--arm", default="shipped", help="the matrix arm whose solves are diagnosed")
    parser.add_argument("--markdown", default=None, help="also write the tables to this file")
    args = parser.parse_args(argv)
    header, solves, tasks = load_matrix(args.matrix, args.arm)
    verdicts: list[dict[str, Any]] = []
    for record in solves:
        for split in SPLITS:
            if not in_gap((record.get("metrics") or {}).get(split, {})):
                continue
            verdict = reason(tasks[record["task"]], record["equation"], split, int(record["seed"]))
            verdicts.append({"task": record["task"], "seed": record["seed"], "split": split, "reason": verdict})
            print(f"{record['task']} s{record['seed']} {split}: {verdict}", flush=True)
    counts = Counter(v["reason"] for v in verdicts)
    passed = sum(1 for r in solves for s in SPLITS if (r.get("metrics") or {}).get(s, {}).get("acc_0.01", 0) >= 1)
    out = [f"Arm `{args.arm}` of `{args.matrix}` ({header['command']}): {len(solves)} solves x 2 test splits; "
           f"{passed} pass acc_0.01 (95 %), {len(verdicts)} of them fail acc_0.001 or every point.", "",
           "| reason | (solve, split) pairs |", "|---|---|"]
    out += [f"| {name} | {n} |" for name, n in counts.most_common()]
    out += ["", "| task | seed | split | reason |", "|---|---|---|---|"]
    out += [f"| {v['task']} | {v['seed']} | {v['split']} | {v['reason']} |" for v in verdicts]
    text = "\n".join(out) + "\n"
    print(text)
    if args.markdown:
        Path(args.markdown).write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
