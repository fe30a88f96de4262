"""The HTTP API's request and response bodies (pydantic): what ``POST /api/runs`` and friends accept and return.

A request chooses among what the server's operator configured (harness/app/serve/config.py): a model by name and
its sampling fields, bounded budgets and SR settings. It never names code, hosts, files or environment variables;
such a field is refused with a 4xx that names it (docs/workbench.md, the trust model).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator
from pydantic_core import PydanticCustomError

RunStatusText = Literal["queued", "running", "paused", "waiting", "done", "failed", "stopped"]
MODEL_FIELDS = ("name", "temperature", "max_tokens", "seed")


class LLMChoice(BaseModel):
    """One of the operator's model configurations, by name (None: the server's default), and the sampling fields a
    page user may set; a bare string is the name."""

    model_config = ConfigDict(extra="forbid")

    name: str | None = Field(None, max_length=40, description="a name from GET /api/options (llms)")
    temperature: float | None = Field(None, ge=0, le=2)
    max_tokens: int | None = Field(None, ge=1, description="at most the server's limit (limits.max_tokens)")
    seed: int | None = Field(None, ge=0, lt=2**31)

    @model_validator(mode="before")
    @classmethod
    def _a_name_and_sampling_only(cls, value: Any) -> Any:
        """Why a hand-written check beside ``extra="forbid"``: the refusal names every such field at once and says
        why (the provider, base_url, api_key_env, model_path ... of a model are the operator's)."""
        if isinstance(value, str):
            return {"name": value}
        if isinstance(value, dict):
            refused = [f"llm.{k}" for k in value if k not in MODEL_FIELDS]
            if refused:
                raise PydanticCustomError(
                    "operator_only", "{fields}: not a request's to set; the server's operator configures the models "
                    "(provider, endpoint, key, files): pick one by name and set only temperature, max_tokens, seed",
                    {"fields": ", ".join(refused)})
        return value


class BudgetRequest(BaseModel):
    """``budget.*`` of a run (``harness.core.context.Budget``); ``max_seconds`` at most the server's limit, which
    is also the budget of a request that sets none."""

    model_config = ConfigDict(extra="forbid")

    max_seconds: float | None = Field(None, gt=0)
    max_llm_calls: int | None = Field(None, ge=0)
    max_solver_runs: int | None = Field(None, ge=0)
    max_tokens: int | None = Field(None, ge=0)


class RunRequest(BaseModel):
    """A solve to start: the data (a workspace CSV, an upload, or a built-in suite's task), the task setup, the
    harness, the model and the budget."""

    model_config = ConfigDict(extra="forbid")

    data: str | None = Field(None, description="a CSV path relative to the workspace, or an upload id")
    suite: str | None = Field(None, description="a built-in suite's task instead of data, e.g. synthetic:phys_osc_synth_00")
    target: str | None = Field(None, description="the target column (default: the last one)")
    inputs: list[str] | None = Field(None, description="input columns (default: every other); the rest is unused")
    descriptions: dict[str, str] = Field(default_factory=dict, description="column -> what it is")
    ood_column: str | None = Field(None, description="rows above the 80% quantile of this column are the OOD test")
    harness: str = Field("default", description="'default' or a frozen harness file in the workspace")
    llm: LLMChoice | None = Field(None, description="a configured model by name ('tiny'), or {name, temperature, "
                                                    "max_tokens, seed}; None: the server's default")
    budget: BudgetRequest = Field(default_factory=BudgetRequest, description="e.g. {'max_seconds': 60}")
    sr: dict[str, Any] = Field(default_factory=dict, description="sr.* overrides within the server's limits, "
                                                                 "e.g. {'time_budget': 10}")
    agent: dict[str, Any] | None = Field(None, description="run the interactive tool-calling agent instead of the "
                                                          "harness's workflow: agent.* keys, e.g. {'L': 3}")
    seed: int = Field(0, ge=0, lt=2**32)
    name: str | None = Field(None, max_length=100)

    @model_validator(mode="after")
    def _one_source(self) -> "RunRequest":
        if (self.data is None) == (self.suite is None):
            raise ValueError("give exactly one of data (a workspace CSV or an upload id) and suite")
        return self


class MessageRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    text: str = Field(..., min_length=1, max_length=4000)


class RunCreated(BaseModel):
    id: str


class RunInfo(BaseModel):
    """A run as ``GET /api/runs/{id}`` shows it; ``result`` once it is done."""

    id: str
    status: RunStatusText
    error: str | None = None
    created: float
    request: dict[str, Any] = Field(default_factory=dict)
    nodes: int = 0
    queued_messages: int = 0
    live: bool = False
    result: dict[str, Any] | None = None


class UploadInfo(BaseModel):
    id: str
    name: str
    columns: list[str]
    rows: int
