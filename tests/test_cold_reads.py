"""Cold path reads: the shortcuts taken for speed give the same answers and the same
clear errors as the general code (block splitting, entry building, the collector pause,
the caches' weights)."""

from __future__ import annotations

import gc
import threading

import pytest
from hypothesis import given
from hypothesis import strategies as st
from support.journal_helpers import at, user

import cas_journal as cj
from cas_journal import maintenance
from cas_journal.backends.local import objects as objects_module
from cas_journal.errors import CorruptObject
from cas_journal.journal import entries as entries_module
from cas_journal.journal.cache import BoundedCache
from cas_journal.journal.entries import (
    EntryReader,
    _payload_fields,
    collector_paused,
    entry_weight,
)
from cas_journal.journal.graph import EntryGraph
from cas_journal.journal.payload import raw_for_entry
from cas_journal.objects import EntryNode, Kind, canonical_form, object_id, split_canonical_forms

OID = "a" * 64


# -- block splitting: each malformed header gets its own reason ----------------------------


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"blob 3", "object header is missing or too long"),
        (b"blob " + b"1" * 40 + b"\0", "object header is missing or too long"),
        (b"blub 3\0abc", "unknown object kind b'blub'"),
        (b"blob3\0abc", "unknown object kind b'blob3'"),
        (b"blob 03\0abc", "object header has a malformed length"),
        (b"blob -3\0abc", "object header has a malformed length"),
        (b"blob 4\0abc", "object length runs past the end of its data"),
    ],
)
def test_split_names_what_is_wrong_with_a_header(data, reason):
    good = canonical_form(Kind.BLOB, b"first")
    with pytest.raises(CorruptObject, match=reason.replace("(", r"\(")):
        split_canonical_forms(good + data)


@given(st.lists(st.tuples(st.sampled_from(list(Kind)), st.binary(max_size=40)), max_size=6))
def test_split_reads_zero_length_and_long_headers(objects):
    objects = [*objects, (Kind.TREE, b""), (Kind.CHECKPOINT, b"x" * 1000)]
    data = b"".join(canonical_form(kind, body) for kind, body in objects)
    assert split_canonical_forms(data) == [
        (object_id(kind, body), kind, body) for kind, body in objects
    ]


# -- entry nodes: a canonical shape with a date that does not exist ------------------------


@pytest.mark.parametrize("day", ["2026-02-30", "2026-04-31", "2025-02-29"])
def test_an_entry_dated_a_day_that_does_not_exist_is_refused(day):
    body = b'{"created_at":"%sT00:00:00.000000Z","payload":"%s"}' % (day.encode(), OID.encode())
    with pytest.raises(CorruptObject, match="created_at"):
        EntryNode.parse(body, "b" * 64)


def test_an_entry_dated_a_leap_day_is_read():
    body = b'{"created_at":"2024-02-29T23:59:59.999999Z","payload":"%s"}' % OID.encode()
    assert EntryNode.parse(body).created_at == "2024-02-29T23:59:59.999999Z"


# -- entry building: every payload that does not fit is a CorruptObject naming it ----------


def _reader() -> EntryReader:
    return EntryReader(EntryGraph(cj.Journal.memory().store.objects))


NODE = EntryNode(OID, "2026-01-02T03:04:05.000006Z", 1, "c" * 64, None, "turn")


def _trusted(raw: str) -> dict[str, object]:
    """The fields a read of ``NODE`` (entry ``"b" * 64`` of thread ``"t"``, payload
    ``raw``) takes from the node and the stored bytes, not from the payload."""
    return {
        "id": "b" * 64,
        "thread_id": "t",
        "parent_id": "c" * 64,
        "turn_id": "turn",
        "created_at": "2026-01-02T03:04:05.000006Z",
        "raw": raw,
        "raw_hash": OID,
    }


@pytest.mark.parametrize(
    "raw",
    [
        "",
        "not json",
        "[1, 2]",
        '{"message": {"role": "user", "content": "hi"}}',
        '{"type": "user_message", "surprise": 1}',
        '{"type": "no such type"}',
        '{"type": "user_message", "message": {"role": 5}}',
        '{"type": "user_message", "message": {"role": "user", "content": 5}}',
        '{"type": "user_message", "message": "hi"}',
        '{"type": "user_message", "tokens_before": "many"}',
        '{"type": "user_message", "tokens_before": 1.5}',
        '{"type": "user_message", "kept_user_entry_ids": [1]}',
        '{"type": "user_message", "metadata": {"a": 1}}',
        "[" * 100_000,
    ],
)
def test_a_payload_that_does_not_fit_is_refused_naming_it(raw):
    with pytest.raises(CorruptObject) as caught:
        _reader().build("b" * 64, NODE, raw, "t")
    assert caught.value.oid == OID


def test_a_built_entry_equals_the_validated_model():
    raw = (
        '{"message":{"content":"hi","role":"user","tool_args":"{}"},'
        '"metadata":{"k":"v"},"tokens_before":7,"type":"user_message"}'
    )
    built = _reader().build("b" * 64, NODE, raw, "t")
    expected = cj.Entry.model_validate(
        {
            "message": {"content": "hi", "role": "user", "tool_args": "{}"},
            "metadata": {"k": "v"},
            "tokens_before": 7,
            "type": "user_message",
            **_trusted(raw),
        }
    )
    assert built == expected
    assert built.created_at == expected.created_at
    assert built.created_at.tzinfo is expected.created_at.tzinfo
    assert built.model_fields_set == expected.model_fields_set
    again = cj.Entry.model_validate(built.model_dump())
    assert again == built


def test_a_payload_that_is_not_a_blob_or_not_utf8_is_refused_naming_it(tmp_path):
    j = cj.Journal.open(tmp_path / "store", durable=False)
    j.create_thread(cj.ThreadMeta(id="t"))
    entry = user(j, "t", "hello", now=at(1))
    for kind, body in ((Kind.BLOB, b"\xff\xfe"), (Kind.TREE, b"{}")):
        payload = object_id(kind, body)
        j.store.objects.put(kind, body)
        node = EntryNode(payload, "2026-01-02T03:04:05.000006Z")
        j.store.objects.put(Kind.ENTRY, node.body())
        oid = object_id(Kind.ENTRY, node.body())
        reader = _reader_of(j)
        with pytest.raises(CorruptObject) as caught:
            reader.path("t", oid)
        assert caught.value.oid == payload
    assert j.path("t")[-1] == entry


def _reader_of(j: cj.Journal) -> EntryReader:
    return EntryReader(EntryGraph(j.store.objects))


# -- the collector pause ---------------------------------------------------------------------


def test_the_collector_is_paused_inside_and_resumed_after():
    assert gc.isenabled()
    with collector_paused():
        assert not gc.isenabled()
        with collector_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
    assert gc.isenabled()


def test_the_collector_resumes_after_an_error():
    with pytest.raises(RuntimeError), collector_paused():
        raise RuntimeError("boom")
    assert gc.isenabled()


def test_a_collector_disabled_before_stays_disabled():
    gc.disable()
    try:
        with collector_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_concurrent_pauses_resume_the_collector_when_the_last_ends():
    inside, release = threading.Event(), threading.Event()

    def other() -> None:
        with collector_paused():
            inside.set()
            release.wait(10)

    thread = threading.Thread(target=other)
    thread.start()
    assert inside.wait(10)
    with collector_paused():
        pass
    assert not gc.isenabled()  # the other pause still runs
    release.set()
    thread.join()
    assert gc.isenabled()


def test_a_path_read_from_a_packed_store_pauses_the_collector(tmp_path, monkeypatch):
    j = cj.Journal.open(tmp_path / "store", durable=False)
    j.create_thread(cj.ThreadMeta(id="t"))
    written = [user(j, "t", f"message {i}", now=at(i)) for i in range(30)]
    maintenance.pack(j.store)
    maintenance.gc(j.store, prune_now=True)
    j.close()
    j = cj.Journal.open(tmp_path / "store", durable=False)
    seen: list[bool] = []
    original = entries_module._payload_fields

    def payload_fields(*args):  # type: ignore[no-untyped-def]
        seen.append(gc.isenabled())
        return original(*args)

    monkeypatch.setattr(entries_module, "_payload_fields", payload_fields)
    assert [e.id for e in j.path("t")] == [e.id for e in written]
    assert seen and not any(seen)
    assert gc.isenabled()


# -- weights ---------------------------------------------------------------------------------


def test_a_weight_given_to_put_is_the_one_kept():
    cache: BoundedCache[str, str] = BoundedCache(10, weigh=len, max_weight=10)
    cache.put("a", "xxxx", 4)
    cache.put("b", "yyyy", 4)
    assert cache.weight == 8
    cache.put("c", "zzzz", 4)  # beyond the bound: the oldest goes
    assert cache.get("a") is None and cache.weight == 8
    plain: BoundedCache[str, int] = BoundedCache(2)
    for key in "abc":
        plain.put(key, 1)
    assert len(plain) == 2 and plain.get("a") is None


def test_a_cached_path_weighs_what_its_entries_weigh(tmp_path):
    j = cj.Journal.open(tmp_path / "store", durable=False)
    j.create_thread(cj.ThreadMeta(id="t"))
    for i in range(12):
        user(j, "t", "x" * i, now=at(i))
    j.close()
    j = cj.Journal.open(tmp_path / "store", durable=False)
    path = j.path("t")
    reader = j._reader
    cached = reader._paths.get(("t", path[-1].id))
    assert cached is not None
    assert cached.weight == sum(map(entry_weight, path))
    assert reader._entries.weight == sum(map(entry_weight, path))


def _fork_tree(tmp_path) -> list[str]:
    """A base thread, a fork of it, a fork of that fork and a fork at the root; each
    fork gets entries of its own. Returns the thread ids."""
    j = cj.Journal.open(tmp_path / "store", durable=False)
    j.create_thread(cj.ThreadMeta(id="base"))
    base = [user(j, "base", f"base {i}", now=at(i)) for i in range(20)]
    j.fork("base", base[11].id, new_thread_id="a", now=at(30))
    own = [user(j, "a", f"a {i}", now=at(31 + i)) for i in range(5)]
    j.fork("a", own[2].id, new_thread_id="b", now=at(40))
    user(j, "b", "b 0", now=at(41))
    j.fork("base", base[0].id, new_thread_id="c", now=at(50))
    j.close()
    return ["base", "a", "b", "c"]


def test_a_fork_s_path_read_after_its_source_s_is_the_path_read_alone(tmp_path):
    threads = _fork_tree(tmp_path)
    alone = {}
    for thread in threads:  # each in a journal of its own: no other path cached
        j = cj.Journal.open(tmp_path / "store", durable=False)
        alone[thread] = j.path(thread)
        j.close()
    j = cj.Journal.open(tmp_path / "store", durable=False)
    reader = j._reader
    shared_from = reader._shared_path
    found: list[int] = []

    def counted(entry: cj.Entry) -> tuple[cj.Entry, ...] | None:
        shared = shared_from(entry)
        found.append(0 if shared is None else len(shared))
        return shared

    reader._shared_path = counted  # type: ignore[method-assign]
    for thread in threads:  # in turn: a fork's history comes from its source's path
        path = j.path(thread)
        assert path == alone[thread]
        assert {entry.thread_id for entry in path} == {thread}
        cached = reader._paths.get((thread, path[-1].id))
        assert cached is not None and cached.weight == sum(map(entry_weight, path))
    assert found == [12, 15, 1]  # a from base, b from a (12 + 3), c from base
    assert reader._last_leaf == {thread: alone[thread][-1].id for thread in threads}
    # a source's copies are not the fork's: each thread's entries are its own objects
    ids = {thread: {id(entry) for entry in j.path(thread)[:1]} for thread in threads}
    assert len(set().union(*ids.values())) == len(threads)


def test_a_fork_s_path_is_walked_when_its_source_s_path_is_no_longer_cached(tmp_path):
    _fork_tree(tmp_path)
    j = cj.Journal.open(tmp_path / "store", durable=False)
    expected = j.path("a")
    j.close()
    j = cj.Journal.open(tmp_path / "store", durable=False)
    reader = j._reader
    j.path("base")
    reader._paths.clear()  # the source's path is gone; its entries are still cached
    assert j.path("a") == expected
    reader._paths.clear()
    reader._last_leaf["base"] = "0" * 64  # a leaf the cache never held
    assert j.path("a") == expected


# -- row windows -----------------------------------------------------------------------------


def _unpacked(tmp_path, count: int) -> list[cj.Entry]:
    j = cj.Journal.open(tmp_path / "store", durable=False)
    j.create_thread(cj.ThreadMeta(id="t"))
    written = [user(j, "t", f"message {i} " + "y" * (i % 50), now=at(i)) for i in range(count)]
    j.close()
    return written


def test_a_path_s_payloads_come_from_the_row_windows_its_walk_read(tmp_path):
    written = _unpacked(tmp_path, 300)
    j = cj.Journal.open(tmp_path / "store", durable=False)
    statements: list[str] = []
    j.store.objects.db.connection().set_trace_callback(statements.append)
    assert j.path("t") == written
    assert not [sql for sql in statements if " IN (" in sql]  # no second read of any row


def test_a_walk_s_row_windows_read_no_row_twice(tmp_path):
    written = _unpacked(tmp_path, 300)
    j = cj.Journal.open(tmp_path / "store", durable=False)
    objects = j.store.objects
    plain_rows = objects.db.rows
    windows: list[list[object]] = []

    def rows(sql, *args, **kwargs):
        found = plain_rows(sql, *args, **kwargs)
        if sql == objects_module._READ_ROW_WINDOW:
            windows.append([row[2] for row in found])
        return found

    objects.db.rows = rows  # type: ignore[method-assign]
    assert j.path("t") == written
    numbers = [number for window in windows for number in window]
    assert len(windows) > 2 and len(numbers) == len(set(numbers))


def test_row_windows_stay_within_their_byte_bound(tmp_path, monkeypatch):
    from cas_journal.backends.local import objects as local_objects

    written = _unpacked(tmp_path, 300)
    monkeypatch.setattr(local_objects, "WINDOW_BYTES", 4096)
    j = cj.Journal.open(tmp_path / "store", durable=False)
    objects = j.store.objects
    for entry in reversed(written):
        objects.get_with_neighbours(entry.id)
        kept = sum(map(len, objects._window.values()))
        assert kept == objects._window_bytes
        assert kept <= 4096 + 64 * 1024  # the bound, give or take the last frame
    assert j.path("t") == written  # what a window dropped is read again


def test_a_damaged_frame_kept_from_a_window_is_read_again_or_refused(tmp_path):
    written = _unpacked(tmp_path, 60)
    j = cj.Journal.open(tmp_path / "store", durable=False)
    objects = j.store.objects
    for entry in reversed(written):
        objects.get_with_neighbours(entry.id)
    payload = written[5].raw_hash
    assert payload in objects._window
    objects._window[payload] = b"garbage"  # as if the row had been damaged
    got = {oid: body for oid, _, body in objects.get_many([payload])}
    assert got == {payload: objects.get(payload)[1]}  # ``get`` finds the intact row


@given(st.text(max_size=40))
def test_an_entry_built_from_the_stored_bytes_equals_one_built_from_the_text(text):
    entry = cj.Entry(type=cj.EntryType.USER_MESSAGE, message=cj.Message(role="user", content=text))
    raw = raw_for_entry(entry)
    reader = _reader()
    from_text = reader.build("b" * 64, NODE, raw, "t")
    # what a path read does: the payload's fields parsed from its stored bytes
    from_bytes = reader._built(
        "b" * 64, NODE, raw, _payload_fields(NODE.payload, raw.encode()), "t"
    )
    assert from_bytes == from_text
    assert from_bytes.message is not None and from_bytes.message.content == text


def test_entries_of_one_path_that_share_a_payload_share_nothing_mutable(tmp_path):
    j = cj.Journal.open(tmp_path / "store", durable=False)
    j.create_thread(cj.ThreadMeta(id="t"))
    same = cj.Entry(thread_id="t", type=cj.EntryType.USER_MESSAGE, kept_user_entry_ids=["x"])
    for i in range(3):
        j.append(same.model_copy(update={"created_at": at(i)}), now=at(i))
    j.close()
    first, second, third = cj.Journal.open(tmp_path / "store", durable=False).path("t")
    assert first.raw_hash == second.raw_hash == third.raw_hash
    assert first.kept_user_entry_ids == second.kept_user_entry_ids == ["x"]
    assert first.kept_user_entry_ids is not second.kept_user_entry_ids
    assert second.kept_user_entry_ids is not third.kept_user_entry_ids


def test_a_constructor_sets_up_private_attributes_as_pydantic_does():
    from cas_journal.journal.trusted import Constructor

    meta = Constructor(cj.ThreadMeta)
    moment = at(1)
    values = {"id": "x", "created_at": moment, "updated_at": moment, "leaf_id": "e"}
    built = meta.with_fields({}, values)
    assert built == cj.ThreadMeta.model_construct(**values)
    assert built.model_fields_set == set(values)
    assert built._state_oid is None  # the private attribute's default
    built._state_oid = "s" * 64
    copy = meta.replaced(built, {"title": "t"})
    assert copy._state_oid == "s" * 64 and copy.title == "t"
    copy._state_oid = None  # each copy owns its private attributes
    assert built._state_oid == "s" * 64


# -- build plans per data shape: a shape seen before is checked as the first one was --------

_SHAPE_VALUES = st.one_of(
    st.text(max_size=3), st.integers(-2, 2), st.booleans(), st.none(), st.just([]), st.just({})
)
_SHAPED = st.dictionaries(
    st.sampled_from(["role", "content", "tool_args", "compaction_generation", "kind"]),
    _SHAPE_VALUES,
    max_size=4,
)
_SHARED_ENTRY_BUILDER = EntryReader(EntryGraph(cj.Journal.memory().store.objects))
"""One reader for every example: its constructor's plans per shape are reused across them."""


@given(st.lists(_SHAPED, min_size=1, max_size=4))
def test_a_reused_constructor_accepts_and_refuses_as_pydantic_does(messages):
    import json

    from pydantic import ValidationError

    for message in messages:
        raw = json.dumps({"type": "user_message", "message": message})
        try:
            expected = cj.Entry.model_validate_json(raw, strict=True)
        except ValidationError:
            expected = None
        try:
            built = _SHARED_ENTRY_BUILDER.build("b" * 64, NODE, raw, "t")
        except CorruptObject as exc:
            assert exc.oid == OID
            assert expected is None, message
            continue
        assert expected is not None, message
        assert built.message == expected.message
        assert built.message.model_fields_set == expected.message.model_fields_set


def test_instances_of_a_model_that_is_not_frozen_own_their_set_of_fields_set():
    from cas_journal.journal.trusted import Constructor

    meta = Constructor(cj.ThreadMeta)
    first = meta.with_fields({"title": "a"}, {"id": "x"})
    second = meta.with_fields({"title": "b"}, {"id": "y"})
    assert first.model_fields_set == second.model_fields_set == {"title", "id"}
    assert first.__pydantic_fields_set__ is not second.__pydantic_fields_set__
    with pytest.raises(ValueError):
        meta.with_fields({"title": 5}, {"id": "z"})  # same names, another value type


class _Cycle:
    """A garbage cycle the collector must find (it is referenced only by itself)."""

    def __init__(self) -> None:
        self.me = self


def _generation_of(target: object) -> int | None:
    for generation in range(3):
        if any(obj is target for obj in gc.get_objects(generation)):
            return generation
    return None


def test_what_a_pause_allocates_goes_to_the_oldest_generation_and_nothing_else():
    """Objects allocated during a pause skip the young generations' passes; young
    objects from before it are collected when it begins (a garbage cycle made just
    before is freed, not promoted)."""
    import weakref

    gc.collect()
    before = _Cycle()
    dead = weakref.ref(before)
    del before
    assert dead() is not None  # only the collector frees a cycle
    with collector_paused():
        assert dead() is None  # young garbage collected as the pause began
        made = {"kept": [1, 2, 3]}
    assert gc.isenabled()
    assert _generation_of(made) == 2
    assert gc.get_freeze_count() == 0


def test_objects_the_process_froze_stay_frozen():
    gc.collect()
    gc.freeze()
    try:
        frozen = gc.get_freeze_count()
        with collector_paused():
            made = {"kept": [1]}
        assert gc.get_freeze_count() == frozen  # nothing unfrozen, nothing added
        assert _generation_of(made) in (0, 1, 2)
    finally:
        gc.unfreeze()


# -- built entries equal validated ones, whatever the payload's shape ---------------------

_TEXT = st.text(max_size=6)
_BLOCKS = st.lists(
    st.one_of(
        st.fixed_dictionaries({"type": st.just("text"), "text": _TEXT}),
        st.fixed_dictionaries(
            {"type": st.just("tool_use"), "id": st.just("c1"), "name": st.just("f")},
            optional={"input": st.dictionaries(_TEXT, _TEXT, max_size=2)},
        ),
    ),
    max_size=3,
)
_MESSAGES = st.fixed_dictionaries(
    {},
    optional={
        "role": st.sampled_from(["user", "assistant", "tool"]),
        "content": st.one_of(_TEXT, _BLOCKS),
        "tool_args": _TEXT,
        "compaction_generation": st.integers(0, 3),
        "tool_result": st.fixed_dictionaries({}, optional={"truncated": st.booleans()}),
    },
)
_PAYLOADS = st.fixed_dictionaries(
    {"type": st.sampled_from([kind.value for kind in cj.EntryType])},
    optional={
        "message": _MESSAGES,
        "turn_status": st.sampled_from(["started", "completed"]),
        "metadata": st.dictionaries(_TEXT, _TEXT, max_size=2),
        "kept_user_entry_ids": st.lists(_TEXT, max_size=2),
        "tokens_before": st.integers(0, 10**6),
        "context_usage_before": st.fixed_dictionaries(
            {}, optional={"input_tokens": st.integers(0, 9)}
        ),
        "summary": _TEXT,
    },
)


@given(st.lists(_PAYLOADS, min_size=1, max_size=3))
def test_an_entry_built_from_a_payload_is_the_validated_model(payloads):
    """Entries built without validation (a builder per payload shape, reused across
    examples) equal what pydantic builds from the same fields: same values, same set of
    fields set, same field order, and each owns its mutable values."""
    import json

    from pydantic import ValidationError

    for payload in payloads:
        raw = json.dumps(payload, sort_keys=True, separators=(",", ":"))
        try:
            expected = cj.Entry.model_validate({**json.loads(raw), **_trusted(raw)})
        except ValidationError:
            with pytest.raises(CorruptObject):
                _SHARED_ENTRY_BUILDER.build("b" * 64, NODE, raw, "t")
            continue
        for built in (
            _SHARED_ENTRY_BUILDER.build("b" * 64, NODE, raw, "t"),
            _SHARED_ENTRY_BUILDER._built(
                "b" * 64, NODE, raw, _payload_fields(OID, raw.encode()), "t"
            ),
        ):
            assert type(built) is cj.Entry
            assert built == expected
            assert repr(built) == repr(expected)
            assert built.model_fields_set == expected.model_fields_set
            assert built.model_dump() == expected.model_dump()
            if expected.message is not None:
                assert type(built.message) is cj.Message
                assert built.message.model_fields_set == expected.message.model_fields_set
                assert repr(built.message) == repr(expected.message)
            assert built.metadata is not expected.metadata


def test_the_leaves_kept_for_forks_are_bounded(tmp_path, monkeypatch):
    monkeypatch.setattr(entries_module, "PATH_CACHE_SIZE", 2)
    threads = _fork_tree(tmp_path)
    j = cj.Journal.open(tmp_path / "store", durable=False)
    for thread in threads:
        j.path(thread)
    assert list(j._reader._last_leaf) == threads[-2:]  # the newest, the oldest forgotten
