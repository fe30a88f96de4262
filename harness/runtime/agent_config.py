"""The R-C-L-K agent's settings, prompts, statuses and step records (``harness.runtime.agent`` runs them)."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from harness.core.candidates import Candidate
from harness.core.context import RunStatus
from harness.llm.base import LLMResponse, ToolCall
from harness.runtime.nodes import SearchCoordinate
from harness.tools.base import ToolCallResult

DEFAULT_SYSTEM_PROMPT = """\
You are an expert scientist doing symbolic regression: find a compact, accurate closed-form equation for the \
target from the input variables. Work with the tools: run the SR search to get candidate equations, evaluate \
your own hypotheses (free constants as c0, c1, ... are fitted for you), and use the analysis tools to look at \
the data and at residuals. Prefer simple, physically plausible equations. Every reply must call at least one tool."""

NUDGE = (
    "You did not call a tool. Call one of the tools ({tools}) to search for or evaluate equations; "
    "write equations in the tool arguments, not in prose."
)
PARSE_ERROR = "Your reply could not be read as a tool call: {error}. Reply again with a well-formed tool call."
CONTINUE = (
    "Step {step} of {steps}. {progress}\n"
    "Improve on the best equation: refine its structure or test a new hypothesis."
)



class AgentConfig(BaseModel):
    """Shape and settings of an R-C-L-K agent run."""

    model_config = ConfigDict(extra="forbid")

    R: int = Field(1, ge=1, description="restarts; each is seeded with the top global candidates")
    C: int = Field(1, ge=1, description="independent conversation branches per restart")
    L: int = Field(3, ge=1, description="refinement steps per branch")
    K: int = Field(1, ge=1, description="samples per step; the best one continues")
    restart_top_k: int = Field(3, ge=0, description="candidates carried into each new restart's prompt")
    target_nmse: float | None = Field(1e-10, description="stop once the best validation NMSE is at most this")
    target_acc: str | None = Field(None, description="stop once this validation metric (e.g. acc_0.01) is 1")
    tools: list[str] | None = Field(None, description="tool names; None = run_sr_search, evaluate_expression, analysis")
    parser: Literal["native", "json", "tagged"] = "native"
    tool_choice: Literal["auto", "required"] | None = Field(
        None, description="native parser: 'required' makes every answer a tool call (servers that constrain "
                          "decoding then force valid arguments: small models rarely call tools on their own)")
    system_prompt: str = DEFAULT_SYSTEM_PROMPT
    max_tool_calls_per_response: int = Field(4, ge=1)
    temperature: float | None = 0.7
    max_tokens: int | None = 1024
    seed: int | None = None
    branch_workers: int = Field(1, ge=1, description="branches of one restart run concurrently in this many threads")
    progress_chars: int = Field(800, ge=100, description="length bound of the progress summary in prompts")
    interactive: bool = Field(False, description="a turn with no tool call waits for the user's next message "
                                                 "(harness.runtime.interaction.RunControl) instead of a nudge")


@dataclass
class AgentResult:
    """What a run produced; the same facts are in ``run_dir/result.json``."""

    best: Candidate | None
    front: list[Candidate]
    status: RunStatus
    counts: dict[str, Any]
    run_dir: Path | None
    error: str | None = None
    responses: int = 0
    result: dict[str, Any] = field(default_factory=dict)


@dataclass
class Sample:
    """One of the K responses of a step, with what its tool calls produced."""

    k: int
    response: LLMResponse
    calls: list[ToolCall] = field(default_factory=list)
    parse_errors: list[str] = field(default_factory=list)
    results: list[ToolCallResult] = field(default_factory=list)
    candidates: list[Candidate] = field(default_factory=list)
    node_id: int | None = None
    error: str | None = None

    def best_key(self) -> tuple[float, int, str]:
        keys = [c.sort_key() for c in self.candidates]
        return min(keys) if keys else (math.inf, 0, "")


@dataclass
class Iteration:
    """One (r, c, l) step of a branch."""

    r: int
    c: int
    l: int
    buffer: list[dict[str, Any]]
    parent: int | None
    messages: list[dict[str, Any]] = field(default_factory=list)
    samples: list[Sample] = field(default_factory=list)
    chosen: Sample | None = None
    started: float = field(default_factory=time.perf_counter)
    replied: bool = False  # the user answered this turn (interactive): it does not count as one of the L steps

    @property
    def branch(self) -> str:
        return f"r{self.r}c{self.c}"

    def at(self, k: int | None = None) -> SearchCoordinate:
        """This step's place in the R-C-L-K search, sample ``k`` (``None``: the step as a whole)."""
        return SearchCoordinate(R=self.r, C=self.c, L=self.l, K=k)


