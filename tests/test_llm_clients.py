"""LLM clients: retries and fallbacks against fake local servers, the scripted model, schema bounds, vLLM
translation with a fake module, and (marked ``llm``) the real embedded model, directly and behind llama.cpp's
OpenAI-compatible server."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
import time
import types
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable

import jsonschema
import pytest

from harness.llm import (
    LLMConfig,
    LLMError,
    LLMResponse,
    RetryPolicy,
    ToolCall,
    bound_schema,
    call_with_retries,
    json_schema_format,
    make_llm,
)
from harness.llm.json_output import parse_json_output
from harness.llm.local_client import GRAMMAR_MAX_STRING
from harness.llm.protocols import NativeToolParser
from tests.doubles import SCRIPTED, ScriptedLLM

# -- a fake OpenAI-compatible server ------------------------------------------------------------------------------

Reply = tuple[int, Any, float]  # status, body (dict -> JSON), delay seconds


def completion(text: str = "hello", n: int = 1, tool_calls: list[dict] | None = None) -> dict:
    message: dict[str, Any] = {"role": "assistant", "content": text}
    if tool_calls:
        message = {"role": "assistant", "content": None, "tool_calls": tool_calls}
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 0,
        "model": "fake",
        "choices": [
            {"index": i, "message": message, "finish_reason": "tool_calls" if tool_calls else "stop"} for i in range(n)
        ],
        "usage": {"prompt_tokens": 7, "completion_tokens": 3 * n, "total_tokens": 7 + 3 * n},
    }


class FakeServer:
    """ThreadingHTTPServer on 127.0.0.1 whose answers come from ``handler(body, index) -> Reply``."""

    def __init__(self, handler: Callable[[dict, int], Reply], headers: dict[str, str] | None = None) -> None:
        self.handler = handler
        self.requests: list[dict] = []
        self.auth: list[str | None] = []
        self.extra_headers = headers or {}
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                fake.requests.append(body)
                fake.auth.append(self.headers.get("Authorization"))
                status, payload, delay = fake.handler(body, len(fake.requests) - 1)
                if delay:
                    time.sleep(delay)
                data = json.dumps(payload).encode() if not isinstance(payload, bytes) else payload
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    for k, v in fake.extra_headers.items():
                        self.send_header(k, v)
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def __enter__(self) -> "FakeServer":
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.server.shutdown()
        self.server.server_close()


def client_for(server_url: str, **overrides: Any):
    cfg = {"provider": "openai", "model": "fake-model", "base_url": server_url, "timeout_s": 5.0,
           "max_retries": 3, "backoff_s": 0.01, **overrides}
    return make_llm(cfg)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


USER = [{"role": "user", "content": "hi"}]
SCHEMA = {
    "type": "object",
    "properties": {"expression": {"type": "string"}, "score": {"type": "number"}},
    "required": ["expression", "score"],
}


# -- retry helper -------------------------------------------------------------------------------------------------


def test_call_with_retries_backoff_grows_with_jitter() -> None:
    waits: list[float] = []
    attempts = []

    def flaky() -> str:
        attempts.append(1)
        if len(attempts) < 4:
            raise ConnectionError("down")
        return "ok"

    result = call_with_retries(
        flaky, what="srv", classify=lambda e: ("retry", str(e), None),
        policy=RetryPolicy(max_retries=3, backoff_s=1.0, max_backoff_s=3.0), sleep=waits.append,
    )
    assert result == "ok" and len(waits) == 3
    for k, wait in enumerate(waits):
        base = min(3.0, 2**k)
        assert 0.5 * base <= wait < 1.5 * base
    with pytest.raises(LLMError, match=r"srv: failed after 2 tries \(down\)"):
        call_with_retries(lambda: (_ for _ in ()).throw(ConnectionError("down")), what="srv",
                          classify=lambda e: ("retry", str(e), None), policy=RetryPolicy(1, 0.0), sleep=waits.append)
    with pytest.raises(LLMError, match="rejected") as info:
        call_with_retries(lambda: (_ for _ in ()).throw(ValueError("bad")), what="srv",
                          classify=lambda e: ("fail", "HTTP 400: bad", 400), policy=RetryPolicy(3, 0.0))
    assert info.value.status == 400 and info.value.attempts == 1


# -- openai client: retries, errors, timeouts ---------------------------------------------------------------------


def test_500_then_200_is_retried() -> None:
    def handler(body: dict, i: int) -> Reply:
        return (500, {"error": {"message": "overloaded"}}, 0) if i == 0 else (200, completion("ok"), 0)

    with FakeServer(handler) as srv:
        client = client_for(srv.base_url)
        [response] = client.complete(USER)
    assert response.text == "ok" and response.finish_reason == "stop"
    assert len(srv.requests) == 2
    snap = client.usage.snapshot()
    assert snap["retries"] == 1 and snap["calls"] == 1 and snap["failures"] == 0
    assert snap["prompt_tokens"] == 7 and snap["completion_tokens"] == 3


def test_429_is_retried_and_persistent_500_gives_clear_error() -> None:
    with FakeServer(lambda body, i: (429, {"error": {"message": "slow down"}}, 0) if i < 2 else (200, completion(), 0),
                    headers={"Retry-After": "0"}) as srv:
        client = client_for(srv.base_url)
        assert client.complete(USER)[0].text == "hello"
        assert len(srv.requests) == 3
    with FakeServer(lambda body, i: (500, {"error": {"message": "kaput"}}, 0)) as srv:
        client = client_for(srv.base_url, max_retries=2)
        with pytest.raises(LLMError) as info:
            client.complete(USER)
        assert len(srv.requests) == 3
    msg = str(info.value)
    assert srv.base_url in msg and "fake-model" in msg and "3 tries" in msg and "HTTP 500" in msg and "kaput" in msg
    assert client.usage.failures == 1 and client.usage.retries == 2


def test_non_retryable_400_fails_at_once() -> None:
    with FakeServer(lambda body, i: (400, {"error": {"message": "context too long"}}, 0)) as srv:
        client = client_for(srv.base_url)
        with pytest.raises(LLMError, match="rejected.*HTTP 400.*context too long") as info:
            client.complete(USER)
        assert len(srv.requests) == 1 and info.value.status == 400


def test_dead_port_fails_quickly_with_clear_error() -> None:
    url = f"http://127.0.0.1:{free_port()}/v1"
    client = client_for(url, max_retries=2)
    with pytest.raises(LLMError, match="connection error") as info:
        client.complete(USER)
    assert url in str(info.value) and "3 tries" in str(info.value) and client.usage.retries == 2


def test_timeout_is_retried_then_reported() -> None:
    with FakeServer(lambda body, i: (200, completion(), 2.0)) as srv:
        client = client_for(srv.base_url, timeout_s=0.3, max_retries=1)
        with pytest.raises(LLMError, match=r"timed out after 0.3s") as info:  # the server answers after 2 s
            client.complete(USER)
        assert "2 tries" in str(info.value) and len(srv.requests) == 2


def test_api_key_comes_from_the_named_environment_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HARNESS_TEST_KEY", "sk-secret-123")
    monkeypatch.delenv("HARNESS_UNSET_KEY", raising=False)
    with FakeServer(lambda body, i: (200, completion(), 0)) as srv:
        client_for(srv.base_url, api_key_env="HARNESS_TEST_KEY").complete(USER)
        client_for(srv.base_url, api_key_env="HARNESS_UNSET_KEY").complete(USER)
    assert srv.auth == ["Bearer sk-secret-123", "Bearer sk-no-key-required"]
    assert srv.requests[0]["model"] == "fake-model" and srv.requests[0]["max_tokens"] == 512


# -- openai client: structured output fallback --------------------------------------------------------------------


def test_json_schema_500_falls_back_to_json_object_and_is_remembered() -> None:
    def handler(body: dict, i: int) -> Reply:
        rf = body.get("response_format") or {}
        if rf.get("type") == "json_schema":  # llama.cpp's server
            return 500, {"error": {"message": "unsupported response_format"}}, 0
        assert rf == {"type": "json_object", "schema": SCHEMA}
        return 200, completion('{"expression": "x*y", "score": 0.5}'), 0

    with FakeServer(handler) as srv:
        client = client_for(srv.base_url)
        rf = json_schema_format(SCHEMA)
        [r] = client.complete(USER, response_format=rf)
        assert parse_json_output(r.text, SCHEMA) == ({"expression": "x*y", "score": 0.5}, None)
        assert client.structured_mode == "json_object" and r.meta["structured_mode"] == "json_object"
        assert len(srv.requests) == 2  # the rejected probe is not retried
        client.complete(USER, response_format=rf)
        assert len(srv.requests) == 3 and srv.requests[-1]["response_format"]["type"] == "json_object"


def test_structured_falls_back_to_prompting_when_nothing_is_enforced() -> None:
    def handler(body: dict, i: int) -> Reply:
        if "response_format" in body:
            return 400, {"error": {"message": "response_format not supported"}}, 0
        system = body["messages"][0]["content"] if body["messages"][0]["role"] == "system" else ""
        ok = "JSON schema" in system
        return 200, completion('Here: {"expression": "x", "score": 1}' if ok else "no idea"), 0

    with FakeServer(handler) as srv:
        client = client_for(srv.base_url)
        [r] = client.complete(USER, response_format=json_schema_format(SCHEMA))
        assert client.structured_mode == "prompt"
        assert parse_json_output(r.text, SCHEMA)[1] is None


def test_silently_ignored_json_schema_counts_as_unsupported() -> None:
    def handler(body: dict, i: int) -> Reply:
        rf = body.get("response_format") or {}
        text = '{"expression": "x", "score": 2}' if rf.get("type") == "json_object" else "free text"
        return 200, completion(text), 0

    with FakeServer(handler) as srv:
        client = client_for(srv.base_url)
        [r] = client.complete(USER, response_format=json_schema_format(SCHEMA))
        assert client.structured_mode == "json_object" and json.loads(r.text)["score"] == 2


# -- openai client: n samples and tools ---------------------------------------------------------------------------


def test_n_is_topped_up_when_server_returns_fewer_choices() -> None:
    with FakeServer(lambda body, i: (200, completion(f"s{body.get('seed')}"), 0)) as srv:
        client = client_for(srv.base_url)
        responses = client.complete(USER, n=3, seed=10)
        assert len(responses) == 3 and client.supports_n is False
        assert sorted(r.text for r in responses) == ["s10", "s11", "s12"]
        assert srv.requests[0]["n"] == 3 and len(srv.requests) == 3
        client.complete(USER, n=2)
        assert len(srv.requests) == 5 and all("n" not in r for r in srv.requests[3:])
    assert client.usage.responses == 5


def test_calls_without_a_seed_take_the_next_seeds_from_the_configured_one() -> None:
    """One seed counter for every client (``LLMClient.seeds``): reproducible runs whose samples still differ."""
    with FakeServer(lambda body, i: (200, completion("x", n=body.get("n", 1)), 0)) as srv:
        client = make_llm({"provider": "openai", "model": "m", "base_url": srv.base_url, "seed": 7})
        client.complete(USER, n=2)
        client.complete(USER)
        client.complete(USER, seed=100)
        assert [r["seed"] for r in srv.requests] == [7, 9, 100]


def test_n_parameter_used_when_supported() -> None:
    with FakeServer(lambda body, i: (200, completion("x", n=body.get("n", 1)), 0)) as srv:
        client = client_for(srv.base_url)
        assert len(client.complete(USER, n=4)) == 4 and len(srv.requests) == 1 and client.supports_n is True


def test_native_tool_calls_are_parsed() -> None:
    calls = [
        {"id": "c1", "type": "function", "function": {"name": "fit", "arguments": '{"expression": "x"}'}},
        {"id": "c2", "type": "function", "function": {"name": "fit", "arguments": '{"expression": '}},
    ]
    tool = {"type": "function", "function": {"name": "fit", "parameters": {"type": "object"}}}
    with FakeServer(lambda body, i: (200, completion(tool_calls=calls), 0)) as srv:
        client = client_for(srv.base_url)
        [r] = client.complete(USER, tools=[tool], tool_choice={"type": "function", "function": {"name": "fit"}})
    assert srv.requests[0]["tools"] == [tool] and srv.requests[0]["tool_choice"]["function"]["name"] == "fit"
    assert r.tool_calls[0] == ToolCall(id="c1", name="fit", arguments={"expression": "x"})
    assert r.tool_calls[1].parse_error and r.tool_calls[1].arguments == {}
    parser = NativeToolParser()
    assert [c.id for c in parser.parse_response(r)] == ["c1"] and len(parser.last_errors) == 1
    assert client.tool_mode == "native"


def test_rejected_tools_fall_back_to_text_tool_calls() -> None:
    def handler(body: dict, i: int) -> Reply:
        if "tools" in body:
            return 400, {"error": {"message": "tools are not supported"}}, 0
        assert "<tools>" in body["messages"][0]["content"]
        return 200, completion('<tool_call>{"name": "fit", "arguments": {"expression": "x"}}</tool_call>'), 0

    tool = {"type": "function", "function": {"name": "fit", "parameters": {"type": "object"}}}
    with FakeServer(handler) as srv:
        client = client_for(srv.base_url)
        [r] = client.complete(USER, tools=[tool])
        assert client.tool_mode == "text" and r.tool_calls[0].arguments == {"expression": "x"}
        client.complete(USER, tools=[tool])
        assert len(srv.requests) == 3 and "tools" not in srv.requests[-1]


def test_complete_many_runs_concurrently_and_isolates_failures() -> None:
    in_flight, peak, lock = [0], [0], threading.Lock()

    def handler(body: dict, i: int) -> Reply:
        if body["messages"][0]["content"] == "fail":
            return 400, {"error": {"message": "bad request"}}, 0
        with lock:
            in_flight[0] += 1
            peak[0] = max(peak[0], in_flight[0])
        time.sleep(0.4)  # the server is busy with this request while the others arrive
        with lock:
            in_flight[0] -= 1
        return 200, completion(body["messages"][0]["content"]), 0

    with FakeServer(handler) as srv:
        client = client_for(srv.base_url)
        requests = [{"messages": [{"role": "user", "content": f"q{i}"}]} for i in range(6)]
        requests.append({"messages": [{"role": "user", "content": "fail"}]})
        results = client.complete_many(requests, max_workers=8)
    assert peak[0] >= 2, peak  # requests overlapped at the server: concurrent, not one after another
    assert [r[0].text for r in results[:6]] == [f"q{i}" for i in range(6)]
    assert results[6][0].error and "HTTP 400" in results[6][0].error and not results[6][0].ok
    with pytest.raises(LLMError):
        ScriptedLLM([]).complete_many([{"messages": USER}], raise_errors=True)


# -- scripted -----------------------------------------------------------------------------------------------------


def test_scripted_replays_and_records() -> None:
    llm = ScriptedLLM([
        "plain",
        {"tool_calls": [{"name": "fit", "arguments": {"expression": "x"}}]},
        LLMResponse(text="obj", finish_reason="length"),
        RuntimeError("network down"),
    ])
    assert llm.complete(USER, temperature=0.1)[0].text == "plain"
    [r] = llm.complete(USER, tools=[{"type": "function", "function": {"name": "fit"}}])
    assert r.tool_calls[0].name == "fit" and r.finish_reason == "tool_calls"
    assert llm.complete(USER)[0].finish_reason == "length"
    with pytest.raises(LLMError, match="network down"):
        llm.complete(USER)
    with pytest.raises(LLMError, match="exhausted"):
        llm.complete(USER)
    assert len(llm.requests) == 5 and llm.requests[0]["temperature"] == 0.1
    assert llm.requests[1]["tools"][0]["function"]["name"] == "fit"
    assert llm.usage.calls == 5 and llm.usage.failures == 2


def test_scripted_function_and_config() -> None:
    def fn(messages: list[dict], **kwargs: Any) -> str:
        return f"{messages[-1]['content']}-{kwargs['sample_index']}"

    llm = make_llm({"provider": SCRIPTED, "extra": {"fn": fn}})
    assert [r.text for r in llm.complete(USER, n=3)] == ["hi-0", "hi-1", "hi-2"]
    cyc = make_llm(LLMConfig(provider=SCRIPTED, extra={"responses": ["a", "b"], "cycle": True}))
    assert [cyc.complete(USER)[0].text for _ in range(3)] == ["a", "b", "a"]
    with pytest.raises(ValueError):
        ScriptedLLM()


# -- config -------------------------------------------------------------------------------------------------------


def test_config_defaults_and_validation() -> None:
    cfg = LLMConfig()
    assert (cfg.provider, cfg.temperature, cfg.max_tokens, cfg.n_threads, cfg.n_ctx) == ("local", 0.7, 512, None, 4096)
    with pytest.raises(Exception):
        LLMConfig(provider="nope")
    with pytest.raises(Exception):
        LLMConfig(temprature=0.1)  # typo caught
    client = make_llm({"provider": "local", "model_path": "/nonexistent/model.gguf"})
    assert client.provider == "local"  # lazy: nothing loaded yet
    with pytest.raises(LLMError, match="not found"):
        client.complete(USER)


# -- bound_schema -------------------------------------------------------------------------------------------------


def test_bound_schema_adds_missing_bounds_only() -> None:
    schema = {
        "type": "object",
        "properties": {
            "name": {"type": "string"},
            "kind": {"type": "string", "enum": ["a", "b"]},
            "short": {"type": "string", "maxLength": 5},
            "tags": {"type": "array", "items": {"type": "string"}},
            "maybe": {"anyOf": [{"type": "string"}, {"type": "null"}]},
            "nested": {"type": "object", "properties": {"xs": {"type": ["array", "null"], "minItems": 20}}},
        },
        "$defs": {"D": {"type": "string"}},
    }
    bounded = bound_schema(schema, max_string=50, max_items=4)
    p = bounded["properties"]
    assert p["name"]["maxLength"] == 50 and "maxLength" not in p["kind"] and p["short"]["maxLength"] == 5
    assert p["tags"]["maxItems"] == 4 and p["tags"]["items"]["maxLength"] == 50
    assert p["maybe"]["anyOf"][0]["maxLength"] == 50
    assert p["nested"]["properties"]["xs"]["maxItems"] == 20  # never below minItems
    assert bounded["$defs"]["D"]["maxLength"] == 50
    assert "maxLength" not in schema["properties"]["name"]  # input untouched
    # declared objects are closed (a small model cannot invent keys); bounds past the grammar limit are clipped
    assert bounded["additionalProperties"] is False and p["nested"]["additionalProperties"] is False
    huge = bound_schema({"type": "string", "maxLength": 5000, "minLength": 2000})
    assert huge["maxLength"] == GRAMMAR_MAX_STRING and huge["minLength"] <= GRAMMAR_MAX_STRING


# -- vLLM with a fake module --------------------------------------------------------------------------------------


def test_vllm_missing_gives_install_hint(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "vllm", None)  # makes `import vllm` raise ImportError
    with pytest.raises(LLMError, match=r"pip install -e \.\[vllm\]"):
        make_llm({"provider": "vllm", "model": "Qwen/Qwen2.5-0.5B-Instruct"})


def _fake_vllm(monkeypatch: pytest.MonkeyPatch, *, new_api: bool) -> dict:
    state: dict[str, Any] = {"chat_calls": [], "engine_kwargs": None}

    class SamplingParams:
        def __init__(self, **kwargs: Any) -> None:
            self.kwargs = kwargs

    class Structured:
        def __init__(self, **kwargs: Any) -> None:
            self.kwargs = kwargs

    class LLM:
        def __init__(self, **kwargs: Any) -> None:
            state["engine_kwargs"] = kwargs

        def chat(self, conversations, sampling_params, use_tqdm=True, tools=None):
            state["chat_calls"].append((conversations, sampling_params, tools))
            outputs = []
            for conv, sp in zip(conversations, sampling_params):
                structured = sp.kwargs.get("structured_outputs") or sp.kwargs.get("guided_decoding")
                schema = structured.kwargs.get("json") if structured else None
                if schema and "anyOf" not in schema and schema.get("properties", {}).get("tool"):
                    name = schema["properties"]["tool"]["enum"][0]
                    text = json.dumps({"tool": name, "arguments": {"expression": "x"}})
                else:
                    text = conv[-1]["content"]
                outs = [types.SimpleNamespace(text=text, token_ids=[1, 2], finish_reason="stop")
                        for _ in range(sp.kwargs["n"])]
                outputs.append(types.SimpleNamespace(outputs=outs, prompt_token_ids=[0] * 5))
            return outputs

    vllm = types.ModuleType("vllm")
    vllm.LLM, vllm.SamplingParams = LLM, SamplingParams
    sp_module = types.ModuleType("vllm.sampling_params")
    setattr(sp_module, "StructuredOutputsParams" if new_api else "GuidedDecodingParams", Structured)
    monkeypatch.setitem(sys.modules, "vllm", vllm)
    monkeypatch.setitem(sys.modules, "vllm.sampling_params", sp_module)
    return state


@pytest.mark.parametrize("new_api", [True, False])
def test_vllm_translation_with_fake_module(monkeypatch: pytest.MonkeyPatch, new_api: bool) -> None:
    state = _fake_vllm(monkeypatch, new_api=new_api)
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
    _fake_vllm(monkeypatch, new_api=True)
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

    _fake_vllm(monkeypatch, new_api=True)

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


# -- the real embedded model (marked llm) -------------------------------------------------------------------------

SMALL_SCHEMA = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
    "required": ["name", "age"],
}
FIT_TOOL = {
    "type": "function",
    "function": {
        "name": "fit_expression",
        "description": "Fit an expression to the data.",
        "parameters": {
            "type": "object",
            "properties": {"expression": {"type": "string"}},
            "required": ["expression"],
        },
    },
}


TINY_MODEL = "smollm2-135m-instruct"  # the plumbing is the point here, not the model: the fast one


def _gguf_path() -> str:
    from harness.llm.local_client import default_model_path

    return default_model_path(TINY_MODEL)


@pytest.fixture(scope="module")
def local_llm():
    _gguf_path()
    return make_llm({"provider": "local", "model": TINY_MODEL, "max_tokens": 96, "temperature": 0.2})


@pytest.mark.llm
def test_local_model_structured_json_and_tool_call(local_llm) -> None:
    msgs = [{"role": "user", "content": "Describe a person called Ada who is 36 years old."}]
    responses = local_llm.complete(msgs, response_format=json_schema_format(SMALL_SCHEMA), n=2)
    assert len(responses) == 2
    for r in responses:
        obj, err = parse_json_output(r.text, SMALL_SCHEMA)
        assert err is None, (r.text, r.meta)
        assert r.completion_tokens > 0 and r.prompt_tokens > 0
    [r] = local_llm.complete([{"role": "user", "content": "Fit x squared."}], tools=[FIT_TOOL])
    assert r.tool_calls and r.tool_calls[0].name == "fit_expression", (r.text, r.meta)
    assert isinstance(r.tool_calls[0].arguments.get("expression"), str)
    # the deadline stops generation (same cached model: same path, n_ctx, n_threads)
    hurried = make_llm({"provider": "local", "model": TINY_MODEL, "max_tokens": 500, "temperature": 0.9,
                        "timeout_s": 1.0})
    [t] = hurried.complete([{"role": "user", "content": "Write a very long story about a dragon."}])
    assert t.finish_reason == "timeout" and t.completion_tokens < 500


@pytest.mark.llm
def test_local_model_keeps_recent_states_and_reuses_a_shared_prefix(local_llm) -> None:
    """The RAM prompt cache: after an unrelated call evicted the KV slot, a prompt sharing a long prefix with an
    earlier call is answered exactly as without the cache (same seed, greedy) and the state is restored."""
    import harness.llm.llama_runtime as llama_runtime

    card = "Task card. " + " ".join(f"x{i}={i * 0.37:.2f}" for i in range(50))
    first = [{"role": "system", "content": card}, {"role": "user", "content": "Name one input."}]
    again = [{"role": "system", "content": card}, {"role": "user", "content": "Name two inputs."}]
    other = [{"role": "user", "content": "Say hi."}]
    [a] = local_llm.complete(first, temperature=0.0, max_tokens=8, seed=3)
    llama, _ = local_llm._model()
    assert llama.cache is not None and llama_runtime.PROMPT_CACHE_BYTES > 0
    local_llm.complete(other, temperature=0.0, max_tokens=4, seed=3)
    stored = len(llama.cache.cache_state)
    [b] = local_llm.complete(again, temperature=0.0, max_tokens=8, seed=3)
    assert stored >= 2 and len(llama.cache.cache_state) == stored + 1
    fresh = make_llm({"provider": "local", "model": TINY_MODEL, "max_tokens": 8, "temperature": 0.0,
                      "n_ctx": 2048})  # another model instance, no cache hit possible: the same answer
    [c] = fresh.complete(again, temperature=0.0, max_tokens=8, seed=3)
    assert b.text == c.text, (b.text, c.text)


def test_a_running_call_follows_the_engine_count(monkeypatch) -> None:
    """An SR run that ends during a call hands its core back to the model within the follower's period."""
    import harness.llm.llama_runtime as llama_runtime

    seen: list[int] = []
    monkeypatch.setattr(llama_runtime, "_set_threads", lambda llama, n: seen.append(n))
    counts = iter([1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2])
    follower = llama_runtime.ThreadFollower(object(), lambda: next(counts, 2))
    follower.PERIOD_S = 0.01
    follower.start()
    time.sleep(0.2)
    follower.stop()
    assert seen[0] == 1 and seen[-1] == 2 and 2 in seen
    n = len(seen)
    time.sleep(0.05)
    assert len(seen) == n  # stopped: no more changes after the call


def _start_llama_server(gguf: str, port: int, log_path: str) -> subprocess.Popen:
    """``python -m llama_cpp.server`` with the default chat format: its handler turns a *named* ``tool_choice``
    into a grammar-constrained call, so no ``--chat_format chatml-function-calling`` is needed."""
    from harness.llm.cpu_kernels import choose_kernels

    # llama.cpp's server has no kernel option: on a CPU whose fast kernels crash (harness.llm.cpu_kernels) it runs
    # inside kernels_for_new_models, with the kernels this machine's probe chose
    kernels = choose_kernels(gguf, "auto", 1)
    serve = ("import runpy, sys; from harness.llm.cpu_kernels import kernels_for_new_models as k\n"
             f"with k({kernels!r}): runpy.run_module('llama_cpp.server', run_name='__main__', alter_sys=True)")
    cmd = [sys.executable, "-c", serve, "--model", gguf, "--n_threads", "1",
           "--host", "127.0.0.1", "--port", str(port), "--n_ctx", "2048"]
    with open(log_path, "wb") as log:  # a file, not a pipe: the loader's chatter would fill a pipe and block
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    deadline = time.time() + 60
    while time.time() < deadline:
        if proc.poll() is not None:
            with open(log_path, errors="replace") as log:
                raise RuntimeError(f"llama_cpp.server exited: {log.read()[-2000:]}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=1) as resp:
                if resp.status == 200:
                    return proc
        except OSError:
            time.sleep(0.25)
    proc.kill()
    raise RuntimeError("llama_cpp.server did not come up within 60 s")


@pytest.fixture(scope="module")
def llama_server(tmp_path_factory: pytest.TempPathFactory):
    gguf = _gguf_path()
    port = free_port()
    proc = _start_llama_server(gguf, port, str(tmp_path_factory.mktemp("llama_server") / "server.log"))
    yield proc, f"http://127.0.0.1:{port}/v1"
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()


@pytest.mark.llm
def test_openai_client_against_llama_cpp_server(llama_server) -> None:
    _, url = llama_server
    client = client_for(url, timeout_s=60, max_tokens=96, temperature=0.2)
    [plain] = client.complete([{"role": "user", "content": "Say hello."}], max_tokens=16)
    assert plain.text.strip() and plain.completion_tokens > 0

    msgs = [{"role": "user", "content": "Describe a person called Ada who is 36 years old."}]
    [r] = client.complete(msgs, response_format=json_schema_format(bound_schema(SMALL_SCHEMA, 40)))
    obj, err = parse_json_output(r.text, SMALL_SCHEMA)
    assert err is None, (r.text, r.meta, client.structured_mode)
    assert client.structured_mode in ("json_schema", "json_object", "prompt")

    forced = {"type": "function", "function": {"name": "fit_expression"}}
    [t] = client.complete([{"role": "user", "content": "Fit x squared."}], tools=[FIT_TOOL], tool_choice=forced)
    assert t.tool_calls, (t.text, t.meta)
    call = t.tool_calls[0]
    assert call.name == "fit_expression" and call.parse_error is None and isinstance(call.arguments, dict)
    jsonschema.validate(call.arguments, FIT_TOOL["function"]["parameters"])


@pytest.mark.llm
def test_server_killed_mid_series_ends_in_llm_error(llama_server) -> None:
    proc, url = llama_server
    client = client_for(url, timeout_s=30, max_tokens=8, max_retries=2, backoff_s=0.05)
    assert client.complete(USER)[0].completion_tokens > 0
    proc.terminate()
    proc.wait(10)
    for _ in range(3):
        with pytest.raises(LLMError, match="connection error"):  # refused at once, not a 30 s timeout
            client.complete(USER)
    assert client.usage.failures == 3 and client.usage.retries == 6


def test_the_embedded_model_waits_longer_than_a_server_unless_told():
    """A role prompt on one thread beside an SR run takes over a minute to evaluate on 2 cores: the generic 60 s
    per-attempt limit would cut it before its first token, so the local client waits LOCAL_TIMEOUT_S unless the
    config sets a limit."""
    from harness.llm.local_client import LOCAL_TIMEOUT_S, LocalLlamaClient

    assert LocalLlamaClient(LLMConfig(provider="local")).timeout_s == LOCAL_TIMEOUT_S > LLMConfig().timeout_s
    assert LocalLlamaClient(LLMConfig(provider="local", timeout_s=7)).timeout_s == 7.0


def test_a_provider_is_checked_before_anything_is_imported(tmp_path, monkeypatch) -> None:
    """Naming a module runs it: text that is no import path, or a module that does not exist, is refused first,
    and finding a module does not run it (only the import does, for the configuration's own choice)."""
    from harness.llm.factory import check_provider, client_class

    (tmp_path / "probe_provider.py").write_text(
        "from pathlib import Path\nPath(__file__).with_name('ran').write_text('x')\nclass Client:\n    pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    for bad in ("os.system('x')", "probe_provider.Client\n", "../probe_provider.Client", "probe_provider", ""):
        with pytest.raises(ValueError, match="not one of local, openai, vllm nor an import path"):
            check_provider(bad)
    with pytest.raises(ValueError, match="no module named 'no_such_provider_mod'"):
        check_provider("no_such_provider_mod.Client")
    assert check_provider("probe_provider:Client") == ("probe_provider", "Client")
    assert check_provider("local") == ("harness.llm.local_client", "LocalLlamaClient")
    assert not (tmp_path / "ran").exists()
    with pytest.raises(ValueError, match="is not an LLMClient class"):
        client_class("probe_provider.Client")  # the operator's own choice is imported, then checked
    assert (tmp_path / "ran").exists()
    sys.modules.pop("probe_provider", None)
