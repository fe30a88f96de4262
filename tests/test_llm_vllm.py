"""The in-process vLLM client against a fake ``vllm`` module: request translation, deadlines, compact JSON."""

from __future__ import annotations

import sys
import time
import types
from typing import Any

import pytest

from harness.llm import (
    LLMError,
    json_schema_format,
    make_llm,
)

from tests.fake_llm_servers import SCHEMA, USER, fake_vllm


# -- vLLM with a fake module --------------------------------------------------------------------------------------


def test_vllm_missing_gives_install_hint(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "vllm", None)  # makes `import vllm` raise ImportError
    with pytest.raises(LLMError, match=r"pip install -e \.\[vllm\]"):
        make_llm({"provider": "vllm", "model": "Qwen/Qwen2.5-0.5B-Instruct"})


@pytest.mark.parametrize("new_api", [True, False])
def test_vllm_translation_with_fake_module(monkeypatch: pytest.MonkeyPatch, new_api: bool) -> None:
    state = fake_vllm(monkeypatch, new_api=new_api)
    client = make_llm({"provider": "vllm", "model": "m", "seed": 3, "extra": {"engine_kwargs": {"dtype": "half"}}})
    assert state["engine_kwargs"] is None  # lazy engine
    sp = client.sampling_params(n=4, temperature=0.2, max_tokens=64, seed=9, stop="END", schema=SCHEMA)
    key = "structured_outputs" if new_api else "guided_decoding"
    assert sp.kwargs[key].kwargs == {"json": SCHEMA}
    assert {k: sp.kwargs[k] for k in ("n", "temperature", "max_tokens", "seed", "stop")} == {
        "n": 4, "temperature": 0.2, "max_tokens": 64, "seed": 9, "stop": ["END"]}
    assert "structured_outputs" not in client.sampling_params().kwargs

    responses = client.complete(USER, n=2, response_format=json_schema_format(SCHEMA))
    assert len(responses) == 2 and responses[0].prompt_tokens == 5 and responses[0].completion_tokens == 2
    # no vllm.config / xgrammar in the fake: no compact-JSON setting; max_model_len follows n_ctx
    assert state["engine_kwargs"] == {"model": "m", "seed": 3, "max_model_len": 4096, "dtype": "half"}
    conv, sps, _ = state["chat_calls"][-1]
    assert "JSON schema" in conv[0][0]["content"] and sps[0].kwargs[key].kwargs["json"] == SCHEMA

    tool = {"type": "function", "function": {"name": "fit", "parameters": {"type": "object"}}}
    [r] = client.complete(USER, tools=[tool])
    assert r.tool_calls[0].name == "fit" and r.tool_calls[0].arguments == {"expression": "x"} and r.text == ""

    results = client.complete_many([{"messages": [{"role": "user", "content": f"q{i}"}]} for i in range(3)])
    assert [res[0].text for res in results] == ["q0", "q1", "q2"]
    assert len(state["chat_calls"][-1][0]) == 3  # one batched engine call
    assert client.usage.calls == 5 and client.usage.responses == 6


def test_vllm_call_past_its_deadline_after_the_engine_start_fails_cleanly(monkeypatch: pytest.MonkeyPatch) -> None:
    """Offline vLLM cannot stop a generation: one whose deadline the engine start used up is never begun."""
    fake_vllm(monkeypatch, new_api=True)
    vllm = sys.modules["vllm"]
    engine_cls = vllm.LLM

    class SlowStart(engine_cls):
        def __init__(self, **kwargs: Any) -> None:
            time.sleep(0.3)
            super().__init__(**kwargs)

    monkeypatch.setattr(vllm, "LLM", SlowStart)
    client = make_llm({"provider": "vllm", "model": "m"})
    with pytest.raises(LLMError, match="while the engine started"):
        client.complete(USER, timeout_s=0.1)
    assert client.complete(USER, timeout_s=5)[0].text  # the engine is up now: the next call runs
    assert client.usage.failures == 1


def test_vllm_engine_asks_for_compact_json_where_supported(monkeypatch: pytest.MonkeyPatch) -> None:
    """Small models fill max_tokens with newlines inside constrained JSON unless free whitespace is off."""
    import dataclasses

    fake_vllm(monkeypatch, new_api=True)

    @dataclasses.dataclass
    class StructuredOutputsConfig:
        backend: str = "auto"
        disable_any_whitespace: bool = False

    config_module = types.ModuleType("vllm.config")
    config_module.StructuredOutputsConfig = StructuredOutputsConfig
    monkeypatch.setitem(sys.modules, "vllm.config", config_module)
    monkeypatch.setitem(sys.modules, "xgrammar", types.ModuleType("xgrammar"))
    client = make_llm({"provider": "vllm", "model": "m", "n_ctx": 2048})
    kwargs = client.engine_kwargs()
    assert kwargs["structured_outputs_config"] == {"backend": "xgrammar", "disable_any_whitespace": True}
    assert kwargs["max_model_len"] == 2048
    mine = make_llm({"provider": "vllm", "model": "m", "extra": {
        "compact_json": False, "engine_kwargs": {"max_model_len": 8192}}}).engine_kwargs()
    assert "structured_outputs_config" not in mine and mine["max_model_len"] == 8192


