"""The systems under test, imported lazily so one that fails to import cannot stop others."""

from __future__ import annotations

import importlib
from pathlib import Path

from .base import System

REGISTRY: dict[str, tuple[str, str]] = {
    "cas": ("cas", "CasSystem"),
    "cas-nd": ("cas", "CasNonDurableSystem"),
    "jsonl": ("jsonl", "JsonlSystem"),
    "jsonl-fsync": ("jsonl", "JsonlFsyncSystem"),
    "seedfs": ("seedfs", "SeedFsSystem"),
    "sqlite": ("sqlite", "SqliteSystem"),
    "sqlite-nd": ("sqlite", "SqliteNoSyncSystem"),
    "git": ("gitrepo", "GitSystem"),
    "langgraph": ("langgraph_cp", "LangGraphSystem"),
    "langgraph-delta": ("langgraph_cp", "LangGraphDeltaSystem"),
    "baseline": ("null", "NullSystem"),
}
"""name -> (module in bench.systems, class name)."""

CAS_FOR: dict[bool, str] = {True: "cas", False: "cas-nd"}
"""The cas-journal variant a peer is compared with, by the peer's durability."""


def system_class(name: str) -> type[System]:
    """Import and return the adapter class registered under ``name``."""
    module_name, class_name = REGISTRY[name]
    module = importlib.import_module(f"{__name__}.{module_name}")
    cls: type[System] = getattr(module, class_name)
    return cls


def make_system(name: str, root: Path) -> System:
    """An adapter instance for ``name`` on directory ``root`` (not yet opened)."""
    return system_class(name)(root)
