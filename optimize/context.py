"""Everything the stages share for one run: settings, model, tasks, the evaluator and the starting harness.

Built once from the Hydra config (``build_context``) or directly in Python/tests (``OptimizeContext(...)``).
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from harness.sr.settings import DEFAULT_BACKEND
from harness.app.executor import SolveExecutor
from harness.app.executor_factory import make_executor
from harness.llm.config import LLMConfig
from harness.llm.factory import make_llm
from optimize.evaluation import Evaluator
from optimize.runfolder import RunFolder
from optimize.settings import OptimizeSettings
from workflows.harness import STARTING_HARNESSES, Harness, shipped_harness
from optimize.tasks import TaskSets, load_task_sets

log = logging.getLogger(__name__)

LLM_CACHE_FILE = "llm_cache.db"


@dataclass
class OptimizeContext:
    settings: OptimizeSettings
    folder: RunFolder
    llm: Any
    tasks: TaskSets
    evaluator: Evaluator
    base: Harness  # where the stages start (OptimizeSettings.seed: HarnessSR's initial harness or the default)
    default: Harness  # the shipped default with the same model and engine: the gate's and the report's reference
    seed: int = 0
    llm_config: dict[str, Any] = field(default_factory=dict)
    reflection_llm: Any = None  # stage-1 and stage-2-adaptation rewrites, stage-3 reflection; None = ``llm``
    reflection_config: dict[str, Any] | None = None
    backend_config: dict[str, Any] = field(default_factory=dict)
    benchmark_config: dict[str, Any] = field(default_factory=dict)

    @property
    def rewriter(self) -> Any:
        """The model that writes instruction rewrites (GEPA's reflection_lm)."""
        return self.reflection_llm if self.reflection_llm is not None else self.llm

    @property
    def seeds(self) -> list[int]:
        return list(self.settings.seeds)

    @property
    def race_seeds(self) -> list[int]:
        """The engine seeds races draw pairs from: the run's seeds, then the next integers, ``race_seeds`` in all."""
        n = self.settings.race_seeds
        seeds = self.seeds[:n]
        return seeds + [max(self.seeds) + i for i in range(1, n - len(seeds) + 1)]

    @property
    def task_index(self) -> dict[str, Any]:
        return {t.name: t for t in self.tasks.all()}


def make_client(llm_config: Mapping[str, Any]) -> Any:
    """LLM client from a ``conf/llm/*.yaml`` mapping."""
    return make_llm(LLMConfig.model_validate(dict(llm_config)))


def backend_settings(backend_config: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
    """(backend name, SR settings) from a ``conf/backend/*.yaml`` mapping; the settings are validated and written
    out in full (``workflows.params.SRSettings``), so equal settings always give equal harness digests."""
    from workflows.params import SRSettings

    data = dict(backend_config)
    name = str(data.pop("name", DEFAULT_BACKEND))
    return name, SRSettings.coerce(data).model_dump(mode="json")


def build_context(
    run_dir: str | Path,
    settings: OptimizeSettings,
    *,
    llm_config: Mapping[str, Any],
    backend_config: Mapping[str, Any],
    benchmark_config: Mapping[str, Any],
    seed: int = 0,
    llm: Any = None,
    tasks: TaskSets | None = None,
    runner: Any = None,
    prompts: Mapping[str, str] | None = None,
    executor: SolveExecutor | Mapping[str, Any] | None = None,
) -> OptimizeContext:
    """Wire model, tasks, evaluator and the seed harness for ``run_dir``.

    ``llm``, ``tasks``, ``runner`` (in place of ``workflows.runner.run_workflow``) and the seed ``prompts`` can be
    injected (tests, notebooks); otherwise they come from the configs. ``executor``: an ``executor`` config
    mapping (``harness/conf/executor``; local threads = ``task_workers`` unless ``executor.workers`` says) or an
    executor; None = local threads.
    """
    folder = RunFolder(run_dir)
    from harness.llm.cache import CachedLLM

    if llm is None:
        llm = make_client(llm_config)
        if settings.llm_cache:
            llm = CachedLLM(llm, folder.path / LLM_CACHE_FILE)
    reflection = None
    if settings.reflection_llm:
        reflection = make_client(settings.reflection_llm)
        if settings.llm_cache:
            reflection = CachedLLM(reflection, folder.path / LLM_CACHE_FILE)
    if tasks is None:
        tasks = load_task_sets(benchmark_config, settings.tasks.n_train, settings.tasks.n_heldout, seed=seed,
                               n_validation=settings.tasks.n_validation)
    backend, sr_settings = backend_settings(backend_config)
    run_budget = None
    if settings.run_budget:
        from harness.core.context import Budget

        run_budget = Budget(**settings.run_budget)
    if executor is not None and not isinstance(executor, SolveExecutor):
        executor = make_executor(executor, default_workers=settings.task_workers)
    evaluator = Evaluator(
        folder.path,
        llm,
        metric=settings.metric,
        score_split=settings.score_split,
        run_budget=run_budget,
        stage_limits=settings.stage_limits(),
        task_workers=settings.task_workers,
        branch_workers=settings.branch_workers,
        keep_run_dirs=settings.keep_run_dirs,
        runner=runner,
        time_scale=settings.train_time_scale,
        work_rate=settings.work_rate,
        time_guard=settings.time_guard,
        executor=executor,
        llm_config=llm_config,
        share_runs=settings.share_runs,
        stop_at_exact=settings.stop_at_exact,
    )
    # The start (HarnessSR's initial harness or the shipped default: workflows.harness, one definition each) and
    # the shipped default, with the model they are trained with; the backend config sets the engine and its settings
    # (the initial harness then resets the hand-made SR choices to their initial values).
    base = STARTING_HARNESSES[settings.seed](llm=llm_config, backend=backend, sr_settings=sr_settings)
    default = shipped_harness(llm=llm_config, backend=backend, sr_settings=sr_settings)
    if prompts is not None:
        base = base.with_changes(prompts=dict(prompts))
    log.info("run folder %s: %d training, %d validation, %d held-out tasks, starting from the %s harness, pid %d",
             folder.path, len(tasks.train), len(tasks.validation), len(tasks.heldout), settings.seed, os.getpid())
    return OptimizeContext(
        settings=settings, folder=folder, llm=llm, tasks=tasks, evaluator=evaluator, base=base, default=default,
        seed=seed,
        llm_config=dict(llm_config), reflection_llm=reflection,
        reflection_config=dict(settings.reflection_llm) if settings.reflection_llm else None, backend_config=dict(backend_config), benchmark_config=dict(benchmark_config),
    )
