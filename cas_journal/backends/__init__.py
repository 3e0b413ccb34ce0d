"""Layer 2, backends: where bytes live (memory, local directory, S3-compatible storage).

The shared API (``base``) is imported with the package; the backends themselves
(``LocalStore``, ``MemoryStore``) and ``open_store`` are imported on first use (PEP 562),
so a caller that needs only the API, or one backend, does not pay for the others.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..lazy import lazy_exports
from .base import (
    Capabilities,
    IndexUpdate,
    NewObject,
    ObjectStore,
    RefCheck,
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


__getattr__, __dir__ = lazy_exports(__name__, _LAZY)


__all__ = [
    "Capabilities",
    "IndexUpdate",
    "LocalStore",
    "MemoryStore",
    "NewObject",
    "ObjectStore",
    "RefCheck",
    "RefStore",
    "RefUpdate",
    "ReflogEntry",
    "Store",
    "new_object",
    "open_store",
]
