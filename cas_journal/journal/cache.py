"""A bounded, thread-safe-enough cache for immutable values keyed by object id.

Values cached here are derived from immutable objects, so a cached value is never stale;
the cache only bounds memory. Eviction is oldest-inserted first, which is cheap and good
enough for the access patterns of path walks.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, TypeVar

K = TypeVar("K")
V = TypeVar("V")


class BoundedCache(Generic[K, V]):
    """A dict that forgets its oldest entries beyond ``limit`` entries or, with ``weigh``,
    beyond ``max_weight`` in total (e.g. bytes)."""

    def __init__(
        self, limit: int, weigh: Callable[[V], int] | None = None, max_weight: int = 0
    ) -> None:
        self.limit = limit
        self.weigh = weigh
        self.max_weight = max_weight
        self.weight = 0
        self._data: dict[K, V] = {}
        self.get: Callable[[K], V | None] = self._data.get
        """The cached value, or None (the dict's own ``get``: lookups are on hot paths)."""
        self.data: dict[K, V] = self._data
        """The dict itself: a caller on a hot path may store into it directly while an
        unweighted cache holds fewer than ``limit`` values (``put``'s own first case)."""

    def put(self, key: K, value: V, weight: int | None = None) -> V:
        """Cache and return ``value`` (``weight``: what ``weigh`` gives for it, if the
        caller already knows)."""
        data = self._data
        if self.weigh is None:
            if len(data) < self.limit:
                data[key] = value  # the common case, kept short: a cold path read puts 10,000s
                return value
            weight = 0
        elif weight is None:
            weight = self.weigh(value)
        while data and (
            len(data) >= self.limit or (self.weigh and self.weight + weight > self.max_weight)
        ):
            # another thread may change the dict meanwhile: then evict next time
            try:
                oldest = next(iter(data))
                evicted = data.pop(oldest)
            except (RuntimeError, StopIteration, KeyError):
                break
            if self.weigh is not None:
                self.weight -= self.weigh(evicted)
        if key in data and self.weigh is not None:
            self.weight -= self.weigh(data[key])
        data[key] = value
        self.weight += weight
        return value

    def clear(self) -> None:
        """Forget everything."""
        self._data.clear()
        self.weight = 0

    def __len__(self) -> int:
        return len(self._data)
