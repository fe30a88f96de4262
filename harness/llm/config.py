"""LLM configuration: one pydantic model covers every provider so Hydra/YAML configs stay flat.

Fields a provider does not use are ignored by it. Provider-specific odds and ends go into ``extra`` (e.g. vLLM
engine kwargs, a plugged-in client's settings). The clients are built by ``harness.llm.factory.make_llm``.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

BUILTIN_PROVIDERS: dict[str, str] = {
    "local": "harness.llm.local_client:LocalLlamaClient",
    "openai": "harness.llm.openai_client:OpenAIClient",
    "vllm": "harness.llm.vllm_client:VLLMClient",
}
IMPORT_PATH = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*[.:][A-Za-z_]\w*")  # fullmatch: no trailing newline


class LLMConfig(BaseModel):
    """Which model to talk to and with what defaults.

    ``provider``: ``local`` (embedded llama.cpp; ``model`` names an embedded model, default Qwen2.5-Coder-1.5B-Instruct,
    ``smollm2-135m-instruct`` for quick tests; ``model_path`` any GGUF file; needs nothing else), ``openai`` (any
    OpenAI-compatible endpoint: hosted APIs, ``vllm serve``, llama.cpp's server), ``vllm`` (in-process engine,
    GPU, optional extra), or the import path of any :class:`LLMClient` subclass (``package.module.Class`` or
``package.module:Class``; built with ``Class.from_config(config)`` when it has one, else ``Class(config)``; the
tests plug their scripted double in this way). ``api_key_env`` names the environment variable holding the
    key, so keys never land in configs or traces.
    """

    model_config = ConfigDict(extra="forbid")

    provider: str = Field("local", description="local (the embedded llama.cpp model), openai (any "
                          "OpenAI-compatible server), vllm (in-process, GPU) or an LLMClient class's import path.")
    model: str | None = Field(None, description="The model: an embedded model's name (local; default "
                              "qwen2.5-coder-1.5b-instruct; `llm=tiny` picks smollm2-135m-instruct) or the server's model id.")
    base_url: str | list[str] | None = Field(None, description="The server's URL; several serving the same model "
                                             "are used round-robin, one per solve.")
    api_key_env: str = Field("OPENAI_API_KEY", description="The NAME of the environment variable holding the key "
                             "(keys never go into configs or traces).")
    temperature: float = Field(0.7, description="Sampling temperature of a call that names none.")
    max_tokens: int = Field(512, description="Longest answer of a call that names none.")
    timeout_s: float = Field(60.0, description="Seconds per attempt; the embedded model waits 300 s unless set.")
    max_retries: int = Field(3, ge=0, description="Retries of a transient server error (network clients).")
    backoff_s: float = Field(0.5, ge=0.0, description="First wait before a retry (exponential, with jitter).")
    n_threads: int | None = Field(None, ge=1, description="local: threads (unset: every core the process may "
                                  "use, its CPU affinity, while no SR engine runs, else one less).")
    n_ctx: int = Field(4096, ge=256, description="local / vllm: the context length.")
    model_path: str | None = Field(None, description="local: any GGUF file instead of an embedded model.")
    cpu_kernels: Literal["auto", "fast", "portable"] = Field(
        "auto", description="local: llama.cpp's CPU kernels; auto = the fast ones unless a probe in a child "
        "process sees them crash on this CPU (harness.llm.cpu_kernels), fast / portable force one.")
    seed: int = Field(0, description="First seed of calls that name none (advanced per sample).")
    extra: dict[str, Any] = Field(default_factory=dict, description="Provider options (e.g. openai: extra_body, "
                                  "max_parallel; vllm: engine_kwargs; the scripted double: responses, fn).")

    @field_validator("extra", mode="before")
    @classmethod
    def _no_extra_is_empty(cls, value: Any) -> Any:
        """``extra: null`` in a config file (so a whole dict can be given on the command line) means none."""
        return {} if value is None else value

    @field_validator("base_url", mode="before")
    @classmethod
    def _one_or_several_endpoints(cls, value: Any) -> Any:
        """A list of URLs (Hydra: ``llm.base_url=[http://a:8000/v1,http://b:8000/v1]``); one URL stays a string."""
        if isinstance(value, (list, tuple)):
            urls = [str(u).strip() for u in value if u is not None and str(u).strip()]
            return None if not urls else urls[0] if len(urls) == 1 else urls
        return value

    def endpoints(self) -> list[str | None]:
        """The endpoint URLs (``[None]``: the provider's default)."""
        return list(self.base_url) if isinstance(self.base_url, list) else [self.base_url]

    def for_solve(self, index: int) -> "LLMConfig":
        """This config with the ``index``-th solve's endpoint, round-robin over ``base_url``. Why per solve and
        not per call: a solve's calls share long prompt prefixes (the task frame), which a server's prefix cache
        serves only when they reach the same server."""
        urls = self.endpoints()
        return self.model_copy(update={"base_url": urls[index % len(urls)]}) if len(urls) > 1 else self

    @field_validator("provider")
    @classmethod
    def _known_or_an_import_path(cls, value: str) -> str:
        if value in BUILTIN_PROVIDERS or IMPORT_PATH.fullmatch(value):
            return value
        raise ValueError(f"unknown LLM provider {value!r}: use one of {', '.join(BUILTIN_PROVIDERS)} or the import "
                         "path of an LLMClient class (package.module.Class)")

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
