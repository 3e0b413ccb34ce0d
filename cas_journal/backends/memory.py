"""In-memory backend: the reference implementation of both protocols, for tests and scratch.

Objects are kept as their stored frames and decoded (and verified) on every read, exactly
like the persistent backends, so behaviour does not depend on which backend a test uses.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence

from ..errors import LinkedObjectsMissing, ObjectNotFound
from ..names import split_ref_name
from ..objects import Kind, ObjectCodec, require_oid, utc_now
from .base import (
    Capabilities,
    IndexUpdate,
    NewObject,
    ObjectStore,
    RefCheck,
    ReflogEntry,
    RefStore,
    RefUpdate,
    Store,
    check_ref_value,
)


class MemoryObjectStore(ObjectStore):
    """Objects in a dict, keyed by oid."""

    def __init__(self, codec: ObjectCodec) -> None:
        self.codec = codec
        self._frames: dict[str, bytes] = {}
        self._lock = threading.Lock()

    def put_many(self, items: Sequence[tuple[Kind, bytes]]) -> list[str]:
        oids = []
        for kind, body in items:
            oid, frame = self.codec.encode(kind, body)
            with self._lock:
                self._frames.setdefault(oid, frame)
            oids.append(oid)
        return oids

    def store_new(self, objects: Sequence[NewObject]) -> None:
        """Store objects under the oids the caller computed (no second hash)."""
        for obj in objects:
            if obj.oid not in self._frames:
                self.codec.check_size(obj.body)
                frame = self.codec.compress(obj.kind, obj.body)
                with self._lock:
                    self._frames.setdefault(obj.oid, frame)

    def get(self, oid: str) -> tuple[Kind, bytes]:
        frame = self._frames.get(oid)
        if frame is None:
            raise ObjectNotFound(f"object {oid} not found")
        return self.codec.decode(oid, frame)

    def has(self, oid: str) -> bool:
        return oid in self._frames

    def iter_oids(self) -> Iterator[str]:
        with self._lock:
            oids = list(self._frames)
        return iter(oids)

    def delete(self, oid: str) -> None:
        with self._lock:
            self._frames.pop(oid, None)

    def usage(self) -> dict[str, int]:
        """Every object counts as loose; bytes are its stored frame."""
        with self._lock:
            frames = list(self._frames.values())
        return {
            "loose_objects": len(frames),
            "loose_bytes": sum(map(len, frames)),
            "packs": 0,
            "packed_bytes": 0,
        }

    def corrupt_for_tests(self, oid: str, frame: bytes) -> None:
        """Replace an object's stored frame (used by tests that damage a store)."""
        require_oid(oid)
        with self._lock:
            self._frames[oid] = frame


class MemoryRefStore(RefStore):
    """Refs and reflogs in dicts, guarded by one lock."""

    def __init__(self) -> None:
        self._values: dict[str, str] = {}
        self._logs: dict[str, list[ReflogEntry]] = {}
        self._lock = threading.Lock()

    def read_ref(self, name: str) -> str | None:
        split_ref_name(name)
        return self._values.get(name)

    def set_if_equals(
        self, name: str, old: str | None, new: str | None, reason: str = "", log: bool = True
    ) -> bool:
        split_ref_name(name)
        check_ref_value(new)
        with self._lock:
            return self._swap_locked(RefUpdate(name, old, new, reason, log))

    def _swap_locked(self, swap: RefUpdate, index: Sequence[IndexUpdate] = ()) -> bool:
        """Apply a compare-and-swap and its index updates; the caller holds the lock."""
        if self._values.get(swap.name) != swap.old:
            return False
        if swap.log:
            self._logs.setdefault(swap.name, []).append(
                ReflogEntry(swap.old, swap.new, utc_now(), swap.reason)
            )
        self._assign(swap.name, swap.new)
        for update in index:
            self._assign(update.name, update.value)
        return True

    def _assign(self, name: str, value: str | None) -> None:
        if value is None:
            self._values.pop(name, None)
        else:
            self._values[name] = value

    def commit_refs(
        self, swap: RefUpdate, index: Sequence[IndexUpdate], expect: Sequence[RefCheck] = ()
    ) -> bool:
        """The ref half of an atomic commit: the checks, the swap and its index updates
        together (False, nothing changed, if a check fails or the swap loses)."""
        for name in (swap.name, *(update.name for update in index)):
            split_ref_name(name)
        for check in expect:
            split_ref_name(check.name)
        check_ref_value(swap.new)
        for update in index:
            check_ref_value(update.value)
        with self._lock:
            if any(self._values.get(check.name) != check.value for check in expect):
                return False
            return self._swap_locked(swap, index)

    def list_refs(self, prefix: str, start_after: str | None = None, limit: int = 0) -> list[str]:
        with self._lock:
            names = sorted(n for n in self._values if n.startswith(prefix))
        if start_after is not None:
            names = [n for n in names if n > start_after]
        return names[:limit] if limit > 0 else names

    def reflog(self, name: str) -> list[ReflogEntry]:
        split_ref_name(name)
        with self._lock:
            return list(self._logs.get(name, []))

    def reflog_names(self, prefix: str) -> list[str]:
        with self._lock:
            return sorted(n for n, log in self._logs.items() if log and n.startswith(prefix))

    def rewrite_reflog(self, name: str, keep: Callable[[ReflogEntry], bool]) -> int:
        with self._lock:
            entries = self._logs.get(name, [])
            kept = [entry for entry in entries if keep(entry)]
            self._logs[name] = kept
            return len(entries) - len(kept)


class MemoryStore(Store):
    """A complete store that lives and dies with the process."""

    capabilities = Capabilities(atomic_commit=True)

    def commit(
        self,
        objects: Sequence[NewObject],
        swap: RefUpdate,
        index: Sequence[IndexUpdate] = (),
        linked: Sequence[str] = (),
        expect: Sequence[RefCheck] = (),
    ) -> bool:
        """Objects first (harmless if the swap then loses), then the checks, the swap
        and the index updates under one lock: no reader sees one without the other.
        ``linked`` are freshened first (LinkedObjectsMissing if one is not stored)."""
        missing = self.objects.freshen(linked) if linked else None
        if missing:
            raise LinkedObjectsMissing(list(missing))
        self.objects.store_new(objects)
        return self.refs.commit_refs(swap, index, expect)

    def __init__(self, codec: ObjectCodec | None = None) -> None:
        self.objects: MemoryObjectStore = MemoryObjectStore(codec or ObjectCodec())
        self.refs: MemoryRefStore = MemoryRefStore()
        self.durable = False
        self.url = "memory://"
