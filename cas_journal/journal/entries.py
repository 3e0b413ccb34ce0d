"""Materialise public Entry objects from stored nodes and payloads, with caching.

Entries are immutable and content-addressed, so cached entries never go stale; an entry
is built once per stored node and copied with another thread id for each thread that
shares it (forks share their history). Paths are
cached per (thread, leaf); reading the path of a leaf whose ancestor's path is cached
only loads the entries below that ancestor, so a thread that is appended to and read
back does not walk its whole history each time. Likewise a fork's walk stops at the
first entry it shares with a thread whose last cached path holds that very entry (at
the index of its depth): the history above is that path's start, copied with the
fork's thread id in one pass instead of walked entry by entry. A cached path holds the very Entry
objects the entry cache holds (no copies); it is weighed by the estimated bytes of all
its entries, so the entries kept alive by both caches together stay under
``ENTRY_CACHE_BYTES + PATH_CACHE_BYTES`` (an entry shared by several paths is counted
in each: the bound is conservative). Entries are built from the stored,
hash-verified payload without a second pydantic validation (see ``trusted``); a payload
that does not fit the Entry model is a CorruptObject naming it.

A path read that builds or copies many entries pauses Python's cyclic garbage collector
while it does (``collector_paused``): the tens of thousands of objects it allocates
(none of them in reference cycles) would otherwise trigger a collection every 700
allocations, each walking the young objects, and a full one over every object of the
process. When the last pause ends, the objects allocated meanwhile (the entries a
journal caches, meant to live) are moved straight to the collector's oldest generation
instead of being walked by the young generations' passes first (``gc.freeze`` then
``gc.unfreeze``; the young generations are collected when the pause begins, so only
what was allocated during it moves); if the process froze objects itself
(``gc.get_freeze_count()`` is not 0) that is skipped and the objects are examined by the
collector's next pass, as usual. The collector runs again as soon as the read is done
(unless it was disabled before: then it stays so).
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from datetime import datetime
from itertools import repeat
from operator import attrgetter
from typing import Any

from ..errors import CorruptObject
from ..objects import EntryNode, Kind
from ..objects.canonical import parse_json, parse_json_exact
from .cache import BoundedCache
from .graph import EntryGraph
from .models import Entry
from .payload import PAYLOAD_FIELDS
from .trusted import Constructor

PATH_CACHE_SIZE = 256
"""Paths kept, at most (a listing that shows every conversation reads each in turn)."""
PATH_CACHE_BYTES = 256 * 1024 * 1024
"""Estimated bytes of the entries cached paths hold, at most (``entry_weight``; a
10,000-entry path of 3.5 KB payloads weighs about 85 MB; the 201 paths of the benchmark's
forks workload, 27,885 entries that share most of their payloads, weigh 230 MB)."""
ENTRY_CACHE_SIZE = 1 << 14
ENTRY_CACHE_BYTES = 64 * 1024 * 1024
"""Built entries kept for reuse (by every thread that shares them), at most."""
PAYLOAD_CACHE_BYTES = 32 * 1024 * 1024
"""Payload text (tool outputs can be large) kept for reuse, at most."""

_ENTRY = Constructor(Entry)
_SEEN_AS = _ENTRY.field_copier("thread_id")
"""An entry as seen from another thread (a copy with that thread's id)."""
_PAYLOAD_FIELD_SET = frozenset(PAYLOAD_FIELDS)
_raw_of = attrgetter("raw")
_from_iso = datetime.fromisoformat
"""A node's ``created_at`` was checked canonical when the node was parsed (or written):
it only needs turning into the aware UTC datetime it names."""

_pause_lock = threading.Lock()
_pauses = 0
_resume = False
_promote = False


@contextmanager
def collector_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector while the block runs and move what it
    allocated to the oldest generation afterwards (see the module docstring). Nested and
    concurrent pauses share one: the collector resumes when the last of them ends, and
    only if it was enabled when the first began."""
    global _pauses, _resume, _promote
    if _pauses == 0 and gc.isenabled() and gc.get_freeze_count() == 0:
        # the young objects from before the pause are collected now, so that only what
        # the pause allocates moves to the oldest generation (outside the lock: a
        # finalizer run by the collection may read a path itself)
        gc.collect(1)
    with _pause_lock:
        if _pauses == 0:
            _resume = gc.isenabled()
            _promote = _resume and gc.get_freeze_count() == 0
            gc.disable()
        _pauses += 1
    try:
        yield
    finally:
        with _pause_lock:
            _pauses -= 1
            if _pauses == 0:
                if _promote and gc.get_freeze_count() == 0:
                    gc.freeze()  # every tracked object, then back into the oldest generation
                    gc.unfreeze()
                if _resume:
                    gc.enable()


def entry_weight(entry: Entry) -> int:
    """Roughly the bytes an Entry holds: its payload text, the parsed copy of it in its
    fields, and the objects around them."""
    return 2 * len(entry.raw) + ENTRY_OVERHEAD


ENTRY_OVERHEAD = 1500
"""What ``entry_weight`` adds to twice the payload text's length."""


@dataclass(slots=True)
class _CachedPath:
    entries: tuple[Entry, ...]
    weight: int


def _payload_text(oid: str, kind: Kind, body: bytes) -> str:
    if kind is not Kind.BLOB:
        raise CorruptObject(f"entry payload is a {kind.value}, not a blob", oid)
    try:
        return body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise CorruptObject("entry payload is not UTF-8", oid) from exc


EXACT_PARSE_BYTES = 1024
"""Payloads up to this size are parsed with ``parse_json_exact`` (callgrind: 200-byte
payloads parse in fewer instructions so; the benchmark's 3.4 KB ones in 7% more)."""


def _payload_fields(oid: str, data: bytes | str) -> dict[str, Any]:
    """The fields of payload ``oid`` (its JSON ``data``), checked to be payload fields;
    CorruptObject naming it if they are not (their values are checked when the Entry is
    built)."""
    try:
        # small stored bytes (a path read): orjson's own writing of what it read (how the
        # journal writes payloads) is taken without the Python scan for floats, which
        # costs more than writing a small payload back; a large one (few values, many
        # bytes) is scanned (see ``EXACT_PARSE_BYTES``)
        fields = (
            parse_json_exact(data)
            if type(data) is bytes and len(data) <= EXACT_PARSE_BYTES
            else parse_json(data)
        )
    except (ValueError, TypeError, RecursionError) as exc:
        raise CorruptObject(f"entry payload is malformed: {exc}".splitlines()[0], oid) from exc
    if type(fields) is not dict or "type" not in fields:
        raise CorruptObject("entry payload is malformed: payload is not an object with a type", oid)
    if not _PAYLOAD_FIELD_SET.issuperset(fields):
        unknown = sorted(fields.keys() - _PAYLOAD_FIELD_SET)
        raise CorruptObject(
            f"entry payload is malformed: payload has unknown fields {unknown}", oid
        )
    return fields


class EntryReader:
    """Builds Entry objects and paths for a thread.

    An entry is built once per stored node (parsed payload, checked fields) and cached
    by its id; the same entry seen from another thread (a fork's shared history) is a
    shallow copy with that thread's id, not a second parse.
    """

    def __init__(self, graph: EntryGraph) -> None:
        self.graph = graph
        self._payloads: BoundedCache[str, str] = BoundedCache(
            ENTRY_CACHE_SIZE, weigh=lambda text: 2 * len(text) + 100, max_weight=PAYLOAD_CACHE_BYTES
        )
        self._entries: BoundedCache[str, Entry] = BoundedCache(
            ENTRY_CACHE_SIZE,
            weigh=entry_weight,
            max_weight=ENTRY_CACHE_BYTES,
        )
        self._paths: BoundedCache[tuple[str, str], _CachedPath] = BoundedCache(
            PATH_CACHE_SIZE, weigh=lambda path: path.weight, max_weight=PATH_CACHE_BYTES
        )
        self._last_leaf: dict[str, str] = {}
        """The leaf of each thread's path cached last (at most ``PATH_CACHE_SIZE``
        threads, the oldest forgotten first): where a fork's read finds its shared
        history (``_shared_path``)."""

    def raw_payload(self, oid: str) -> str:
        """The raw JSON text of a payload blob."""
        cached = self._payloads.get(oid)
        if cached is None:
            kind, body = self.graph.nearby.get(oid)
            cached = self._payloads.put(oid, _payload_text(oid, kind, body))
        return cached

    def build(self, oid: str, node: EntryNode, raw: str, thread_id: str) -> Entry:
        """The Entry of node ``oid`` with payload text ``raw``, as seen from ``thread_id``."""
        return self._built(oid, node, raw, _payload_fields(node.payload, raw), thread_id)

    def _built(
        self, oid: str, node: EntryNode, raw: str, fields: dict[str, Any], thread_id: str
    ) -> Entry:
        """The Entry of node ``oid`` from its payload's parsed ``fields`` (used once; a
        path read parses the payload from its stored UTF-8 bytes: parsing a str that is
        not ASCII would encode it again and keep that copy with it)."""
        try:
            return _ENTRY.with_fields(
                fields,
                {
                    "id": oid,
                    "thread_id": thread_id,
                    "parent_id": node.parent or "",
                    "turn_id": node.turn_id,
                    "created_at": _from_iso(node.created_at),
                    "raw": raw,
                    "raw_hash": node.payload,
                },
            )
        except (ValueError, TypeError) as exc:
            raise CorruptObject(f"entry payload is malformed: {exc}", node.payload) from exc

    def _seen_from(self, entry: Entry, thread_id: str) -> Entry:
        if entry.thread_id == thread_id:
            return entry
        return _SEEN_AS(entry, thread_id)

    def entry(self, thread_id: str, oid: str) -> Entry:
        """The Entry ``oid`` as seen from ``thread_id`` (no membership check)."""
        cached = self._entries.get(oid)
        if cached is None:
            node = self.graph.node(oid)
            built = self.build(oid, node, self.raw_payload(node.payload), thread_id)
            cached = self._entries.put(oid, built)
        return self._seen_from(cached, thread_id)

    def remember(self, thread_id: str, entries: list[Entry]) -> None:
        """Cache entries just written (a later ``path`` then extends a cached parent path)."""
        for entry in entries:
            self._entries.put(entry.id, entry)

    def path(self, thread_id: str, leaf: str | None) -> list[Entry]:
        """Entries from the root to ``leaf`` as seen from ``thread_id``."""
        if not leaf:
            return []
        cached = self._paths.get((thread_id, leaf))
        if cached is not None:
            return list(cached.entries)
        with collector_paused():
            return self._read_path(thread_id, leaf)

    def _read_path(self, thread_id: str, leaf: str) -> list[Entry]:
        """``path`` for a leaf whose path is not cached: the walk up to the nearest cached
        path of the thread (or the root), then the entries below it."""
        paths_get, entries_get, node = self._paths.get, self._entries.get, self.graph.node
        # a thread with no path cached lately (a cold read, each fork of a listing read
        # once) has none to meet on the way: its walk skips a lookup per entry
        paths_cached = thread_id in self._last_leaf
        oids: list[str] = []
        found: list[Entry | None] = []
        nodes: dict[str, EntryNode] = {}
        prefix = _CachedPath((), 0)
        current = leaf
        while current:
            if paths_cached:
                known = paths_get((thread_id, current))
                if known is not None:
                    prefix = known
                    break
            entry = entries_get(current)
            if entry is not None and entry.thread_id != thread_id:
                shared = self._shared_path(entry)
                if shared is not None:  # the rest of the history, as another thread read it
                    prefix = _CachedPath(
                        tuple(map(_SEEN_AS, shared, repeat(thread_id, len(shared)))),
                        2 * sum(map(len, map(_raw_of, shared))) + ENTRY_OVERHEAD * len(shared),
                    )
                    break
            oids.append(current)
            found.append(entry)
            if entry is not None:
                current = entry.parent_id
            else:
                nodes[current] = stored = node(current)
                current = stored.parent or ""
        oids.reverse()
        found.reverse()
        below, weight = self._entries_of(thread_id, oids, found, nodes)
        weight += prefix.weight
        full = prefix.entries + tuple(below)
        if weight <= PATH_CACHE_BYTES:
            self._paths.put((thread_id, leaf), _CachedPath(full, weight))
            last = self._last_leaf
            last.pop(thread_id, None)  # newest last: the oldest go first
            last[thread_id] = leaf
            if len(last) > PATH_CACHE_SIZE:
                # another thread may change it meanwhile: then one goes next time
                with suppress(RuntimeError, StopIteration):
                    last.pop(next(iter(last)), None)
        return list(full)

    def _shared_path(self, entry: Entry) -> tuple[Entry, ...] | None:
        """The path from the root to ``entry`` as its thread's last cached path holds it
        (the very ``entry`` at the index of its depth: the history above it is then the
        path's start), or None if no cached path holds it so."""
        leaf = self._last_leaf.get(entry.thread_id)
        stored = self.graph.cached_node(entry.id)
        if leaf is None or stored is None:
            return None
        path = self._paths.get((entry.thread_id, leaf))
        depth = stored.depth
        if path is None or depth >= len(path.entries) or path.entries[depth] is not entry:
            return None
        return path.entries[: depth + 1]

    def _entries_of(
        self,
        thread_id: str,
        oids: list[str],
        found: list[Entry | None],
        nodes: dict[str, EntryNode],
    ) -> tuple[list[Entry], int]:
        """The entries ``oids`` (``found``: those cached; ``nodes``: the nodes of the
        others) as seen from ``thread_id``, and their total ``entry_weight``; the payloads
        not cached are read in path order (pack order: each block split once)."""
        payloads_get = self._payloads.get
        wanted = [node.payload for node in nodes.values() if payloads_get(node.payload) is None]
        # each payload is decoded and parsed as it arrives (its bytes are freed at once);
        # parsed fields are used once (an entry owns its lists and maps), so a payload
        # that several entries of the path share is parsed again for the next
        texts: dict[str, tuple[str, dict[str, Any] | None]] = {}
        blob = Kind.BLOB
        for oid, kind, body in self.graph.nearby.get_many(wanted):
            try:  # ``_payload_text`` written out for a blob of UTF-8 (one call less)
                text = body.decode() if kind is blob else _payload_text(oid, kind, body)
            except UnicodeDecodeError:
                text = _payload_text(oid, kind, body)  # says why
            texts[oid] = (text, _payload_fields(oid, body))
        put, build, seen_as = self._entries.put, _ENTRY.with_fields, _SEEN_AS
        out: list[Entry] = []
        append = out.append
        total = 0
        overhead = ENTRY_OVERHEAD
        for oid, entry in zip(oids, found, strict=True):
            if entry is None:
                node = nodes[oid]
                payload = node.payload
                read = texts.get(payload)
                if read is None:
                    text, fields = self.raw_payload(payload), None
                else:
                    text, fields = read
                    texts[payload] = (text, None)
                if fields is None:
                    fields = _payload_fields(payload, text)
                try:  # ``_built``, written out
                    entry = build(
                        fields,
                        {
                            "id": oid,
                            "thread_id": thread_id,
                            "parent_id": node.parent or "",
                            "turn_id": node.turn_id,
                            "created_at": _from_iso(node.created_at),
                            "raw": text,
                            "raw_hash": payload,
                        },
                    )
                except (ValueError, TypeError) as exc:
                    raise CorruptObject(f"entry payload is malformed: {exc}", payload) from exc
                weight = 2 * len(text) + overhead  # entry_weight(entry): raw is text
                put(oid, entry, weight)
            else:
                weight = 2 * len(entry.raw) + overhead  # entry_weight(entry)
                if entry.thread_id != thread_id:
                    entry = seen_as(entry, thread_id)
            total += weight
            append(entry)
        return out, total

    def walk_back(self, thread_id: str, leaf: str | None, limit: int = 0) -> Iterator[Entry]:
        """Entries from ``leaf`` towards the root, newest first, at most ``limit`` (0: all).

        Holds one entry at a time and caches nothing but nodes and payloads (both
        bounded): memory stays bounded by what the caller keeps, however long the thread.
        """
        current = leaf or None
        count = 0
        while current is not None and (limit <= 0 or count < limit):
            entry = self._entries.get(current)
            node = self.graph.node(current)
            if entry is None:
                entry = self.build(current, node, self.raw_payload(node.payload), thread_id)
            yield self._seen_from(entry, thread_id)
            count += 1
            current = node.parent
