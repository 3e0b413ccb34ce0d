"""The record chains of LangGraph namespaces in a store: names, reads, indexes, commits.

Each (thread, checkpoint namespace) has one ref, ``langgraph/<thread>/<namespace>`` (the
thread id with ``%`` and ``/`` percent-escaped, so one thread's refs are exactly those
under its prefix; the backend escapes the whole name its own way), pointing at the newest
record of its chain. A thread id and namespace must fit in one ref name (2,048 bytes).
Every change is one ``Store.commit``: the new objects, then one compare-and-swap of the
ref. Puts and writes are not reflogged (the chain itself is their history); deletes,
copies and prunes are, so they can be undone until gc expires the reflog.

Reading is cached per process: records, message nodes and value blobs are immutable, so
caching them by oid is always correct; the index of a chain (checkpoint id -> record) is
kept per ref with the head it was built from and extended when the head moves.

Writers of one namespace in this process take turns (a lock per ref stripe), so threads
of one process never lose compare-and-swap races to each other, and a writer starts from
the head this process last saw: the swap itself checks it, and only a lost swap (another
process wrote) costs a fresh read. On S3 that saves a request per write.
"""

from __future__ import annotations

import contextlib
import re
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from ..backends import NewObject, RefUpdate, Store
from ..errors import CorruptObject, CorruptRef, InvalidInputError
from ..journal.cache import BoundedCache
from ..maintenance.walk import LANGGRAPH_PREFIX
from ..names import split_ref_name, validate_id
from ..objects import Kind, MessageNode, TreeNode, is_oid
from .records import CHAIN, EXTENDS, ITEMS, Record, StoredValue, StoredWrite, merge_writes

REF_PREFIX = LANGGRAPH_PREFIX
"""Every LangGraph ref starts with this (a gc, fsck, pack and sync root)."""
LOCK_STRIPES = 64


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

    def newest_first(self) -> list[str]:
        """Checkpoint ids, greatest first."""
        return sorted(self.checkpoints, reverse=True)


class RecordStore:
    """Cached, verified reads of records, nodes and blobs, and commits of new heads."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._records: BoundedCache[str, Record] = BoundedCache(1 << 12)
        self._nodes: BoundedCache[str, MessageNode] = BoundedCache(1 << 17)
        self._elements: BoundedCache[str, tuple[str, ...]] = BoundedCache(512)
        self._extended: BoundedCache[tuple[str, str], tuple[str, ...]] = BoundedCache(1024)
        self._blobs: BoundedCache[str, bytes] = BoundedCache(
            1 << 16, weigh=len, max_weight=64 << 20
        )
        self._indexes: BoundedCache[str, ChainIndex] = BoundedCache(
            1024, weigh=lambda index: len(index.order) + 1, max_weight=1 << 16
        )
        self._heads: BoundedCache[str, tuple[str | None, ...]] = BoundedCache(1 << 14)
        self._stripes = [threading.Lock() for _ in range(LOCK_STRIPES)]
        self._lock = threading.Lock()

    # -- objects ------------------------------------------------------------------------

    def _get(self, oid: str, kind: Kind) -> bytes:
        found, body = self.store.objects.get(oid)
        if found is not kind:
            raise CorruptObject(f"expected a {kind.value}, found a {found.value}", oid)
        return body

    def record(self, oid: str) -> Record:
        """A record by oid (parsed, validated, cached)."""
        record = self._records.get(oid)
        if record is None:
            tree = TreeNode.parse(self._get(oid, Kind.TREE), oid)
            record = self._records.put(oid, Record.from_tree(tree, oid))
        return record

    def remember(self, oid: str, record: Record) -> None:
        """Cache a record this process just wrote."""
        self._records.put(oid, record)

    def blob(self, oid: str) -> bytes:
        """A blob's body (cached)."""
        body = self._blobs.get(oid)
        if body is None:
            body = self._blobs.put(oid, self._get(oid, Kind.BLOB))
        return body

    def remember_blob(self, oid: str, body: bytes) -> None:
        """Cache a blob this process just wrote."""
        self._blobs.put(oid, body)

    def node(self, oid: str) -> MessageNode:
        """A message node (cached)."""
        node = self._nodes.get(oid)
        if node is None:
            node = self._nodes.put(oid, MessageNode.parse(self._get(oid, Kind.MESSAGE), oid))
        return node

    def remember_node(self, oid: str, node: MessageNode) -> None:
        """Cache a message node this process just wrote."""
        self._nodes.put(oid, node)

    def elements(self, head: str, count: int) -> tuple[str, ...]:
        """The element blobs of a chain, first to last (checked against ``count``)."""
        found = self._elements.get(head)
        if found is not None:
            return found
        reversed_oids: list[str] = []
        prefix: tuple[str, ...] = ()
        current: str | None = head
        while current is not None:
            cached = self._elements.get(current) if current != head else None
            if cached is not None:
                prefix = cached
                break
            node = self.node(current)
            reversed_oids.append(node.message)
            current = node.parent
            if len(reversed_oids) > count:
                break
        elements = prefix + tuple(reversed(reversed_oids))
        if len(elements) != count:
            raise CorruptObject(f"list has {len(elements)} elements, its record says {count}", head)
        return self._elements.put(head, elements)

    def remember_elements(self, head: str, elements: tuple[str, ...]) -> None:
        """Cache the element list of a chain this process just wrote."""
        self._elements.put(head, elements)

    def list_elements(self, value: StoredValue, channel: str) -> tuple[str, ...]:
        """The element blobs of a stored list, first to last. ``extends`` lists are read
        through their base records (cached per record and channel)."""
        if value.form == ITEMS:
            return value.oids
        if value.form == CHAIN:
            return self.elements(value.oids[0], value.count)
        if value.form != EXTENDS or value.base is None:
            raise CorruptObject(f"channel {channel[:80]!r} holds no list")
        pending: list[tuple[str, StoredValue]] = []  # (base record, its value), newest first
        base, current = value.base, value
        prefix: tuple[str, ...] | None = self._extended.get((base, channel))
        while prefix is None:
            found = self.record(base).values.get(channel)
            if found is None or found.form not in (CHAIN, EXTENDS):
                raise CorruptObject(f"base record has no list for channel {channel[:80]!r}", base)
            if found.count != current.count - len(current.oids):
                raise CorruptObject("base list length disagrees with the extending record", base)
            if found.form == CHAIN:
                prefix = self.elements(found.oids[0], found.count)
                break
            assert found.base is not None
            pending.append((base, found))
            base, current = found.base, found
            prefix = self._extended.get((base, channel))
        for record_oid, extended in reversed(pending):
            prefix = prefix + extended.oids
            self._extended.put((record_oid, channel), prefix)
        if len(prefix) + len(value.oids) != value.count:
            raise CorruptObject(f"list of channel {channel[:80]!r} has a wrong length", value.base)
        return prefix + value.oids

    def remember_extended(self, record: str, channel: str, elements: tuple[str, ...]) -> None:
        """Cache the elements of a record's list this process just wrote."""
        self._extended.put((record, channel), elements)

    # -- refs and chains -----------------------------------------------------------------

    def head(self, ref: str) -> str | None:
        """The newest record of a namespace, or None (read from the store)."""
        value = self.store.refs.read_ref(ref)
        if value is not None and not is_oid(value):
            raise CorruptRef(f"ref {ref!r} does not hold an object id")
        self._heads.put(ref, (value,))
        return value

    @contextlib.contextmanager
    def updating(self, ref: str) -> Iterator[None]:
        """Held while this process changes ``ref`` (one writer per ref at a time)."""
        with self._stripes[hash(ref) % LOCK_STRIPES]:
            yield

    def head_to_update(self, ref: str, attempt: int) -> str | None:
        """The head a change starts from: the one this process last saw on a first
        attempt (the compare-and-swap verifies it), a fresh read after a lost swap."""
        if attempt == 0:
            known = self._heads.get(ref)
            if known:  # () marks an unknown outcome
                return known[0]
        return self.head(ref)

    def refs_under(self, prefix: str) -> list[str]:
        """Names of the namespace refs under a prefix, sorted."""
        return self.store.refs.list_refs(prefix)

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

    def index(self, ref: str, head: str | None) -> ChainIndex:
        """The index of the chain ending at ``head`` (reusing and extending a cached one)."""
        cached = self._indexes.get(ref)
        if cached is not None and cached.head == head:
            return cached
        newer: list[tuple[str, Record]] = []
        known: int | None = None  # position in the cached index where the chains meet
        for oid, record in self.chain(head):
            if cached is not None and oid in cached.positions:
                known = cached.positions[oid]
                break
            newer.append((oid, record))
        base = ChainIndex(head=None)
        if cached is not None and known is not None:
            if known == len(cached.order) - 1:  # the chain grew: copy and extend
                base = ChainIndex(
                    head=cached.head,
                    order=list(cached.order),
                    positions=dict(cached.positions),
                    checkpoints=dict(cached.checkpoints),
                    late_writes={k: list(v) for k, v in cached.late_writes.items()},
                )
            else:  # newer records replaced some (a late write merged into the head)
                for oid in cached.order[: known + 1]:
                    base.add(oid, self.record(oid))
        for oid, record in reversed(newer):
            base.add(oid, record)
        base.head = head
        with self._lock:
            self._indexes.put(ref, base)
        return base

    def commit(self, objects: Sequence[NewObject], update: RefUpdate) -> bool:
        """Store objects and swap the ref; False if the swap lost."""
        try:
            swapped = self.store.commit(objects, update)
        except BaseException:
            self._heads.put(update.name, ())  # unknown outcome: read it next time
            raise
        if swapped:
            self._heads.put(update.name, (update.new,))
        return swapped
