"""What does the model know? The Planner's hypotheses on each task, fitted, with no SR run: minutes, not hours.

    python scripts/probe_planner.py [--suite lsr_like] [--split train] [--sample 8] [--seed 0] [--samples 2]
        [--variant NAME=PLANNER_PROMPT.md ...] [--harness default] [--llm KEY=VALUE ...] [--out runs/probe_planner]

For each task and prompt (the harness's own Planner prompt, plus every ``--variant``): ``--samples`` Planner calls
made as the harness makes its first one (task card, prompt, output schema, the harness's LLM), every hypothesis
fitted by our evaluator with its constants free (as ``SRSteps.screen_hypotheses`` fits them), its validation NMSE
and whether it is the task's law (symbolic match). The summary says, per prompt, on what share of tasks the best
hypothesis fits within a validation NMSE of 1e-1, 1e-2 and 1e-4, how many exact laws the model wrote, and the
seconds per call: how much a model or a prompt can bring before the engine runs (issue "Guidance that finds
what the engine cannot", item 4: run it with ``--llm provider=openai --llm base_url=... --llm model=...``).
Every call is appended to ``<out>/probe.jsonl`` and skipped on a rerun. Decide on ``--split train`` only.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the sibling script's overrides and task loading
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import benchmarks  # noqa: E402
from bench_harness import parse_overrides, with_overrides  # noqa: E402
from harness.app.artifact import FrozenHarness  # noqa: E402
from harness.core.context import AgentContext, evaluate_candidate  # noqa: E402
from harness.core.expression import ExpressionError  # noqa: E402
from harness.core.symbolic import task_symbolic_match  # noqa: E402
from harness.llm.factory import make_llm  # noqa: E402
from harness.llm.json_output import parse_json_output  # noqa: E402
from workflows.params import SRSettings  # noqa: E402
from workflows.prompting import build_messages  # noqa: E402
from workflows.roles import PlanOutput, response_format  # noqa: E402

THRESHOLDS = (1e-1, 1e-2, 1e-4)


def fit_hypotheses(texts: list[str], task: Any, ctx: AgentContext) -> list[dict[str, Any]]:
    """Each hypothesis fitted (constants free): its validation NMSE and symbolic match, or why it failed."""
    out = []
    for text in dict.fromkeys(texts):
        try:
            cand = evaluate_candidate(text, ctx, source="hypothesis", constants_as_params=True)
        except ExpressionError as exc:
            out.append({"hypothesis": text, "error": str(exc)[:160]})
            continue
        valid = cand.metric("valid")
        match = task_symbolic_match(task, cand.equation) if math.isfinite(valid) else None
        out.append({"hypothesis": text, "valid_nmse": valid if math.isfinite(valid) else None,
                    "exact": bool(match and match.equivalent)})
    return out


def probe(llm: Any, prompt: str, task: Any, seed: int, sample: int, settings: SRSettings) -> dict[str, Any]:
    """One Planner call on ``task`` as the harness's first one, its hypotheses fitted."""
    messages = build_messages("planner", prompt, task, mode="initial", note="You plan branch 1 of 1.")
    t0 = time.perf_counter()
    try:
        reply = llm.complete(messages, response_format=response_format("planner"), seed=seed * 1000 + 100 + sample)[0]
        text, error = reply.text or "", None
    except Exception as exc:  # a dead server or a timeout is a recorded miss, not a crash
        text, error = "", f"{type(exc).__name__}: {exc}"[:300]
    seconds = time.perf_counter() - t0
    plan, parse_error = parse_json_output(text, PlanOutput) if text else (None, None)
    ctx = AgentContext(task=task, seed=seed, fit=settings.fit_settings())
    fits = fit_hypotheses(list(plan.hypotheses), task, ctx) if plan is not None else []
    errors = [f["valid_nmse"] for f in fits if f.get("valid_nmse") is not None]
    return {"seconds": round(seconds, 2), "error": error or parse_error, "fits": fits,
            "best_valid_nmse": min(errors) if errors else None, "exact": any(f.get("exact") for f in fits)}


def summary(records: list[dict[str, Any]]) -> pd.DataFrame:
    """Per prompt: share of tasks whose best hypothesis (over the samples) fits within each threshold."""
    rows = []
    for name, group in pd.DataFrame(records).groupby("prompt", sort=False):
        per_task = group.groupby("task").agg(
            best=("best_valid_nmse", lambda s: min((v for v in s if v is not None and not pd.isna(v)),
                                                   default=math.inf)),
            exact=("exact", "max"))
        row: dict[str, Any] = {"prompt": name, "tasks": len(per_task)}
        for tau in THRESHOLDS:
            row[f"best < {tau:g}"] = float((per_task["best"] < tau).mean())
        finite = [v for v in per_task["best"] if math.isfinite(v)]
        row["median best NMSE"] = statistics.median(finite) if finite else math.inf
        row["exact laws"] = int(per_task["exact"].sum())
        row["failed calls"] = int(group["error"].notna().sum())
        row["s/call"] = round(float(group["seconds"].mean()), 1)
        rows.append(row)
    return pd.DataFrame(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="runs/probe_planner")
    parser.add_argument("--harness", default="default")
    parser.add_argument("--suite", default="lsr_like", choices=sorted(benchmarks.SUITES))
    parser.add_argument("--option", action="append", default=[], metavar="KEY=VALUE", help="suite option")
    parser.add_argument("--split", default="train", choices=("train", "test", "all"))
    parser.add_argument("--n-per-domain", type=int, default=3)
    parser.add_argument("--sample", type=int, default=0, help="a seeded sample of this many tasks (0 = all)")
    parser.add_argument("--tasks", nargs="*")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--samples", type=int, default=1, help="Planner calls per task and prompt")
    parser.add_argument("--variant", action="append", default=[], metavar="NAME=FILE",
                        help="another Planner prompt to probe beside the harness's own (repeatable)")
    parser.add_argument("--llm", action="append", default=[], metavar="KEY=VALUE", help="LLM setting (repeatable)")
    args = parser.parse_args(argv)

    harness = FrozenHarness.resolve(args.harness)
    harness = with_overrides(harness, llm=args.llm)
    prompts = {"harness": harness.prompts["planner"]}
    for name, path in parse_overrides(args.variant, "variant").items():
        prompts[name] = Path(str(path)).read_text(encoding="utf-8")
    options = {**parse_overrides(args.option, "option"), "split": args.split, "n_per_domain": args.n_per_domain}
    tasks = benchmarks.load_suite(args.suite, **options)
    if args.sample:  # the same seeded sample as scripts/bench_harness.py --sample
        keep = {t.name for t in random.Random(0).sample(tasks, min(args.sample, len(tasks)))}
        tasks = [t for t in tasks if t.name in keep]
    if args.tasks:
        tasks = [t for t in tasks if t.name in set(args.tasks)]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "probe.jsonl"
    records = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()] if path.exists() else []
    done = {(r["llm"], r["prompt_digest"], r["task"], r["sample"]) for r in records}
    llm_key = json.dumps(harness.llm, sort_keys=True)
    settings = harness.sr_settings
    print(f"llm={harness.llm}; {len(tasks)} tasks x {len(prompts)} prompts x {args.samples} samples", flush=True)
    llm = make_llm(harness.llm_config())
    try:
        for task in tasks:
            for name, prompt in prompts.items():
                digest = hashlib.sha256(prompt.encode("utf-8")).hexdigest()[:12]
                for sample in range(args.samples):
                    if (llm_key, digest, task.name, sample) in done:
                        continue
                    rec = probe(llm, prompt, task, args.seed, sample, settings)
                    rec.update(task=task.name, prompt=name, prompt_digest=digest, sample=sample, llm=llm_key)
                    with path.open("a", encoding="utf-8") as fh:
                        fh.write(json.dumps(rec, default=float) + "\n")
                    records.append(rec)
                    best = rec["best_valid_nmse"]
                    print(f"{task.name:24s} {name:10s} #{sample} {rec['seconds']:5.1f}s best valid NMSE "
                          f"{'none' if best is None else f'{best:.3g}':<10s} exact {int(rec['exact'])}  "
                          + "; ".join(f["hypothesis"] for f in rec["fits"])[:120]
                          + (f"  [{rec['error'][:80]}]" if rec["error"] else ""), flush=True)
    finally:
        llm.close()
    names = {t.name for t in tasks}
    mine = [r for r in records if r["llm"] == llm_key and r["task"] in names and r["prompt"] in prompts]
    table = summary(mine).to_markdown(index=False, floatfmt=".3g") if mine else "(no records)"
    (out / "summary.md").write_text(table + "\n", encoding="utf-8")
    print("\n" + table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
