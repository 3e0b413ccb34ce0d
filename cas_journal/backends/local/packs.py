"""Pack files of the local store: ``packs/pack-<name>.pack`` (data) and ``.idx`` (index).

The format is the backend-neutral one of ``cas_journal.packs``; this module keeps the
file-system side of it:

* ``LocalPack`` opens a pack's two files (regular files only: a FIFO, a device or a
  symlink in their place is refused without blocking) and maps them, so opening costs
  the same whatever the pack holds and a lookup reads a handful of pages.
* ``write_pack`` and ``copy_packs`` stream a new pack into a hidden temp file through a
  ``PackWriter``, then publish it: the data is renamed into place first, then the index
  beside it, both synced when durable, so no reader ever finds an index without its data
  and a crash leaves at worst an unindexed temp file (gc removes those).
* ``remove_pack_files`` retires a pack: its index first, for the same reason.

A pack's mtime is its *freshen* time: a writer that reuses an object of an existing pack
touches the pack file, and gc treats every object in it as no older than that.
"""

from __future__ import annotations

import contextlib
import errno
import mmap
import os
import stat
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

from ...errors import CorruptObject, StorageError
from ...packs import BlockCache, BufferSource, PackedObject, PackIndex, PackReader, PackWriter
from ...packs.index import MIN_INDEX_SIZE, PACK_MAGIC
from ...packs.writer import DEFAULT_BLOCK_SIZE, DEFAULT_LEVEL, WrittenPack
from .fsutil import fsync_dir, temp_name, write_all, write_new_file

__all__ = [
    "DEFAULT_BLOCK_SIZE",
    "LocalPack",
    "PackedObject",
    "copy_packs",
    "open_regular",
    "remove_pack_files",
    "write_merged_pack",
    "write_pack",
]


def open_regular(path: str | os.PathLike[str], what: str = "file") -> int:
    """Open an existing file for reading, refusing (StorageError) anything that is not
    a regular file (a FIFO, a device, a directory) or is a symlink, without ever
    blocking on it. FileNotFoundError passes through."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise StorageError(f"{what} {os.fspath(path)} is a symlink; refused") from exc
        if isinstance(exc, FileNotFoundError):
            raise
        raise StorageError(f"cannot open {what} {os.fspath(path)}: {exc.strerror}") from exc
    try:
        mode = os.fstat(fd).st_mode
    except BaseException:
        os.close(fd)
        raise
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise StorageError(f"{what} {os.fspath(path)} is not a regular file; refused")
    return fd


def _map(path: Path, what: str, minimum: int) -> mmap.mmap:
    fd = open_regular(path, what)
    try:
        size = os.fstat(fd).st_size
        if size < minimum:
            raise CorruptObject(f"{what} {path.name} is truncated ({size} bytes)")
        return mmap.mmap(fd, 0, access=mmap.ACCESS_READ)
    finally:
        os.close(fd)


class LocalPack(PackReader):
    """A pack in a directory, read through mmaps of its ``.idx`` and ``.pack`` files."""

    def __init__(
        self, index_path: Path, max_object_size: int, cache: BlockCache | None = None
    ) -> None:
        self.index_path = index_path
        self.pack_path = index_path.with_suffix(".pack")
        self._maps: list[mmap.mmap] = []
        name = index_path.stem
        try:
            index_map = _map(index_path, "pack index", MIN_INDEX_SIZE)
            self._maps.append(index_map)
            index = PackIndex(index_map, name)
            try:
                data_map = _map(self.pack_path, "pack", len(PACK_MAGIC))
            except FileNotFoundError as exc:
                raise CorruptObject(f"pack {name} is missing its data file") from exc
            self._maps.append(data_map)
            super().__init__(index, BufferSource(data_map), max_object_size, cache)
        except BaseException:
            self.close()
            raise

    def file_time(self) -> int:
        """The pack file's mtime: bumped when a writer reuses one of its objects."""
        try:
            return int(os.stat(self.pack_path).st_mtime)
        except FileNotFoundError:
            return 0

    def freshen(self) -> None:
        """Mark the pack as just written (gc keeps its objects for a grace period)."""
        with contextlib.suppress(FileNotFoundError):
            os.utime(self.pack_path)

    def file_bytes(self) -> int:
        """Bytes the pack's two files take (0 for files already gone)."""
        total = 0
        for path in (self.pack_path, self.index_path):
            with contextlib.suppress(FileNotFoundError):
                total += os.stat(path).st_size
        return total

    def close(self) -> None:
        """Unmap both files (readers must be done with it)."""
        for mapped in self._maps:
            mapped.close()
        self._maps = []


class _FileSink:
    """A PackSink writing to an open file descriptor."""

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def write(self, data: bytes) -> None:
        write_all(self.fd, data)


@contextlib.contextmanager
def _new_pack_file(directory: Path, durable: bool) -> Iterator[tuple[_FileSink, str]]:
    """A hidden temp pack file: yields ``(sink, path)``; closes it (synced first when
    durable), or removes it if the body raises."""
    tmp_pack = temp_name(directory, "pack-")
    fd = os.open(tmp_pack, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o444)
    try:
        yield _FileSink(fd), tmp_pack
        if durable:
            os.fsync(fd)
    except BaseException:
        os.close(fd)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp_pack)
        raise
    os.close(fd)


def _publish(
    directory: Path, tmp_pack: str, written: WrittenPack | None, durable: bool
) -> Path | None:
    """Rename a complete pack data file into place, then write its index beside it
    (or discard the temp file of a pack that holds nothing)."""
    if written is None:
        os.unlink(tmp_pack)
        return None
    pack_path = directory / f"{written.name}.pack"
    index_path = directory / f"{written.name}.idx"
    tmp_index = temp_name(directory, "idx-")
    try:
        write_new_file(tmp_index, written.index, durable)
        os.replace(tmp_pack, pack_path)
        if durable:
            fsync_dir(directory)
        os.replace(tmp_index, index_path)
        if durable:
            fsync_dir(directory)
    except BaseException:
        for leftover in (tmp_pack, tmp_index):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(leftover)
        raise
    return index_path


def write_pack(
    directory: Path,
    objects: Iterable[PackedObject],
    durable: bool,
    block_size: int = DEFAULT_BLOCK_SIZE,
    level: int = DEFAULT_LEVEL,
    dictionary: PackedObject | None = None,
    maintained: bool = False,
) -> Path | None:
    """Write objects (in the given order, duplicates dropped) as one pack in
    ``directory``; return its index path (None when there is nothing to write)."""
    with _new_pack_file(directory, durable) as (sink, tmp_pack):
        writer = PackWriter(
            sink, level=level, block_size=block_size, dictionary=dictionary, maintained=maintained
        )
        writer.add_all(objects)
        written = writer.finish()
    return _publish(directory, tmp_pack, written, durable)


def copy_packs(
    directory: Path, packs: Iterable[PackReader], durable: bool, freshened: Sequence[int] = ()
) -> Path | None:
    """Write one pack holding the blocks of ``packs`` copied verbatim, in the given order;
    return its index path (None if they hold nothing).

    Nothing is recompressed, so merging costs a copy of the compressed bytes plus a new
    index; every copied object is still checked against its id first (CorruptObject),
    so a merge never carries damage along unnoticed. An object held by two of the packs
    keeps its first copy. Each object keeps the write time gc sees for it: its own, or
    ``freshened[i]`` (pack ``i``'s freshen time) if newer. Packs that use a dictionary
    are refused (ValueError): batch packs never do.
    """
    with _new_pack_file(directory, durable) as (sink, tmp_pack):
        writer = PackWriter(sink)
        for number, pack in enumerate(packs):
            when = freshened[number] if number < len(freshened) else 0
            writer.copy_blocks(pack, when)
        written = writer.finish()
    return _publish(directory, tmp_pack, written, durable)


def write_merged_pack(directory: Path, packs: Sequence[LocalPack], durable: bool) -> Path | None:
    """Write the blocks of ``packs`` as one new batch pack, oldest pack first (so a
    thread's chain stays in order); return its index path."""
    ordered = sorted(packs, key=lambda p: (p.file_time(), p.name))
    return copy_packs(directory, ordered, durable, [p.file_time() for p in ordered])


def remove_pack_files(directory: Path, name: str, durable: bool) -> None:
    """Delete a pack: its index first, so no reader finds an index without data."""
    for suffix in (".idx", ".pack"):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(directory / f"{name}{suffix}")
    if durable:
        fsync_dir(directory)
