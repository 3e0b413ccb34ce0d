"""Thread refs and thread states: where a thread's metadata, leaf and branch heads live.

A thread ``t`` is the ref ``threads/t`` pointing at its newest thread-state object. A
thread-state holds the metadata (ThreadMeta without the leaf), the leaf, every branch
head the thread has had, and the state(s) it replaced. A second ref per thread,
``threadindex/<inverted created_at>/<t>``, orders threads newest first for listing
without reading their states.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

from pydantic import ValidationError

from ..backends import IndexUpdate, RefStore, Store
from ..backends.base import apply_index_update
from ..errors import CorruptObject, CorruptRef, ThreadNotFound
from ..objects import (
    Kind,
    ThreadStateNode,
    canonical_json,
    format_time,
    is_oid,
    object_id,
    parse_time,
    skip_pointer,
)
from ..objects.nodes import new_tuple
from .cache import BoundedCache
from .models import ThreadMeta
from .payload import compact_model
from .refnames import (
    CHECKPOINT_PREFIX,
    INDEX_PREFIX,
    LEASE_PREFIX,
    THREAD_PREFIX,
    index_key,
    thread_id_from_index,
    thread_ref,
)

__all__ = [
    "CHECKPOINT_PREFIX",
    "INDEX_PREFIX",
    "LEASE_PREFIX",
    "THREAD_PREFIX",
    "ThreadHead",
    "ThreadStates",
    "ensure_index",
    "index_key",
    "merge_thread_states",
    "meta_from_state",
    "meta_to_state",
    "thread_id_from_index",
    "thread_ref",
]

_THREAD = Kind.THREAD
"""(An enum member looked up on its class costs several times a global on Python 3.11.)"""

_TIME_FIELDS = ("title_updated_at", "created_at", "updated_at", "last_viewed_at")


def meta_to_state(meta: ThreadMeta) -> dict[str, Any]:
    """ThreadMeta as stored in a thread state: no leaf, canonical times, no empty fields."""
    fields = compact_model(meta)
    fields.pop("leaf_id", None)
    for name in _TIME_FIELDS:
        value = getattr(meta, name)
        if value is not None:
            fields[name] = format_time(value)
    fields["id"] = meta.id
    return fields


def meta_from_state(state_oid: str, state: ThreadStateNode) -> ThreadMeta:
    """Rebuild ThreadMeta (leaf included) from a stored thread state."""
    fields = dict(state.meta)
    try:
        for name in _TIME_FIELDS:
            if name in fields:
                fields[name] = parse_time(fields[name])
        fields["leaf_id"] = state.leaf or ""
        meta = ThreadMeta.model_validate(fields)
    except (ValidationError, ValueError, TypeError) as exc:
        raise CorruptObject(
            f"thread metadata is malformed: {exc}".splitlines()[0], state_oid
        ) from exc
    meta._state_oid = state_oid
    return meta


def state_links(
    lookup: Callable[[str], ThreadStateNode],
    parent: str,
    parent_state: ThreadStateNode,
    line: dict[int, str] | None = None,
) -> tuple[int, str | None]:
    """``(depth, skip)`` of a new state whose first parent is ``parent`` (``lookup`` reads
    a state by oid; it is called O(log depth) times, for the skip pointer). ``line``, if
    given, maps depths to first-parent ancestors of ``parent``: a skip target found there
    is not looked for, one looked for is added."""
    depth = parent_state.depth + 1
    return depth, skip_pointer(lookup, parent, depth, line)


def merge_thread_states(
    leaf_time: Callable[[str], str],
    ours: str,
    our_state: ThreadStateNode,
    theirs: str,
    their_state: ThreadStateNode,
    lookup: Callable[[str], ThreadStateNode] | None = None,
) -> ThreadStateNode:
    """A state joining two diverged histories of one thread; no entry of either is lost.

    Heads: the union. Leaf: the newer of the two leaves (``leaf_time`` gives an entry's
    canonical created_at). Metadata: the side with the newer updated_at, keeping the
    earlier created_at. Parents: both states, ours first; with ``lookup`` (oid -> state),
    the merge continues our first-parent chain (depth and skip pointer), else it starts
    a new one at depth 0.
    """
    heads = tuple(sorted(set(our_state.heads) | set(their_state.heads)))
    leaves = [leaf for leaf in (our_state.leaf, their_state.leaf) if leaf]
    leaf = max(leaves, key=lambda oid: (leaf_time(oid), oid)) if leaves else None
    newer = max(
        (our_state.meta, their_state.meta),
        key=lambda meta: (str(meta.get("updated_at", "")), canonical_json(meta)),
    )
    meta = dict(newer)
    created = [
        str(m["created_at"]) for m in (our_state.meta, their_state.meta) if "created_at" in m
    ]
    if created:
        meta["created_at"] = min(created)
    depth, skip = state_links(lookup, ours, our_state) if lookup is not None else (0, None)
    return ThreadStateNode(meta, leaf, heads, (ours, theirs), depth, skip)


def index_updates(meta: ThreadMeta, previous: ThreadMeta | None = None) -> list[IndexUpdate]:
    """The listing-index updates that go with a thread ref moving from the state of
    ``previous`` (None: the ref is new) to the state of ``meta``, for ``Store.commit``."""
    updates = []
    key = index_key(meta.created_at, meta.id) if meta.created_at is not None else None
    if key is not None:
        updates.append(IndexUpdate(key, "1"))
    if previous is not None and previous.created_at is not None:
        old = index_key(previous.created_at, previous.id)
        if old != key:
            updates.append(IndexUpdate(old, None))
    return updates


def ensure_index(refs: RefStore, meta: ThreadMeta, previous: ThreadMeta | None = None) -> None:
    """Make the listing ref of a thread match its metadata (after a sync or merge)."""
    for update in index_updates(meta, previous):
        apply_index_update(refs, update)


LINES = 32
"""States whose line of ancestors ``ThreadStates`` keeps (the threads written lately)."""
LINE_LIMIT = 64
"""Depths a kept line holds at most; a longer one starts over (it is only a shortcut)."""


class ThreadHead(NamedTuple):
    """A thread as read: the state's oid, the state and its metadata (a NamedTuple, not
    a frozen dataclass: every append and fork makes one, and a tuple is built at a
    fraction of the cost)."""

    thread_id: str
    state_oid: str
    state: ThreadStateNode

    @property
    def leaf(self) -> str | None:
        """The thread's leaf entry, if any."""
        return self.state.leaf

    def meta(self) -> ThreadMeta:
        """The metadata of this state."""
        return meta_from_state(self.state_oid, self.state)


class ThreadStates:
    """Reads thread refs and states (states cached by oid) and writes new states."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._states: BoundedCache[str, ThreadStateNode] = BoundedCache(4096)
        self._heads: BoundedCache[str, ThreadHead] = BoundedCache(4096)
        self._lines: dict[str, dict[int, str]] = {}
        """First-parent ancestors (and itself) by depth of the states that new states
        followed lately, keyed by that state's oid (whose ancestors never change): the
        skip pointers of the next states are taken from there (see ``state_links``)."""

    @property
    def cache(self) -> BoundedCache[str, ThreadStateNode]:
        """The parsed states by oid (listing reads through it too)."""
        return self._states

    def state(self, oid: str) -> ThreadStateNode:
        """A thread-state object, parsed and cached."""
        state = self._states.get(oid)
        if state is None:
            kind, body = self.store.objects.get(oid)
            if kind is not Kind.THREAD:
                raise CorruptObject(f"expected a thread state, found a {kind.value}", oid)
            state = self._states.put(oid, ThreadStateNode.parse(body, oid))
        return state

    def read(self, thread_id: str) -> ThreadHead:
        """The current head of a thread; ThreadNotFound if there is none."""
        name = thread_ref(thread_id)
        value = self.store.refs.read_ref(name)
        if value is None:
            raise ThreadNotFound(f"thread {thread_id!r} not found")
        if not is_oid(value):
            raise CorruptRef(f"ref {name!r} does not hold an object id")
        state = self.state(value)
        if state.meta.get("id") != thread_id:
            raise CorruptObject(f"state of thread {thread_id!r} names another thread", value)
        return self.remember(new_tuple(ThreadHead, (thread_id, value, state)))

    def remember(self, head: ThreadHead) -> ThreadHead:
        """Note ``head`` as the newest this journal has seen of its thread (see ``last``)."""
        return self._heads.put(head.thread_id, head)

    def last(self, thread_id: str) -> ThreadHead | None:
        """The newest head of the thread this journal read or wrote, without reading the
        ref: possibly stale (another writer may have moved the thread since), so only a
        compare-and-swap may use it, which fails on a stale head (see ``commit``)."""
        return self._heads.get(thread_id)

    def successor(
        self,
        head: ThreadHead,
        meta: dict[str, Any],
        leaf: str | None,
        heads: tuple[str, ...],
    ) -> ThreadStateNode:
        """The state that follows ``head``: its first parent is the head's state."""
        lines, oid = self._lines, head.state_oid
        line = lines.pop(oid, None)
        if line is None and head.state.parent is not None:
            line = lines.pop(head.state.parent, None)  # kept when the head was written
        if line is None or len(line) >= LINE_LIMIT:
            line = {}
        line[head.state.depth] = oid
        depth, skip = state_links(self.state, oid, head.state, line)
        while len(lines) >= LINES:
            try:  # the oldest kept line goes (another thread may change the dict meanwhile)
                del lines[next(iter(lines))]
            except (RuntimeError, StopIteration, KeyError):
                break
        lines[oid] = line
        return new_tuple(ThreadStateNode, (meta, leaf, heads, (oid,), depth, skip))

    def write(self, state: ThreadStateNode) -> tuple[str, bytes]:
        """Encode a new state; returns ``(oid, body)`` for the caller to store."""
        body = state.body()
        oid = object_id(_THREAD, body)
        self._states.put(oid, state)
        return oid, body
