"""SR engines behind one plan: search plans and their validation, the floor a harness holds every run to, the
Operon / PySR / LLM-generator / hybrid backends (``BACKENDS``), worker processes and the ``run_sr_search`` tool."""

from harness.core.exports import lazy_exports

__all__, __getattr__, __dir__ = lazy_exports(__name__, {
    "SearchPlan": "harness.sr.plan",
    "PlanLimits": "harness.sr.plan",
    "validate_plan": "harness.sr.plan_validation",
    "EngineSettings": "harness.sr.settings",
    "SearchSettings": "harness.sr.settings",
    "DEFAULT_BACKEND": "harness.sr.settings",
    "MAX_EXTRA_OPERATORS": "harness.sr.settings",
    "BACKENDS": "harness.sr.backends",
    "SRBackend": "harness.sr.backends",
    "BackendUnavailable": "harness.sr.backends",
    "EngineRun": "harness.sr.backends",
    "SearchOutcome": "harness.sr.backends",
    "run_search": "harness.sr.backends",
    "run_plan": "harness.sr.backends",
    "backend_names": "harness.sr.backends",
    "load_backend": "harness.sr.backends",
    "EngineFailure": "harness.sr.workers",
    "RunSRSearchTool": "harness.sr.tools",
})
