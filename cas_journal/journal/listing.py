"""Listing threads newest first from the listing index, without the pydantic models.

``threadindex/<inverted created_at>/<thread id>`` refs order threads newest first, ties
by id. An index ref is derived data: a listed thread counts only if its thread ref holds
a state of that thread whose created_at gives the same index ref (a create or delete in
flight, or one interrupted, leaves a stale index ref that is skipped). A state that
cannot be read or parsed is reported as damaged instead of ending the listing: damage
stays local, and fsck names it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import NamedTuple

from ..backends import Store
from ..errors import JournalError
from ..objects import Kind, ThreadStateNode, is_oid, parse_time
from .cache import BoundedCache
from .refnames import INDEX_PREFIX, THREAD_PREFIX, index_key, thread_id_from_index

FIRST_PAGE = 50
"""Threads read in one pass at first (a caller that stops early reads no more)..."""
LARGEST_PAGE = 1000
"""... doubling up to this many while the caller keeps reading."""


class ListedThread(NamedTuple):
    """One thread as listed: its id, and its current state (None if it is damaged)."""

    thread_id: str
    state_oid: str
    state: ThreadStateNode | None
    problem: str = ""
    """Why the state could not be read, for a damaged thread."""

    @property
    def archived(self) -> bool:
        """True if the thread's metadata says it is archived."""
        return self.state is not None and self.state.meta.get("archived") is True


StateCache = BoundedCache[str, ThreadStateNode]
"""Parsed thread states by oid (objects are immutable, so a cached state is never stale)."""


def _parse_state(oid: str, kind: Kind, body: bytes) -> ThreadStateNode:
    if kind is not Kind.THREAD:
        raise JournalError(f"expected a thread state, found a {kind.value}")
    return ThreadStateNode.parse(body, oid)


def _listed(
    thread_id: str, value: str | None, state_of: Callable[[str], ThreadStateNode]
) -> ListedThread | None:
    """The thread whose ref holds ``value``, its state read through ``state_of`` (None:
    the thread has no ref, gone or not yet created)."""
    if value is None:
        return None
    if not is_oid(value):
        name = THREAD_PREFIX + thread_id
        return ListedThread(thread_id, "", None, f"ref {name!r} does not hold an object id")
    try:
        state = state_of(value)
    except JournalError as exc:
        return ListedThread(thread_id, value, None, str(exc))
    return ListedThread(thread_id, value, state)


def _reader(
    store: Store, cache: StateCache | None, found: dict[str, tuple[Kind, bytes]] | None = None
) -> Callable[[str], ThreadStateNode]:
    """Reads one state: from ``cache``, else from the objects already ``found``, else
    from the store (then cached)."""

    def state_of(oid: str) -> ThreadStateNode:
        state = cache.get(oid) if cache is not None else None
        if state is None:
            stored = found.get(oid) if found is not None else None
            state = _parse_state(oid, *(stored or store.objects.get(oid)))
            if cache is not None:
                cache.put(oid, state)
        return state

    return state_of


def _read(store: Store, thread_id: str, cache: StateCache | None) -> ListedThread | None:
    """One thread's current state, its ref and state read on their own."""
    try:
        value = store.refs.read_ref(THREAD_PREFIX + thread_id)
    except JournalError as exc:
        return ListedThread(thread_id, "", None, str(exc))
    return _listed(thread_id, value, _reader(store, cache))


def _read_page(
    store: Store, thread_ids: list[str], cache: StateCache | None
) -> list[ListedThread | None]:
    """Several threads' states: their refs in one call and the states not in ``cache``
    in one pass (``read_refs``, ``get_many``); if anything in the page is damaged,
    thread by thread, so that the damage is reported with its thread and the others
    still list."""
    try:
        values = store.refs.read_refs(THREAD_PREFIX + thread_id for thread_id in thread_ids)
        oids = {value for value in values.values() if value is not None and is_oid(value)}
        if cache is not None:
            oids = {oid for oid in oids if cache.get(oid) is None}
        found = {oid: (kind, body) for oid, kind, body in store.objects.get_many(oids)}
    except JournalError:
        return [_read(store, thread_id, cache) for thread_id in thread_ids]

    state_of = _reader(store, cache, found)
    return [
        _listed(thread_id, values[THREAD_PREFIX + thread_id], state_of) for thread_id in thread_ids
    ]


def _indexed_by(listed: ListedThread, index_name: str) -> bool:
    """True if the listed thread's state gives exactly this index ref."""
    if listed.state is None:
        return True  # damaged: report it where the index says it is
    meta = listed.state.meta
    if meta.get("id") != listed.thread_id:
        return False
    try:
        created = parse_time(str(meta["created_at"]))
    except (KeyError, ValueError, JournalError):
        return False
    return index_key(created, listed.thread_id) == index_name


def list_thread_states(
    store: Store,
    include_archived: bool = False,
    limit: int = 0,
    start_after: str | None = None,
    cache: StateCache | None = None,
) -> Iterator[ListedThread]:
    """Threads newest created_at first, ties by id ascending, at most ``limit`` (0: all).

    ``start_after`` is an index ref name (``index_key``) to continue after. Damaged
    threads are yielded with ``state`` None and count towards ``limit``. States found
    in ``cache`` are not read again; the states read are added to it.
    """
    found = 0
    page = min(max(limit, FIRST_PAGE), LARGEST_PAGE)
    start = start_after
    while True:
        names = store.refs.list_refs(INDEX_PREFIX, start_after=start, limit=page)
        threads = _read_page(store, [thread_id_from_index(name) for name in names], cache)
        for name, listed in zip(names, threads, strict=True):
            if listed is None or not _indexed_by(listed, name):
                continue
            if listed.archived and not include_archived:
                continue
            yield listed
            found += 1
            if limit > 0 and found >= limit:
                return
        if len(names) < page:
            return
        start = names[-1]
        page = min(page * 2, LARGEST_PAGE)
