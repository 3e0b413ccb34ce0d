"""S3 object storage: packs listed in the manifest, plus loose objects for small commits.

* Loose objects: one key per object, ``objects/<oid[:2]>/<oid[2:]>``, holding the exact
  zstd frame the codec produces. A small ``store_new`` (a single append: a payload, an
  entry, a thread state) writes its objects this way, one PUT each, in parallel waves that
  never store an object before the objects it references (``_waves``), so the closure
  invariant holds at every instant even if the process dies halfway.
* Packs (``packset``): a ``store_new`` of at least ``PACK_MIN_OBJECTS`` objects or
  ``PACK_MIN_BYTES`` of bodies (a batch, a sync) becomes one pack in the local store's
  format, visible all at once when the manifest lists it.
* Reads: the packs that hold the object (live ones first), then the loose key; when the
  object is in none, the manifest is read again (another writer may have published it,
  maintenance may have moved it) and the packs tried again. Every copy is verified
  (hash, size limit); a damaged copy is passed over for the next one, and CorruptObject
  is raised only if no copy is intact.
* What writers rely on: ``missing`` and ``freshen`` count only *live* copies (a live
  pack, a loose key). An object held only by a condemned pack is reported missing, so a
  writer stores it again instead of linking a copy that gc will delete. ``missing``
  answers from a manifest and a listing of loose keys at most ``SNAPSHOT_AGE`` seconds
  old (a sync asks about thousands of objects: no request per object); ``freshen`` reads
  the manifest again and checks loose keys one by one. A writer links what ``freshen``
  (or its own write) found within ``WRITER_DEADLINE`` of that check: gc's rule
  (``maintenance.condemning``) relies on it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Iterator, Sequence

from ...errors import CorruptObject, JournalError, ObjectNotFound
from ...objects import Kind, ObjectCodec, canonical_form, is_oid, references, require_oid
from ...packs import PackedObject
from ..base import NewObject, ObjectStore
from .client import OversizedBody, S3Bucket
from .keys import Layout
from .packset import S3Packs
from .ranges import PackGone

_HEX = frozenset("0123456789abcdef")
PACK_MIN_OBJECTS = 16
"""A ``store_new`` of at least this many objects is written as one pack."""
PACK_MIN_BYTES = 1024 * 1024
"""... or of at least this many body bytes."""
SNAPSHOT_AGE = 10.0
"""Seconds a manifest and a loose listing may serve ``missing`` before being read again."""
WRITER_DEADLINE = 15 * 60.0
"""A writer links objects within this many seconds of finding them live (its own write,
``missing`` or ``freshen``); gc condemns for a grace period longer than this."""
HEAD_LIMIT = 64
"""``freshen`` checks up to this many loose objects with HEADs, more with one listing."""


class S3ObjectStore(ObjectStore):
    """Objects in a bucket: packs and loose keys."""

    def __init__(self, bucket: S3Bucket, layout: Layout, codec: ObjectCodec) -> None:
        self.bucket = bucket
        self.layout = layout
        self.codec = codec
        self.frame_limit = codec.max_frame_size
        self.packs = S3Packs(bucket, layout, codec.max_object_size)
        self._lock = threading.Lock()
        self._loose: frozenset[str] | None = None
        self._loose_at = -1e18
        self._written: set[str] = set()
        """Loose objects this handle wrote since its last listing of loose keys."""

    # -- writing ----------------------------------------------------------------------

    def put_many(self, items: Sequence[tuple[Kind, bytes]]) -> list[str]:
        objects = [NewObject(self._oid(kind, body), kind, body) for kind, body in items]
        self.store_new(objects)
        return [obj.oid for obj in objects]

    def _oid(self, kind: Kind, body: bytes) -> str:
        self.codec.check_size(body)
        from ...objects import object_id

        return object_id(kind, body)

    def store_new(self, objects: Sequence[NewObject]) -> None:
        unique = list({obj.oid: obj for obj in objects}.values())
        for obj in unique:
            self.codec.check_size(obj.body)
        if not unique:
            return
        size = sum(len(obj.body) for obj in unique)
        if len(unique) >= PACK_MIN_OBJECTS or size >= PACK_MIN_BYTES:
            self.packs.publish(
                PackedObject(obj.oid, canonical_form(obj.kind, obj.body)) for obj in unique
            )
            return
        # a small write skips what a live pack holds (a manifest at most SNAPSHOT_AGE
        # old counts as a check: the caller links within WRITER_DEADLINE of it)
        packed = self._live([obj.oid for obj in unique], SNAPSHOT_AGE)
        for wave in _waves([obj for obj in unique if obj.oid not in packed]):
            self.bucket.map(self._upload, wave)

    def _upload(self, obj: NewObject) -> None:
        frame = self.codec.compress(obj.kind, obj.body)
        self.bucket.put(self.layout.object_key(obj.oid), frame, "writing an object")
        with self._lock:
            self._written.add(obj.oid)

    def replace(self, objects: Sequence[NewObject]) -> None:
        """Write fresh loose copies (reads pass over the damaged ones)."""
        for wave in _waves(list({obj.oid: obj for obj in objects}.values())):
            self.bucket.map(self._upload, wave)

    # -- reading ----------------------------------------------------------------------

    def get(self, oid: str) -> tuple[Kind, bytes]:
        require_oid(oid)
        damage: CorruptObject | None = None
        for attempt in range(3):
            for pack in self.packs.holding(oid):
                try:
                    return pack.reader.read(oid)
                except PackGone:
                    continue  # replaced meanwhile: the manifest is read again below
                except CorruptObject as exc:
                    damage = exc
            try:
                found = self._get_loose(oid)
            except CorruptObject as exc:
                damage, found = exc, None
            if found is not None:
                return found
            if attempt < 2:
                before = self.packs.manifest().names()
                if self.packs.refresh().names() == before and attempt:
                    break
        if damage is not None:
            raise damage
        raise ObjectNotFound(f"object {oid} not found")

    def get_many(self, oids: Iterable[str]) -> Iterator[tuple[str, Kind, bytes]]:
        """Several objects: those in packs pack by pack in data order (adjacent blocks in
        one ranged GET), the rest (loose, or in a damaged block) in parallel GETs."""
        wanted = [require_oid(oid) for oid in dict.fromkeys(oids)]
        remaining = set(wanted)
        for pack in self.packs.packs():
            held = [oid for oid in wanted if oid in remaining and pack.reader.contains(oid)]
            if not held:
                continue
            try:
                for oid, kind, body in pack.reader.read_many(held):
                    remaining.discard(oid)
                    yield oid, kind, body
            except (PackGone, CorruptObject):
                continue  # what is left is read one by one below, from any intact copy
        rest = [oid for oid in wanted if oid in remaining]
        for oid, (kind, body) in zip(rest, self.bucket.map(self.get, rest), strict=True):
            yield oid, kind, body

    def _get_loose(self, oid: str) -> tuple[Kind, bytes] | None:
        try:
            found = self.bucket.get(
                self.layout.object_key(oid), "reading an object", self.frame_limit
            )
        except OversizedBody as big:
            raise CorruptObject(
                f"stored frame is {big.size} bytes, more than any object within the limit", oid
            ) from None
        if found is None:
            return None
        frame, _ = found
        if not frame:
            raise CorruptObject("stored object is empty", oid)
        return self.codec.decode(oid, frame)

    def has(self, oid: str) -> bool:
        if not is_oid(oid):
            return False
        if self.packs.holding(oid):
            return True
        if self.bucket.exists(self.layout.object_key(oid), "checking an object"):
            return True
        self.packs.refresh()
        return bool(self.packs.holding(oid))

    # -- what writers may rely on -----------------------------------------------------

    def _loose_listing(self, max_age: float) -> frozenset[str]:
        with self._lock:
            if self._loose is not None and time.monotonic() - self._loose_at <= max_age:
                return self._loose | frozenset(self._written)
        started = time.monotonic()
        listed = frozenset(self.iter_loose())
        with self._lock:
            self._loose, self._loose_at = listed, started
            self._written.clear()
            return listed

    def _live(self, oids: list[str], max_age: float | None) -> set[str]:
        """The oids a live pack of the manifest (read within ``max_age``) holds."""
        manifest = self.packs.manifest(max_age)
        live = self.packs.packs(manifest, condemned=False)
        return {oid for oid in oids if any(pack.reader.contains(oid) for pack in live)}

    def missing(self, oids: Iterable[str]) -> set[str]:
        """The oids with no live copy (see the module docstring), from a manifest and a
        listing of loose keys at most ``SNAPSHOT_AGE`` seconds old."""
        unique = [oid for oid in dict.fromkeys(oids)]
        if not unique:
            return set()
        valid = [oid for oid in unique if is_oid(oid)]
        packed = self._live(valid, SNAPSHOT_AGE)
        rest = [oid for oid in valid if oid not in packed]
        loose = self._loose_listing(SNAPSHOT_AGE) if rest else frozenset()
        return {oid for oid in unique if oid not in packed and oid not in loose}

    def freshen(self, oids: Iterable[str]) -> set[str]:
        """Check now that each object has a live copy (a manifest read now; loose keys one
        by one, or listed when many); return those without. The caller links the others
        within ``WRITER_DEADLINE``."""
        unique = [oid for oid in dict.fromkeys(oids)]
        valid = [oid for oid in unique if is_oid(oid)]
        packed = self._live(valid, 0.0) if valid else set()
        rest = [oid for oid in valid if oid not in packed]
        if len(rest) > HEAD_LIMIT:
            loose = self._loose_listing(0.0)
            present = {oid for oid in rest if oid in loose}
        else:
            found = self.bucket.map(
                lambda oid: self.bucket.exists(self.layout.object_key(oid), "checking an object"),
                rest,
            )
            present = {oid for oid, here in zip(rest, found, strict=True) if here}
        return {oid for oid in unique if oid not in packed and oid not in present}

    # -- listing and accounting -------------------------------------------------------

    def iter_loose(self) -> Iterator[str]:
        """Every loose object's oid (one listing)."""
        for listed in self.bucket.list_keys(self.layout.objects, "listing objects"):
            oid = self.layout.oid_from_key(listed.key)
            if oid is not None:
                yield oid

    def iter_oids(self) -> Iterator[str]:
        seen: set[str] = set()
        for pack in self.packs.packs(self.packs.refresh()):
            for oid in pack.reader.iter_oids():
                if oid not in seen:
                    seen.add(oid)
                    yield oid
        for oid in self.iter_loose():
            if oid not in seen:
                seen.add(oid)
                yield oid

    def oids_with_prefix(self, prefix: str) -> list[str]:
        """Sorted oids starting with a lowercase hex prefix: the indexes plus one listing
        of matching loose keys."""
        if len(prefix) > 64 or not _HEX.issuperset(prefix):
            return []
        found: set[str] = set()
        for pack in self.packs.packs(self.packs.refresh()):
            if len(prefix) >= 2:
                found.update(pack.reader.oids_with_prefix(prefix))
            else:
                found.update(oid for oid in pack.reader.iter_oids() if oid.startswith(prefix))
        key_prefix = self.layout.objects + (
            f"{prefix[:2]}/{prefix[2:]}" if len(prefix) >= 2 else prefix
        )
        for item in self.bucket.list_keys(key_prefix, "listing objects"):
            oid = self.layout.oid_from_key(item.key)
            if oid is not None and oid.startswith(prefix):
                found.add(oid)
        return sorted(found)

    def delete(self, oid: str) -> None:
        """Remove the loose copy (packed copies go with their pack, see gc)."""
        require_oid(oid)
        self.bucket.delete(self.layout.object_key(oid), "deleting an object")

    def delete_many(self, oids: Iterable[str]) -> None:
        """Remove many loose copies (up to 1,000 per request)."""
        keys = (self.layout.object_key(require_oid(oid)) for oid in oids)
        self.bucket.delete_many(keys, "deleting objects")

    def stored_size(self, oid: str) -> int:
        """Bytes the object's loose copy occupies in the bucket (0 if none)."""
        found = self.bucket.stat(self.layout.object_key(require_oid(oid)), "sizing an object")
        return 0 if found is None else found[0]

    def usage(self) -> dict[str, int]:
        """Loose objects and bytes from one listing; packs and their bytes (data and
        index) from the manifest."""
        count = size = 0
        for listed in self.bucket.list_keys(self.layout.objects, "measuring objects"):
            if self.layout.oid_from_key(listed.key) is not None:
                count += 1
                size += listed.size
        manifest = self.packs.refresh()
        entries = (*manifest.live, *manifest.condemned)
        return {
            "loose_objects": count,
            "loose_bytes": size,
            "packs": len(entries),
            "packed_bytes": sum(entry.data + entry.index for entry in entries),
        }

    def object_time(self, oid: str) -> int | None:
        """When an object was last written (unix seconds), over its copies; None if absent."""
        newest: float | None = None
        for pack in self.packs.holding(require_oid(oid)):
            position = pack.reader.position(oid)
            when = max(float(pack.reader.time_at(position)), pack.entry.added)
            newest = when if newest is None else max(newest, when)
        found = self.bucket.stat(self.layout.object_key(oid), "dating an object")
        if found is not None:
            newest = found[1] if newest is None else max(newest, found[1])
        return None if newest is None else int(newest)


def _waves(objects: Sequence[NewObject]) -> list[list[NewObject]]:
    """Group objects so each references only objects of earlier waves (or outside the
    batch). A body that does not parse is put after everything listed before it."""
    level_of: dict[str, int] = {}
    waves: list[list[NewObject]] = []
    deepest = -1
    for obj in objects:
        if obj.oid in level_of:
            continue
        try:
            refs = references(obj.kind, obj.body, obj.oid)
            level = 1 + max((level_of[r] for r in refs if r in level_of), default=-1)
        except (JournalError, ValueError):
            level = deepest + 1
        level_of[obj.oid] = level
        deepest = max(deepest, level)
        if level == len(waves):
            waves.append([])
        waves[level].append(obj)
    return waves
