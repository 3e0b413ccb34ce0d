"""The local object store: loose objects (one zstd frame per file) plus pack files.

Loose object ``<oid>`` lives at ``objects/<oid[:2]>/<oid[2:]>``, written to a hidden temp
file in the same directory and renamed into place, so no reader ever sees half an object
under its final name. A ``put_many`` of many objects (a batch commit) writes one pack
instead: one file and one fsync for the lot. Reads look in packs, then loose objects,
then rescan the pack directory (another process may have packed or written meanwhile).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

from ...errors import CorruptObject, JournalError, ObjectNotFound, StorageError
from ...objects import (
    Kind,
    ObjectCodec,
    canonical_form,
    is_oid,
    object_id,
    parse_canonical,
    require_oid,
)
from ...packs import BlockCache, PackedObject
from ...packs.merging import packs_to_merge
from ..base import ObjectStore
from .fsutil import atomic_replace, fsync_dir, storage_errors, temp_name, write_all
from .gclock import WritersLock
from .packs import LocalPack, open_regular, remove_pack_files, write_merged_pack, write_pack

PACK_THRESHOLD = 64
"""A put_many of at least this many new objects is written as a pack."""
FRESHEN_INTERVAL = 60.0


class LocalObjectStore(ObjectStore):
    """Objects in a directory: loose files and packs."""

    def __init__(self, root: Path, codec: ObjectCodec, durable: bool) -> None:
        self.codec = codec
        self.durable = durable
        self.loose_dir = root / "objects"
        self._loose_prefix = f"{self.loose_dir}{os.sep}"
        self.packs_dir = root / "packs"
        self.cache = BlockCache()
        self._packs: dict[str, LocalPack] = {}
        self._unreadable: dict[str, str] = {}
        self._last_found: LocalPack | None = None
        self._merging_failed = False
        self._packs_stamp: tuple[int, int] | None = None
        self._freshened: dict[str, float] = {}
        self.writers = WritersLock(root / "locks")
        self._lock = threading.Lock()
        self.refresh_packs()

    # -- packs ------------------------------------------------------------------------

    def refresh_packs(self) -> bool:
        """Re-read the pack directory if it changed; True if the set of packs changed."""
        with self._lock:
            try:
                stat = os.stat(self.packs_dir)
            except FileNotFoundError:
                return False
            stamp = (stat.st_mtime_ns, stat.st_ino)
            if stamp == self._packs_stamp:
                return False
            names = {
                entry[: -len(".idx")]
                for entry in os.listdir(self.packs_dir)
                if entry.endswith(".idx") and not entry.startswith(".")
            }
            changed = False
            for gone in set(self._packs) - names:
                # not closed: another thread may be reading it; the mapping goes with the
                # last reference (on POSIX a removed file stays readable while mapped)
                del self._packs[gone]
                changed = True
            if self._last_found is not None and self._last_found.name not in names:
                self._last_found = None
            for gone in set(self._unreadable) - names:
                del self._unreadable[gone]
            for name in sorted(names - set(self._packs)):
                index_path = self.packs_dir / f"{name}.idx"
                try:
                    self._packs[name] = LocalPack(
                        index_path, self.codec.max_object_size, self.cache
                    )
                    self._unreadable.pop(name, None)
                    changed = True
                except FileNotFoundError:
                    continue  # removed by a concurrent repack; the next refresh settles it
                except (CorruptObject, StorageError) as exc:
                    if os.path.lexists(index_path):  # not just retired by a concurrent gc
                        # set aside: every other pack keeps working; fsck reports this one
                        self._unreadable[name] = str(exc)
            self._packs_stamp = stamp
            return changed

    def unreadable_packs(self) -> dict[str, str]:
        """Packs set aside because they do not open (damaged index, missing data, not a
        regular file), with the reason: reads skip them, fsck reports them."""
        self.refresh_packs()
        with self._lock:
            return dict(self._unreadable)

    def packs(self) -> list[LocalPack]:
        """The packs currently known (refreshes first)."""
        self.refresh_packs()
        with self._lock:
            return list(self._packs.values())

    def _find_in_packs(self, oid: str) -> LocalPack | None:
        found = self._locate(oid)
        return None if found is None else found[0]

    def _locate(self, oid: str) -> tuple[LocalPack, int] | None:
        """The pack holding ``oid`` and its position there. The pack of the last hit is
        searched first: objects read together (a thread's chain) were packed together."""
        raw = bytes.fromhex(oid)
        last = self._last_found
        if last is not None:
            position = last.index.position(raw)
            if position >= 0:
                return last, position
        for pack in list(self._packs.values()):
            if pack is last:
                continue
            position = pack.index.position(raw)
            if position >= 0:
                self._last_found = pack
                return pack, position
        return None

    # -- loose objects ----------------------------------------------------------------

    def loose_path(self, oid: str) -> str:
        """Where the loose copy of ``oid`` lives (whether or not it exists)."""
        return f"{self._loose_prefix}{oid[:2]}/{oid[2:]}"

    def _write_loose(self, oid: str, frame: bytes, dirty: set[str]) -> None:
        path = self.loose_path(oid)
        if os.path.exists(path):
            return
        directory = self._loose_prefix + oid[:2]
        tmp = temp_name(directory, oid[2:10] + "-")
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o444)
        except FileNotFoundError:
            os.makedirs(directory, exist_ok=True)
            dirty.add(str(self.loose_dir))
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o444)
        try:
            write_all(fd, frame)
            if self.durable:
                os.fsync(fd)
        except BaseException:
            os.close(fd)
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
        os.close(fd)
        try:
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
        dirty.add(directory)

    def iter_loose(self) -> Iterator[tuple[str, Path]]:
        """``(oid, path)`` of every loose object file."""
        try:
            fanout = sorted(os.listdir(self.loose_dir))
        except FileNotFoundError:
            return
        for prefix in fanout:
            if len(prefix) != 2:
                continue
            directory = self.loose_dir / prefix
            try:
                names = os.listdir(directory)
            except (FileNotFoundError, NotADirectoryError):
                continue
            for name in names:
                oid = prefix + name
                if is_oid(oid):
                    yield oid, directory / name

    # -- protocol -----------------------------------------------------------------------

    def put_many(self, items: Sequence[tuple[Kind, bytes]]) -> list[str]:
        with storage_errors("writing objects"):
            oids = [object_id(kind, body) for kind, body in items]
            new = []
            for oid, (kind, body) in zip(oids, items, strict=True):
                pack = self._find_in_packs(oid)
                if pack is None:
                    new.append((oid, kind, body))
                else:
                    self._freshen_pack(pack)
            for _, _, body in new:
                self.codec.check_size(body)
            # A big batch becomes one pack; a loose copy it duplicates is harmless and goes
            # at the next pack or gc. Small batches skip (and freshen) objects stored loose.
            if len(new) < PACK_THRESHOLD:
                new = [item for item in new if not self._freshen_loose(item[0])]
            if len(new) >= PACK_THRESHOLD:
                self.packs_dir.mkdir(exist_ok=True)
                write_pack(
                    self.packs_dir,
                    (PackedObject(oid, canonical_form(kind, body)) for oid, kind, body in new),
                    self.durable,
                )
                self.refresh_packs()
                self.merge_batch_packs()
            else:
                dirty: set[str] = set()
                for oid, kind, body in new:
                    _, frame = self.codec.encode(kind, body)
                    self._write_loose(oid, frame, dirty)
                if self.durable:
                    for directory in sorted(dirty, key=len, reverse=True):
                        fsync_dir(directory)
        return oids

    def _freshen_loose(self, oid: str) -> bool:
        """Mark an existing loose object as just written (gc's grace period restarts for
        it, so a writer about to link it is safe); False if there is no loose copy."""
        try:
            os.utime(self.loose_path(oid))
        except FileNotFoundError:
            return False
        return True

    def _freshen_pack(self, pack: LocalPack) -> None:
        """Mark a pack as just written (at most once a minute): gc treats its objects as
        no older than the pack file's mtime."""
        now = time.monotonic()
        if now - self._freshened.get(pack.name, -FRESHEN_INTERVAL) >= FRESHEN_INTERVAL:
            self._freshened[pack.name] = now
            with contextlib.suppress(FileNotFoundError):
                os.utime(pack.pack_path)

    def object_time(self, oid: str) -> int | None:
        """When an object was last written or freshened (unix seconds), None if absent."""
        newest: int | None = None
        with contextlib.suppress(FileNotFoundError):
            newest = int(os.stat(self.loose_path(oid)).st_mtime)
        for pack in self.packs():
            position = pack.position(oid)
            if position >= 0:
                when = max(pack.time_at(position), pack.file_time())
                newest = when if newest is None else max(newest, when)
        return newest

    def canonical(self, oid: str) -> tuple[bytes, int]:
        """The verified canonical form of an object, from its first intact copy, and
        when that copy was last written."""
        return self._intact_copy(oid, None)

    def _intact_copy(self, oid: str, first_error: JournalError | None) -> tuple[bytes, int]:
        """The canonical form from any intact copy (every pack holding ``oid``, then the
        loose file) and that copy's write time. A damaged copy is skipped (fsck reports
        it); if none is intact the first error is raised, ObjectNotFound if none exists."""
        for pack in self.packs():
            position = pack.position(oid)
            if position >= 0:
                try:
                    data = pack.canonical_at(position)
                    parse_canonical(oid, data)
                    return data, max(pack.time_at(position), pack.file_time())
                except CorruptObject as exc:
                    first_error = first_error or exc
        try:
            frame, when = read_loose_file(self.loose_path(oid), self.codec.max_frame_size)
            kind, body = self.codec.decode(oid, frame)
            return canonical_form(kind, body), when
        except (FileNotFoundError, NotADirectoryError):
            pass
        except JournalError as exc:
            first_error = first_error or exc
        if first_error is not None:
            raise first_error
        raise ObjectNotFound(f"object {oid} not found")

    def write_guard(self) -> contextlib.AbstractContextManager[None]:
        """Shared hold on the writers' lock (a pruning gc waits for it, see gclock)."""
        return self.writers.shared()

    def loosen(self, oid: str) -> None:
        """Give a packed object a loose copy that keeps its recorded write time (gc
        does this before dropping a pack, so no object vanishes before its referrers)."""
        if os.path.exists(self.loose_path(oid)):
            return
        data, when = self.canonical(oid)
        kind, body = parse_canonical(oid, data)
        _, frame = self.codec.encode(kind, body)
        dirty: set[str] = set()
        self._write_loose(oid, frame, dirty)
        os.utime(self.loose_path(oid), (when, when))
        if self.durable:
            for directory in sorted(dirty, key=len, reverse=True):
                fsync_dir(directory)

    def replace_loose(self, oid: str, kind: Kind, body: bytes) -> None:
        """Write a loose copy of ``oid`` over the one there (repair of a damaged copy):
        a temp file renamed into place, synced when durable."""
        os.makedirs(self._loose_prefix + oid[:2], exist_ok=True)
        atomic_replace(self.loose_path(oid), self.codec.compress(kind, body), self.durable, 0o444)

    @contextlib.contextmanager
    def maintenance_lock(self, wait: bool = True) -> Iterator[bool]:
        """Exclusive across processes: one pack, gc or merge at a time (released if the
        holder is killed). Yields True once held; with ``wait=False`` it yields False at
        once if another holds it."""
        locks = self.loose_dir.parent / "locks"
        locks.mkdir(exist_ok=True)
        fd = os.open(locks / "maintenance", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX if wait else fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                yield False
                return
            try:
                yield True
            finally:
                fcntl.flock(fd, fcntl.LOCK_UN)  # explicit: a forked child may share the fd
        finally:
            os.close(fd)

    def merge_batch_packs(self) -> int:
        """Merge small batch packs as ``merging`` describes; return how many were merged.

        Skipped while pack or gc runs. A merge that fails (a damaged pack, a full disk)
        leaves every pack in place and is not tried again by this process; fsck reports
        the damage. The merged pack is complete, synced and checked before any old one
        goes, so a crash at any point leaves at worst duplicates.
        """
        if self._merging_failed or len(packs_to_merge(self.packs())) < 2:
            return 0
        with self.maintenance_lock(wait=False) as held:
            chosen = packs_to_merge(self.packs()) if held else []
            if len(chosen) < 2:
                return 0
            try:
                index = write_merged_pack(self.packs_dir, chosen, self.durable)
                self.refresh_packs()
                merged = next(p for p in self.packs() if p.index_path == index)
                wanted: set[bytes] = set()
                for old in chosen:
                    table = old.oid_table()
                    wanted.update(table[at : at + 32] for at in range(0, len(table), 32))
                if merged.oid_table() != b"".join(sorted(wanted)):
                    raise CorruptObject(f"merged pack {merged.name} does not hold what it merged")
            except (OSError, ValueError, CorruptObject, StopIteration):
                self._merging_failed = True
                return 0
            for old in chosen:
                if old.name != merged.name:
                    self.remove_pack(old)
            return len(chosen)

    def remove_pack(self, pack: LocalPack) -> None:
        """Delete a pack: its index first, so no reader finds an index without data."""
        remove_pack_files(self.packs_dir, pack.name, self.durable)
        self.refresh_packs()

    def usage(self) -> dict[str, int]:
        """Objects and bytes on disk: loose files, and packs with their indexes."""
        loose = loose_bytes = 0
        for _, path in self.iter_loose():
            with contextlib.suppress(FileNotFoundError):
                loose_bytes += os.stat(path).st_size
                loose += 1
        packs = self.packs()
        packed_bytes = 0
        for pack in packs:
            with contextlib.suppress(FileNotFoundError):
                packed_bytes += os.stat(pack.pack_path).st_size + os.stat(pack.index_path).st_size
        return {
            "loose_objects": loose,
            "loose_bytes": loose_bytes,
            "packs": len(packs),
            "packed_objects": sum(pack.count for pack in packs),
            "packed_bytes": packed_bytes,
        }

    def _read_loose(self, oid: str) -> tuple[Kind, bytes] | None:
        try:
            frame, _ = read_loose_file(self.loose_path(oid), self.codec.max_frame_size)
        except (FileNotFoundError, NotADirectoryError):
            return None
        return self.codec.decode(oid, frame)

    def get(self, oid: str) -> tuple[Kind, bytes]:
        require_oid(oid)
        with storage_errors("reading an object"):
            for attempt in range(2):
                located = self._locate(oid)
                if located is not None:
                    pack, position = located
                    try:
                        return parse_canonical(oid, pack.canonical_at(position))
                    except CorruptObject as exc:  # another copy may be intact
                        return parse_canonical(oid, self._intact_copy(oid, exc)[0])
                try:
                    found = self._read_loose(oid)
                except JournalError as exc:
                    return parse_canonical(oid, self._intact_copy(oid, exc)[0])
                if found is not None:
                    return found
                if attempt == 0 and not self.refresh_packs():
                    break
        raise ObjectNotFound(f"object {oid} not found")

    def has(self, oid: str) -> bool:
        if not is_oid(oid):
            return False
        if self._find_in_packs(oid) is not None or os.path.exists(self.loose_path(oid)):
            return True
        return self.refresh_packs() and self._find_in_packs(oid) is not None

    def iter_oids(self) -> Iterator[str]:
        seen: set[str] = set()
        for pack in self.packs():
            for oid in pack.iter_oids():
                if oid not in seen:
                    seen.add(oid)
                    yield oid
        for oid, _ in self.iter_loose():
            if oid not in seen:
                seen.add(oid)
                yield oid

    def oids_with_prefix(self, prefix: str) -> list[str]:
        """Sorted oids starting with ``prefix`` (at least two hex digits read one directory)."""
        if len(prefix) < 2:
            return super().oids_with_prefix(prefix)
        found: set[str] = set()
        for pack in self.packs():
            found.update(pack.oids_with_prefix(prefix))
        try:
            names = os.listdir(self.loose_dir / prefix[:2])
        except FileNotFoundError:
            names = []
        found.update(
            prefix[:2] + n
            for n in names
            if (prefix[:2] + n).startswith(prefix) and is_oid(prefix[:2] + n)
        )
        return sorted(found)

    def delete(self, oid: str) -> None:
        """Remove the loose copy of an object (packed copies go when gc rewrites packs)."""
        with storage_errors("deleting an object"), contextlib.suppress(FileNotFoundError):
            os.unlink(self.loose_path(oid))

    def close(self) -> None:
        """Unmap every pack."""
        with self._lock:
            for pack in self._packs.values():
                pack.close()
            self._packs.clear()
            self._packs_stamp = None


def read_loose_file(path: str, limit: int) -> tuple[bytes, int]:
    """A loose file's bytes and mtime (unix seconds). Reads at most ``limit + 1`` bytes,
    so the decoder refuses an oversized file without it being read whole, and sizes the
    read from the file instead of allocating ``limit`` bytes for every small object."""
    fd = open_regular(path, "object file")
    try:
        stat = os.fstat(fd)
        remaining = min(stat.st_size, limit + 1)
        chunks = []
        while remaining > 0:
            chunk = os.read(fd, remaining)
            if not chunk:
                break
            chunks.append(chunk)
            remaining -= len(chunk)
        return b"".join(chunks), int(stat.st_mtime)
    finally:
        os.close(fd)


def verify_loose_file(oid: str, path: Path, codec: ObjectCodec) -> None:
    """Decode and verify one loose file (fsck); raise CorruptObject if it is damaged."""
    frame, _ = read_loose_file(str(path), codec.max_frame_size)
    if not frame:
        raise CorruptObject("loose object file is empty", oid)
    codec.decode(oid, frame)
