"""The general SR agent: an R-C-L-K search over tool-calling conversations (SRHarness style).

R restarts, each seeded with the best equations found so far; C independent conversation branches per restart
(copies of the same initial buffer); L refinement steps per branch; K samples per step, all executed and
recorded, the one that produced the best candidate continuing the conversation. At most R*C*L*K model responses.

One step runs the lifecycle ``prepare_iteration -> prepare_model_messages -> request_llm -> execute_tool_calls ->
record_search_iteration -> collect_candidates -> update_conversation -> finish_iteration``; each is a method so a
subclass can change one stage. Every failure mode ends in a recorded node and, at worst, a clean stop with the
work kept: ``result.json`` is always written.
"""

from __future__ import annotations

import copy
import json
import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable

from harness.engine.candidates import Candidate, dedupe
from harness.engine.context import AgentContext, BudgetExhausted, RunStatus
from harness.llm.base import LLMClient, LLMError, LLMResponse, ToolCall
from harness.llm.protocols import BaseParser, NativeToolParser, make_parser
from harness.runtime.agent_config import (
    CONTINUE,
    NUDGE,
    PARSE_ERROR,
    AgentConfig,
    AgentResult,
    Iteration,
    Sample,
)
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


class SRAgent:
    """R-C-L-K tool-calling agent over one task (see module docstring)."""

    node_kind = "agent_step"  # kind of the nodes its steps record (a role agent records its role's tool steps)

    def __init__(
        self,
        llm: LLMClient,
        context: AgentContext,
        config: AgentConfig | None = None,
        *,
        run_dir: str | Path | None = None,
        tools: dict[str, BaseTool] | None = None,
        on_node: Callable[[Any], None] | None = None,
        run_info: dict[str, Any] | None = None,
    ):
        self.llm = llm
        self.context = context
        self.config = config or AgentConfig()
        self.run_dir = Path(run_dir) if run_dir is not None else context.workspace
        self.tools = tools if tools is not None else self._make_tools()
        self.parser: BaseParser = make_parser(self.config.parser)
        self.on_node = on_node  # progress callback (the CLI prints with it)
        self.run_info = dict(run_info or {})  # extra provenance for run.json (e.g. the CLI config)
        self.state: SearchRunState | None = None
        self.responses = 0
        self._stop: _Stop | None = None
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

    # -- the run --------------------------------------------------------------------------------------------
    def run(self) -> AgentResult:
        """Run all restarts and branches until done, target reached, budget spent, abort or dead model."""
        cfg = self.config
        self.state = SearchRunState(
            self.run_dir,
            budget=self.context.budget,
            task=self.context.task,
            config={"agent": cfg.model_dump(), "tools": sorted(self.tools), **self.run_info},
        )
        self.context.state = self.state
        status, error = RunStatus.COMPLETED, None
        try:
            for r in range(cfg.R):
                self._check_stop()
                initial = self.create_initial_buffer(r)
                self._run_branches(r, initial)
        except _Stop as stop:
            status, error = stop.status, stop.error
        except Exception as exc:  # a bug must not lose the work done: record it, write the result
            log.exception("agent run failed")
            status, error = RunStatus.FAILED, f"{type(exc).__name__}: {exc}"
        result = self.state.finish(status, error)
        return AgentResult(
            best=self.state.best(),
            front=self.state.front(),
            status=status,
            counts=result["counts"],
            run_dir=self.run_dir,
            error=error,
            responses=self.responses,
            result=result,
        )

    def _run_branches(self, r: int, initial: list[dict[str, Any]]) -> None:
        branches = range(self.config.C)
        if self.config.branch_workers <= 1 or self.config.C == 1:
            for c in branches:
                self._run_branch(r, c, initial)
            return
        with ThreadPoolExecutor(max_workers=self.config.branch_workers) as pool:
            futures = [pool.submit(self._run_branch, r, c, initial) for c in branches]
            for fut in futures:
                try:
                    fut.result()
                except _Stop as stop:  # the first stop wins; the other branches see it and end
                    self._stop = self._stop or stop
        self._check_stop()

    def _run_branch(self, r: int, c: int, initial: list[dict[str, Any]]) -> None:
        buffer = copy.deepcopy(initial)
        parent: int | None = None
        for l in range(self.config.L):
            self._check_stop()
            it = self.prepare_iteration(r, c, l, buffer, parent)
            it.messages = self.prepare_model_messages(it)
            responses = self.request_llm(it)
            for k, response in enumerate(responses):
                it.samples.append(self.execute_tool_calls(it, Sample(k=k, response=response)))
            self.record_search_iteration(it)
            self.collect_candidates(it)
            self.update_conversation(it)
            parent = it.chosen.node_id if it.chosen else parent
            self.finish_iteration(it)

    def _check_stop(self) -> None:
        """Raise the pending stop, or a new one for cancellation or a spent budget."""
        if self._stop is not None:
            raise self._stop
        if self.context.cancelled():
            self._stop = _Stop(RunStatus.CANCELLED, "run cancelled")
        elif (reason := self.context.budget.exhausted()) is not None:
            self._stop = _Stop(RunStatus.BUDGET_EXHAUSTED, reason)
        if self._stop is not None:
            raise self._stop

    # -- lifecycle stages -----------------------------------------------------------------------------------
    def create_initial_buffer(self, r: int) -> list[dict[str, Any]]:
        """System prompt (plus tool instructions for text parsers) and the task; restarts add the top candidates."""
        system = self.config.system_prompt
        if self._tool_system:
            system = f"{system}\n\n{self._tool_system}"
        user = [self.context.task.card()]
        top = self.state.top(self.config.restart_top_k) if r > 0 and self.state else []
        if top:
            user.append("Best equations found in earlier attempts (validation NMSE, complexity):")
            split = self.state.split
            user += [f"- {c.equation}  [nmse={c.metric(split):.3g}, complexity={c.complexity}]" for c in top]
            user.append("Start from these: improve them or find a better structure.")
        else:
            user.append("Find the equation. Start with a search or with a hypothesis you can test.")
        return [{"role": "system", "content": system}, {"role": "user", "content": "\n\n".join(user)}]

    def prepare_iteration(
        self, r: int, c: int, l: int, buffer: list[dict[str, Any]], parent: int | None
    ) -> Iteration:
        return Iteration(r=r, c=c, l=l, buffer=buffer, parent=parent)

    def prepare_model_messages(self, it: Iteration) -> list[dict[str, Any]]:
        """The messages sent to the model: a copy of the branch buffer, so later edits do not leak into traces."""
        return copy.deepcopy(it.buffer)

    def request_llm(self, it: Iteration) -> list[LLMResponse]:
        """K samples, with n=K in one call (repeated calls when a client returns fewer); counted in the budget.

        A dead model (LLMError after the client's retries) is recorded as a failed node and ends the run.
        """
        cfg = self.config
        responses: list[LLMResponse] = []
        start = time.perf_counter()
        try:
            while len(responses) < cfg.K:
                seed = None if cfg.seed is None else cfg.seed + self.responses + len(responses)
                got = self.llm.complete(
                    it.messages,
                    **self._tool_kwargs,
                    n=cfg.K - len(responses),
                    temperature=cfg.temperature,
                    max_tokens=cfg.max_tokens,
                    seed=seed,
                )
                got = list(got)[: cfg.K - len(responses)]
                if not got:
                    break
                responses += got
                self.context.budget.add_llm(
                    calls=len(got), tokens=sum(int(g.prompt_tokens or 0) + int(g.completion_tokens or 0) for g in got)
                )
        except LLMError as exc:
            self._count(len(responses))
            self._record_failure(it, f"LLMError: {exc}", time.perf_counter() - start)
            self._stop = self._stop or _Stop(RunStatus.FAILED_LLM, f"LLMError: {exc}")
            raise self._stop from None
        self._count(len(responses))
        if not responses:
            self._record_failure(it, "the model returned no response", time.perf_counter() - start)
            self._stop = self._stop or _Stop(RunStatus.FAILED_LLM, "the model returned no response")
            raise self._stop
        return responses

    def _count(self, n: int) -> None:
        with self._lock:
            self.responses += n

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
                R=it.r,
                C=it.c,
                L=it.l,
                K=sample.k,
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

    def update_conversation(self, it: Iteration) -> None:
        """Append the chosen sample's reply and tool results (or a nudge / parse error note) to the branch."""
        sample = it.chosen
        if sample is None:
            return
        if sample.results:
            it.buffer.append(self._assistant_message(sample))
            it.buffer += list(self.parser.format_tool_result_messages(sample.results))
        else:
            it.buffer.append({"role": "assistant", "content": sample.response.text or ""})
        note = ""
        if sample.parse_errors:
            note = PARSE_ERROR.format(error="; ".join(sample.parse_errors)[:500]) + "\n"
        elif not sample.results:
            note = NUDGE.format(tools=", ".join(sorted(self.tools))) + "\n"
        if it.l + 1 < self.config.L:
            progress = self.state.progress_summary(self.config.progress_chars)
            text = CONTINUE.format(step=it.l + 2, steps=self.config.L, progress=progress)
            it.buffer.append({"role": "user", "content": note + text})

    def finish_iteration(self, it: Iteration) -> None:
        """Stop the run on abort, reached target, cancellation or spent budget."""
        if self._stop is not None:
            raise self._stop
        if self.target_reached():
            self._stop = _Stop(RunStatus.TARGET_REACHED)
        self._check_stop()

    # -- helpers --------------------------------------------------------------------------------------------
    def target_reached(self) -> bool:
        best = self.state.best() if self.state else None
        if best is None:
            return False
        cfg = self.config
        if cfg.target_nmse is not None and best.metric("valid", "nmse") <= cfg.target_nmse:
            return True
        if cfg.target_acc:
            value = best.metrics.get("valid", {}).get(cfg.target_acc)
            return value is not None and value >= 1
        return False

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
            R=it.r,
            C=it.c,
            L=it.l,
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
