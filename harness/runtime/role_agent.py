"""A role as an agent of the runtime: its prompt, its output schema, the tools it may call and its R-C-L-K settings.

A role agent is built from the agent's step pieces (:class:`ToolStepper`), with one conversation: ``tool_steps``
steps in which the model must call one of its tools (their results join the conversation, candidates they fit join the
run's pool), then the answer, ``K`` samples under the role's JSON schema, ranked by ``rank`` (lower is better;
the workflow ranks plans by how well their hypotheses fit). With no tools and K = 1 it is one structured call.

Every step is a node of the run's :class:`SearchRunState`: tool steps as ``tools:<role>``, the answer as
``role:<role>`` (its parent the last tool step), so a workflow run is one search tree with the SR runs under the
plans that asked for them. A role never stops the run: a dead model, an unreadable answer or a spent budget gives
``output=None`` (the workflow uses its fallback) with the reason in ``error``.
"""

from __future__ import annotations

import copy
import math
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from pydantic import BaseModel, ConfigDict, Field

from harness.core.context import AgentContext
from harness.llm.base import LLMClient, LLMResponse
from harness.llm.json_output import parse_json_output
from harness.runtime.agent_config import AgentConfig, Iteration, Sample
from harness.runtime.nodes import NodeKind, NodeType, SearchCoordinate
from harness.runtime.state import SearchRunState
from harness.runtime.tool_steps import ToolStepper

TOOL_STEP_NOTE = ("Before you answer, check your ideas with a tool: call one of {tools}. "
                  "Write equations over the input names with constants c0, c1, ...")
NEXT_TOOL_NOTE = "Call a tool again to check another idea (step {step} of {steps})."
ANSWER_NOTE = "Now give your answer: only the JSON object described above, using what the tools showed."
MIN_LLM_SECONDS = 1.0  # below this a role call is not made (it is counted and falls back)


class RoleAgentConfig(BaseModel):
    """How a role runs: which tools it may call before answering, how many tool steps (L - 1), and K answers."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    tools: tuple[str, ...] = Field((), description="tool names the role may call before it answers")
    tool_steps: int = Field(1, ge=0, le=3, description="tool-calling steps before the answer (only with tools)")
    K: int = Field(1, ge=1, le=4, description="answers sampled; the best-ranked one is used")
    max_tool_calls: int = Field(3, ge=1, le=8, description="tool calls run per step")

    def llm_calls(self) -> int:
        """Model responses one activation of the role makes when nothing stops it."""
        return (self.tool_steps if self.tools else 0) + self.K

    @property
    def is_plain(self) -> bool:
        return not (self.tools and self.tool_steps) and self.K == 1


@dataclass
class RoleAnswer:
    """What one activation of a role produced (``output=None``: use the fallback; ``error`` says why)."""

    output: BaseModel | None
    text: str = ""
    error: str | None = None
    node_id: int | None = None
    tokens: int = 0
    salvaged: bool = False
    messages: list[dict[str, Any]] = field(default_factory=list)
    samples: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class _RoleStep(Iteration):
    """A tool step of a role: recorded under the role's branch of the workflow (not the agent's ``r0c0``)."""

    label: str | None = None

    @property
    def branch(self) -> str | None:  # type: ignore[override]
        return self.label


class RoleAgent(ToolStepper):
    """One role of a workflow: tool steps with :class:`ToolStepper`'s pieces, then the answer (no agent loop)."""

    def __init__(
        self,
        llm: LLMClient,
        context: AgentContext,
        state: SearchRunState,
        role: str,
        settings: RoleAgentConfig | None = None,
        *,
        reserve: Callable[[int], bool],
        seconds_left: Callable[[], float | None] = lambda: None,
        on_node: Callable[[Any], None] | None = None,
    ):
        self.settings = settings or RoleAgentConfig()
        self.role = role
        use_tools = bool(self.settings.tools and self.settings.tool_steps)
        config = AgentConfig(
            L=max(1, self.settings.tool_steps), tools=list(self.settings.tools) if use_tools else [],
            tool_choice="required", temperature=None, max_tokens=None, target_nmse=None,
            max_tool_calls_per_response=self.settings.max_tool_calls,
        )
        super().__init__(llm, context, config, on_node=on_node, state=state)
        self.node_kind = NodeKind.of(NodeType.TOOLS, role)
        self.reserve = reserve
        self.seconds_left = seconds_left
        self._tokens = 0
        self._last_tool_node: int | None = None

    # -- one activation --------------------------------------------------------------------------------------
    def answer(
        self,
        messages: list[dict[str, Any]],
        output_model: type[BaseModel],
        response_format: dict[str, Any],
        *,
        seed: int,
        parent: int | None = None,
        branch: str | None = None,
        info: dict[str, Any] | None = None,
        rank: Callable[[BaseModel], float] | None = None,
        salvage: Callable[[str, type[BaseModel]], BaseModel | None] | None = None,
    ) -> RoleAnswer | None:
        """Tool steps, then K answers; ``None`` when the budget stopped the run before the answer."""
        buffer = copy.deepcopy(messages)
        if self.tools:
            buffer = self._tool_steps(buffer, seed=seed, parent=parent, branch=branch)
            if buffer is None:
                return None
            parent = self._last_tool_node if self._last_tool_node is not None else parent
            buffer.append({"role": "user", "content": ANSWER_NOTE})
        k = self.settings.K
        if not self.reserve(k):
            return None
        t0 = time.perf_counter()
        responses, error = self._complete(buffer, response_format=response_format, n=k, seed=seed)
        samples: list[dict[str, Any]] = []
        best: tuple[float, int] | None = None
        chosen: dict[str, Any] | None = None
        for i, response in enumerate(responses):
            out, err, salvaged = self._read(response, output_model, salvage)
            score = math.inf
            if out is not None and rank is not None and k > 1:
                try:
                    score = float(rank(out))
                except Exception as exc:  # a ranking problem costs the ranking, not the answer
                    err = f"ranking failed: {type(exc).__name__}: {exc}"
            sample = {"k": i, "text": response.text or "", "output": out, "error": err, "salvaged": salvaged,
                      "rank": score, "finish_reason": response.finish_reason}
            samples.append(sample)
            if out is not None and (best is None or (score, i) < best):
                best, chosen = (score, i), sample
        if chosen is None and samples:
            chosen = samples[0]
        text = chosen["text"] if chosen else ""
        out = chosen["output"] if chosen else None
        if out is None:
            error = error or (chosen["error"] if chosen else None) or f"{self.role}: no output"
        node_info = dict(info or {})
        node_info.update(output=out.model_dump() if out is not None else None, fallback=out is None,
                         salvaged=bool(chosen and chosen["salvaged"]),
                         finish_reasons=[r.finish_reason for r in responses])  # "timeout": seconds cut the answer
        if k > 1:
            node_info["samples"] = [{"k": s["k"], "rank": s["rank"] if math.isfinite(s["rank"]) else None,
                                     "error": s["error"], "chosen": s is chosen,
                                     "output": s["output"].model_dump() if s["output"] is not None else None}
                                    for s in samples]
        ptok = sum(int(r.prompt_tokens or 0) for r in responses)
        ctok = sum(int(r.completion_tokens or 0) for r in responses)
        node = self.state.add_node(
            NodeKind.of(NodeType.ROLE, self.role), parent=parent, branch=branch, messages=buffer, response=text, at=SearchCoordinate(K=k),
            prompt_tokens=ptok, completion_tokens=ctok, seconds=time.perf_counter() - t0, error=error,
            info=node_info,
        )
        self._notify(node)
        return RoleAnswer(output=out, text=text, error=error, node_id=node.id, tokens=self._tokens,
                          salvaged=bool(chosen and chosen["salvaged"]), messages=buffer,
                          samples=samples)

    # -- steps -----------------------------------------------------------------------------------------------
    def _tool_steps(self, buffer: list[dict[str, Any]], *, seed: int, parent: int | None,
                    branch: str | None) -> list[dict[str, Any]] | None:
        """``tool_steps`` forced tool calls; their results join the conversation. ``None``: budget spent."""
        self._last_tool_node = None
        steps = self.settings.tool_steps
        names = ", ".join(sorted(self.tools))
        buffer = buffer + [{"role": "user", "content": TOOL_STEP_NOTE.format(tools=names)}]
        for step in range(steps):
            if not self.reserve(1):
                return None
            it = _RoleStep(r=0, c=0, l=step, buffer=buffer, parent=self._last_tool_node or parent, label=branch)
            it.messages = copy.deepcopy(buffer)
            responses, error = self._complete(it.messages, seed=seed + 7919 * (step + 1), n=1,
                                              **self._tool_kwargs)
            response = responses[0] if responses else LLMResponse(text="", error=error or "no response")
            it.samples.append(self.execute_tool_calls(it, Sample(k=0, response=response)))
            self.record_search_iteration(it)
            self.collect_candidates(it)
            chosen = it.chosen
            self._last_tool_node = chosen.node_id if chosen else self._last_tool_node
            if chosen is not None and chosen.results:
                buffer.append(self._assistant_message(chosen))
                buffer += list(self.parser.format_tool_result_messages(chosen.results))
            if step + 1 < steps:
                buffer.append({"role": "user", "content": NEXT_TOOL_NOTE.format(step=step + 2, steps=steps)})
        return buffer

    def _complete(self, messages: list[dict[str, Any]], *, n: int, seed: int,
                  **kwargs: Any) -> tuple[list[LLMResponse], str | None]:
        """One model request under the run's time; failures come back as an error string, never raised."""
        timeout = self.seconds_left()  # the call was counted when reserved (``reserve``: the run's budget)
        try:
            if timeout is not None and timeout < MIN_LLM_SECONDS:
                return [], (f"{self.role}: call failed: only {max(timeout, 0):.1f}s left after reserving the "
                            "engine's time; the engine runs with the harness's own settings")
            responses = list(self.llm.complete(messages, n=n, seed=seed, timeout_s=timeout, **kwargs))
        except Exception as exc:  # LLMError or a client bug: the role falls back, the run goes on
            return [], f"{self.role}: call failed: {type(exc).__name__}: {exc}"
        tokens = sum(int(r.prompt_tokens or 0) + int(r.completion_tokens or 0) for r in responses)
        self._tokens += tokens
        if tokens:
            self.context.budget.add_llm(0, tokens=tokens)
        return responses, None

    def _read(self, response: LLMResponse, model: type[BaseModel],
              salvage: Callable[[str, type[BaseModel]], BaseModel | None] | None) -> tuple[BaseModel | None, str | None, bool]:
        if response.error:
            return None, f"{self.role}: model error: {response.error}", False
        text = response.text or ""
        out, perr = parse_json_output(text, model)
        if out is not None:
            return out, None, False
        if salvage is not None:
            rescued = salvage(text, model)
            if rescued is not None:
                return rescued, None, True
        cut = {"length": " (cut at max_tokens)", "timeout": " (cut at the client's deadline)"}.get(
            response.finish_reason or "", "")
        return None, f"{self.role}: unparseable output{cut}: {perr}", False


def role_calls(settings: dict[str, RoleAgentConfig] | None, counts: dict[str, int]) -> int:
    """Model responses of a run whose roles are activated ``counts`` times (plain roles: one each)."""
    settings = settings or {}
    return sum(n * (settings[r].llm_calls() if r in settings else 1) for r, n in counts.items())


def coerce_role_agents(raw: Any, known: Sequence[str] | None = None) -> dict[str, RoleAgentConfig]:
    """``{role: RoleAgentConfig | dict}`` from configs and files; unknown role names are an error."""
    out: dict[str, RoleAgentConfig] = {}
    for role, value in dict(raw or {}).items():
        if known is not None and role not in known:
            raise ValueError(f"role_agents: unknown role {role!r}; roles are {', '.join(known)}")
        out[str(role)] = value if isinstance(value, RoleAgentConfig) else RoleAgentConfig.model_validate(dict(value))
    return out
