"""Choose the laws of the ``lsr_like`` suite: seeded compositions of each domain's term library that are solvable,
non-trivial, and not solved by the engine alone in a short run.

    python scripts/curate_lsr_like.py [--candidates 32] [--keep 8] [--seconds 10 60] [--workers 2]
        [--out runs/curate_lsr_like] [--law DOMAIN:TERM,TERM,... ...]

For every domain and half of the synthetic-term library (train / test), ``--candidates`` compositions
(``benchmarks.sources.lsr_like.candidate_laws``: one or two known terms + one or two synthetic terms) are drawn
and built at seed 0 with the suite's load-time checks (integration, recoverability, term weights, cubic
polynomial); a law that cannot be built at five other seeds too is "fragile" and dropped. Each survivor is run through the engine alone (the default harness's floor plan, Operon, one run),
first for the shortest of ``--seconds``, then the survivors for the next; a law the engine solves in any of them
(acc_0.01 in domain) is trivial and dropped - "a draw the engine alone solves in seconds is not a hard task"
(the benchmark then gives the engine 120 s on other constants and another initial state); where the longest
filter leaves a (domain, half) no law, the survivors of the longest filter that left one stay. The first ``--keep`` laws left per (domain, half) are printed as the
``LAWS`` literal of ``benchmarks/sources/lsr_like.py``, train and test laws alternating, with a table of what
was dropped and why. Every finished candidate is appended to ``<out>/results.jsonl`` and skipped on a rerun.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from benchmarks.runner import load_records  # noqa: E402
from benchmarks.sources import lsr_like  # noqa: E402
from harness.core.task import TaskError  # noqa: E402


def check(domain: str, half: str, position: int, terms: tuple[str, ...], seconds: float) -> dict[str, Any]:
    """One engine run of ``seconds`` on the candidate's instance (or why the candidate cannot be built)."""
    from bench_harness import run_engine  # scripts/bench_harness.py: the engine arm of the benchmark

    from harness.app.artifact import FrozenHarness
    from harness.core.symbolic import task_symbolic_match

    rec: dict[str, Any] = {"domain": domain, "half": half, "position": position, "terms": list(terms),
                           "filter_seconds": seconds}
    name = f"{domain}_{half}_candidate_{position:02d}"
    try:
        task = lsr_like.make_task(domain, terms, name, 0, salt=(list(lsr_like.DOMAIN_SPECS).index(domain), 1000 + position))
    except TaskError as exc:
        return {**rec, "verdict": "unsolvable", "reason": str(exc)[-300:]}
    t0 = time.perf_counter()
    engine = run_engine(FrozenHarness.default(), task, 0, seconds)
    match = task_symbolic_match(task, engine.get("equation"))
    m = engine.get("metrics") or {}
    rec.update(truth=task.ground_truth, equation=engine.get("equation"), seconds=round(time.perf_counter() - t0, 1),
               acc_id=(m.get("test_id") or {}).get("acc_0.01"), acc_ood=(m.get("test_ood") or {}).get("acc_0.01"),
               nmse_id=(m.get("test_id") or {}).get("nmse"), symbolic=bool(match and match.equivalent))
    rec["verdict"] = "trivial" if rec["acc_id"] == 1.0 else "kept"
    return rec


ROBUST_SEEDS = (1, 2, 7, 1000, 1001)


def robust(domain: str, terms: tuple[str, ...]) -> bool:
    """The law builds (every load-time check passes within the attempts) at other seeds too: a suite can be
    loaded with any seed without a law failing."""
    for seed in ROBUST_SEEDS:
        try:
            lsr_like.make_task(domain, terms, "robustness", seed, salt=(list(lsr_like.DOMAIN_SPECS).index(domain),))
        except TaskError:
            return False
    return True


def verdicts(records: list[dict[str, Any]]) -> dict[tuple, dict[str, Any]]:
    """Per candidate (domain, half, terms): its position and verdict over every filter run recorded so far."""
    out: dict[tuple, dict[str, Any]] = {}
    for r in sorted(records, key=lambda r: r.get("filter_seconds", 10.0)):
        key = (r["domain"], r["half"], tuple(r["terms"]))
        if key in out and out[key]["verdict"] != "kept":
            continue
        out[key] = {**r, "verdict": r["verdict"] if r["verdict"] != "trivial" else
                    f"trivial ({r.get('filter_seconds', 10.0):g} s)"}
    return out


def written_laws(specs: list[str]) -> list[tuple[str, str, int, tuple[str, ...]]]:
    """(domain, half, position, terms) of laws written as ``DOMAIN:TERM,TERM,...``; the half follows the synthetic
    terms (a TaskError for an unknown domain or term, or terms of both halves)."""
    out = []
    for i, spec in enumerate(specs):
        domain, _, keys = spec.partition(":")
        domain = lsr_like.get_domain(domain).key
        terms = tuple(k.strip() for k in keys.split(",") if k.strip())
        out.append((domain, lsr_like.law_split(domain, terms), i, terms))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--candidates", type=int, default=32)
    parser.add_argument("--keep", type=int, default=8)
    parser.add_argument("--seconds", type=float, nargs="+", default=[10.0, 60.0])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--out", default="runs/curate_lsr_like")
    parser.add_argument("--law", action="append", default=[], metavar="DOMAIN:TERM,TERM,...",
                        help="filter these compositions instead of the seeded draws (repeatable; the half follows "
                             "the synthetic terms), e.g. phys_osc:harmonic,heavy_damping,soft_spring")
    args = parser.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    results = out / "results.jsonl"
    if args.law:
        candidates = written_laws(args.law)
    else:
        candidates = [(domain, half, i, law.terms) for domain in lsr_like.DOMAIN_SPECS for half in ("train", "test")
                      for i, law in enumerate(lsr_like.candidate_laws(domain, half, args.candidates, seed=0))]
    for seconds in sorted(args.seconds):
        records = load_records(results)
        ran = {(r["domain"], r["half"], tuple(r["terms"]), float(r.get("filter_seconds", 10.0))) for r in records}
        state = verdicts(records)
        jobs = [(d, h, i, t, seconds) for d, h, i, t in candidates if (d, h, t, seconds) not in ran
                and state.get((d, h, t), {}).get("verdict", "kept") == "kept"]
        print(f"{seconds:g} s: {len(jobs)} candidates to run", flush=True)
        with ProcessPoolExecutor(max_workers=args.workers) as pool:
            for rec in pool.map(check, *zip(*jobs)) if jobs else []:
                with results.open("a", encoding="utf-8") as fh:
                    fh.write(json.dumps(rec, default=float) + "\n")
                print(f"{rec['domain']:15s} {rec['half']:5s} {seconds:4g}s {rec['verdict']:10s} acc ID/OOD "
                      f"{rec.get('acc_id')}/{rec.get('acc_ood')} {rec['terms']}  "
                      f"{str(rec.get('equation') or rec.get('reason'))[:80]}", flush=True)
    wanted = {(d, h, t) for d, h, _, t in candidates}
    final = {k: v for k, v in verdicts(load_records(results)).items() if k in wanted}
    for (domain, _, terms), rec in final.items():
        if rec["verdict"] == "kept" and not robust(domain, terms):
            rec["verdict"] = "fragile"
    # A domain keeps at least one law per half: where the longest filter drops every law, the laws that survived
    # the longest filter that left one stay (stated in the table as "kept (<seconds> s filter)").
    stages = sorted(args.seconds)
    for domain in lsr_like.DOMAIN_SPECS:
        for half in ("train", "test"):
            group = [r for (d, h, _), r in final.items() if d == domain and h == half]
            if any(r["verdict"] == "kept" for r in group):
                continue
            for k in range(len(stages) - 1, 0, -1):
                lenient = [r for r in group if r["verdict"] == f"trivial ({stages[k]:g} s)"]
                if lenient:
                    for r in lenient:
                        if robust(domain, tuple(r["terms"])):
                            r["verdict"] = "kept"
                            r["kept_by"] = f"{stages[k - 1]:g} s filter"
                    break
    records = list(final.values())
    print("\nLAWS: dict[str, tuple[Law, ...]] = {")
    for domain in lsr_like.DOMAIN_SPECS:
        kept = {half: sorted((r for r in records if r["domain"] == domain and r["half"] == half
                              and r["verdict"] == "kept"), key=lambda r: r["position"])[: args.keep]
                for half in ("train", "test")}
        print(f'    "{domain}": (')
        order = [r for pair in itertools.zip_longest(kept["train"], kept["test"]) for r in pair if r is not None]
        for r in order:  # train and test laws alternate while both last
            print(f"        Law({tuple(r['terms'])!r}, {r['half']!r}),")
        print("    ),")
    print("}")
    labels = ["unsolvable", "fragile"] + [f"trivial ({s:g} s)" for s in sorted(args.seconds)] + ["kept"]
    print("\n| domain | half | candidates | " + " | ".join(labels) + " |\n|" + "---|" * (len(labels) + 3))
    for domain in lsr_like.DOMAIN_SPECS:
        for half in ("train", "test"):
            rs = [r for r in records if r["domain"] == domain and r["half"] == half]
            lenient = {r["kept_by"] for r in rs if r.get("kept_by")}
            print(f"| {domain} | {half} | {len(rs)} | " + " | ".join(str(sum(r["verdict"] == v for r in rs))
                                                             for v in labels)
                  + (f" (by the {', '.join(lenient)}: no law survived the longest)" if lenient else "") + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
