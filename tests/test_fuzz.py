"""Bad input: truncated, bit-flipped and crafted bytes must give a clear JournalError.

Fuzzed: the object decoder, the pack index and data readers, the JSONL importer, the
sync receiver (a source store that lies), and refs/reflogs/leases holding garbage on a
local store. Each input either reads back exactly right or raises a JournalError
subclass; nothing hangs, nothing raises another exception type, and the destination
store stays fsck-clean.
"""

from __future__ import annotations

import itertools
import os
import shutil
import struct
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.store_helpers import add_reflog_row, set_ref_raw

import cas_journal as cj
from cas_journal.backends import LocalStore, MemoryStore
from cas_journal.backends.local.packs import LocalPack, write_pack
from cas_journal.errors import CorruptObject, CorruptRef, JournalError
from cas_journal.maintenance import fsck, sync
from cas_journal.maintenance.transfer import export_thread, import_jsonl
from cas_journal.objects import Kind, ObjectCodec, canonical_form, object_id
from cas_journal.packs import PackedObject

CODEC = ObjectCodec(max_object_size=1 << 20)
SAMPLES = [
    (Kind.BLOB, b"hello"),
    (Kind.BLOB, b""),
    (Kind.ENTRY, b'{"x":1}' * 50),
    (Kind.BLOB, bytes(range(256)) * 20),
]
FRAMES = [CODEC.encode(kind, body) for kind, body in SAMPLES]
BOMB = b"\x28\xb5\x2f\xfd\xe0" + (2**40).to_bytes(8, "little") + b"\x01\x00\x00"
"""A zstd frame header declaring a 1 TiB content size."""


def _mutate(data: bytes, cut: int, flips: list[tuple[int, int]]) -> bytes:
    out = bytearray(data[: max(0, len(data) - cut)] if cut else data)
    for position, bit in flips:
        if out:
            out[position % len(out)] ^= 1 << (bit % 8)
    return bytes(out)


mutations = st.tuples(
    st.integers(0, 40), st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 7)), max_size=4)
)


# -- the object decoder ------------------------------------------------------------------


@settings(max_examples=400)
@given(st.sampled_from(range(len(FRAMES))), mutations, st.binary(max_size=16))
def test_decoder_mutated_frames(
    which: int, mutation: tuple[int, list[tuple[int, int]]], tail: bytes
) -> None:
    oid, frame = FRAMES[which]
    data = _mutate(frame, *mutation) + tail
    try:
        kind, body = CODEC.decode(oid, data)
    except CorruptObject as exc:
        assert str(exc)
        return
    assert (kind, body) == SAMPLES[which]  # a decode that succeeds is the right object


@settings(max_examples=300)
@given(st.binary(max_size=200), st.sampled_from([oid for oid, _ in FRAMES]))
def test_decoder_arbitrary_bytes(data: bytes, oid: str) -> None:
    with pytest.raises(CorruptObject):
        CODEC.decode(oid, data)


def test_decoder_refuses_a_decompression_bomb_before_allocating() -> None:
    with pytest.raises(CorruptObject, match="more than the"):
        CODEC.decode("0" * 64, BOMB)


# -- pack index and data -------------------------------------------------------------------


def _make_pack(
    directory: Path, dictionary: bool = False
) -> tuple[Path, dict[str, tuple[Kind, bytes]]]:
    objects = {}
    packed = []
    for i in range(120):
        kind = Kind.ENTRY if i % 3 else Kind.BLOB
        body = b'{"n":%d,"text":"%s"}' % (i, b"abc" * (i % 17))
        oid = object_id(kind, body)
        objects[oid] = (kind, body)
        packed.append(PackedObject(oid, canonical_form(kind, body)))
    zdict = None
    if dictionary:
        raw = b"dictionary content " * 40
        zdict = PackedObject(object_id(Kind.BLOB, raw), canonical_form(Kind.BLOB, raw))
    index = write_pack(directory, packed, durable=False, block_size=1024, dictionary=zdict)
    assert index is not None
    return index, objects


@pytest.fixture(scope="module")
def pristine(
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[Path, dict[str, tuple[Kind, bytes]]]:
    directory = tmp_path_factory.mktemp("pack")
    return _make_pack(directory)


def _read_everything(index: Path) -> tuple[list[tuple[str, tuple[Kind, bytes]]], bool]:
    """Every object the index lists, read and verified, and whether the index's trailer
    matches its content. Raises the first error a read raises."""
    reader = LocalPack(index, CODEC.max_object_size)
    try:
        out = []
        for position in range(reader.count):
            oid = reader.oid_at(position)
            out.append((oid, reader.read(oid)))
        return out, reader.verify_trailer()
    finally:
        reader.close()


def _check_pack(index: Path, objects: dict[str, tuple[Kind, bytes]], pristine_index: bytes) -> None:
    """A damaged pack either raises a JournalError (nothing else) or reads back exactly
    the objects it was written with; and a changed index never goes unnoticed."""
    try:
        found, trailer_ok = _read_everything(index)
    except JournalError as exc:
        assert str(exc)
        return
    index_changed = index.read_bytes() != pristine_index
    assert not (index_changed and trailer_ok), "a changed index passed its trailer check"
    assert len(found) == len(objects) or index_changed
    for oid, value in found:
        assert objects[oid] == value  # verified reads never return wrong data


@pytest.mark.slow
@settings(max_examples=250)
@given(st.booleans(), mutations)
def test_pack_files_truncated_and_bit_flipped(
    pristine: tuple[Path, dict[str, tuple[Kind, bytes]]],
    tmp_path_factory: pytest.TempPathFactory,
    damage_index: bool,
    mutation: tuple[int, list[tuple[int, int]]],
) -> None:
    index, objects = pristine
    directory = tmp_path_factory.mktemp("damaged")
    for path in (index, index.with_suffix(".pack")):
        shutil.copy(path, directory / path.name)
    target = directory / (index.name if damage_index else index.with_suffix(".pack").name)
    target.chmod(0o644)
    target.write_bytes(_mutate(target.read_bytes(), *mutation))
    _check_pack(directory / index.name, objects, index.read_bytes())


HEADER = struct.Struct("<8sQQQ32sQ")


def _craft(index: Path, edit: str, value: int) -> bytes:
    data = bytearray(index.read_bytes())
    magic, count, blocks, size, dict_oid, flags = HEADER.unpack_from(data, 0)
    fanout_at = HEADER.size
    oids_at = fanout_at + 1024
    locations_at = oids_at + count * 32
    blocks_at = locations_at + count * 12 + count * 4
    if edit == "count":
        HEADER.pack_into(data, 0, magic, value, blocks, size, dict_oid, flags)
    elif edit == "blocks":
        HEADER.pack_into(data, 0, magic, count, value, size, dict_oid, flags)
    elif edit == "pack_size":
        HEADER.pack_into(data, 0, magic, count, blocks, value, dict_oid, flags)
    elif edit == "fanout":
        struct.pack_into("<I", data, fanout_at + 4 * (value % 255), 2**32 - 1 - value)
    elif edit == "location_block":
        struct.pack_into("<I", data, locations_at + 12 * (value % count), value)
    elif edit == "location_offset":
        struct.pack_into("<I", data, locations_at + 12 * (value % count) + 4, value)
    elif edit == "location_length":
        struct.pack_into("<I", data, locations_at + 12 * (value % count) + 8, value)
    elif edit == "block_offset":
        struct.pack_into("<Q", data, blocks_at + 20 * (value % blocks), value)
    elif edit == "block_clen":
        struct.pack_into("<I", data, blocks_at + 20 * (value % blocks) + 8, value)
    elif edit == "block_rlen":
        struct.pack_into("<I", data, blocks_at + 20 * (value % blocks) + 12, value)
    elif edit == "block_flags":  # dictionary-compressed blocks in a pack without one
        struct.pack_into("<I", data, blocks_at + 20 * (value % blocks) + 16, 1)
    return bytes(data)


@pytest.mark.slow
@settings(max_examples=300)
@given(
    st.sampled_from(
        [
            "count",
            "blocks",
            "pack_size",
            "fanout",
            "location_block",
            "location_offset",
            "location_length",
            "block_offset",
            "block_clen",
            "block_rlen",
            "block_flags",
        ]
    ),
    st.one_of(st.integers(0, 300), st.integers(0, 2**32 - 1)),
)
def test_pack_index_fields_that_lie(
    pristine: tuple[Path, dict[str, tuple[Kind, bytes]]],
    tmp_path_factory: pytest.TempPathFactory,
    edit: str,
    value: int,
) -> None:
    index, objects = pristine
    directory = tmp_path_factory.mktemp("crafted")
    shutil.copy(index.with_suffix(".pack"), directory / index.with_suffix(".pack").name)
    (directory / index.name).write_bytes(_craft(index, edit, value))
    _check_pack(directory / index.name, objects, index.read_bytes())


def test_a_dictionary_block_that_is_itself_dictionary_compressed(tmp_path: Path) -> None:
    index, objects = _make_pack(tmp_path, dictionary=True)
    reader = LocalPack(index, CODEC.max_object_size)
    assert reader.dictionary_oid is not None
    reader.close()
    data = bytearray(index.read_bytes())
    _, count, _blocks, *_ = HEADER.unpack_from(data, 0)
    blocks_at = HEADER.size + 1024 + count * 48
    struct.pack_into("<I", data, blocks_at + 16, 1)  # block 0 holds the dictionary
    index.chmod(0o644)
    index.write_bytes(bytes(data))
    reader = LocalPack(index, CODEC.max_object_size)
    oid = next(o for o in objects)
    with pytest.raises(CorruptObject, match="dictionary"):
        reader.read(oid)
    reader.close()


def test_an_index_pointing_past_its_pack_file(tmp_path: Path) -> None:
    index, _ = _make_pack(tmp_path)
    pack = index.with_suffix(".pack")
    pack.chmod(0o644)
    pack.write_bytes(pack.read_bytes()[:-100])
    with pytest.raises(CorruptObject, match="its index says"):
        LocalPack(index, CODEC.max_object_size)


# -- the JSONL importer --------------------------------------------------------------------


@pytest.fixture(scope="module")
def export_lines() -> list[str]:
    j = cj.Journal.memory()
    j.create_thread(cj.ThreadMeta(id="src", title="exported"))
    first = None
    for i in range(6):
        e = cj.append_message(j, "src", f"u{i}", cj.Message(role="user", content=f"message {i} ü"))
        first = first or e
    j.append(
        cj.Entry(
            thread_id="src",
            type=cj.EntryType.USER_MESSAGE,
            message=cj.Message(role="user", content="branch"),
        ),
        parent_id=first.id,
    )
    return list(export_thread(j, "src"))


@settings(max_examples=250)
@given(
    st.integers(0, 20),
    st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 7)), max_size=3),
    st.integers(0, 30),
    st.booleans(),
)
def test_importer_on_damaged_exports(
    export_lines: list[str], line: int, flips: list[tuple[int, int]], cut: int, drop: bool
) -> None:
    lines = [text.encode("utf-8") for text in export_lines]
    target = line % len(lines)
    if drop:
        del lines[target]
    else:
        lines[target] = _mutate(lines[target], cut, flips)
    j = cj.Journal.memory()
    try:
        report = import_jsonl(j, lines)
    except JournalError as exc:
        assert str(exc)
        assert j.list_threads(include_archived=True) == []  # nothing half-imported
        assert list(j.store.objects.iter_oids()) == []
        return
    assert fsck(j.store).ok
    for thread_id in report.threads_created:
        path = j.path(thread_id)
        assert all(a.id == b.parent_id for a, b in itertools.pairwise(path))


# -- the sync receiver -----------------------------------------------------------------------


def _source_with_history() -> tuple[MemoryStore, cj.Journal]:
    store = MemoryStore()
    j = cj.Journal(store)
    j.create_thread(cj.ThreadMeta(id="t"))
    for i in range(5):
        j.append(
            cj.Entry(
                thread_id="t",
                type=cj.EntryType.USER_MESSAGE,
                message=cj.Message(role="user", content=f"m{i}"),
            )
        )
    j.checkpoints.save(
        cj.Checkpoint(run_id="r", iteration=1, messages=[{"role": "user", "content": "hi"}])
    )
    return store, j


LIES = [
    "other-content",
    "truncated",
    "bomb",
    "garbage-frame",
    "wrong-kind-ref",
    "garbage-ref",
    "missing-ref",
    "blob-for-entry",
]


@pytest.mark.slow
@given(st.sampled_from(LIES), st.integers(0, 10**6))  # the profile's count: 25, 100 in CI
def test_sync_from_a_lying_source(
    tmp_path_factory: pytest.TempPathFactory, lie: str, pick: int
) -> None:
    src, _j = _source_with_history()
    oids = sorted(src.objects.iter_oids())
    victim = oids[pick % len(oids)]
    _, frame = src.objects.codec.encode(Kind.BLOB, b"a lie")
    if lie == "other-content":
        src.objects.corrupt_for_tests(victim, frame)
    elif lie == "truncated":
        good = src.objects._frames[victim]
        src.objects.corrupt_for_tests(victim, good[: len(good) // 2])
    elif lie == "bomb":
        src.objects.corrupt_for_tests(victim, BOMB)
    elif lie == "garbage-frame":
        src.objects.corrupt_for_tests(victim, os.urandom(40))
    elif lie == "wrong-kind-ref":
        blob = src.objects.put(Kind.BLOB, b"not a thread state")
        src.refs.set_if_equals("threads/liar", None, blob)
    elif lie == "garbage-ref":
        src.refs.set_if_equals("threads/liar", None, "this is not an oid")
    elif lie == "missing-ref":
        src.refs.set_if_equals("checkpoints/liar", None, "ab" * 32)
    elif lie == "blob-for-entry":  # a thread state whose leaf names a blob
        blob = src.objects.put(Kind.BLOB, b"pretending to be an entry")
        from cas_journal.objects import ThreadStateNode

        state = ThreadStateNode(
            {"id": "liar", "created_at": "2026-01-01T00:00:00.000000Z"}, blob, (blob,)
        )
        src.refs.set_if_equals("threads/liar", None, src.objects.put(Kind.THREAD, state.body()))
    dst_dir = tmp_path_factory.mktemp("dst")
    dst = LocalStore(dst_dir / "s", durable=False)
    try:
        try:
            sync(src, dst)
            lied = lie in ("wrong-kind-ref", "garbage-ref", "missing-ref", "blob-for-entry")
            assert not lied, "sync accepted a lie"
            # a damaged object no ref reaches may go unnoticed; what was copied is right
        except JournalError as exc:
            assert str(exc)
        report = fsck(dst)
        assert report.ok, report.problems
        for oid in dst.objects.iter_oids():
            assert src.objects.has(oid)
    finally:
        dst.close()


def test_sync_names_a_bad_ref_with_a_journal_error(tmp_path: Path) -> None:
    """Regression (fixed in maintenance/sync.py): asking sync for a ref outside threads/
    and checkpoints/ raised a bare ValueError, not a JournalError."""
    src, _ = _source_with_history()
    dst = LocalStore(tmp_path / "s", durable=False)
    with pytest.raises(cj.InvalidInputError, match="only thread and checkpoint refs"):
        sync(src, dst, refs=["leases/t"])
    dst.close()


# -- refs, reflogs and leases holding garbage ------------------------------------------------


GARBAGE = ["", "\n", "two\nlines", b"\xff\xfe", b"bytes, not text", 42, "x" * 80_000, "zz" * 32]


@pytest.mark.parametrize("garbage", GARBAGE, ids=range(len(GARBAGE)))
def test_refs_holding_garbage(tmp_path: Path, garbage: object) -> None:
    with cj.Journal.open(tmp_path / "s", durable=False) as j:
        j.create_thread(cj.ThreadMeta(id="t"))
        j.append(
            cj.Entry(
                thread_id="t",
                type=cj.EntryType.USER_MESSAGE,
                message=cj.Message(role="user", content="hi"),
            )
        )
        j.checkpoints.save(cj.Checkpoint(run_id="r", iteration=1, messages=[{"a": 1}]))
        root = j.store.root
    for name in ("threads/t", "checkpoints/r"):
        set_ref_raw(root, name, garbage)
    with cj.Journal.open(root, durable=False) as j:
        with pytest.raises(JournalError):
            j.thread("t")
        with pytest.raises(JournalError):
            j.checkpoints.load("r")
        report = fsck(j.store)
        assert not report.ok
        assert any("threads/t" in p.subject or "threads/t" in p.message for p in report.problems)


@pytest.mark.parametrize(
    "row",
    [
        ("", 42, "x", 1),
        (None, None, "yesterday", "r"),
        (None, "zz\n", 5, "r"),
        (b"\x00\xff", None, 5, "r"),
        (None, None, -5, "r"),
        (None, None, 2**62, "r"),
        (None, None, 5, b"bytes"),
        (None, None, 5.5, "r"),
    ],
)
def test_reflogs_holding_garbage(tmp_path: Path, row: tuple[object, ...]) -> None:
    with cj.Journal.open(tmp_path / "s", durable=False) as j:
        j.create_thread(cj.ThreadMeta(id="t"))
        root = j.store.root
    add_reflog_row(root, "threads/t", *row)
    with cj.Journal.open(root, durable=False) as j:
        with pytest.raises(CorruptRef):
            j.store.refs.reflog("threads/t")
        report = fsck(j.store)
        assert not report.ok  # reported, not raised
        assert j.thread("t").id == "t"


@pytest.mark.parametrize(
    "value",
    [
        "{}",
        "not json",
        '{"thread_id":"t"}',
        '{"thread_id":"t","turn_id":"u","owner_id":"o","created_at":"yesterday"}',
    ],
)
def test_leases_holding_garbage(tmp_path: Path, value: str) -> None:
    with cj.Journal.open(tmp_path / "s", durable=False) as j:
        j.create_thread(cj.ThreadMeta(id="t"))
        root = j.store.root
    set_ref_raw(root, "leases/t", value)
    with cj.Journal.open(root, durable=False) as j:
        with pytest.raises(CorruptRef):
            j.active_turn_lease("t")
        report = fsck(j.store)
        assert not report.ok and any("leases/t" in p.subject for p in report.problems)
