"""Layer 2, backends: where bytes live (memory, local directory, S3-compatible storage)."""

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
from .local import LocalStore
from .memory import MemoryStore
from .open import open_store

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
