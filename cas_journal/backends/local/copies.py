"""The local store's stored copies: loose object files and pack files (see ``copies``).

Loose copies are the files ``objects/ab/cdef...``; their write time is the file's mtime
(freshening touches it). Packed copies live in ``packs/``; a packed copy's write time is
the newest of its time in the index and the pack file's mtime (freshening touches the
pack), rounded up to the end of its second because the index keeps whole seconds.
Every primitive turns file-system failures into a StorageError and leaves the store
valid at every instant: a new pack is complete and synced before anything it replaces
goes, and deletions are synced before they are reported done.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Collection, Iterator, Sequence
from pathlib import Path

from ...errors import CorruptObject, JournalError
from ...objects import parse_canonical
from ...packs import PackedObject
from ..copies import (
    CopyCheck,
    PackOptions,
    PackSummary,
    Progress,
    StoredCopies,
    StoredCopy,
    WrittenPack,
)
from .fsutil import fsync_dir, storage_errors
from .objects import LocalObjectStore, read_loose_file
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


class LocalStoredCopies(StoredCopies):
    """Stored copies of a ``LocalObjectStore``."""

    def __init__(self, objects: LocalObjectStore) -> None:
        self.objects = objects

    @contextlib.contextmanager
    def maintenance_lock(self, wait: bool = True) -> Iterator[bool]:
        """The store's ``locks/maintenance`` flock."""
        with contextlib.ExitStack() as stack:
            with storage_errors("taking the maintenance lock"):
                held = stack.enter_context(self.objects.maintenance_lock(wait))
            yield held

    @contextlib.contextmanager
    def writers_paused(self) -> Iterator[None]:
        """The writers' lock, held exclusively."""
        with contextlib.ExitStack() as stack:
            with storage_errors("pausing writers"):
                stack.enter_context(self.objects.writers.exclusive())
            yield

    def packs(self) -> list[PackSummary]:
        """Every pack that opens."""
        with storage_errors("listing packs"):
            return [summary(pack) for pack in self.objects.packs()]

    def scan(self) -> Iterator[StoredCopy]:
        """Loose files (mtime, size), then every object of every pack."""
        objects = self.objects
        with storage_errors("scanning objects"):
            for oid, path in objects.iter_loose():
                with contextlib.suppress(FileNotFoundError):
                    stat = os.stat(path)
                    yield StoredCopy(oid, stat.st_mtime, stat.st_size)
            for pack in objects.packs():
                freshened = pack.file_time()
                index = pack.index
                for position, entry in enumerate(index.entries()):
                    try:
                        size = pack.stored_size_at(position)
                    except CorruptObject:
                        size = 0
                    written = max(entry.time, freshened) + END_OF_SECOND
                    yield StoredCopy(entry.oid.hex(), written, size, pack.name)

    def read_canonical(self, oid: str) -> bytes:
        """From the first intact copy (packs, then the loose file)."""
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
        """Unlink loose files (checking each file's mtime first), then sync their
        directories."""
        kept: set[str] = set()
        touched: set[str] = set()
        with storage_errors("deleting objects"):
            for oid in oids:
                path = self.objects.loose_path(oid)
                try:
                    if older_than is not None and os.stat(path).st_mtime >= older_than:
                        kept.add(oid)
                        continue
                    os.unlink(path)
                except (FileNotFoundError, NotADirectoryError):
                    continue
                touched.add(os.path.dirname(path))
            if self.objects.durable:
                for directory in touched:
                    fsync_dir(directory)
        return kept

    def retire_packs(self, names: Collection[str], older_than: float | None) -> set[str]:
        """Remove pack files (index first), sparing packs touched since ``older_than``."""
        kept: set[str] = set()
        wanted = set(names)
        with storage_errors("removing packs"):
            for pack in self.objects.packs():
                if pack.name not in wanted:
                    continue
                with contextlib.suppress(FileNotFoundError):
                    if older_than is not None and os.stat(pack.pack_path).st_mtime >= older_than:
                        kept.add(pack.name)
                        continue
                self.objects.remove_pack(pack)
        return kept

    def loosen(self, oids: Collection[str]) -> None:
        """Write loose copies that keep the objects' write times."""
        with storage_errors("loosening objects"):
            for oid in sorted(oids):
                self.objects.loosen(oid)

    def write_loose(self, objects: Sequence[PackedObject]) -> None:
        """Write each object to a temp file and rename it over its loose path."""
        with storage_errors("writing objects"):
            for obj in objects:
                kind, body = parse_canonical(obj.oid, obj.data)
                self.objects.replace_loose(obj.oid, kind, body)

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
        """Walk every pack block by block, then decode every loose file."""
        objects = self.objects
        with storage_errors("verifying objects"):
            for name, reason in sorted(objects.unreadable_packs().items()):
                yield CopyCheck(name, None, None, reason)
            for pack in objects.packs():
                problem = None
                if not pack.verify_trailer():
                    problem = "pack index checksum does not match its content"
                else:
                    unsorted = pack.index.unsorted_at()
                    if unsorted >= 0:
                        problem = f"index is not sorted at position {unsorted}"
                yield CopyCheck(pack.name, None, None, problem)
                for walked in pack.walk():
                    if walked.data is None:
                        yield CopyCheck(pack.name, walked.oid, None, str(walked.error))
                    else:
                        kind, _ = parse_canonical(walked.oid, walked.data)
                        yield CopyCheck(pack.name, walked.oid, kind)
            for oid, path in objects.iter_loose():
                try:
                    frame, _ = read_loose_file(str(path), objects.codec.max_frame_size)
                    if not frame:
                        raise CorruptObject("loose object file is empty", oid)
                    kind, _ = objects.codec.decode(oid, frame)
                except FileNotFoundError:
                    continue  # packed and removed meanwhile
                except JournalError as exc:
                    yield CopyCheck("loose", oid, None, f"loose copy: {exc}")
                    continue
                yield CopyCheck("loose", oid, kind)

    def remove_leftovers(self, older_than: float) -> int:
        """Hidden ``.tmp-*`` files left by killed writers, once older than the cutoff."""
        root = Path(self.objects.loose_dir).parent
        removed = 0
        with storage_errors("removing temp files"):
            for top in ("objects", "packs", "refs", "logs"):
                for directory, _dirs, files in os.walk(root / top):
                    for name in files:
                        if not name.startswith(".tmp-"):
                            continue
                        path = os.path.join(directory, name)
                        with contextlib.suppress(FileNotFoundError):
                            if os.lstat(path).st_mtime < older_than:
                                os.unlink(path)
                                removed += 1
        return removed
