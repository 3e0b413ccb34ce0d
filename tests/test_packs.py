"""The backend-neutral pack format: golden packs, the reader over any byte source, the
writer streaming to any sink, and the bounds a hostile index cannot get past."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import struct
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import cas_journal as cj
from cas_journal.backends import LocalStore
from cas_journal.backends.local.packs import LocalPack
from cas_journal.errors import CorruptObject, JournalError, ObjectNotFound
from cas_journal.maintenance import fsck
from cas_journal.objects import Kind, canonical_form, object_id, parse_canonical
from cas_journal.packs import (
    MAX_SHARED_BLOCK,
    PACK_MAGIC,
    BlockCache,
    BlockEntry,
    BufferSource,
    IndexEntry,
    PackedObject,
    PackIndex,
    PackReader,
    PackWriter,
    encode_index,
    pack_name,
)
from cas_journal.packs.index import HEADER

FIXTURES = Path(__file__).parent.parent / "fixtures" / "packs"
MANIFEST = json.loads((FIXTURES / "manifest.json").read_text())
LIMIT = 1 << 20


class ListSink:
    """A PackSink that keeps what it is given."""

    def __init__(self) -> None:
        self.parts: list[bytes] = []

    def write(self, data: bytes) -> None:
        self.parts.append(data)

    def data(self) -> bytes:
        return b"".join(self.parts)


class CountingSource(BufferSource):
    """A ByteSource that records every read (what a remote source would be asked)."""

    def __init__(self, buffer: bytes) -> None:
        super().__init__(buffer)
        self.reads: list[tuple[int, int]] = []

    def read(self, offset: int, length: int) -> bytes:
        self.reads.append((offset, length))
        return super().read(offset, length)


def blob(body: bytes, when: int = 0) -> PackedObject:
    return PackedObject(object_id(Kind.BLOB, body), canonical_form(Kind.BLOB, body), when)


def in_memory(objects: list[PackedObject], **options: object) -> tuple[bytes, bytes]:
    sink = ListSink()
    writer = PackWriter(sink, **options)  # type: ignore[arg-type]
    writer.add_all(objects)
    written = writer.finish()
    assert written is not None
    return sink.data(), written.index


def reader_over(data: bytes, index: bytes, cache: BlockCache | None = None) -> PackReader:
    return PackReader(PackIndex(index, pack_name(index)), BufferSource(data), LIMIT, cache)


# -- golden packs ----------------------------------------------------------------------------


@pytest.mark.parametrize("pack", MANIFEST["packs"], ids=lambda p: p["label"])
def test_golden_packs_read_back_and_their_indexes_reencode_byte_for_byte(pack):
    expected = {o["oid"]: bytes.fromhex(o["canonical_hex"]) for o in MANIFEST["objects"]}
    times = {o["oid"]: o["time"] for o in MANIFEST["objects"]}
    index_bytes = (FIXTURES / f"{pack['name']}.idx").read_bytes()
    assert pack_name(index_bytes) == pack["name"]
    local = LocalPack(FIXTURES / f"{pack['name']}.idx", LIMIT)
    index = local.index
    assert index.verify_trailer() and index.unsorted_at() == -1
    assert index.maintained == (pack["label"] == "dictionary")
    assert (index.dictionary_oid is not None) == (pack["label"] == "dictionary")
    assert index.count == len(expected) - (pack["label"] == "batch")
    for oid in index.iter_oids():
        assert local.read_canonical(oid) == expected[oid]
        assert local.time_at(local.position(oid)) == times[oid]
    reencoded = encode_index(
        index.entries(), index.blocks(), index.pack_size, index.dictionary_oid, index.maintained
    )
    assert reencoded == index_bytes
    walked = {w.oid: w.data for w in local.walk()}
    assert walked == {oid: expected[oid] for oid in index.iter_oids()}
    local.close()


@pytest.mark.parametrize("pack", MANIFEST["packs"], ids=lambda p: p["label"])
def test_the_writer_lays_out_the_golden_packs_again(pack):
    """Places, times and block contents are fixed by the format; only the compressed
    bytes may differ with another zstd version (and with this one they do not)."""
    import sys

    sys.path.insert(0, str(FIXTURES.parent))
    try:
        import make_golden_packs as golden
    finally:
        sys.path.pop(0)
    name, data, index_bytes = golden.build(pack["label"] == "dictionary")
    old = PackIndex((FIXTURES / f"{pack['name']}.idx").read_bytes())
    new = PackIndex(index_bytes)
    assert [(e.oid, e.block, e.offset, e.length, e.time) for e in new.entries()] == [
        (e.oid, e.block, e.offset, e.length, e.time) for e in old.entries()
    ]
    assert [(b.raw_length, b.flags) for b in new.blocks()] == [
        (b.raw_length, b.flags) for b in old.blocks()
    ]
    assert data[: len(PACK_MAGIC)] == PACK_MAGIC
    assert name == pack["name"]  # same zstd output: the same pack, byte for byte
    assert data == (FIXTURES / f"{pack['name']}.pack").read_bytes()


# -- writer and reader over byte sources -------------------------------------------------------


def test_a_pack_streams_to_a_sink_and_reads_from_a_source():
    objects = [blob(b"object %d " % i * (i % 40 + 1)) for i in range(300)]
    sink = ListSink()
    writer = PackWriter(sink, block_size=4096)
    writer.add_all(objects + objects[:10])  # repeats are written once
    written = writer.finish()
    assert written is not None and written.count == 300
    assert len(sink.parts) > 10  # streamed block by block, not gathered
    assert written.data_size == len(sink.data())
    reader = reader_over(sink.data(), written.index)
    for obj in objects:
        assert reader.read(obj.oid) == (Kind.BLOB, obj.data[obj.data.index(b"\0") + 1 :])
    with pytest.raises(ObjectNotFound):
        reader.read(object_id(Kind.BLOB, b"absent"))


def test_read_many_fetches_adjacent_blocks_in_one_read():
    objects = [blob(os.urandom(900)) for _ in range(60)]  # incompressible: one per block
    data, index = in_memory(objects, block_size=1000)
    source = CountingSource(data)
    reader = PackReader(PackIndex(index), source, LIMIT, BlockCache(max_bytes=1))
    source.reads.clear()
    wanted = [obj.oid for obj in objects[10:30]]
    found = {oid: body for oid, _, body in reader.read_many(wanted)}
    assert set(found) == set(wanted)
    assert len(source.reads) == 1  # twenty adjacent blocks, one ranged read
    far_apart = [objects[0].oid, objects[59].oid]
    source.reads.clear()
    assert len(list(reader.read_many(far_apart))) == 2


def test_a_walk_decompresses_each_block_once(monkeypatch):
    objects = [blob(b"walked object %d " % i * 20) for i in range(2000)]
    data, index = in_memory(objects, block_size=8192)
    reader = reader_over(data, index, BlockCache(max_bytes=1))  # nothing stays cached
    calls = []
    real = reader.decompress
    monkeypatch.setattr(reader, "decompress", lambda *a, **k: calls.append(a[0]) or real(*a, **k))
    walked = list(reader.walk())
    assert len(walked) == 2000 and all(w.data is not None for w in walked)
    assert sorted(calls) == list(range(reader.block_count))


def test_copy_blocks_checks_and_keeps_the_first_copy():
    first = [blob(b"shared %d" % i, when=100 + i) for i in range(50)]
    second = first[25:] + [blob(b"own %d" % i, when=5) for i in range(50)]
    readers = [reader_over(*in_memory(objs)) for objs in (first, second)]
    sink = ListSink()
    writer = PackWriter(sink)
    writer.copy_blocks(readers[0])
    writer.copy_blocks(readers[1], freshened=1000)
    written = writer.finish()
    assert written is not None and written.count == 100
    merged = reader_over(sink.data(), written.index)
    assert merged.time_at(merged.position(first[0].oid)) == 100  # its first copy's time
    assert merged.time_at(merged.position(second[-1].oid)) == 1000  # the freshened pack's
    for obj in first + second:
        assert merged.read_canonical(obj.oid) == obj.data


def test_the_writer_refuses_blocks_larger_than_a_shared_block():
    with pytest.raises(ValueError):
        PackWriter(ListSink(), block_size=MAX_SHARED_BLOCK + 1)


# -- bounds (issue 16 items 5 and 11) -------------------------------------------------------------


def _many_objects_in_one_big_block(count: int, size: int) -> tuple[bytes, bytes, list[str]]:
    """A hostile pack: one block of ``count`` objects of ``size`` bytes each, larger than
    any shared block may be, compressing to almost nothing."""
    import zstandard

    canonical = []
    oids = []
    for i in range(count):
        body = (b"%08d" % i) + bytes(size - 8)
        data = canonical_form(Kind.BLOB, body)
        canonical.append(data)
        oids.append(object_id(Kind.BLOB, body))
    content = b"".join(canonical)
    frame = zstandard.ZstdCompressor(level=1, write_content_size=True).compress(content)
    entries = []
    offset = 0
    for oid, data in zip(oids, canonical, strict=True):
        entries.append(IndexEntry(bytes.fromhex(oid), 0, offset, len(data), 1))
        offset += len(data)
    pack_data = PACK_MAGIC + frame
    index = encode_index(
        entries, [BlockEntry(len(PACK_MAGIC), len(frame), len(content), 0)], len(pack_data)
    )
    return pack_data, index, oids


def test_a_big_block_of_many_objects_is_refused_without_decompressing_it(monkeypatch):
    """Issue 16 item 5: one large block of many small objects made every object read
    decompress the whole block. A block over MAX_SHARED_BLOCK must hold one object."""
    data, index, oids = _many_objects_in_one_big_block(4000, 600)
    assert len(oids) * 600 > MAX_SHARED_BLOCK
    reader = reader_over(data, index)
    calls = []
    monkeypatch.setattr(reader, "decompress", lambda *a, **k: calls.append(a) or b"")
    with pytest.raises(CorruptObject, match="must hold one object"):
        reader.read(oids[17])
    walked = list(reader.walk())
    assert len(walked) == 4000 and all(w.error is not None for w in walked)
    assert calls == []


def test_fsck_reports_a_big_block_of_many_objects(tmp_path):
    store = LocalStore(tmp_path / "s", durable=False)
    data, index, oids = _many_objects_in_one_big_block(2500, 600)
    name = pack_name(index)
    (tmp_path / "s" / "packs" / f"{name}.pack").write_bytes(data)
    (tmp_path / "s" / "packs" / f"{name}.idx").write_bytes(index)
    again = LocalStore(tmp_path / "s", durable=False)
    with pytest.raises(CorruptObject):
        again.objects.get(oids[3])
    report = fsck(again)
    assert not report.ok
    assert any("must hold one object" in p.message for p in report.problems)
    store.close()
    again.close()


def _with_dictionary(tmp_path: Path) -> tuple[Path, list[PackedObject]]:
    from cas_journal.backends.local.packs import write_pack

    objects = [blob(b'{"role":"user","content":"message %d"}' % i) for i in range(200)]
    raw = b'{"role":"user","content":"message ' * 20
    index = write_pack(tmp_path, objects, durable=False, block_size=2048, dictionary=blob(raw))
    assert index is not None
    return index, objects


def test_a_damaged_dictionary_id_is_a_corrupt_object_not_a_key_error(tmp_path):
    """Issue 16 item 11: a pack whose header names a dictionary it does not hold raised a
    raw KeyError from every read (fsck, log, gc)."""
    index, objects = _with_dictionary(tmp_path)
    data = bytearray(index.read_bytes())
    fields = list(HEADER.unpack_from(data, 0))
    fields[4] = bytes(32 - 1) + b"\x01"  # a dictionary oid the pack does not hold
    HEADER.pack_into(data, 0, *fields)
    index.chmod(0o644)
    index.write_bytes(bytes(data))
    reader = LocalPack(index, LIMIT)
    with pytest.raises(CorruptObject, match="dictionary"):
        reader.read(objects[50].oid)
    errors = [w.error for w in reader.walk() if w.error is not None]
    assert errors and all(isinstance(e, CorruptObject) for e in errors)
    reader.close()


def test_a_damaged_dictionary_is_a_corrupt_object(tmp_path):
    index, objects = _with_dictionary(tmp_path)
    reader = LocalPack(index, LIMIT)
    dict_oid = reader.dictionary_oid
    assert dict_oid is not None
    _, block, _offset, _ = reader.index.place(reader.position(dict_oid))
    reader.close()
    pack = index.with_suffix(".pack")
    data = bytearray(pack.read_bytes())
    data[block.offset + block.compressed_length - 3] ^= 0x55
    pack.chmod(0o644)
    pack.write_bytes(bytes(data))
    reader = LocalPack(index, LIMIT)
    with pytest.raises(CorruptObject):
        reader.read(objects[0].oid)
    reader.close()


# -- fuzzing the index and block parsing --------------------------------------------------------

FUZZ_OBJECTS = [blob(b"fuzz object %d " % i * (i % 9 + 1)) for i in range(40)]
FUZZ_DATA, FUZZ_INDEX = in_memory(FUZZ_OBJECTS, block_size=512)
FUZZ_CANONICAL = {obj.oid: obj.data for obj in FUZZ_OBJECTS}


def _exercise(index_bytes: bytes, data: bytes) -> bool:
    """Decode and use a pack every way a reader can; only JournalErrors may escape, and
    anything returned is right. True if every object read back."""
    try:
        index = PackIndex(index_bytes)
    except CorruptObject:
        return False
    for number in range(min(index.block_count, 64)):
        with contextlib.suppress(CorruptObject):
            index.block(number)
    complete = True
    try:
        reader = PackReader(index, BufferSource(data), LIMIT, BlockCache(max_bytes=1 << 16))
    except CorruptObject:
        return False
    for position in range(min(index.count, 64)):
        try:
            oid = index.oid_at(position)
            index.time_at(position)
            reader.stored_size_at(position)
            data_read = reader.canonical_at(position)
            parse_canonical(oid, data_read)
        except JournalError:
            complete = False
            continue
        assert FUZZ_CANONICAL.get(oid, data_read) == data_read
    for walked in reader.walk():
        if walked.data is None:
            assert isinstance(walked.error, CorruptObject)
            complete = False
        else:
            assert FUZZ_CANONICAL.get(walked.oid, walked.data) == walked.data
    return complete and index.count == len(FUZZ_OBJECTS)


@settings(max_examples=300)
@given(st.binary(max_size=2000))
def test_fuzz_arbitrary_index_bytes(index_bytes):
    _exercise(index_bytes, FUZZ_DATA)


@settings(max_examples=300)
@given(
    st.sampled_from(["index", "data"]),
    st.lists(st.tuples(st.integers(0, 10**6), st.integers(1, 255)), min_size=1, max_size=6),
)
def test_fuzz_damaged_index_or_data(which, edits):
    target = bytearray(FUZZ_INDEX if which == "index" else FUZZ_DATA)
    for position, xor in edits:
        target[position % len(target)] ^= xor
    index_bytes, data = (
        (bytes(target), FUZZ_DATA) if which == "index" else (FUZZ_INDEX, bytes(target))
    )
    complete = _exercise(index_bytes, data)
    if which == "index" and complete and index_bytes != FUZZ_INDEX:
        # every object read back right through a changed index: the change is still seen
        assert not PackIndex(index_bytes).verify_trailer()


@settings(max_examples=200)
@given(
    st.integers(0, 2**32 - 1),
    st.integers(0, 2**32 - 1),
    st.integers(0, 2**32 - 1),
    st.integers(0, 39),
)
def test_fuzz_places_that_lie(block, offset, length, which):
    data = bytearray(FUZZ_INDEX)
    index = PackIndex(FUZZ_INDEX)
    places_at = HEADER.size + 1024 + index.count * 32
    struct.pack_into(
        "<III", data, places_at + 12 * which, block % (index.block_count + 2), offset, length
    )
    _exercise(bytes(data), FUZZ_DATA)


@settings(max_examples=200)
@given(
    st.integers(0, 2**64 - 1),
    st.integers(0, 2**32 - 1),
    st.integers(0, 2**32 - 1),
    st.integers(0, 3),
)
def test_fuzz_blocks_that_lie(offset, clen, rlen, flags):
    data = bytearray(FUZZ_INDEX)
    index = PackIndex(FUZZ_INDEX)
    blocks_at = len(data) - 32 - 20 * index.block_count
    struct.pack_into(
        "<QIII",
        data,
        blocks_at + 20 * (offset % index.block_count),
        offset % (len(FUZZ_DATA) + 8),
        clen % (len(FUZZ_DATA) + 8),
        rlen,
        flags,
    )
    _exercise(bytes(data), FUZZ_DATA)


def test_a_golden_pack_copied_into_a_store_reads_back(tmp_path):
    """Packs written before this reader (the golden ones) open in a store."""
    journal = cj.Journal.open(tmp_path / "s", durable=False)
    for entry in MANIFEST["packs"]:
        for suffix in (".idx", ".pack"):
            shutil.copy(FIXTURES / f"{entry['name']}{suffix}", tmp_path / "s" / "packs")
    for obj in MANIFEST["objects"]:
        kind, body = parse_canonical(obj["oid"], bytes.fromhex(obj["canonical_hex"]))
        assert journal.store.objects.get(obj["oid"]) == (kind, body)
    journal.close()
