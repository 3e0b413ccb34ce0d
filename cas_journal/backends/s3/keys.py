"""Where things live in the bucket, and an order-preserving encoding of ref names into keys.

Layout under the store's key prefix (``<prefix>/`` or nothing for a whole bucket)::

    FORMAT                          "cas-journal <version>"
    MANIFEST                        the live and condemned packs (manifest.py)
    MAINTENANCE                     the lease of the one pack or gc at work (lease.py)
    packs/pack-<40 hex>.pack|.idx   a pack's data and index (the local store's format)
    objects/ab/cdef...              loose objects, one per key: its zstd frame (as the
                                    local store's loose files)
    refs/<namespace>/<enc>          one ref per key (see refs.py for the body)
    logs/<namespace>/<enc>/<entry>  one reflog entry per key, ``<entry>`` = time + nonce
    hrefs/<hash>                    refs whose names are too long for a key
    hlogs/<hash>/<entry>            their reflog entries

``<enc>`` is the UTF-8 bytes of the part after ``<namespace>/`` in an *order-preserving*,
prefix-free code over ``- . ! 0-9 A-Z _ a-z``: bytes ``-``, ``0-8``, ``A-Y`` and ``a-y``
stand for themselves; every other byte is a leader character followed by its two
uppercase hex digits, the leader chosen from the byte's range (``!`` for 00-2C, ``.`` for
2E-2F, ``9`` for 39-40, ``Z`` for 5A-5E, ``_`` for 5F-60, ``z`` for 7A-FF). Leaders and
literals increase with the bytes they stand for, so keys sort exactly like names (by
code point), a name prefix maps to a key prefix, and S3 listings come back in name order
with no client-side sort. Keys contain no ``/`` inside ``<enc>``, no ``..`` segment, no
character S3 asks clients to avoid, and no two names share a key.

A name whose longest key (a reflog entry) would exceed S3's 1,024-byte limit is stored
under the BLAKE3 hash of the name instead (``hrefs/``, ``hlogs/``); its ref and reflog
bodies carry the real name, which listings read back (once per process, then cached).
"""

from __future__ import annotations

from dataclasses import dataclass

import blake3

from ...errors import InvalidInputError
from ...names import split_ref_name
from ...objects import is_oid

MAX_KEY_BYTES = 1024
"""S3's limit on the UTF-8 length of a key."""
MAX_PREFIX_BYTES = 512
"""Longest store prefix accepted, so hashed keys always fit."""
ENTRY_NAME_LENGTH = 16 + 1 + 32
"""Length of a reflog entry's own name: 16 digits of microseconds, ``-``, 32 hex digits."""

_NAMESPACE_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789-_")
_LITERALS = frozenset(
    b"-012345678ABCDEFGHIJKLMNOPQRSTUVWXYabcdefghijklmnopqrstuvwxy",
)
# (first byte, last byte, leader) for every escaped range, in byte order
_RANGES = (
    (0x00, 0x2C, "!"),
    (0x2E, 0x2F, "."),
    (0x39, 0x40, "9"),
    (0x5A, 0x5E, "Z"),
    (0x5F, 0x60, "_"),
    (0x7A, 0xFF, "z"),
)
_TOKENS: tuple[str, ...] = tuple(
    chr(byte)
    if byte in _LITERALS
    else next(f"{lead}{byte:02X}" for low, high, lead in _RANGES if low <= byte <= high)
    for byte in range(256)
)
_LEADER_RANGES = {lead: (low, high) for low, high, lead in _RANGES}
_HEX_DIGITS = frozenset("0123456789ABCDEF")


def encode_ordered(text: str) -> str:
    """Encode text into key characters; the code preserves order and prefixes."""
    return "".join(_TOKENS[byte] for byte in text.encode("utf-8"))


def decode_ordered(encoded: str) -> str:
    """Invert encode_ordered; raise ValueError on anything it cannot have produced."""
    raw = bytearray()
    i = 0
    while i < len(encoded):
        char = encoded[i]
        if char in _LEADER_RANGES:
            digits = encoded[i + 1 : i + 3]
            if len(digits) != 2 or not _HEX_DIGITS.issuperset(digits):
                raise ValueError(f"bad escape in key component {encoded[:80]!r}")
            byte = int(digits, 16)
            low, high = _LEADER_RANGES[char]
            if not low <= byte <= high:
                raise ValueError(f"non-canonical escape in key component {encoded[:80]!r}")
            raw.append(byte)
            i += 3
        elif len(char) == 1 and ord(char) < 128 and ord(char) in _LITERALS:
            raw.append(ord(char))
            i += 1
        else:
            raise ValueError(f"unexpected character in key component {encoded[:80]!r}")
    return raw.decode("utf-8")


def name_hash(name: str) -> str:
    """The hex digest that replaces a too-long name in keys."""
    return blake3.blake3(name.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class RefKeys:
    """The keys of one ref: its value and the directory of its reflog entries."""

    name: str
    ref: str
    log_dir: str
    hashed: bool

    def log_entry(self, micros: int, nonce: str) -> str:
        """The key of the reflog entry written at ``micros`` by the update ``nonce``."""
        return f"{self.log_dir}{micros:016d}-{nonce}"


class Layout:
    """Every key of one store, derived from its prefix."""

    def __init__(self, prefix: str) -> None:
        prefix = prefix.strip("/")
        if len(prefix.encode("utf-8")) > MAX_PREFIX_BYTES:
            raise InvalidInputError(f"S3 key prefix is longer than {MAX_PREFIX_BYTES} bytes")
        self.prefix = prefix
        self.base = f"{prefix}/" if prefix else ""
        self.format_key = f"{self.base}FORMAT"
        self.manifest_key = f"{self.base}MANIFEST"
        self.lease_key = f"{self.base}MAINTENANCE"
        self.packs = f"{self.base}packs/"
        self.objects = f"{self.base}objects/"
        self.refs = f"{self.base}refs/"
        self.logs = f"{self.base}logs/"
        self.hashed_refs = f"{self.base}hrefs/"
        self.hashed_logs = f"{self.base}hlogs/"

    # -- objects ----------------------------------------------------------------------

    def pack_data_key(self, name: str) -> str:
        """Key of a pack's data."""
        return f"{self.packs}{name}.pack"

    def pack_index_key(self, name: str) -> str:
        """Key of a pack's index."""
        return f"{self.packs}{name}.idx"

    def object_key(self, oid: str) -> str:
        """Key of the object ``oid``."""
        return f"{self.objects}{oid[:2]}/{oid[2:]}"

    def oid_from_key(self, key: str) -> str | None:
        """The oid an object key names, or None for a key that is not one of ours."""
        rest = key[len(self.objects) :]
        fanout, slash, tail = rest.partition("/")
        oid = fanout + tail
        if not key.startswith(self.objects) or not slash or len(fanout) != 2 or not is_oid(oid):
            return None
        return oid

    # -- refs -------------------------------------------------------------------------

    def ref_keys(self, name: str) -> RefKeys:
        """Keys of the ref ``name``; InvalidInputError if the name is malformed."""
        namespace, rest = split_ref_name(name)
        tail = f"{namespace}/{encode_ordered(rest)}"
        log_dir = f"{self.logs}{tail}/"
        if len(log_dir) + ENTRY_NAME_LENGTH <= MAX_KEY_BYTES:
            return RefKeys(name, f"{self.refs}{tail}", log_dir, hashed=False)
        digest = name_hash(name)
        return RefKeys(name, f"{self.hashed_refs}{digest}", f"{self.hashed_logs}{digest}/", True)

    def ordered_prefix(self, base: str, name_prefix: str) -> str | None:
        """The key prefix under ``base`` holding every ordered name starting with
        ``name_prefix``, or None if no valid name can start with it."""
        namespace, slash, rest = name_prefix.partition("/")
        if not _NAMESPACE_CHARS.issuperset(namespace):
            return None
        if not slash:
            return base + namespace
        return f"{base}{namespace}/{encode_ordered(rest)}"

    def name_from_key(self, base: str, key: str) -> str | None:
        """The name an ordered ref key (or reflog directory, without its ``/``) stands for."""
        if not key.startswith(base):
            return None
        namespace, slash, encoded = key[len(base) :].partition("/")
        if not slash or not namespace or not _NAMESPACE_CHARS.issuperset(namespace):
            return None
        try:
            rest = decode_ordered(encoded)
        except ValueError:
            return None
        name = f"{namespace}/{rest}"
        try:
            keys = self.ref_keys(name)
        except InvalidInputError:
            return None
        return None if keys.hashed else name
