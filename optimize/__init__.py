"""Harness optimization (HarnessSR): learn role prompts + workflow shape on training tasks, then freeze them.

Three stages, each resumable on one run folder, then freeze:

1. ``stage1.run_stage1`` — role-prompt initialisation: seed + prompt-engineer rewrites per role group, scored in
   the group's small local workflow; the top texts form the prompt pool.
2. ``stage2.run_stage2`` — Optuna (seeded TPE) over workflow w = (u_ana, b, t_rep, t_dis, u_syn) x pooled prompt
   index per role (``space=full``, or ``fixed_pool``) x role agents x SR choices; each trial screened against the
   start on a training minibatch (its gain in ``optimize.metric``, less a penalty per LLM call); the best that
   gained race the start; then a short adaptation of the chosen prompts.
3. ``stage3.run_stage3`` — reflective refinement from SR diagnostics (or raw traces): parents drawn from a
   GEPA-style Pareto set over a held-out slice of the training tasks, one role's instruction at a time; a child is
   kept only when it wins a race against its parent.
4. ``freeze.run_freeze`` — the stages' pick races the shipped default on the validation tasks (the gate) and the
   winner is saved as ``harness.json`` (``harness.app.artifact.FrozenHarness``) with provenance; the held-out
   curve is scored for the report; ``report.write_report`` writes ``report.md`` + plots.

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
