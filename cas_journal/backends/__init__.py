"""Layer 2, backends: where bytes live (memory, local directory, S3-compatible storage)."""

from .base import ObjectStore, ReflogEntry, RefStore, Store
from .local import LocalStore
from .memory import MemoryStore
from .open import open_store

__all__ = [
    "LocalStore",
    "MemoryStore",
    "ObjectStore",
    "RefStore",
    "ReflogEntry",
    "Store",
    "open_store",
]
