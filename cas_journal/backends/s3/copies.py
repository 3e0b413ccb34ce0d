"""The S3 store's stored copies (``backends.copies``) and condemned packs
(``backends.condemned``): what pack, gc and fsck use on a bucket.

Loose copies are the keys ``objects/ab/cdef...`` (their write time is the key's
LastModified, server clock); packed copies are the objects of the packs the manifest
lists as live (a copy's write time is the newer of its time in the index and the time the
pack was listed). Condemned packs are not copies a writer may rely on: ``scan`` and
``packs`` leave them out; gc handles them through ``CondemnedPacks``.

Every primitive leaves the bucket valid when it returns and, if killed midway, leaves at
worst extra keys: a new pack is listed only once both its keys are complete, and keys
are deleted only after the manifest stopped listing them. ``maintenance_lock`` is the
lease of ``lease.py``. ``writers_paused`` cannot pause writers in other processes: a gc
with no grace period (``prune_now``) must not run while anyone writes to the bucket.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Collection, Iterator, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from ...errors import CorruptObject, JournalError
from ...objects import Kind, canonical_form, parse_canonical
from ...packs import PackedObject
from ..base import NewObject
from ..condemned import CondemnedPack, CondemnedPacks
from ..copies import (
    CopyCheck,
    PackOptions,
    PackSummary,
    Progress,
    StoredCopies,
    StoredCopy,
    WrittenPack,
    check_pack,
)
from .lease import MaintenanceLease
from .manifest import Manifest
from .packset import Pack
from .ranges import PackGone

if TYPE_CHECKING:
    from .objects import S3ObjectStore

VERIFY_BATCH = 256
"""Loose objects fetched at once by ``verify``."""


def summary(pack: Pack) -> PackSummary:
    """A pack as the protocol describes it."""
    reader = pack.reader
    return PackSummary(
        name=pack.name,
        objects=reader.count,
        stored_bytes=pack.entry.data + pack.entry.index,
        maintained=reader.maintained,
        dictionary_oid=reader.dictionary_oid,
        written=pack.entry.added,
    )


class S3StoredCopies(StoredCopies, CondemnedPacks):
    """Stored copies and condemned packs of an ``S3ObjectStore``."""

    def __init__(self, objects: S3ObjectStore) -> None:
        self.objects = objects
        self.bucket = objects.bucket
        self.layout = objects.layout
        self.lease = MaintenanceLease(objects.bucket, objects.layout)

    # -- locks ------------------------------------------------------------------------

    def maintenance_lock(self, wait: bool = True) -> contextlib.AbstractContextManager[bool]:
        """The bucket's maintenance lease (``lease.py``)."""
        return self.lease.held(wait)

    def writers_paused(self) -> contextlib.AbstractContextManager[None]:
        """Nothing: writers in other processes cannot be paused (see the module)."""
        return contextlib.nullcontext()

    # -- what is stored ---------------------------------------------------------------

    def _live(self) -> list[Pack]:
        packs = self.objects.packs
        return packs.packs(packs.refresh(), condemned=False)

    def packs(self) -> list[PackSummary]:
        """Every live pack that opens."""
        return [summary(pack) for pack in self._live()]

    def scan(self) -> Iterator[StoredCopy]:
        """Loose keys (LastModified, size), then every object of every live pack."""
        for item in self.bucket.list_keys(self.layout.objects, "scanning objects"):
            oid = self.layout.oid_from_key(item.key)
            if oid is not None:
                yield StoredCopy(oid, item.modified, item.size)
        for pack in self._live():
            reader, added = pack.reader, pack.entry.added
            for position, entry in enumerate(reader.index.entries()):
                try:
                    size = reader.stored_size_at(position)
                except CorruptObject:
                    size = 0
                yield StoredCopy(entry.oid.hex(), max(float(entry.time), added), size, pack.name)

    def read_canonical(self, oid: str) -> bytes:
        """From the first intact copy: packs (live, then condemned), then the loose key."""
        kind, body = self.objects.get(oid)
        return canonical_form(kind, body)

    def _stream(
        self, order: Sequence[str], skipped: set[str], progress: Progress | None
    ) -> Iterator[PackedObject]:
        times = self._times(order)
        for done, oid in enumerate(order, 1):
            if progress is not None and (done % 1000 == 0 or done == len(order)):
                progress("packing", done, len(order))
            try:
                data = self.read_canonical(oid)
            except JournalError:  # damaged everywhere (or gone): it stays where it is
                skipped.add(oid)
                continue
            yield PackedObject(oid, data, int(times.get(oid, 0)))

    def _times(self, oids: Sequence[str]) -> dict[str, float]:
        """Newest write time of each object over its live copies (0: unknown)."""
        wanted = set(oids)
        times: dict[str, float] = {}
        for copy in self.scan():
            if copy.oid in wanted:
                times[copy.oid] = max(times.get(copy.oid, 0.0), copy.written)
        return times

    def _write(
        self,
        order: Sequence[str],
        options: PackOptions,
        progress: Progress | None,
        condemned: bool,
    ) -> WrittenPack:
        skipped: set[str] = set()
        pack = self.objects.packs.publish(
            self._stream(order, skipped, progress),
            level=options.level,
            block_size=options.block_size,
            dictionary=options.dictionary,
            maintained=True,
            condemned=condemned,
        )
        if pack is None:
            return WrittenPack(None, skipped)
        lacking = [oid for oid in order if oid not in skipped and not pack.reader.contains(oid)]
        if lacking:
            raise CorruptObject(f"the new pack {pack.name} lacks {len(lacking)} objects")
        return WrittenPack(summary(pack), skipped)

    def write_pack(
        self, order: Sequence[str], options: PackOptions, progress: Progress | None = None
    ) -> WrittenPack:
        """Stream the objects into a new pack and list it as live."""
        return self._write(order, options, progress, condemned=False)

    # -- removing ---------------------------------------------------------------------

    def delete_loose(self, oids: Collection[str], older_than: float | None) -> set[str]:
        """Delete loose keys; with ``older_than``, each key's LastModified is checked
        first (a HEAD: not atomic with the delete, see ``condemned`` for what gc does
        instead)."""
        kept: set[str] = set()
        doomed: list[str] = []
        for oid in oids:
            if older_than is not None:
                found = self.bucket.stat(self.layout.object_key(oid), "dating an object")
                if found is None:
                    continue
                if found[1] >= older_than:
                    kept.add(oid)
                    continue
            doomed.append(oid)
        self.objects.delete_many(doomed)
        return kept

    def _change(self, change: Callable[[Manifest], Manifest | None]) -> Manifest:
        packs = self.objects.packs
        started = time.monotonic()
        manifest = packs.manifests.update(change)
        if manifest.etag is not None:
            packs.adopt(manifest, started)
        else:
            packs.refresh()
        return manifest

    def retire_packs(self, names: Collection[str], older_than: float | None) -> set[str]:
        """Take live packs out of the manifest (sparing those listed at or after
        ``older_than``), then delete their keys."""
        wanted = set(names)
        kept: set[str] = set()

        def change(current: Manifest) -> Manifest | None:
            kept.clear()
            remaining = []
            for entry in current.live:
                if entry.name in wanted and (older_than is None or entry.added < older_than):
                    continue
                if entry.name in wanted:
                    kept.add(entry.name)
                remaining.append(entry)
            if len(remaining) == len(current.live):
                return None
            return replace(current, live=tuple(remaining))

        self._change(change)
        self.delete_packs(wanted - kept)
        return kept

    def loosen(self, oids: Collection[str]) -> None:
        """Write loose copies (fresh keys: their time is now, never older)."""
        self.write_loose([PackedObject(oid, self.read_canonical(oid)) for oid in sorted(oids)])

    def write_loose(self, objects: Sequence[PackedObject]) -> None:
        """Write (or overwrite) loose keys holding the objects."""
        self.objects.replace(
            [NewObject(obj.oid, *parse_canonical(obj.oid, obj.data)) for obj in objects]
        )

    def set_aside(self, names: Collection[str]) -> None:
        """Condemn packs that cannot be read (they go once ripe, like any condemned)."""
        wanted = set(names)

        def change(current: Manifest) -> Manifest | None:
            moving = [entry for entry in current.live if entry.name in wanted]
            if not moving:
                return None
            return replace(
                current,
                live=tuple(entry for entry in current.live if entry.name not in wanted),
                condemned=(*current.condemned, *(replace(e, condemned=0.0) for e in moving)),
            )

        self._change(change)

    # -- checking ---------------------------------------------------------------------

    def verify(self) -> Iterator[CopyCheck]:
        """Every pack (live and condemned) walked block by block, then every loose key
        fetched and decoded; packs that do not open are reported."""
        packs = self.objects.packs
        manifest = packs.refresh()
        opened = packs.packs(manifest)
        for name, reason in sorted(packs.broken.items()):
            yield CopyCheck(name, None, None, reason)
        for pack in opened:
            try:
                yield from check_pack(pack.name, pack.reader)
            except PackGone:
                continue  # replaced while we read it: its objects are elsewhere now
        loose = list(self.objects.iter_loose())
        for start in range(0, len(loose), VERIFY_BATCH):
            batch = loose[start : start + VERIFY_BATCH]
            yield from self.bucket.map(self._verify_loose, batch)

    def _verify_loose(self, oid: str) -> CopyCheck:
        try:
            found = self.objects._get_loose(oid)
        except JournalError as exc:
            return CopyCheck("loose", oid, None, f"loose copy: {exc}")
        if found is None:
            return CopyCheck("loose", oid, Kind.BLOB, None)  # packed and removed meanwhile
        return CopyCheck("loose", oid, found[0])

    def remove_leftovers(self, older_than: float) -> int:
        """Pack keys no manifest lists and multipart uploads of packs, once older than
        the cutoff (debris of writers killed before they listed their pack)."""
        manifest = self.objects.packs.refresh()
        listed = manifest.names()
        stale: list[str] = []
        for item in self.bucket.list_keys(self.layout.packs, "listing packs"):
            name = item.key[len(self.layout.packs) :].rsplit(".", 1)[0]
            if name not in listed and item.modified < older_than:
                stale.append(item.key)
        self.bucket.delete_many(stale, "removing unlisted pack keys")
        return len(stale) + self.bucket.abort_uploads(self.layout.packs, older_than)

    # -- condemned packs --------------------------------------------------------------

    def condemned(self) -> list[CondemnedPack]:
        """Every condemned pack the manifest lists."""
        manifest = self.objects.packs.refresh()
        return [CondemnedPack(e.name, e.objects, e.condemned) for e in manifest.condemned]

    def condemned_oids(self, name: str) -> Iterator[str]:
        """The objects of a condemned pack (none if it does not open)."""
        packs = self.objects.packs
        for pack in packs.packs(packs.manifest()):
            if pack.name == name:
                yield from pack.reader.iter_oids()
                return

    def write_condemned(self, order: Sequence[str], progress: Progress | None) -> WrittenPack:
        """A pack of ``order`` listed as condemned, not stamped yet."""
        options = PackOptions(level=3, block_size=256 * 1024)
        return self._write(order, options, progress, condemned=True)

    def settle(self, retire: Collection[str], drop: Collection[str]) -> bool:
        """Take ``retire`` (live) and ``drop`` (condemned) out of the manifest at once."""
        retire, drop = set(retire), set(drop)
        refused = [False]

        def change(current: Manifest) -> Manifest | None:
            live_names = {entry.name for entry in current.live}
            if not retire <= live_names:
                refused[0] = True
                return None
            refused[0] = False
            if not retire and not drop:
                return None
            return replace(
                current,
                live=tuple(e for e in current.live if e.name not in retire),
                condemned=tuple(e for e in current.condemned if e.name not in drop),
            )

        self._change(change)
        return not refused[0]

    def delete_packs(self, names: Collection[str]) -> None:
        """Delete both keys of each pack."""
        keys = [
            key
            for name in sorted(names)
            for key in (self.layout.pack_index_key(name), self.layout.pack_data_key(name))
        ]
        self.bucket.delete_many(keys, "deleting packs")

    def stamp(self) -> float:
        """Stamp unstamped condemned packs with the server's time now."""
        stamped = [0.0]

        def change(current: Manifest) -> Manifest | None:
            stamped[0] = current.read_at
            if all(entry.condemned for entry in current.condemned):
                return None
            return replace(
                current,
                condemned=tuple(
                    entry if entry.condemned else replace(entry, condemned=current.read_at)
                    for entry in current.condemned
                ),
            )

        self._change(change)
        return stamped[0]
