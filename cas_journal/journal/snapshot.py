"""A thread as read at one moment: one thread state and everything reading it needs.

``Journal.snapshot(thread_id)`` reads the thread's ref once; every read through the
snapshot (entries, paths, membership, metadata) answers from that one state, so a
caller that needs several consistent answers (an export, a UI showing a thread) gets
them even while others append. Entries are shared objects: later changes to the thread
never change a snapshot.
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import cached_property

from ..errors import AmbiguousPrefix, EntryNotFound
from ..objects import ThreadStateNode, is_oid
from .entries import EntryReader
from .graph import EntryGraph
from .models import Entry, ThreadMeta
from .state import ThreadHead


class ThreadSnapshot:
    """One state of one thread, for reading."""

    def __init__(self, head: ThreadHead, graph: EntryGraph, reader: EntryReader) -> None:
        self._head = head
        self._graph = graph
        self._reader = reader

    @property
    def thread_id(self) -> str:
        """The thread's id."""
        return self._head.thread_id

    @property
    def state_oid(self) -> str:
        """The oid of the thread state this snapshot reads."""
        return self._head.state_oid

    @property
    def state(self) -> ThreadStateNode:
        """The thread state itself (metadata, leaf, branch heads, history links)."""
        return self._head.state

    @property
    def leaf(self) -> str | None:
        """The thread's leaf entry, if any."""
        return self._head.leaf

    @property
    def heads(self) -> tuple[str, ...]:
        """Every branch head of the thread (``entries()`` walks back from these)."""
        return self._head.state.heads

    @cached_property
    def meta(self) -> ThreadMeta:
        """The thread's metadata (a copy of its own: edit it and pass it to
        ``update_thread``)."""
        return self._head.meta()

    def contains(self, entry_id: str) -> bool:
        """True if the entry is reachable from one of the thread's branch heads."""
        state = self._head.state
        return self._graph.contains(state.heads, entry_id, state.leaf)

    def _require(self, entry_id: str) -> str:
        if not self.contains(entry_id):
            raise EntryNotFound(f"entry {entry_id!r} not found in thread {self.thread_id!r}")
        return entry_id

    def entry(self, entry_id: str) -> Entry:
        """One entry of the thread; EntryNotFound if the thread does not reach it."""
        return self._reader.entry(self.thread_id, self._require(entry_id))

    def path(self, leaf_id: str | None = None) -> list[Entry]:
        """Entries from the root to ``leaf_id`` (the thread's leaf by default)."""
        leaf = self._require(leaf_id) if leaf_id else self.leaf
        return self._reader.path(self.thread_id, leaf)

    def iter_path(self, leaf_id: str | None = None, limit: int = 0) -> Iterator[Entry]:
        """Entries from ``leaf_id`` (the leaf by default) back towards the root, newest
        first, at most ``limit`` of them (0: all), in memory bounded by one entry."""
        leaf = self._require(leaf_id) if leaf_id else self.leaf
        return self._reader.walk_back(self.thread_id, leaf, limit)

    def entries(self) -> list[Entry]:
        """Every entry of the thread, abandoned branches included, oldest first (by
        created_at, then depth, then id)."""
        oids = self._graph.reachable(self.heads)
        found = [self._reader.entry(self.thread_id, oid) for oid in oids]
        found.sort(key=lambda e: (e.created_at, self._graph.node(e.id).depth, e.id))
        return found

    def resolve(self, prefix: str) -> str:
        """The one entry of the thread whose id starts with ``prefix``; EntryNotFound if
        none does, AmbiguousPrefix (listing them) if several do."""
        prefix = prefix.lower()
        candidates = [prefix] if is_oid(prefix) else self._graph.objects.oids_with_prefix(prefix)
        matches = [oid for oid in candidates if self.contains(oid)]
        if not matches:
            raise EntryNotFound(f"no entry of thread {self.thread_id!r} starts with {prefix!r}")
        if len(matches) > 1:
            raise AmbiguousPrefix(prefix, matches)
        return matches[0]
