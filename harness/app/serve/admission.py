"""A request's choices turned into a run's settings under the operator's configuration (``ServeSettings``):
the model by name, the budget, SR settings and agent shape within the limits. Anything over a limit is refused
(400, naming the field and the limit) before the run is queued, never clipped in silence.

Why the caps are checked on the validated settings and not on the request's keys: SR settings take aliases
(``max_time`` for ``time_budget``), and a check on keys would let one through.
"""

from __future__ import annotations

from typing import Any

from harness.app.serve.config import ServeLimits, ServeSettings
from harness.app.serve.models import LLMChoice, RunRequest
from harness.app.serve.workspace import WorkspaceError

HARNESS_SAMPLING = ("temperature", "max_tokens")  # what a harness file's llm section may still set (the rest: the model's)
REQUEST_FORBIDDEN_SR = ("extras",)  # engine keyword options (threads, ...): the harness's, never a request's


class Refused(WorkspaceError):
    """A request asked for more than the operator allows, or for something only the operator sets."""


def llm_config(settings: ServeSettings, harness: Any, choice: LLMChoice | None) -> Any:
    """The operator's configuration named by the request, with the harness's sampling settings where the operator
    left them open and the request's sampling fields on top. Nothing else of the harness's llm section (its
    provider, model_path, extra) is used: which model runs, where and with which key is the operator's."""
    from harness.llm.config import LLMConfig

    choice = choice or LLMChoice()
    try:
        base = settings.model(choice.name)
    except KeyError as exc:
        raise Refused(f"llm.name: {exc.args[0]}") from None
    if choice.max_tokens is not None and choice.max_tokens > settings.limits.max_tokens:
        raise Refused(_over("llm.max_tokens", choice.max_tokens, settings.limits.max_tokens, "max_tokens"))
    data = base.model_dump()
    stored = dict(getattr(harness, "llm", None) or {})
    data.update({k: stored[k] for k in HARNESS_SAMPLING if stored.get(k) is not None and k not in base.model_fields_set})
    data.update(choice.model_dump(exclude_none=True, exclude={"name"}))
    return LLMConfig.model_validate(data)


def budget(limits: ServeLimits, req: RunRequest) -> Any:
    """The run's Budget: the request's, with ``max_seconds`` at most (and by default) the server's limit."""
    from harness.core.context import Budget

    asked = req.budget.model_dump()
    if asked["max_seconds"] is None:
        asked["max_seconds"] = limits.max_run_seconds
    elif asked["max_seconds"] > limits.max_run_seconds:
        raise Refused(_over("budget.max_seconds", asked["max_seconds"], limits.max_run_seconds, "max_run_seconds"))
    return Budget(**asked)


def sr_settings(limits: ServeLimits, harness: Any, overrides: dict[str, Any]) -> Any:
    """The harness's SR settings with the request's overrides, each within the limits (relative to the harness's
    own time; a cap never refuses what the harness itself already sets)."""

    forbidden = [f"sr.{k}" for k in overrides if k in REQUEST_FORBIDDEN_SR]
    if forbidden:
        raise Refused(f"{', '.join(forbidden)}: engine options are the harness's, not a request's to set")
    own = harness.sr_settings
    settings = _validated("sr", lambda: harness.sr_settings.updated(**overrides))
    max_time = own.time_budget * limits.sr_time_factor
    caps = {"time_budget": (max_time, "sr_time_factor"), "residual_seconds": (max_time, "sr_time_factor"),
            "population_size": (max(limits.max_population, own.population_size), "max_population"),
            "max_length": (max(limits.max_length, own.max_length), "max_length")}
    for field, (cap, limit) in caps.items():
        value = getattr(settings, field)
        if value > cap:
            raise Refused(_over(f"sr.{field}", value, cap, limit))
    return settings


def agent_config(limits: ServeLimits, agent: dict[str, Any]) -> Any:
    """The interactive agent's settings: at most ``max_agent_steps`` responses (R*C*L*K), ``max_tokens`` each;
    ``run_python`` only where its sandbox is the strict one (the weaker mode confines neither files nor network,
    and the page user steers the model that writes the code)."""
    from harness.runtime.agent_config import AgentConfig
    from harness.tools.code_tools import sandbox_mode

    config = _validated("agent", lambda: AgentConfig.model_validate({"interactive": True, **agent}))
    steps = config.R * config.C * config.L * config.K
    if steps > limits.max_agent_steps:
        raise Refused(_over("agent.R*C*L*K", steps, limits.max_agent_steps, "max_agent_steps"))
    if config.max_tokens is not None and config.max_tokens > limits.max_tokens:
        raise Refused(_over("agent.max_tokens", config.max_tokens, limits.max_tokens, "max_tokens"))
    if "run_python" in (config.tools or []) and sandbox_mode() != "strict":
        raise Refused("agent.tools: run_python is off on this server (its sandbox is not the strict one)")
    return config


def _validated(section: str, build: Any) -> Any:
    """``build()``; a pydantic error becomes a 400 naming the field under ``section`` (``sr.time_budget: ...``)."""
    from pydantic import ValidationError

    from harness.app.cli_support import config_error

    try:
        return build()
    except ValidationError as exc:
        raise Refused(config_error(exc, section)) from None


def _over(field: str, value: Any, cap: Any, limit: str) -> str:
    return f"{field}: {value:g} is over this server's limit of {cap:g} (the operator raises it: --limit {limit}=...)"
