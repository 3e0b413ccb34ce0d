"""Changing what a thread holds: append an entry, move its leaf, commit a batch.

Each change reads the thread's head once, builds the new objects and the next thread
state, and makes them one ``Store.commit`` (see ``commit``). Entries are built by the
EntryBuilder, the one home of entry building; a lost race rebuilds only what depends on
the head (an append to the default leaf is re-parented onto the newer leaf).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime

from ..errors import ConflictError, EntryNotFound, InvalidParent
from ..names import validate_id
from ..objects import EntryNode, ensure_utc, format_time, utc_now
from .building import BuiltEntry, EntryBuilder, objects_of
from .commit import Update, commit
from .entries import EntryReader
from .graph import EntryGraph
from .models import Entry
from .state import ThreadHead, ThreadStates


class LeafMoved(ConflictError):
    """A batch's thread got a new leaf from another writer: nothing was committed."""


class ThreadWriter:
    """Appends entries to threads and moves their leaves."""

    def __init__(self, states: ThreadStates, graph: EntryGraph, reader: EntryReader) -> None:
        self.states = states
        self.graph = graph
        self.reader = reader
        self.builder = EntryBuilder(graph)

    def contains(self, head: ThreadHead, entry_id: str) -> bool:
        """True if the entry is reachable from the thread's branch heads."""
        return self.graph.contains(head.state.heads, entry_id, head.leaf)

    def append(self, entry: Entry, parent_id: str | None, now: datetime | None) -> Entry:
        """Append ``entry`` to its thread under ``parent_id`` (else ``entry.parent_id``,
        else the leaf, re-parented on a race) and make it the leaf."""
        thread_id = validate_id(entry.thread_id, "thread id")
        explicit = parent_id or entry.parent_id or None
        prepared = self.builder.prepare(entry, now)
        built: list[BuiltEntry] = []

        def build(head: ThreadHead) -> Update | None:
            if explicit is not None and not self.contains(head, explicit):
                raise InvalidParent(f"entry {explicit!r} is not part of thread {thread_id!r}")
            parent = explicit if explicit is not None else head.leaf
            made = self.builder.build(prepared, parent)
            if made.oid == head.leaf:
                return None  # an identical retry: already the leaf
            built.append(made)
            heads: tuple[str, ...] = head.state.heads
            if heads == (parent,) or not heads:  # (the common case, without a set)
                heads = (made.oid,)
            else:
                others = set(heads)
                others.discard(parent or "")
                others.add(made.oid)
                heads = tuple(others)
            meta = dict(head.state.meta, updated_at=prepared.created_at)
            state = self.states.successor(head, meta, made.oid, heads)
            stored = self.builder.stored(prepared, made, thread_id)
            return Update(state, made.objects(), stored)

        update, head = commit(self.states, thread_id, build, "append")
        if update is None:
            assert head.leaf is not None
            return self.reader.entry(thread_id, head.leaf)
        result = update.result
        assert isinstance(result, Entry)
        self.graph.remember(result.id, built[-1].node)
        self.reader.remember(thread_id, [result])
        return result

    def commit_batch(
        self,
        base: ThreadHead,
        tip: str | None,
        nodes: Mapping[str, EntryNode],
        built: list[BuiltEntry],
        entries: list[Entry],
        last_time: datetime,
    ) -> None:
        """Commit entries built over ``base``: ``nodes`` (parents before children) become
        branch heads where they end a branch, ``tip`` the leaf. ConflictError, committing
        nothing, if the thread's leaf moved since ``base`` (a metadata change is merged)."""
        thread_id = base.thread_id
        objects = objects_of(built)

        def build(head: ThreadHead) -> Update:
            if head.state_oid != base.state_oid and head.leaf != base.leaf:
                raise LeafMoved(
                    f"thread {thread_id!r} moved during the batch; nothing was committed"
                )
            heads = set(head.state.heads)
            for oid, node in nodes.items():
                heads.discard(node.parent or "")
                heads.add(oid)
            meta = dict(head.state.meta, updated_at=format_time(last_time))
            return Update(self.states.successor(head, meta, tip, tuple(heads)), objects)

        commit(self.states, thread_id, build, f"append {len(entries)}", base)
        for oid, node in nodes.items():
            self.graph.remember(oid, node)
        self.reader.remember(thread_id, entries)

    def move_leaf(self, thread_id: str, entry_id: str | None, now: datetime | None) -> None:
        """Point the thread's leaf at one of its entries ("" or None: no leaf)."""
        target = entry_id or None
        moved_at = format_time(ensure_utc(now or utc_now()))

        def build(head: ThreadHead) -> Update | None:
            if target is not None and not self.contains(head, target):
                raise EntryNotFound(f"entry {target!r} not found in thread {thread_id!r}")
            if target == head.leaf:
                return None
            meta = dict(head.state.meta, updated_at=moved_at)
            return Update(self.states.successor(head, meta, target, head.state.heads))

        commit(self.states, thread_id, build, "move-leaf")
