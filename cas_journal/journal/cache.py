"""A bounded, thread-safe-enough cache for immutable values keyed by object id.

Values cached here are derived from immutable objects, so a cached value is never stale;
the cache only bounds memory. Eviction is oldest-inserted first, which is cheap and good
enough for the access patterns of path walks.
"""

from __future__ import annotations

import contextlib
from typing import Generic, TypeVar

K = TypeVar("K")
V = TypeVar("V")


class BoundedCache(Generic[K, V]):
    """A dict that forgets its oldest entries beyond ``limit``."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._data: dict[K, V] = {}

    def get(self, key: K) -> V | None:
        """The cached value, or None."""
        return self._data.get(key)

    def put(self, key: K, value: V) -> V:
        """Cache and return ``value``."""
        data = self._data
        if len(data) >= self.limit:
            # another thread may change the dict meanwhile: then evict next time
            with contextlib.suppress(RuntimeError, StopIteration, KeyError):
                del data[next(iter(data))]
        data[key] = value
        return value

    def clear(self) -> None:
        """Forget everything."""
        self._data.clear()

    def __len__(self) -> int:
        return len(self._data)
