"""LLM clients: retries, errors and fallbacks of the OpenAI-compatible client against a fake local server, the
scripted model, the config, schema bounds. vLLM: test_llm_vllm.py; the real embedded model: test_llm_embedded.py."""

from __future__ import annotations

import json
import threading
import time
from typing import Any

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

from tests.fake_llm_servers import SCHEMA, USER, FakeServer, Reply, client_for, completion, free_port


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


