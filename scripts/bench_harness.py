"""Does LLM guidance help? The default harness against its own SR engine run alone, side by side, in one run.

    python scripts/bench_harness.py [--out runs/bench_harness] [--suite lsr_like] [--n-per-domain 3] [--split test]
        [--option key=value ...] [--llm-sr DATA/llm-sr | --llm-sr ''] [--harness default] [--ablation]
        [--tasks NAME ...] [--llm KEY=VALUE ...] [--sr KEY=VALUE ...] [--prompt ROLE=FILE ...]
        [--task anonymize=true] [--reuse engine=runs/<earlier>/results.jsonl]   # the engine arm does not change

Arms (each task, same seed):
- ``harness``: the frozen harness solves the task (its LLM, workflow, SR settings, selection).
- ``engine``: the same engine run alone, unguided, once, for the harness's total SR seconds
  (``expected_solver_runs x time_budget``), with the engine's own selection (lowest error on a random
  validation split) — what a user gets without the harness.
- ``engine+sel`` (``--ablation``): the engine alone with the harness's selection rule and validation split, so
  the table shows how much of a difference comes from selection and how much from the LLM's guidance.
- ``engine-restarts`` (``--ablation``): the engine alone, unguided, as many runs as the harness makes, each the
  harness's ``time_budget``, pooled: same SR seconds and run count as the harness without the model, so a gain
  from restarts is told apart from a gain from guidance.
- ``engine+combine`` (``--ablation``): the engine arm's own pool completed by term combination
  (``harness.core.combine``), derived from the engine record without another run (exact: combination never
  changes a search), so the table tells the combination tool's share from the model's terms' share.

Overrides (``--llm``, ``--sr``, ``--prompt``, each repeatable) change the loaded harness before the run, so a
channel or a stronger model is one command: ``--sr residual_seconds=30``, ``--prompt planner=my_planner.md``,
``--llm provider=openai --llm base_url=http://host:8000/v1 --llm model=Qwen/Qwen2.5-7B-Instruct``. Values are
read as YAML (numbers, booleans, lists, mappings). The changed harness gets its own digest; every record carries
it, and an ``--out`` folder holding another harness's records is refused (its rerun would skip the tasks).

``--task anonymize=true`` solves every task anonymized (``harness.core.anonymize``: inputs ``x1..xn``, target
``y``, no descriptions, task name, domain or metadata in any prompt), every arm alike: what the model brings from
the names against what the data shows. Records keep the task's own name (so seeds pool); their ``equation`` is in
the anonymized names, ``equation_original`` in the task's. An ``--out`` folder holds one mode only.

Tasks: a suite (``--suite``: ``lsr_like`` by default, the LSR-Synth-grade generator; ``synthetic`` for the easier
suite of the earlier figures; ``lsr_transform``; any suite with ``--option``), its ``--split`` (``test`` = the
held-out laws, never tuned on), and the four LLM-SR problems, whose NMSE is also compared with PySR's and
LLM-SR's published figures. Every record carries symbolic accuracy (``harness.core.symbolic``) where the task
has a ground truth: the summary's ``SA`` column.
Every finished (arm, task) is appended to ``<out>/results.jsonl`` and skipped on a rerun, so a killed benchmark
resumes. Prints markdown tables; writes them to ``<out>/tables.md``. One seed moves a figure by about a task
either way: run it with ``--seed 0``, ``1``, ``2`` into separate folders and pool them with
``scripts/bench_seeds.py``.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
import traceback
from pathlib import Path
from typing import Any

import yaml

import benchmarks
from benchmarks.runner import load_records
from harness.app.artifact import FrozenHarness
from harness.app.progress import Progress, format_seconds, print_summary
from harness.core.anonymize import anonymize
from harness.core.candidates import Candidate, dedupe, select
from harness.core.combine import combine_terms
from harness.core.context import AgentContext, FitSettings, add_edge_scores
from harness.core.resources import usable_cpus
from harness.core.symbolic import task_symbolic_match
from harness.llm.config import LLMConfig
from harness.llm.cpu_kernels import cpu_description
from harness.sr.backends import run_search
from workflows.params import SRSettings, engine_seed, expected_solver_runs

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the sibling bench_tables, also when imported by path
from bench_tables import PUBLISHED, arm_summary, metric, tables  # noqa: E402

def parse_overrides(pairs: list[str], what: str) -> dict[str, Any]:
    """``KEY=VALUE`` pairs, each value read as YAML (``30`` a number, ``[a, b]`` a list, text stays text)."""
    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise SystemExit(f"--{what} takes KEY=VALUE, got {pair!r}")
        try:
            out[key.strip()] = yaml.safe_load(value) if value.strip() else ""
        except yaml.YAMLError as exc:
            raise SystemExit(f"--{what} {key}: cannot read {value!r}: {exc}") from None
    return out


def with_overrides(harness: FrozenHarness, *, llm: list[str] = (), sr: list[str] = (),
                   prompts: list[str] = ()) -> FrozenHarness:
    """The harness with LLM settings, SR settings and role prompts (``ROLE=FILE``) replaced, validated as any
    harness is (an unknown SR setting or role is an error here, not a silently ignored flag)."""
    changes: dict[str, Any] = {}
    if llm:
        given = parse_overrides(list(llm), "llm")
        unknown = sorted(set(given) - set(LLMConfig.model_fields))
        if unknown:  # llm_config drops keys it does not know; a typo must not run the old model silently
            raise SystemExit(f"--llm {unknown[0]}: not an LLM setting; known: {', '.join(LLMConfig.model_fields)}")
        changes["llm"] = {**harness.llm, **given}
    if sr:
        changes["sr_settings"] = harness.sr_settings.updated(**parse_overrides(list(sr), "sr"))
    if prompts:
        texts = dict(harness.prompts)
        for role, path in parse_overrides(list(prompts), "prompt").items():
            texts[role] = Path(str(path)).read_text(encoding="utf-8")
        changes["prompts"] = texts
    if not changes:
        return harness
    harness.llm_config(changes.get("llm"))  # an LLM setting the client does not know fails here, before any task
    return harness.with_changes(**changes)


def check_out_folder(records: list[dict[str, Any]], digest: str, out: Path, anonymized: bool = False) -> None:
    """One harness and one task mode per results file: a rerun skips finished (arm, task) pairs, so another
    harness's (or the other mode's) records there would be reported as this one's. Records taken with ``--reuse``
    (an engine arm from another harness's run) are not this run's harness and do not count."""
    other = sorted({r["harness"] for r in records
                    if r.get("harness") and r["harness"] != digest and not r.get("reused_from")})
    if other:
        raise SystemExit(f"{out} holds records of harness {other[0]} (this run's is {digest}); "
                         "use another --out for a changed harness")
    if any(bool(r.get("anonymized")) != anonymized for r in records):
        raise SystemExit(f"{out} holds records of {'named' if anonymized else 'anonymized'} tasks; use another "
                         "--out for the other mode")


def task_options(pairs: list[str]) -> bool:
    """``--task anonymize=true``: whether tasks are anonymized (the one task option)."""
    given = parse_overrides(list(pairs), "task")
    unknown = sorted(set(given) - {"anonymize"})
    if unknown:
        raise SystemExit(f"--task {unknown[0]}: not a task option; known: anonymize")
    value = given.get("anonymize", False)
    if not isinstance(value, bool):
        raise SystemExit(f"--task anonymize takes true or false, got {value!r}")
    return value


def pool_record(cands: list[Candidate], task: Any, seed: int) -> list[dict[str, Any]]:
    """The candidate pool, compact (equation, complexity, metrics with the edge score): selection rules can be
    compared afterwards, exactly (the final pick never changes a search)."""
    cands = dedupe(cands)
    add_edge_scores(cands, task, seed)  # the harness scores them itself only under "extrapolation" selection
    keep = ("nmse", "acc_0.01", "acc_0.001", "acc_all_0.01")
    return [{"equation": c.equation, "complexity": c.complexity, "source": c.source,
             **({"terms_from": c.info["terms_from"]} if c.info.get("terms_from") else {}),
             "metrics": {k: {m: v.get(m) for m in keep} for k, v in c.metrics.items()}} for c in cands]


def run_harness(harness: FrozenHarness, task: Any, seed: int, run_dir: Path) -> dict[str, Any]:
    t0 = time.perf_counter()
    sol = harness.solve(task, seed=seed, run_dir=run_dir)
    seconds = round(time.perf_counter() - t0, 2)
    pool = []
    for line in (run_dir / "nodes.jsonl").read_text(encoding="utf-8").splitlines():
        pool += [Candidate.from_record(c) for c in json.loads(line).get("candidates", [])]
    return {"equation": sol.equation, "metrics": sol.metrics, "llm_calls": sol.llm_calls,
            "solver_runs": sol.solver_runs, "seconds": seconds, "pool": pool_record(pool, task, seed)}


def run_engine(harness: FrozenHarness, task: Any, seed: int, seconds: float, *, runs: int = 1,
               harness_selection: bool = False) -> dict[str, Any]:
    """Unguided engine runs with the harness's floor plan (operators, length, population), ``seconds`` each,
    pooled. ``runs`` > 1 (the engine-restarts arm): the engine seeds of the harness's unguided run and of its
    first branch's runs (``workflows.params.engine_seed``), so the arm is the harness's runs without the model."""
    settings = harness.sr_settings
    fit = settings.fit_settings() if harness_selection else FitSettings()
    ctx = AgentContext(task=task, seed=seed, fit=fit)
    t0, pool, errors = time.perf_counter(), [], []
    for i in range(runs):
        run_seed = seed if i == 0 else engine_seed(seed, 0, i - 1, after_unguided=True)
        plan = settings.floor().model_copy(update={"time_budget": seconds, "seed": run_seed})
        outcome = run_search(plan, ctx, harness.backend, limits={"max_time": seconds})
        pool += outcome.candidates
        errors += [outcome.error] if outcome.error else []
    rule = settings.selection if harness_selection else "accuracy"
    best = select(pool, rule, settings.selection_tolerance)
    return {"equation": best.equation if best else None, "metrics": best.metrics if best else {},
            "llm_calls": 0, "solver_runs": runs, "seconds": round(time.perf_counter() - t0, 2),
            "error": "; ".join(errors) or None, "pool": pool_record(pool, task, seed)}


def combine_engine(record: dict[str, Any], task: Any, seed: int) -> dict[str, Any]:
    """The engine arm's pool plus the combinations of its terms (no model terms), selected by lowest validation
    error, as the harness does; the pool's metrics come from the same validation split (seed)."""
    t0 = time.perf_counter()
    pool = [Candidate.from_record({"expression": p["equation"], "params": [], **p}) for p in record.get("pool") or []]
    found, _ = combine_terms(pool, AgentContext(task=task, seed=seed))
    best = select(pool + found, "accuracy")
    return {"equation": best.equation if best else None, "metrics": best.metrics if best else {}, "llm_calls": 0,
            "solver_runs": 1, "seconds": round(float(record.get("seconds") or 0) + time.perf_counter() - t0, 2),
            "derived_from": "engine", "pool": pool_record(found, task, seed) + (record.get("pool") or [])}


def suite_options(args: argparse.Namespace) -> dict[str, Any]:
    options = dict(item.split("=", 1) for item in args.option)
    spec = benchmarks.SUITES[args.suite].options
    if "n_per_domain" in spec and args.n_per_domain is not None:
        options.setdefault("n_per_domain", args.n_per_domain)
    if "split" in spec:
        options.setdefault("split", args.split)
    return options


def load_tasks(args: argparse.Namespace) -> list[Any]:
    tasks = []
    if args.n_per_domain != 0:
        tasks += benchmarks.load_suite(args.suite, **suite_options(args))
    if args.llm_sr and Path(args.llm_sr).is_dir():  # the loader takes the data root holding llm-sr/
        tasks += benchmarks.load_suite("llm_sr", root=str(Path(args.llm_sr).resolve().parent))
    if args.sample:  # a seeded sample of the suite's tasks (the same for every --seed, so seeds pool)
        suite = [t for t in tasks if t.name not in PUBLISHED]
        keep = {t.name for t in random.Random(0).sample(suite, min(args.sample, len(suite)))}
        tasks = [t for t in tasks if t.name in PUBLISHED or t.name in keep]
    if args.tasks:
        tasks = [t for t in tasks if t.name in set(args.tasks)]
    return tasks


def run_arm(arm: str, task: Any, args: argparse.Namespace, harness: FrozenHarness, settings: SRSettings,
            sr_seconds: float, results: Path, out: Path, anonymized: bool) -> dict[str, Any]:
    """One (arm, task) record; a failure is a recorded miss, never dropped. Anonymized: every arm solves the same
    anonymized task, and the record keeps the task's own name beside the equation read back in its names."""
    hidden = anonymize(task) if anonymized else None
    seen = hidden.task if hidden else task
    t0 = time.perf_counter()
    try:
        if arm == "harness":
            rec = run_harness(harness, seen, args.seed, out / "runs" / task.name)
        elif arm == "engine+combine":
            engine = [r for r in load_records(results) if r["arm"] == "engine" and r["task"] == task.name]
            if not engine:
                raise RuntimeError("engine+combine is derived from the engine arm; run that arm too")
            rec = combine_engine(engine[-1], seen, args.seed)
        elif arm == "engine-restarts":
            rec = run_engine(harness, seen, args.seed, settings.time_budget,
                             runs=expected_solver_runs(harness.workflow, settings))
        else:
            rec = run_engine(harness, seen, args.seed, sr_seconds, harness_selection=arm == "engine+sel")
    except Exception as exc:  # recorded as a miss, never dropped
        rec = {"equation": None, "metrics": {}, "llm_calls": None, "error": f"{type(exc).__name__}: {exc}",
               "traceback": traceback.format_exc()[-2000:], "seconds": round(time.perf_counter() - t0, 2)}
    match = task_symbolic_match(seen, rec.get("equation"))
    suite = "llm_sr" if task.name in PUBLISHED else args.suite
    rec.update(arm=arm, harness=harness.digest[:19], task=task.name, suite=suite, domain=task.domain,
               ground_truth=task.ground_truth, seed=args.seed, split=task.metadata.get("split", args.split),
               symbolic=match.to_record() if match else None)
    if hidden is not None:
        rec.update(anonymized=True, equation_original=hidden.restore(rec.get("equation")))
    return rec


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="runs/bench_harness")
    parser.add_argument("--harness", default="default", help="default, initial (HarnessSR's start) or a harness file")
    parser.add_argument("--suite", default="lsr_like", choices=sorted(benchmarks.SUITES))
    parser.add_argument("--option", action="append", default=[], metavar="KEY=VALUE", help="suite option (repeatable)")
    parser.add_argument("--n-per-domain", type=int, default=None,
                        help="tasks per domain (default: the suite's own: lsr_like 3, lsr_synth_laws all of the split); "
                             "0 = no suite tasks (LLM-SR problems only)")
    parser.add_argument("--split", default="test", choices=("train", "validation", "test", "heldout", "all"),
                        help="the suite's split (lsr_like: train | test; lsr_synth_laws: train | validation | heldout)")
    parser.add_argument("--llm-sr", default=str(Path(__file__).resolve().parents[1].parent / "shared/data/llm-sr"))
    parser.add_argument("--tasks", nargs="*")
    parser.add_argument("--sample", type=int, default=0, help="a seeded sample of this many suite tasks (0 = all)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--ablation", action="store_true", help="also run the engine with the harness's selection, the engine as restarts (the harness's run count), and derive engine+combine from the engine arm")
    parser.add_argument("--arms", nargs="*", help="run only these arms (harness, engine, engine+sel, engine-restarts, engine+combine)")
    parser.add_argument("--llm", action="append", default=[], metavar="KEY=VALUE",
                        help="LLM setting of the harness (repeatable), e.g. provider=openai, base_url=..., model=...")
    parser.add_argument("--sr", action="append", default=[], metavar="KEY=VALUE",
                        help="SR setting of the harness (repeatable), e.g. residual_seconds=30")
    parser.add_argument("--prompt", action="append", default=[], metavar="ROLE=FILE",
                        help="a role's prompt from a file (repeatable), e.g. planner=planner.md")
    parser.add_argument("--task", action="append", default=[], metavar="KEY=VALUE",
                        help="how tasks are shown: anonymize=true (inputs x1..xn, target y, no names or descriptions)")
    parser.add_argument("--reuse", nargs="*", default=[], metavar="ARM=RESULTS",
                        help="take ARM's records from an earlier results.jsonl (same tasks, engine settings, seed and "
                             "machine) instead of running it again; they are marked reused_from")
    args = parser.parse_args(argv)

    harness = FrozenHarness.resolve(args.harness)
    harness = with_overrides(harness, llm=args.llm, sr=args.sr, prompts=args.prompt)
    anonymized = task_options(args.task)
    settings = harness.sr_settings
    sr_seconds = expected_solver_runs(harness.workflow, settings) * settings.time_budget
    arms = ["harness", "engine"] + (["engine+sel", "engine-restarts", "engine+combine"] if args.ablation else [])
    if args.arms:
        arms = [a for a in arms if a in args.arms]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    results = out / "results.jsonl"
    check_out_folder(load_records(results), harness.digest[:19], out, anonymized)
    done = {(r["arm"], r["task"]) for r in load_records(results)}
    tasks = load_tasks(args)
    for spec in args.reuse:
        arm_name, _, source = spec.partition("=")
        names = {t.name for t in tasks}
        with results.open("a", encoding="utf-8") as fh:
            for rec in load_records(Path(source)):
                if rec["arm"] == arm_name and rec["task"] in names and (arm_name, rec["task"]) not in done:
                    fh.write(json.dumps({**rec, "reused_from": source}, default=float) + "\n")
                    done.add((arm_name, rec["task"]))
    print(f"harness {harness.digest[:19]} w={harness.workflow.as_tuple()} llm={harness.llm} "
          f"SR seconds per task {sr_seconds:g}; {len(tasks)} tasks; arms {arms}"
          + ("; tasks anonymized" if anonymized else ""), flush=True)
    pairs = [(task, arm) for task in tasks for arm in arms]
    progress = Progress("bench_harness")
    progress.stage(f"{len(tasks)} tasks x {len(arms)} arms", total=len(pairs),
                   done=sum((arm, task.name) in done for task, arm in pairs))
    machine = f"{cpu_description()['model']}, {usable_cpus()} usable cores"
    try:
        for task, arm in pairs:
            if (arm, task.name) in done:
                continue
            progress.item(f"{task.name} / {arm}")
            rec = {**run_arm(arm, task, args, harness, settings, sr_seconds, results, out, anonymized),
                   "machine": machine}  # a time-bound solve's outcome depends on it
            with results.open("a", encoding="utf-8") as fh:
                fh.write(json.dumps(rec, default=float) + "\n")
            progress.advance(note=f"{task.name:24s} {arm:10s} acc0.01 ID/OOD {metric(rec, 'test_id', 'acc_0.01'):.0f}/"
                                  f"{metric(rec, 'test_ood', 'acc_0.01'):.0f} nmse ID/OOD "
                                  f"{metric(rec, 'test_id', 'nmse'):.3g}/{metric(rec, 'test_ood', 'nmse'):.3g} "
                                  f"SA {int(bool((rec.get('symbolic') or {}).get('equivalent')))} "
                                  f"{rec['seconds']:.0f}s  {str(rec.get('equation'))[:90]}")
    finally:
        progress.close()
    records = [r for r in load_records(results) if r["arm"] in arms and r["task"] in {t.name for t in tasks}]
    text = tables(records, arms)
    (out / "tables.md").write_text(text + "\n", encoding="utf-8")
    print("\n" + text)
    print_summary(f"{args.suite} ({args.split} split), seed {args.seed}" + (", anonymized" if anonymized else ""),
                  arm_summary(records, arms),
                  notes=[f"acc_0.01: at least 95 % of the test points within 1 %; every point: all of them "
                         f"(docs/results.md). {format_seconds(progress.elapsed)}; tables: {out / 'tables.md'}"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
