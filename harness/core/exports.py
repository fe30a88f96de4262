"""A package's public face, loaded on first use: ``__all__`` names what it offers, and nothing heavy (an SR engine,
llama.cpp, sympy) is imported until one of those names is read."""

from __future__ import annotations

import importlib
from typing import Any, Callable


def lazy_exports(package: str, names: dict[str, str]) -> tuple[list[str], Callable[[str], Any], Callable[[], list[str]]]:
    """``(__all__, __getattr__, __dir__)`` for ``package``: each name in ``names`` read from its module on demand."""

    def __getattr__(name: str) -> Any:
        if name in names:
            return getattr(importlib.import_module(names[name]), name)
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    def __dir__() -> list[str]:
        return sorted(names)

    return sorted(names), __getattr__, __dir__
