"""Lazy exports for package ``__init__`` modules (PEP 562).

A package names where each public name lives; the name's module is imported the first
time the name is used and the value is then kept in the package, so later uses cost a
plain attribute lookup. Keeps ``import cas_journal`` and the command line's start-up from
building what they do not use (the pydantic models, the backends they do not open).
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any


def lazy_exports(
    package: str, homes: Mapping[str, str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``(__getattr__, __dir__)`` for ``package``: ``homes`` maps each lazily exported
    name to its module, relative to ``package`` (e.g. ``".journal"``)."""

    def get(name: str) -> Any:
        home = homes.get(name)
        if home is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(home, package), name)
        setattr(sys.modules[package], name, value)
        return value

    def listing() -> list[str]:
        return sorted(set(vars(sys.modules[package])) | set(homes))

    return get, listing
