"""Entry building: the one place where a journal entry becomes stored objects.

An entry is two objects: its payload blob (the canonical JSON of what it says, shared by
every identical entry) and its entry node (payload oid, parent, depth, skip pointer, turn
id, created_at), whose oid is the entry's id. Single appends, batches and imports all
build entries here, each object encoded and hashed exactly once: the payload when the
entry is prepared, the node when its parent is known (a lost race that re-parents an
append rebuilds only the node). The built objects go to ``Store.commit`` as NewObjects.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import NamedTuple

from ..backends import NewObject
from ..objects import (
    EntryNode,
    Kind,
    ensure_utc,
    format_time,
    object_id,
    skip_pointer,
    utc_now,
)
from ..objects.nodes import new_tuple
from .graph import EntryGraph
from .models import Entry
from .payload import payload_bytes
from .trusted import Constructor

_BLOB_KIND, _ENTRY_KIND = Kind.BLOB, Kind.ENTRY
"""(An enum member looked up on its class costs several times a global on Python 3.11.)"""

NodeLookup = Callable[[str], EntryNode]
"""Reads the node of a stored (or pending) entry by oid."""


class PreparedEntry(NamedTuple):
    """An entry ready to be placed under a parent: its payload encoded and hashed once,
    its creation time fixed."""

    entry: Entry
    payload: bytes
    payload_oid: str
    created: datetime
    created_at: str
    """``created`` as canonical text (what the node stores)."""


class BuiltEntry(NamedTuple):
    """An entry's two objects, built: the node (whose oid is the entry id) and its payload."""

    oid: str
    node: EntryNode
    body: bytes
    """The node's canonical body."""
    payload: bytes

    def objects(self) -> list[NewObject]:
        """The objects to store, referenced first: the payload blob, then the node."""
        return [
            new_tuple(NewObject, (self.node.payload, _BLOB_KIND, self.payload)),
            new_tuple(NewObject, (self.oid, _ENTRY_KIND, self.body)),
        ]


def objects_of(built: Sequence[BuiltEntry]) -> list[NewObject]:
    """The objects of many built entries, each one's as ``BuiltEntry.objects`` lists them
    (a batch's: no call per entry)."""
    blob, entry, new = _BLOB_KIND, _ENTRY_KIND, new_tuple
    out: list[NewObject] = []
    append = out.append
    for oid, node, body, payload in built:
        append(new(NewObject, (node.payload, blob, payload)))
        append(new(NewObject, (oid, entry, body)))
    return out


def build_entry(
    payload: bytes,
    payload_oid: str,
    parent: str | None,
    created_at: str,
    turn_id: str,
    lookup: NodeLookup,
    line: dict[int, str] | None = None,
) -> BuiltEntry:
    """Build the node of an entry whose payload is already encoded (``payload_oid`` is the
    oid of the blob ``payload``) under ``parent`` (None: a root), and hash it: the entry
    id. ``lookup`` reads the parent and, for the skip pointer, O(log depth) of its
    ancestors; ``line``, if given, maps depths to ancestors of ``parent`` (a batch's: the
    skip targets found so far and its own entries): a skip target found there is not
    looked for, one looked for is added."""
    # the tuples are made without their Python-level __new__ (fields in order)
    if parent is None:
        node = new_tuple(EntryNode, (payload_oid, created_at, 0, None, None, turn_id))
    else:
        depth = lookup(parent).depth + 1
        skip = skip_pointer(lookup, parent, depth, line)
        node = new_tuple(EntryNode, (payload_oid, created_at, depth, parent, skip, turn_id))
    body = node.body()
    return new_tuple(BuiltEntry, (object_id(_ENTRY_KIND, body), node, body, payload))


_ENTRY = Constructor(Entry)
"""Copies entries with some fields replaced, without validation (the values are the
journal's own: oids, canonical text, an aware UTC time) and without copying the rest."""


LINES = 32
"""Leaves whose line of ancestors an EntryBuilder keeps (the threads appended to lately)."""
LINE_LIMIT = 64
"""Depths a kept line holds at most; a longer one starts over (it is only a shortcut)."""


class EntryBuilder:
    """Builds entries over one store's entry graph (for appends and batches).

    For the entries it builds last (at most ``LINES``), it keeps their ancestors by depth
    as far as it met them (the entries and the skip targets it found): an append under
    one of them takes its skip pointer from there instead of walking the chain. A line
    is keyed by the oid of the entry it ends at, whose ancestors never change, and
    belongs to that key alone: the next entry built under it takes it over."""

    def __init__(self, graph: EntryGraph) -> None:
        self.graph = graph
        self._lines: dict[str, dict[int, str]] = {}

    def prepare(self, entry: Entry, now: datetime | None = None) -> PreparedEntry:
        """Encode and hash the payload and fix the creation time (``now``, else the
        entry's ``created_at``, else the current time)."""
        created = ensure_utc(now or entry.created_at or utc_now())
        payload = payload_bytes(entry)
        return new_tuple(
            PreparedEntry,
            (entry, payload, object_id(_BLOB_KIND, payload), created, format_time(created)),
        )

    def build(
        self,
        prepared: PreparedEntry,
        parent: str | None,
        pending: Mapping[str, EntryNode] | None = None,
    ) -> BuiltEntry:
        """The entry under ``parent``; ``pending`` holds nodes not stored yet (a batch)."""
        lines = self._lines
        line = lines.pop(parent, None) if parent is not None else None
        if line is None or len(line) >= LINE_LIMIT:
            line = {}
        built = build_entry(
            prepared.payload,
            prepared.payload_oid,
            parent,
            prepared.created_at,
            prepared.entry.turn_id,
            self.graph.node if not pending else self.lookup(pending),
            line,
        )
        line[built.node.depth] = built.oid
        while len(lines) >= LINES:
            try:  # the oldest kept line goes (another thread may change the dict meanwhile)
                del lines[next(iter(lines))]
            except (RuntimeError, StopIteration, KeyError):
                break
        lines[built.oid] = line
        return built

    def lookup(self, pending: Mapping[str, EntryNode]) -> NodeLookup:
        """Reads nodes from ``pending`` (a batch's, not stored yet), else from the store."""
        found_pending = pending.get
        stored = self.graph.node

        def lookup(oid: str) -> EntryNode:
            found = found_pending(oid)
            return found if found is not None else stored(oid)

        return lookup

    @staticmethod
    def stored(prepared: PreparedEntry, built: BuiltEntry, thread_id: str) -> Entry:
        """The public Entry as stored: id, thread, parent, time, raw payload and its oid."""
        return _ENTRY.replaced(
            prepared.entry,
            {
                "id": built.oid,
                "thread_id": thread_id,
                "parent_id": built.node.parent or "",
                "created_at": prepared.created,
                "raw": prepared.payload.decode("utf-8"),
                "raw_hash": prepared.payload_oid,
            },
        )
