"""The general SR agent: an R-C-L-K search over tool-calling conversations (SRHarness style).

R restarts, each seeded with the best equations found so far; C independent conversation branches per restart
(copies of the same initial buffer); L refinement steps per branch; K samples per step, all executed and
recorded, the one that produced the best candidate continuing the conversation. At most R*C*L*K model responses.

One step runs the lifecycle ``prepare_iteration -> prepare_model_messages -> request_llm -> execute_tool_calls ->
record_search_iteration -> collect_candidates -> update_conversation -> finish_iteration``; each is a method so a
subclass can change one stage (the tool-call stages are :class:`harness.runtime.tool_steps.ToolStepper`'s, which
the role agents share). Every failure mode ends in a recorded node and, at worst, a clean stop with the
work kept: ``result.json`` is always written.
"""

from __future__ import annotations

import copy
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable

from harness.core.context import AgentContext, RunStatus
from harness.llm.base import LLMClient, LLMError, LLMResponse
from harness.runtime.agent_config import (
    CONTINUE,
    NUDGE,
    PARSE_ERROR,
    AgentConfig,
    AgentResult,
    Iteration,
    Sample,
)
from harness.runtime.interaction import RunControl, add_user_text
from harness.runtime.state import SearchRunState
from harness.runtime.tool_steps import ToolStepper, _Stop
from harness.tools.base import BaseTool

log = logging.getLogger(__name__)


class SRAgent(ToolStepper):
    """R-C-L-K tool-calling agent over one task (see module docstring): the loop over :class:`ToolStepper`'s
    steps."""

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
        control: RunControl | None = None,
    ):
        super().__init__(llm, context, config, tools=tools, on_node=on_node)
        self.control = control  # user messages and pause / resume / stop, taken at the step boundaries
        self.run_dir = Path(run_dir) if run_dir is not None else context.workspace
        self.run_info = dict(run_info or {})  # extra provenance for run.json (e.g. the CLI config)
        self._llm_calls_before = context.budget.llm_calls  # the budget counts responses; this run's = the rise

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
        if self.control is not None:
            self.control.bind(self.context.cancel_event, self._record_user, self.context.budget)
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
        if self.control is not None:
            self.control.close()
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
        l = steps = 0
        while steps < self.config.L:
            self._check_stop()
            self._boundary(buffer)
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
            l, steps = l + 1, steps + (0 if it.replied else 1)

    def _check_stop(self) -> None:
        """Raise the pending stop, or a new one for cancellation or a spent budget."""
        if self._stop is not None:
            raise self._stop
        if self.context.cancelled() or (self.control is not None and self.control.stop_requested):
            self._stop = _Stop(RunStatus.CANCELLED, "stopped by the user" if self.control and
                               self.control.stop_requested else "run cancelled")
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
                seed = None if cfg.seed is None else cfg.seed + self.responses  # counted as they arrive
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
            self._record_failure(it, f"LLMError: {exc}", time.perf_counter() - start)
            self._stop = self._stop or _Stop(RunStatus.FAILED_LLM, f"LLMError: {exc}")
            raise self._stop from None
        if not responses:
            self._record_failure(it, "the model returned no response", time.perf_counter() - start)
            self._stop = self._stop or _Stop(RunStatus.FAILED_LLM, "the model returned no response")
            raise self._stop
        return responses

    @property
    def responses(self) -> int:
        """Model responses of this run, read from the one LLM-call counter (the budget; a tool that calls the
        model, such as ``llm_equation_search``, counts there too)."""
        return self.context.budget.llm_calls - self._llm_calls_before

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
        elif not sample.results and self.config.interactive and self.control is not None:
            texts = self.control.wait_for_message(it.branch)  # the model has spoken: the user's turn
            self._check_stop()
            if texts:
                add_user_text(it.buffer, texts)
                it.replied = True
                return
            note = NUDGE.format(tools=", ".join(sorted(self.tools))) + "\n"  # no more input: as without a user
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
    def _boundary(self, buffer: list[dict[str, Any]]) -> None:
        """A safe boundary (before a step): park while paused, stop if asked, hand the queued messages over."""
        if self.control is None:
            return
        texts = self.control.checkpoint("agent step")
        self._check_stop()
        add_user_text(buffer, texts)

    def _record_user(self, kind: str, **fields: Any) -> Any:
        """Record a user message or control, hung off the latest node."""
        last = self.state.nodes[-1].id if self.state.nodes else None
        node = self.state.add_node(kind, parent=last, **fields)
        self._notify(node)
        return node

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


