"""Same tasks, same seeds, two code trees: do they find the same equations and run the same plans?

    python scripts/compare_solves.py both --base /tmp/base --new . [--out /tmp/compare] [--exact]
    python scripts/compare_solves.py record OUT.json      # under the PYTHONPATH of the tree to record
    python scripts/compare_solves.py compare A.json B.json

Why: a refactoring of the path from a harness's settings to the engine must not change what a solve finds. Each
tree (a ``git worktree`` of the old commit, the working tree) records deterministic solves in its own process
(``PYTHONPATH`` = that tree, run from a neutral folder so the engine's worker processes import the same tree):
the shipped harness and two variants (a narrow floor whose extra operators a plan may add; two branches with
repair, discussion and synthesis) driven by the scripted test model on benchmark tasks, with generation-capped,
single-threaded Operon runs (time never binds), and ``python -m harness agent`` with a scripted tool-calling
model. Recorded per solve: the best equation, every SR run's admitted plan and plan changes, and the pool's
equations. ``compare`` lists every difference; exit code 1 when there is one.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

SEEDS = (0, 1)
CAPS = {"generations": 6, "population_size": 100, "time_budget": 30.0}  # generations bind, never time
VARIANTS: dict[str, dict[str, Any]] = {
    "shipped": {},
    "narrow_floor": {"sr_settings": {"operators": ["add", "sub", "mul", "div"], "max_extra_operators": 2,
                                     "max_features": 1}, "llm": "greedy"},
    "repair_synth": {"workflow": (1, 2, 1, 1, 1)},
}
AGENT_VARS_ENV = "COMPARE_SOLVES_VARS"
EXACT_ENV = "COMPARE_SOLVES_EXACT"
EXACT_SECONDS = 60.0


def _no_time_limits() -> None:
    """``--exact``: engines in-process, constant fits and term combination never cut short by the clock, and one
    string-hash seed, so neither a loaded machine nor set order can change a fitted constant (otherwise two runs
    of one tree can differ in their pools: a fit that runs out of time stops early)."""
    import dataclasses
    import functools

    import harness.sr.operon_backend as operon
    import workflows.sr_steps as sr_steps
    from workflows.params import SRSettings

    os.environ["HARNESS_SR_IN_PROCESS"] = "1"
    fit_settings = SRSettings.fit_settings
    SRSettings.fit_settings = lambda self: dataclasses.replace(fit_settings(self), max_seconds=EXACT_SECONDS)
    for module in list(sys.modules.values()):
        if getattr(module, "__name__", "").startswith("harness.sr.") and hasattr(module, "REFIT_SECONDS"):
            module.REFIT_SECONDS = EXACT_SECONDS
    operon.REFIT_SECONDS = EXACT_SECONDS
    sr_steps.CombineSettings = functools.partial(sr_steps.CombineSettings, max_seconds=EXACT_SECONDS)


def _tasks() -> list[Any]:
    import benchmarks

    tasks = benchmarks.load_suite("synthetic", max_rows=300)[:2]
    tasks += benchmarks.load_suite("lsr_like", n_per_domain=1, max_rows=300)[:1]
    return tasks


def _fingerprint(task: Any) -> str:
    h = hashlib.sha1(repr((task.name, list(task.input_names), task.target_name)).encode())
    for split in task.splits().values():
        h.update(split.X.tobytes())
        h.update(split.y.tobytes())
    return h.hexdigest()[:16]


def _solve_record(result: Any) -> dict[str, Any]:
    sr_nodes = [n for n in result.state.nodes if str(n.kind) == "sr"]
    runs = sorted(({"step": n.info.get("step"), "branch": n.branch, "plan": n.info.get("plan"),
                    "plan_changes": n.info.get("plan_changes"), "error": n.error} for n in sr_nodes),
                  key=lambda r: json.dumps(r, sort_keys=True, default=str))
    return {"best": result.best.equation if result.best else None, "status": str(result.status),
            "llm_calls": result.llm_calls, "solver_runs": result.solver_runs, "sr_runs": runs,
            "pool": sorted({c.equation for c in result.candidates})}


def greedy_plan(messages: list[dict[str, Any]], **request: Any) -> str | dict[str, Any]:
    """The scripted roles, but a plan asks for more operators than a narrow floor allows and for a feature."""
    from tests.doubles import detect_role, scripted_role_output

    reply = scripted_role_output(messages, **request)
    if detect_role(messages, request.get("response_format")) not in ("planner", "repairer", "synthesizer"):
        return reply
    plan = json.loads(reply)
    names = [n for n in re.findall(r"c\d+ \* (\w+)", " ".join(plan["hypotheses"]))] or ["x"]
    plan.update(operators=["sin", "exp", "tanh", "cosh"], features=[f"{names[0]}*{names[-1]}"])
    return json.dumps(plan)


def agent_reply(messages: list[dict[str, Any]], **request: Any) -> dict[str, Any] | str:
    """The scripted agent: a plan that asks for too much (clipped to the limits), then an evaluation, then done."""
    names = os.environ.get(AGENT_VARS_ENV, "x").split(",")
    turn = sum(1 for m in messages if m.get("role") == "assistant")
    linear = " + ".join(f"c{i}*{n}" for i, n in enumerate(names))
    if turn == 0:
        args = {"operators": ["sin", "exp", "tanh"], "max_length": 80, "time_budget": 500, "generations": 6,
                "population_size": 80, "seeds": [linear], "features": [f"{names[0]}**2"]}
        return {"tool_calls": [{"name": "run_sr_search", "arguments": args}]}
    if turn == 1:
        return {"tool_calls": [{"name": "evaluate_expression", "arguments": {"expression": linear}}]}
    return "done"


def _agent_record(task: Any, folder: Path) -> dict[str, Any]:
    from harness.app.cli import main

    csv = folder / f"{task.name}.csv"
    X, y = task.train.X, task.train.y
    lines = [",".join([*task.input_names, task.target_name])]
    lines += [",".join(repr(float(v)) for v in [*row, target]) for row, target in zip(X, y)]
    csv.write_text("\n".join(lines) + "\n")
    os.environ[AGENT_VARS_ENV] = ",".join(task.input_names)
    out = folder / f"agent-{task.name}"
    exact = [f"fit.max_seconds={EXACT_SECONDS}"] if os.environ.get(EXACT_ENV) else []
    rc = main(["agent", f"data={csv}", f"target={task.target_name}", f"out={out}", "agent.L=3", *exact,
               "llm.provider=tests.doubles.ScriptedLLM", "llm.model=scripted",
               "+llm.extra.fn=compare_solves:agent_reply", "backend.generations=6"])
    nodes = [json.loads(line) for line in (out / "nodes.jsonl").read_text().splitlines() if line.strip()]
    calls = [{"tool": r["tool_name"], "ok": r["ok"], "plan": (r.get("result") or {}).get("plan"),
              "plan_changes": (r.get("result") or {}).get("plan_changes"), "error": r.get("error")}
             for n in nodes for r in n.get("tool_results", [])]
    result = json.loads((out / "result.json").read_text())
    best = (result.get("best") or {}).get("equation")
    return {"rc": rc, "best": best, "calls": calls,
            "pool": sorted({c["equation"] for n in nodes for c in n.get("candidates", [])})}


def record(path: Path) -> None:
    """Run every solve under the code tree on ``sys.path`` and write what they found to ``path``."""
    from tests.doubles import ScriptedLLM, scripted_role_output
    from workflows.harness import run_harness, shipped_harness

    os.environ.setdefault("OMP_NUM_THREADS", "1")
    if os.environ.get(EXACT_ENV):
        _no_time_limits()
    out: dict[str, Any] = {"code": str(Path(sys.modules["workflows"].__file__).parents[1]), "solves": {}}
    with tempfile.TemporaryDirectory() as tmp:
        for task in _tasks():
            out["solves"][f"{task.name}/data"] = _fingerprint(task)
            for name, variant in VARIANTS.items():
                harness = shipped_harness()
                if "workflow" in variant:
                    from workflows.params import WorkflowParams

                    harness = harness.with_workflow(WorkflowParams.from_tuple(variant["workflow"]))
                if "sr_settings" in variant:
                    harness = harness.with_sr_settings(**variant["sr_settings"])
                reply = greedy_plan if variant.get("llm") == "greedy" else scripted_role_output
                for seed in SEEDS:
                    result = run_harness(harness, task, ScriptedLLM(fn=reply), seed=seed,
                                         sr_settings=CAPS, max_workers=1,
                                         run_dir=Path(tmp) / f"{task.name}-{name}-{seed}")
                    out["solves"][f"{task.name}/{name}/seed{seed}"] = _solve_record(result)
                    print(f"{task.name} {name} seed {seed}: {out['solves'][f'{task.name}/{name}/seed{seed}']['best']}",
                          flush=True)
            out["solves"][f"{task.name}/agent"] = _agent_record(task, Path(tmp))
    path.write_text(json.dumps(out, indent=1, sort_keys=True, default=str))


def compare(a: Path, b: Path) -> int:
    """Print every solve whose record differs; 1 when any does."""
    left, right = json.loads(a.read_text())["solves"], json.loads(b.read_text())["solves"]
    differ = 0
    for key in sorted(set(left) | set(right)):
        if left.get(key) == right.get(key):
            continue
        differ += 1
        print(f"DIFFERS {key}")
        la, rb = left.get(key), right.get(key)
        if isinstance(la, dict) and isinstance(rb, dict):
            for field in sorted(set(la) | set(rb)):
                if la.get(field) != rb.get(field):
                    print(f"  {field}:\n    {json.dumps(la.get(field), default=str)[:600]}\n"
                          f"    {json.dumps(rb.get(field), default=str)[:600]}")
    solves = [k for k in left if not k.endswith("/data")]
    print(f"{len(solves)} solves compared, {differ} differ")
    return 1 if differ else 0


def both(base: Path, new: Path, out: Path, exact: bool = False) -> int:
    """Record under each tree (its own process, neutral working folder), then compare."""
    out.mkdir(parents=True, exist_ok=True)
    here = Path(__file__).resolve().parent
    for label, tree in (("base", base), ("new", new)):
        env = {**os.environ, "PYTHONPATH": f"{tree.resolve()}{os.pathsep}{here}"}
        if exact:  # also one string-hash order: sets of equation texts are iterated in it (term libraries)
            env.update({EXACT_ENV: "1", "PYTHONHASHSEED": "0"})
        subprocess.run([sys.executable, str(here / "compare_solves.py"), "record", str(out / f"{label}.json")],
                       cwd=out, env=env, check=True)
    return compare(out / "base.json", out / "new.json")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("record").add_argument("out", type=Path)
    cmp = sub.add_parser("compare")
    cmp.add_argument("a", type=Path)
    cmp.add_argument("b", type=Path)
    run = sub.add_parser("both")
    run.add_argument("--base", type=Path, required=True)
    run.add_argument("--new", type=Path, default=Path("."))
    run.add_argument("--out", type=Path, default=Path(tempfile.gettempdir()) / "compare_solves")
    run.add_argument("--exact", action="store_true", help="no clock in fits or engines (see _no_time_limits)")
    args = parser.parse_args()
    if args.command == "record":
        record(args.out)
        return 0
    if args.command == "compare":
        return compare(args.a, args.b)
    return both(args.base, args.new, args.out, exact=args.exact)


if __name__ == "__main__":
    sys.exit(main())
