"""Thread refs and thread states: where a thread's metadata, leaf and branch heads live.

A thread ``t`` is the ref ``threads/t`` pointing at its newest thread-state object. A
thread-state holds the metadata (ThreadMeta without the leaf), the leaf, every branch
head the thread has had, and the state(s) it replaced. A second ref per thread,
``threadindex/<inverted created_at>/<t>``, orders threads newest first for listing
without reading their states.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from pydantic import ValidationError

from ..backends import Store
from ..errors import CorruptObject, CorruptRef, ThreadNotFound
from ..names import validate_id
from ..objects import Kind, ThreadStateNode, format_time, is_oid, object_id, parse_time
from .cache import BoundedCache
from .models import ThreadMeta
from .payload import compact_model

THREAD_PREFIX = "threads/"
INDEX_PREFIX = "threadindex/"
LEASE_PREFIX = "leases/"
CHECKPOINT_PREFIX = "checkpoints/"
_INVERT = 10**19 - 1
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_TIME_FIELDS = ("title_updated_at", "created_at", "updated_at", "last_viewed_at")


def thread_ref(thread_id: str) -> str:
    """The ref name of a thread (validating the id)."""
    return THREAD_PREFIX + validate_id(thread_id, "thread id")


def index_key(created_at: datetime, thread_id: str) -> str:
    """The listing ref of a thread: newest created_at first, then id ascending."""
    micros = (created_at - _EPOCH) // timedelta(microseconds=1)
    return f"{INDEX_PREFIX}{_INVERT - micros:020d}/{thread_id}"


def thread_id_from_index(name: str) -> str:
    """The thread id of a listing ref."""
    return name[len(INDEX_PREFIX) + 21 :]


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


@dataclass(frozen=True)
class ThreadHead:
    """A thread as read: the state's oid, the state and its metadata."""

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
        return ThreadHead(thread_id, value, state)

    def write(self, state: ThreadStateNode) -> tuple[str, bytes]:
        """Encode a new state; returns ``(oid, body)`` for the caller to store."""
        body = state.body()
        oid = object_id(Kind.THREAD, body)
        self._states.put(oid, state)
        return oid, body
