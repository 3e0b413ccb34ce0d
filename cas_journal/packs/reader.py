"""Reading a pack: its data through a small random-access byte source, found by its index.

Pack data is ``PACK_MAGIC`` followed by *blocks*. A block is one zstd frame (content
size declared) whose content is the canonical forms (header + body) of one or more
objects, back to back, exactly as the index places them. A block may be compressed with
the pack's zstd dictionary (block flag 1); the dictionary is a blob object stored in
the same pack, in a block compressed without it.

The data is read through a ``ByteSource``: ``size`` and ``read(offset, length)``. The
local store gives the reader an mmap of the pack file (``BufferSource``); an object
store gives it ranged GETs. The reader asks for whole blocks, and for runs of adjacent
blocks in one read where it needs several (``read_many``, ``walk``), so a remote source
answers a batch of objects with one request per run.

Every read is bounded and verified: a block is decompressed only after the index's
place for the object was checked (see ``index``), its frame must declare exactly the
content length the index gives, the content never exceeds what the object justifies,
and every object returned is hash-checked against its oid. Damage of any kind is a
CorruptObject naming the pack (and the object when known); an absent object is an
ObjectNotFound. ``walk`` reads every block once, in data order, and yields each object
or the damage that hides it, which is what fsck, gc, pack and merging use.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterable, Iterator
from typing import NamedTuple, Protocol

import zstandard

from ..errors import CorruptObject, JournalError, ObjectNotFound
from ..objects import Kind, bounded_decompress, parse_canonical, split_canonical_forms
from ..objects.codec import MAX_HEADER_LENGTH
from .index import MAX_SHARED_BLOCK, PACK_MAGIC, BlockEntry, IndexEntry, PackIndex, check_place

MAX_RUN_GAP = 64 * 1024
"""``read_many`` joins two needed blocks into one read when at most this many bytes
of unneeded data lie between them."""
MAX_RUN_BYTES = 8 * 1024 * 1024
"""The most compressed bytes ``walk`` and ``read_many`` ask for in one read."""


class ByteSource(Protocol):
    """Random access to a pack's data: its total size, and byte ranges of it."""

    @property
    def size(self) -> int:
        """The data's length in bytes."""
        ...

    def read(self, offset: int, length: int) -> bytes:
        """``length`` bytes from ``offset`` (fewer only past the end)."""
        ...


class BufferSource:
    """A ByteSource over bytes or an mmap already in memory."""

    def __init__(self, buffer: bytes | bytearray | memoryview | object) -> None:
        self.buffer = buffer

    @property
    def size(self) -> int:
        """The buffer's length."""
        return len(self.buffer)  # type: ignore[arg-type]

    def read(self, offset: int, length: int) -> bytes:
        """A copy of ``buffer[offset : offset + length]``."""
        return bytes(self.buffer[offset : offset + length])  # type: ignore[index]


class BlockCache:
    """A small LRU of decompressed blocks, shared by the packs of one store (thread-safe).

    Keys are ``(pack name, block number)``; blocks larger than a quarter of the cache
    are never kept (a walk reads those once anyway).
    """

    def __init__(self, max_bytes: int = 64 * 1024 * 1024) -> None:
        self.max_bytes = max_bytes
        self._blocks: OrderedDict[tuple[str, int], bytes] = OrderedDict()
        self._size = 0
        self._lock = threading.Lock()

    def get(self, key: tuple[str, int]) -> bytes | None:
        """The cached block, or None."""
        with self._lock:
            block = self._blocks.get(key)
            if block is not None:
                self._blocks.move_to_end(key)
            return block

    def put(self, key: tuple[str, int], block: bytes) -> None:
        """Remember a block, evicting the least recently used beyond the budget."""
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


class BlockRead(NamedTuple):
    """One block as ``PackReader.iter_blocks`` read it: its frame and content, or the
    error that made it unreadable."""

    number: int
    block: BlockEntry | None
    """The index's entry for the block (None if the entry itself is invalid)."""
    frame: bytes | None
    """The compressed frame as stored."""
    content: bytes | None
    error: CorruptObject | None = None


class WalkedObject(NamedTuple):
    """One object met by ``PackReader.walk``: its canonical form, or why it is unreadable."""

    oid: str
    position: int
    data: bytes | None
    """The canonical form, hash-checked (None when damaged)."""
    error: CorruptObject | None = None


class PackReader:
    """Read-only access to one pack: its decoded index and its data source.

    ``max_object_size`` bounds every block a read may decompress (see ``index``).
    Safe to share between threads.
    """

    def __init__(
        self,
        index: PackIndex,
        data: ByteSource,
        max_object_size: int,
        cache: BlockCache | None = None,
    ) -> None:
        self.index = index
        self.data = data
        self.name = index.name
        self.max_block_size = max(max_object_size + MAX_HEADER_LENGTH, MAX_SHARED_BLOCK)
        self.cache = cache or BlockCache()
        self._local = threading.local()
        self._dictionary: zstandard.ZstdCompressionDict | None = None
        size = data.size
        if size != index.pack_size or size < len(PACK_MAGIC):
            raise CorruptObject(
                f"pack {self.name} is {size} bytes, its index says {index.pack_size}"
            )
        if data.read(0, len(PACK_MAGIC)) != PACK_MAGIC:
            raise CorruptObject(f"pack {self.name} has a bad magic number")

    # -- what the index says -------------------------------------------------------------

    @property
    def count(self) -> int:
        """How many objects the pack holds."""
        return self.index.count

    @property
    def block_count(self) -> int:
        """How many blocks the pack data holds."""
        return self.index.block_count

    @property
    def dictionary_oid(self) -> str | None:
        """The oid of the pack's zstd dictionary (a blob in the pack), if any."""
        return self.index.dictionary_oid

    @property
    def maintained(self) -> bool:
        """True if written by pack or gc (batch packs are False)."""
        return self.index.maintained

    @property
    def pack_size(self) -> int:
        """Length of the pack data."""
        return self.index.pack_size

    def position(self, oid: str) -> int:
        """The sorted position of ``oid`` in this pack, or -1."""
        return self.index.position(oid)

    def contains(self, oid: str) -> bool:
        """True if this pack holds the object."""
        return self.index.position(oid) >= 0

    def oid_at(self, position: int) -> str:
        """The oid stored at a sorted position."""
        return self.index.oid_at(position)

    def oid_table(self) -> bytes:
        """The sorted oids as stored: ``count`` raw 32-byte digests back to back."""
        return self.index.oid_table()

    def iter_oids(self) -> Iterator[str]:
        """Every oid in this pack, sorted."""
        return self.index.iter_oids()

    def oids_with_prefix(self, prefix: str) -> list[str]:
        """Oids in this pack starting with a hex prefix of at least two digits."""
        return self.index.oids_with_prefix(prefix)

    def time_at(self, position: int) -> int:
        """When the object at a sorted position was last written (unix seconds)."""
        return self.index.time_at(position)

    def stored_size_at(self, position: int) -> int:
        """The object's share of its compressed block (an estimate of its stored bytes)."""
        _, block, _, length = self.index.place(position)
        if not block.raw_length:
            return 0
        return block.compressed_length * length // block.raw_length

    def verify_trailer(self) -> bool:
        """True if the index's trailing hash matches its content (fsck)."""
        return self.index.verify_trailer()

    # -- blocks --------------------------------------------------------------------------

    def _decompressor(self, with_dictionary: bool) -> zstandard.ZstdDecompressor:
        key = "dict" if with_dictionary else "plain"
        cached: zstandard.ZstdDecompressor | None = getattr(self._local, key, None)
        if cached is None:
            if with_dictionary:
                dictionary = self._load_dictionary()
                try:
                    cached = zstandard.ZstdDecompressor(dict_data=dictionary)
                except zstandard.ZstdError as exc:
                    raise CorruptObject(
                        f"pack {self.name}: its dictionary is unusable: {exc}", self.dictionary_oid
                    ) from exc
            else:
                cached = zstandard.ZstdDecompressor()
            setattr(self._local, key, cached)
        return cached

    def _load_dictionary(self) -> zstandard.ZstdCompressionDict:
        if self._dictionary is None:
            oid = self.dictionary_oid
            if oid is None:
                raise CorruptObject(f"pack {self.name}: a block needs a dictionary the pack lacks")
            position = self.index.position(oid)
            if position < 0:
                raise CorruptObject(f"pack {self.name}: its dictionary is not in the pack", oid)
            kind, body = parse_canonical(oid, self.canonical_at(position, allow_dictionary=False))
            if kind is not Kind.BLOB:
                raise CorruptObject(f"pack {self.name}: its dictionary is not a blob", oid)
            self._dictionary = zstandard.ZstdCompressionDict(body)
        return self._dictionary

    def raw_block(self, block: BlockEntry) -> bytes:
        """The compressed frame of a block, as stored."""
        frame = self.data.read(block.offset, block.compressed_length)
        if len(frame) != block.compressed_length:
            raise CorruptObject(f"pack {self.name}: the data ends inside a block")
        return frame

    def decompress(
        self, number: int, block: BlockEntry, frame: bytes, allow_dictionary: bool = True
    ) -> bytes:
        """The content of block ``number`` from its compressed ``frame``, bounded by what
        the index says it holds and by the reader's ``max_block_size``."""
        if block.raw_length > self.max_block_size:
            raise CorruptObject(
                f"pack {self.name}: block {number} claims {block.raw_length} bytes, more "
                f"than any object within the size limit"
            )
        if block.uses_dictionary and not allow_dictionary:
            raise CorruptObject(
                f"pack {self.name}: the dictionary's block is itself dictionary-compressed"
            )
        decompressor = self._decompressor(block.uses_dictionary)
        data = bounded_decompress(frame, block.raw_length, None, decompressor)
        if len(data) != block.raw_length:
            raise CorruptObject(f"pack {self.name}: block {number} is not the size its index says")
        return data

    def block_content(self, number: int, allow_dictionary: bool = True) -> bytes:
        """The decompressed content of block ``number`` (cached)."""
        key = (self.name, number)
        cached = self.cache.get(key)
        if cached is not None:
            return cached
        block = self.index.block(number)
        data = self.decompress(number, block, self.raw_block(block), allow_dictionary)
        self.cache.put(key, data)
        return data

    # -- objects -------------------------------------------------------------------------

    def canonical_at(self, position: int, allow_dictionary: bool = True) -> bytes:
        """The canonical form (unverified) of the object at a sorted position."""
        number, _, offset, length = self.index.place(position)
        data = self.block_content(number, allow_dictionary)
        return data[offset : offset + length]

    def read_canonical(self, oid: str) -> bytes | None:
        """The verified canonical form of ``oid``, or None if this pack lacks it."""
        position = self.index.position(oid)
        if position < 0:
            return None
        data = self.canonical_at(position)
        parse_canonical(oid, data)
        return data

    def read(self, oid: str) -> tuple[Kind, bytes]:
        """Read and verify one object; ObjectNotFound if this pack lacks it."""
        position = self.index.position(oid)
        if position < 0:
            raise ObjectNotFound(f"object {oid} not found in pack {self.name}")
        return parse_canonical(oid, self.canonical_at(position))

    def block_objects(self, position: int) -> list[tuple[str, Kind, bytes]]:
        """Every object of the block holding the object at a sorted position, in data
        order, each named by the hash of its own canonical form (so verified): a reader
        walking a chain packed in chain order decompresses and splits each block once
        instead of looking up every object. CorruptObject if the block is damaged.

        The block's content is not put in the block cache (its objects are what the
        caller keeps): a long walk then reuses the memory of one block for the next
        instead of holding every block it read twice, once whole and once split."""
        number, _, _, _ = self.index.place(position)
        data = self.cache.get((self.name, number))
        if data is None:
            block = self.index.block(number)
            data = self.decompress(number, block, self.raw_block(block))
        return split_canonical_forms(data)

    def read_many(self, oids: Iterable[str]) -> Iterator[tuple[str, Kind, bytes]]:
        """Read and verify the given objects that this pack holds (others are skipped),
        in data order: blocks that lie close together are fetched in one source read.
        Raises CorruptObject at the first damaged object."""
        wanted: dict[int, list[tuple[int, int, str]]] = {}
        for oid in oids:
            position = self.index.position(oid)
            if position >= 0:
                number, _, offset, length = self.index.place(position)
                wanted.setdefault(number, []).append((offset, length, oid))
        for read in self.iter_blocks(sorted(wanted), MAX_RUN_GAP):
            if read.error is not None:
                raise read.error
            assert read.content is not None
            for offset, length, oid in wanted[read.number]:
                kind, body = parse_canonical(oid, read.content[offset : offset + length])
                yield oid, kind, body

    def iter_blocks(
        self, numbers: Iterable[int] | None = None, gap: int = 0
    ) -> Iterator[BlockRead]:
        """Each listed block (default: all, in data order), read and decompressed once.
        Blocks at most ``gap`` bytes apart in the data are fetched with one source read
        (up to ``MAX_RUN_BYTES``). A damaged block comes with its error; the walk goes on.
        """
        run: list[tuple[int, BlockEntry]] = []

        def flush() -> Iterator[BlockRead]:
            start, end = run[0][1].offset, max(b.end for _, b in run)
            try:
                chunk = self.data.read(start, end - start)
            except JournalError as exc:  # a source that fails mid-walk (remote errors)
                for number, block in run:
                    error = CorruptObject(f"pack {self.name}: block {number}: {exc}")
                    yield BlockRead(number, block, None, None, error)
                return
            for number, block in run:
                frame = chunk[block.offset - start : block.end - start]
                try:
                    if len(frame) != block.compressed_length:
                        raise CorruptObject(f"pack {self.name}: the data ends inside a block")
                    content = self.cache.get((self.name, number))
                    if content is None:
                        content = self.decompress(number, block, frame)
                        self.cache.put((self.name, number), content)
                except CorruptObject as exc:
                    yield BlockRead(number, block, frame, None, exc)
                    continue
                yield BlockRead(number, block, frame, content)

        for number in range(self.block_count) if numbers is None else numbers:
            try:
                block = self.index.block(number)
            except CorruptObject as exc:
                yield BlockRead(number, None, None, None, exc)
                continue
            if run and (
                block.offset < run[-1][1].end
                or block.offset - run[-1][1].end > gap
                or block.end - run[0][1].offset > MAX_RUN_BYTES
            ):
                yield from flush()
                run = []
            run.append((number, block))
        if run:
            yield from flush()

    def placed_by_block(
        self,
    ) -> tuple[dict[int, list[tuple[int, IndexEntry]]], list[WalkedObject]]:
        """Every ``(position, index entry)`` grouped by block number; entries whose place
        is invalid are returned apart, as damaged objects."""
        by_block: dict[int, list[tuple[int, IndexEntry]]] = {}
        misplaced: list[WalkedObject] = []
        blocks: dict[int, BlockEntry | CorruptObject] = {}
        for position, entry in enumerate(self.index.entries()):
            block = blocks.get(entry.block)
            if block is None:
                try:
                    block = self.index.block(entry.block)
                except CorruptObject as exc:
                    block = exc
                blocks[entry.block] = block
            try:
                if isinstance(block, CorruptObject):
                    raise block
                check_place(self.name, block, entry.block, entry.offset, entry.length)
            except CorruptObject as exc:
                misplaced.append(WalkedObject(entry.oid.hex(), position, None, exc))
                continue
            by_block.setdefault(entry.block, []).append((position, entry))
        return by_block, misplaced

    def objects_in(
        self, read: BlockRead, placed: list[tuple[int, IndexEntry]]
    ) -> Iterator[WalkedObject]:
        """The objects ``placed`` in a block just read, each verified (or its error)."""
        for position, entry in placed:
            oid = entry.oid.hex()
            if read.content is None:
                yield WalkedObject(oid, position, None, read.error)
                continue
            data = read.content[entry.offset : entry.offset + entry.length]
            try:
                parse_canonical(oid, data)
            except CorruptObject as exc:
                yield WalkedObject(oid, position, None, exc)
                continue
            yield WalkedObject(oid, position, data)

    def walk(self) -> Iterator[WalkedObject]:
        """Every object of the pack with its verified canonical form, block by block in
        data order: each block is read and decompressed once, however many objects it
        holds. An object that cannot be read comes with the CorruptObject that hides it;
        the walk goes on with the next."""
        by_block, misplaced = self.placed_by_block()
        yield from misplaced
        for read in self.iter_blocks(sorted(by_block)):
            yield from self.objects_in(read, by_block[read.number])
