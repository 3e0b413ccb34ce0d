"""A bucket's packs: the manifest (cached), pack indexes (fetched once and checked),
readers over ranged GETs, and publishing new packs.

Reading: the manifest is read when first needed and again whenever an object is not
found in the packs it names (another writer may have published one, maintenance may
have replaced some). Each pack's index is fetched whole, once (one GET), checked
(its length and hash against the manifest's entry, its header against the pack's data
size) and kept in memory; a lookup is a binary search in it. A pack whose index is
missing or damaged is left out (``broken`` says why; fsck reports it) and everything
else keeps working. Pack data is read with ranged GETs through ``ranges.PackData``.

Publishing: a new pack's data is streamed to ``packs/<name>.pack`` (a multipart upload
past 8 MiB) while ``PackWriter`` fills it, then its index goes to ``packs/<name>.idx``,
then the manifest lists it (a conditional write): only then can anyone find its objects,
so a writer killed at any point leaves at worst unlisted keys, which gc removes once
old (``S3StoredCopies.remove_leftovers``).
"""

from __future__ import annotations

import contextlib
import secrets
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, replace

from ...errors import CorruptObject, JournalError
from ...packs import BlockCache, PackedObject, PackIndex, PackReader, PackWriter
from .client import MultipartWriter, OversizedBody, S3Bucket
from .keys import Layout
from .manifest import Manifest, ManifestStore, PackEntry
from .ranges import PackData, RangeCache

MAX_INDEX_BYTES = 1 << 31


@dataclass(frozen=True)
class Pack:
    """One pack as this handle knows it: its manifest entry and its reader."""

    entry: PackEntry
    reader: PackReader
    condemned: bool

    @property
    def name(self) -> str:
        """The pack's name."""
        return self.entry.name


def new_pack_name() -> str:
    """A fresh random pack name (``pack-`` + 40 hex digits)."""
    return "pack-" + secrets.token_hex(20)


class S3Packs:
    """The packs of one store, as this handle sees them (thread-safe)."""

    def __init__(self, bucket: S3Bucket, layout: Layout, max_object_size: int) -> None:
        self.bucket = bucket
        self.layout = layout
        self.max_object_size = max_object_size
        self.manifests = ManifestStore(bucket, layout)
        self.ranges = RangeCache()
        self.blocks = BlockCache()
        self.broken: dict[str, str] = {}
        """Packs the manifest names that could not be opened, with the reason."""
        self._lock = threading.Lock()
        self._manifest: Manifest | None = None
        self._read_at = -1e18
        self._packs: dict[str, Pack] = {}
        self._memo: dict[bool, tuple[Manifest, list[Pack]]] = {}
        """The packs of the cached manifest (with and without condemned ones)."""

    # -- the manifest -----------------------------------------------------------------

    def manifest(self, max_age: float | None = None) -> Manifest:
        """The manifest as last read, read again if older than ``max_age`` seconds (None:
        whatever is cached; read if nothing is)."""
        with self._lock:
            cached, read_at = self._manifest, self._read_at
        if cached is not None and (max_age is None or time.monotonic() - read_at <= max_age):
            return cached
        return self.refresh()

    def refresh(self) -> Manifest:
        """Read the manifest again (and forget packs it no longer names)."""
        started = time.monotonic()
        manifest = self.manifests.read()
        self.adopt(manifest, started)
        return manifest

    def adopt(self, manifest: Manifest, read_at: float) -> None:
        """Cache ``manifest`` (read, or written, at monotonic ``read_at``) unless a newer
        one is cached."""
        with self._lock:
            if self._manifest is not None and read_at < self._read_at:
                return
            self._manifest, self._read_at = manifest, read_at
            self._memo.clear()
            names = manifest.names()
            for gone in set(self._packs) - names:
                self.ranges.forget(self.layout.pack_data_key(gone))
                del self._packs[gone]
            for gone in set(self.broken) - names:
                del self.broken[gone]

    # -- opening packs ----------------------------------------------------------------

    def packs(self, manifest: Manifest | None = None, condemned: bool = True) -> list[Pack]:
        """The packs of ``manifest`` (default: the cached one) that open, live first;
        indexes not fetched yet are fetched now, in parallel."""
        manifest = manifest or self.manifest()
        with self._lock:
            memo = self._memo.get(condemned)
            if memo is not None and memo[0] is manifest:
                return memo[1]
        wanted = [(entry, False) for entry in manifest.live]
        if condemned:
            wanted += [(entry, True) for entry in manifest.condemned]
        with self._lock:
            missing = [
                (entry, dead)
                for entry, dead in wanted
                if entry.name not in self._packs and entry.name not in self.broken
            ]
        if missing:
            self.bucket.map(lambda item: self._open(*item), missing)
        with self._lock:
            found = [self._packs.get(entry.name) for entry, _ in wanted]
            opened = [
                pack if pack.condemned == dead else replace(pack, condemned=dead)
                for pack, (_, dead) in zip(found, wanted, strict=True)
                if pack is not None
            ]
            if self._manifest is manifest:  # every pack tried: remember until it changes
                self._memo[condemned] = (manifest, opened)
        return opened

    def _open(self, entry: PackEntry, condemned: bool) -> None:
        try:
            pack = self.load(entry, condemned)
        except (JournalError, OversizedBody) as exc:
            with self._lock:
                self.broken[entry.name] = str(exc)
            return
        with self._lock:
            self._packs.setdefault(entry.name, pack)

    def load(self, entry: PackEntry, condemned: bool, index: bytes | None = None) -> Pack:
        """Open one pack: fetch its index (unless given) and check it against the entry."""
        if index is None:
            if entry.index > MAX_INDEX_BYTES:
                raise CorruptObject(f"pack {entry.name}: the manifest claims a huge index")
            found = self.bucket.get(
                self.layout.pack_index_key(entry.name), "reading a pack index", entry.index
            )
            if found is None:
                raise CorruptObject(f"pack {entry.name}: its index is missing")
            index = found[0]
        if len(index) != entry.index:
            raise CorruptObject(
                f"pack {entry.name}: its index is {len(index)} bytes, the manifest says "
                f"{entry.index}"
            )
        decoded = PackIndex(index, entry.name)
        if entry.index_hash and decoded.trailer().hex() != entry.index_hash:
            raise CorruptObject(f"pack {entry.name}: its index is not the one the manifest names")
        if not entry.index_hash and not decoded.verify_trailer():
            raise CorruptObject(f"pack {entry.name}: its index checksum does not match")
        data = PackData(self.bucket, self.layout.pack_data_key(entry.name), entry.data, self.ranges)
        reader = PackReader(decoded, data, self.max_object_size, self.blocks)
        return Pack(entry, reader, condemned)

    def holding(self, oid: str, condemned: bool = True) -> list[Pack]:
        """The opened packs of the cached manifest that hold ``oid`` (live ones first)."""
        return [pack for pack in self.packs(condemned=condemned) if pack.reader.contains(oid)]

    # -- publishing ---------------------------------------------------------------------

    def publish(
        self,
        objects: Iterable[PackedObject],
        *,
        level: int = 3,
        block_size: int = 64 * 1024,
        dictionary: PackedObject | None = None,
        maintained: bool = False,
        condemned: bool = False,
    ) -> Pack | None:
        """Write ``objects`` (in order) as a new pack and list it in the manifest (as live,
        or as condemned with the time still to be set); None if nothing was written."""
        name = new_pack_name()
        data_key, index_key = self.layout.pack_data_key(name), self.layout.pack_index_key(name)
        sink = MultipartWriter(self.bucket, data_key, "writing a pack")
        uploaded = False
        try:
            writer = PackWriter(
                sink,
                level=level,
                block_size=block_size,
                dictionary=dictionary,
                maintained=maintained,
            )
            writer.add_all(objects)
            written = writer.finish()
            if written is None:
                sink.abort()
                return None
            sink.finish()
            uploaded = True
            self.bucket.put(index_key, written.index, "writing a pack index")
            entry = PackEntry(
                name,
                written.data_size,
                len(written.index),
                written.count,
                index_hash=written.index[-32:].hex(),
            )
            pack = self.load(entry, condemned, written.index)

            def register(current: Manifest) -> Manifest:
                listed = replace(entry, added=current.read_at)
                # a damaged manifest's listing already shows our keys: list them once
                live = tuple(e for e in current.live if e.name != name)
                dead = tuple(e for e in current.condemned if e.name != name)
                if condemned:
                    return replace(current, live=live, condemned=(*dead, listed))
                return replace(current, live=(*live, listed), condemned=dead)

            started = time.monotonic()
            manifest = self.manifests.update(register)
        except BaseException:
            sink.abort()
            if uploaded:
                with contextlib.suppress(Exception):
                    self.bucket.delete_many([data_key, index_key], "removing an unlisted pack")
            raise
        listed = next(e for e in (*manifest.live, *manifest.condemned) if e.name == name)
        pack = replace(pack, entry=listed)
        with self._lock:
            self._packs[name] = pack
            self._memo.clear()
        if manifest.etag is not None:
            self.adopt(manifest, started)
        return pack
