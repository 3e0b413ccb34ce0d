"""The embedded local-directory backend."""

from .store import FORMAT_VERSION, LocalStore, is_store

__all__ = ["FORMAT_VERSION", "LocalStore", "is_store"]
