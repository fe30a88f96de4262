"""The report's plots (matplotlib, Agg): the stage curve, stage 2's history, stage 3's refinement."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from optimize.report_format import CURVE, stage_title

def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_stage_scores(rows: dict[str, Any], path: Path, metric: str = "acc_0.01",
                      freeze: dict[str, Any] | None = None) -> Path | None:
    """The stage curve: on the held-out tasks, acc_0.01 in both readings (95 % of points, every point; mean of ID
    and OOD) after each stage, the shipped default beside it; without held-out rows, the training score."""
    stages = [s for s in CURVE if s in rows]
    held = [s for s in stages if (rows[s].get("heldout") or {}).get("acc_0.01_mean") is not None]
    if not stages:
        return None
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7.0, 3.8))
    width = 0.38
    if held:
        series = (("acc_0.01_mean", "acc_0.01, 95 % of points", "tab:blue"),
                  ("acc_all_0.01_mean", "acc_0.01, every point", "tab:orange"))
        labels = [stage_title(s, freeze or {}).replace(" (", "\n(").replace(": ", ":\n") for s in held]
        for k, (key, label, color) in enumerate(series):
            values = [rows[s]["heldout"].get(key) or 0.0 for s in held]
            ax.bar([i + (k - 0.5) * width for i in range(len(held))], values, width, label=label, color=color)
        ax.set_xticks(range(len(held)), labels, fontsize=7)
        ax.set_ylabel("held-out tasks, mean of ID and OOD")
    else:
        values = [((rows[s].get("train") or {}).get("score") or 0.0) for s in stages]
        ax.bar(range(len(stages)), values, width, label=f"training tasks, {metric}", color="tab:blue")
        ax.set_xticks(range(len(stages)), [stage_title(s, freeze or {}).replace(": ", ":\n") for s in stages], fontsize=7)
        ax.set_ylabel(f"mean {metric}")
    if held or metric.startswith("acc"):  # shares; log_nmse runs to 16
        ax.set_ylim(0, 1.05)
    ax.set_title("Score after each stage")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_history(trials: list[dict[str, Any]], path: Path, metric: str = "acc_0.01") -> Path | None:
    done = [t for t in trials if t.get("state") == "COMPLETE" and t.get("value") is not None]
    if not done:
        return None
    plt = _plt()
    from matplotlib.ticker import MaxNLocator

    done.sort(key=lambda t: t["number"])
    xs = [t["number"] for t in done]
    ys = [t["value"] for t in done]
    best, run = [], -math.inf
    for y in ys:
        run = max(run, y)
        best.append(run)
    fig, ax = plt.subplots(figsize=(6.5, 3.4))
    ax.scatter(xs, ys, s=18, label="trial objective", color="tab:blue")
    ax.step(xs, best, where="post", color="tab:red", label="best so far")
    ax.set_xlabel("trial")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_ylabel(f"gain over the start in {metric} − penalty × LLM calls")
    ax.set_title("Stage 2 optimization history")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_refinement(steps: list[dict[str, Any]], start: float | None, path: Path,
                    metric: str = "acc_0.01") -> Path | None:
    tried = [s for s in steps if s.get("child_holdout") is not None or s.get("child_minibatch") is not None]
    if not steps or start is None:
        return None
    plt = _plt()
    from matplotlib.ticker import MaxNLocator

    fig, ax = plt.subplots(figsize=(6.5, 3.4))
    best, run = [], start
    for s in steps:
        if s.get("accepted"):
            run = max(run, s.get("child_holdout") or run)
        best.append(run)
    ax.step([s["step"] for s in steps], best, where="post", color="tab:green", label="best held-out-slice mean")
    xs = [s["step"] for s in tried if s.get("child_holdout") is not None]
    ys = [s["child_holdout"] for s in tried if s.get("child_holdout") is not None]
    if xs:
        ax.scatter(xs, ys, color="tab:gray", s=18, label="child (held-out slice)")
    ax.set_xlabel("refinement step")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_ylabel(f"mean {metric}")
    if metric.startswith("acc"):  # shares; log_nmse runs to 16
        ax.set_ylim(-0.05, 1.05)
    ax.set_title("Stage 3 reflective refinement")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
