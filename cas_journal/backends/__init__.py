"""Layer 2, backends: where bytes live (memory, local directory, S3-compatible storage).

The shared API (``base``) is imported with the package; the backends themselves
(``LocalStore``, ``MemoryStore``) and ``open_store`` are imported on first use (PEP 562),
so a caller that needs only the API, or one backend, does not pay for the others.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from .base import (
    Capabilities,
    IndexUpdate,
    NewObject,
    ObjectStore,
    ReflogEntry,
    RefStore,
    RefUpdate,
    Store,
    new_object,
)

if TYPE_CHECKING:
    from .local import LocalStore
    from .memory import MemoryStore
    from .open import open_store

_LAZY = {"LocalStore": ".local", "MemoryStore": ".memory", "open_store": ".open"}
"""Names imported from their module on first use."""


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


__all__ = [
    "Capabilities",
    "IndexUpdate",
    "LocalStore",
    "MemoryStore",
    "NewObject",
    "ObjectStore",
    "RefStore",
    "RefUpdate",
    "ReflogEntry",
    "Store",
    "new_object",
    "open_store",
]
