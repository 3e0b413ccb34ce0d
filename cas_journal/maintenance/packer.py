"""pack: move loose objects and every pack into one new pack, compressed with a trained dictionary.

Small objects compress poorly one zstd frame at a time, so a pack groups consecutive
objects (in the order of ``layout.pack_order``) into blocks and compresses each block
with a zstd dictionary trained on the store's own objects; the dictionary is stored in
the pack. The new pack and its index are complete and synced before any loose object
or old pack is removed, so a crash at any point leaves a valid store (at worst with
duplicates, which the next pack removes).
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterable, Iterator

import zstandard

from ..backends import Store
from ..backends.local.fsutil import fsync_dir, storage_errors
from ..backends.local.objects import LocalObjectStore
from ..backends.local.packs import LocalPack, write_pack
from ..errors import InvalidInputError
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


def local_objects(store: Store) -> LocalObjectStore:
    """The local object store of ``store``; InvalidInputError for other backends."""
    if not isinstance(store.objects, LocalObjectStore):
        raise InvalidInputError(
            f"{store.url}: packing applies to local stores only (this backend keeps one "
            "object per key and needs no packing)"
        )
    return store.objects


def train_dictionary(objects: LocalObjectStore, order: list[str]) -> PackedObject | None:
    """A zstd dictionary trained on a spread of the store's small objects (or None)."""
    samples: list[bytes | bytearray | memoryview] = []
    total = 0
    step = max(1, len(order) // 4000)
    for oid in order[::step]:
        data, _ = objects.canonical(oid)
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


def repack(
    store: Store,
    keep: Iterable[str],
    progress: Progress | None = None,
    level: int = PACK_LEVEL,
    block_size: int = PACK_BLOCK_SIZE,
) -> tuple[LocalPack | None, list[LocalPack], int]:
    """Write ``keep`` as one new pack; return it, the packs it replaces, and their bytes.

    The caller removes the old packs and loose copies once it has checked the result.
    """
    objects = local_objects(store)
    old = objects.packs()
    old_bytes = sum(_size(pack.pack_path) + _size(pack.index_path) for pack in old)
    order = pack_order(store, keep)
    dictionary = train_dictionary(objects, order)

    def stream() -> Iterator[PackedObject]:
        for done, oid in enumerate(order, 1):
            data, when = objects.canonical(oid)
            if progress is not None and (done % 1000 == 0 or done == len(order)):
                progress("packing", done, len(order))
            yield PackedObject(oid, data, when)

    objects.packs_dir.mkdir(exist_ok=True)
    index = write_pack(
        objects.packs_dir, stream(), objects.durable, block_size, level, dictionary, True
    )
    objects.refresh_packs()
    new = None
    if index is not None:
        new = next(p for p in objects.packs() if p.index_path == index)
        missing = [oid for oid in order if new.position(oid) < 0]
        if missing:
            raise RuntimeError(f"new pack lacks {len(missing)} objects; nothing was removed")
    return new, [p for p in old if new is None or p.name != new.name], old_bytes


def remove_loose(objects: LocalObjectStore, oids: Iterable[str]) -> None:
    """Delete the loose copies of objects that are now packed."""
    directories: set[str] = set()
    for oid in oids:
        path = objects.loose_path(oid)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
            directories.add(os.path.dirname(path))
    if objects.durable:
        for directory in directories:
            fsync_dir(directory)


def _size(path: os.PathLike[str] | str) -> int:
    try:
        return os.stat(path).st_size
    except FileNotFoundError:
        return 0


def pack(store: Store, *, progress: Progress | None = None) -> PackReport:
    """Pack every loose object and merge every pack into one (a no-op if already so)."""
    started = time.monotonic()
    objects = local_objects(store)
    with storage_errors("packing"), objects.maintenance_lock():
        packs = objects.packs()
        loose = [oid for oid, _ in objects.iter_loose()]
        before = objects.usage()
        bytes_before = before["loose_bytes"] + before["packed_bytes"]
        if not loose and (not packs or (len(packs) == 1 and packs[0].maintained)):
            return PackReport(bytes_before=bytes_before, bytes_after=bytes_before)
        dictionaries = {p.dictionary_oid for p in packs if p.dictionary_oid}
        keep = (set(loose) | {oid for p in packs for oid in p.iter_oids()}) - dictionaries
        new, old, _ = repack(store, keep, progress)
        remove_loose(objects, loose)
        # only the packs whose objects are in ``keep``: a writer may have published a
        # batch pack since they were listed, and that one is not in the new pack
        listed = {p.name for p in packs}
        for pack_reader in old:
            if pack_reader.name in listed:
                objects.remove_pack(pack_reader)
        after = objects.usage()
    return PackReport(
        objects=new.count if new else 0,
        loose_objects_packed=len(loose),
        packs_merged=len(old),
        bytes_before=bytes_before,
        bytes_after=after["loose_bytes"] + after["packed_bytes"],
        dictionary_bytes=_dictionary_bytes(new),
        seconds=round(time.monotonic() - started, 3),
    )


def _dictionary_bytes(pack_reader: LocalPack | None) -> int:
    if pack_reader is None or pack_reader.dictionary_oid is None:
        return 0
    return len(pack_reader.read(pack_reader.dictionary_oid)[1])
