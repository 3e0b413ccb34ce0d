"""Pack files: many objects in one data file, found through a sorted, memory-mapped index.

Data file ``pack-<name>.pack``: an 8-byte magic, then *blocks*. A block is one zstd frame
whose content is the canonical forms (header + body) of one or more objects, back to
back. Blocks may be compressed with a zstd dictionary; the dictionary is itself a blob
object stored in the same pack, in a block compressed without it.

Index file ``pack-<name>.idx`` (all integers little-endian)::

    magic "CJIDX\\0\\0\\1" | u64 objects N | u64 blocks B | u64 pack size | 32-byte dict oid
    | u64 flags (1: written by maintenance, ordered and fully compressed)
    fanout: 256 x u32, cumulative count of oids by first byte
    oids: N x 32 bytes, sorted
    locations: N x (u32 block, u32 offset in block, u32 length)
    times: N x u32, when each object was last written (unix seconds; gc's grace period)
    blocks: B x (u64 offset in pack, u32 compressed length, u32 raw length, u32 flags)
    trailer: BLAKE3 of everything above (32 bytes); the pack's name is its hex

A reader maps the index and binary-searches the fanout range, so opening costs the same
whatever the pack holds and a lookup reads a handful of pages. Every bound read from the
index is checked against the file sizes before use; anything inconsistent is a
CorruptObject, never an out-of-range read. A pack is published by renaming its data file
and then its index into place, both already synced, so a reader never sees a partial pack.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import struct
import threading
import time
from collections import OrderedDict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import blake3
import zstandard

from ...errors import CorruptObject
from ...objects import Kind, bounded_decompress, parse_canonical
from ...objects.codec import MAX_HEADER_LENGTH
from .fsutil import fsync_dir, temp_name, write_all, write_new_file

PACK_MAGIC = b"CJPACK\x00\x01"
INDEX_MAGIC = b"CJIDX\x00\x00\x01"
_HEADER = struct.Struct("<8sQQQ32sQ")
_FANOUT = struct.Struct("<256I")
_LOCATION = struct.Struct("<III")
_TIME = struct.Struct("<I")
_BLOCK = struct.Struct("<QIII")
TRAILER_SIZE = 32
FLAG_DICTIONARY = 1
PACK_FLAG_MAINTAINED = 1
ZERO_OID = bytes(32)

DEFAULT_BLOCK_SIZE = 64 * 1024


@dataclass(frozen=True)
class PackedObject:
    """An object ready to be packed: its oid, canonical form (header + body) and age."""

    oid: str
    data: bytes
    time: int = 0
    """Unix seconds when the object was last written (0: now)."""


class BlockCache:
    """A small LRU of decompressed blocks, shared by the packs of one store."""

    def __init__(self, max_bytes: int = 64 * 1024 * 1024) -> None:
        self.max_bytes = max_bytes
        self._blocks: OrderedDict[tuple[str, int], bytes] = OrderedDict()
        self._size = 0
        self._lock = threading.Lock()

    def get(self, key: tuple[str, int]) -> bytes | None:
        with self._lock:
            block = self._blocks.get(key)
            if block is not None:
                self._blocks.move_to_end(key)
            return block

    def put(self, key: tuple[str, int], block: bytes) -> None:
        if len(block) > self.max_bytes // 4:
            return
        with self._lock:
            if key in self._blocks:
                return
            self._blocks[key] = block
            self._size += len(block)
            while self._size > self.max_bytes:
                _, old = self._blocks.popitem(last=False)
                self._size -= len(old)


class PackReader:
    """Read-only access to one pack through its index."""

    def __init__(
        self, index_path: Path, max_object_size: int, cache: BlockCache | None = None
    ) -> None:
        self.index_path = index_path
        self.pack_path = index_path.with_suffix(".pack")
        self.name = index_path.stem
        self.max_block_size = max(max_object_size + MAX_HEADER_LENGTH, 16 * 1024 * 1024)
        self.cache = cache or BlockCache()
        self._local = threading.local()
        self._dictionary: zstandard.ZstdCompressionDict | None = None
        with open(index_path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if size < _HEADER.size + _FANOUT.size + TRAILER_SIZE:
                raise CorruptObject(f"pack index {index_path.name} is truncated")
            self._index = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        magic, count, blocks, pack_size, dict_oid, flags = _HEADER.unpack_from(self._index, 0)
        if magic != INDEX_MAGIC:
            raise CorruptObject(f"pack index {index_path.name} has a bad magic number")
        expected = (
            _HEADER.size
            + _FANOUT.size
            + count * (32 + _LOCATION.size + _TIME.size)
            + blocks * _BLOCK.size
            + TRAILER_SIZE
        )
        if expected != size:
            raise CorruptObject(
                f"pack index {index_path.name} is {size} bytes, its header implies {expected}"
            )
        self.count: int = count
        self.maintained = bool(flags & PACK_FLAG_MAINTAINED)
        self.block_count: int = blocks
        self.dictionary_oid: str | None = None if dict_oid == ZERO_OID else dict_oid.hex()
        self._fanout: tuple[int, ...] = _FANOUT.unpack_from(self._index, _HEADER.size)
        if self._fanout[-1] != count or any(
            a > b for a, b in zip(self._fanout, self._fanout[1:], strict=False)
        ):
            raise CorruptObject(f"pack index {index_path.name} has an inconsistent fanout")
        self._oids_at = _HEADER.size + _FANOUT.size
        self._locations_at = self._oids_at + count * 32
        self._times_at = self._locations_at + count * _LOCATION.size
        self._blocks_at = self._times_at + count * _TIME.size
        try:
            with open(self.pack_path, "rb") as f:
                actual = os.fstat(f.fileno()).st_size
                if actual != pack_size or actual < len(PACK_MAGIC):
                    raise CorruptObject(
                        f"pack {self.pack_path.name} is {actual} bytes, its index says {pack_size}"
                    )
                self._pack = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        except FileNotFoundError as exc:
            raise CorruptObject(f"pack {self.pack_path.name} is missing its data file") from exc
        if self._pack[: len(PACK_MAGIC)] != PACK_MAGIC:
            raise CorruptObject(f"pack {self.pack_path.name} has a bad magic number")
        self.pack_size = pack_size

    def close(self) -> None:
        """Unmap both files."""
        self._index.close()
        self._pack.close()

    # -- lookup ---------------------------------------------------------------------

    def _position(self, raw_oid: bytes) -> int:
        first = raw_oid[0]
        lo: int = self._fanout[first - 1] if first else 0
        hi: int = self._fanout[first]
        index, base = self._index, self._oids_at
        while lo < hi:
            mid = (lo + hi) // 2
            at = base + mid * 32
            candidate = index[at : at + 32]
            if candidate < raw_oid:
                lo = mid + 1
            elif candidate > raw_oid:
                hi = mid
            else:
                return mid
        return -1

    def contains(self, oid: str) -> bool:
        """True if this pack holds the object."""
        return self._position(bytes.fromhex(oid)) >= 0

    def oid_at(self, position: int) -> str:
        """The oid stored at a sorted position."""
        at = self._oids_at + position * 32
        return self._index[at : at + 32].hex()

    def oid_table(self) -> bytes:
        """The sorted oids as stored: ``count`` raw 32-byte digests back to back."""
        return self._index[self._oids_at : self._locations_at]

    def entries(self) -> list[tuple[bytes, int, int, int, int]]:
        """``(raw oid, block, offset, length, time)`` of every object, in sorted order."""
        table = self.oid_table()
        locations = _LOCATION.iter_unpack(self._index[self._locations_at : self._times_at])
        times = _TIME.iter_unpack(self._index[self._times_at : self._blocks_at])
        return [
            (table[at * 32 : at * 32 + 32], block, offset, length, when)
            for at, ((block, offset, length), (when,)) in enumerate(
                zip(locations, times, strict=True)
            )
        ]

    def iter_oids(self) -> Iterator[str]:
        """Every oid in this pack, sorted."""
        for position in range(self.count):
            yield self.oid_at(position)

    def oids_with_prefix(self, prefix: str) -> list[str]:
        """Oids in this pack starting with a hex prefix of at least two digits."""
        first = int(prefix[:2], 16)
        lo = self._fanout[first - 1] if first else 0
        hi = self._fanout[first]
        return [oid for oid in map(self.oid_at, range(lo, hi)) if oid.startswith(prefix)]

    def position(self, oid: str) -> int:
        """The sorted position of ``oid`` in this pack, or -1."""
        return self._position(bytes.fromhex(oid))

    def file_time(self) -> int:
        """The pack file's mtime: bumped when a writer reuses one of its objects."""
        try:
            return int(os.stat(self.pack_path).st_mtime)
        except FileNotFoundError:
            return 0

    def time_at(self, position: int) -> int:
        """When the object at a sorted position was last written (unix seconds)."""
        value: int = _TIME.unpack_from(self._index, self._times_at + position * _TIME.size)[0]
        return value

    def stored_size_at(self, position: int) -> int:
        """The object's share of its compressed block (an estimate of its stored bytes)."""
        block, _, length = self.location(position)
        _, clen, rlen, _ = self.block_entry(block)
        return clen * length // rlen if rlen else 0

    def location(self, position: int) -> tuple[int, int, int]:
        """``(block, offset, length)`` of the object at a sorted position."""
        return _LOCATION.unpack_from(self._index, self._locations_at + position * _LOCATION.size)

    def block_entry(self, block: int) -> tuple[int, int, int, int]:
        """``(offset, compressed length, raw length, flags)`` of a block, bounds-checked."""
        if block >= self.block_count:
            raise CorruptObject(
                f"pack {self.name}: location names block {block} of {self.block_count}"
            )
        entry = _BLOCK.unpack_from(self._index, self._blocks_at + block * _BLOCK.size)
        offset, clen, rlen, _flags = entry
        if offset < len(PACK_MAGIC) or offset + clen > self.pack_size or rlen > self.max_block_size:
            raise CorruptObject(f"pack {self.name}: block {block} points outside its pack file")
        return entry

    # -- reading --------------------------------------------------------------------

    def _decompressor(self, with_dictionary: bool) -> zstandard.ZstdDecompressor:
        key = "dict" if with_dictionary else "plain"
        cached = getattr(self._local, key, None)
        if cached is None:
            if with_dictionary:
                cached = zstandard.ZstdDecompressor(dict_data=self._load_dictionary())
            else:
                cached = zstandard.ZstdDecompressor()
            setattr(self._local, key, cached)
        return cached

    def _load_dictionary(self) -> zstandard.ZstdCompressionDict:
        if self._dictionary is None:
            if self.dictionary_oid is None:
                raise CorruptObject(f"pack {self.name}: a block needs a dictionary the pack lacks")
            kind, body = self.read(self.dictionary_oid, allow_dictionary=False)
            if kind is not Kind.BLOB:
                raise CorruptObject("pack dictionary is not a blob", self.dictionary_oid)
            self._dictionary = zstandard.ZstdCompressionDict(body)
        return self._dictionary

    def raw_block(self, offset: int, length: int) -> bytes:
        """Compressed bytes of a block, as ``block_entry`` locates them."""
        return self._pack[offset : offset + length]

    def block(self, block: int, allow_dictionary: bool = True) -> bytes:
        """The decompressed content of one block (cached)."""
        key = (self.name, block)
        cached = self.cache.get(key)
        if cached is not None:
            return cached
        offset, clen, rlen, flags = self.block_entry(block)
        uses_dictionary = bool(flags & FLAG_DICTIONARY)
        if uses_dictionary and not allow_dictionary:
            raise CorruptObject(
                f"pack {self.name}: dictionary block is itself dictionary-compressed"
            )
        frame = self._pack[offset : offset + clen]
        data = bounded_decompress(frame, rlen, None, self._decompressor(uses_dictionary))
        if len(data) != rlen:
            raise CorruptObject(f"pack {self.name}: block {block} is not the size its index says")
        self.cache.put(key, data)
        return data

    def read_canonical(self, oid: str, allow_dictionary: bool = True) -> bytes | None:
        """The canonical form of ``oid`` (unverified), or None if this pack lacks it."""
        position = self._position(bytes.fromhex(oid))
        if position < 0:
            return None
        return self.canonical_at(position, oid, allow_dictionary)

    def canonical_at(
        self, position: int, oid: str | None = None, allow_dictionary: bool = True
    ) -> bytes:
        """The canonical form (unverified) of the object at a sorted position."""
        block, offset, length = self.location(position)
        data = self.block(block, allow_dictionary)
        if offset + length > len(data):
            raise CorruptObject(f"pack {self.name}: object extends past its block", oid)
        return data[offset : offset + length]

    def read(self, oid: str, allow_dictionary: bool = True) -> tuple[Kind, bytes]:
        """Read and verify one object; KeyError if absent."""
        data = self.read_canonical(oid, allow_dictionary)
        if data is None:
            raise KeyError(oid)
        return parse_canonical(oid, data)

    def verify_trailer(self) -> bool:
        """True if the index's trailing hash matches its content (fsck)."""
        body_end = len(self._index) - TRAILER_SIZE
        return blake3.blake3(self._index[:body_end]).digest() == self._index[body_end:]


def write_pack(
    directory: Path,
    objects: Iterable[PackedObject],
    durable: bool,
    block_size: int = DEFAULT_BLOCK_SIZE,
    level: int = 3,
    dictionary: PackedObject | None = None,
    maintained: bool = False,
) -> Path | None:
    """Write objects (in the given order, duplicates dropped) as one pack; return its index.

    Blocks hold consecutive objects up to ``block_size`` raw bytes; a larger object gets
    a block of its own. With a dictionary, it is stored first and every other block is
    compressed with it. Returns None when there is nothing to write.
    """
    zdict = (
        zstandard.ZstdCompressionDict(dictionary.data[dictionary.data.index(b"\0") + 1 :])
        if dictionary
        else None
    )
    plain = zstandard.ZstdCompressor(level=level, write_content_size=True)
    with_dict = (
        zstandard.ZstdCompressor(level=level, dict_data=zdict, write_content_size=True)
        if zdict
        else None
    )
    seen: set[str] = set()
    now = int(time.time())
    entries: list[tuple[bytes, int, int, int, int]] = []  # raw oid, block, offset, length, time
    blocks: list[tuple[int, int, int, int]] = []
    position = len(PACK_MAGIC)
    with _new_pack_file(directory, durable) as (fd, tmp_pack):
        pending: list[PackedObject] = []
        pending_size = 0

        def flush(compress_with_dictionary: bool) -> None:
            nonlocal position, pending_size
            if not pending:
                return
            raw = b"".join(obj.data for obj in pending)
            compressor = with_dict if (compress_with_dictionary and with_dict) else plain
            frame = compressor.compress(raw)
            offset = 0
            for obj in pending:
                entries.append(
                    (bytes.fromhex(obj.oid), len(blocks), offset, len(obj.data), obj.time or now)
                )
                offset += len(obj.data)
            flags = FLAG_DICTIONARY if compressor is with_dict else 0
            blocks.append((position, len(frame), len(raw), flags))
            write_all(fd, frame)
            position += len(frame)
            pending.clear()
            pending_size = 0

        if dictionary is not None:
            seen.add(dictionary.oid)
            pending.append(dictionary)
            flush(compress_with_dictionary=False)
        for obj in objects:
            if obj.oid in seen:
                continue
            seen.add(obj.oid)
            if pending and pending_size + len(obj.data) > block_size:
                flush(True)
            pending.append(obj)
            pending_size += len(obj.data)
        flush(True)
    if not entries or (dictionary is not None and len(entries) == 1):
        os.unlink(tmp_pack)
        return None
    index = _build_index(
        entries, blocks, position, dictionary.oid if dictionary else None, maintained
    )
    return _publish(directory, tmp_pack, index, durable)


def copy_packs(directory: Path, packs: Iterable[PackReader], durable: bool) -> Path | None:
    """Write one pack holding the blocks of ``packs`` copied verbatim, in the given order;
    return its index path (None if they hold nothing).

    Nothing is recompressed, so merging costs a copy of the compressed bytes plus a new
    index; every copied object is still decompressed and checked against its id first
    (CorruptObject), so a merge never carries damage along unnoticed. An object held by
    two of the packs keeps its first copy. Each object keeps the write time gc sees for
    it (its own, or its pack's if freshened later). Packs that use a dictionary are
    refused (ValueError): batch packs never do.
    """
    seen: set[bytes] = set()
    entries: list[tuple[bytes, int, int, int, int]] = []
    blocks: list[tuple[int, int, int, int]] = []
    position = len(PACK_MAGIC)
    with _new_pack_file(directory, durable) as (fd, tmp_pack):
        for pack in packs:
            if pack.dictionary_oid is not None:
                raise ValueError(f"pack {pack.name} uses a dictionary; it cannot be copied")
            first_block = len(blocks)
            for block in range(pack.block_count):
                offset, clen, rlen, flags = pack.block_entry(block)
                write_all(fd, pack.raw_block(offset, clen))
                blocks.append((position, clen, rlen, flags))
                position += clen
            freshened = pack.file_time()
            for raw_oid, block, offset, length, when in pack.entries():
                if raw_oid in seen:
                    continue
                seen.add(raw_oid)
                data = pack.block(block)[offset : offset + length]
                if blake3.blake3(data).digest() != raw_oid:
                    raise CorruptObject("packed copy does not match its id", raw_oid.hex())
                entries.append((raw_oid, first_block + block, offset, length, max(when, freshened)))
    if not entries:
        os.unlink(tmp_pack)
        return None
    return _publish(directory, tmp_pack, _build_index(entries, blocks, position, None), durable)


@contextlib.contextmanager
def _new_pack_file(directory: Path, durable: bool) -> Iterator[tuple[int, str]]:
    """A hidden temp pack file holding the magic: yields ``(fd, path)``; closes it
    (synced first when durable), or removes it if the body raises."""
    tmp_pack = temp_name(directory, "pack-")
    fd = os.open(tmp_pack, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o444)
    try:
        write_all(fd, PACK_MAGIC)
        yield fd, tmp_pack
        if durable:
            os.fsync(fd)
    except BaseException:
        os.close(fd)
        os.unlink(tmp_pack)
        raise
    os.close(fd)


def _publish(directory: Path, tmp_pack: str, index: bytes, durable: bool) -> Path:
    """Rename a complete pack data file into place, then write its index beside it."""
    name = "pack-" + index[-TRAILER_SIZE:].hex()[:40]
    pack_path = directory / f"{name}.pack"
    index_path = directory / f"{name}.idx"
    tmp_index = temp_name(directory, "idx-")
    try:
        write_new_file(tmp_index, index, durable)
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


def _build_index(
    entries: list[tuple[bytes, int, int, int, int]],
    blocks: list[tuple[int, int, int, int]],
    pack_size: int,
    dictionary_oid: str | None,
    maintained: bool = False,
) -> bytes:
    entries.sort(key=lambda entry: entry[0])
    fanout = [0] * 256
    for raw_oid, *_ in entries:
        fanout[raw_oid[0]] += 1
    running = 0
    for i in range(256):
        running += fanout[i]
        fanout[i] = running
    parts = [
        _HEADER.pack(
            INDEX_MAGIC,
            len(entries),
            len(blocks),
            pack_size,
            bytes.fromhex(dictionary_oid) if dictionary_oid else ZERO_OID,
            PACK_FLAG_MAINTAINED if maintained else 0,
        ),
        _FANOUT.pack(*fanout),
        b"".join(entry[0] for entry in entries),
        b"".join(_LOCATION.pack(block, offset, length) for _, block, offset, length, _ in entries),
        b"".join(_TIME.pack(min(when, 2**32 - 1)) for *_, when in entries),
        b"".join(_BLOCK.pack(*block) for block in blocks),
    ]
    body = b"".join(parts)
    return body + blake3.blake3(body).digest()
