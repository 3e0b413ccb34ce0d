"""S3 object storage: one key per object holding the exact zstd frame the codec produces.

A put is a plain ``PutObject`` of the frame, even when the object exists: one request
either way (``If-None-Match: *`` saves nothing, the body travels before the 412), the
bytes are identical, and rewriting refreshes the key's LastModified, which is how a
writer about to link an existing object *freshens* it so gc's grace period protects it
(``object_time`` reports it, like the local store's mtimes). ``put_many`` uploads in
parallel but never before the objects an object references are stored: items go out in
waves, each holding objects whose in-batch references were all in earlier waves, so the
closure invariant holds at every instant, even if the process dies halfway. Every
``get`` decodes and verifies the frame (hash, size limit).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence

from ...errors import CorruptObject, JournalError, ObjectNotFound
from ...objects import Kind, ObjectCodec, is_oid, object_id, references, require_oid
from ..base import ObjectStore
from .client import OversizedBody, S3Bucket
from .keys import Layout

_HEX = frozenset("0123456789abcdef")


class S3ObjectStore(ObjectStore):
    """Objects in a bucket, one key each."""

    def __init__(self, bucket: S3Bucket, layout: Layout, codec: ObjectCodec) -> None:
        self.bucket = bucket
        self.layout = layout
        self.codec = codec
        self.frame_limit = codec.max_frame_size

    def put_many(self, items: Sequence[tuple[Kind, bytes]]) -> list[str]:
        for _, body in items:
            self.codec.check_size(body)
        oids = [object_id(kind, body) for kind, body in items]
        for wave in _waves(oids, items):
            self.bucket.map(lambda item: self._upload(*item), wave)
        return oids

    def _upload(self, oid: str, kind: Kind, body: bytes) -> None:
        _, frame = self.codec.encode(kind, body)
        self.bucket.put(self.layout.object_key(oid), frame, "writing an object")

    def get(self, oid: str) -> tuple[Kind, bytes]:
        require_oid(oid)
        try:
            found = self.bucket.get(
                self.layout.object_key(oid), "reading an object", self.frame_limit
            )
        except OversizedBody as big:
            raise CorruptObject(
                f"stored frame is {big.size} bytes, more than any object within the limit", oid
            ) from None
        if found is None:
            raise ObjectNotFound(f"object {oid} not found")
        frame, _ = found
        if not frame:
            raise CorruptObject("stored object is empty", oid)
        return self.codec.decode(oid, frame)

    def has(self, oid: str) -> bool:
        if not is_oid(oid):
            return False
        return self.bucket.exists(self.layout.object_key(oid), "checking an object")

    def missing(self, oids: Iterable[str]) -> set[str]:
        """The subset of oids not stored here (HEAD requests on the worker threads)."""
        unique = list(dict.fromkeys(oids))
        present = self.bucket.map(self.has, unique)
        return {oid for oid, here in zip(unique, present, strict=True) if not here}

    def iter_oids(self) -> Iterator[str]:
        for listed in self.bucket.list_keys(self.layout.objects, "listing objects"):
            oid = self.layout.oid_from_key(listed.key)
            if oid is not None:
                yield oid

    def oids_with_prefix(self, prefix: str) -> list[str]:
        """Sorted oids starting with a lowercase hex prefix: one listing of matching keys."""
        if len(prefix) > 64 or not _HEX.issuperset(prefix):
            return []
        key_prefix = self.layout.objects + (
            f"{prefix[:2]}/{prefix[2:]}" if len(prefix) >= 2 else prefix
        )
        found = (
            self.layout.oid_from_key(item.key)
            for item in self.bucket.list_keys(key_prefix, "listing objects")
        )
        return sorted(oid for oid in found if oid is not None and oid.startswith(prefix))

    def delete(self, oid: str) -> None:
        require_oid(oid)
        self.bucket.delete(self.layout.object_key(oid), "deleting an object")

    def delete_many(self, oids: Iterable[str]) -> None:
        """Remove many objects (up to 1,000 per request)."""
        keys = (self.layout.object_key(require_oid(oid)) for oid in oids)
        self.bucket.delete_many(keys, "deleting objects")

    def stored_size(self, oid: str) -> int:
        """Bytes the object occupies in the bucket (0 if absent)."""
        found = self.bucket.stat(self.layout.object_key(require_oid(oid)), "sizing an object")
        return 0 if found is None else found[0]

    def usage(self) -> dict[str, int]:
        """Objects and stored bytes, from one listing (every object is "loose" here)."""
        count = size = 0
        for listed in self.bucket.list_keys(self.layout.objects, "measuring objects"):
            if self.layout.oid_from_key(listed.key) is not None:
                count += 1
                size += listed.size
        return {"loose_objects": count, "loose_bytes": size, "packs": 0, "packed_bytes": 0}

    def object_time(self, oid: str) -> int | None:
        """When an object was last written or freshened (unix seconds), None if absent."""
        found = self.bucket.stat(self.layout.object_key(require_oid(oid)), "dating an object")
        return None if found is None else found[1]


def _waves(
    oids: list[str], items: Sequence[tuple[Kind, bytes]]
) -> list[list[tuple[str, Kind, bytes]]]:
    """Group distinct items so each references only objects of earlier waves (or outside
    the batch). A body that does not parse is put after everything listed before it."""
    level_of: dict[str, int] = {}
    waves: list[list[tuple[str, Kind, bytes]]] = []
    deepest = -1
    for oid, (kind, body) in zip(oids, items, strict=True):
        if oid in level_of:
            continue
        try:
            refs = references(kind, body, oid)
            level = 1 + max((level_of[r] for r in refs if r in level_of), default=-1)
        except (JournalError, ValueError):
            level = deepest + 1
        level_of[oid] = level
        deepest = max(deepest, level)
        if level == len(waves):
            waves.append([])
        waves[level].append((oid, kind, body))
    return waves
