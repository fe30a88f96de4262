"""The pieces of a tool-calling step, shared by the R-C-L-K agent and the role agents.

:class:`ToolStepper` holds what one step needs: the model, the run context, the tools and the parser for their
calls, and the run's search state. It runs a sample's tool calls (bounded, budgeted, every failure a recorded tool
error), records the step as nodes and pools the candidates, and picks the sample that continues. It has no loop:
:class:`harness.runtime.agent.SRAgent` adds the R-C-L-K run, :class:`harness.runtime.role_agent.RoleAgent` a
role's tool steps and answer.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from typing import Any, Callable

from harness.core.candidates import Candidate, dedupe
from harness.core.context import AgentContext, BudgetExhausted, RunStatus
from harness.llm.base import LLMClient, LLMResponse, ToolCall
from harness.llm.protocols import BaseParser, NativeToolParser, make_parser
from harness.runtime.agent_config import AgentConfig, Iteration, Sample
from harness.runtime.nodes import NodeKind, NodeType
from harness.runtime.state import SearchRunState
from harness.tools.base import TOOLS, BaseTool, ToolCallResult, ToolRunAbort, bound_text

log = logging.getLogger(__name__)


def default_tools() -> list[str]:
    """SR search, expression evaluation, and every registered analysis tool."""
    _register_tools()
    names = ["run_sr_search", "evaluate_expression"]
    try:
        from harness.tools import analysis_tools
    except ImportError:  # analysis tools are optional for the agent
        return names
    for obj in vars(analysis_tools).values():
        if isinstance(obj, type) and issubclass(obj, BaseTool) and obj.name and obj.name not in names:
            names.append(obj.name)
    return names


def _register_tools() -> None:
    """Import the tool modules so their tools are in TOOLS (each registers on import)."""
    for module in ("harness.sr.tools", "harness.tools.analysis_tools", "harness.tools.code_tools"):
        try:
            __import__(module)
        except ImportError as exc:
            log.debug("tool module %s not available: %s", module, exc)


class _Stop(Exception):
    """Internal: ends the whole run with a status."""

    def __init__(self, status: RunStatus, error: str | None = None):
        super().__init__(error or status)
        self.status = status
        self.error = error


class ToolStepper:
    """Tool calls of one step: run, record, choose (see the module docstring)."""

    # kind of the nodes its steps record (a role agent records its role's tool steps)
    node_kind = NodeKind.of(NodeType.AGENT_STEP)

    def __init__(
        self,
        llm: LLMClient,
        context: AgentContext,
        config: AgentConfig | None = None,
        *,
        tools: dict[str, BaseTool] | None = None,
        on_node: Callable[[Any], None] | None = None,
        state: SearchRunState | None = None,
    ):
        self.llm = llm
        self.context = context
        self.config = config or AgentConfig()
        self.tools = tools if tools is not None else self._make_tools()
        self.parser: BaseParser = make_parser(self.config.parser)
        self.on_node = on_node  # progress callback (the CLI prints with it)
        self.state = state
        self._stop: _Stop | None = None  # set by a tool that ends the run; a loop raises it at its next check
        self._lock = threading.Lock()
        spec = self.parser.format_tools(list(self.tools.values()))
        self._tool_system: str = spec.get("system", "")
        self._tool_kwargs: dict[str, Any] = dict(spec.get("kwargs", {}))
        if self.config.tool_choice is not None and "tools" in self._tool_kwargs:
            self._tool_kwargs["tool_choice"] = self.config.tool_choice

    def _make_tools(self) -> dict[str, BaseTool]:
        names = self.config.tools if self.config.tools is not None else default_tools()
        if any(n not in TOOLS.names() for n in names):
            _register_tools()
        return TOOLS.create(list(names), self.context)

    def execute_tool_calls(self, it: Iteration, sample: Sample) -> Sample:
        """Parse the tool calls of one sample and run them (at most ``max_tool_calls_per_response``)."""
        response = sample.response
        if response.error:
            sample.error = f"response error: {response.error}"
            return sample
        try:
            outcome = self.parser.parse(response)
            sample.calls, sample.parse_errors = list(outcome.calls), list(outcome.errors)
        except Exception as exc:  # a parser bug is one more parse error, never a crash
            sample.parse_errors = [f"{type(exc).__name__}: {exc}"]
        if sample.parse_errors:  # malformed JSON and friends: recorded, the model is told
            sample.error = "parse error: " + "; ".join(sample.parse_errors)
        limit = self.config.max_tool_calls_per_response
        for i, call in enumerate(sample.calls):
            if i >= limit:
                sample.results.append(_failed(call, f"not run: at most {limit} tool calls per reply"))
                continue
            if self._stop is not None:
                sample.results.append(_failed(call, "not run: the run is stopping"))
                continue
            if self.context.budget.exhausted():
                sample.results.append(_failed(call, "not run: the run's budget is spent"))
                continue
            sample.results.append(self._run_tool(call))
        return sample

    def _run_tool(self, call: ToolCall) -> ToolCallResult:
        tool = self.tools.get(call.name)
        if tool is None:
            return _failed(call, f"unknown tool {call.name!r}; available: {', '.join(sorted(self.tools))}")
        if not isinstance(call.arguments, dict):
            return _failed(call, f"arguments of {call.name} must be a JSON object")
        self.context.budget.add_tool()
        try:
            result = tool(call_id=call.id, **call.arguments)
        except ToolRunAbort as exc:
            self._stop = self._stop or _Stop(RunStatus.CANCELLED, f"ToolRunAbort: {exc}")
            return _failed(call, f"run aborted: {exc}")
        if not result.ok and (result.error or "").startswith(BudgetExhausted.__name__):
            # a solver refused to start for lack of budget: the run is over even if a little time is left
            self._stop = self._stop or _Stop(RunStatus.BUDGET_EXHAUSTED, result.error)
        return result

    def record_search_iteration(self, it: Iteration) -> None:
        """One node per sample, with its tool results and candidates (they enter the global pool)."""
        cfg = self.config
        seconds = time.perf_counter() - it.started
        for sample in it.samples:
            sample.candidates = self.candidates_from_results(sample.results)
            resp = sample.response
            node = self.state.add_node(
                self.node_kind,
                at=it.at(sample.k),
                parent=it.parent,
                branch=it.branch,
                messages=it.messages,
                response=_response_text(resp),
                tool_results=sample.results,
                candidates=sample.candidates,
                prompt_tokens=resp.prompt_tokens or 0,
                completion_tokens=resp.completion_tokens or 0,
                seconds=seconds / max(1, len(it.samples)),
                error=sample.error,
                info={"finish_reason": resp.finish_reason, "n_tool_calls": len(sample.calls), "shape": _shape(cfg)},
            )
            sample.node_id = node.id
            self._notify(node)

    def _notify(self, node: Any) -> None:
        if self.on_node is not None:
            try:
                self.on_node(node)
            except Exception:  # a printing problem never stops a run
                log.debug("on_node callback failed", exc_info=True)

    def collect_candidates(self, it: Iteration) -> None:
        """Choose the sample that continues: best candidate, else the first that called a tool, else the first."""
        scored = [s for s in it.samples if s.candidates]
        if scored:
            it.chosen = min(scored, key=lambda s: (s.best_key(), s.k))
        else:
            it.chosen = next((s for s in it.samples if s.results), it.samples[0] if it.samples else None)

    @staticmethod
    def candidates_from_results(results: list[ToolCallResult]) -> list[Candidate]:
        """Candidates in successful tool results: a Candidate, a record, a list, or a dict with ``candidates``."""
        found: list[Candidate] = []
        for res in results:
            if res.ok:
                found += _extract_candidates(res.result)
        return dedupe(found)

    def _assistant_message(self, sample: Sample) -> dict[str, Any]:
        """The assistant turn as the parser expects it back.

        Native calls are written from the parsed calls (not the raw response) so that every ``tool`` message
        answers a ``tool_calls`` entry, also when the calls came from tags in the text.
        """
        if not isinstance(self.parser, NativeToolParser):
            return self.parser.format_assistant_message(sample.response)
        return {
            "role": "assistant",
            "content": sample.response.text or None,
            "tool_calls": [call.to_openai() for call in sample.calls],
        }

    def _record_failure(self, it: Iteration, error: str, seconds: float) -> None:
        node = self.state.add_node(
            self.node_kind,
            at=it.at(),
            parent=it.parent,
            branch=it.branch,
            messages=it.messages,
            seconds=seconds,
            error=error,
        )
        self._notify(node)


def _failed(call: ToolCall, message: str) -> ToolCallResult:
    return ToolCallResult(
        tool_name=call.name,
        ok=False,
        error=message,
        result_str=bound_text(f"Error: {message}"),
        call_id=call.id,
        arguments=call.arguments if isinstance(call.arguments, dict) else {},
    )


def _extract_candidates(obj: Any) -> list[Candidate]:
    if isinstance(obj, Candidate):
        return [obj]
    if isinstance(obj, (list, tuple)):
        return [c for item in obj for c in _extract_candidates(item)]
    if isinstance(obj, dict):
        if {"expression", "equation", "complexity"} <= obj.keys():
            try:
                return [Candidate.from_record(obj)]
            except (KeyError, TypeError, ValueError):
                return []
        out: list[Candidate] = []
        for key in ("candidate", "candidates", "best", "front"):
            if key in obj:
                out += _extract_candidates(obj[key])
        return out
    return []


def _response_text(response: LLMResponse) -> str:
    """Reply text plus its native tool calls, for the trace."""
    text = response.text or ""
    calls = getattr(response, "tool_calls", None) or []
    if calls:
        rendered = [{"name": c.name, "arguments": c.arguments} for c in calls]
        text += "\n[tool_calls] " + json.dumps(rendered, default=str)
    return text


def _shape(cfg: AgentConfig) -> list[int]:
    return [cfg.R, cfg.C, cfg.L, cfg.K]
