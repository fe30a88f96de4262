"""One contract, every implementation: each registered SR backend, LLM client provider and tool-call parser is run
through the same checks, read from the registries (``BACKENDS``, ``BUILTIN_PROVIDERS``, ``PARSERS``), so a new one
is covered without editing this file; and every package's public face (``__all__``) resolves."""

from __future__ import annotations

import contextlib
import importlib
import json
import math

import numpy as np
import pytest

import harness.sr.tools  # noqa: F401  (registers the tools)
from harness.core.context import AgentContext
from harness.core.task import Task
from harness.llm.base import CompletionRequest, LLMClient, LLMError, LLMResponse, SeedCounter, ToolCall
from harness.llm.config import BUILTIN_PROVIDERS
from harness.llm.factory import make_llm
from harness.llm.protocols import PARSERS, make_parser
from harness.sr.backends import BACKENDS, run_search
from harness.tools.base import ToolCallResult
from tests.doubles import SCRIPTED, ScriptedLLM
from tests.fake_llm_servers import FakeServer, completion, fake_vllm

USER = [{"role": "user", "content": "Say ok."}]
FIT_TOOL = {"type": "function", "function": {"name": "fit_expression", "description": "Fit an expression.",
                                             "parameters": {"type": "object", "properties": {
                                                 "expression": {"type": "string"}}, "required": ["expression"]}}}
PACKAGES = ["harness", "harness.core", "harness.llm", "harness.sr", "harness.tools", "harness.runtime", "harness.app",
            "workflows", "optimize", "benchmarks"]


@pytest.mark.parametrize("package", PACKAGES)
def test_every_package_names_its_public_api_and_every_name_resolves(package: str) -> None:
    module = importlib.import_module(package)
    assert module.__all__, f"{package} has no __all__"
    missing = [name for name in module.__all__ if not hasattr(module, name)]
    assert not missing, f"{package}.__all__ names what it does not have: {missing}"


# -- SR backends ---------------------------------------------------------------------------------------------------
def _task() -> Task:
    rng = np.random.default_rng(0)
    X = rng.uniform(0.5, 2.0, (150, 2))
    return Task.from_arrays(X, 2.0 * X[:, 0] * X[:, 1] + 1.0, name="contract", input_names=["x", "v"])


@pytest.mark.parametrize("backend", sorted(BACKENDS))
def test_every_sr_backend_returns_scored_candidates_or_says_why_it_cannot_run(backend: str) -> None:
    reply = json.dumps({"equations": [{"expression": "c0*x*v + c1", "reason": "a product"}]})
    ctx = AgentContext(_task(), llm=ScriptedLLM([reply], cycle=True))
    out = run_search({"time_budget": 1, "generations": 3, "population_size": 40}, ctx, backend=backend)
    assert ctx.budget.solver_runs == 1  # every run is charged, whatever its outcome
    if out.error is not None:  # an engine that cannot run here (PySR without Julia) says so, with what to install
        assert "unavailable" in out.error and ("install" in out.error or "Julia" in out.error), out.error
        assert not out.candidates
        return
    assert out.backend_used and out.candidates
    for cand in out.candidates:
        assert cand.expression and math.isfinite(cand.metric("train", "nmse")), cand
    assert out.best is not None and out.best.metric("valid") < 1e-6  # the law is in every engine's reach


# -- LLM clients ---------------------------------------------------------------------------------------------------
def _client(provider: str, monkeypatch: pytest.MonkeyPatch, stack: contextlib.ExitStack) -> LLMClient:
    """The provider's client, running here: the embedded tiny model, a local OpenAI-compatible server, vLLM behind
    a fake module (no GPU), the scripted test double."""
    if provider == "local":
        return make_llm({"provider": "local", "model": "smollm2-135m-instruct", "max_tokens": 16})
    if provider == "openai":
        server = stack.enter_context(FakeServer(lambda body, i: (200, completion("ok", n=body.get("n", 1)), 0)))
        return make_llm({"provider": "openai", "model": "m", "base_url": server.base_url, "max_retries": 0})
    if provider == "vllm":
        fake_vllm(monkeypatch, new_api=True)
        return make_llm({"provider": "vllm", "model": "m"})
    if provider == SCRIPTED:
        return make_llm({"provider": SCRIPTED, "extra": {"fn": lambda messages, **request: "ok"}})
    raise AssertionError(f"no way to run LLM provider {provider!r} here: add it to _client")


PROVIDERS = [pytest.param(p, marks=pytest.mark.llm) if p == "local" else p for p in sorted(BUILTIN_PROVIDERS)]


@pytest.mark.parametrize("provider", [*PROVIDERS, SCRIPTED])
def test_every_llm_client_keeps_the_one_contract(provider: str, monkeypatch: pytest.MonkeyPatch) -> None:
    with contextlib.ExitStack() as stack:
        client = _client(provider, monkeypatch, stack)
        assert isinstance(client, LLMClient) and isinstance(client.seeds, SeedCounter)
        responses = client.complete(USER, n=2, max_tokens=16)
        assert len(responses) == 2 and all(isinstance(r, LLMResponse) and r.ok for r in responses)
        assert all(isinstance(r.text, str) for r in responses)
        assert client.usage.calls == 1 and client.usage.responses == 2
        [again] = client.send(CompletionRequest(USER, max_tokens=16, seed=5))  # the request object goes in as is
        assert again.ok
        with pytest.raises(LLMError, match="no time left"):  # a spent deadline is refused before any work
            client.complete(USER, timeout_s=0)
        assert client.usage.failures == 1 and client.usage.calls == 3
        client.close()


# -- tool-call parsers ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", sorted(PARSERS))
def test_every_tool_call_parser_keeps_the_one_contract(name: str) -> None:
    parser = make_parser(name)
    messages, kwargs = parser.prepare(list(USER), [FIT_TOOL])
    assert messages and all("role" in m for m in messages) and isinstance(kwargs, dict)
    assert "fit_expression" in json.dumps(messages) + json.dumps(kwargs)  # the model is told of the tool somewhere
    assert parser.parse(LLMResponse(text="No tool needed.")).calls == []
    broken = LLMResponse(text='<tool_call>{"name": "fit_expression", "arguments": {"expression": </tool_call>',
                         tool_calls=[ToolCall(id="1", name="fit_expression", parse_error="invalid JSON")])
    outcome = parser.parse(broken)
    assert all(call.arguments for call in outcome.calls)  # arguments are never invented for a broken call
    result = ToolCallResult(tool_name="fit_expression", ok=True, result={"nmse": 0.25}, result_str="nmse 0.25",
                            call_id="1", arguments={"expression": "x"})
    replies = parser.format_tool_result_messages([result])
    assert replies and "0.25" in json.dumps(replies)
