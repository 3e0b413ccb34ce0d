"""Writing a pack: its data streamed to a sink, its index built at the end.

A ``PackWriter`` appends blocks to a ``PackSink`` (anything with ``write(bytes)``: the
local store writes a temp file, an object store uploads parts) as they fill, so a pack
of any size is written with one block of objects in memory plus the index entries
(about 60 bytes per object). ``finish`` returns the index bytes and the pack's name;
publishing the two (rename into place, upload) is the caller's job, data first, so no
reader ever finds an index without its data.

Objects go into blocks in the order given; a block holds consecutive objects up to
``block_size`` content bytes, and an object larger than that gets a block of its own.
With a dictionary, the dictionary blob is stored first, in a block compressed without
it, and every other block is compressed with it. An oid given twice is written once.
``copy_blocks`` appends another pack's blocks verbatim (merging without recompressing),
after checking every object they hold against its oid.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import NamedTuple, Protocol

import zstandard

from ..errors import CorruptObject, InvalidInputError
from ..objects.codec import MAX_HEADER_LENGTH
from .index import (
    BLOCK_FLAG_DICTIONARY,
    MAX_SHARED_BLOCK,
    PACK_MAGIC,
    BlockEntry,
    IndexEntry,
    encode_index,
    pack_name,
)
from .reader import PackReader

DEFAULT_BLOCK_SIZE = 64 * 1024
"""Content bytes per block of a batch pack (maintenance uses larger blocks)."""
DEFAULT_LEVEL = 3


class PackSink(Protocol):
    """Where pack data goes, in order."""

    def write(self, data: bytes) -> None:
        """Append ``data`` (all of it, or raise)."""
        ...


class PackedObject(NamedTuple):
    """An object ready to be packed: its oid, canonical form (header + body) and age."""

    oid: str
    data: bytes
    time: int = 0
    """Unix seconds when the object was last written (0: now)."""


class WrittenPack:
    """A complete pack: its name, its index bytes, and what the data holds.

    A plain slotted class (its ``index`` and ``count`` would shadow a tuple's methods)."""

    __slots__ = ("count", "data_size", "index", "name")

    def __init__(self, name: str, index: bytes, data_size: int, count: int) -> None:
        self.name = name
        self.index = index
        self.data_size = data_size
        self.count = count
        """Objects indexed (the dictionary included)."""

    def __repr__(self) -> str:
        return f"WrittenPack(name={self.name!r}, data_size={self.data_size}, count={self.count})"


def dictionary_content(dictionary: PackedObject) -> bytes:
    """The zstd dictionary a dictionary blob holds (its canonical form minus the header)."""
    nul = dictionary.data.find(b"\0", 0, MAX_HEADER_LENGTH)
    if nul < 0:
        raise InvalidInputError("a pack dictionary must be a canonical blob")
    return dictionary.data[nul + 1 :]


class PackWriter:
    """Builds one pack, streaming its data to ``sink`` (the magic is written at once)."""

    def __init__(
        self,
        sink: PackSink,
        *,
        level: int = DEFAULT_LEVEL,
        block_size: int = DEFAULT_BLOCK_SIZE,
        dictionary: PackedObject | None = None,
        maintained: bool = False,
        now: int | None = None,
    ) -> None:
        if not 0 < block_size <= MAX_SHARED_BLOCK:
            raise InvalidInputError(f"block_size must be between 1 and {MAX_SHARED_BLOCK}")
        self.sink = sink
        self.block_size = block_size
        self.maintained = maintained
        self.now = int(time.time()) if now is None else now
        self._plain = zstandard.ZstdCompressor(level=level, write_content_size=True)
        self._with_dictionary: zstandard.ZstdCompressor | None = None
        self._dictionary_oid: str | None = None
        self._entries: list[IndexEntry] = []
        self._blocks: list[BlockEntry] = []
        self._seen: set[bytes] = set()
        self._pending: list[PackedObject] = []
        self._pending_size = 0
        self._position = 0
        self._emit(PACK_MAGIC)
        if dictionary is not None:
            zdict = zstandard.ZstdCompressionDict(dictionary_content(dictionary))
            self._with_dictionary = zstandard.ZstdCompressor(
                level=level, dict_data=zdict, write_content_size=True
            )
            self._dictionary_oid = dictionary.oid
            self._seen.add(bytes.fromhex(dictionary.oid))
            self._pending.append(dictionary)
            self._flush(use_dictionary=False)

    @property
    def count(self) -> int:
        """Objects indexed so far (not counting those still in the open block)."""
        return len(self._entries)

    @property
    def data_size(self) -> int:
        """Bytes written to the sink so far."""
        return self._position

    def _emit(self, data: bytes) -> None:
        self.sink.write(data)
        self._position += len(data)

    def add(self, obj: PackedObject) -> None:
        """Append one object (ignored if its oid was already written)."""
        raw = bytes.fromhex(obj.oid)
        if raw in self._seen:
            return
        self._seen.add(raw)
        if self._pending and self._pending_size + len(obj.data) > self.block_size:
            self._flush(use_dictionary=True)
        self._pending.append(obj)
        self._pending_size += len(obj.data)

    def add_all(self, objects: Iterable[PackedObject]) -> None:
        """Append objects in order."""
        for obj in objects:
            self.add(obj)

    def _flush(self, use_dictionary: bool) -> None:
        if not self._pending:
            return
        content = b"".join(obj.data for obj in self._pending)
        compressor = self._plain
        flags = 0
        if use_dictionary and self._with_dictionary is not None:
            compressor, flags = self._with_dictionary, BLOCK_FLAG_DICTIONARY
        frame = compressor.compress(content)
        number = len(self._blocks)
        offset = 0
        for obj in self._pending:
            when = obj.time or self.now
            self._entries.append(
                IndexEntry(bytes.fromhex(obj.oid), number, offset, len(obj.data), when)
            )
            offset += len(obj.data)
        self._blocks.append(BlockEntry(self._position, len(frame), len(content), flags))
        self._emit(frame)
        self._pending = []
        self._pending_size = 0

    def copy_blocks(self, pack: PackReader, freshened: int = 0) -> None:
        """Append every block of ``pack`` verbatim and index the objects they hold that
        this writer has not written yet, each with its own time or ``freshened`` if that
        is newer. Each block is read once; every object is hash-checked before its block
        is written (CorruptObject: nothing damaged is carried along unnoticed). Packs
        that use a dictionary are refused (InvalidInputError): their blocks need it."""
        if pack.dictionary_oid is not None:
            raise InvalidInputError(f"pack {pack.name} uses a dictionary; it cannot be copied")
        self._flush(use_dictionary=True)
        by_block, misplaced = pack.placed_by_block()
        if misplaced:
            assert misplaced[0].error is not None
            raise misplaced[0].error
        for read in pack.iter_blocks():
            if read.error is not None or read.block is None or read.frame is None:
                raise read.error or CorruptObject(f"pack {pack.name}: block {read.number}")
            number = len(self._blocks)
            for walked in pack.objects_in(read, by_block.get(read.number, [])):
                if walked.error is not None:
                    raise walked.error
            for _, entry in by_block.get(read.number, []):
                if entry.oid in self._seen:
                    continue
                self._seen.add(entry.oid)
                self._entries.append(
                    IndexEntry(
                        entry.oid, number, entry.offset, entry.length, max(entry.time, freshened)
                    )
                )
            block = read.block
            self._blocks.append(
                BlockEntry(self._position, block.compressed_length, block.raw_length, block.flags)
            )
            self._emit(read.frame)

    def finish(self) -> WrittenPack | None:
        """Close the last block and return the pack (None if it holds no object besides
        a dictionary: the caller discards the data written)."""
        self._flush(use_dictionary=True)
        objects = len(self._entries) - (1 if self._dictionary_oid else 0)
        if objects <= 0:
            return None
        index = encode_index(
            self._entries, self._blocks, self._position, self._dictionary_oid, self.maintained
        )
        return WrittenPack(pack_name(index), index, self._position, len(self._entries))
