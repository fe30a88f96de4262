"""Several ``bench_harness.py`` runs (one per seed, same tasks) pooled: is the difference between arms larger than
the noise between seeds?

    python scripts/bench_seeds.py runs/bench_harness_seed0 runs/bench_harness_seed1 runs/bench_harness_seed2
        [--suite lsr_like] [--a harness] [--b engine]

One SR run on one task is noisy (a time-bounded search on a shared CPU; the LLM samples), so one seed can move a
figure by a task either way. Prints, per arm and figure, the mean over seeds with the lowest and highest seed, and
the paired comparison of arm A against arm B over every (task, seed) both finished: acc_0.01 OOD wins / ties /
losses, how often A's OOD NMSE is lower, and a two-sided sign test on that NMSE (ties dropped).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd
from bench_tables import FIGURES, metric
from scipy.stats import binomtest

from benchmarks.runner import load_records


def load(folders: list[Path], suite: str) -> pd.DataFrame:
    rows = []
    for folder in folders:
        for rec in load_records(folder / "results.jsonl"):
            if rec.get("suite") != suite:
                continue
            row = {"run": folder.name, "seed": rec.get("seed", folder.name), "arm": rec["arm"], "task": rec["task"]}
            for split, name in FIGURES + [("test_ood", "nmse")]:
                row[f"{name} {'ID' if split == 'test_id' else 'OOD'}"] = metric(rec, split, name)
            rows.append(row)
    return pd.DataFrame(rows)


def seed_table(df: pd.DataFrame) -> str:
    figures = [f"{name} {'ID' if split == 'test_id' else 'OOD'}" for split, name in FIGURES]
    per_seed = df.groupby(["arm", "run"])[figures].apply(lambda g: g.fillna(0).mean())
    rows = []
    for arm, part in per_seed.groupby(level="arm"):
        row = {"arm": arm, "seeds": len(part), "tasks": int(df[df["arm"] == arm].groupby("run").size().min())}
        for col in figures:
            row[col] = f"{part[col].mean():.3f} [{part[col].min():.3f}, {part[col].max():.3f}]"
        rows.append(row)
    return pd.DataFrame(rows).to_markdown(index=False)


def paired(df: pd.DataFrame, a: str, b: str) -> tuple[str, str]:
    wide = df.pivot_table(index=["run", "task"], columns="arm", values=["acc_0.01 OOD", "nmse OOD"], aggfunc="first")
    wide = wide.dropna(subset=[("acc_0.01 OOD", a), ("acc_0.01 OOD", b)])
    acc_a, acc_b = wide[("acc_0.01 OOD", a)], wide[("acc_0.01 OOD", b)]
    nmse_a, nmse_b = wide[("nmse OOD", a)].fillna(float("inf")), wide[("nmse OOD", b)].fillna(float("inf"))
    lower, higher = int((nmse_a < nmse_b).sum()), int((nmse_a > nmse_b).sum())
    p = binomtest(lower, lower + higher).pvalue if lower + higher else float("nan")
    summary = (f"- {a} against {b} over {len(wide)} (task, seed) pairs: acc_0.01 OOD wins / ties / losses "
               f"{int((acc_a > acc_b).sum())} / {int((acc_a == acc_b).sum())} / {int((acc_a < acc_b).sum())}; "
               f"OOD NMSE lower on {lower}, higher on {higher} (sign test p = {p:.3g})")
    per_task = pd.DataFrame({f"{a} acc_0.01 OOD": acc_a.groupby(level="task").sum(),
                             f"{b} acc_0.01 OOD": acc_b.groupby(level="task").sum(),
                             f"seeds {a} NMSE lower": (nmse_a < nmse_b).groupby(level="task").sum(),
                             "seeds": acc_a.groupby(level="task").size()})
    return summary, per_task.to_markdown()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", type=Path, help="bench_harness.py output folders, one per seed")
    parser.add_argument("--suite", default="lsr_like", help="the records' suite: lsr_like, synthetic, llm_sr, ...")
    parser.add_argument("--a", default="harness")
    parser.add_argument("--b", default="engine")
    args = parser.parse_args(argv)
    df = load(args.runs, args.suite)
    if df.empty:
        print(f"no {args.suite} records in {[str(r) for r in args.runs]}")
        return 1
    print(f"### {args.suite}: mean accuracy over seeds [lowest seed, highest seed]\n\n{seed_table(df)}\n")
    summary, per_task = paired(df, args.a, args.b)
    print(f"### {args.a} against {args.b}, paired by task and seed\n\n{summary}\n\n{per_task}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
