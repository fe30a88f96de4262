"""The core: expressions, fitting and metrics, tasks, candidates and the run context; the layer everything else
stands on. Imports nothing of ours above it. (The SR engines - Operon, PySR - are `harness.sr`'s backends.)"""

from harness.core.exports import lazy_exports

__all__, __getattr__, __dir__ = lazy_exports(__name__, {
    "parse_expression": "harness.core.expression",
    "Expression": "harness.core.expression",
    "ExpressionError": "harness.core.expression",
    "fit": "harness.core.evaluator",
    "compute_metrics": "harness.core.evaluator",
    "Task": "harness.core.task",
    "TaskError": "harness.core.task",
    "TaskDataMissing": "harness.core.task",
    "Split": "harness.core.task",
    "Candidate": "harness.core.candidates",
    "pareto_front": "harness.core.candidates",
    "select_best": "harness.core.candidates",
    "AgentContext": "harness.core.context",
    "Budget": "harness.core.context",
    "BudgetTracker": "harness.core.context",
    "BudgetExhausted": "harness.core.context",
    "FitSettings": "harness.core.context",
    "RunStatus": "harness.core.context",
    "evaluate_candidate": "harness.core.context",
    "symbolic_match": "harness.core.symbolic",
    "OPERATORS": "harness.core.vocabulary",
    "DEFAULT_OPERATORS": "harness.core.vocabulary",
})
