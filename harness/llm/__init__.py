"""LLM clients behind one interface: ``make_llm(config).complete(messages, ...) -> list[LLMResponse]``.

Providers: ``local`` (embedded llama.cpp running Qwen2.5-Coder-1.5B, the default; SmolLM2-135M as ``llm=tiny``), ``openai`` (any OpenAI-compatible
server), ``vllm`` (in-process engine, optional extra), or any client class by import path (the tests' scripted double). Provider modules load on
demand, so importing this package never pulls in llama.cpp, the openai SDK or vLLM.
"""

from harness.llm.base import (
    CompletionRequest,
    LLMClient,
    LLMError,
    LLMResponse,
    SeedCounter,
    ToolCall,
    UsageCounter,
    complete_many,
    json_schema_format,
    schema_from_response_format,
)
from harness.llm.failures import RetryPolicy, call_with_retries
from harness.llm.config import LLMConfig
from harness.llm.factory import make_llm

__all__ = [
    "CompletionRequest",
    "LLMClient",
    "LLMConfig",
    "LLMError",
    "LLMResponse",
    "RetryPolicy",
    "SeedCounter",
    "ToolCall",
    "UsageCounter",
    "bound_schema",
    "call_with_retries",
    "complete_many",
    "json_schema_format",
    "make_llm",
    "schema_from_response_format",
]


def __getattr__(name: str):  # lazy: bound_schema lives with the llama.cpp client but needs no llama.cpp
    if name == "bound_schema":
        from harness.llm.local_client import bound_schema

        return bound_schema
    raise AttributeError(f"module 'harness.llm' has no attribute {name!r}")
