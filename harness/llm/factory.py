"""``make_llm(config)``: the client for an :class:`LLMConfig`.

Provider modules are imported on demand (by import path), so the optional heavy dependencies (vllm) are only
touched when chosen, and a client class named by its import path plugs in the same way as ours.
"""

from __future__ import annotations

import importlib
from typing import Any

from harness.llm.base import LLMClient
from harness.llm.config import BUILTIN_PROVIDERS, LLMConfig


def client_class(provider: str) -> type[LLMClient]:
    """The client class of a built-in provider name or of an import path (``pkg.mod.Class`` / ``pkg.mod:Class``)."""
    path = BUILTIN_PROVIDERS.get(provider, provider)
    module, sep, name = path.partition(":")
    if not sep:
        module, _, name = path.rpartition(".")
    try:
        cls = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as exc:
        raise ValueError(f"LLM provider {provider!r}: cannot import {path} ({type(exc).__name__}: {exc})") from exc
    if not (isinstance(cls, type) and issubclass(cls, LLMClient)):
        raise ValueError(f"LLM provider {provider!r}: {path} is not an LLMClient class")
    return cls


def make_llm(config: LLMConfig | dict[str, Any] | None = None) -> LLMClient:
    """Build the client for ``config`` (a dict is validated into :class:`LLMConfig` first)."""
    if config is None:
        config = LLMConfig()
    elif not isinstance(config, LLMConfig):
        config = LLMConfig.model_validate(dict(config))
    cls = client_class(config.provider)
    factory = getattr(cls, "from_config", None)
    return factory(config) if callable(factory) else cls(config)
