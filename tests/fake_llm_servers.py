"""Stand-ins for what the LLM clients talk to, for the tests: a local OpenAI-compatible server whose answers a test
scripts, and a fake ``vllm`` module (no GPU)."""

from __future__ import annotations

import json
import socket
import sys
import threading
import time
import types
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable

import pytest

from harness.llm import (
    make_llm,
)

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


def fake_vllm(monkeypatch: pytest.MonkeyPatch, *, new_api: bool) -> dict:
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



