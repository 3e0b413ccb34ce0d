"""The Journal: threads of entries that branch and fork, and run checkpoints, on any store.

A short façade over the journal's parts, each in its own module: ``threads`` (create,
fork, update, delete, restore, list), ``writer`` and ``batch`` (append, move the leaf),
``snapshot`` and ``entries`` (read), ``leases`` (turn leases) and ``checkpoints``. It
knows nothing about files or S3: everything goes through a Store's protocols, and every
change is one ``Store.commit``.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from datetime import datetime
from types import TracebackType
from typing import Unpack

from ..backends import MemoryStore, Store, open_store
from ..backends.open import StoreOptions
from ..errors import EntryNotFound, JournalError, ObjectNotFound
from ..objects import EntryNode, is_oid
from .batch import Batch
from .checkpoints import CheckpointStore
from .commit import retries
from .entries import EntryReader
from .graph import EntryGraph
from .leases import LeaseTable
from .models import Entry, ForkPosition, ThreadMeta, TurnLease
from .records import RecordStore
from .snapshot import ThreadSnapshot
from .state import ThreadStates
from .threads import DamagedThread, SourceMoved, ThreadBook, generate_thread_id
from .writer import LeafMoved, ThreadWriter

__all__ = ["Journal", "generate_thread_id"]


class Journal:
    """Conversation journals and run checkpoints in one content-addressed store."""

    store: Store
    """The store everything lives in (for maintenance: pack, gc, fsck, sync)."""
    checkpoints: CheckpointStore
    """Run checkpoints: save, load, history, list, delete, restore."""
    records: RecordStore
    """Record chains under named refs: what integrations keep their own structures in."""

    def __init__(self, store: Store) -> None:
        self.store = store
        graph = EntryGraph(store.objects)
        self._states = ThreadStates(store)
        self._graph = graph
        self._reader = EntryReader(graph)
        self._writer = ThreadWriter(self._states, graph, self._reader)
        self._leases = LeaseTable(store, self._states.read)
        self._threads = ThreadBook(store, self._states, graph, self._leases)
        self.checkpoints = CheckpointStore(store)
        self.records = RecordStore(store)

    # -- opening and closing ------------------------------------------------------------

    @classmethod
    def open(cls, location: str | os.PathLike[str], **options: Unpack[StoreOptions]) -> Journal:
        """Open (creating if needed) the store at a directory path or ``s3://bucket/prefix``.

        Options (``StoreOptions``): ``durable``, ``max_object_size``, ``create``; for S3
        also ``endpoint_url``, ``region_name``, credentials and client settings. An
        unknown option is an InvalidInputError naming the valid ones.
        """
        return cls(open_store(location, **options))

    @classmethod
    def memory(cls) -> Journal:
        """A journal in memory, gone when the process ends."""
        return cls(MemoryStore())

    def close(self) -> None:
        """Release the store's files and connections."""
        self.store.close()

    def __enter__(self) -> Journal:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # -- threads -------------------------------------------------------------------------

    def create_thread(self, meta: ThreadMeta | None = None) -> ThreadMeta:
        """Create a thread (id generated if empty); ThreadExists if the id is taken."""
        return self._threads.create(meta)

    def thread(self, thread_id: str) -> ThreadMeta:
        """A thread's metadata; ThreadNotFound if absent."""
        return self._states.read(thread_id).meta()

    def update_thread(self, meta: ThreadMeta) -> ThreadMeta:
        """Replace a thread's metadata (never its leaf or created_at).

        If the metadata was read from the store and someone else changed the metadata
        since, ConflictError; appends in between are not a conflict.
        """
        return self._threads.update(meta)

    def delete_thread(self, thread_id: str) -> None:
        """Delete a thread's ref (restorable from its reflog until gc expires it)."""
        self._threads.delete(thread_id)

    def restore_thread(self, thread_id: str) -> ThreadMeta:
        """Bring back a deleted thread at its last state, from its reflog."""
        return self._threads.restore(thread_id)

    def deleted_threads(self) -> list[str]:
        """Ids of deleted threads that ``restore_thread`` can still bring back."""
        return self._threads.deleted()

    def list_threads(
        self,
        include_archived: bool = False,
        limit: int = 0,
        after_created_at: datetime | None = None,
        after_id: str | None = None,
        on_damaged: DamagedThread | None = None,
    ) -> list[ThreadMeta]:
        """Threads newest created_at first, ties by id; page with (after_created_at, after_id).

        A thread whose stored state is damaged is left out and reported: to
        ``on_damaged(thread_id, error)`` if given, else as a logged warning.
        """
        return self._threads.list(include_archived, limit, after_created_at, after_id, on_damaged)

    def fork(
        self,
        thread_id: str,
        entry_id: str | None = None,
        position: ForkPosition = ForkPosition.AT,
        new_thread_id: str | None = None,
        now: datetime | None = None,
    ) -> ThreadMeta:
        """A new thread sharing the source's history up to an entry; no entry is copied.

        AT: the new leaf is the entry (the source's leaf by default); BEFORE: its parent.
        A source this journal wrote or read lately is not read again: the fork's commit
        checks that it still holds that state, and the fork is decided again on the
        source read anew if not.
        """
        remembered = self._states.last(thread_id)
        if remembered is not None:
            source = ThreadSnapshot(remembered, self._graph, self._reader)
            target = entry_id or source.leaf
            try:
                held = not target or source.contains(target)
            except JournalError:
                held = False  # decided on the source as it is now, below
            if held:
                try:
                    return self._threads.fork(
                        thread_id, target, position, new_thread_id, now, remembered.state_oid
                    )
                except SourceMoved:
                    pass
        source = self.snapshot(thread_id)
        target = entry_id or source.leaf
        if target and not source.contains(target):
            raise EntryNotFound(f"entry {target!r} not found in thread {thread_id!r}")
        return self._threads.fork(thread_id, target, position, new_thread_id, now)

    def create_thread_with_heads(self, meta: ThreadMeta, heads: Iterable[str]) -> ThreadMeta:
        """Create a thread over entries already stored, every branch included (import).

        ``heads`` are the branch heads ``entries()`` walks back from; ``meta.leaf_id`` is
        the leaf ("" for none) and is added as a head if no head reaches it. Every head
        must be a stored entry (EntryNotFound). The metadata is kept as given (created_at,
        updated_at, fork fields), unlike ``create_thread``. ThreadExists if the id is taken.
        """
        return self._threads.create_with_heads(meta, heads)

    # -- entries -------------------------------------------------------------------------

    def snapshot(self, thread_id: str) -> ThreadSnapshot:
        """The thread as it is now, for several consistent reads (ThreadNotFound)."""
        return ThreadSnapshot(self._states.read(thread_id), self._graph, self._reader)

    def append(
        self, entry: Entry, parent_id: str | None = None, now: datetime | None = None
    ) -> Entry:
        """Append an entry to its thread and make it the leaf.

        The parent is ``parent_id``, else ``entry.parent_id``, else the thread's leaf (a
        concurrent append then re-parents this one onto the newer leaf). An explicit
        parent must belong to the thread (InvalidParent). The entry's id is its hash:
        appending the same content under the same parent at the same time is a no-op.
        """
        return self._writer.append(entry, parent_id, now)

    def append_many(
        self,
        thread_id: str,
        entries: Sequence[Entry] | Callable[[], Sequence[Entry]],
        *,
        reparent: bool = True,
        now: datetime | None = None,
    ) -> list[Entry]:
        """Append entries after the thread's leaf, each the parent of the next, in one
        commit; returns them as stored (none: nothing is written).

        If another writer moves the leaf meanwhile, the entries are built again on the
        new leaf and committed (``reparent=False``: ConflictError instead), as ``append``
        does for one entry. ``entries`` may be a function returning them, called again
        at each attempt after the thread is read, for a choice that depends on what the
        thread holds then (the entries not already there, say).
        """
        for _ in retries(f"thread {thread_id!r} kept moving; entries not appended"):
            batch = Batch(self._writer, thread_id)
            try:
                with batch:
                    for entry in entries() if callable(entries) else entries:
                        batch.append(entry, now=now)
            except LeafMoved:
                if not reparent:
                    raise
                continue
            return batch.entries
        raise AssertionError("unreachable: retries raises when the rounds run out")

    def batch(self, thread_id: str) -> Batch:
        """Group many appends into one commit: ``with j.batch("t") as b: b.append(...)``."""
        return Batch(self._writer, thread_id)

    def entry(self, thread_id: str, entry_id: str) -> Entry:
        """An entry reachable from the thread; EntryNotFound otherwise."""
        return self.snapshot(thread_id).entry(entry_id)

    def resolve_entry(self, thread_id: str, prefix: str) -> str:
        """The one entry of the thread whose id starts with ``prefix``.

        ThreadNotFound, EntryNotFound if no entry of the thread matches, AmbiguousPrefix
        (listing them) if several do.
        """
        return self.snapshot(thread_id).resolve(prefix)

    def entries(self, thread_id: str) -> list[Entry]:
        """Every entry of the thread, abandoned branches included, oldest first."""
        return self.snapshot(thread_id).entries()

    def path(self, thread_id: str, leaf_id: str | None = None) -> list[Entry]:
        """Entries from the root to ``leaf_id`` (the thread's leaf by default)."""
        return self.snapshot(thread_id).path(leaf_id)

    def iter_path(
        self, thread_id: str, leaf_id: str | None = None, limit: int = 0
    ) -> Iterator[Entry]:
        """Entries from ``leaf_id`` (the thread's leaf by default) back towards the root,
        newest first, at most ``limit`` (0: all); memory stays bounded by what the caller
        keeps, however long the thread."""
        return self.snapshot(thread_id).iter_path(leaf_id, limit)

    def entry_by_id(self, entry_id: str, thread_id: str = "") -> Entry:
        """The stored entry ``entry_id`` as seen from ``thread_id`` ("": from none),
        without checking that the thread reaches it; EntryNotFound if no entry is stored
        under that id. (``entry`` is the checked read.)"""
        self.entry_node(entry_id)
        return self._reader.entry(thread_id, entry_id)

    def entry_node(self, entry_id: str) -> EntryNode:
        """Where a stored entry sits in its tree (parent, depth, skip pointer, payload oid,
        turn, time): the cheap way to walk from entry to entry. EntryNotFound if no entry
        is stored under that id (naming the kind if another object is)."""
        if not is_oid(entry_id):
            raise EntryNotFound(f"entry {entry_id!r} not found")
        try:
            return self._graph.node(entry_id)
        except ObjectNotFound as exc:
            raise EntryNotFound(f"entry {entry_id!r} not found") from exc

    def move_leaf(self, thread_id: str, entry_id: str | None, now: datetime | None = None) -> None:
        """Point the thread's leaf at one of its entries ("" or None: no leaf)."""
        self._writer.move_leaf(thread_id, entry_id, now)

    # -- turn leases ---------------------------------------------------------------------

    def acquire_turn_lease(self, lease: TurnLease) -> TurnLease:
        """Claim the thread's next turn; ActiveTurn if someone holds it."""
        return self._leases.acquire(lease)

    def release_turn_lease(self, lease: TurnLease) -> None:
        """Release a lease; a no-op unless owner and turn match the active one."""
        self._leases.release(lease)

    def active_turn_lease(self, thread_id: str) -> TurnLease | None:
        """The thread's active lease, if any."""
        return self._leases.active(thread_id)

    def clear_expired_turn_lease(self, thread_id: str, cutoff: datetime) -> TurnLease | None:
        """Remove the lease if it was created before ``cutoff``; return what was removed."""
        return self._leases.clear_expired(thread_id, cutoff)
