"""Is one training evaluation repeatable, and how much engine work fits a preset's training seconds?

    python scripts/calibrate_work.py [--preset quick] [--tasks 8] [--seeds 0 1] [--out runs/calibrate_work]
        [--rate R] [--harness initial default]

The optimizer's training evaluations were time-bound SR runs (3 s in quick, 15 s in small): on a shared CPU one
(harness, task, seed) then has many outcomes, and a race reads that noise as wins and losses. This script
evaluates the same harnesses on the same (task, seed) pairs twice, exactly as the preset's stages do (its
training scale, ``stop_at_exact``, a fresh run folder and model cache each time), first bounded by seconds, then
bounded by work (``optimize.work_rate``: generations per second of the run's share, the seconds a guard), and
prints side by side:

- the spread of the two passes' differences per pair (ties, mean and largest |difference| of the preset's metric,
  equations that differ);
- the calibrated rate: the harmonic mean over the time-bound SR runs of generations per second of their share,
  so that a work-bound run's mean seconds match the time-bound ones (``--rate`` skips the calibration);
- the mean seconds per evaluation of each pass and the work-bound runs that reached their seconds guard.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

REPO = Path(__file__).resolve().parents[1]


def compose(preset: str, overrides: list[str]) -> Any:
    from hydra import compose as hydra_compose, initialize_config_dir

    from optimize.__main__ import register_config_bases

    register_config_bases()
    with initialize_config_dir(config_dir=str(REPO / "harness" / "conf"), version_base="1.3"):
        return hydra_compose(config_name="optimize", overrides=[f"optimize={preset}", *overrides])


def context(cfg: Any, run_dir: Path, work_rate: float | None) -> Any:
    from optimize.context import build_context
    from optimize.settings import OptimizeSettings

    data = OmegaConf.to_container(cfg.optimize, resolve=True)
    data["work_rate"] = work_rate
    settings = OptimizeSettings.model_validate(data)
    plain = lambda node: OmegaConf.to_container(node, resolve=True)  # noqa: E731
    return build_context(run_dir, settings, llm_config=plain(cfg.llm), backend_config=plain(cfg.backend),
                         benchmark_config=plain(cfg.benchmark), seed=int(cfg.seed))


def one_pass(cfg: Any, folder: Path, harnesses: list[str], seeds: list[int], work_rate: float | None
             ) -> dict[tuple[str, str, int], dict[str, Any]]:
    """Every harness on every (training task, seed), at the preset's training scale: score, equation, seconds, and
    per SR run its generations and nominal seconds."""
    ctx = context(cfg, folder, work_rate)
    specs = {"initial": ctx.base, "default": ctx.default}
    out = {}
    for name in harnesses:
        summary = ctx.evaluator.evaluate(specs[name], ctx.tasks.train, seeds, stage="calibrate", label=name)
        for rec in summary.records:
            runs = []
            if rec.run_dir and (Path(rec.run_dir) / "nodes.jsonl").is_file():
                for line in (Path(rec.run_dir) / "nodes.jsonl").read_text(encoding="utf-8").splitlines():
                    node = json.loads(line)
                    if node.get("kind") == "sr":
                        engine, plan = node["info"].get("engine") or {}, node["info"].get("plan") or {}
                        if engine.get("generations") is not None and plan.get("time_budget"):
                            runs.append((int(engine["generations"]), float(plan["time_budget"])))
            out[(name, rec.task, rec.seed)] = {"score": rec.score, "equation": rec.equation, "seconds": rec.seconds,
                                               "runs": runs, "guard_hits": rec.guard_hits}
    return out


def spread(a: dict, b: dict) -> dict[str, Any]:
    keys = sorted(set(a) & set(b))
    diffs = [a[k]["score"] - b[k]["score"] for k in keys]
    return {"pairs": len(keys), "ties": sum(d == 0 for d in diffs),
            "same_equation": sum(a[k]["equation"] == b[k]["equation"] for k in keys),
            "mean_abs": statistics.mean(abs(d) for d in diffs) if diffs else math.nan,
            "max_abs": max((abs(d) for d in diffs), default=math.nan)}


def rate_of(passes: list[dict], seconds: float) -> float:
    """Generations per nominal second, harmonic mean over the time-bound runs of ``seconds`` (so the mean seconds
    of a run of G = rate x seconds generations match the time-bound runs' mean)."""
    rates = [g / t for p in passes for v in p.values() for g, t in v["runs"] if g > 0 and abs(t - seconds) < 1e-6]
    return len(rates) / sum(1.0 / r for r in rates)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="quick")
    parser.add_argument("--tasks", type=int, default=8, help="training tasks (x seeds = pairs)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--harness", nargs="+", default=["initial", "default"], choices=["initial", "default"])
    parser.add_argument("--rate", type=float, help="skip the calibration: this many generations per second")
    parser.add_argument("--out", type=Path, default=Path("runs/calibrate_work"))
    parser.add_argument("override", nargs="*", help="Hydra overrides (llm=..., backend.x=...)")
    args = parser.parse_args(argv)
    cfg = compose(args.preset, [f"optimize.tasks.n_train={args.tasks}", *args.override])
    seconds = 60.0 * float(cfg.optimize.train_time_scale)  # the shipped SR seconds, scaled
    lines = [f"preset {args.preset}: training SR runs of {seconds:g} s, {args.tasks} tasks x seeds {args.seeds}, "
             f"harnesses {args.harness}"]
    timed = [one_pass(cfg, args.out / f"seconds_{i}", args.harness, args.seeds, None) for i in (1, 2)]
    rate = args.rate or rate_of(timed, seconds)
    lines.append(f"work rate: {rate:.3f} generations per second ({round(rate * seconds)} generations per "
                 f"{seconds:g} s run)" + ("" if args.rate else ", calibrated on the time-bound runs"))
    worked = [one_pass(cfg, args.out / f"work_{i}", args.harness, args.seeds, rate) for i in (1, 2)]
    lines.append("| bound | pairs | exact ties | same equation | mean abs difference | largest | mean s per "
                 "evaluation | guard hits |")
    lines.append("|---|---|---|---|---|---|---|---|")
    for label, (a, b) in (("seconds", timed), ("work", worked)):
        s = spread(a, b)
        mean_s = statistics.mean(v["seconds"] for p in (a, b) for v in p.values())
        hits = sum(v["guard_hits"] for p in (a, b) for v in p.values())
        lines.append(f"| {label} | {s['pairs']} | {s['ties']} | {s['same_equation']} | {s['mean_abs']:.3f} | "
                     f"{s['max_abs']:.3f} | {mean_s:.1f} | {hits} |")
    text = "\n".join(lines)
    print(text)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "summary.md").write_text(text + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
