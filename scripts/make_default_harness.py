"""Regenerate harness/data/default_harness.json from the one definition, ``workflows.harness.shipped_harness()``.

    python scripts/make_default_harness.py [--check]
    python scripts/make_default_harness.py --from outputs/optimize/<run>/harness.json
    python scripts/make_default_harness.py --from-runs <run folder> <run folder> ... [--margin 0.05] [--alpha 0.05]

Plain: freeze the definition (our prompts/*.md, SHIPPED_WORKFLOW, SRSettings' defaults, the embedded model) as it
is; run after editing a prompt. ``--check`` only compares (exit 1 when the file differs from the definition).
``--from``: make an optimizer output the shipped default - its prompts are written to workflows/prompts/*.md
(so the definition and the file stay one), its provenance is kept; refused when its workflow, engine, engine
settings, role agents or model differ from the definition's (change those in workflows/harness.py and
workflows/params.py first, with the figure in docs/decisions.md).
``--from-runs``: the optimizer's run folders (one per engine seed, the same trained harness or not): each run's
trained harness (its ``freeze.json``'s pick) against the shipped default on the run's held-out laws, paired on
(task, seed, split) by acc_0.01 (95 % of points), pooled over the runs, and tested for non-inferiority
(``optimize.paired.non_inferiority``: the lower bound of the mean difference, a bootstrap over tasks, above
``-margin``). At least two runs; all must have trained the same harness (else no single harness qualifies). A
qualifying harness is then shipped as ``--from`` does, its provenance naming the runs, their tasks, seeds and
executions; the verdict is printed either way.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from harness.app.artifact import DEFAULT_HARNESS_FILE, ArtifactError, FrozenHarness
from optimize.paired import NonInferiority, non_inferiority
from workflows.harness import shipped_harness
from workflows.roles import PROMPTS_DIR

FIELDS = ("prompts", "workflow", "backend", "sr_settings", "llm", "role_agents")


def held_out_differences(run: Path) -> tuple[dict[str, list[float]], dict[str, Any]]:
    """``{task: [trained minus default acc_0.01 per (seed, split)]}`` on a run's held-out laws, and what the run
    trained (its pick's digest, tasks, seeds, executions)."""
    freeze = json.loads((run / "freeze.json").read_text(encoding="utf-8"))
    picked = freeze.get("picked_stage")
    rows = freeze.get("rows") or {}
    mine = ((rows.get(picked) or {}).get("heldout") or {}).get("tasks") or {}
    theirs = ((rows.get("default") or {}).get("heldout") or {}).get("tasks") or {}
    diffs: dict[str, list[float]] = {}
    for task in sorted(set(mine) & set(theirs)):
        a, b = mine[task].get("per_seed") or {}, theirs[task].get("per_seed") or {}
        for seed in sorted(set(a) & set(b)):
            for key in ("acc_0.01_id", "acc_0.01_ood"):
                diffs.setdefault(task, []).append(float(a[seed].get(key) or 0.0) - float(b[seed].get(key) or 0.0))
    trained = FrozenHarness.load(run / "harness.json")
    return diffs, {"run": str(run), "picked_stage": picked, "picked_digest": (rows.get(picked) or {}).get("digest"),
                   "training_tasks": trained.provenance.get("training_tasks"),
                   "heldout_tasks": trained.provenance.get("heldout_tasks"), "seeds": trained.provenance.get("seeds"),
                   "solver_runs_cumulative": trained.provenance.get("solver_runs_cumulative")}


def from_runs(runs: list[Path], margin: float, alpha: float) -> tuple[NonInferiority, list[dict[str, Any]]]:
    pooled: dict[str, list[float]] = {}
    about = []
    for run in runs:
        diffs, info = held_out_differences(run)
        about.append(info)
        for task, values in diffs.items():
            pooled.setdefault(task, []).extend(values)
    return non_inferiority(pooled, margin, alpha), about


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare only; do not write")
    parser.add_argument("--from", dest="source", help="an optimizer's harness.json to ship as the default")
    parser.add_argument("--from-runs", nargs="+", type=Path, metavar="RUN",
                        help="optimizer run folders (one per engine seed): ship their trained harness when it is not "
                             "worse than the shipped default on their held-out laws")
    parser.add_argument("--margin", type=float, default=0.05, help="non-inferiority margin on mean acc_0.01 (0.05)")
    parser.add_argument("--alpha", type=float, default=0.05, help="one-sided level of the lower bound (0.05)")
    args = parser.parse_args(argv)
    if args.from_runs:
        verdict, about = from_runs(args.from_runs, args.margin, args.alpha)
        print(f"trained against the shipped default on the held-out laws: {verdict.summary()}")
        digests = {a["picked_digest"] for a in about}
        if len(args.from_runs) < 2 or len(digests) != 1:
            print(f"no single harness qualifies: {len(args.from_runs)} run(s) trained {len(digests)} harness(es) "
                  "(at least two runs of one trained harness are needed)")
            return 1
        if not verdict.non_inferior:
            print("not shipped: the trained harness is not shown to be no worse than the shipped default")
            return 1
        args.source = str(args.from_runs[0] / "harness.json")
        provenance_runs = {"shipped_from_runs": about, "non_inferiority": verdict.summary()}
    else:
        provenance_runs = {}
    if args.source:
        trained = FrozenHarness.load(args.source)
        definition = shipped_harness()
        differ = [k for k in FIELDS if k != "prompts" and getattr(trained, k) != getattr(definition, k)]
        if differ:
            print(f"refused: {args.source} differs from the shipped definition in {differ}; change the definition "
                  "(workflows/harness.py, workflows/params.py) first, with the figure in docs/decisions.md")
            return 1
        if provenance_runs:
            trained = trained.with_changes(provenance={**trained.provenance, **provenance_runs})
        for role, text in trained.prompts.items():
            (PROMPTS_DIR / f"{role}.md").write_text(text.strip() + "\n", encoding="utf-8")
        path = trained.save(DEFAULT_HARNESS_FILE)
        print(f"wrote {path} ({trained.digest}) and its prompts to {PROMPTS_DIR}")
        return 0
    fresh = FrozenHarness.build_default()
    if args.check:
        try:
            shipped = FrozenHarness.load(DEFAULT_HARNESS_FILE)
        except ArtifactError as exc:
            print(f"stale: {exc}")
            return 1
        same = all(getattr(shipped, k) == getattr(fresh, k) for k in FIELDS)
        print("up to date" if same else f"stale: {DEFAULT_HARNESS_FILE} differs from the definition; rerun without "
              "--check")
        return 0 if same else 1
    path = fresh.save(DEFAULT_HARNESS_FILE)
    print(f"wrote {path} ({fresh.digest})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
