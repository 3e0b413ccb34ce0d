"""The entry tree as stored: node loading (cached), ancestor checks, paths, reachability.

Every entry node records its depth and, from depth 2 on, a skip pointer to an earlier
ancestor (see ``skip_depth``). ``ancestor_at`` therefore reaches any ancestor in
O(log depth) hops, which keeps membership checks cheap however long a thread grows.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from ..backends import ObjectStore
from ..errors import EntryNotFound, ObjectNotFound
from ..objects import EntryNode, Kind, ancestor_at, is_oid
from .cache import BoundedCache
from .nearby import NearbyObjects

NODE_CACHE_SIZE = 1 << 17


class EntryGraph:
    """Read-only view of the entry nodes in an object store."""

    def __init__(self, objects: ObjectStore) -> None:
        self.objects = objects
        self.nearby = NearbyObjects(objects)
        """Reads that keep each object's pack neighbours (the chain's next nodes) for later."""
        self._cache: BoundedCache[str, EntryNode] = BoundedCache(NODE_CACHE_SIZE)
        self._cached = self._cache.get
        self._nodes = self._cache.data
        """The cache's dict: ``node`` stores a node there while it is not full."""
        self._if_read = self.nearby.get_if_read
        self._parse = EntryNode.parse

    def node(self, oid: str) -> EntryNode:
        """The node of an entry; ObjectNotFound or EntryNotFound (not an entry) if absent.
        (Runs once per entry of a path read: a kept neighbour is taken directly, else
        one the store's last read brought (a row window), else it is read.)"""
        node = self._cached(oid)
        if node is None:
            found = self._if_read(oid)
            kind, body = found if found is not None else self.nearby.get(oid)
            if kind is not Kind.ENTRY:
                raise EntryNotFound(f"object {oid} is a {kind.value}, not an entry")
            node = self._parse(body, oid)
            nodes = self._nodes
            if len(nodes) < NODE_CACHE_SIZE:
                nodes[oid] = node  # (``BoundedCache.put``'s first case, without its call)
            else:
                self._cache.put(oid, node)
        return node

    def cached_node(self, oid: str) -> EntryNode | None:
        """The node of ``oid`` if it is cached (read or stored lately), else None."""
        return self._cached(oid)

    def remember(self, oid: str, node: EntryNode) -> None:
        """Cache the node of an entry that was just stored."""
        self._cache.put(oid, node)

    def find(self, oid: str) -> EntryNode | None:
        """The node of ``oid`` if it is an entry in this store, else None."""
        if not is_oid(oid):
            return None
        try:
            return self.node(oid)
        except (ObjectNotFound, EntryNotFound):
            return None

    def ancestor_at(
        self, oid: str, depth: int, pending: Mapping[str, EntryNode] | None = None
    ) -> str:
        """The ancestor of ``oid`` at ``depth`` (``oid`` itself at its own depth).

        ``pending`` holds nodes not stored yet (a batch being built).
        """

        def lookup(key: str) -> EntryNode:
            found = pending.get(key) if pending else None
            return found if found is not None else self.node(key)

        return ancestor_at(lookup, oid, depth)

    def contains(self, heads: Iterable[str], oid: str, leaf: str | None = None) -> bool:
        """True if ``oid`` is reachable from any head (the leaf is tried first)."""
        target = self.find(oid)
        if target is None:
            return False
        if oid == leaf:  # the leaf is its own ancestor: no walk
            return True
        ordered = ([leaf] if leaf else []) + [h for h in heads if h != leaf]
        for head in ordered:
            node = self.node(head)
            if node.depth >= target.depth and self.ancestor_at(head, target.depth) == oid:
                return True
        return False

    def path(self, leaf: str | None) -> list[str]:
        """Entry ids from the root to ``leaf`` (empty for no leaf)."""
        out: list[str] = []
        current = leaf
        while current is not None:
            out.append(current)
            current = self.node(current).parent
        out.reverse()
        return out

    def reachable(self, heads: Iterable[str]) -> set[str]:
        """Every entry reachable from the heads."""
        seen: set[str] = set()
        for head in heads:
            current: str | None = head
            while current is not None and current not in seen:
                seen.add(current)
                current = self.node(current).parent
        return seen

    def require(self, oid: str, what: str = "entry") -> EntryNode:
        """The node of ``oid``; EntryNotFound if no such entry is stored."""
        node = self.find(oid)
        if node is None:
            raise EntryNotFound(f"{what} {oid!r} not found")
        return node
