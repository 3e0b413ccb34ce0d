"""The read path: pack blocks split into verified objects, the canonical entry parser
against the JSON one, neighbours kept for a chain walk, entries shared between forks,
and checkpoint messages that learn they hold no long integer."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, ValidationError
from support.journal_helpers import at, user

import cas_journal as cj
from cas_journal import maintenance
from cas_journal.backends import MemoryStore
from cas_journal.errors import CorruptObject, JournalError, ObjectNotFound
from cas_journal.journal.nearby import NearbyObjects
from cas_journal.journal.trusted import Constructor
from cas_journal.objects import (
    EntryNode,
    Kind,
    canonical_form,
    object_id,
    split_canonical_forms,
)
from cas_journal.objects import nodes as node_module

OIDS = st.text("0123456789abcdef", min_size=64, max_size=64)
KINDS = st.sampled_from(list(Kind))


# -- pack blocks ---------------------------------------------------------------------------


@given(st.lists(st.tuples(KINDS, st.binary(max_size=300)), max_size=8))
def test_split_names_each_object_by_its_hash(objects):
    data = b"".join(canonical_form(kind, body) for kind, body in objects)
    assert split_canonical_forms(data) == [
        (object_id(kind, body), kind, body) for kind, body in objects
    ]


@given(
    st.lists(st.tuples(KINDS, st.binary(max_size=60)), min_size=1, max_size=4),
    st.data(),
)
def test_damaged_blocks_split_into_consistent_objects_or_fail_clearly(objects, data):
    block = bytearray(b"".join(canonical_form(kind, body) for kind, body in objects))
    for _ in range(data.draw(st.integers(1, 3))):
        action = data.draw(st.sampled_from(["flip", "cut", "insert"]))
        at_ = data.draw(st.integers(0, max(0, len(block) - 1)))
        if action == "flip" and block:
            block[at_] ^= 1 << data.draw(st.integers(0, 7))
        elif action == "cut":
            del block[at_:]
        else:
            block[at_:at_] = data.draw(st.binary(min_size=1, max_size=4))
    try:
        found = split_canonical_forms(bytes(block))
    except CorruptObject:
        return
    assert b"".join(canonical_form(kind, body) for _, kind, body in found) == bytes(block)
    for oid, kind, body in found:
        assert oid == object_id(kind, body)


@given(st.binary(max_size=200))
def test_split_of_random_bytes_never_raises_anything_else(data):
    try:
        found = split_canonical_forms(data)
    except CorruptObject:
        return
    for oid, kind, body in found:
        assert oid == object_id(kind, body)


# -- entry nodes: the canonical parser against the JSON one --------------------------------


def _outcome(body: bytes, fast: bool) -> object:
    saved = node_module._canonical_entry_fields
    if not fast:
        node_module._canonical_entry_fields = lambda _body: None  # type: ignore[assignment]
    try:
        return EntryNode.parse(body, "0" * 64)
    except CorruptObject as exc:
        return ("error", str(exc))
    finally:
        node_module._canonical_entry_fields = saved


TURN_IDS = st.one_of(
    st.just(""), st.text(max_size=12), st.sampled_from(['a"b', "a\\b", "\x01", "é"])
)


@st.composite
def entry_nodes(draw: st.DrawFn) -> EntryNode:
    depth = draw(st.integers(0, 2**40))
    parent = draw(OIDS) if depth else None
    skip = draw(OIDS) if depth >= 2 else None
    second = draw(st.integers(0, 59))
    micros = draw(st.integers(0, 999_999))
    created = f"2026-0{draw(st.integers(1, 9))}-1{draw(st.integers(0, 9))}T12:34:{second:02d}.{micros:06d}Z"
    return EntryNode(draw(OIDS), created, depth, parent, skip, draw(TURN_IDS))


@given(entry_nodes())
def test_canonical_entry_bodies_parse_the_same_both_ways(node):
    body = node.body()
    assert _outcome(body, fast=True) == node
    assert _outcome(body, fast=False) == node


@given(entry_nodes(), st.data())
def test_damaged_entry_bodies_get_the_same_answer_both_ways(node, data):
    body = bytearray(node.body())
    position = data.draw(st.integers(0, len(body) - 1))
    choice = data.draw(st.sampled_from(["flip", "replace", "delete"]))
    if choice == "flip":
        body[position] ^= 1 << data.draw(st.integers(0, 7))
    elif choice == "replace":
        body[position] = data.draw(st.sampled_from(b'0a"\\{},:9Z-. \x00\xff'))
    else:
        del body[position]
    assert _outcome(bytes(body), fast=True) == _outcome(bytes(body), fast=False)


@given(entry_nodes(), st.data())
def test_the_deep_entry_pattern_reads_what_the_general_one_reads(node, data):
    body = bytearray(node.body())
    if data.draw(st.booleans()):  # damaged, or not
        position = data.draw(st.integers(0, len(body) - 1))
        body[position] = data.draw(st.sampled_from(b'0a"\\{},:9Z-. \x00'))
    text = bytes(body).decode("utf-8", "replace")
    deep = node_module._DEEP_ENTRY.fullmatch(text)
    general = node_module._CANONICAL_ENTRY.fullmatch(text)
    if deep is not None:
        assert general is not None and deep.groups() == general.groups()
    elif general is not None:  # the general pattern's alone: one lacking depth, parent or skip
        assert None in (general.group(2), general.group(3), general.group(5))


@pytest.mark.parametrize(
    "body",
    [
        b'{"created_at":"2026-13-01T00:00:00.000000Z","payload":"' + b"a" * 64 + b'"}',
        b'{"created_at":"2026-01-01T00:00:00.000000Z","depth":1,"payload":"' + b"a" * 64 + b'"}',
        b'{"created_at":"2026-01-01T00:00:00.000000Z","payload":"'
        + b"a" * 64
        + b'","turn_id":"\xff"}',
        b'{"created_at":"2026-01-01T00:00:00.000000Z","depth":2,"parent":"'
        + b"b" * 64
        + b'","payload":"'
        + b"a" * 64
        + b'"}',
    ],
)
def test_canonical_looking_but_invalid_entries_are_refused(body):
    assert _outcome(body, fast=True) == _outcome(body, fast=False)
    assert _outcome(body, fast=True)[0] == "error"  # type: ignore[index]


# -- neighbours ----------------------------------------------------------------------------


def _packed_thread(tmp_path, count: int = 40) -> tuple[cj.Journal, list[cj.Entry]]:
    j = cj.Journal.open(tmp_path / "store", durable=False)
    j.create_thread(cj.ThreadMeta(id="t"))
    written = [user(j, "t", f"message {i} " + "x" * (i % 7), now=at(i)) for i in range(count)]
    maintenance.pack(j.store)
    maintenance.gc(j.store, prune_now=True)
    return j, written


def test_a_packed_object_comes_with_its_block_neighbours_all_verified(tmp_path):
    j, written = _packed_thread(tmp_path)
    found = j.store.objects.get_with_neighbours(written[5].id)
    assert written[5].id in {oid for oid, _, _ in found}
    assert len(found) > 1
    for oid, kind, body in found:
        assert oid == object_id(kind, body)
        assert j.store.objects.get(oid) == (kind, body)


def test_an_unpacked_object_comes_alone(tmp_path):
    j = cj.Journal.open(tmp_path / "store", durable=False)
    j.create_thread(cj.ThreadMeta(id="t"))
    entry = user(j, "t", "hello", now=at(1))
    assert j.store.objects.get_with_neighbours(entry.id) == [
        (entry.id, *j.store.objects.get(entry.id))
    ]
    with pytest.raises(ObjectNotFound):
        j.store.objects.get_with_neighbours("f" * 64)


def _unpacked_thread(tmp_path, count: int) -> list[cj.Entry]:
    j = cj.Journal.open(tmp_path / "store", durable=False)
    j.create_thread(cj.ThreadMeta(id="t"))
    written = [user(j, "t", f"message {i}", now=at(i)) for i in range(count)]
    j.close()
    return written


def _row_queries(j: cj.Journal) -> list[str]:
    statements: list[str] = []
    j.store.objects.db.connection().set_trace_callback(statements.append)
    return statements


def test_an_unpacked_chain_is_read_a_window_of_rows_at_a_time(tmp_path):
    written = _unpacked_thread(tmp_path, count=300)
    j = cj.Journal.open(tmp_path / "store", durable=False)
    statements = _row_queries(j)
    assert j.path("t") == written
    reads = [sql for sql in statements if "FROM objects" in sql]
    assert len(reads) < len(written) // 10  # rows near each other come together


def test_an_unpacked_path_takes_what_row_windows_read_without_asking_the_store_again(tmp_path):
    written = _unpacked_thread(tmp_path, count=300)
    j = cj.Journal.open(tmp_path / "store", durable=False)
    store = j.store.objects
    asked: list[str] = []
    original = store.get_with_neighbours

    def counting(oid: str) -> list[tuple[str, Kind, bytes]]:
        asked.append(oid)
        return original(oid)

    store.get_with_neighbours = counting  # type: ignore[method-assign]
    assert j.path("t") == written
    assert len(asked) < len(written) // 10  # one per window, not one per node


def test_scattered_rows_are_read_one_at_a_time_and_windows_hold_only_what_was_asked(tmp_path):
    written = _unpacked_thread(tmp_path, count=300)
    j = cj.Journal.open(tmp_path / "store", durable=False)
    objects = j.store.objects
    for entry in written[::100]:  # far apart: no window is read
        assert objects.get_with_neighbours(entry.id) == [(entry.id, *objects.get(entry.id))]
        assert objects._window == {}
    for entry in reversed(written[-20:]):  # close together: windows of neighbours
        assert objects.get_with_neighbours(entry.id) == [(entry.id, *objects.get(entry.id))]
    assert objects._window
    assert all(len(frame) <= 64 * 1024 for frame in objects._window.values())


def test_a_damaged_row_read_with_a_window_is_a_clear_error(tmp_path):
    written = _unpacked_thread(tmp_path, count=60)
    j = cj.Journal.open(tmp_path / "store", durable=False)
    victim = bytes.fromhex(written[10].id)
    with j.store.objects.db.connection() as conn:  # a frame of another object
        conn.execute(
            "UPDATE objects SET frame = (SELECT frame FROM objects WHERE oid = ?) WHERE oid = ?",
            (bytes.fromhex(written[11].id), victim),
        )
    with pytest.raises(CorruptObject):
        cj.Journal.open(tmp_path / "store", durable=False).path("t")


def test_nearby_objects_hand_out_neighbours_once_and_stay_bounded(tmp_path):
    j, written = _packed_thread(tmp_path)
    calls: list[str] = []
    store = j.store.objects
    original = store.get_with_neighbours

    def counting(oid: str) -> list[tuple[str, Kind, bytes]]:
        calls.append(oid)
        return original(oid)

    store.get_with_neighbours = counting  # type: ignore[method-assign]
    nearby = NearbyObjects(store)
    ids = [entry.id for entry in written]
    got = {oid: (kind, body) for oid, kind, body in nearby.get_many(ids)}
    assert got == {oid: store.get(oid) for oid in ids}
    assert len(calls) < len(ids)  # blocks, not objects
    assert nearby.get(ids[0]) == store.get(ids[0])  # handed out already: read again
    small = NearbyObjects(store, max_bytes=200)
    small.get(ids[0])
    assert sum(len(body) for _, body in small._pending.values()) <= 200


class _Blocks:
    """An object store whose objects come in fixed blocks of neighbours (as packs)."""

    def __init__(self, blocks: list[list[tuple[str, bytes]]]) -> None:
        self.block_of = {oid: block for block in blocks for oid, _ in block}

    def get_with_neighbours(self, oid: str) -> list[tuple[str, Kind, bytes]]:
        return [(other, Kind.BLOB, body) for other, body in self.block_of[oid]]

    def get(self, oid: str) -> tuple[Kind, bytes]:
        return Kind.BLOB, dict(self.block_of[oid])[oid]


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.lists(st.integers(1, 60), min_size=1, max_size=8), min_size=1, max_size=12),
    st.lists(st.integers(0, 200), max_size=80),
    st.integers(1, 300),
)
def test_nearby_objects_stay_bounded_however_they_are_taken(
    sizes: list[list[int]], asks: list[int], max_bytes: int
) -> None:
    """Whatever order objects are asked for in (``get`` or the walker's ``take``), every
    answer is the object asked for, and the bodies kept never pass ``max_bytes``."""
    blocks = [
        [(f"{b:02x}{i:02x}", bytes([b % 256]) * size) for i, size in enumerate(block)]
        for b, block in enumerate(sizes)
    ]
    store = _Blocks(blocks)
    oids = [oid for block in blocks for oid, _ in block]
    nearby = NearbyObjects(store, max_bytes=max_bytes)  # type: ignore[arg-type]
    for number, ask in enumerate(asks):
        oid = oids[ask % len(oids)]
        taken = nearby.take(oid, None) if number % 3 == 0 else None
        found = taken if taken is not None else nearby.get(oid)
        assert found == store.get(oid)
        assert sum(len(body) for _, body in nearby._pending.values()) <= max_bytes


def test_nearby_objects_batch_the_rest_when_nothing_is_packed():
    store = MemoryStore().objects
    oids = [store.put(Kind.BLOB, f"blob {i}".encode()) for i in range(5)]
    batches: list[list[str]] = []
    original = store.get_many

    def recording(wanted):
        wanted = list(wanted)
        batches.append(wanted)
        return original(wanted)

    store.get_many = recording  # type: ignore[method-assign]
    got = {oid: body for oid, _, body in NearbyObjects(store).get_many(oids)}
    assert got == {oid: f"blob {i}".encode() for i, oid in enumerate(oids)}
    assert batches == [oids[1:]]


def test_a_damaged_block_falls_back_to_a_clear_error(tmp_path):
    j, _ = _packed_thread(tmp_path)
    j.close()
    pack = next((tmp_path / "store" / "packs").glob("*.pack"))
    data = bytearray(pack.read_bytes())
    for at_ in range(len(data) // 3, len(data), 97):
        data[at_] ^= 0x55
    pack.chmod(0o644)
    pack.write_bytes(bytes(data))
    reopened = cj.Journal.open(tmp_path / "store", durable=False)
    with pytest.raises(JournalError):
        reopened.path("t")


def test_a_packed_path_reads_back_what_was_written(tmp_path):
    j, written = _packed_thread(tmp_path, count=300)
    j.close()
    reopened = cj.Journal.open(tmp_path / "store", durable=False)
    assert reopened.path("t") == written


def test_a_full_node_cache_stays_bounded_and_paths_read_back_the_same(tmp_path, monkeypatch):
    from cas_journal.journal import graph

    j, written = _packed_thread(tmp_path, count=40)
    j.close()
    monkeypatch.setattr(graph, "NODE_CACHE_SIZE", 8)
    reopened = cj.Journal.open(tmp_path / "store", durable=False)
    assert reopened.path("t") == written
    assert len(reopened._graph._cache) <= 8


def test_a_thread_read_again_after_appends_extends_its_cached_path():
    j = cj.Journal.memory()
    j.create_thread(cj.ThreadMeta(id="a"))
    user(j, "a", "one", now=at(1))
    fresh = cj.Journal(j.store)
    first = fresh.path("a")
    user(fresh, "a", "two", now=at(2))
    paths = fresh._reader._paths
    second = fresh.path("a")
    assert second[:1] == first and len(second) == 2
    # the cached one-entry path is met on the way: its very Entry objects come first
    assert second[0] is first[0]
    assert paths.get(("a", second[-1].id)) is not None
    assert cj.Journal(j.store).path("a") == second


# -- entries shared between forks ------------------------------------------------------------


def test_forks_see_shared_entries_under_their_own_thread_id():
    j = cj.Journal.memory()
    j.create_thread(cj.ThreadMeta(id="a"))
    first = user(j, "a", "one", now=at(1))
    user(j, "a", "two", now=at(2))
    j.fork("a", entry_id=first.id, new_thread_id="b", now=at(3))
    user(j, "b", "three", now=at(4))
    fresh = cj.Journal(j.store)  # nothing cached
    a, b = fresh.path("a"), fresh.path("b")
    assert [e.thread_id for e in a] == ["a", "a"]
    assert [e.thread_id for e in b] == ["b", "b"]
    assert b[0].model_copy(update={"thread_id": "a"}) == a[0]
    assert b[0].model_fields_set == a[0].model_fields_set
    assert fresh.entry("b", first.id).thread_id == "b"
    assert fresh.entry("a", first.id).thread_id == "a"
    assert [e.thread_id for e in fresh.iter_path("b")] == ["b", "b"]


def test_cached_paths_stay_under_their_byte_bound_and_read_back_the_same(monkeypatch):
    from cas_journal.journal import entries

    monkeypatch.setattr(entries, "PATH_CACHE_BYTES", 40_000)
    j = cj.Journal.memory()
    j.create_thread(cj.ThreadMeta(id="a"))
    leaves = [user(j, "a", "x" * 2_000 + str(i), now=at(i)).id for i in range(12)]
    reader = j._reader
    reader._paths.max_weight = entries.PATH_CACHE_BYTES
    expected = {leaf: j.path("a", leaf) for leaf in leaves}
    for _ in range(2):
        for leaf in leaves:
            assert j.path("a", leaf) == expected[leaf]
            cached = [path.entries for path in reader._paths._data.values()]
            weights = [sum(map(entries.entry_weight, path)) for path in cached]
            assert sum(weights) <= entries.PATH_CACHE_BYTES
            assert all(weight > 0 for weight in weights)
    # the longest path weighs more than the bound: read every time, never cached
    assert ("a", leaves[-1]) not in reader._paths._data


def test_constructor_copies_share_nothing_mutable_with_the_original():
    build = Constructor(cj.Entry)
    original = build({"type": "custom", "metadata": {"k": "v"}})
    copy = build.replaced(original, {"thread_id": "t"})
    assert copy.thread_id == "t" and original.thread_id == ""
    assert copy.metadata == {"k": "v"} and copy.__dict__ is not original.__dict__
    assert "thread_id" in copy.model_fields_set and "thread_id" not in original.model_fields_set
    single = build.with_field(original, "thread_id", "t")
    assert single == copy and single.__dict__ is not original.__dict__
    assert single.model_fields_set == copy.model_fields_set
    again = build.with_field(copy, "thread_id", "u")
    assert again.thread_id == "u" and copy.thread_id == "t"
    assert again.model_fields_set is copy.model_fields_set  # already set: shared
    seen_as = build.field_copier("thread_id")
    fast = seen_as(original, "t")
    assert fast == single and fast.model_fields_set == single.model_fields_set
    assert fast.__dict__ is not original.__dict__ and original.thread_id == ""
    assert fast.__pydantic_private__ is None and fast.__pydantic_extra__ is None
    assert seen_as(copy, "u").model_fields_set is copy.model_fields_set


def test_constructor_shares_field_sets_that_copies_never_change():
    build = Constructor(cj.Entry)
    first = build({"type": "custom", "summary": "a"})
    second = build({"type": "custom", "summary": "b"})
    assert first.model_fields_set is second.model_fields_set == {"type", "summary"}
    changed = first.model_copy(update={"error": "e"})
    assert changed.model_fields_set == {"type", "summary", "error"}
    assert first.model_fields_set == second.model_fields_set == {"type", "summary"}
    assert build({"type": "custom"}).model_fields_set == {"type"}
    with pytest.raises(ValidationError):
        first.summary = "c"  # type: ignore[misc]  # frozen: the shared set never grows


def test_constructor_runs_content_validators_and_accepts_exact_strings():
    build = Constructor(cj.Message)
    assert build({"role": "user", "content": "hi"}).content == "hi"
    blocks = [{"type": "text", "text": "hi"}]
    assert build({"role": "user", "content": blocks}).content == blocks
    with pytest.raises(ValueError):
        build({"role": "user", "content": [{"type": "tool_use"}]})
    with pytest.raises(ValueError):
        build({"role": "user", "content": 5})


# -- checkpoint messages ---------------------------------------------------------------------


def test_checkpoint_loads_stay_exact_after_the_first(tmp_path):
    j = cj.Journal.open(tmp_path / "store", durable=False)
    messages = [{"role": "user", "n": 2**70}, {"role": "assistant", "x": 1.5, "y": 1}]
    j.checkpoints.save(cj.Checkpoint(run_id="r", messages=messages))
    maintenance.pack(j.store)
    j.close()
    for _ in range(3):
        reopened = cj.Journal.open(tmp_path / "store", durable=False)
        for _ in range(3):
            loaded = reopened.checkpoints.load("r").messages
            assert loaded == messages
            assert type(loaded[0]["n"]) is int and type(loaded[1]["y"]) is int
        reopened.close()


def test_constructor_copies_of_a_mutable_model_own_their_field_sets():
    class Note(BaseModel):
        text: str = ""
        tag: str = ""

    build = Constructor(Note)
    original = build({"text": "a", "tag": "x"})
    copy = build.with_field(original, "text", "b")
    other = build.replaced(original, {"tag": "y"})
    assert copy.text == "b" and other.tag == "y" and original.text == "a"
    # a mutable model may add to its set later: a copy must not share the original's
    assert copy.model_fields_set is not original.model_fields_set
    assert other.model_fields_set is not original.model_fields_set
    assert copy.model_fields_set == original.model_fields_set == {"text", "tag"}
    copier = build.field_copier("text")(original, "c")  # the general copy for such models
    assert copier.text == "c" and copier.model_fields_set is not original.model_fields_set


# -- payloads of a path read ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "body", "reason"),
    [
        (Kind.BLOB, b'{"type":"custom","raw":"\xff"}', "not UTF-8"),
        (Kind.ENTRY, b'{"type":"custom"}', "not a blob"),
        (Kind.BLOB, b'{"type":"custom"', "malformed"),
    ],
)
def test_a_path_whose_payload_is_damaged_is_a_clear_error_naming_it(kind, body, reason):
    from cas_journal.journal.entries import EntryReader
    from cas_journal.journal.graph import EntryGraph

    objects = MemoryStore().objects
    payload = objects.put(kind, body)
    root = objects.put(Kind.ENTRY, EntryNode(payload, "2026-01-01T00:00:00.000000Z").body())
    reader = EntryReader(EntryGraph(objects))
    with pytest.raises(CorruptObject, match=reason) as caught:
        reader.path("t", root)
    assert caught.value.oid == payload
