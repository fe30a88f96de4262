"""The HTTP API's request and response bodies (pydantic): what ``POST /api/runs`` and friends accept and return."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

RunStatusText = Literal["queued", "running", "paused", "waiting", "done", "failed", "stopped"]


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
    llm: str | dict[str, Any] | None = Field(None, description="an llm group name ('tiny', 'local') or llm.* keys")
    budget: dict[str, Any] = Field(default_factory=dict, description="budget.* keys, e.g. {'max_seconds': 60}")
    sr: dict[str, Any] = Field(default_factory=dict, description="sr.* overrides, e.g. {'time_budget': 10}")
    agent: dict[str, Any] | None = Field(None, description="run the interactive tool-calling agent instead of the "
                                                          "harness's workflow: agent.* keys, e.g. {'L': 3}")
    seed: int = 0
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
