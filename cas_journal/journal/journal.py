"""The Journal: threads of entries that branch and fork, on any backend.

Knows nothing about files or S3: everything goes through a Store's object and ref
protocols. Entries are content-addressed objects shared by every thread that reaches
them; a fork is a new ref to a new thread state whose leaf is an existing entry.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterable, Iterator
from datetime import datetime
from types import TracebackType
from typing import Any

from ..backends import IndexUpdate, MemoryStore, NewObject, RefUpdate, Store, open_store
from ..backends.base import apply_index_update
from ..errors import (
    AmbiguousPrefix,
    ConflictError,
    CorruptObject,
    EntryNotFound,
    InvalidParent,
    ThreadExists,
    ThreadNotFound,
)
from ..names import validate_id
from ..objects import (
    EntryNode,
    Kind,
    ThreadStateNode,
    ensure_utc,
    format_time,
    is_oid,
    object_id,
    parse_time,
    skip_depth,
    utc_now,
)
from .batch import Batch
from .checkpoints import CheckpointStore
from .commit import Update, commit, commit_or_report
from .entries import EntryReader
from .graph import EntryGraph
from .leases import LeaseTable
from .listing import list_thread_states
from .models import Entry, ForkPosition, ThreadMeta, TurnLease
from .payload import payload_bytes
from .state import (
    ThreadHead,
    ThreadStates,
    index_key,
    meta_from_state,
    meta_to_state,
    thread_ref,
)

_EDITABLE_EXCLUDE = {"id", "leaf_id", "created_at", "updated_at"}


def generate_thread_id() -> str:
    """A fresh random thread id."""
    return f"thread-{uuid.uuid4().hex}"


class Journal:
    """Conversation journals and run checkpoints in one content-addressed store."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.graph = EntryGraph(store.objects)
        self.states = ThreadStates(store)
        self.reader = EntryReader(self.graph)
        self.leases = LeaseTable(store, self._require_thread)
        self.checkpoints = CheckpointStore(store)

    # -- opening and closing ------------------------------------------------------------

    @classmethod
    def open(cls, location: str | os.PathLike[str], **options: Any) -> Journal:
        """Open (creating if needed) the store at a directory path or ``s3://bucket/prefix``."""
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

    def _require_thread(self, thread_id: str) -> ThreadHead:
        return self.states.read(thread_id)

    def create_thread(self, meta: ThreadMeta | None = None) -> ThreadMeta:
        """Create a thread (id generated if empty); ThreadExists if the id is taken."""
        meta = meta if meta is not None else ThreadMeta()
        thread_id = meta.id or generate_thread_id()
        validate_id(thread_id, "thread id")
        created = meta.created_at or utc_now()
        leaf = meta.leaf_id or None
        if leaf is not None:
            self.graph.require(leaf, "leaf entry")
        fresh = meta.model_copy(
            update={
                "id": thread_id,
                "created_at": created,
                "updated_at": meta.updated_at or created,
            }
        )
        state = ThreadStateNode(meta_to_state(fresh), leaf, (leaf,) if leaf else ())
        return self._create(thread_id, state, "create", state.heads)

    def _create(
        self,
        thread_id: str,
        state: ThreadStateNode,
        reason: str,
        linked: Iterable[str] = (),
    ) -> ThreadMeta:
        """Create the ref of a new thread at ``state`` (with its listing ref) in one commit.

        ``linked`` are stored objects the state links that this call did not write (a
        fork's entry, an import's heads, a restored state): they are freshened first, so a
        concurrent gc keeps them, and a missing one is EntryNotFound.
        """
        name = thread_ref(thread_id)
        refs = self.store.refs
        if refs.read_ref(name) is not None:
            raise ThreadExists(f"thread {thread_id!r} already exists")
        missing = self.store.objects.freshen(list(linked))
        if missing:
            raise EntryNotFound(f"entry {sorted(missing)[0]!r} is no longer stored")
        state_oid, body = self.states.write(state)
        meta = meta_from_state(state_oid, state)
        assert meta.created_at is not None
        index = index_key(meta.created_at, thread_id)
        swap = RefUpdate(name, None, state_oid, reason)
        objects = [NewObject(state_oid, Kind.THREAD, body)]
        if not commit_or_report(self.store, objects, swap, [IndexUpdate(index, "1")], meta):
            if not self.store.capabilities.atomic_commit:
                self._drop_stale_index(thread_id, index)
            raise ThreadExists(f"thread {thread_id!r} already exists")
        return meta

    def _drop_stale_index(self, thread_id: str, index: str) -> None:
        """After a lost create on a store without atomic commits: remove the listing ref
        the attempt set, unless the thread that won uses the same one."""
        try:
            winner = self.states.read(thread_id).meta().created_at
        except (ThreadNotFound, CorruptObject):
            winner = None
        if winner is None or index_key(winner, thread_id) != index:
            apply_index_update(self.store.refs, IndexUpdate(index, None))

    def thread(self, thread_id: str) -> ThreadMeta:
        """A thread's metadata; ThreadNotFound if absent."""
        return self.states.read(thread_id).meta()

    def update_thread(self, meta: ThreadMeta) -> ThreadMeta:
        """Replace a thread's metadata (never its leaf or created_at).

        If the metadata was read from the store and someone else changed the metadata
        since, ConflictError; appends in between are not a conflict.
        """
        base_oid = meta._state_oid
        base = meta_from_state(base_oid, self.states.state(base_oid)) if base_oid else None
        explicit_update = (
            meta.updated_at if (base is None or meta.updated_at != base.updated_at) else None
        )

        def build(head: ThreadHead) -> Update:
            current = head.meta()
            if base is not None and head.state_oid != base_oid:
                theirs = current.model_dump(exclude=_EDITABLE_EXCLUDE)
                if base.model_dump(exclude=_EDITABLE_EXCLUDE) != theirs and (
                    meta.model_dump(exclude=_EDITABLE_EXCLUDE) != theirs
                ):
                    raise ConflictError(
                        f"thread {meta.id!r} metadata was changed by someone else; re-read it"
                    )
            updated = meta.model_copy(
                update={
                    "created_at": current.created_at,
                    "updated_at": explicit_update or utc_now(),
                }
            )
            state = self.states.successor(head, meta_to_state(updated), head.leaf, head.state.heads)
            return Update(state)

        _, head = commit(self.states, meta.id, build, "update")
        return head.meta()

    def delete_thread(self, thread_id: str) -> None:
        """Delete a thread's ref (restorable from its reflog until gc expires it)."""
        name = thread_ref(thread_id)
        head = self.states.read(thread_id)
        while True:
            created = head.meta().created_at
            index = [IndexUpdate(index_key(created, thread_id), None)] if created else []
            swap = RefUpdate(name, head.state_oid, None, "delete")
            if commit_or_report(self.store, [], swap, index):
                break
            head = self.states.read(thread_id)
        self.leases.drop(thread_id)

    def restore_thread(self, thread_id: str) -> ThreadMeta:
        """Bring back a deleted thread at its last state, from its reflog."""
        name = thread_ref(thread_id)
        if self.store.refs.read_ref(name) is not None:
            raise ThreadExists(f"thread {thread_id!r} exists; nothing to restore")
        last = next((e.new for e in reversed(self.store.refs.reflog(name)) if e.new), None)
        if last is None or not is_oid(last) or self.store.objects.freshen([last]):
            raise ThreadNotFound(f"thread {thread_id!r} has no restorable state in its reflog")
        return self._create(thread_id, self.states.state(last), "restore")

    def list_threads(
        self,
        include_archived: bool = False,
        limit: int = 0,
        after_created_at: datetime | None = None,
        after_id: str | None = None,
    ) -> list[ThreadMeta]:
        """Threads newest created_at first, ties by id; page with (after_created_at, after_id)."""
        start = None
        if after_created_at is not None and after_id:
            start = index_key(ensure_utc(after_created_at), after_id)
        return list(self._iter_threads(include_archived, limit, start))

    def _iter_threads(
        self, include_archived: bool, limit: int, start: str | None
    ) -> Iterator[ThreadMeta]:
        found = 0
        for listed in list_thread_states(self.store, include_archived, 0, start):
            if listed.state is None:
                continue  # damaged: fsck reports it; the intact threads are still listed
            try:
                meta = meta_from_state(listed.state_oid, listed.state)
            except CorruptObject:
                continue
            yield meta
            found += 1
            if limit > 0 and found >= limit:
                return

    # -- entries -------------------------------------------------------------------------

    def _in_thread(self, head: ThreadHead, entry_id: str) -> bool:
        return self.graph.contains(head.state.heads, entry_id, head.leaf)

    def new_entry_node(
        self,
        payload_oid: str,
        parent: str | None,
        created: datetime,
        turn_id: str,
        pending: dict[str, EntryNode] | None = None,
    ) -> EntryNode:
        """The node for a new entry under ``parent`` (``pending``: uncommitted nodes)."""
        if parent is None:
            return EntryNode(payload=payload_oid, created_at=format_time(created), turn_id=turn_id)
        parent_node = (pending or {}).get(parent) or self.graph.node(parent)
        depth = parent_node.depth + 1
        skip = None
        if depth >= 2:
            skip = self.graph.ancestor_at(parent, skip_depth(depth), pending)
        return EntryNode(
            payload=payload_oid,
            created_at=format_time(created),
            depth=depth,
            parent=parent,
            skip=skip,
            turn_id=turn_id,
        )

    def append(
        self, entry: Entry, parent_id: str | None = None, now: datetime | None = None
    ) -> Entry:
        """Append an entry to its thread and make it the leaf.

        The parent is ``parent_id``, else ``entry.parent_id``, else the thread's leaf (a
        concurrent append then re-parents this one onto the newer leaf). An explicit
        parent must belong to the thread (InvalidParent). The entry's id is its hash:
        appending the same content under the same parent at the same time is a no-op.
        """
        thread_id = validate_id(entry.thread_id, "thread id")
        explicit = parent_id or entry.parent_id or None
        created = ensure_utc(now or entry.created_at or utc_now())
        payload = payload_bytes(entry)
        payload_oid = object_id(Kind.BLOB, payload)
        made: dict[str, EntryNode] = {}

        def build(head: ThreadHead) -> Update | None:
            if explicit is not None and not self._in_thread(head, explicit):
                raise InvalidParent(f"entry {explicit!r} is not part of thread {thread_id!r}")
            parent = explicit if explicit is not None else head.leaf
            node = self.new_entry_node(payload_oid, parent, created, entry.turn_id)
            node_body = node.body()
            entry_oid = object_id(Kind.ENTRY, node_body)
            stored = self._stored_entry(entry, entry_oid, node, payload, thread_id)
            made[entry_oid] = node
            if entry_oid == head.leaf:
                return None
            heads = set(head.state.heads)
            heads.discard(parent or "")
            heads.add(entry_oid)
            meta = dict(head.state.meta, updated_at=format_time(created))
            state = self.states.successor(head, meta, entry_oid, tuple(heads))
            objects = [
                NewObject(payload_oid, Kind.BLOB, payload),
                NewObject(entry_oid, Kind.ENTRY, node_body),
            ]
            return Update(state, objects, stored)

        update, head = commit(self.states, thread_id, build, "append")
        if update is None:  # already the leaf: identical retry
            assert head.leaf is not None
            return self.reader.entry(thread_id, head.leaf)
        result = update.result
        assert isinstance(result, Entry)
        self.graph.remember(result.id, made[result.id])
        self.reader.remember(thread_id, [result])
        return result

    def _stored_entry(
        self, entry: Entry, entry_oid: str, node: EntryNode, payload: bytes, thread_id: str
    ) -> Entry:
        return entry.model_copy(
            update={
                "id": entry_oid,
                "thread_id": thread_id,
                "parent_id": node.parent or "",
                "created_at": parse_time(node.created_at),
                "raw": payload.decode("utf-8"),
                "raw_hash": node.payload,
            }
        )

    def batch(self, thread_id: str) -> Batch:
        """Group many appends into one commit: ``with j.batch("t") as b: b.append(...)``."""
        return Batch(self, thread_id)

    def entry(self, thread_id: str, entry_id: str) -> Entry:
        """An entry reachable from the thread; EntryNotFound otherwise."""
        head = self.states.read(thread_id)
        if not self._in_thread(head, entry_id):
            raise EntryNotFound(f"entry {entry_id!r} not found in thread {thread_id!r}")
        return self.reader.entry(thread_id, entry_id)

    def resolve_entry(self, thread_id: str, prefix: str) -> str:
        """The one entry of the thread whose id starts with ``prefix``.

        ThreadNotFound, EntryNotFound if no entry of the thread matches, AmbiguousPrefix
        (listing them) if several do.
        """
        head = self.states.read(thread_id)
        prefix = prefix.lower()
        matches = [
            oid
            for oid in ([prefix] if is_oid(prefix) else self.store.objects.oids_with_prefix(prefix))
            if self._in_thread(head, oid)
        ]
        if not matches:
            raise EntryNotFound(f"no entry of thread {thread_id!r} starts with {prefix!r}")
        if len(matches) > 1:
            raise AmbiguousPrefix(prefix, matches)
        return matches[0]

    def entries(self, thread_id: str) -> list[Entry]:
        """Every entry of the thread, abandoned branches included, oldest first."""
        head = self.states.read(thread_id)
        oids = self.graph.reachable(head.state.heads)
        found = [self.reader.entry(thread_id, oid) for oid in oids]
        found.sort(key=lambda e: (e.created_at, self.graph.node(e.id).depth, e.id))
        return found

    def path(self, thread_id: str, leaf_id: str | None = None) -> list[Entry]:
        """Entries from the root to ``leaf_id`` (the thread's leaf by default)."""
        head = self.states.read(thread_id)
        leaf = leaf_id or head.leaf
        if leaf_id and not self._in_thread(head, leaf_id):
            raise EntryNotFound(f"entry {leaf_id!r} not found in thread {thread_id!r}")
        return self.reader.path(thread_id, leaf)

    def move_leaf(self, thread_id: str, entry_id: str | None, now: datetime | None = None) -> None:
        """Point the thread's leaf at one of its entries ("" or None: no leaf)."""
        target = entry_id or None
        moved_at = format_time(ensure_utc(now or utc_now()))

        def build(head: ThreadHead) -> Update | None:
            if target is not None and not self._in_thread(head, target):
                raise EntryNotFound(f"entry {target!r} not found in thread {thread_id!r}")
            if target == head.leaf:
                return None
            meta = dict(head.state.meta, updated_at=moved_at)
            return Update(self.states.successor(head, meta, target, head.state.heads))

        commit(self.states, thread_id, build, "move-leaf")

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
        """
        head = self.states.read(thread_id)
        target = entry_id or head.leaf
        if target and not self._in_thread(head, target):
            raise EntryNotFound(f"entry {target!r} not found in thread {thread_id!r}")
        if ForkPosition(position) is ForkPosition.BEFORE:
            if not target:
                raise EntryNotFound(f"thread {thread_id!r} has no entry to fork before")
            target = self.graph.node(target).parent
        new_id = new_thread_id or generate_thread_id()
        validate_id(new_id, "new thread id")
        created = ensure_utc(now or utc_now())
        meta = ThreadMeta(
            id=new_id,
            parent_thread_id=thread_id,
            forked_from_thread_id=thread_id,
            forked_from_entry_id=target or "",
            created_at=created,
            updated_at=created,
        )
        state = ThreadStateNode(meta_to_state(meta), target or None, (target,) if target else ())
        return self._create(new_id, state, "fork", state.heads)

    # -- import (used by cas_journal.maintenance.transfer) -----------------------------

    def create_thread_with_heads(self, meta: ThreadMeta, heads: Iterable[str]) -> ThreadMeta:
        """Create a thread over entries already stored, every branch included.

        ``heads`` are the branch heads ``entries()`` walks back from; ``meta.leaf_id`` is
        the leaf ("" for none) and is added as a head if no head reaches it. Every head
        must be a stored entry (EntryNotFound). The metadata is kept as given (created_at,
        updated_at, fork fields), unlike ``create_thread``. ThreadExists if the id is taken.
        """
        thread_id = validate_id(meta.id, "thread id")
        head_set = set(heads)
        for head in head_set:
            self.graph.require(head, "head entry")
        leaf = meta.leaf_id or None
        if leaf is not None and not self.graph.contains(head_set, leaf):
            self.graph.require(leaf, "leaf entry")
            head_set.add(leaf)
        created = meta.created_at or utc_now()
        fresh = meta.model_copy(
            update={"created_at": created, "updated_at": meta.updated_at or created}
        )
        state = ThreadStateNode(meta_to_state(fresh), leaf, tuple(sorted(head_set)))
        return self._create(thread_id, state, "import", state.heads)

    # -- turn leases ---------------------------------------------------------------------

    def acquire_turn_lease(self, lease: TurnLease) -> TurnLease:
        """Claim the thread's next turn; ActiveTurn if someone holds it."""
        return self.leases.acquire(lease)

    def release_turn_lease(self, lease: TurnLease) -> None:
        """Release a lease; a no-op unless owner and turn match the active one."""
        self.leases.release(lease)

    def active_turn_lease(self, thread_id: str) -> TurnLease | None:
        """The thread's active lease, if any."""
        return self.leases.active(thread_id)

    def clear_expired_turn_lease(self, thread_id: str, cutoff: datetime) -> TurnLease | None:
        """Remove the lease if it was created before ``cutoff``; return what was removed."""
        return self.leases.clear_expired(thread_id, cutoff)
