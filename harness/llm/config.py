"""LLM configuration and the provider factory.

One pydantic model covers every provider so Hydra/YAML configs stay flat; fields a provider does not use are
ignored by it. Provider-specific odds and ends go into ``extra`` (e.g. vLLM engine kwargs, scripted responses).
"""

from __future__ import annotations

from typing import Any, Literal

import re

from pydantic import BaseModel, ConfigDict, Field, field_validator

from harness.llm.base import LLMClient


class LLMConfig(BaseModel):
    """Which model to talk to and with what defaults.

    ``provider``: ``local`` (embedded llama.cpp; ``model`` names an embedded model, default Qwen2.5-Coder-1.5B-Instruct,
    ``smollm2-135m-instruct`` for quick tests; ``model_path`` any GGUF file; needs nothing else), ``openai`` (any
    OpenAI-compatible endpoint: hosted APIs, ``vllm serve``, llama.cpp's server), ``vllm`` (in-process engine,
    GPU, optional extra) or ``scripted`` (test double). ``api_key_env`` names the environment variable holding the
    key, so keys never land in configs or traces.
    """

    model_config = ConfigDict(extra="forbid")

    provider: Literal["local", "openai", "vllm", "scripted"] = "local"
    model: str | None = None
    base_url: str | None = None
    api_key_env: str = "OPENAI_API_KEY"
    temperature: float = 0.7
    max_tokens: int = 512
    timeout_s: float = 60.0
    max_retries: int = Field(3, ge=0)
    backoff_s: float = Field(0.5, ge=0.0)
    n_threads: int | None = Field(None, ge=1)  # local: None = every core while no SR engine runs, else one less
    n_ctx: int = Field(4096, ge=256)
    model_path: str | None = None
    seed: int = 0
    extra: dict[str, Any] = Field(default_factory=dict)

    @field_validator("extra", mode="before")
    @classmethod
    def _no_extra_is_empty(cls, value: Any) -> Any:
        """``extra: null`` in a config file (so a whole dict can be given on the command line) means none."""
        return {} if value is None else value

    @field_validator("api_key_env")
    @classmethod
    def _a_variable_name_not_a_key(cls, value: str) -> str:
        """Refuse a key pasted where the variable's *name* belongs (it would be used and written to configs)."""
        if looks_like_key(value):
            raise ValueError("llm.api_key_env must be the NAME of an environment variable holding the key (for "
                             "example OPENAI_API_KEY), not the key itself; export the key and pass its name")
        return value


_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")


def looks_like_key(value: Any) -> bool:
    """True for text that is not an environment variable name (a key, a token, a URL ...)."""
    return isinstance(value, str) and bool(value) and not _ENV_NAME.match(value)


def make_llm(config: LLMConfig | dict[str, Any] | None = None) -> LLMClient:
    """Build the client for ``config`` (a dict is validated into :class:`LLMConfig` first).

    Provider modules are imported here, on demand, so the optional heavy dependencies (vllm) are only touched
    when chosen.
    """
    if config is None:
        config = LLMConfig()
    elif not isinstance(config, LLMConfig):
        config = LLMConfig.model_validate(dict(config))
    if config.provider == "local":
        from harness.llm.local_client import LocalLlamaClient

        return LocalLlamaClient(config)
    if config.provider == "openai":
        from harness.llm.openai_client import OpenAIClient

        return OpenAIClient(config)
    if config.provider == "vllm":
        from harness.llm.vllm_client import VLLMClient

        return VLLMClient(config)
    if config.provider == "scripted":
        from harness.llm.scripted import ScriptedLLM

        return ScriptedLLM.from_config(config)
    raise ValueError(f"unknown LLM provider {config.provider!r}")  # pragma: no cover - Literal guards this
