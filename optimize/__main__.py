"""``python -m optimize [stage=init|search|refine|freeze|all] [llm=..] [backend=..] [benchmark=..] [optimize=..]``

Hydra app (primary config ``conf/optimize.yaml``). Everything lands in Hydra's run folder (``hydra.run.dir``; one
folder per job in a multirun): ``harness.json``, ``report.md`` + plots, ``optuna.db``, ``evals.db``, ``trace.jsonl``,
per-task run folders and the stage result files that let each stage run as its own process.
"""

from __future__ import annotations

import faulthandler
import logging
from typing import Any

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf

from harness.llm.base import LLMError
from optimize.context import build_context
from optimize.pipeline import run_pipeline
from optimize.settings import OptimizeSettings

log = logging.getLogger("optimize")


def _plain(node: Any) -> Any:
    return OmegaConf.to_container(node, resolve=True) if node is not None else {}


def register_config_bases() -> None:
    """Hydra's ``base`` entries from the models: llm, backend, executor (harness.app.config_store) and optimize."""
    from hydra.core.config_store import ConfigStore

    from harness.app.config_store import defaults_of, register_bases

    register_bases()
    ConfigStore.instance().store(group="optimize", name="base", node=defaults_of(OptimizeSettings))


def _logs_through(progress: Any) -> None:
    """On a terminal, log lines print above the live display (rich's handler on its console), not through it."""
    if not progress.live:
        return
    from rich.logging import RichHandler

    root = logging.getLogger()
    for handler in list(root.handlers):
        if type(handler) is logging.StreamHandler:
            root.removeHandler(handler)
    root.addHandler(RichHandler(console=progress.console, show_path=False, markup=False))


@hydra.main(config_path="pkg://harness.conf", config_name="optimize", version_base="1.3")
def main(cfg: DictConfig) -> float | None:
    from harness.app.cli_support import quiet_http_logs
    from harness.app.progress import Progress, format_seconds, print_summary
    from optimize.report import closing_summary

    quiet_http_logs()
    run_dir = HydraConfig.get().runtime.output_dir
    settings = OptimizeSettings.model_validate(_plain(cfg.optimize))
    progress = Progress("optimize")
    _logs_through(progress)
    ctx = build_context(
        run_dir,
        settings,
        llm_config=_plain(cfg.llm),
        backend_config=_plain(cfg.backend),
        benchmark_config=_plain(cfg.benchmark),
        seed=int(cfg.seed),
        executor=_plain(cfg.get("executor")) or None,
    )
    ctx.evaluator.progress = progress
    try:
        ctx.llm.ready()  # the embedded model: load it (probing the CPU's kernels once) before any stage depends on it
        results = run_pipeline(ctx, str(cfg.stage))
    except LLMError as exc:
        log.error("%s", exc)
        raise SystemExit(1) from None
    finally:
        progress.close()
        ctx.evaluator.executor.close()
        for client in {id(c): c for c in (ctx.llm, ctx.reflection_llm) if c is not None}.values():
            close = getattr(client, "close", None)
            if callable(close):
                close()
    freeze = results.get("freeze") or {}
    if freeze:
        title, rows, notes = closing_summary(freeze)
        print_summary(title, rows, notes=[*notes, f"Elapsed: {format_seconds(progress.elapsed)}"])
    final = freeze.get("selected_stage")
    score = ((freeze.get("rows") or {}).get(final) or {}).get("train") or {}
    return score.get("score")  # what a sweeper would maximise


if __name__ == "__main__":
    import sys

    from harness.app.cli_support import refuse_pasted_keys

    refused = refuse_pasted_keys(sys.argv[1:])  # before Hydra writes the overrides into the run folder
    if refused:
        print(f"error: {refused}", file=sys.stderr)
        sys.exit(2)
    faulthandler.enable()  # a native crash prints where it happened (in_flight.json in the run folder says what ran)
    register_config_bases()
    main()
