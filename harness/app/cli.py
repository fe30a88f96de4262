"""Command line: ``python -m harness <command> key=value ...``.

The first argument picks the command; the rest are Hydra overrides of that command's config ``conf/<name>.yaml``
(Hydra also gives ``--multirun``, ``--cfg job`` and launchers). A new command is one decorated function::

    @command("solve")
    def solve_command(cfg: DictConfig) -> int:
        ...
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from omegaconf import DictConfig, OmegaConf

from harness.sr.settings import DEFAULT_BACKEND
from harness.app.cli_support import (
    load_task,
    plain,
    quiet_http_logs,
    refuse_pasted_keys,
    run_dir_of,
)
from harness.app.config_store import register_bases

if TYPE_CHECKING:
    from harness.sr.settings import SearchSettings

CONF_DIR = Path(__file__).resolve().parents[1] / "conf"

CommandFn = Callable[[DictConfig], int]
COMMANDS: dict[str, tuple[str, CommandFn]] = {}


def command(name: str, config_name: str | None = None) -> Callable[[CommandFn], CommandFn]:
    """Register ``fn`` as ``python -m harness <name>``, configured by ``conf/<config_name or name>.yaml``."""

    def register(fn: CommandFn) -> CommandFn:
        COMMANDS[name] = (config_name or name, fn)
        return fn

    return register


def main(argv: list[str] | None = None) -> int:
    """Dispatch on the first word, hand the rest to Hydra; returns the command's exit code."""
    import hydra

    args = list(sys.argv[1:] if argv is None else argv)
    if args and args[0] == "view":  # a file reader, not a Hydra job: plain arguments
        from harness.app.view import main as view

        return view(args[1:])
    if args and args[0] == "serve":  # a long-lived web server, not a Hydra job: plain arguments
        from harness.app.serve.cli import main as serve

        return serve(args[1:])
    if not args or args[0] in ("-h", "--help") or args[0] not in COMMANDS:
        known = ", ".join(sorted([*COMMANDS, "view", "serve"]))
        print(f"usage: python -m harness <command> [key=value ...]\ncommands: {known}", file=sys.stderr)
        return 0 if args and args[0] in ("-h", "--help") else 2
    name, overrides = args[0], args[1:]
    refused = refuse_pasted_keys(overrides)
    if refused:
        print(f"error: {refused}", file=sys.stderr)
        return 2
    config_name, fn = COMMANDS[name]
    outcome: dict[str, int] = {}
    register_bases()  # the config groups' `base` entries: the pydantic models' defaults

    @hydra.main(version_base="1.3", config_path=str(CONF_DIR), config_name=config_name)
    def app(cfg: DictConfig) -> None:
        quiet_http_logs()
        outcome["rc"] = int(fn(cfg) or 0)

    saved = sys.argv
    sys.argv = [f"harness {name}", *overrides]
    try:
        app()
    finally:
        sys.argv = saved
    return outcome.get("rc", 0)


# -- commands -------------------------------------------------------------------------------------------------------
@command("agent")
def agent_command(cfg: DictConfig) -> int:
    """Run the R-C-L-K agent on one task, print progress and the best equation."""
    from rich.console import Console

    from harness.core.context import AgentContext, Budget, BudgetTracker, FitSettings, RunStatus
    from harness.llm.config import LLMConfig
    from harness.llm.factory import make_llm
    from harness.runtime.agent import AgentConfig, SRAgent

    console = Console()
    run_dir = run_dir_of(cfg)
    try:  # user mistakes (paths, columns, config values) get a message, not a traceback
        task = load_task(str(cfg.data), cfg.get("target"), cfg.get("name"))
        agent_config = AgentConfig(**plain(cfg, "agent"))
        llm_config = LLMConfig(**{k: v for k, v in plain(cfg, "llm").items() if v is not None})
        context = AgentContext(
            task=task,
            seed=int(cfg.seed),
            workspace=run_dir,
            fit=FitSettings(**plain(cfg, "fit")),
            budget=BudgetTracker(Budget(**plain(cfg, "budget"))),
        )
    except (OSError, ValueError, TypeError) as exc:
        console.print(f"[red]error:[/] {exc}")
        return 2
    backend_cfg = plain(cfg, "backend") if isinstance(cfg.get("backend"), DictConfig) else {"name": cfg.get("backend")}
    try:  # the free agent's plans are held to the settings' limits, not to a floor (it plans every run itself)
        context.search = agent_search_settings(backend_cfg)
    except (ValueError, TypeError) as exc:
        console.print(f"[red]error:[/] backend settings: {exc}")
        return 2
    console.print(f"[bold]task[/] {task!r}\n[bold]run folder[/] {run_dir}")
    llm = make_llm(llm_config)
    run_info = {"command": "agent", "cli": OmegaConf.to_container(cfg, resolve=True), "llm": llm.description}
    control = None
    if agent_config.interactive:  # stdin: a line is a message, /pause /resume /stop are controls
        from harness.runtime.interaction import RunControl, read_terminal

        control = RunControl()
        read_terminal(control, sys.stdin)
        console.print("[bold]interactive[/]: type a message (delivered at the next step), /pause, /resume, /stop")
    agent = SRAgent(llm, context, agent_config, run_dir=run_dir, on_node=_node_printer(console), run_info=run_info,
                    control=control)
    try:
        result = agent.run()
    finally:
        llm.close()
    _print_result(console, result)
    return 0 if result.status in (RunStatus.COMPLETED, RunStatus.TARGET_REACHED, RunStatus.BUDGET_EXHAUSTED) else 1


def agent_search_settings(backend_cfg: dict[str, Any]) -> "SearchSettings":
    """The ``agent`` command's ``SearchSettings`` from its ``backend`` config (``name`` + SRSettings), built as the
    workflow runner builds a solve's (``SRSettings.search_settings``); a bad name or value raises ValueError."""
    from harness.sr.backends import backend_names
    from workflows.params import SRSettings

    name = str(backend_cfg.get("name") or DEFAULT_BACKEND).strip().lower()
    if name not in backend_names():
        raise ValueError(f"unknown SR backend {name!r}; choose one of {', '.join(backend_names())}")
    settings = SRSettings.coerce({k: v for k, v in backend_cfg.items() if k != "name"})
    return settings.search_settings(name, floor=False)


@command("solve")
def solve_command(cfg: DictConfig) -> int:
    """Solve one task with a frozen harness (body in harness/app/solve_cli.py)."""
    from harness.app.solve_cli import solve_command as run

    return run(cfg)


def _node_printer(console: Any) -> Callable[[Any], None]:
    def show(node: Any) -> None:
        if str(node.kind) in ("user_message", "control"):  # what the user said, as the run recorded it
            console.print(f"[magenta]{node.kind}[/] {node.response}")
            return
        if not node.tool_results and node.response:  # the model spoke (interactive: your turn)
            console.print(f"[green]model[/] {node.response[:2000]}")
        where = f"r{node.R}c{node.C} L{node.L}" + (f" K{node.K}" if node.K is not None else "")
        tools = ", ".join(f"{t['tool_name']}{'' if t.get('ok') else ' (failed)'}" for t in node.tool_results)
        best = min((c["metrics"].get("valid", {}).get("nmse", float("inf")) for c in node.candidates), default=None)
        text = f"[cyan]{where}[/] {tools or 'no tool call'}"
        if node.candidates:
            text += f"; {len(node.candidates)} candidates, best valid nmse {best:.3g}"
        if node.error:
            text += f" [red]{node.error[:120]}[/]"
        console.print(text)

    return show


def _print_result(console: Any, result: Any) -> None:
    from rich.table import Table

    console.print(f"[bold]status[/] {result.status}" + (f" ({result.error})" if result.error else ""))
    best = result.best
    if best is None:
        console.print("[yellow]no equation found[/]")
    else:
        console.print(f"[bold green]best[/] {best.equation}   (complexity {best.complexity})")
        table = Table(title="metrics of the best equation")
        columns = ["nmse", "r2", "acc_0.1", "acc_0.01", "acc_0.001"]
        table.add_column("split")
        for col in columns:
            table.add_column(col, justify="right")
        for split, metrics in best.metrics.items():
            table.add_row(split, *(f"{metrics.get(c, float('nan')):.4g}" for c in columns))
        console.print(table)
    nodes = result.counts.get("nodes", 0)
    console.print(f"{result.responses} model responses, {nodes} nodes; run folder {result.run_dir}")
