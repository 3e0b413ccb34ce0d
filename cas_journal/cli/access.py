"""Reading entries by walking parent links, with memory bounded by what is shown.

``Journal.path`` builds a whole root-to-leaf list; ``show``, ``log -n`` and ``diff`` need
only the few entries they print, so they walk from a leaf back through parent ids (and
entry depths, which every stored entry records) and materialise only what they print.
Every read goes through the journal's entry reader, so hashes are verified as usual.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..journal import Entry, Journal


def entry_by_id(journal: Journal, oid: str) -> Entry:
    """The entry stored under ``oid``, seen from no thread (``thread_id`` is empty);
    EntryNotFound if the object is not an entry."""
    return journal.entry_by_id(oid)


def depth(journal: Journal, oid: str) -> int:
    """Distance of an entry from its root (the root is at depth 0)."""
    return journal.entry_node(oid).depth


def parent(journal: Journal, oid: str) -> str | None:
    """The parent of an entry (None for a root)."""
    return journal.entry_node(oid).parent


def walk_back(
    journal: Journal, thread_id: str, leaf: str | None, limit: int = 0
) -> Iterator[Entry]:
    """Entries from ``leaf`` back towards the root, at most ``limit`` (0: all)."""
    current = leaf
    count = 0
    while current is not None and (limit <= 0 or count < limit):
        yield journal.entry_by_id(current, thread_id)
        count += 1
        current = parent(journal, current)


def ids_back(journal: Journal, leaf: str | None, stop: str | None = None) -> list[str]:
    """Entry ids from ``leaf`` back to (not including) ``stop``, leaf first."""
    found: list[str] = []
    current = leaf
    while current is not None and current != stop:
        found.append(current)
        current = parent(journal, current)
    return found


def iter_path(journal: Journal, thread_id: str, leaf: str | None) -> Iterator[Entry]:
    """The path from the root to ``leaf``, root first, one entry materialised at a time
    (only the ids of the path are held)."""
    for oid in reversed(ids_back(journal, leaf)):
        yield journal.entry_by_id(oid, thread_id)


@dataclass(frozen=True)
class Divergence:
    """Where two leaves part: their deepest common ancestor and the entries after it on
    each side, oldest first."""

    ancestor: str | None
    left: list[str]
    right: list[str]


def diverge(journal: Journal, left: str | None, right: str | None) -> Divergence:
    """The common ancestor of two leaves and each side after it.

    Walks only the entries after the ancestor (entry depths say which side to step), so
    two long threads that part near their leaves cost little.
    """
    left_ids: list[str] = []
    right_ids: list[str] = []
    a, b = left, right
    while a != b:
        depth_a = depth(journal, a) if a is not None else -1
        depth_b = depth(journal, b) if b is not None else -1
        if depth_a >= depth_b:
            assert a is not None
            left_ids.append(a)
            a = parent(journal, a)
        if depth_b >= depth_a and a != b:
            assert b is not None
            right_ids.append(b)
            b = parent(journal, b)
    left_ids.reverse()
    right_ids.reverse()
    return Divergence(a, left_ids, right_ids)


def leaf_of(journal: Journal, thread_id: str, prefix: str | None) -> str | None:
    """The thread's leaf, or the entry of the thread a prefix names."""
    if prefix:
        return journal.resolve_entry(thread_id, prefix)
    return journal.thread(thread_id).leaf_id or None
