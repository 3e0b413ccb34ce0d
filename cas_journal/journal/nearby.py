"""Objects read together with their neighbours in the store, kept until asked for.

Pack order puts a thread's entry nodes in chain order, its small payloads in the same
order, and a run's message nodes and messages likewise (see ``maintenance.layout``). A
reader walking such a chain one object at a time would look every object up in the pack
index and slice it out of its block; ``NearbyObjects`` instead asks the store for the
object *with its neighbours* (``ObjectStore.get_with_neighbours``: the rest of its pack
block, each object named by its own hash, so verified) and keeps the neighbours until
they are asked for. Each block is then decompressed and split once per walk.

Only verified objects are kept, each is handed out once (a caller caches what it
builds from it), and the total is bounded: the oldest neighbours are dropped first.
Handing one out is a single dict pop (``take``), which a chain walker calls directly:
the byte count is then an upper bound (what was kept since it was last counted), and
when it passes ``max_bytes`` the kept bodies are counted again and, if they pass half
of it, the oldest are dropped down to half (so the recount costs O(1) per byte kept).
``get_if_read`` hands out an object only if a read so far brought it (a kept neighbour,
or what the store keeps from its own last read: ``ObjectStore.get_if_read``), so a
chain walker can pick up a node's companions on the way and batch-read the rest.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator
from operator import itemgetter

from ..backends import ObjectStore
from ..objects import Kind

_oid_of, _object_of, _body_of = itemgetter(0), itemgetter(1, 2), itemgetter(2)
"""Parts of an ``(oid, kind, body)`` answer."""
MAX_PENDING_BYTES = 32 * 1024 * 1024
"""Bodies of neighbours not asked for yet, kept at most."""


class NearbyObjects:
    """Reads objects through ``get_with_neighbours`` and keeps the neighbours for later."""

    def __init__(self, objects: ObjectStore, max_bytes: int = MAX_PENDING_BYTES) -> None:
        self.objects = objects
        self.max_bytes = max_bytes
        self._pending: dict[str, tuple[Kind, bytes]] = {}
        self.take: Callable[[str, None], tuple[Kind, bytes] | None] = self._pending.pop
        """``take(oid, None)``: the kept neighbour ``oid`` (handed out: no longer kept),
        or None, without reading storage (the dict's own ``pop``: one call per object
        of a walk)."""
        self._bytes = 0
        """Bytes kept, at most (neighbours handed out since the last count are in it)."""
        self._lock = threading.Lock()

    def get(self, oid: str) -> tuple[Kind, bytes]:
        """``(kind, body)`` of ``oid``, verified; ObjectNotFound if the store lacks it."""
        found = self.take(oid, None)
        if found is not None:
            return found
        result: tuple[Kind, bytes] | None = None
        neighbours = self.objects.get_with_neighbours(oid)
        if len(neighbours) == 1 and neighbours[0][0] == oid:  # alone (a row): nothing to keep
            return neighbours[0][1], neighbours[0][2]
        with self._lock:
            pending = self._pending
            # kept at C speed (a block holds hundreds of objects): a neighbour kept
            # already is replaced by the same verified object, and counted again (the
            # count is an upper bound)
            pending.update(zip(map(_oid_of, neighbours), map(_object_of, neighbours), strict=True))
            self._bytes += sum(map(len, map(_body_of, neighbours)))
            result = pending.pop(oid, None)
            if self._bytes > self.max_bytes:
                self._trim()
        if result is None:  # a store that answered without it: ask plainly
            result = self.objects.get(oid)
        return result

    def get_if_read(self, oid: str) -> tuple[Kind, bytes] | None:
        """``(kind, body)`` of ``oid`` if a read so far brought it at no cost (a kept
        neighbour, or what the store itself keeps: ``ObjectStore.get_if_read``), verified;
        else None, without reading storage."""
        found = self.take(oid, None)
        if found is None:
            found = self.objects.get_if_read(oid)
        return found

    def _trim(self) -> None:
        """Count the kept bodies; past half of ``max_bytes``, drop the oldest down to
        half (under the lock; ``take`` pops without it, so a neighbour popped meanwhile
        is simply not there to drop)."""
        pending = self._pending
        kept = sum(len(body) for _, body in list(pending.values()))
        half = self.max_bytes // 2
        while kept > half and pending:
            try:
                kept -= len(pending.pop(next(iter(pending)))[1])
            except (KeyError, RuntimeError, StopIteration):  # taken meanwhile: count again
                kept = sum(len(body) for _, body in list(pending.values()))
        self._bytes = kept

    def get_many(self, oids: Iterable[str]) -> Iterator[tuple[str, Kind, bytes]]:
        """``(oid, kind, body)`` of each of ``oids`` (in the given order as far as they
        are kept or packed together), each verified: a kept neighbour, else what the
        store's own last reads brought (``get_if_read``), else read. Once the store
        answers one object without neighbours (it is not packed), the rest go through
        the store's own ``get_many``, which batches them."""
        rest: list[str] = []
        alone = False
        if_read = self.get_if_read
        for oid in dict.fromkeys(oids):
            found = if_read(oid)
            if found is not None:
                yield oid, found[0], found[1]
            elif alone:
                rest.append(oid)
            else:
                before = len(self._pending)
                kind, body = self.get(oid)
                alone = len(self._pending) == before
                yield oid, kind, body
        if rest:
            yield from self.objects.get_many(rest)

    def clear(self) -> None:
        """Forget every neighbour kept."""
        with self._lock:
            self._pending.clear()
            self._bytes = 0

    def __len__(self) -> int:
        return len(self._pending)
