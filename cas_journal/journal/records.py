"""Record chains: the journal-level store integrations keep their own structures in.

A *record* is a tree object: inline JSON data plus named, typed references (to blobs, to
other records, to message nodes). A *chain* is a ref pointing at its newest record, each
record naming the one before it by its ``previous`` reference, so ``sync`` fast-forwards
chains and gc, fsck and pack follow them like any tree. The LangGraph saver keeps each
checkpoint namespace as a chain; its records are its own business, not the journal's.

Writing: an integration describes a change as a ``RecordChange`` (blobs and records,
each named by the hash of its content, and stored objects it links) and ``update`` swaps
the ref from the head it was built on to the new head in one ``Store.commit``. A lost
compare-and-swap (another process wrote) is retried with the journal's one retry helper
(``commit.retries``): ``build`` is called again on the head read then. Writers of one
ref in this process take turns (a lock per ref stripe), and the first head ``update``
tries is the one this process last saw, so a process writing its own chain reads no
ref; a decision that ends without a swap is never taken on such a remembered head.

Reading: records, blobs and message nodes are verified against their ids, and they and
what integrations derive from them (parsed records, decoded values: ``derived``) are
cached by id in ONE bounded cache of ``cache_bytes`` (an object never changes, so a
cached value is never stale). Values an integration hands out from that cache are
shared: callers must treat them as read-only.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, Final, TypeVar

from ..backends import NewObject, RefUpdate, Store
from ..backends.base import ReflogEntry
from ..errors import CorruptObject, CorruptRef, JournalError
from ..objects import Kind, MessageNode, TreeNode, is_oid, object_id
from ..objects.codec import object_header
from .cache import BoundedCache
from .commit import commit_or_report, retries

__all__ = [
    "BLOB",
    "NODE",
    "PREVIOUS",
    "RECORD",
    "UNCHANGED",
    "RecordChange",
    "RecordStore",
    "RefKind",
    "Tree",
    "blob_id",
]

BLOB: Final = Kind.BLOB
"""The kind of a reference to a blob (opaque bytes)."""
RECORD: Final = Kind.TREE
"""The kind of a reference to a record (a tree)."""
NODE: Final = Kind.MESSAGE
"""The kind of a reference to a message node (``message``, ``parent``): read only."""
PREVIOUS = "previous"
"""The reference a record names the one before it in its chain with."""
Tree = TreeNode
"""A record as stored: ``refs`` (name -> (kind, id)) and ``data`` (JSON)."""
RefKind = Kind
"""The type of a reference's kind (``BLOB``, ``RECORD``, ``NODE``)."""
UNCHANGED: Final = "<unchanged>"
"""What ``build`` returns when the chain already holds what it wanted: nothing is written."""

CACHE_BYTES = 64 * 1024 * 1024
"""What the record cache holds at most (records, blobs, nodes and values derived from
them), by default; ``RecordStore(cache_bytes=...)`` sets another bound."""
CACHE_ENTRIES = 1 << 20
LOCK_STRIPES = 64

T = TypeVar("T")
Build = Callable[[str | None, "RecordChange"], str | None]


def blob_id(*parts: bytes) -> str:
    """The id of the blob whose body is ``parts`` joined, without joining them."""
    import blake3

    hasher = blake3.blake3(object_header(Kind.BLOB, sum(map(len, parts))))
    for part in parts:
        hasher.update(part)
    return str(hasher.hexdigest())


class RecordChange:
    """The objects one change writes (each after what it references) and the stored
    objects it links without writing them."""

    __slots__ = ("linked", "objects")

    def __init__(self) -> None:
        self.objects: list[NewObject] = []
        self.linked: list[str] = []

    def blob(self, body: bytes, oid: str | None = None) -> str:
        """Add a blob (``oid``: its id, if the caller computed it); returns its id."""
        oid = oid or object_id(Kind.BLOB, body)
        self.objects.append(NewObject(oid, Kind.BLOB, body))
        return oid

    def record(
        self,
        data: Any,
        refs: Mapping[str, tuple[Kind, str]],
        previous: str | None = None,
    ) -> tuple[str, bytes]:
        """Add a record (``previous``: the record before it in its chain); returns its id
        and body."""
        if previous is not None:
            refs = {**refs, PREVIOUS: (Kind.TREE, previous)}
        body = TreeNode(refs, data).body()
        oid = object_id(Kind.TREE, body)
        self.objects.append(NewObject(oid, Kind.TREE, body))
        return oid, body

    def link(self, oid: str) -> None:
        """Link a stored object the new head reaches but the old head may not (it is
        protected from a concurrent gc, and the commit fails if it is gone)."""
        self.linked.append(oid)


class RecordStore:
    """Verified, cached reads of records and commits of new chain heads, on a store."""

    def __init__(self, store: Store, cache_bytes: int = CACHE_BYTES) -> None:
        self.store = store
        self._cache: BoundedCache[tuple[str, str], tuple[Any, int]] = BoundedCache(
            CACHE_ENTRIES, weigh=lambda item: item[1], max_weight=cache_bytes
        )
        self._heads: BoundedCache[str, tuple[str | None, ...]] = BoundedCache(1 << 14)
        self._stripes = [threading.Lock() for _ in range(LOCK_STRIPES)]

    # -- objects --------------------------------------------------------------------------

    def _get(self, oid: str, kind: Kind) -> bytes:
        found, body = self.store.objects.get(oid)
        if found is not kind:
            raise CorruptObject(f"expected a {kind.value}, found a {found.value}", oid)
        return body

    def _cached(self, tag: str, oid: str) -> Any:
        found = self._cache.get((tag, oid))
        return None if found is None else found[0]

    def remember(self, tag: str, oid: str, value: T, weight: int) -> T:
        """Cache what an integration derived from object ``oid`` under ``tag`` (about
        ``weight`` bytes of memory)."""
        self._cache.put((tag, oid), (value, weight), weight)
        return value

    def recall(self, tag: str, oid: str) -> Any:
        """What ``remember`` cached for ``(tag, oid)``, or None."""
        return self._cached(tag, oid)

    def has_derived(self, tag: str, oid: str) -> bool:
        """True if ``derived(tag, oid, ...)`` would answer from the cache."""
        return (tag, oid) in self._cache.data

    def derived(self, tag: str, oid: str, make: Callable[[bytes], T], weight: int = 3) -> T:
        """``make(body)`` of blob ``oid``, cached under ``tag`` (weighing ``weight`` times
        the body): a value decoded once is reused for as long as the cache keeps it."""
        found = self._cache.get((tag, oid))
        if found is not None:
            value: T = found[0]
            return value
        body = self.blob(oid)
        return self.remember(tag, oid, make(body), weight * len(body) + 64)

    def tree(self, oid: str) -> Tree:
        """A record by id (verified, parsed, cached)."""
        found = self._cache.get(("tree", oid))
        if found is not None:
            tree: Tree = found[0]
            return tree
        body = self._get(oid, Kind.TREE)
        return self.remember("tree", oid, TreeNode.parse(body, oid), 2 * len(body) + 64)

    def parsed(self, tag: str, oid: str, parse: Callable[[Tree, str], T]) -> T:
        """``parse(tree, oid)`` of record ``oid``, cached under ``tag``."""
        found = self._cache.get((tag, oid))
        if found is not None:
            value: T = found[0]
            return value
        body = self._get(oid, Kind.TREE)
        parsed = parse(TreeNode.parse(body, oid), oid)
        return self.remember(tag, oid, parsed, 3 * len(body) + 64)

    def parsed_body(self, tag: str, oid: str, parse: Callable[[bytes, str], T]) -> T:
        """``parse(body, oid)`` of record ``oid``'s body (verified against its id), cached
        under ``tag``: for an integration that checks a record of a shape it knows
        faster than a general tree parse (it must refuse any other body)."""
        found = self._cache.get((tag, oid))
        if found is not None:
            value: T = found[0]
            return value
        body = self._get(oid, Kind.TREE)
        return self.remember(tag, oid, parse(body, oid), 3 * len(body) + 64)

    def blob(self, oid: str) -> bytes:
        """A blob's body (verified, cached)."""
        found = self._cache.get(("blob", oid))
        if found is not None:
            body: bytes = found[0]
            return body
        body = self._get(oid, Kind.BLOB)
        return self.remember("blob", oid, body, len(body) + 64)

    def read_blobs(self, oids: Iterable[str]) -> None:
        """Read the blobs among ``oids`` not cached yet, in one batch (the store reads
        each pack block once and the rest in few queries), into the cache."""
        missing = [oid for oid in oids if ("blob", oid) not in self._cache.data]
        for oid, kind, body in self.store.objects.get_many(missing):
            if kind is not Kind.BLOB:
                raise CorruptObject(f"expected a blob, found a {kind.value}", oid)
            self.remember("blob", oid, body, len(body) + 64)

    def node(self, oid: str) -> tuple[str, str | None]:
        """A message node's (message, parent) ids (verified, cached)."""
        found = self._cache.get(("node", oid))
        if found is not None:
            pair: tuple[str, str | None] = found[0]
            return pair
        node = MessageNode.parse(self._get(oid, Kind.MESSAGE), oid)
        return self.remember("node", oid, (node.message, node.parent), 200)

    # -- chains ---------------------------------------------------------------------------

    def head(self, name: str) -> str | None:
        """The newest record of a chain, or None (read from the store)."""
        value = self.store.refs.read_ref(name)
        if value is not None and not is_oid(value):
            raise CorruptRef(f"ref {name!r} does not hold an object id")
        self._heads.put(name, (value,))
        return value

    def names(self, prefix: str) -> list[str]:
        """The names of the chains under a prefix, sorted."""
        return self.store.refs.list_refs(prefix)

    def deleted_names(self, prefix: str) -> list[str]:
        """Names under a prefix that have a reflog (deleted chains among them)."""
        return self.store.refs.reflog_names(prefix)

    def reflog(self, name: str) -> list[ReflogEntry]:
        """A chain's logged moves, oldest first."""
        return self.store.refs.reflog(name)

    @contextlib.contextmanager
    def updating(self, name: str) -> Iterator[None]:
        """Held while this process changes chain ``name`` (one writer per chain)."""
        with self._stripes[hash(name) % LOCK_STRIPES]:
            yield

    def update(self, name: str, build: Build, reason: str, log: bool = False) -> str | None:
        """Swap chain ``name`` to what ``build(head, change)`` returns (a new head whose
        objects ``change`` holds, None to remove the ref, or ``UNCHANGED``) in one
        commit; returns the head the chain has then. A lost swap calls ``build`` again
        on the head read then; ConflictError when that keeps happening. ``log``: record
        the move in the ref's reflog (so it can be undone)."""
        with self.updating(name):
            known = self._heads.get(name)
            remembered = bool(known)
            head = known[0] if known else None
            for _ in retries(f"{name!r} kept changing; {reason} not saved"):
                if not remembered:
                    head = self.head(name)
                change = RecordChange()
                with self.store.objects.write_guard():
                    try:
                        new = build(head, change)
                    except JournalError:
                        if not remembered:
                            raise
                        remembered = False  # decide again on the chain as it is now
                        continue
                    if new in (UNCHANGED, head):
                        if remembered:
                            remembered = False
                            continue
                        return head
                    swap = RefUpdate(name, head, new, reason, log)
                    if self._commit(change, swap):
                        return new
                remembered = False
        raise AssertionError("unreachable: retries raises when the rounds run out")

    def set(
        self, name: str, old: str | None, new: str | None, reason: str, link: bool = False
    ) -> bool:
        """Move chain ``name`` from ``old`` to ``new`` (logged), once; False if it did not
        hold ``old``. ``link``: ``new`` is a stored record reached from another chain
        (a copy), protected from a concurrent gc by the same commit."""
        change = RecordChange()
        if link and new is not None:
            change.link(new)
        with self.updating(name), self.store.objects.write_guard():
            return self._commit(change, RefUpdate(name, old, new, reason, True))

    def _commit(self, change: RecordChange, swap: RefUpdate) -> bool:
        try:
            swapped = commit_or_report(self.store, change.objects, swap, linked=change.linked)
        except BaseException:
            self._heads.put(swap.name, ())  # an unknown outcome: read it next time
            raise
        if swapped:
            self._heads.put(swap.name, (swap.new,))
        return swapped
