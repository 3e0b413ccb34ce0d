"""The record chains of LangGraph namespaces: names, walks, indexes, list elements.

Each (thread, checkpoint namespace) has one ref, ``langgraph/<thread>/<namespace>`` (the
thread id with ``%`` and ``/`` percent-escaped, so one thread's refs are exactly those
under its prefix; the backend escapes the whole name its own way), pointing at the newest
record of its chain in the journal's record store (``Journal.records``). A thread id and
namespace must fit in one ref name (2,048 bytes). Puts and writes are not reflogged (the
chain itself is their history); deletes, copies and prunes are, so they can be undone
until gc expires the reflog.

Reads go through the record store's cache: records parsed, leaves, chains of message
nodes (record format 1) and whole-chain indexes, each by the id of the object it was read
from (an object never changes, so nothing cached is stale). ``Chains.checkpoints`` walks
a chain newest first and gives each checkpoint as soon as no older record can hold a
greater id, so a reader takes only as much of a long chain as it needs; the index of a
whole chain (for the rarer calls that need one: a write for an old checkpoint, a prune)
extends the index of an older head of the same chain.
"""

from __future__ import annotations

import heapq
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import NamedTuple

from ..errors import CorruptObject, CorruptRef, InvalidInputError
from ..journal.records import RecordStore
from ..maintenance.walk import LANGGRAPH_PREFIX
from ..names import split_ref_name, validate_id
from .records import (
    CHAIN,
    EXTENDS,
    ITEMS,
    LEAVES,
    Record,
    StoredValue,
    StoredWrite,
    merge_writes,
    read_leaf_body,
)

REF_PREFIX = LANGGRAPH_PREFIX
"""Every LangGraph ref starts with this (a gc, fsck, pack and sync root)."""
RECORD_TAG = "langgraph record"
INDEX_TAG = "langgraph index"
LEAF_TAG = "langgraph leaf "
CHAIN_TAG = "langgraph chain"
"""What the saver's parsed objects are cached under in the journal's record cache."""


_UNESCAPE = re.compile(r"%(25|2F)")


def thread_prefix(thread_id: str) -> str:
    """The common prefix of a thread's namespace refs."""
    escaped = validate_id(thread_id, "thread id").replace("%", "%25").replace("/", "%2F")
    return f"{REF_PREFIX}{escaped}/"


def namespace_ref(thread_id: str, namespace: str) -> str:
    """The ref of one (thread, checkpoint namespace)."""
    if not isinstance(namespace, str):
        raise InvalidInputError(f"checkpoint_ns must be a string, got {type(namespace).__name__}")
    name = thread_prefix(thread_id) + namespace
    split_ref_name(name)  # length, NUL
    return name


def parse_namespace_ref(name: str) -> tuple[str, str]:
    """``(thread id, namespace)`` of a LangGraph ref name; CorruptRef if it is not one."""
    rest = name[len(REF_PREFIX) :] if name.startswith(REF_PREFIX) else ""
    escaped, slash, namespace = rest.partition("/")
    thread_id = _UNESCAPE.sub(lambda m: "%" if m.group(1) == "25" else "/", escaped)
    if not slash or not escaped or thread_prefix(thread_id) != f"{REF_PREFIX}{escaped}/":
        raise CorruptRef(f"ref {name[:120]!r} is not a LangGraph namespace ref")
    return thread_id, namespace


class Found(NamedTuple):
    """One checkpoint of a chain: its id, its record (and the record's id), every write."""

    checkpoint_id: str
    oid: str
    record: Record
    writes: tuple[StoredWrite, ...]


class _Newest:
    """A checkpoint waiting in ``Chains.checkpoints``' heap: the greatest id pops first."""

    __slots__ = ("checkpoint_id", "oid", "record")

    def __init__(self, checkpoint_id: str, oid: str, record: Record) -> None:
        self.checkpoint_id = checkpoint_id
        self.oid = oid
        self.record = record

    def __lt__(self, other: _Newest) -> bool:
        return self.checkpoint_id > other.checkpoint_id


@dataclass
class ChainIndex:
    """Every checkpoint of one chain, found by id; built from a head and extended."""

    head: str | None
    order: list[str] = field(default_factory=list)
    """Record oids, oldest first."""
    positions: dict[str, int] = field(default_factory=dict)
    checkpoints: dict[str, tuple[int, Record]] = field(default_factory=dict)
    """Checkpoint id -> (position, its newest checkpoint record)."""
    late_writes: dict[str, list[tuple[int, Record]]] = field(default_factory=dict)
    """Checkpoint id -> writes records after positions of earlier records."""

    def add(self, oid: str, record: Record) -> None:
        """Append the next (newer) record."""
        position = len(self.order)
        self.order.append(oid)
        self.positions[oid] = position
        if record.is_checkpoint:
            self.checkpoints[record.checkpoint_id] = (position, record)
            self.late_writes.pop(record.checkpoint_id, None)  # carried into the record
        else:
            self.late_writes.setdefault(record.checkpoint_id, []).append((position, record))
        self.head = oid

    def writes_of(self, checkpoint_id: str) -> tuple[StoredWrite, ...]:
        """Every pending write of a checkpoint, in LangGraph's order."""
        found = self.checkpoints.get(checkpoint_id)
        writes: tuple[StoredWrite, ...] = found[1].writes if found else ()
        for _, record in self.late_writes.get(checkpoint_id, ()):
            writes = merge_writes(writes, list(record.writes))
        return writes


class Chains:
    """The saver's view of its namespaces on the journal's record store: records parsed
    and cached by id, walks from a head, chain indexes, list elements."""

    def __init__(self, records: RecordStore) -> None:
        self.records = records

    def record(self, oid: str) -> Record:
        """A record by id (parsed, validated, cached)."""
        return self.records.parsed(RECORD_TAG, oid, Record.from_tree)

    def head(self, ref: str) -> str | None:
        """The newest record of a namespace, or None (read from the store)."""
        return self.records.head(ref)

    def refs_under(self, prefix: str) -> list[str]:
        """Names of the namespace refs under a prefix, sorted."""
        return self.records.names(prefix)

    def chain(self, head: str | None) -> Iterator[tuple[str, Record]]:
        """The records from ``head`` back to the first, newest first."""
        seen: set[str] = set()
        current = head
        while current is not None:
            if current in seen:
                raise CorruptObject("record chain loops", current)
            seen.add(current)
            record = self.record(current)
            yield current, record
            current = record.previous

    def remember(self, oid: str, record: Record) -> None:
        """Cache a record this process just wrote."""
        self.records.remember(RECORD_TAG, oid, record, 1024)

    def checkpoints(self, head: str | None) -> Iterator[Found]:
        """Every checkpoint of the chain ending at ``head``, greatest id first, each with
        its record and every pending write, read as it goes: a record's checkpoint is
        given as soon as no older record can hold a greater id (a record's ``newest``
        bounds the ids of the records before it), so a walk reads only as far as the
        caller takes."""
        shadowed: set[str] = set()
        late: dict[str, tuple[StoredWrite, ...]] = {}
        ready: list[_Newest] = []  # the greatest id first
        for oid, record in self.chain(head):
            bound = record.newest_id
            while ready and ready[0].checkpoint_id > bound:
                yield self._take(ready, late)
            checkpoint_id = record.checkpoint_id
            if checkpoint_id in shadowed:
                continue
            if not record.is_checkpoint:
                late[checkpoint_id] = merge_writes(record.writes, list(late.get(checkpoint_id, ())))
                continue
            shadowed.add(checkpoint_id)
            heapq.heappush(ready, _Newest(checkpoint_id, oid, record))
        while ready:
            yield self._take(ready, late)

    @staticmethod
    def _take(ready: list[_Newest], late: dict[str, tuple[StoredWrite, ...]]) -> Found:
        item = heapq.heappop(ready)
        record = item.record
        writes = record.writes
        extra = late.pop(item.checkpoint_id, ())
        if extra:
            writes = merge_writes(writes, list(extra))
        return Found(item.checkpoint_id, item.oid, record, writes)

    def find(self, head: str | None, checkpoint_id: str | None) -> Found | None:
        """The checkpoint ``checkpoint_id`` of the chain (the greatest id if None), with
        its record and writes, walking only back to it; None if the chain lacks it."""
        for found in self.checkpoints(head):
            if checkpoint_id is None or found.checkpoint_id == checkpoint_id:
                return found
            if found.checkpoint_id < checkpoint_id:
                return None
        return None

    def index(self, ref: str, head: str | None) -> ChainIndex:
        """The index of the whole chain ending at ``head`` (reusing and extending the
        cached index of an older head of the chain)."""
        if head is None:
            return ChainIndex(head=None)
        cached = self.records.recall(INDEX_TAG, head)
        if cached is not None:
            index: ChainIndex = cached
            return index
        newer: list[tuple[str, Record]] = []
        base: ChainIndex | None = None
        for oid, record in self.chain(head):
            found = self.records.recall(INDEX_TAG, oid) if newer else None
            if found is not None:
                base = found
                break
            newer.append((oid, record))
        if base is not None:
            extended = ChainIndex(
                head=base.head,
                order=list(base.order),
                positions=dict(base.positions),
                checkpoints=dict(base.checkpoints),
                late_writes={k: list(v) for k, v in base.late_writes.items()},
            )
        else:
            extended = ChainIndex(head=None)
        for oid, record in reversed(newer):
            extended.add(oid, record)
        weight = 200 * len(extended.order) + 200
        return self.records.remember(INDEX_TAG, head, extended, weight)

    def leaves(self, last: str, count: int, size: int) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """The elements held by ``count`` leaves of ``size`` ending at ``last``, first to
        last, and the leaves themselves, first to last."""
        leaves: list[str] = []
        parts: list[tuple[str, ...]] = []
        current: str | None = last
        while current is not None and len(leaves) <= count:
            elements, before = self.records.parsed_body(
                LEAF_TAG + str(size), current, lambda body, oid: read_leaf_body(body, oid, size)
            )
            leaves.append(current)
            parts.append(elements)
            current = before
        if len(leaves) != count or current is not None:
            raise CorruptObject(f"list has {len(leaves)} leaves, its record says {count}", last)
        leaves.reverse()
        parts.reverse()
        return tuple(oid for part in parts for oid in part), tuple(leaves)

    def elements(self, head: str, count: int) -> tuple[str, ...]:
        """The element blobs of a message-node chain (record format 1), first to last."""
        found = self.records.recall(CHAIN_TAG, head)
        if found is not None:
            chained: tuple[str, ...] = found
            return chained
        reversed_oids: list[str] = []
        current: str | None = head
        while current is not None and len(reversed_oids) <= count:
            message, current = self.records.node(current)
            reversed_oids.append(message)
        elements = tuple(reversed(reversed_oids))
        if len(elements) != count or current is not None:
            raise CorruptObject(f"list has {len(elements)} elements, its record says {count}", head)
        return self.records.remember(CHAIN_TAG, head, elements, 80 * count + 64)

    def list_elements(
        self, value: StoredValue, channel: str
    ) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """The element blobs of a stored list, first to last, and its leaves (none unless
        it is stored in leaves). ``extends`` lists (record format 1) are read through
        their base records."""
        if value.form == ITEMS:
            return value.oids, ()
        if value.form == LEAVES:
            size = value.leaf_size
            if value.base is None:
                return value.oids, ()
            held, leaves = self.leaves(value.base, value.count // size, size)
            return held + value.oids, leaves
        if value.form == CHAIN:
            return self.elements(value.oids[0], value.count), ()
        if value.form != EXTENDS or value.base is None:
            raise CorruptObject(f"channel {channel[:80]!r} holds no list")
        pending: list[StoredValue] = []  # the extending values, newest first
        current = value
        while current.form == EXTENDS:
            assert current.base is not None
            pending.append(current)
            found = self.record(current.base).values.get(channel)
            if found is None or found.form not in (CHAIN, EXTENDS, LEAVES):
                raise CorruptObject(
                    f"base record has no list for channel {channel[:80]!r}", current.base
                )
            if found.count != current.count - len(current.oids):
                raise CorruptObject(
                    "base list length disagrees with the extending record", current.base
                )
            current = found
        prefix, _ = self.list_elements(current, channel)
        for extending in reversed(pending):
            prefix = prefix + extending.oids
        return prefix, ()
