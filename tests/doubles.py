"""Test doubles, in one module that production code never imports (an import contract checks it).

- :class:`ScriptedLLM`: replays given responses or calls a Python function, and records every request (like
  pydantic-ai's ``FunctionModel``). Configs plug it in by import path: ``provider: tests.doubles.ScriptedLLM``
  (``SCRIPTED``), ``tests/conf/llm/scripted.yaml`` for the CLIs (``HYDRA_TEST_CONF`` adds that folder).
- :func:`scripted_role_output`: valid JSON for every role, so a whole workflow runs without a model.
- The toy (``toy_tasks``, ``respond``): a seeded task family on which harness optimization provably helps.
  Every toy task is ``y = a*sin(x0) + b*x1**2``. With an arithmetic-only SR floor (``TOY_SR_FLOOR``) an unguided
  engine cannot write ``sin`` (and the toy runs without term combination, whose least-squares sums of the
  engine's polynomial terms can stand in for ``sin`` within 1% on the toy's range); the Planner writes the good plan only when its instruction holds ``PHRASE`` or
  the conversation carries the Analyst's ``HINT``; the prompt engineer / reflection model adds ``PHRASE``. So
  stage 1 and 3 should find the phrase, stage 2 should switch the Analyst on, and the frozen harness solves
  unseen toy tasks.
"""

from __future__ import annotations

import copy
import importlib
import json
import re
import threading
import time
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
from pydantic import BaseModel

from harness.core.task import Task
from harness.llm.base import CompletionRequest, LLMClient, LLMError, LLMResponse, ToolCall
from harness.llm.config import LLMConfig
from workflows.roles import ROLE_NAMES, AnalystOutput, DiagnosisOutput, output_model

SCRIPTED = "tests.doubles.ScriptedLLM"
TEST_CONF = Path(__file__).resolve().parent / "conf"
HYDRA_TEST_CONF = f"hydra.searchpath=[file://{TEST_CONF}]"  # CLI override: finds llm=scripted, benchmark=toy


def resolve_callable(path: str) -> Any:
    """``"package.module:function"`` (or dotted) -> the function."""
    module, _, name = path.partition(":")
    if not name:
        module, _, name = path.rpartition(".")
    return getattr(importlib.import_module(module), name)


# -- scripted model ---------------------------------------------------------------------------------------------
ScriptFn = Callable[..., "str | LLMResponse | dict[str, Any]"]


def to_response(item: Any) -> LLMResponse:
    """Turn a script item into an :class:`LLMResponse`.

    Strings become the text; dicts may hold ``text``, ``tool_calls`` (``{"name", "arguments", "id"?}`` or OpenAI
    format), ``finish_reason`` and the token counts.
    """
    if isinstance(item, LLMResponse):
        return copy.deepcopy(item)
    if isinstance(item, str):
        return LLMResponse(text=item, finish_reason="stop")
    if isinstance(item, dict):
        calls = []
        for k, raw in enumerate(item.get("tool_calls") or []):
            fn = raw.get("function", raw)
            args = fn.get("arguments") or {}
            if isinstance(args, str):
                args = json.loads(args)
            calls.append(ToolCall(id=raw.get("id") or f"call_scripted_{k}", name=fn["name"], arguments=args))
        return LLMResponse(
            text=item.get("text", item.get("content")) or "",
            tool_calls=calls,
            finish_reason=item.get("finish_reason", "tool_calls" if calls else "stop"),
            prompt_tokens=int(item.get("prompt_tokens", 0)),
            completion_tokens=int(item.get("completion_tokens", 0)),
        )
    raise TypeError(f"cannot use {item!r} as a scripted response")


class ScriptedLLM(LLMClient):
    """Replays ``responses`` in order (one per sample) or answers with ``fn(messages, **request)``.

    A script item that is an exception is raised (an :class:`LLMError` as is, anything else wrapped), to test
    failure paths. When the script runs out an :class:`LLMError` is raised, unless ``cycle`` is set.
    """

    provider = "scripted"

    def __init__(
        self,
        responses: Sequence[Any] | None = None,
        *,
        fn: ScriptFn | None = None,
        cycle: bool = False,
    ) -> None:
        super().__init__()
        if (responses is None) == (fn is None):
            raise ValueError("ScriptedLLM needs exactly one of responses= or fn=")
        self._script = list(responses or [])
        self._fn = fn
        self._cycle = cycle
        self._pos = 0
        self._lock = threading.Lock()
        self.requests: list[dict[str, Any]] = []

    @classmethod
    def from_config(cls, config: LLMConfig) -> "ScriptedLLM":
        """``extra.responses`` to replay, or ``extra.fn`` (a function or ``"package.module:function"``); neither:
        :func:`scripted_role_output`, valid JSON for every role."""
        extra = config.extra
        fn, responses = extra.get("fn"), extra.get("responses")
        if isinstance(fn, str):
            fn = resolve_callable(fn)
        if fn is None and responses is None:
            fn = scripted_role_output
        return cls(responses, fn=fn, cycle=bool(extra.get("cycle", False)))

    @property
    def description(self) -> str:
        return "scripted test model"

    @property
    def remaining(self) -> int:
        return max(0, len(self._script) - self._pos) if not self._cycle else len(self._script)

    def _next_item(self) -> Any:
        with self._lock:
            if self._pos >= len(self._script):
                if not self._cycle or not self._script:
                    raise LLMError(f"scripted model: script exhausted after {self._pos} responses")
                self._pos = 0
            item = self._script[self._pos]
            self._pos += 1
            return item

    def _complete(self, request: CompletionRequest) -> list[LLMResponse]:
        options = request.options()
        with self._lock:
            self.requests.append({"messages": copy.deepcopy(request.messages), **copy.deepcopy(options)})
        out = []
        for i in range(request.n):
            if self._fn is not None:
                item = self._fn(request.messages, sample_index=i, **options)
            else:
                item = self._next_item()
            if isinstance(item, LLMError):
                raise item
            if isinstance(item, BaseException):
                raise LLMError(f"scripted model: {type(item).__name__}: {item}") from item
            out.append(to_response(item))
        return out


class UnusableModel(ScriptedLLM):
    """A model that cannot run on this machine: the embedded model on a CPU where neither llama.cpp kernel path
    runs (``harness.llm.cpu_kernels``); ``ready()`` says so as the real client does."""

    def ready(self) -> None:
        from harness.llm.cpu_kernels import no_kernels_message

        raise LLMError(no_kernels_message({
            "results": [{"kernels": "fast", "outcome": "killed by SIGILL"},
                        {"kernels": "portable", "outcome": "killed by SIGILL"}],
            "cpu_model": "Test Xeon", "cpu_flags": ["amx_tile", "avx512f"], "llama_cpp": "0.3.36"}))


# -- role outputs ------------------------------------------------------------------------------------------------
_ROLE_IN_SCHEMA = re.compile(r"^(" + "|".join(ROLE_NAMES) + r")_output$")
_ROLE_IN_TEXT = re.compile(r"^# Role: (" + "|".join(ROLE_NAMES) + r")\b", re.MULTILINE | re.IGNORECASE)


def detect_role(messages: list[dict[str, Any]], response_format: dict[str, Any] | None = None) -> str | None:
    """Which role a request is for: from the schema name, else from the ``# Role:`` header of the prompt."""
    name = ((response_format or {}).get("json_schema") or {}).get("name", "")
    m = _ROLE_IN_SCHEMA.match(str(name))
    if m:
        return m.group(1)
    for msg in messages:
        m = _ROLE_IN_TEXT.search(str(msg.get("content") or ""))
        if m:
            return m.group(1).lower()
    return None


_VARIABLES_LINE = re.compile(r"^Input names: (.+)$", re.MULTILINE)


def scripted_role_output(messages: list[dict[str, Any]], **request: Any) -> str | dict[str, Any]:
    """Deterministic, valid role JSON for any role prompt: the scripted provider's default behaviour.

    Plans use the inputs named in the prompt (a linear-plus-products hypothesis), so the whole workflow (plans,
    seeds, SR runs) is exercised without a model. Offered tools (a role agent's tool step), it calls the first
    one, with the same hypothesis where the tool takes an expression.
    """
    role = detect_role(messages, request.get("response_format"))
    text = "\n".join(str(m.get("content") or "") for m in messages)
    m = _VARIABLES_LINE.search(text)
    names = [n.strip() for n in m.group(1).split(",")] if m else []
    linear = " + ".join(f"c{i} * {n}" for i, n in enumerate(names[:4])) or "c0"
    if request.get("tools"):
        fn = request["tools"][0]["function"]
        takes_expression = "expression" in (fn.get("parameters") or {}).get("properties", {})
        return {"tool_calls": [{"name": fn["name"], "arguments": {"expression": linear} if takes_expression else {}}]}
    ops = ["add", "sub", "mul", "div", "square"]
    if role == "analyst":
        out: BaseModel = AnalystOutput(findings=["The target varies smoothly with the inputs."], operators=ops,
                                       hypotheses=[linear])
    elif role == "diagnoser":
        out = DiagnosisOutput(issues=["Residuals may still depend on the inputs."],
                              evidence=["See the residual diagnostics."],
                              missing_terms=[f"c9 * {names[0]}**2"] if names else [])
    elif role in ("planner", "repairer", "synthesizer"):
        cls = output_model(role)
        out = cls(rationale=f"scripted {role} plan", operators=ops, hypotheses=[linear])
    else:
        return "I do not know which role this is."
    return out.model_dump_json()


# -- a stuck engine --------------------------------------------------------------------------------------------------
STUCK_SECONDS = 40.0


def stuck_engine(plan: Any, context: Any, *, max_seconds: float) -> Any:
    """An SR engine that ignores its time budget (``workers.PROCESS_ENGINES["operon"] = "tests.doubles:stuck_engine"``
    runs it in a worker process): only the parent's deadline kill ends it before ``STUCK_SECONDS``."""
    time.sleep(STUCK_SECONDS)
    raise RuntimeError(f"the stuck engine woke after {STUCK_SECONDS:g}s: nothing killed it")


RECEIVED: list[list[dict[str, Any]]] = []  # every request seen by `recording_role_output`, oldest first


def recording_role_output(messages: list[dict[str, Any]], **request: Any) -> str | dict[str, Any]:
    """:func:`scripted_role_output`, keeping a copy of each request's messages in :data:`RECEIVED`, so an in-process
    CLI test can read every prompt the model was sent (``llm.extra={fn: tests.doubles.recording_role_output}``)."""
    RECEIVED.append(copy.deepcopy(messages))
    return scripted_role_output(messages, **request)


# -- the toy -----------------------------------------------------------------------------------------------------
PHRASE = "periodic hypothesis"
HINT = "TOY-HINT: the target looks periodic in x0 and quadratic in x1"
GOOD_SEED = "c0*sin(x0) + c1*x1**2"
GOOD_OPERATORS = ["add", "sub", "mul", "sin", "square"]
TOY_SR_FLOOR = ["add", "sub", "mul", "div"]  # the toy's SR operators: guidance has something to add
BAD_OPERATORS = ["add", "sub"]


def toy_tasks(n: int = 4, offset: int = 0, n_rows: int = 60, seed: int = 0) -> list[Task]:
    """``n`` toy tasks named ``toy_<offset+i>``; held-out sets use another ``offset`` (disjoint names)."""
    tasks = []
    for i in range(offset, offset + n):
        rng = np.random.default_rng([seed, i])
        a, b = float(rng.uniform(1.0, 3.0)), float(rng.uniform(0.5, 2.0))

        def draw(lo: float, hi: float, rows: int) -> tuple[np.ndarray, np.ndarray]:
            X = rng.uniform(lo, hi, size=(rows, 2))
            return X, a * np.sin(X[:, 0]) + b * X[:, 1] ** 2

        X, y = draw(-3.0, 3.0, n_rows)
        tasks.append(Task.from_arrays(
            X, y, name=f"toy_{i}", domain="toy", input_names=["x0", "x1"],
            input_descriptions=["angle-like input", "displacement-like input"], target_name="y",
            target_description="measured response", test_id=draw(-3.0, 3.0, n_rows // 2),
            test_ood=draw(3.0, 4.0, n_rows // 2), ground_truth=f"{a:.6g}*sin(x0) + {b:.6g}*x1**2",
        ))
    return tasks


def _text(messages: list[dict[str, Any]]) -> str:
    return "\n".join(str(m.get("content") or "") for m in messages)


def _system(messages: list[dict[str, Any]]) -> str:  # the rewrite prompts put their role in the system message
    return "\n".join(str(m.get("content") or "") for m in messages if m.get("role") == "system")


def rewrite_reply(messages: list[dict[str, Any]]) -> str:
    """The prompt engineer / reflection model: current instruction + the magic phrase."""
    user = str(messages[-1].get("content") or "")
    current = user.split("<<<", 1)[1].split(">>>", 1)[0].strip() if "<<<" in user else ""
    new = f"{current}\nAlways put the {PHRASE} (a sine of the angle-like input) among the seed equations."
    return json.dumps({"instruction": new, "rationale": "runs missed the periodic structure"})


def plan(good: bool) -> dict[str, Any]:
    """A PlanOutput-shaped plan: the right hypothesis and operators, or one that cannot fit the toy."""
    if good:
        return {"rationale": "periodic in x0, quadratic in x1", "operators": GOOD_OPERATORS,
                "hypotheses": [GOOD_SEED], "features": []}
    return {"rationale": "start with a linear model", "operators": BAD_OPERATORS, "hypotheses": [], "features": []}


def role_reply(role: str, messages: list[dict[str, Any]]) -> dict[str, Any]:
    """The toy's answer for ``role`` (the workflows.roles output schemas)."""
    if role == "analyst":
        return {"findings": [HINT], "operators": GOOD_OPERATORS, "hypotheses": []}
    if role == "diagnoser":
        return {"issues": ["the fit misses structure"], "evidence": ["residuals"], "missing_terms": []}
    good = role == "planner" and (PHRASE in _text(messages) or HINT in _text(messages))
    return plan(good)


def respond(messages: list[dict[str, Any]], **request: Any) -> str:
    """The toy's model (``llm.extra.fn: tests.doubles:respond``)."""
    system = _system(messages)
    if "prompt engineer" in system or "reflection model" in system:
        return rewrite_reply(messages)
    role = detect_role(messages, request.get("response_format")) or "planner"
    return json.dumps(role_reply(role, messages))


def respond_slow(messages: list[dict[str, Any]], **request: Any) -> str:
    """``respond`` after a short sleep, so a test can kill a run between trials."""
    time.sleep(0.2)
    return respond(messages, **request)
