"""pack: every stored copy into one new pack, compressed with a trained dictionary.

Small objects compress poorly one zstd frame at a time, so a pack groups consecutive
objects (in the order of ``layout.pack_order``) into blocks and compresses each block
with a zstd dictionary trained on the store's own objects, kept only when a measurement
says it pays; the dictionary is stored in the pack. The new pack is complete and
published before any loose copy or old pack goes, so a crash at any point leaves a
valid store (at worst with duplicates, which the next pack removes).

Damage does not stop it: an object with no intact copy cannot be packed, so its copies
stay where they are (the loose file, or the whole pack holding it) and fsck keeps
reporting it, while everything intact is packed.

Works on any backend with ``capabilities.stored_copies`` (see ``backends.copies``);
the algorithms here (order, dictionary) are the backend's concern no further.
"""

from __future__ import annotations

import time
from collections.abc import Iterable

import zstandard

from ..backends import Store
from ..backends.copies import PackOptions, StoredCopies, WrittenPack
from ..errors import InvalidInputError, JournalError
from ..objects import Kind, canonical_form, object_id
from ..packs import PackedObject
from .layout import pack_order
from .reports import PackReport, Progress

PACK_LEVEL = 19
"""zstd level for packs: packing is rare and reads do not pay for it."""
PACK_BLOCK_SIZE = 256 * 1024
"""Raw bytes per block: bigger blocks compress better, smaller ones read faster."""
DICTIONARY_SIZE = 64 * 1024
DICTIONARY_SAMPLE_BYTES = 8 * 1024 * 1024
DICTIONARY_MIN_SAMPLES = 64
SMALL_OBJECT = 16 * 1024


def stored_copies(store: Store) -> StoredCopies:
    """The store's own copies; InvalidInputError for a backend that keeps none."""
    if not store.capabilities.stored_copies or store.stored_copies is None:
        raise InvalidInputError(
            f"{store.url}: this backend keeps no copies of its own to pack or verify "
            "one by one (every object is stored once, as it is)"
        )
    return store.stored_copies


def train_dictionary(copies: StoredCopies, order: list[str]) -> PackedObject | None:
    """A zstd dictionary trained on a spread of the store's small objects (or None)."""
    samples: list[bytes | bytearray | memoryview] = []
    total = 0
    step = max(1, len(order) // 4000)
    for oid in order[::step]:
        try:
            data = copies.read_canonical(oid)
        except JournalError:
            continue  # damaged: fsck reports it; it is not a sample
        if len(data) <= SMALL_OBJECT:
            samples.append(data)
            total += len(data)
            if total >= DICTIONARY_SAMPLE_BYTES:
                break
    if len(samples) < DICTIONARY_MIN_SAMPLES or total < 4 * DICTIONARY_SIZE:
        return None
    try:
        trained = zstandard.train_dictionary(DICTIONARY_SIZE, samples)
    except zstandard.ZstdError:
        return None  # not enough variety to train on; blocks still compress without one
    if not _dictionary_pays(trained, samples, scale=step):
        return None
    data = trained.as_bytes()
    return PackedObject(object_id(Kind.BLOB, data), canonical_form(Kind.BLOB, data))


def _dictionary_pays(
    trained: zstandard.ZstdCompressionDict,
    samples: list[bytes | bytearray | memoryview],
    scale: int,
) -> bool:
    """Measure: compress the samples in blocks with and without the dictionary and keep
    it only if the estimated saving over the whole pack exceeds twice its own size."""
    plain = zstandard.ZstdCompressor(level=3)
    with_dict = zstandard.ZstdCompressor(level=3, dict_data=trained)
    saved = 0
    block: list[bytes] = []
    for sample in [*samples, None]:
        if sample is not None:
            block.append(bytes(sample))
        if block and (sample is None or sum(map(len, block)) >= PACK_BLOCK_SIZE):
            raw = b"".join(block)
            saved += len(plain.compress(raw)) - len(with_dict.compress(raw))
            block = []
    cost = len(plain.compress(trained.as_bytes()))
    return saved * scale > 2 * cost


def write_ordered_pack(
    store: Store, copies: StoredCopies, oids: Iterable[str], progress: Progress | None = None
) -> WrittenPack:
    """Write ``oids`` as one new maintained pack in pack order, with a dictionary when
    it pays. Nothing is removed; objects without an intact copy are skipped."""
    order = pack_order(store, oids)
    options = PackOptions(
        level=PACK_LEVEL, block_size=PACK_BLOCK_SIZE, dictionary=train_dictionary(copies, order)
    )
    return copies.write_pack(order, options, progress)


def pack(store: Store, *, progress: Progress | None = None) -> PackReport:
    """Pack every loose copy and merge every pack into one (a no-op if already so)."""
    started = time.monotonic()
    copies = stored_copies(store)
    with copies.maintenance_lock():
        packs = copies.packs()
        loose: set[str] = set()
        packed: dict[str, set[str]] = {}  # oid -> the packs holding it
        for copy in copies.scan():
            if copy.pack is None:
                loose.add(copy.oid)
            else:
                packed.setdefault(copy.oid, set()).add(copy.pack)
        before = store.objects.usage()
        bytes_before = before["loose_bytes"] + before["packed_bytes"]
        if not loose and (not packs or (len(packs) == 1 and packs[0].maintained)):
            return PackReport(bytes_before=bytes_before, bytes_after=bytes_before)
        dictionaries = {p.dictionary_oid for p in packs if p.dictionary_oid}
        written = write_ordered_pack(store, copies, (loose | set(packed)) - dictionaries, progress)
        new = written.pack
        # damaged objects keep every copy they have; everything else is now in ``new``
        copies.delete_loose(loose - written.skipped, None)
        keep = {name for oid in written.skipped for name in packed.get(oid, ())}
        if new is not None:
            keep.add(new.name)
        # only the packs listed above: a writer may have published a batch pack since,
        # and that one is not in the new pack
        old = [p.name for p in packs if p.name not in keep]
        copies.retire_packs(old, None)
        after = store.objects.usage()
    return PackReport(
        objects=new.objects if new else 0,
        loose_objects_packed=len(loose - written.skipped),
        packs_merged=len(old),
        bytes_before=bytes_before,
        bytes_after=after["loose_bytes"] + after["packed_bytes"],
        dictionary_bytes=_dictionary_bytes(copies, new.dictionary_oid if new else None),
        damaged_objects_left=len(written.skipped),
        seconds=round(time.monotonic() - started, 3),
    )


def _dictionary_bytes(copies: StoredCopies, oid: str | None) -> int:
    if oid is None:
        return 0
    data = copies.read_canonical(oid)
    return len(data) - data.index(b"\0") - 1
