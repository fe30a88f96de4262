"""``make_llm(config)``: the client for an :class:`LLMConfig`.

Provider modules are imported on demand (by import path), so the optional heavy dependencies (vllm) are only
touched when chosen, and a client class named by its import path plugs in the same way as ours. Naming a module
runs its code, so a provider is whoever writes the configuration's choice (the operator, a config file, a test),
never a network client: the workbench's API takes model configurations by name only (harness/app/serve). Before
anything is imported, :func:`check_provider` refuses text that is not a built-in name or an import path, and a
module that does not exist (found without running it).
"""

from __future__ import annotations

import importlib
import importlib.util
from typing import Any

from harness.llm.base import LLMClient
from harness.llm.config import BUILTIN_PROVIDERS, IMPORT_PATH, LLMConfig


def check_provider(provider: str) -> tuple[str, str]:
    """``(module, class name)`` of a built-in provider name or an import path (``pkg.mod.Class`` /
    ``pkg.mod:Class``), checked without importing the module itself (its parent packages are imported to find it)."""
    if provider in BUILTIN_PROVIDERS:
        module, _, name = BUILTIN_PROVIDERS[provider].partition(":")
        return module, name
    if not isinstance(provider, str) or not IMPORT_PATH.fullmatch(provider):
        raise ValueError(f"LLM provider {provider!r}: not one of {', '.join(BUILTIN_PROVIDERS)} nor an import path "
                         "(package.module.Class)")
    module, sep, name = provider.partition(":")
    if not sep:
        module, _, name = provider.rpartition(".")
    try:
        found = importlib.util.find_spec(module)
    except (ImportError, ValueError) as exc:
        raise ValueError(f"LLM provider {provider!r}: cannot find module {module} ({type(exc).__name__}: {exc})") \
            from None
    if found is None:
        raise ValueError(f"LLM provider {provider!r}: no module named {module!r}")
    return module, name


def client_class(provider: str) -> type[LLMClient]:
    """The client class of a built-in provider name or of an import path (``pkg.mod.Class`` / ``pkg.mod:Class``)."""
    module, name = check_provider(provider)
    try:
        cls = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as exc:
        raise ValueError(f"LLM provider {provider!r}: cannot import {module}:{name} ({type(exc).__name__}: {exc})") \
            from exc
    if not (isinstance(cls, type) and issubclass(cls, LLMClient)):
        raise ValueError(f"LLM provider {provider!r}: {module}:{name} is not an LLMClient class")
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
