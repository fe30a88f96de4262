"""The evolution channel, in LLM-SR's manner: many short model calls, each proposing equation skeletons from the
pool's best so far (an :class:`~harness.sr.llm_generator.ExperienceBuffer`), constants fitted by our evaluator.

Why beside the guided SR runs: on a one-model machine the model is idle while the engine runs a plan, and the
solve ends when those runs end. So a round starts only while a guided run is going and only when the rounds so
far suggest it ends before the running ones do (:class:`GuidedWindow`); the channel then adds proposals at no extra
wall time; each call is also capped at the window's end, and an answer cut there keeps its complete equations.
The prompt opens with the roles' task frame (a prefix the model has already read on this task). Every round is an ``evolve`` node holding its fitted candidates, which join the pool (selection and the
term combination see them); rejected proposals and their reasons reach the next round's prompt through the buffer.
"""

from __future__ import annotations

import math
import statistics
import time

from harness.core.candidates import Candidate
from harness.core.context import BudgetExhausted
from harness.llm.base import LLMError
from harness.runtime.nodes import NodeKind, NodeType
from harness.sr.llm_generator import ExperienceBuffer, PromptShape, generate_equations
from workflows.prompting import task_frame
from workflows.run_core import WorkflowRun

POOL_SEEDS = 8  # the pool's best candidates put into the buffer before each round
MAX_TOKENS = 320  # a round is a few short JSON equations; a long answer only delays the next round
MIN_ROUND_SECONDS = 15.0  # no round starts with less of the window left (a call needs its prompt read first),
MIN_ROUND_SHARE = 0.25  # nor with less than this share of one SR run's seconds (short test and training runs)
SHOWN = 4  # best equations in the prompt (skeletons with their error: LLM-SR shows programs, not their fits)
REASON_CHARS = 60
MAX_FAILED_ROUNDS = 2  # model errors in a row before the channel gives up (a dead server must not spin)
EVOLVE_FEEDBACK = (
    "Evolve the best equations above: keep the terms that fit, then change, add or remove one term or factor "
    "(a product with a decaying exponential, a power, a saturation, a coupling of two inputs). Every proposal "
    "must differ from the equations listed; write skeletons with free constants c0, c1, ... ."
)


class EvolutionSteps(WorkflowRun):
    """The channel's loop (the run's state: :class:`workflows.run_core.WorkflowRun`; its guided runs' window:
    :class:`workflows.run_core.GuidedWindow`)."""

    def evolve(self) -> None:
        """Up to ``evolve_rounds`` rounds, each only while a guided SR run is going and expected to end first."""
        s = self.settings
        buffer = ExperienceBuffer()
        durations: list[float] = []
        parent: int | None = None
        failed = 0
        rounds = 0
        while rounds < s.evolve_rounds and not self.stopped:
            left = self.window.seconds_left()
            if left is None:
                return
            floor = min(MIN_ROUND_SECONDS, MIN_ROUND_SHARE * s.time_budget)
            need = max(floor, statistics.mean(durations) if durations else 0.0)
            if left < need:
                self.window.wait_change(timeout=max(left, 0.5))
                continue
            if self.tracker.exhausted() is not None or not self._boundary("evolution round"):
                return
            rounds += 1
            parent, seconds, ok = self._evolve_round(rounds, buffer, parent, left)
            durations.append(seconds)
            failed = 0 if ok else failed + 1
            if failed >= MAX_FAILED_ROUNDS:
                self._error(f"evolution stopped after {failed} failed rounds")
                return

    def _evolve_round(self, round_no: int, buffer: ExperienceBuffer, parent: int | None,
                      seconds_left: float) -> tuple[int, float, bool]:
        """One model call from the pool's best, capped at ``seconds_left``; returns the round's node, its seconds
        and whether the model answered."""
        for cand in self._pool_best():
            buffer.add(cand)
        feedback = EVOLVE_FEEDBACK
        if self.guidance:
            feedback += "\nGuidance from the user: " + " ".join(self.guidance)[-600:]
        t0 = time.perf_counter()
        calls0 = self.tracker.llm_calls
        found: list[Candidate] = []
        error = None
        try:
            shape = PromptShape(frame=task_frame(self.ctx.task), best=SHOWN, fitted=False, rejections=3,
                                reason_chars=REASON_CHARS)
            found = generate_equations(self.ctx, n=self.settings.evolve_proposals, feedback=feedback,
                                       buffer=buffer, repair=False, max_tokens=MAX_TOKENS, shape=shape,
                                       timeout_s=seconds_left)
        except (LLMError, BudgetExhausted) as exc:
            error = f"{type(exc).__name__}: {exc}"[:300]
            self._error(f"evolution round {round_no}: {error}")
        if parent is None:
            parent = max((n.id for n in self.state.nodes if n.type is NodeType.SR), default=None)
        best = found[0] if found else None
        seconds = time.perf_counter() - t0
        node = self._record(
            NodeKind.of(NodeType.EVOLVE), parent=parent, branch="evolution", candidates=found,
            seconds=seconds, error=error,
            info={"round": round_no, "llm_calls": self.tracker.llm_calls - calls0, "fitted": len(found),
                  "best": best.equation if best is not None else None,
                  "best_valid_nmse": best.metric("valid") if best is not None else None,
                  "rejections": [r.line() for r in buffer.rejections[-4:]]},
        )
        return node, seconds, error is None

    def _pool_best(self) -> list[Candidate]:
        """The pool's best candidates with a finite validation error (what the next proposals start from)."""
        usable = [c for c in self.state.candidates if math.isfinite(c.metric("valid"))]
        return sorted(usable, key=lambda c: c.sort_key())[:POOL_SEEDS]
