"""The pack index: a sorted table that says where each object of a pack lives.

A pack is two byte strings: its *data* (``PACK_MAGIC`` followed by blocks, see
``reader``) and its *index*, laid out as follows (all integers little-endian)::

    header   magic "CJIDX\\0\\0\\1" | u64 objects N | u64 blocks B | u64 data size
             | 32-byte dictionary oid (zeros: none) | u64 flags (1: maintained)
    fanout   256 x u32: how many oids start with a byte <= i (cumulative)
    oids     N x 32 bytes, the raw BLAKE3 digests, strictly ascending
    places   N x (u32 block, u32 offset in the block's content, u32 length)
    times    N x u32: when each object was last written (unix seconds, for gc)
    blocks   B x (u64 offset in the data, u32 compressed length, u32 content
             length, u32 flags (1: compressed with the pack's dictionary))
    trailer  32 bytes: BLAKE3 of everything above; the pack is named
             ``pack-`` + the first 40 hex digits of it

The object at sorted position ``i`` is ``places[i].length`` bytes of block
``places[i].block``'s decompressed content starting at ``places[i].offset``: its
canonical form (header + body), which hashes to ``oids[i]``. A *maintained* pack was
written by ``pack`` or gc (ordered for locality and fully compressed); the others are
batch packs, which writers may merge.

Format rules a reader enforces (anything else is a CorruptObject, never an out-of-range
read, an exception of another type, or an allocation the index did not justify):

* the index is exactly as long as its header implies, the fanout never decreases and
  ends at N;
* a place names an existing block and lies inside that block's content;
* a block lies inside the data, after the magic;
* a block whose content is larger than ``MAX_SHARED_BLOCK`` holds exactly one object
  that fills it. Many small objects therefore always share a small block, so reading
  one object never costs more than decompressing ``MAX_SHARED_BLOCK`` bytes or the
  object itself.

Decoding checks the header, the sizes and the fanout at once (constant work, whatever
the pack holds); places and blocks are checked when used; the trailer and the order of
the oid table are checked by ``verify_trailer`` and ``unsorted_at`` (fsck). Lookups
binary-search the fanout range, so a lookup touches a handful of index pages.
"""

from __future__ import annotations

import itertools
import mmap
import struct
from collections.abc import Iterator, Sequence
from typing import NamedTuple

import blake3

from ..errors import CorruptObject

PACK_MAGIC = b"CJPACK\x00\x01"
"""The first 8 bytes of a pack's data."""
INDEX_MAGIC = b"CJIDX\x00\x00\x01"
"""The first 8 bytes of a pack's index."""

HEADER = struct.Struct("<8sQQQ32sQ")
FANOUT = struct.Struct("<256I")
PLACE = struct.Struct("<III")
TIME = struct.Struct("<I")
BLOCK = struct.Struct("<QIII")
TRAILER_SIZE = 32
ENTRY_SIZE = 32 + PLACE.size + TIME.size
"""Index bytes per object (oid, place, time)."""
MIN_INDEX_SIZE = HEADER.size + FANOUT.size + TRAILER_SIZE

INDEX_FLAG_MAINTAINED = 1
"""Header flag: written by pack or gc, not a batch pack."""
BLOCK_FLAG_DICTIONARY = 1
"""Block flag: the block is compressed with the pack's dictionary."""
MAX_SHARED_BLOCK = 1 << 20
"""The largest block content that may hold more than one object (1 MiB)."""
MAX_U32 = 2**32 - 1
_ZERO_OID = bytes(32)


Buffer = bytes | mmap.mmap
"""What an index is decoded from: bytes, or an mmap of the index file."""


class BlockEntry(NamedTuple):
    """Where one block lives in the pack data, and what it decompresses to."""

    offset: int
    """Byte offset of the block's zstd frame in the pack data."""
    compressed_length: int
    raw_length: int
    """Length of the decompressed content."""
    flags: int = 0

    @property
    def uses_dictionary(self) -> bool:
        """True if the block is compressed with the pack's dictionary."""
        return bool(self.flags & BLOCK_FLAG_DICTIONARY)

    @property
    def end(self) -> int:
        """Offset just past the block's frame."""
        return self.offset + self.compressed_length


class IndexEntry(NamedTuple):
    """One object of a pack: its raw oid, its place, and its write time."""

    oid: bytes
    """The raw 32-byte oid."""
    block: int
    offset: int
    """Offset of the object's canonical form inside the block's content."""
    length: int
    time: int
    """When the object was last written (unix seconds)."""


class PackIndex:
    """A decoded pack index over a buffer (an mmap for local packs, bytes otherwise).

    Construction checks the header, the total size and the fanout (constant work);
    everything else is checked on use. ``name`` is used in error messages only.
    """

    def __init__(self, data: Buffer, name: str = "pack") -> None:
        self.name = name
        self._data = data
        size = len(data)
        if size < MIN_INDEX_SIZE:
            raise CorruptObject(f"pack index {name} is truncated ({size} bytes)")
        magic, count, blocks, pack_size, dict_oid, flags = HEADER.unpack(data[: HEADER.size])
        if magic != INDEX_MAGIC:
            raise CorruptObject(f"pack index {name} has a bad magic number")
        expected = MIN_INDEX_SIZE + count * ENTRY_SIZE + blocks * BLOCK.size
        if expected != size:
            raise CorruptObject(f"pack index {name} is {size} bytes, its header implies {expected}")
        if count > MAX_U32 or blocks > MAX_U32:
            raise CorruptObject(f"pack index {name} claims more entries than it can address")
        fanout: tuple[int, ...] = FANOUT.unpack(data[HEADER.size : HEADER.size + FANOUT.size])
        if fanout[-1] != count or any(a > b for a, b in itertools.pairwise(fanout)):
            raise CorruptObject(f"pack index {name} has an inconsistent fanout")
        self.count: int = count
        """How many objects the pack holds."""
        self.block_count: int = blocks
        self.pack_size: int = pack_size
        """How long the pack data must be."""
        self.dictionary_oid: str | None = None if dict_oid == _ZERO_OID else dict_oid.hex()
        self.maintained = bool(flags & INDEX_FLAG_MAINTAINED)
        self.flags: int = flags
        self._fanout = fanout
        self._oids_at = HEADER.size + FANOUT.size
        self._places_at = self._oids_at + count * 32
        self._times_at = self._places_at + count * PLACE.size
        self._blocks_at = self._times_at + count * TIME.size
        self._checked_blocks: dict[int, BlockEntry] = {}

    # -- lookup --------------------------------------------------------------------------

    def position(self, oid: str | bytes) -> int:
        """The sorted position of an oid (hex or raw), or -1 if the index lacks it."""
        raw = bytes.fromhex(oid) if isinstance(oid, str) else oid
        if len(raw) != 32:
            return -1
        first = raw[0]
        lo: int = self._fanout[first - 1] if first else 0
        hi: int = self._fanout[first]
        data, base = self._data, self._oids_at
        while lo < hi:
            mid = (lo + hi) // 2
            at = base + mid * 32
            candidate = data[at : at + 32]
            if candidate < raw:
                lo = mid + 1
            elif candidate > raw:
                hi = mid
            else:
                return mid
        return -1

    def _check_position(self, position: int) -> None:
        if not 0 <= position < self.count:
            raise CorruptObject(f"pack {self.name}: no object at position {position}")

    def raw_oid_at(self, position: int) -> bytes:
        """The raw oid at a sorted position."""
        self._check_position(position)
        at = self._oids_at + position * 32
        return self._data[at : at + 32]

    def oid_at(self, position: int) -> str:
        """The hex oid at a sorted position."""
        return self.raw_oid_at(position).hex()

    def oid_table(self) -> bytes:
        """The sorted oids as stored: ``count`` raw 32-byte digests back to back."""
        return self._data[self._oids_at : self._places_at]

    def iter_oids(self) -> Iterator[str]:
        """Every oid, in stored (sorted) order."""
        table = self.oid_table()
        for at in range(0, len(table), 32):
            yield table[at : at + 32].hex()

    def oids_with_prefix(self, prefix: str) -> list[str]:
        """Oids starting with a lowercase hex prefix of at least two digits."""
        first = int(prefix[:2], 16)
        lo = self._fanout[first - 1] if first else 0
        hi = self._fanout[first]
        return [oid for oid in map(self.oid_at, range(lo, hi)) if oid.startswith(prefix)]

    def time_at(self, position: int) -> int:
        """When the object at a sorted position was last written (unix seconds)."""
        self._check_position(position)
        at = self._times_at + position * TIME.size
        value: int = TIME.unpack_from(self._data, at)[0]
        return value

    def block(self, number: int) -> BlockEntry:
        """Block ``number``, checked to lie inside the pack data."""
        checked = self._checked_blocks.get(number)
        if checked is not None:
            return checked
        if not 0 <= number < self.block_count:
            raise CorruptObject(
                f"pack {self.name}: a place names block {number} of {self.block_count}"
            )
        entry = BlockEntry(*BLOCK.unpack_from(self._data, self._blocks_at + number * BLOCK.size))
        if entry.offset < len(PACK_MAGIC) or entry.end > self.pack_size:
            raise CorruptObject(f"pack {self.name}: block {number} points outside its pack data")
        self._checked_blocks[number] = entry
        return entry

    def blocks(self) -> list[BlockEntry]:
        """Every block, in data order, each checked as ``block`` does."""
        return [self.block(number) for number in range(self.block_count)]

    def place(self, position: int) -> tuple[int, BlockEntry, int, int]:
        """``(block number, block, offset, length)`` of the object at a sorted position,
        checked: it lies inside its block's content, and a block larger than
        ``MAX_SHARED_BLOCK`` is filled by this one object."""
        if not 0 <= position < self.count:
            raise CorruptObject(f"pack {self.name}: no object at position {position}")
        number, offset, length = PLACE.unpack_from(
            self._data, self._places_at + position * PLACE.size
        )
        block = self.block(number)
        raw = block.raw_length
        if offset + length > raw or (raw > MAX_SHARED_BLOCK and (offset or length != raw)):
            check_place(self.name, block, number, offset, length)
        return number, block, offset, length

    def entries(self) -> list[IndexEntry]:
        """Every object's entry, in sorted order (unchecked: see ``place``)."""
        table = self.oid_table()
        places = PLACE.iter_unpack(self._data[self._places_at : self._times_at])
        times = TIME.iter_unpack(self._data[self._times_at : self._blocks_at])
        return [
            IndexEntry(table[at * 32 : at * 32 + 32], block, offset, length, when)
            for at, ((block, offset, length), (when,)) in enumerate(zip(places, times, strict=True))
        ]

    # -- integrity (fsck) ----------------------------------------------------------------

    def verify_trailer(self) -> bool:
        """True if the trailing hash matches the index content."""
        body_end = len(self._data) - TRAILER_SIZE
        return blake3.blake3(self._data[:body_end]).digest() == self._data[body_end:]

    def unsorted_at(self) -> int:
        """The first position whose oid does not sort after its predecessor's, or -1."""
        table = self.oid_table()
        previous = b""
        for at in range(0, len(table), 32):
            current = table[at : at + 32]
            if current <= previous:
                return at // 32
            previous = current
        return -1

    def trailer(self) -> bytes:
        """The index's trailing hash (the pack's name is derived from it)."""
        return self._data[len(self._data) - TRAILER_SIZE :]


def check_place(name: str, block: BlockEntry, number: int, offset: int, length: int) -> None:
    """Refuse a place outside its block's content, or one of several objects in a block
    larger than ``MAX_SHARED_BLOCK`` (see the module's format rules)."""
    if offset + length > block.raw_length:
        raise CorruptObject(f"pack {name}: an object extends past the content of block {number}")
    if block.raw_length > MAX_SHARED_BLOCK and (offset != 0 or length != block.raw_length):
        raise CorruptObject(
            f"pack {name}: block {number} holds {block.raw_length} bytes for more than one "
            f"object (a block larger than {MAX_SHARED_BLOCK} bytes must hold one object)"
        )


def pack_name(index: bytes) -> str:
    """The name of the pack an index describes: ``pack-`` + 40 hex digits of its trailer."""
    return "pack-" + index[-TRAILER_SIZE:].hex()[:40]


def encode_index(
    entries: Sequence[IndexEntry],
    blocks: Sequence[BlockEntry],
    pack_size: int,
    dictionary_oid: str | None = None,
    maintained: bool = False,
) -> bytes:
    """The index bytes for a pack. ``entries`` may come in any order (they are sorted
    by oid here) but must not repeat an oid; times above 2**32-1 are clamped."""
    ordered = sorted(entries, key=lambda entry: entry.oid)
    fanout = [0] * 256
    for entry in ordered:
        fanout[entry.oid[0]] += 1
    running = 0
    for i in range(256):
        running += fanout[i]
        fanout[i] = running
    parts = [
        HEADER.pack(
            INDEX_MAGIC,
            len(ordered),
            len(blocks),
            pack_size,
            bytes.fromhex(dictionary_oid) if dictionary_oid else _ZERO_OID,
            INDEX_FLAG_MAINTAINED if maintained else 0,
        ),
        FANOUT.pack(*fanout),
        b"".join(entry.oid for entry in ordered),
        b"".join(PLACE.pack(e.block, e.offset, e.length) for e in ordered),
        b"".join(TIME.pack(min(max(e.time, 0), MAX_U32)) for e in ordered),
        b"".join(BLOCK.pack(b.offset, b.compressed_length, b.raw_length, b.flags) for b in blocks),
    ]
    body = b"".join(parts)
    return body + blake3.blake3(body).digest()
