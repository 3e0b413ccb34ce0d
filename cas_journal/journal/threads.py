"""Thread lifecycle and listing: create, fork, import, update, delete, restore, list.

Every change is one ``Store.commit``: the thread ref's compare-and-swap together with
its listing ref (``threadindex/<inverted created_at>/<id>``, an IndexUpdate). Objects a
new thread links but did not write (a fork's entry, an import's heads) go into the
commit as ``linked``, so a concurrent gc keeps them (a store that commits atomically
freshens them in the commit's own transaction); a restored state is freshened first. A
fork decided on a source state the journal remembers (not read again) carries the check
that the source still holds it (a ``RefCheck``, in the same commit); if it does not, the
fork raises SourceMoved, writes nothing, and the caller reads the source and decides
again.
Listing walks the index refs in order and checks each against the thread it names
(``listing``): a stale index ref (an interrupted create or delete) is skipped, and so is
a thread whose state is damaged, which is reported through a callback (or a logged
warning) instead of failing the whole listing.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Iterable, Iterator
from datetime import datetime
from typing import Any

from ..backends import IndexUpdate, NewObject, RefCheck, RefUpdate, Store
from ..backends.base import apply_index_update
from ..errors import (
    ConflictError,
    CorruptObject,
    CorruptRef,
    EntryNotFound,
    JournalError,
    LinkedObjectsMissing,
    ThreadExists,
    ThreadNotFound,
)
from ..names import validate_id
from ..objects import Kind, ThreadStateNode, ensure_utc, format_time, is_oid, parse_time, utc_now
from ..objects.nodes import new_tuple
from .cache import BoundedCache
from .commit import Update, commit, commit_or_report
from .graph import EntryGraph
from .leases import LeaseTable
from .listing import list_thread_states
from .models import ForkPosition, ThreadMeta
from .refnames import THREAD_PREFIX, index_key, thread_ref
from .state import ThreadHead, ThreadStates, meta_from_state, meta_to_state
from .trusted import Constructor

_EDITABLE_EXCLUDE = {"id", "leaf_id", "created_at", "updated_at"}
logger = logging.getLogger("cas_journal")

DamagedThread = Callable[[str, JournalError], None]
"""Called as ``on_damaged(thread_id, error)`` for a thread a listing had to skip."""


class SourceMoved(Exception):
    """A fork's source thread no longer holds the state the fork was decided on; nothing
    was written (internal: the journal then reads the source and decides again)."""


def generate_thread_id() -> str:
    """A fresh random thread id."""
    return f"thread-{uuid.uuid4().hex}"


_META = Constructor(ThreadMeta)
"""Builds a fork's ThreadMeta from fields this module made (valid and UTC) without a
second validation: what ``ThreadMeta.model_construct`` makes, at a fraction of its cost
(a fork pays it on every call)."""
_AT, _THREAD = ForkPosition.AT, Kind.THREAD
"""(An enum member looked up on its class costs several times a global on Python 3.11.)"""


def _warn_damaged(thread_id: str, error: JournalError) -> None:
    logger.warning("skipped thread %r: %s", thread_id, error)


class ThreadBook:
    """Creates, changes, deletes, restores and lists threads (not their entries)."""

    def __init__(
        self, store: Store, states: ThreadStates, graph: EntryGraph, leases: LeaseTable
    ) -> None:
        self.store = store
        self.states = states
        self.graph = graph
        self.leases = leases
        self._listed: BoundedCache[str, ThreadMeta] = BoundedCache(4096)
        """Listed metadata by state oid (immutable objects: never stale); callers get
        copies, so a caller changing one cannot change what the next listing returns."""

    # -- creating ------------------------------------------------------------------------

    def create(self, meta: ThreadMeta | None) -> ThreadMeta:
        """A new thread (id generated if empty) with ``meta``; ThreadExists if taken."""
        meta = meta if meta is not None else ThreadMeta()
        thread_id = validate_id(meta.id or generate_thread_id(), "thread id")
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

    def create_with_heads(self, meta: ThreadMeta, heads: Iterable[str]) -> ThreadMeta:
        """A new thread over entries already stored, every branch included (an import).

        ``heads`` are the branch heads; ``meta.leaf_id`` is the leaf and becomes a head if
        no head reaches it. The metadata is kept as given (times, fork fields).
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

    def fork(
        self,
        source_id: str,
        target: str | None,
        position: ForkPosition,
        new_thread_id: str | None,
        now: datetime | None,
        source_state: str | None = None,
    ) -> ThreadMeta:
        """A new thread whose leaf is ``target`` (AT) or its parent (BEFORE); the caller
        checked that ``target`` belongs to thread ``source_id``. ``source_state``: the
        source's state the caller checked it in, if it was not just read; the commit
        then also checks that the source still holds it (else SourceMoved)."""
        if position is not _AT and ForkPosition(position) is ForkPosition.BEFORE:
            if not target:
                raise EntryNotFound(f"thread {source_id!r} has no entry to fork before")
            target = self.graph.node(target).parent
        new_id = validate_id(new_thread_id or generate_thread_id(), "new thread id")
        moment = ensure_utc(now or utc_now())
        created = format_time(moment)
        if type(moment) is not datetime:  # a subclass: the plain instant its text names
            moment = parse_time(created)
        # the state's metadata and the ThreadMeta are built directly from values this
        # call made or checked (what meta_to_state and meta_from_state would give)
        fields = {"id": new_id, "created_at": created, "updated_at": created}
        if source_id:
            fields["parent_thread_id"] = fields["forked_from_thread_id"] = source_id
        if target:
            fields["forked_from_entry_id"] = target
        heads = (target,) if target else ()
        state = new_tuple(ThreadStateNode, (fields, target or None, heads, (), 0, None))
        values: dict[str, Any] = {**fields, "created_at": moment, "updated_at": moment}
        values["leaf_id"] = target or ""
        meta = _META.with_fields({}, values)
        if source_state is None:
            return self._create(new_id, state, "fork", state.heads, meta)
        expect = RefCheck(thread_ref(source_id), source_state)
        return self._create(new_id, state, "fork", state.heads, meta, expect)

    def _create(
        self,
        thread_id: str,
        state: ThreadStateNode,
        reason: str,
        linked: Iterable[str] = (),
        meta: ThreadMeta | None = None,
        expect: RefCheck | None = None,
    ) -> ThreadMeta:
        """Create the ref of a new thread at ``state``, with its listing ref, in one commit.

        ``linked`` are stored objects the state links that this call did not write: the
        commit protects them from a concurrent gc (``Store.commit``); a missing one is
        EntryNotFound. ``meta`` is the state's metadata if the caller built it already
        (else it is read from the state). ``expect``: a ref the commit checks (a fork's
        source); if it no longer holds its value, SourceMoved and nothing is written.
        """
        name = thread_ref(thread_id)
        atomic = self.store.capabilities.atomic_commit
        if not atomic and self.store.refs.read_ref(name) is not None:
            # (a store that commits atomically refuses the swap instead: no probe needed)
            raise ThreadExists(f"thread {thread_id!r} already exists")
        state_oid, body = self.states.write(state)
        if meta is None:
            meta = meta_from_state(state_oid, state)
        elif meta.__pydantic_private__ is not None:
            # (what ``meta._state_oid = state_oid`` does, without pydantic's __setattr__)
            meta.__pydantic_private__["_state_oid"] = state_oid
        else:
            meta._state_oid = state_oid
        assert meta.created_at is not None
        index = index_key(meta.created_at, thread_id)
        # (the tuples made without their Python-level __new__, every field given)
        swap = new_tuple(RefUpdate, (name, None, state_oid, reason, True))
        objects = [new_tuple(NewObject, (state_oid, _THREAD, body))]
        try:
            created = commit_or_report(
                self.store,
                objects,
                swap,
                [new_tuple(IndexUpdate, (index, "1"))],
                meta,
                tuple(linked),
                () if expect is None else (expect,),
            )
        except LinkedObjectsMissing as exc:
            raise EntryNotFound(f"entry {exc.oids[0]!r} is no longer stored") from exc
        if not created:
            if not atomic:
                self._drop_stale_index(thread_id, index)
            if expect is not None:
                raise SourceMoved(expect.name)
            raise ThreadExists(f"thread {thread_id!r} already exists")
        return meta

    def _drop_stale_index(self, thread_id: str, index: str) -> None:
        """After a lost create on a store without atomic commits: remove the listing ref
        the attempt set, unless the thread that won uses the same one."""
        try:
            winner = self.states.read(thread_id).meta().created_at
        except (ThreadNotFound, CorruptObject, CorruptRef):
            winner = None
        if winner is None or index_key(winner, thread_id) != index:
            apply_index_update(self.store.refs, IndexUpdate(index, None))

    # -- changing ------------------------------------------------------------------------

    def update(self, meta: ThreadMeta) -> ThreadMeta:
        """Replace a thread's metadata (never its leaf or created_at); ConflictError if
        ``meta`` was read from the store and the metadata changed since."""
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

    def delete(self, thread_id: str) -> None:
        """Remove the thread's ref and listing ref (restorable from the reflog)."""
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

    def restore(self, thread_id: str) -> ThreadMeta:
        """Bring back a deleted thread at its last state, from its reflog."""
        name = thread_ref(thread_id)
        if self.store.refs.read_ref(name) is not None:
            raise ThreadExists(f"thread {thread_id!r} exists; nothing to restore")
        last = next((e.new for e in reversed(self.store.refs.reflog(name)) if e.new), None)
        if last is None or not is_oid(last) or self.store.objects.freshen([last]):
            raise ThreadNotFound(f"thread {thread_id!r} has no restorable state in its reflog")
        return self._create(thread_id, self.states.state(last), "restore")

    def deleted(self) -> list[str]:
        """Ids of deleted threads that a reflog can still restore, sorted."""
        found = []
        for name in self.store.refs.reflog_names(THREAD_PREFIX):
            if self.store.refs.read_ref(name) is None and any(
                entry.new for entry in self.store.refs.reflog(name)
            ):
                found.append(name[len(THREAD_PREFIX) :])
        return found

    # -- listing -------------------------------------------------------------------------

    def list(
        self,
        include_archived: bool,
        limit: int,
        after_created_at: datetime | None,
        after_id: str | None,
        on_damaged: DamagedThread | None,
    ) -> list[ThreadMeta]:
        """Threads newest created_at first, ties by id; page with (after_created_at, after_id)."""
        start = None
        if after_created_at is not None and after_id:
            start = index_key(ensure_utc(after_created_at), after_id)
        report = on_damaged or _warn_damaged
        return list(self._iter(include_archived, limit, start, report))

    def _iter(
        self, include_archived: bool, limit: int, start: str | None, on_damaged: DamagedThread
    ) -> Iterator[ThreadMeta]:
        found = 0
        listing = list_thread_states(self.store, include_archived, 0, start, self.states.cache)
        for listed in listing:
            try:
                if listed.state is None:
                    raise CorruptObject(listed.problem, listed.state_oid or None)
                meta = self._listed.get(listed.state_oid)
                if meta is None:
                    meta = meta_from_state(listed.state_oid, listed.state)
                    self._listed.put(listed.state_oid, meta)
            except CorruptObject as exc:
                on_damaged(listed.thread_id, exc)  # fsck names it; the intact ones are listed
                continue
            yield meta.model_copy()
            found += 1
            if limit > 0 and found >= limit:
                return
