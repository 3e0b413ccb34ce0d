"""The local store's stored copies: database rows and pack files (see ``copies``).

A loose copy is a row of the store database's ``objects`` table; its write time is the
row's ``written`` (microseconds; a commit or ``freshen`` raises it). Packed copies live
in ``packs/``; a packed copy's write time is the newest of its time in the index and the
pack file's mtime (freshening touches the pack), rounded up to the end of its second
because the index keeps whole seconds. Every primitive turns failures into a
JournalError and leaves the store valid at every instant: a new pack is complete and
synced before anything it replaces goes, and deletions are committed (synced when
durable) before they are reported done.

gc and commits (the rule of ``objects``): ``begin_collection`` reads the moment gc
starts; ``delete_loose`` then deletes, in one transaction, rows older than both that
moment and the given cutoff, keeping every given row that a row written since gc
started references (directly or through other given rows): ``atomic_delete`` is True.
``retire_packs`` removes pack files inside a transaction too (holding the database's
write lock), and keeps a pack whose garbage a row written since gc started still
reaches. So commits, which write or freshen in their own transaction everything they
link, take no lock against gc.
"""

from __future__ import annotations

import contextlib
import math
import os
import sqlite3
import stat
from collections.abc import Collection, Iterator, Sequence

from ...errors import CorruptObject, JournalError, ObjectNotFound
from ...objects import parse_canonical
from ...packs import PackedObject
from ..base import NewObject
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
from .fsutil import fsync_dir, storage_errors
from .objects import LocalObjectStore
from .packs import LocalPack, write_pack

QUARANTINE = "quarantine"
"""Subdirectory of ``packs/`` where ``set_aside`` moves unreadable packs."""
END_OF_SECOND = 1 - 1e-6
"""Added to whole-second times: a copy stamped second ``s`` may be as new as ``s + 1``."""


def summary(pack: LocalPack) -> PackSummary:
    """A pack as the protocol describes it."""
    return PackSummary(
        name=pack.name,
        objects=pack.count,
        stored_bytes=pack.file_bytes(),
        maintained=pack.maintained,
        dictionary_oid=pack.dictionary_oid,
        written=pack.file_time() + END_OF_SECOND,
    )


def _micros(seconds: float) -> int:
    return math.ceil(seconds * 1e6)


class LocalStoredCopies(StoredCopies):
    """Stored copies of a ``LocalObjectStore``: rows and packs."""

    atomic_delete = True

    def __init__(self, objects: LocalObjectStore) -> None:
        self.objects = objects
        self._since: int | None = None

    def begin_collection(self) -> None:
        """Make room to work on a full disk (spend the store's reserve), then note when
        gc starts (read under the database's write lock)."""
        self.objects.spend_reserve()
        self._since = self.objects.gc_start()

    @contextlib.contextmanager
    def maintenance_lock(self, wait: bool = True) -> Iterator[bool]:
        """The store's maintenance lock (an flock on ``FORMAT``)."""
        with self.objects.maintenance_lock(wait) as held:
            yield held

    @contextlib.contextmanager
    def writers_paused(self) -> Iterator[None]:
        """The writers' lock (an flock on the store directory), held exclusively."""
        with self.objects.writers.exclusive():
            yield

    def packs(self) -> list[PackSummary]:
        """Every pack that opens."""
        with storage_errors("listing packs"):
            return [summary(pack) for pack in self.objects.packs()]

    def scan(self) -> Iterator[StoredCopy]:
        """Rows (``written``, frame size), then every object of every pack."""
        objects = self.objects
        for oid, micros, size in objects.iter_rows():
            yield StoredCopy(oid, micros / 1e6, size)
        with storage_errors("scanning objects"):
            for pack in objects.packs():
                freshened = pack.file_time()
                for position, entry in enumerate(pack.index.entries()):
                    try:
                        size = pack.stored_size_at(position)
                    except CorruptObject:
                        size = 0
                    written = max(entry.time, freshened) + END_OF_SECOND
                    yield StoredCopy(entry.oid.hex(), written, size, pack.name)

    def read_canonical(self, oid: str) -> bytes:
        """From the first intact copy (packs, then the row)."""
        with storage_errors("reading an object"):
            return self.objects.canonical(oid)[0]

    def _stream(
        self, order: Sequence[str], skipped: set[str], progress: Progress | None
    ) -> Iterator[PackedObject]:
        for done, oid in enumerate(order, 1):
            if progress is not None and (done % 1000 == 0 or done == len(order)):
                progress("packing", done, len(order))
            try:
                data, when = self.objects.canonical(oid)
            except JournalError:  # damaged everywhere (or gone): it stays where it is
                skipped.add(oid)
                continue
            yield PackedObject(oid, data, when)

    def write_pack(
        self, order: Sequence[str], options: PackOptions, progress: Progress | None = None
    ) -> WrittenPack:
        """Stream the objects into a temp file, publish it, and check it holds them."""
        objects = self.objects
        skipped: set[str] = set()
        with storage_errors("writing a pack"):
            objects.packs_dir.mkdir(exist_ok=True)
            index = write_pack(
                objects.packs_dir,
                self._stream(order, skipped, progress),
                objects.durable,
                options.block_size,
                options.level,
                options.dictionary,
                maintained=True,
            )
            if index is None:
                return WrittenPack(None, skipped)
            objects.refresh_packs()
            new = next((p for p in objects.packs() if p.index_path == index), None)
            if new is None:
                raise CorruptObject(f"the new pack {index.stem} does not open")
            missing = [oid for oid in order if oid not in skipped and new.position(oid) < 0]
            if missing:
                raise CorruptObject(f"the new pack {new.name} lacks {len(missing)} objects")
            return WrittenPack(summary(new), skipped)

    def delete_loose(self, oids: Collection[str], older_than: float | None) -> set[str]:
        """Delete rows in one transaction. With a cutoff, a row written at or after it,
        or after gc began, is kept, and so is every given row that a row written since
        gc began (or a kept one) references. Without one (pack: the objects are packed
        now), every given row goes."""
        objects = self.objects
        if older_than is None:
            objects.remove_rows(oids)
            kept: set[str] = set()
        else:
            since = self._since if self._since is not None else objects.gc_start()
            kept = objects.sweep_rows(oids, min(_micros(older_than), since), since)
        objects.release_space()
        return kept

    def retire_packs(self, names: Collection[str], older_than: float | None) -> set[str]:
        """Remove pack files (index first) while holding the database's write lock, so no
        commit runs meanwhile; spare packs touched since ``older_than`` and packs holding
        the only copy of an object that a row written since gc began still reaches."""
        objects = self.objects
        wanted = set(names)
        packs = [pack for pack in objects.packs() if pack.name in wanted]
        kept: set[str] = set()
        since = self._since

        def work(conn: sqlite3.Connection) -> None:
            needed = (
                objects.packed_only_reached_from_young_rows(conn, since, packs)
                if since is not None and older_than is not None
                else set()
            )
            for pack in packs:
                with contextlib.suppress(FileNotFoundError):
                    if older_than is not None and os.stat(pack.pack_path).st_mtime >= older_than:
                        kept.add(pack.name)
                        continue
                if pack.name in needed:
                    kept.add(pack.name)
                    continue
                objects.remove_pack(pack)

        with storage_errors("removing packs"):
            objects.db.write(work, "removing packs", CorruptObject)
        return kept

    def loosen(self, oids: Collection[str]) -> None:
        """Rows that keep the objects' write times (one transaction)."""
        self.objects.loosen_many(sorted(oids))

    def write_loose(self, objects: Sequence[PackedObject]) -> None:
        """Fresh rows for objects given as canonical forms, replacing damaged ones."""
        fresh = []
        for obj in objects:
            kind, body = parse_canonical(obj.oid, obj.data)
            fresh.append(NewObject(obj.oid, kind, body))
        self.objects.replace_rows(fresh)

    def set_aside(self, names: Collection[str]) -> None:
        """Move the packs' files into ``packs/quarantine/``."""
        objects = self.objects
        aside = objects.packs_dir / QUARANTINE
        with storage_errors("setting packs aside"):
            aside.mkdir(exist_ok=True)
            for name in names:
                for suffix in (".idx", ".pack"):
                    with contextlib.suppress(FileNotFoundError):
                        os.replace(objects.packs_dir / f"{name}{suffix}", aside / f"{name}{suffix}")
            if objects.durable:
                fsync_dir(aside)
                fsync_dir(objects.packs_dir)
            objects.refresh_packs()

    def verify(self) -> Iterator[CopyCheck]:
        """Walk every pack block by block, then decode every row."""
        objects = self.objects
        with storage_errors("verifying objects"):
            for name, reason in sorted(objects.unreadable_packs().items()):
                yield CopyCheck(name, None, None, reason)
            for pack in objects.packs():
                yield from check_pack(pack.name, pack)
        for oid, _ in objects.iter_loose():
            try:
                kind = objects.verify_row(oid)
            except ObjectNotFound:
                continue  # packed and removed meanwhile
            except JournalError as exc:
                yield CopyCheck("loose", oid, None, f"loose copy: {exc}")
                continue
            yield CopyCheck("loose", oid, kind)

    def remove_leftovers(self, older_than: float) -> int:
        """Hidden ``.tmp-*`` files left by killed writers (in the store directory and in
        ``packs/``), once older than the cutoff."""
        removed = 0
        with storage_errors("removing temp files"):
            for directory in (self.objects.root, self.objects.packs_dir):
                try:
                    names = os.listdir(directory)
                except FileNotFoundError:
                    continue
                for name in names:
                    if not name.startswith(".tmp-"):
                        continue
                    path = os.path.join(directory, name)
                    with contextlib.suppress(FileNotFoundError):
                        info = os.lstat(path)
                        if stat.S_ISREG(info.st_mode) and info.st_mtime < older_than:
                            os.unlink(path)
                            removed += 1
        return removed
