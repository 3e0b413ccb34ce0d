"""Export a thread as JSONL and import it back: exact ids, idempotence, all-or-nothing."""

from __future__ import annotations

import io
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st
from support.journal_helpers import assistant, at, stored, user

import cas_journal as cj
from cas_journal.maintenance.transfer import (
    EXPORT_FORMAT,
    ImportReport,
    MalformedExport,
    export_thread,
    import_jsonl,
)
from cas_journal.objects import format_time


def build_source(j: cj.Journal) -> dict[str, cj.Entry]:
    """A thread with an abandoned branch, a moved leaf, odd content, and a fork."""
    j.create_thread(cj.ThreadMeta(id="t1", title="Grüße \u2603", status="open", created_at=at(0)))
    made = {}
    made["a"] = user(j, "t1", "hello\nsecond line", now=at(1))
    made["b"] = assistant(j, "t1", "hi", now=at(2))
    made["c"] = j.append(
        cj.Entry(
            thread_id="t1",
            turn_id="turn-7",
            type=cj.EntryType.TOOL_CALL,
            message=cj.Message(
                role="assistant", tool_call_id="c1", tool_name="bash", tool_args='{"cmd": "ls"}'
            ),
            metadata={"empty": "", "k": "v"},
        ),
        now=at(3),
    )
    j.move_leaf("t1", made["a"].id, now=at(4))
    made["d"] = assistant(j, "t1", "another answer \U0001f600", now=at(5))
    # an entry whose created_at is earlier than its parent's: parents must still come first
    made["e"] = user(j, "t1", "from the past", now=at(-100))
    cj.append_turn_marker(j, "t1", "turn-8", cj.TurnMarkerStatus.COMPLETED, {"x": "1"})
    j.move_leaf("t1", made["d"].id, now=at(6))
    meta = j.thread("t1")
    meta.archived = True
    j.update_thread(meta)
    j.fork("t1", made["b"].id, new_thread_id="t1-fork", now=at(10))
    made["f"] = user(j, "t1-fork", "forked", now=at(11))
    return made


@pytest.fixture
def source() -> cj.Journal:
    j = cj.Journal.memory()
    build_source(j)
    return j


@pytest.fixture(params=["memory", "local"])
def target(request, tmp_path):
    if request.param == "memory":
        j = cj.Journal.memory()
    else:
        j = cj.Journal.open(tmp_path / "target", durable=False)
    yield j
    j.close()


def refs_snapshot(j: cj.Journal) -> dict[str, str | None]:
    refs = j.store.refs
    names = refs.list_refs("threads/") + refs.list_refs("threadindex/")
    return {name: refs.read_ref(name) for name in names}


def view(j: cj.Journal, thread_id: str) -> tuple:
    """Everything a reader sees of a thread (the state oid excluded)."""
    meta = j.thread(thread_id).model_dump()
    entries = [(e.id, e.parent_id, e.raw, e.created_at, e.turn_id) for e in j.entries(thread_id)]
    path = [e.id for e in j.path(thread_id)]
    return meta, entries, path


def test_export_lines_are_ascii_json_with_parents_first(source):
    lines = list(export_thread(source, "t1"))
    assert all(line.endswith("\n") and line.isascii() for line in lines)
    header = json.loads(lines[0])
    assert header["record"] == "thread" and header["format"] == EXPORT_FORMAT
    assert header["version"] == 1 and header["thread"]["id"] == "t1"
    assert header["entries"] == len(lines) - 1 == len(source.entries("t1"))
    seen: set[str] = set()
    for line in lines[1:]:
        record = json.loads(line)
        assert record["record"] == "entry"
        assert record["parent"] is None or record["parent"] in seen
        seen.add(record["id"])
    assert seen == {e.id for e in source.entries("t1")}
    assert set(header["heads"]) <= seen and len(header["heads"]) == 2  # c, and the marker after e


def test_round_trip_into_another_store_keeps_ids_paths_and_metadata(source, target):
    for thread_id in ("t1", "t1-fork"):
        report = import_jsonl(target, export_thread(source, thread_id))
        assert report.threads_created == [thread_id] and report.threads_unchanged == []
        assert view(target, thread_id) == view(source, thread_id)
    assert target.thread("t1").archived is True
    assert target.thread("t1-fork").forked_from_thread_id == "t1"
    # the threads live on in the target: appends work and entries are shared
    entry = user(target, "t1-fork", "more")
    assert target.path("t1-fork")[-1].id == entry.id
    # listings agree (archived included)
    assert [m.id for m in target.list_threads(include_archived=True)] == [
        m.id for m in source.list_threads(include_archived=True)
    ]


def test_import_twice_changes_nothing(source, target):
    lines = list(export_thread(source, "t1"))
    first = import_jsonl(target, lines)
    assert first.objects_written > 0
    objects, refs = stored(target), refs_snapshot(target)
    reflog = target.store.refs.reflog("threads/t1")
    second = import_jsonl(target, lines)
    assert second == ImportReport(
        lines=len(lines), entries=len(lines) - 1, threads_unchanged=["t1"], objects_written=0
    )
    assert stored(target) == objects and refs_snapshot(target) == refs
    assert target.store.refs.reflog("threads/t1") == reflog


def test_import_into_the_source_store_is_a_no_op(source):
    before = refs_snapshot(source)
    report = import_jsonl(source, export_thread(source, "t1"))
    assert report.threads_unchanged == ["t1"] and report.objects_written == 0
    assert refs_snapshot(source) == before


def test_existing_thread_with_other_entries_is_refused_and_nothing_written(source, target):
    target.create_thread(cj.ThreadMeta(id="t1"))
    user(target, "t1", "unrelated")
    objects, refs = stored(target), refs_snapshot(target)
    with pytest.raises(cj.ThreadExists):
        import_jsonl(target, export_thread(source, "t1"))
    assert stored(target) == objects and refs_snapshot(target) == refs


def test_concatenated_exports_import_together(source, target):
    lines = list(export_thread(source, "t1")) + list(export_thread(source, "t1-fork"))
    report = import_jsonl(target, lines)
    assert report.threads_created == ["t1", "t1-fork"]
    assert view(target, "t1-fork") == view(source, "t1-fork")


def test_empty_thread_round_trips(target):
    j = cj.Journal.memory()
    j.create_thread(cj.ThreadMeta(id="empty", created_at=at(0)))
    lines = list(export_thread(j, "empty"))
    assert len(lines) == 1
    import_jsonl(target, lines)
    assert view(target, "empty") == view(j, "empty")


def test_bytes_lines_and_progress(source, target):
    calls = []
    lines = [line.encode() for line in export_thread(source, "t1")]
    report = import_jsonl(target, lines, progress=lambda *args: calls.append(args))
    assert report.threads_created == ["t1"]
    assert ("writing", report.objects_written, report.objects_written) in calls


def test_unknown_thread_cannot_be_exported(source):
    with pytest.raises(cj.ThreadNotFound):
        list(export_thread(source, "nope"))


def _mutate(lines: list[str], index: int, record_update: dict) -> list[str]:
    record = json.loads(lines[index])
    record.update(record_update)
    out = list(lines)
    out[index] = json.dumps(record) + "\n"
    return out


@pytest.mark.parametrize(
    ("case", "line", "words"),
    [
        ("not json", 3, "not valid JSON"),
        ("array", 2, "not a JSON object"),
        ("bad utf8", 4, "UTF-8"),
        ("id mismatch", 3, "id mismatch"),
        ("child before parent", 2, "does not come before"),
        ("truncated", 1, "truncated"),
        ("version", 1, "version"),
        ("unknown record", 5, "unknown record"),
        ("bad raw", 3, "payload"),
        ("duplicate thread", 8, "appears twice"),
        ("entry first", 1, "before any thread header"),
        ("extra field", 2, "unknown fields"),
        ("bad time", 2, "timestamp"),
    ],
)
def test_malformed_line_is_named_and_changes_nothing(source, target, case, line, words):
    lines: list[str | bytes] = list(export_thread(source, "t1"))
    if case == "not json":
        lines[2] = lines[2][:40]
    elif case == "array":
        lines[1] = "[1, 2]\n"
    elif case == "bad utf8":
        lines = [text.encode() for text in lines]  # type: ignore[union-attr]
        lines[3] = b'{"record": "\xff"}\n'
    elif case == "id mismatch":
        record = json.loads(lines[2])
        record["turn_id"] = "changed"
        lines[2] = json.dumps(record)
    elif case == "child before parent":
        lines[1], lines[2] = lines[2], lines[1]
    elif case == "truncated":
        lines = lines[:-1]
    elif case == "version":
        lines = _mutate(lines, 0, {"version": 2})
    elif case == "unknown record":
        lines[4] = '{"record": "blob"}'
    elif case == "bad raw":
        lines = _mutate(lines, 2, {"raw": '{"type": "no_such_type"}'})
    elif case == "duplicate thread":
        lines = [*lines, lines[0]]
        assert len(lines) == 8
    elif case == "entry first":
        lines = lines[1:]
    elif case == "extra field":
        lines = _mutate(lines, 1, {"depth": 0})
    elif case == "bad time":
        lines = _mutate(lines, 1, {"created_at": "2026-01-01T00:00:01Z"})
    objects, refs = stored(target), refs_snapshot(target)
    with pytest.raises(MalformedExport) as caught:
        import_jsonl(target, lines)
    assert caught.value.line == line
    assert str(caught.value).startswith(f"line {line}: ")
    assert words in str(caught.value)
    assert isinstance(caught.value, cj.JournalError) and isinstance(caught.value, ValueError)
    assert stored(target) == objects and refs_snapshot(target) == refs


# -- property: hostile input only ever raises JournalError and never half-imports --------

_SOURCE = cj.Journal.memory()
build_source(_SOURCE)
_LINES = [line.encode() for line in export_thread(_SOURCE, "t1")] + [
    line.encode() for line in export_thread(_SOURCE, "t1-fork")
]


def _check_import(lines: list[bytes]) -> None:
    target = cj.Journal.memory()
    try:
        report = import_jsonl(target, lines)
    except cj.JournalError:
        assert target.list_threads(include_archived=True) == []
        assert stored(target) == set()
        return
    # success: every created thread is complete and readable
    for thread_id in report.threads_created:
        entries = target.entries(thread_id)
        for entry in entries:
            target.store.objects.get(entry.id)
        target.path(thread_id)
    assert len(target.list_threads(include_archived=True)) == len(report.threads_created)


@st.composite
def damaged(draw: st.DrawFn) -> list[bytes]:
    lines = list(_LINES)
    for _ in range(draw(st.integers(1, 3))):
        index = draw(st.integers(0, len(lines) - 1))
        line = lines[index]
        action = draw(st.sampled_from(["flip", "truncate", "drop", "duplicate", "swap", "junk"]))
        if action == "flip" and line:
            position = draw(st.integers(0, len(line) - 1))
            bit = draw(st.integers(0, 7))
            lines[index] = (
                line[:position] + bytes([line[position] ^ (1 << bit)]) + line[position + 1 :]
            )
        elif action == "truncate":
            lines[index] = line[: draw(st.integers(0, max(len(line) - 1, 0)))]
        elif action == "drop" and len(lines) > 1:
            del lines[index]
        elif action == "duplicate":
            lines.insert(index, line)
        elif action == "swap":
            other = draw(st.integers(0, len(lines) - 1))
            lines[index], lines[other] = lines[other], lines[index]
        else:
            lines[index] = draw(st.binary(max_size=200))
    return lines


@given(damaged())
def test_damaged_exports_raise_only_journal_errors(lines):
    _check_import(lines)


@given(
    st.lists(st.one_of(st.binary(max_size=100), st.text(max_size=100).map(str.encode)), max_size=5)
)
def test_random_lines_raise_only_journal_errors(lines):
    _check_import(lines)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=10), children, max_size=3)
    ),
    max_leaves=10,
)


@given(
    st.integers(0, len(_LINES) - 1),
    st.integers(0, 7),
    st.text(min_size=1, max_size=12),
    json_values,
)
def test_random_field_values_raise_only_journal_errors(index, choice, key, value):
    """Any field (or a new one) of any line set to any JSON value."""
    record = json.loads(_LINES[index])
    fields = [*sorted(record), key]
    record[fields[choice % len(fields)]] = value
    lines = list(_LINES)
    lines[index] = json.dumps(record).encode()
    _check_import(lines)


def test_a_valid_line_from_another_thread_cannot_smuggle_entries():
    """An entry id that names its own content but is unreachable from every head is refused."""
    lines = list(export_thread(_SOURCE, "t1"))
    j = cj.Journal.memory()
    j.create_thread(cj.ThreadMeta(id="x"))
    stray = user(j, "x", "stray")
    stray_line = json.dumps(
        {
            "record": "entry",
            "id": stray.id,
            "parent": None,
            "created_at": format_time(stray.created_at),
            "turn_id": "",
            "raw": stray.raw,
        }
    )
    header = json.loads(lines[0])
    header["entries"] += 1
    lines = [json.dumps(header), stray_line, *lines[1:]]
    with pytest.raises(MalformedExport, match="no head reaches"):
        import_jsonl(cj.Journal.memory(), lines)


def test_a_byte_order_mark_at_the_start_is_skipped(source, target):
    """Some editors save JSONL with a UTF-8 BOM; it is not part of the first line's JSON."""
    data = "".join(export_thread(source, "t1")).encode("ascii")
    report = import_jsonl(target, io.BytesIO(b"\xef\xbb\xbf" + data))
    assert report.threads_created == ["t1"]
    assert [e.id for e in target.entries("t1")] == [e.id for e in source.entries("t1")]
    text_lines = ("\ufeff" + data.decode()).splitlines(keepends=True)
    assert import_jsonl(cj.Journal.memory(), text_lines).threads_created == ["t1"]
    # only at the start: a BOM before a later line is still an error naming that line
    lines = data.splitlines(keepends=True)
    lines[1] = b"\xef\xbb\xbf" + lines[1]
    with pytest.raises(MalformedExport, match="line 2: not valid JSON"):
        import_jsonl(cj.Journal.memory(), lines)
