"""Object ids, the stored frame format, and bounded, verified decoding.

An object is ``(kind, body)``. Its *canonical form* is ``b"<kind> <len>\\0" + body`` and its
id (oid) is the BLAKE3-256 hex digest of that canonical form, so two kinds never share an
id. A stored object is one zstd frame of the canonical form with the content size declared
in the frame header. Every decode checks the declared size against a limit before it
allocates anything, decompresses exactly that much, and verifies the hash.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Iterable
from typing import NamedTuple

import blake3
import zstandard

from ..errors import CorruptObject, InvalidInputError
from .kinds import KINDS_BY_TAG, Kind

DEFAULT_MAX_OBJECT_SIZE = 64 * 1024 * 1024
"""Default limit on an object's body (64 MiB)."""
MAX_HEADER_LENGTH = 32
"""The canonical header is ``kind SP decimal-length NUL``; it is never longer than this."""
COMPRESSION_LEVEL = -1
"""zstd level of an object's own frame. Any level makes a valid frame (readers never need
to know it); -1, zstd's first fast level, compresses a typical 1-4 KiB object in half the
CPU time of level 3 (7.7 against 16.5 us on this project's benchmark objects) at a ratio
of 0.51 instead of 0.40. Frames are what a commit writes on the hot path and what ``pack``
replaces: packs compress their blocks at their own level (3), so the bytes of a packed
store do not depend on this one."""
RAW_FRAME_LIMIT = 1024
"""Canonical forms up to this many bytes are stored as a frame of one raw (uncompressed)
block, the form zstd itself gives data it cannot shrink: compressing a few hundred bytes
costs zstd more work than anything else about an object (building its entropy tables
for every frame: about 16,000 instructions, 7% of a single append and 9% of a batched
entry), to save a hundred or two bytes of a row that ``pack`` recompresses anyway."""

_OID = re.compile(r"[0-9a-f]{64}")


def is_oid(value: object) -> bool:
    """True if value is a full object id: 64 lowercase hex digits."""
    return isinstance(value, str) and _OID.fullmatch(value) is not None


def require_oid(value: object, what: str = "object id") -> str:
    """Return value if it is a full oid, else raise InvalidInputError."""
    if not is_oid(value):
        raise InvalidInputError(f"{what} must be 64 lowercase hex digits, got {value!r}")
    assert isinstance(value, str)
    return value


_TAGS = {kind: kind.value.encode("ascii") + b" " for kind in Kind}
_blake3 = blake3.blake3
_CONCATENATED = 64 * 1024
"""Bodies up to this size are hashed with their header copied in front (one hasher call)."""


def object_header(kind: Kind, body_length: int) -> bytes:
    """The canonical header that precedes the body: ``b"entry 123\\0"``."""
    return b"%s%d\0" % (_TAGS[kind], body_length)


def canonical_form(kind: Kind, body: bytes) -> bytes:
    """Header plus body: the exact bytes an oid is the hash of."""
    return _TAGS[kind] + b"%d\0" % len(body) + body


_HEADERS_BY_SIZE: dict[str, dict[int, bytes]] = {kind: {} for kind in Kind}
"""Canonical headers (``b"entry 280\\0"``) by kind and body size, each made once:
formatting one (``b"%d" % size``) costs about 1,200 instructions, a lookup a tenth of
that. At most ``HEADER_SIZES`` sizes of a kind are kept."""
HEADER_SIZES = 4096


def _new_header(kind: Kind, size: int) -> bytes:
    """The header of a body of ``size`` bytes, noted in ``_HEADERS_BY_SIZE``."""
    known = _HEADERS_BY_SIZE[kind]
    if len(known) >= HEADER_SIZES:
        known.clear()
    header = known[size] = _TAGS[kind] + b"%d\0" % size
    return header


_HasherMethods = tuple[Callable[[], object], Callable[[bytes], object], Callable[[], bytes]]
_hashers = threading.local()
"""Each thread's hasher for ``object_id``, as its bound ``(reset, update, digest)``."""


def _thread_hasher() -> _HasherMethods:
    hasher = _blake3()
    methods: _HasherMethods = (hasher.reset, hasher.update, hasher.digest)
    _hashers.methods = methods
    return methods


def object_id(kind: Kind, body: bytes) -> str:
    """The oid of an object: BLAKE3-256 hex of its canonical form."""
    size = len(body)
    if size <= _CONCATENATED:
        # the header and body concatenated, through the thread's own hasher, reset first
        # (a new hasher costs about 1,100 instructions more; one reset before use is
        # clean even if a call was interrupted midway). digest().hex() is the same text
        # as hexdigest, 0.2 us faster.
        header = _HEADERS_BY_SIZE[kind].get(size)
        if header is None:
            header = _new_header(kind, size)
        try:
            methods: _HasherMethods = _hashers.methods
        except AttributeError:
            methods = _thread_hasher()
        reset, update, digest = methods
        reset()
        update(header + body)
        return digest().hex()
    hasher = _blake3(b"%s%d\0" % (_TAGS[kind], len(body)))
    hasher.update(body)  # no copy of a large body
    return hasher.digest().hex()


def hash_hex(data: bytes) -> str:
    """BLAKE3-256 hex digest of raw bytes."""
    return blake3.blake3(data).digest().hex()


def parse_canonical(oid: str, data: bytes) -> tuple[Kind, bytes]:
    """Verify that ``data`` is the canonical form named ``oid`` and split it.

    Raises CorruptObject naming the oid on a hash mismatch or a malformed header.
    """
    if _blake3(data).digest().hex() != oid:
        raise CorruptObject("content does not match its id (hash mismatch)", oid)
    nul = data.find(b"\0", 0, MAX_HEADER_LENGTH)
    # a header met before (``_HEADERS``, checked when first met): one lookup, no parse
    known = _HEADERS.get(data[:nul]) if nul > 0 else None
    if known is not None and known[1] == len(data) - nul - 1:
        return known[0], data[nul + 1 :]
    if nul < 0:
        raise CorruptObject("object header is missing or too long", oid)
    tag, space, length_text = data[:nul].partition(b" ")
    kind = KINDS_BY_TAG.get(tag)
    if kind is None or not space:
        raise CorruptObject(f"unknown object kind {tag[:16]!r}", oid)
    if not length_text.isdigit() or (length_text[:1] == b"0" and length_text != b"0"):
        raise CorruptObject("object header has a malformed length", oid)
    body = data[nul + 1 :]
    if int(length_text) != len(body):
        raise CorruptObject("object length does not match its header", oid)
    if len(_HEADERS) < MAX_KNOWN_HEADERS:
        _HEADERS[data[:nul]] = (kind, len(body))
    return kind, body


_CANONICAL_HEADER = re.compile(
    b"("
    + b"|".join(re.escape(tag) for tag in KINDS_BY_TAG)
    + b") (0|[1-9][0-9]{0,%d})\0" % MAX_HEADER_LENGTH
)
"""A well-formed header of a known kind (what ``split_canonical_forms`` reads with one
match per object; anything else goes through the checks that name what is wrong)."""


def _header_error(data: bytes, position: int) -> CorruptObject:
    """Why the header at ``position`` is not one ``_CANONICAL_HEADER`` matches."""
    nul = data.find(b"\0", position, position + MAX_HEADER_LENGTH)
    if nul < 0:
        return CorruptObject("object header is missing or too long")
    tag, space, _ = data[position:nul].partition(b" ")
    if KINDS_BY_TAG.get(tag) is None or not space:
        return CorruptObject(f"unknown object kind {tag[:16]!r}")
    return CorruptObject("object header has a malformed length")


_HEADERS: dict[bytes, tuple[Kind, int]] = {}
"""Headers met by ``split_canonical_forms`` and ``parse_canonical`` (``b"entry 280"``,
without the NUL) with the kind and body length they give: a block's objects repeat a
few hundred distinct headers, so most are one dictionary lookup instead of a match and
a parse (callgrind: ``parse_canonical`` of an entry node 15,700 -> 12,900 instructions)."""
MAX_KNOWN_HEADERS = 1 << 16
"""Headers kept in ``_HEADERS``, at most (a few MB; later ones are parsed each time)."""


def _parse_header(data: bytes, position: int, nul: int) -> tuple[Kind, int]:
    """``(kind, body length)`` of the header at ``position`` whose NUL is at ``nul`` (the
    first within ``MAX_HEADER_LENGTH`` bytes, or -1), checked as ``_CANONICAL_HEADER``
    reads it; CorruptObject saying what is wrong with it."""
    header = _CANONICAL_HEADER.match(data, position)
    if header is None:
        raise _header_error(data, position)
    if nul < 0 or header.end() != nul + 1:  # the NUL is further than the limit
        raise CorruptObject("object header is missing or too long")
    tag, length_text = header.groups()
    found = (KINDS_BY_TAG[tag], int(length_text))
    if len(_HEADERS) < MAX_KNOWN_HEADERS:
        _HEADERS[data[position:nul]] = found
    return found


def split_canonical_forms(data: bytes) -> list[tuple[str, Kind, bytes]]:
    """Split canonical forms stored back to back (a pack block's content) into
    ``(oid, kind, body)``, each object named by the hash of its own canonical form.

    Each result is verified by construction (its oid *is* its hash), so a caller looking
    for one oid either finds it intact or not at all. A malformed header or a length
    that runs past the end raises CorruptObject (no oid to name: the data has none).
    """
    out: list[tuple[str, Kind, bytes]] = []
    append, find, known = out.append, data.find, _HEADERS.get
    hasher = blake3.blake3()  # one hasher, reset per object: cheaper than a new one each
    reset, update, digest = hasher.reset, hasher.update, hasher.digest
    view = memoryview(data)
    position, size = 0, len(data)
    while position < size:
        # one search and one lookup per object (this runs for every object of every
        # block read); a header not met before is matched and checked in full
        nul = find(b"\0", position, position + MAX_HEADER_LENGTH)
        header = known(data[position:nul]) if nul >= 0 else None
        kind, length = header if header is not None else _parse_header(data, position, nul)
        start = nul + 1
        end = start + length
        if end > size:
            raise CorruptObject("object length runs past the end of its data")
        reset()
        update(view[position:end])
        append((digest().hex(), kind, data[start:end]))
        position = end
    return out


_local = threading.local()


def _compressor() -> zstandard.ZstdCompressor:
    compressor = getattr(_local, "compressor", None)
    if compressor is None:
        compressor = zstandard.ZstdCompressor(level=COMPRESSION_LEVEL, write_content_size=True)
        _local.compressor = compressor
    return compressor


def _decompressor() -> zstandard.ZstdDecompressor:
    decompressor = getattr(_local, "decompressor", None)
    if decompressor is None:
        decompressor = zstandard.ZstdDecompressor()
        _local.decompressor = decompressor
    return decompressor


_FRAME_MAGIC = b"\x28\xb5\x2f\xfd"


def raw_frame_header(size: int) -> bytes:
    """What precedes ``size`` bytes (at most 65,791) in a zstd frame of one raw block with
    its content size declared: magic number, frame header (single segment, no checksum,
    no dictionary), block header (last block, raw, its size)."""
    if size < 256:  # single segment, a one-byte content size
        header = _FRAME_MAGIC + b"\x20" + size.to_bytes(1, "little")
    elif size <= 65_791:  # a two-byte content size, less 256
        header = _FRAME_MAGIC + b"\x60" + (size - 256).to_bytes(2, "little")
    else:
        raise ValueError("a raw frame holds at most 65,791 bytes")
    return header + ((size << 3) | 1).to_bytes(3, "little")


_RAW_HEADERS = [raw_frame_header(size) for size in range(RAW_FRAME_LIMIT + 1)]
"""``raw_frame_header`` of every size a stored raw frame has (made once: one per object
stored)."""
_RAW_HEADER_ARRAYS = [bytearray(header) for header in _RAW_HEADERS]
"""The same as bytearrays (``header + data`` is then a bytearray, see ``ObjectCodec.rows``)."""
_RAW_HEADER_LENGTH = len(_RAW_HEADERS[0])
"""Bytes before the content in a raw frame of fewer than 256 bytes (one more from 256 on)."""


def raw_frame(data: bytes) -> bytes:
    """A zstd frame holding ``data`` (at most 65,791 bytes) in one raw block, its content
    size declared (see ``raw_frame_header``), then the data as it is."""
    size = len(data)
    if size <= RAW_FRAME_LIMIT:
        return _RAW_HEADERS[size] + data
    return raw_frame_header(size) + data


def frame_of(data: bytes) -> bytes:
    """The stored frame of a canonical form: raw up to ``RAW_FRAME_LIMIT`` bytes, else
    compressed at ``COMPRESSION_LEVEL``."""
    if len(data) <= RAW_FRAME_LIMIT:
        return raw_frame(data)
    return _compressor().compress(data)


def bounded_decompress(
    frame: bytes,
    limit: int,
    oid: str | None = None,
    decompressor: zstandard.ZstdDecompressor | None = None,
) -> bytes:
    """Decompress exactly one zstd frame whose declared size is at most ``limit`` bytes.

    The size is read from the frame header before anything is allocated; a frame without
    a declared size, with trailing bytes, or holding other than it declares is refused.
    A frame that is exactly ``raw_frame`` of its last bytes (how every small object is
    stored) is taken apart without zstd: it holds those bytes, as zstd reads it too, and
    setting up zstd's decoder costs more than the rest of reading a small object (22,000
    instructions a frame, callgrind).
    """
    start = (
        _RAW_HEADER_LENGTH if len(frame) <= _RAW_HEADER_LENGTH + 0xFF else _RAW_HEADER_LENGTH + 1
    )
    size = len(frame) - start  # what a raw frame of this length holds (a two-byte size from 256)
    if 0 <= size <= RAW_FRAME_LIMIT and size <= limit:
        header = _RAW_HEADERS[size]
        if len(header) == start and frame.startswith(header):
            return frame[start:]
    try:
        declared = zstandard.frame_content_size(frame)
    except zstandard.ZstdError as exc:
        raise CorruptObject(f"not a zstd frame: {exc}", oid) from exc
    if declared < 0 or declared >= 2**63:
        raise CorruptObject("zstd frame does not declare its content size", oid)
    if declared > limit:
        raise CorruptObject(
            f"frame declares {declared} bytes, more than the {limit}-byte limit", oid
        )
    try:
        data = (decompressor or _decompressor()).decompress(
            frame, max_output_size=max(declared, 1), allow_extra_data=False
        )
    except zstandard.ZstdError as exc:
        raise CorruptObject(f"damaged zstd frame: {exc}", oid) from exc
    if len(data) != declared:
        raise CorruptObject("zstd frame holds other than it declares", oid)
    return data


FRAME_SLACK = 64 * 1024
"""Bytes a zstd frame may add to its content (headers, incompressible blocks)."""


class ObjectCodec(NamedTuple):
    """Encodes objects into stored frames and decodes them back, within a size limit."""

    max_object_size: int = DEFAULT_MAX_OBJECT_SIZE

    @property
    def max_frame_size(self) -> int:
        """The most bytes a stored frame of an object within the limit can take (zstd
        adds a little to incompressible content); a longer frame is damaged or hostile."""
        return self.max_object_size + self.max_object_size // 64 + FRAME_SLACK

    def check_size(self, body: bytes) -> None:
        """Refuse a body larger than the limit before any work is done on it."""
        if len(body) > self.max_object_size:
            raise InvalidInputError(
                f"object of {len(body)} bytes exceeds max_object_size={self.max_object_size}"
            )

    def encode(self, kind: Kind, body: bytes) -> tuple[str, bytes]:
        """Return ``(oid, frame)`` for an object."""
        self.check_size(body)
        data = canonical_form(kind, body)
        return blake3.blake3(data).digest().hex(), frame_of(data)

    def compress(self, kind: Kind, body: bytes) -> bytes:
        """The stored frame of an object whose oid the caller already knows (no hash)."""
        return frame_of(canonical_form(kind, body))

    def frames(self, objects: Iterable[tuple[Kind, bytes]]) -> list[bytes]:
        """The stored frames of many objects (sizes checked first), as ``compress`` makes
        them one by one (one compressor lookup for all: the commit path)."""
        limit = self.max_object_size
        tags, headers, raw_limit = _TAGS, _RAW_HEADERS, RAW_FRAME_LIMIT
        compress = None
        out: list[bytes] = []
        append = out.append
        for kind, body in objects:
            size = len(body)
            if size > limit:
                self.check_size(body)
            data = tags[kind] + b"%d\0" % size + body
            length = len(data)
            if length <= raw_limit:
                append(headers[length] + data)  # raw_frame(data), one call less
            else:
                if compress is None:
                    compress = _compressor().compress
                append(compress(data))
        return out

    def rows(self, objects: Iterable[tuple[str, Kind, bytes]]) -> list[tuple[bytearray, bytearray]]:
        """``(raw oid, frame)`` of many ``(oid, kind, body)`` (sizes checked first), the
        frames as ``frames`` makes them: what a commit writes as object rows. Both are
        bytearrays, which ``sqlite3`` binds as they are (it looks for an adapter for every
        bytes value first, and fails)."""
        limit = self.max_object_size
        by_size, headers, raw_limit = _HEADERS_BY_SIZE, _RAW_HEADER_ARRAYS, RAW_FRAME_LIMIT
        fromhex = bytearray.fromhex
        compress = None
        out: list[tuple[bytearray, bytearray]] = []
        append = out.append
        for oid, kind, body in objects:
            size = len(body)
            if size > limit:
                self.check_size(body)
            header = by_size[kind].get(size)
            if header is None:
                header = _new_header(kind, size)
            data = header + body
            length = len(data)
            if length <= raw_limit:
                append((fromhex(oid), headers[length] + data))  # (a new bytearray)
            else:
                if compress is None:
                    compress = _compressor().compress
                append((fromhex(oid), bytearray(compress(data))))
        return out

    def decode(self, oid: str, frame: bytes) -> tuple[Kind, bytes]:
        """Decode a stored frame, verify it is the object ``oid``, return ``(kind, body)``."""
        data = bounded_decompress(frame, self.max_object_size + MAX_HEADER_LENGTH, oid)
        return parse_canonical(oid, data)
