"""Materialise public Entry objects from stored nodes and payloads, with caching.

Entries are immutable and content-addressed, so cached entries never go stale. Paths are
cached per (thread, leaf); reading the path of a leaf whose ancestor's path is cached
only loads the entries below that ancestor, so a thread that is appended to and read
back does not walk its whole history each time.
"""

from __future__ import annotations

from typing import Any

from ..errors import CorruptObject
from ..objects import Kind
from .cache import BoundedCache
from .graph import EntryGraph
from .models import Entry
from .payload import build_entry, parse_payload

PATH_CACHE_SIZE = 16
PATH_CACHE_ENTRIES = 50_000
"""Entries held by cached paths, at most (a 10,000-entry path is one fifth of it)."""
ENTRY_CACHE_SIZE = 1 << 14
PAYLOAD_CACHE_BYTES = 32 * 1024 * 1024
"""Payload text (tool outputs can be large) kept for reuse, at most."""


class EntryReader:
    """Builds Entry objects and paths for a thread."""

    def __init__(self, graph: EntryGraph) -> None:
        self.graph = graph
        self._payloads: BoundedCache[str, tuple[dict[str, Any], str]] = BoundedCache(
            ENTRY_CACHE_SIZE,
            weigh=lambda item: 2 * len(item[1]) + 500,
            max_weight=PAYLOAD_CACHE_BYTES,
        )
        self._entries: BoundedCache[tuple[str, str], Entry] = BoundedCache(
            ENTRY_CACHE_SIZE,
            weigh=lambda entry: 2 * len(entry.raw) + 1500,
            max_weight=PAYLOAD_CACHE_BYTES,
        )
        self._paths: BoundedCache[tuple[str, str], tuple[Entry, ...]] = BoundedCache(
            PATH_CACHE_SIZE, weigh=len, max_weight=PATH_CACHE_ENTRIES
        )

    def payload(self, oid: str) -> tuple[dict[str, Any], str]:
        """The parsed fields and raw JSON of a payload blob."""
        cached = self._payloads.get(oid)
        if cached is None:
            kind, body = self.graph.objects.get(oid)
            if kind is not Kind.BLOB:
                raise CorruptObject(f"entry payload is a {kind.value}, not a blob", oid)
            cached = self._payloads.put(oid, (parse_payload(oid, body), body.decode("utf-8")))
        return cached

    def entry(self, thread_id: str, oid: str) -> Entry:
        """The Entry ``oid`` as seen from ``thread_id`` (no membership check)."""
        key = (thread_id, oid)
        cached = self._entries.get(key)
        if cached is None:
            node = self.graph.node(oid)
            fields, raw = self.payload(node.payload)
            cached = self._entries.put(key, build_entry(oid, node, fields, raw, thread_id))
        return cached

    def remember(self, thread_id: str, entries: list[Entry]) -> None:
        """Cache entries just written (a later ``path`` then extends a cached parent path)."""
        for entry in entries:
            self._entries.put((thread_id, entry.id), entry)

    def path(self, thread_id: str, leaf: str | None) -> list[Entry]:
        """Entries from the root to ``leaf`` as seen from ``thread_id``."""
        if not leaf:
            return []
        cached = self._paths.get((thread_id, leaf))
        if cached is not None:
            return list(cached)
        tail: list[str] = []
        prefix: tuple[Entry, ...] = ()
        current: str | None = leaf
        while current is not None:
            found = self._paths.get((thread_id, current))
            if found is not None:
                prefix = found
                break
            tail.append(current)
            current = self.graph.node(current).parent
        tail.reverse()
        full = prefix + tuple(self.entry(thread_id, oid) for oid in tail)
        self._paths.put((thread_id, leaf), full)
        return list(full)
