"""Format 1 -> today's format: a store written by the format-1 code opens, whole, with
today's code (it goes straight to the current format; tests/test_format.py covers 2 -> 3).

``fixtures/format1/store`` was written by commit c8186ee (``fixtures/format1/make_store.py``);
``expected.json`` is what that code read back from it. The migration is also killed at
every step (file-system calls and SQL statements), and the store must then open as
format 1 or the current one and hold everything.
"""

from __future__ import annotations

import json
import shutil
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from support.fixture_stores import check_journal_holds, events_of_an_open, open_killed_at

import cas_journal as cj
from cas_journal.backends import LocalStore
from cas_journal.backends.local.migration import (
    INVALID_TIME,
    parse_ref_file,
    parse_reflog_file,
)
from cas_journal.backends.local.store import FORMAT_VERSION, read_format_version
from cas_journal.maintenance import fsck, gc, pack
from cas_journal.objects import format_time

FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "format1"
EXPECTED = json.loads((FIXTURE / "expected.json").read_text())


def _copy(target: Path) -> Path:
    shutil.copytree(FIXTURE / "store", target)
    return target


def _check_everything(root: Path) -> None:
    """The store at ``root`` holds exactly what expected.json lists, and fsck passes."""
    with cj.Journal.open(root, durable=False) as j:
        check_journal_holds(j, EXPECTED)
        assert not j.checkpoints.has_checkpoint("run-gone")


def test_a_format_1_store_opens_migrated_and_whole(tmp_path: Path) -> None:
    root = _copy(tmp_path / "s")
    LocalStore(root).close()
    assert (root / "FORMAT").read_text() == f"cas-journal {FORMAT_VERSION}\n"
    names = {p.name for p in root.iterdir()}
    assert (
        {"FORMAT", "packs", "store.db"}
        <= names
        <= {"FORMAT", "packs", "reserve", "store.db", "store.db-wal", "store.db-shm"}
    )
    assert sorted(p.name for p in (root / "packs").glob("*.idx")) == EXPECTED["packs"]
    with cj.Journal.open(root, durable=False) as j:  # loose objects became rows
        assert sorted(oid for oid, _, _ in j.store.objects.iter_rows()) == EXPECTED["loose_objects"]
    _check_everything(root)


def test_a_migrated_store_works_on(tmp_path: Path) -> None:
    root = _copy(tmp_path / "s")
    with cj.Journal.open(root, durable=False) as j:
        cj.append_message(j, "main", "turn-5", cj.Message(role="user", content="after the upgrade"))
        j.fork("main-fork", new_thread_id="fork-after")
        assert j.restore_thread("doomed").id == "doomed"
        j.release_turn_lease(j.active_turn_lease("main"))  # type: ignore[arg-type]
        pack(j.store)
        gc(j.store, prune_now=True)
        assert fsck(j.store).ok
        assert j.path("main")[-1].message.content == "after the upgrade"  # type: ignore[union-attr]
        assert [e.message.content for e in j.path("doomed")] == ["soon deleted"]  # type: ignore[union-attr]


def test_a_read_only_open_of_a_format_1_store_asks_for_an_upgrade(tmp_path: Path) -> None:
    root = _copy(tmp_path / "s")
    with pytest.raises(cj.StoreFormatError, match="upgraded once"):
        LocalStore(root, read_only=True)
    assert read_format_version(root) == 1


def _events_of_a_migration(tmp_path: Path) -> int:
    root = _copy(tmp_path / "count")
    events = events_of_an_open(root, tmp_path / "count.txt")
    shutil.rmtree(root)
    return events


def _kill_points(events: int) -> list[int]:
    """The first and last events (the database's creation; the switch and the clean-up),
    a spread between them, and kills aimed inside SQLite statements."""
    spread = range(8, events - 8, max(1, (events - 16) // 12))
    before = [*range(1, 9), *spread, *range(events - 8, events + 1)]
    after = [-k for k in range(5, events, max(1, events // 5))]
    return sorted(set(before)) + after


@pytest.mark.slow
def test_a_migration_killed_at_any_point_leaves_a_store_that_opens(tmp_path: Path) -> None:
    versions = {1: 0, FORMAT_VERSION: 0}
    kills = 0
    points = _kill_points(_events_of_a_migration(tmp_path))
    for kill_at in points:
        root = _copy(tmp_path / f"k{kill_at}")
        killed = open_killed_at(root, kill_at)
        version = read_format_version(root)
        assert version in (1, FORMAT_VERSION), (kill_at, version)
        versions[version] += killed
        kills += killed
        if kill_at > 0 and not killed:
            shutil.rmtree(root)
            continue  # the migration made fewer events than kill_at
        _check_everything(root)
        shutil.rmtree(root)
    assert kills >= len(points) - 2
    assert versions[1] > 0 and versions[FORMAT_VERSION] > 0  # kills before and after the switch


# -- parsing format-1 files (what the migration reads from disk) ---------------------------


@given(st.binary(max_size=200))
def test_any_ref_file_parses_to_a_value_or_its_bytes(data: bytes) -> None:
    value = parse_ref_file(data)
    if isinstance(value, str):
        assert data == value.encode() + b"\n" and "\n" not in value and value
    else:
        assert value == data


@given(st.text(min_size=1).filter(lambda t: not any(c in t for c in "\n\r\0")))
def test_a_valid_ref_value_round_trips(value: str) -> None:
    assert parse_ref_file(value.encode() + b"\n") == value


@given(st.binary(max_size=500))
def test_any_reflog_file_parses_without_raising(data: bytes) -> None:
    for old, new, micros, reason in parse_reflog_file(data):
        assert old is None or (isinstance(old, str) and old)
        assert new is None or (isinstance(new, str) and new)
        assert isinstance(micros, int) and isinstance(reason, str)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=10),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=8,
)


@given(st.lists(json_values, max_size=5))
def test_reflog_records_that_are_json_but_not_records_are_kept_as_damage(
    values: list[object],
) -> None:
    data = b"".join(b"\n" + json.dumps(v).encode() for v in values)
    rows = parse_reflog_file(data)
    assert len(rows) == len(values)  # nothing silently dropped
    for row in rows:
        assert row[2] == INVALID_TIME or row[2] >= 0


@given(
    st.lists(
        st.tuples(
            st.sampled_from(["", "a" * 64, "b" * 64]),
            st.sampled_from(["", "c" * 64]),
            st.datetimes(min_value=datetime(1971, 1, 1), max_value=datetime(2999, 1, 1)),
            st.text(max_size=20),
        ),
        max_size=5,
    ),
    st.booleans(),
)
def test_valid_reflog_records_round_trip(
    records: list[tuple[str, str, datetime, str]], torn: bool
) -> None:
    lines = [
        json.dumps(
            {
                "old": old,
                "new": new,
                "time": format_time(when.replace(tzinfo=UTC)),
                "reason": reason,
            }
        )
        for old, new, when, reason in records
    ]
    data = b"".join(b"\n" + line.encode() for line in lines)
    if torn:
        data += b'\n{"old": "", "new'  # a record cut by a crash is dropped
    rows = parse_reflog_file(data)
    assert [(o, n, r) for o, n, _, r in rows] == [
        (o or None, n or None, r) for o, n, _, r in records
    ]
    for (_, _, micros, _), (_, _, when, _) in zip(rows, records, strict=True):
        assert micros == (when - datetime(1970, 1, 1)) // timedelta(microseconds=1)
