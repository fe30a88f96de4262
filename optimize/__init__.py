"""Harness optimization (HarnessSR): learn role prompts + workflow shape on training tasks, then freeze them.

Three stages, each resumable on one run folder, then freeze:

1. ``stage1.run_stage1`` — role-prompt initialisation: seed + prompt-engineer rewrites per role group, scored in
   the group's small local workflow; the top texts form the prompt pool.
2. ``stage2.run_stage2`` — Optuna (seeded TPE) over workflow w = (u_ana, b, t_rep, t_dis, u_syn) x pooled prompt
   index per role (``space=full``, or ``fixed_pool``), objective mean acc_0.01 on a training minibatch with LLM
   calls as tie-break; then a short adaptation of the chosen prompts.
3. ``stage3.run_stage3`` — reflective refinement (GEPA-style Pareto set over held-out training tasks) from SR
   diagnostics (or raw traces); one role's instruction at a time.
4. ``freeze.run_freeze`` — every stage harness scored on training and held-out tasks; ``harness.json``
   (``harness.app.artifact.FrozenHarness``) with provenance; ``report.write_report`` writes ``report.md`` + plots.

Every (harness digest, task, seed) is evaluated once (``evaluation.Evaluator`` + ``cache.EvalCache``), so no
solver execution is repeated across stages or after a resume. CLI: ``python -m optimize`` (Hydra, conf/optimize.yaml).
"""

from optimize.context import OptimizeContext, build_context
from optimize.evaluation import Evaluator, StageBudgetSpent
from optimize.records import EvalRecord, EvalSummary
from optimize.pipeline import run_pipeline, run_stage
from optimize.settings import OptimizeSettings

__all__ = [
    "EvalRecord",
    "EvalSummary",
    "Evaluator",
    "OptimizeContext",
    "OptimizeSettings",
    "StageBudgetSpent",
    "build_context",
    "run_pipeline",
    "run_stage",
]
