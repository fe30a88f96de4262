"""``python -m harness solve``: solve one task with a frozen harness, show progress, write the run folder.

The command body lives here (harness/app/cli.py registers it), next to the plots it writes: predicted vs true on
the in-distribution and out-of-distribution test data, and the Pareto front.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
from omegaconf import DictConfig
from pydantic import BaseModel, ConfigDict

SHOWN_METRICS = ("nmse", "r2", "acc_0.1", "acc_0.01", "acc_0.001")
SPLIT_ORDER = ("train", "valid", "test_id", "test_ood")
ANONYMIZATION_FILE = "anonymization.json"


class TaskOptions(BaseModel):
    """The ``task`` section of ``solve``: how the data is shown to the model."""

    model_config = ConfigDict(extra="forbid")

    anonymize: bool = False  # inputs x1..xn, target y; no descriptions, task name, domain or metadata in any prompt


def _non_null(section: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in section.items() if v is not None}


def _backend_name(value: Any) -> str | None:
    """``backend`` is either a group entry (``{name: ..., ...}``) or a plain name; null keeps the harness's."""
    if value is None:
        return None
    if isinstance(value, (dict, DictConfig)):
        return value.get("name")
    return str(value)


def _as_int(value: Any, key: str) -> int:
    if isinstance(value, bool):
        raise ValueError(f"{key} must be an integer, got {value!r}")
    try:
        return int(value)
    except (TypeError, ValueError):
        raise ValueError(f"{key} must be an integer, got {value!r}") from None


def _checked(section: str, build: Any) -> Any:
    """Run ``build``; a pydantic error becomes one ValueError line naming the key (``sr.time_budget: ...``)."""
    from pydantic import ValidationError

    from harness.app.cli_support import config_error

    try:
        return build()
    except ValidationError as exc:
        raise ValueError(config_error(exc, section)) from None
    except (TypeError, ValueError) as exc:
        message = str(exc)
        raise ValueError(message if message.startswith(f"{section}.") else f"{section}: {message}") from None


def solve_command(cfg: DictConfig) -> int:
    """Load the harness and the data, solve, print the equation and metrics, write result.json and plots."""
    from rich.console import Console

    from harness.app.artifact import ArtifactError, FrozenHarness
    from harness.app.cli_support import column_list, column_map, load_task, plain, print_error, run_dir_of
    from harness.core.anonymize import anonymize
    from harness.core.context import Budget
    from harness.core.task import TaskError
    from harness.llm.base import LLMError
    from harness.llm.factory import make_llm
    from workflows.params import expected_llm_calls, expected_solver_runs

    console = Console()
    run_dir = run_dir_of(cfg)
    try:  # every user mistake (files, columns, config values) ends here: rc 2 and one line, before any work
        harness = FrozenHarness.resolve(str(cfg.harness))
        seed = _as_int(cfg.get("seed"), "seed")
        budget = _checked("budget", lambda: Budget(**_non_null(plain(cfg, "budget"))))
        llm_config = _checked("llm", lambda: harness.llm_config(_non_null(plain(cfg, "llm"))))
        sr_overrides = _non_null(plain(cfg, "sr"))
        settings = _checked("sr", lambda: harness.sr_settings.updated(**sr_overrides))
        task_options = _checked("task", lambda: TaskOptions(**_non_null(plain(cfg, "task"))))
        task = load_task(str(cfg.data), cfg.get("target"), cfg.get("name"),
                         inputs=column_list(cfg.get("inputs"), "inputs"),
                         descriptions=column_map(cfg.get("describe"), "describe"))
    except (ArtifactError, TaskError, OSError, ValueError, TypeError) as exc:
        print_error(console, exc)
        return 2
    try:  # the embedded model: loaded (CPU kernels probed once per machine) before the solve depends on it
        make_llm(llm_config).ready()
    except LLMError as exc:
        print_error(console, exc)
        return 1
    hidden = anonymize(task) if task_options.anonymize else None
    if hidden is not None:  # the solver sees x1..xn and y only; the run folder says how to read its equations back
        run_dir.mkdir(parents=True, exist_ok=True)
        (run_dir / ANONYMIZATION_FILE).write_text(json.dumps(hidden.to_dict(), indent=2) + "\n", encoding="utf-8")
    backend = _backend_name(cfg.get("backend")) or harness.backend
    w = harness.workflow
    console.print(f"[bold]harness[/] {cfg.harness} ({harness.digest[:19]}...), workflow {w.as_tuple()}, "
                  f"backend {backend}, LLM {llm_config.provider}" + (f"/{llm_config.model}" if llm_config.model else ""))
    console.print(f"[bold]task[/] {task!r}\n[bold]run folder[/] {run_dir}")
    if hidden is not None:
        console.print("[bold]anonymized[/]: the model sees " + ", ".join(f"{a} ({b})" for a, b in hidden.names.items())
                      + " with no names, descriptions or domain; result.json and nodes.jsonl use these names")
    totals = (expected_llm_calls(w, harness.role_agents), expected_solver_runs(w, settings))

    with console.status("solving ...") as status:
        def on_node(node: Any) -> None:
            used = node.budget or {}
            status.update(f"solving: {used.get('llm_calls', 0)}/{totals[0]} role calls, "
                          f"{used.get('solver_runs', 0)}/{totals[1]} SR runs, {used.get('seconds', 0):.0f}s")
            console.print(_node_line(node))

        solution = harness.solve(
            hidden.task if hidden else task, llm=llm_config, backend=backend, budget=budget, run_dir=run_dir,
            seed=seed, sr_settings=sr_overrides, max_workers=cfg.get("max_workers"), on_node=on_node,
        )
    _print_solution(console, solution)
    if hidden is not None and solution.equation is not None:
        console.print(f"[bold green]in the task's names[/] {hidden.restore(solution.equation)}")
    if solution.equation is not None:
        try:
            write_plots(run_dir, task, solution)
        except Exception as exc:  # plots are a convenience; result.json is already written
            console.print(f"[yellow]plots not written:[/] {type(exc).__name__}: {exc}")
    console.print(f"run folder: {run_dir}")
    return 0 if solution.equation is not None else 1


def _node_line(node: Any) -> str:
    where = node.branch or "-"
    text = f"[cyan]{node.kind}[/] [dim]{where}[/]"
    if node.candidates:
        best = min(node.candidates, key=lambda c: c["metrics"].get("valid", {}).get("nmse", float("inf")))
        nmse = best["metrics"].get("valid", {}).get("nmse", float("inf"))
        text += f" {len(node.candidates)} candidates, best valid nmse {nmse:.3g}"
    if node.error:
        text += f" [red]{str(node.error)[:120]}[/]"
    return text


def _print_solution(console: Any, solution: Any) -> None:
    from rich.table import Table

    status = solution.status + (f" ({'; '.join(solution.errors[:2])})" if solution.errors else "")
    console.print(f"[bold]status[/] {status}")
    if solution.equation is None:
        console.print("[yellow]no usable equation found[/]")
        return
    console.print(f"[bold green]equation[/] {solution.equation}   (complexity {solution.complexity})")
    table = Table(title="metrics of the selected equation")
    table.add_column("split")
    for col in SHOWN_METRICS:
        table.add_column(col, justify="right")
    for split in SPLIT_ORDER:
        if split in solution.metrics:
            m = solution.metrics[split]
            table.add_row(split, *(f"{float(m.get(c, float('nan'))):.4g}" for c in SHOWN_METRICS))
    console.print(table)
    console.print(f"{solution.llm_calls} role calls, {solution.solver_runs} SR runs, {solution.seconds:.1f}s")


# -- plots ------------------------------------------------------------------------------------------------------
def write_plots(run_dir: Path, task: Any, solution: Any) -> list[Path]:
    """pred_vs_true_id.png (test_id, else train), pred_vs_true_ood.png (when OOD data exists), pareto_front.png."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    run_dir = Path(run_dir)
    written = []
    id_split, id_label = (task.test_id, "test_id") if task.test_id is not None else (task.train, "train")
    for split, label, name in ((id_split, id_label, "pred_vs_true_id.png"), (task.test_ood, "test_ood", "pred_vs_true_ood.png")):
        if split is None:
            continue
        pred = solution.predict(split.X)
        fig, ax = plt.subplots(figsize=(4.5, 4.5))
        ok = np.isfinite(pred)
        ax.scatter(split.y[ok], pred[ok], s=8, alpha=0.7)
        lo, hi = float(np.min(split.y)), float(np.max(split.y))
        ax.plot([lo, hi], [lo, hi], "k--", lw=1)
        nmse = solution.metrics.get(label, {}).get("nmse")
        ax.set_title(f"{task.name}: {label}" + (f" (NMSE {nmse:.3g})" if nmse is not None else ""), fontsize=9)
        ax.set_xlabel(f"true {task.target_name}")
        ax.set_ylabel(f"predicted {task.target_name}")
        fig.tight_layout()
        fig.savefig(run_dir / name, dpi=110)
        plt.close(fig)
        written.append(run_dir / name)
    front = solution.front
    fig, ax = plt.subplots(figsize=(5, 4))
    if front is not None and len(front):
        ax.step(front["complexity"], front["loss"], where="post", marker="o")
        ax.set_yscale("log")
        if solution.complexity is not None:
            ax.axvline(solution.complexity, color="g", ls=":", label="selected")
            ax.legend()
    ax.set_xlabel("complexity")
    ax.set_ylabel("validation NMSE")
    ax.set_title(f"Pareto front ({task.name})", fontsize=9)
    fig.tight_layout()
    fig.savefig(run_dir / "pareto_front.png", dpi=110)
    plt.close(fig)
    written.append(run_dir / "pareto_front.png")
    return written
