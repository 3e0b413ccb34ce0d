"""The backend contract run against the memory and local backends, plus local specifics."""

from __future__ import annotations

import fcntl
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import threading
import time
import tracemalloc
from datetime import timedelta
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from support.backend_contract import GARBAGE_FORMAT_RECORDS, StoreContract
from support.processes import run_children
from support.store_helpers import corrupt_row, row_oids, set_frame

from cas_journal import errors as cj_errors
from cas_journal.backends import LocalStore, MemoryStore
from cas_journal.errors import CorruptObject, StoreFormatError
from cas_journal.objects import Kind, ObjectCodec


class TestMemoryStore(StoreContract):
    def make_store(self, tmp_path):
        return MemoryStore()

    def reopen(self, store):
        return store

    def corrupt(self, store, oid):
        _, other = ObjectCodec().encode(Kind.BLOB, b"something else")
        store.objects.corrupt_for_tests(oid, other)


class TestLocalStore(StoreContract):
    def make_store(self, tmp_path):
        return LocalStore(tmp_path / "store", durable=False)

    def reopen(self, store):
        return LocalStore(store.root, durable=False, create=False)

    def corrupt(self, store, oid):
        corrupt_row(store, oid)


class TestLocalStoreDurable(TestLocalStore):
    def make_store(self, tmp_path):
        return LocalStore(tmp_path / "store", durable=True)

    def reopen(self, store):
        return LocalStore(store.root, durable=True, create=False)


ROOT = Path(__file__).resolve().parent.parent


def test_four_processes_compare_and_swap_without_losing_an_increment(tmp_path):
    store = LocalStore(tmp_path / "s", durable=False)
    assert store.refs.set_if_equals("threads/counter", None, "0")
    script = """
        import sys
        from cas_journal.backends import LocalStore
        refs = LocalStore(sys.argv[1], durable=False).refs
        for _ in range(500):
            while True:
                current = refs.read_ref("threads/counter")
                if refs.set_if_equals("threads/counter", current, str(int(current) + 1), "inc"):
                    break
    """
    results = run_children(script, 4, str(store.root))
    assert all(r.returncode == 0 for r in results), [r.stderr for r in results]
    assert store.refs.read_ref("threads/counter") == "2000"
    assert len(store.refs.reflog("threads/counter")) == 2001


def test_four_processes_writing_the_same_objects(tmp_path):
    store = LocalStore(tmp_path / "s", durable=False)
    script = """
        import sys
        from cas_journal.backends import LocalStore
        from cas_journal.objects import Kind
        objects = LocalStore(sys.argv[1], durable=False).objects
        for i in range(1000):
            objects.put(Kind.BLOB, b"shared object %d" % i)
    """
    results = run_children(script, 4, str(store.root))
    assert all(r.returncode == 0 for r in results), [r.stderr for r in results]
    rows = row_oids(store)
    assert len(rows) == 1000  # one copy of each
    for oid in rows:
        assert store.objects.verify_row(oid) is Kind.BLOB
    assert {p.name for p in store.root.iterdir()} <= {
        "FORMAT",
        "packs",
        "reserve",
        "store.db",
        "store.db-shm",
        "store.db-wal",
    }


def _hold_until_killed(script: str, root: Path) -> None:
    """Run ``script`` in a child that prints "locked" once it holds a lock; kill it."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    holder = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(script), str(root)], env=env, stdout=subprocess.PIPE
    )
    assert holder.stdout is not None
    assert holder.stdout.readline().strip() == b"locked"
    holder.send_signal(signal.SIGKILL)
    holder.wait()


def test_a_killed_writer_inside_a_transaction_never_blocks_others(tmp_path):
    store = LocalStore(tmp_path / "s", durable=False)
    _hold_until_killed(
        """
        import sys, time
        from cas_journal.backends import LocalStore
        store = LocalStore(sys.argv[1], durable=False)
        conn = store.db.connection()
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("INSERT INTO refs VALUES ('threads/victim', 'half')")
        print("locked", flush=True)
        time.sleep(60)
        """,
        store.root,
    )
    start = time.monotonic()
    assert store.refs.read_ref("threads/victim") is None  # the killed transaction never was
    assert store.refs.set_if_equals("threads/victim", None, "v")
    assert time.monotonic() - start < 5
    assert store.refs.read_ref("threads/victim") == "v"


@pytest.mark.parametrize("lock", ["writers", "maintenance"])
def test_a_killed_holder_of_the_store_locks_never_blocks_others(tmp_path, lock):
    store = LocalStore(tmp_path / "s", durable=False)
    held = "store.writers.exclusive()" if lock == "writers" else "store.objects.maintenance_lock()"
    _hold_until_killed(
        f"""
        import sys, time
        from cas_journal.backends import LocalStore
        store = LocalStore(sys.argv[1], durable=False)
        with {held}:
            print("locked", flush=True)
            time.sleep(60)
        """,
        store.root,
    )
    start = time.monotonic()
    with store.writers.exclusive(), store.objects.maintenance_lock(wait=False) as got:
        assert got
    assert time.monotonic() - start < 5


def test_deleting_files_cannot_defeat_the_store_locks(tmp_path):
    """Regression (issue 16, format 1): deleting the files under locks/ let a second
    holder in. The locks now live on the store directory and its FORMAT file; removing
    any other file of the store frees nothing."""
    store = LocalStore(tmp_path / "s", durable=False)
    other = LocalStore(tmp_path / "s", durable=False)
    with store.writers.exclusive(), store.objects.maintenance_lock():
        for path in sorted(store.root.iterdir()):
            if path.name not in ("FORMAT", "store.db", "store.db-wal"):
                (path.rmdir if path.is_dir() else path.unlink)()
        fd = os.open(other.root, os.O_RDONLY)
        try:  # a pruning gc in another process cannot get in
            with pytest.raises(BlockingIOError):
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        finally:
            os.close(fd)
        with other.objects.maintenance_lock(wait=False) as got:
            assert not got


def test_newer_format_is_refused(tmp_path):
    LocalStore(tmp_path / "s").close()
    (tmp_path / "s" / "FORMAT").write_text("cas-journal 99\n")
    with pytest.raises(StoreFormatError, match="format 99"):
        LocalStore(tmp_path / "s")


def test_garbage_format_and_foreign_directories_are_refused(tmp_path):
    (tmp_path / "foreign").mkdir()
    (tmp_path / "foreign" / "notes.txt").write_text("mine")
    with pytest.raises(StoreFormatError):
        LocalStore(tmp_path / "foreign")
    with pytest.raises(StoreFormatError):
        LocalStore(tmp_path / "absent", create=False)
    assert not (tmp_path / "absent").exists()
    LocalStore(tmp_path / "s").close()
    for garbage in [*GARBAGE_FORMAT_RECORDS, "cas-journal 2\n\n"]:
        (tmp_path / "s" / "FORMAT").write_text(garbage)
        with pytest.raises(StoreFormatError):
            LocalStore(tmp_path / "s")


def test_a_database_with_a_foreign_schema_is_refused(tmp_path):
    """A hostile store.db (an extra trigger would run inside our transactions) is refused."""
    LocalStore(tmp_path / "s").close()
    conn = sqlite3.connect(tmp_path / "s" / "store.db")
    conn.execute("CREATE TRIGGER wipe AFTER INSERT ON refs BEGIN DELETE FROM objects; END")
    conn.commit()
    conn.close()
    with pytest.raises(StoreFormatError, match="did not create"):
        LocalStore(tmp_path / "s")
    for suffix in ("-wal", "-shm"):
        (tmp_path / "s" / f"store.db{suffix}").unlink(missing_ok=True)
    (tmp_path / "s" / "store.db").write_bytes(b"not a database at all" * 500)
    with pytest.raises(StoreFormatError):
        LocalStore(tmp_path / "s")


def test_a_new_database_has_small_pages_and_an_old_one_keeps_its_own(tmp_path):
    """New stores get PAGE_SIZE pages; a database made with other pages (4 KiB, as earlier
    versions made) is used as it is, and the store reports its size (``page_size``, by
    which the committer estimates the pages a commit writes)."""
    from cas_journal.backends import RefUpdate, new_object
    from cas_journal.backends.local import database

    with LocalStore(tmp_path / "new", durable=False) as store:
        assert store.refs.set_if_equals("threads/t", None, "v")
        assert store.db.page_size == database.PAGE_SIZE == 2048
        row = store.db.row("PRAGMA page_size")
        assert row is not None and row[0] == 2048
    old = tmp_path / "old"
    LocalStore(old, durable=False).close()
    conn = sqlite3.connect(old / "store.db", isolation_level=None)
    conn.execute("PRAGMA journal_mode=DELETE")  # (SQLite changes a WAL database's pages
    conn.execute("PRAGMA page_size=4096")  # only outside WAL mode)
    conn.execute("VACUUM")
    conn.execute("PRAGMA journal_mode=WAL")
    conn.close()
    with LocalStore(old, durable=False, create=False) as store:
        blob = new_object(Kind.BLOB, b"x" * 10_000)
        assert store.commit([blob], RefUpdate("threads/t", None, blob.oid))
        assert store.db.page_size == 4096
        assert store.objects.get(blob.oid)[1] == b"x" * 10_000
    conn = sqlite3.connect(old / "store.db")
    assert conn.execute("PRAGMA page_size").fetchone()[0] == 4096
    conn.close()


def test_names_never_escape_the_store(tmp_path):
    store = LocalStore(tmp_path / "s", durable=False)
    for name in ["../x", "../../escape", "/abs", "a/../../b", "..", "."]:
        assert store.refs.set_if_equals(f"threads/{name}", None, "v")
    outside = [p for p in tmp_path.iterdir() if p.name != "s"]
    assert outside == []
    names = {p.name for p in store.root.iterdir()}
    assert names <= {"FORMAT", "packs", "reserve", "store.db", "store.db-wal", "store.db-shm"}


def test_a_commit_is_one_transaction(tmp_path):
    from cas_journal.backends import IndexUpdate, RefUpdate, new_object

    store = LocalStore(tmp_path / "s", durable=True)
    statements: list[str] = []
    store.db.connection().set_trace_callback(statements.append)
    objects = [new_object(Kind.BLOB, b"payload"), new_object(Kind.ENTRY, b"{}")]
    assert store.commit(
        objects,
        RefUpdate("threads/t", None, objects[1].oid, "create"),
        [IndexUpdate("threadindex/1/t", "1")],
    )
    assert [s for s in statements if s.startswith("BEGIN")] == ["BEGIN IMMEDIATE"]
    assert statements.count("COMMIT") == 1
    body = statements[statements.index("BEGIN IMMEDIATE") : statements.index("COMMIT")]
    assert any("INSERT INTO refs" in s and "threads/t" in s for s in body)
    assert any("INSERT INTO refs" in s and "threadindex/1/t" in s for s in body)
    inserts = [s.lower() for s in body if "INSERT INTO objects" in s]
    assert len(inserts) == 2  # a row per statement (no statement journal, see commits)
    assert all(sum(f"x'{obj.oid}'" in s for s in inserts) == 1 for obj in objects)
    assert any("INSERT INTO reflog" in s for s in body)
    assert not any(s.lstrip().startswith("SELECT") for s in body)  # no probe, no second read


@pytest.mark.parametrize("count", [1, 2, 150])
def test_a_commit_writes_every_row_in_order(tmp_path, count):
    """Rows are upserted one per statement: one row through ``execute``, more through
    ``executemany`` (the only boundary, ``commits._each``)."""
    from cas_journal.backends import RefUpdate, new_object

    store = LocalStore(tmp_path / "s", durable=False)
    old = new_object(Kind.BLOB, b"stored before")
    store.objects.store_new([old])
    before = store.objects.row_time(old.oid)
    objects = [new_object(Kind.BLOB, b"row %d" % k + bytes(k * 20)) for k in range(count)]
    # an object listed twice and one stored already: upserted in order, as rows one by one
    listed = [*objects, objects[0], old]
    assert store.commit(listed, RefUpdate("threads/t", None, objects[-1].oid, "create"))
    assert all(store.objects.get(obj.oid) == (obj.kind, obj.body) for obj in listed)
    times = {obj.oid: store.objects.row_time(obj.oid) for obj in listed}
    assert before is not None and times[old.oid] > before
    written = times[objects[-1].oid] if count > 1 else times[objects[0].oid] - 1
    assert all(times[obj.oid] == written for obj in objects[1:])
    assert times[objects[0].oid] == written + 1  # its second row raised the time
    assert store.db.rows("SELECT count(*) FROM objects") == [(count + 1,)]


def test_reflog_rows_keep_an_absent_side_as_null(tmp_path):
    """A created or deleted ref logs its absent side as NULL (written by the statement
    itself, not bound), and so does a logged check that a ref is absent."""
    store = LocalStore(tmp_path / "s", durable=False)
    a, b = "a" * 64, "b" * 64
    assert store.refs.set_if_equals("threads/x", None, None, "absent")
    assert store.refs.set_if_equals("threads/x", None, a, "create")
    assert store.refs.set_if_equals("threads/x", a, b, "move")
    assert store.refs.set_if_equals("threads/x", b, None, "delete")
    rows = store.db.rows(
        "SELECT old, new, reason FROM reflog WHERE name = 'threads/x' ORDER BY seq"
    )
    assert rows == [
        (None, None, "absent"),
        (None, a, "create"),
        (a, b, "move"),
        (b, None, "delete"),
    ]
    assert [(e.old, e.new) for e in store.refs.reflog("threads/x")] == [
        (None, None),
        (None, a),
        (a, b),
        (b, None),
    ]


@pytest.mark.parametrize("durable", [True, False])
def test_durability_sets_synchronous(tmp_path, durable):
    store = LocalStore(tmp_path / "s", durable=durable)
    level = store.db.connection().execute("PRAGMA synchronous").fetchone()[0]
    assert level == (2 if durable else 1)  # FULL / NORMAL
    assert store.db.connection().execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_non_durable_store_never_syncs(tmp_path, monkeypatch):
    store = LocalStore(tmp_path / "s", durable=False)
    calls = []
    monkeypatch.setattr(os, "fsync", lambda fd: calls.append(fd))
    oid = store.objects.put(Kind.BLOB, b"fast")
    store.objects.put_many([(Kind.BLOB, b"%d" % i) for i in range(100)])
    store.refs.set_if_equals("threads/t", None, oid)
    assert calls == []


def test_batches_become_packs_and_read_back_after_reopen(tmp_path):
    store = LocalStore(tmp_path / "s", durable=True)
    oids = store.objects.put_many([(Kind.BLOB, b"packed %d" % i) for i in range(500)])
    assert len(list((store.root / "packs").glob("*.idx"))) == 1
    assert list(store.objects.iter_loose()) == []
    again = LocalStore(store.root, create=False)
    assert again.objects.get(oids[123]) == (Kind.BLOB, b"packed 123")
    assert sorted(again.objects.iter_oids()) == sorted(oids)


def test_another_process_sees_a_new_pack(tmp_path):
    reader = LocalStore(tmp_path / "s", durable=False)
    writer = LocalStore(tmp_path / "s", durable=False)
    oids = writer.objects.put_many([(Kind.BLOB, b"fresh %d" % i) for i in range(100)])
    assert reader.objects.has(oids[0])
    assert reader.objects.get(oids[-1]) == (Kind.BLOB, b"fresh 99")


def test_an_oversized_row_is_refused_without_reading_it_whole(tmp_path):
    store = LocalStore(tmp_path / "s", durable=False, max_object_size=4096)
    oid = store.objects.put(Kind.BLOB, b"small")
    limit = store.objects.codec.max_frame_size
    set_frame(store, oid, b"\0" * (limit * 40))
    tracemalloc.start()
    try:
        with pytest.raises(CorruptObject) as caught:
            store.objects.get(oid)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert oid in str(caught.value)
    assert peak < limit * 4
    with pytest.raises(CorruptObject):
        store.objects.verify_row(oid)


@pytest.mark.parametrize("frame", [b"", "text, not bytes", 42, b"\x28\xb5\x2f\xfd garbage"])
def test_a_row_holding_garbage_is_a_corrupt_object(tmp_path, frame):
    store = LocalStore(tmp_path / "s", durable=False)
    oid = store.objects.put(Kind.BLOB, b"payload")
    set_frame(store, oid, frame)
    with pytest.raises(CorruptObject):
        store.objects.get(oid)


# -- group commit ------------------------------------------------------------------------


def _queued_commits(store: LocalStore, changes: list, wait_for: int) -> list:
    """Submit ``changes`` from threads while the leader lock is held, so that they queue
    up; then release it: one thread leads them all. Returns each thread's outcome."""
    from cas_journal.backends.local.commits import Change

    results: list = [None] * len(changes)

    def submit(k: int) -> None:
        try:
            results[k] = store.committer.submit(changes[k])
        except Exception as exc:
            results[k] = exc

    committer = store.committer
    with committer._leader:
        workers = [threading.Thread(target=submit, args=(k,)) for k in range(len(changes))]
        for worker in workers:
            worker.start()
        deadline = time.monotonic() + 10
        while len(committer._queue) < wait_for and time.monotonic() < deadline:
            time.sleep(0.001)
        assert len(committer._queue) == wait_for
    for worker in workers:
        worker.join()
    assert all(isinstance(c, Change) and c.done for c in changes)
    return results


def test_a_new_leader_gathers_the_callers_of_the_previous_transaction(tmp_path, monkeypatch):
    """Threads committing in a loop share transactions: a leader waits (boundedly) for
    the callers the previous transaction served before it starts its own, and a caller
    that was alone never waits."""
    from cas_journal.backends import RefUpdate, new_object
    from cas_journal.backends.local import commits
    from cas_journal.backends.local.commits import Change

    monkeypatch.setattr(commits, "GATHER_LIMIT", 30.0)
    store = LocalStore(tmp_path / "s", durable=False)
    committer = store.committer
    gathered: list[int] = []
    real_gather = commits.Committer._gather

    def counting(self):
        gathered.append(threading.get_ident())
        real_gather(self)

    monkeypatch.setattr(commits.Committer, "_gather", counting)
    old = None
    for i in range(5):  # alone: never gathers
        blob = new_object(Kind.BLOB, b"alone %d" % i)
        assert store.commit([blob], RefUpdate("threads/a", old, blob.oid))
        old = blob.oid
    assert gathered == []

    ready = threading.Barrier(3)
    go = [threading.Event(), threading.Event()]
    results: list[object] = [None, None]
    idents: list[int] = [0, 0]

    def writer(k: int) -> None:
        idents[k] = threading.get_ident()
        ready.wait()
        go[k].wait()
        blob = new_object(Kind.BLOB, b"writer %d" % k)
        results[k] = committer.submit(
            Change(store.objects.rows_of([blob]), RefUpdate(f"threads/w{k}", None, blob.oid))
        )

    workers = [threading.Thread(target=writer, args=(k,)) for k in range(2)]
    for worker in workers:
        worker.start()
    ready.wait()
    committer._served = frozenset(idents)  # as if the previous transaction served both
    committer._took = 30.0
    before = committer.transactions
    go[0].set()
    deadline = time.monotonic() + 10
    while not gathered:  # the first one leads, and waits for the other
        assert time.monotonic() < deadline
        time.sleep(0.005)
    time.sleep(0.05)
    assert committer.transactions == before
    go[1].set()
    for worker in workers:
        worker.join(10)
    assert results == [True, True]
    assert committer.transactions == before + 1  # both in one transaction
    assert gathered == [idents[0]]
    assert committer._served == frozenset(idents)


def test_concurrent_durable_commits_share_one_transaction(tmp_path):
    from cas_journal.backends import RefUpdate, new_object
    from cas_journal.backends.local.commits import Change

    store = LocalStore(tmp_path / "s", durable=True)
    store.refs.set_if_equals("threads/shared", None, "0")
    changes = []
    for k in range(6):
        blob = new_object(Kind.BLOB, b"writer %d" % k)
        changes.append(
            Change(store.objects.rows_of([blob]), RefUpdate(f"threads/w{k}", None, blob.oid))
        )
    changes.append(Change((), RefUpdate("threads/shared", "0", "1")))
    changes.append(Change((), RefUpdate("threads/shared", "0", "2")))  # loses: 0 is gone by then
    before = store.committer.transactions
    results = _queued_commits(store, changes, len(changes))
    assert store.committer.transactions == before + 1  # one transaction, one fsync
    assert results == [True] * 7 + [False]
    assert store.refs.read_ref("threads/shared") == "1"
    for k in range(6):
        assert store.objects.get(store.refs.read_ref(f"threads/w{k}")) == (
            Kind.BLOB,
            b"writer %d" % k,
        )
    assert len(store.refs.reflog("threads/shared")) == 2


def test_a_caller_alone_still_takes_what_was_queued_meanwhile(tmp_path):
    """A caller that was alone in the previous transaction leads at once (no wait, no
    gathering), yet its transaction still takes every change queued before it got the
    leader lock, in order, and the callers served are both of them afterwards."""
    from cas_journal.backends import RefUpdate
    from cas_journal.backends.local.commits import Change

    store = LocalStore(tmp_path / "s", durable=False)
    committer = store.committer
    results: dict[str, object] = {}
    idents: dict[str, int] = {}
    first_done = threading.Event()
    go = threading.Event()

    def alone() -> None:
        idents["alone"] = threading.get_ident()
        results["first"] = committer.submit(Change((), RefUpdate("threads/a", None, "1")))
        first_done.set()
        go.wait(10)
        results["alone"] = committer.submit(Change((), RefUpdate("threads/a", "1", "2")))

    def other() -> None:
        idents["other"] = threading.get_ident()
        # queued after the lone caller's change: sees its effect in the same transaction
        results["other"] = committer.submit(Change((), RefUpdate("threads/b", None, "x")))
        results["lost"] = committer.submit(Change((), RefUpdate("threads/a", "1", "3")))

    first = threading.Thread(target=alone)
    first.start()
    assert first_done.wait(10)
    assert committer._served == frozenset([idents["alone"]])
    before = committer.transactions
    with committer._leader:
        go.set()
        deadline = time.monotonic() + 10
        while not committer._queue and time.monotonic() < deadline:
            time.sleep(0.001)
        assert len(committer._queue) == 1 and committer._leading  # led at once
        second = threading.Thread(target=other)
        second.start()
        while len(committer._queue) < 2 and time.monotonic() < deadline:
            time.sleep(0.001)
        assert len(committer._queue) == 2
    first.join(10)
    second.join(10)
    assert results == {"first": True, "alone": True, "other": True, "lost": False}
    assert committer.transactions == before + 2  # the pair, then the lost swap alone
    assert store.refs.read_ref("threads/a") == "2"
    assert store.refs.read_ref("threads/b") == "x"


def test_a_failing_group_gives_each_caller_its_own_outcome(tmp_path):
    from cas_journal.backends import RefUpdate
    from cas_journal.backends.local.commits import Change

    store = LocalStore(tmp_path / "s", durable=False)
    # the group's transaction fails (a full disk that recovers): each change is then
    # retried alone and every caller gets its own outcome
    changes = [Change((), RefUpdate(f"threads/{n}", None, "1")) for n in "abc"]
    real_write = store.db.write
    calls = []

    def failing_first(work, what, damaged=cj_errors.CorruptRef, **options):
        calls.append(what)
        if len(calls) == 1:
            error = sqlite3.OperationalError("database or disk is full")
            error.sqlite_errorcode = sqlite3.SQLITE_FULL
            error.sqlite_errorname = "SQLITE_FULL"
            raise cj_errors.StorageError("committing failed: no space left on device") from error
        return real_write(work, what, damaged, **options)

    store.db.write = failing_first
    results = _queued_commits(store, changes, 3)
    assert results == [True, True, True]
    assert len(calls) == 4  # the group, then each change alone
    assert [store.refs.read_ref(f"threads/{n}") for n in "abc"] == ["1", "1", "1"]


def test_a_store_locked_too_long_is_a_one_line_conflict(tmp_path, monkeypatch):
    from cas_journal.backends.local import database

    monkeypatch.setattr(database, "BUSY_TIMEOUT", 0.2)
    store = LocalStore(tmp_path / "s", durable=False)
    store.refs.set_if_equals("threads/t", None, "v1")
    other = sqlite3.connect(store.root / "store.db", isolation_level=None)
    other.execute("BEGIN IMMEDIATE")  # another process holding the write lock
    try:
        with pytest.raises(cj_errors.ConflictError) as caught:
            store.refs.set_if_equals("threads/t", "v1", "v2")
        assert "\n" not in str(caught.value) and "locked" in str(caught.value)
        assert not isinstance(caught.value.__cause__, type(None))
        assert store.refs.read_ref("threads/t") == "v1"  # readers are never blocked
    finally:
        other.execute("ROLLBACK")
        other.close()
    assert store.refs.set_if_equals("threads/t", "v1", "v2")


def test_a_read_only_open_reads_and_refuses_writes(tmp_path):
    store = LocalStore(tmp_path / "s", durable=False)
    oid = store.objects.put(Kind.BLOB, b"kept")
    store.refs.set_if_equals("threads/t", None, oid)
    store.close()
    reader = LocalStore(tmp_path / "s", read_only=True)
    assert reader.refs.read_ref("threads/t") == oid
    assert reader.objects.get(oid) == (Kind.BLOB, b"kept")
    with pytest.raises(cj_errors.StorageError, match="read-only"):
        reader.refs.set_if_equals("threads/t", oid, None)
    with pytest.raises(cj_errors.StorageError, match="read-only"):
        reader.objects.put(Kind.BLOB, b"new")
    with pytest.raises(StoreFormatError):
        LocalStore(tmp_path / "absent", read_only=True)
    assert not (tmp_path / "absent").exists()


# -- rows read back from the database ----------------------------------------------------------


row_values = st.one_of(
    st.none(),
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.floats(allow_nan=False),
    st.text(max_size=30),
    st.binary(max_size=30),
)


@given(st.tuples(row_values, row_values, row_values, row_values))
def test_any_reflog_row_parses_or_is_a_corrupt_ref(row):
    from cas_journal.backends.local.refs import parse_reflog_row

    try:
        entry = parse_reflog_row("threads/t", row)
    except cj_errors.CorruptRef as exc:
        assert "threads/t" in str(exc)
        return
    assert entry.old == row[0] and entry.new == row[1] and entry.reason == row[3]
    assert entry.time.tzinfo is not None


@given(row_values)
def test_any_ref_value_parses_or_is_a_corrupt_ref(value):
    from cas_journal.backends.local.refs import parse_value

    try:
        assert parse_value("threads/t", value) == value
    except cj_errors.CorruptRef:
        assert not (isinstance(value, str) and value and "\n" not in value and "\r" not in value)


@given(
    st.lists(
        st.tuples(
            st.sampled_from(["threads/", "threadindex/", "leases/"]),
            st.text(min_size=1, max_size=8).filter(lambda t: "\0" not in t),
        ),
        max_size=12,
        unique=True,
    ),
    st.text(max_size=6),
)
def test_list_refs_matches_a_sorted_filter(tmp_path_factory, names, prefix_tail):
    store = LocalStore(tmp_path_factory.mktemp("s"), durable=False)
    full = sorted({a + b for a, b in names})
    for name in full:
        assert store.refs.set_if_equals(name, None, "v")
    for prefix in ("threads/", "threads/" + prefix_tail, "", "threadindex/"):
        expected = [n for n in full if n.startswith(prefix)]
        assert store.refs.list_refs(prefix) == expected
        if expected:
            assert store.refs.list_refs(prefix, start_after=expected[0], limit=2) == expected[1:3]
    store.close()


def test_listing_is_an_index_range_query(tmp_path):
    store = LocalStore(tmp_path / "s", durable=False)
    conn = store.db.connection()
    plan = conn.execute(
        "EXPLAIN QUERY PLAN SELECT name FROM refs WHERE name >= ? AND name < ? AND name > ? "
        "ORDER BY name LIMIT 50",
        ("threadindex/", "threadindex0", "threadindex/x"),
    ).fetchall()
    detail = " ".join(str(row[-1]) for row in plan)
    assert "SEARCH refs USING PRIMARY KEY" in detail and "SCAN" not in detail


def test_a_forked_child_uses_the_store_it_inherited(tmp_path):
    """The child never touches its parent's connections or locks (SQLite forbids using a
    connection across fork): it opens its own, and both processes keep committing."""
    import cas_journal as cj

    j = cj.Journal.open(tmp_path / "s", durable=False)
    j.create_thread(cj.ThreadMeta(id="parent"))
    j.create_thread(cj.ThreadMeta(id="child"))
    with j.store.writers.shared():  # a lock held at fork time is the parent's alone
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child
            code = 0
            try:
                for i in range(50):
                    cj.append_message(j, "child", "u", cj.Message(role="user", content=f"c{i}"))
                with j.store.writers.exclusive():  # not blocked by the parent's shared hold
                    pass
            except BaseException:
                code = 3
            os._exit(code)
        for i in range(50):
            cj.append_message(j, "parent", "u", cj.Message(role="user", content=f"p{i}"))
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
    assert [e.message.content for e in j.path("child")] == [f"c{i}" for i in range(50)]
    assert [e.message.content for e in j.path("parent")] == [f"p{i}" for i in range(50)]
    j.close()


def test_usage_reports_what_is_on_disk(tmp_path):
    from cas_journal.maintenance import pack

    store = LocalStore(tmp_path / "s", durable=False)
    oids = [store.objects.put(Kind.BLOB, os.urandom(2000)) for _ in range(20)]
    usage = store.objects.usage()
    assert usage["loose_objects"] == 20 and usage["loose_bytes"] > 20 * 2000
    assert usage["database_bytes"] + usage["wal_bytes"] >= usage["loose_bytes"]
    files = sum(p.stat().st_size for p in store.root.rglob("*") if p.is_file())
    assert usage["file_bytes"] == files
    assert usage["disk_bytes"] >= files
    pack(store)
    after = store.objects.usage()
    assert after["loose_objects"] == 0 and after["packs"] == 1 and after["packed_objects"] == 20
    assert after["packed_bytes"] == after["pack_data_bytes"] + after["pack_index_bytes"] > 0
    assert store.objects.missing(oids) == set()


# -- gc's row rule: commits take no lock against gc ---------------------------------------


def _chain(store: LocalStore, texts: list[str]) -> list[str]:
    """Store a chain of message nodes (each references its blob and its parent)."""
    from cas_journal.objects import MessageNode, canonical_json

    oids, parent = [], None
    for text in texts:
        blob = store.objects.put(Kind.BLOB, canonical_json({"content": text}))
        parent = store.objects.put(Kind.MESSAGE, MessageNode(blob, parent).body())
        oids += [blob, parent]
    return oids


def test_sweep_spares_what_rows_written_since_gc_started_reference(tmp_path):
    from cas_journal.objects import MessageNode, canonical_json

    store = LocalStore(tmp_path / "s", durable=False)
    garbage = _chain(store, ["a", "b", "c"]) + _chain(store, ["x", "y"])
    since = store.objects.gc_start()
    # after gc started: a commit links a new node on top of the first chain's tip, and
    # another re-inserts (freshens) the second chain's first node
    blob = store.objects.put(Kind.BLOB, canonical_json({"content": "d"}))
    store.objects.put(Kind.MESSAGE, MessageNode(blob, garbage[5]).body())
    store.objects.freshen([garbage[7]])
    kept = store.objects.sweep_rows(garbage, since, since)
    assert kept == set(garbage[:6]) | set(garbage[6:8])  # the first chain and x's node+blob
    assert store.objects.missing(garbage) == set(garbage[8:])
    assert store.objects.missing(kept) == set()


def test_sweep_deletes_unreferenced_garbage_in_one_transaction(tmp_path):
    store = LocalStore(tmp_path / "s", durable=False)
    garbage = _chain(store, ["a", "b"])
    statements: list[str] = []
    store.db.connection().set_trace_callback(statements.append)
    since = store.objects.gc_start()
    assert store.objects.sweep_rows(garbage, since, since) == set()
    assert store.objects.missing(garbage) == set(garbage)
    deletes = [i for i, s in enumerate(statements) if s.startswith("DELETE FROM objects")]
    begins = [i for i, s in enumerate(statements) if s.startswith("BEGIN")]
    assert (
        len(deletes) == 4
        and begins[-1] < deletes[0]
        and "COMMIT" not in statements[deletes[0] : deletes[-1]]
    )


def test_freshening_a_packed_object_makes_it_a_young_row(tmp_path):
    from cas_journal.maintenance import pack

    store = LocalStore(tmp_path / "s", durable=False)
    (oid,) = _chain(store, ["a"])[:1]
    pack(store)
    assert row_oids(store) == []
    assert store.objects.freshen([oid, "f" * 64]) == {"f" * 64}
    assert row_oids(store) == [oid]
    assert store.objects.verify_row(oid) is Kind.BLOB


def _checkpoint_commit(store: LocalStore, run_id: str, messages: list[dict], reuse: int) -> None:
    """Save a checkpoint the way the journal does, without any lock: the message chain's
    first ``reuse`` links are already stored, and only the last of them is re-inserted
    (which freshens it) with the new links and the checkpoint node, in one commit."""
    from cas_journal.backends import NewObject, RefUpdate
    from cas_journal.objects import (
        CheckpointNode,
        MessageNode,
        canonical_json,
        format_time,
        object_id,
        utc_now,
    )

    links, parent = [], None
    for message in messages:
        body = canonical_json(message)
        blob = NewObject(object_id(Kind.BLOB, body), Kind.BLOB, body)
        node = MessageNode(blob.oid, parent).body()
        parent = object_id(Kind.MESSAGE, node)
        links.append((blob, NewObject(parent, Kind.MESSAGE, node)))
    objects = [links[reuse - 1][1]] + [o for pair in links[reuse:] for o in pair]
    checkpoint = CheckpointNode(
        run_id=run_id,
        created_at=format_time(utc_now()),
        iteration=1,
        message_count=len(messages),
        messages=parent,
    ).body()
    objects.append(NewObject(object_id(Kind.CHECKPOINT, checkpoint), Kind.CHECKPOINT, checkpoint))
    assert store.commit(
        objects, RefUpdate(f"checkpoints/{run_id}", None, objects[-1].oid, "save 1")
    )


def test_a_commit_between_gc_marking_and_sweeping_is_kept(tmp_path):
    """Commits take no lock against gc. A checkpoint that reuses a deleted run's message
    chain (garbage when gc marked; half of it packed) is committed after gc listed its
    garbage and before it sweeps: everything the new checkpoint reaches survives."""
    import cas_journal as cj
    from cas_journal.maintenance import fsck, gc, pack

    j = cj.Journal.open(tmp_path / "s", durable=False)
    j.checkpoints.segments = False  # the chain _checkpoint_commit reuses
    messages = [{"role": "user", "content": f"m{i}"} for i in range(8)]
    j.checkpoints.save(cj.Checkpoint(run_id="gone", iteration=1, messages=messages[:3]))
    pack(j.store)
    j.checkpoints.save(cj.Checkpoint(run_id="gone", iteration=2, messages=messages[:6]))
    j.checkpoints.delete("gone")
    other = LocalStore(tmp_path / "s", durable=False)  # another process's gc
    copies = other.stored_copies
    committed: list[str] = []

    def commit_first(real):
        def wrapper(names, older_than):
            if not committed:  # gc has marked and listed its garbage: a writer commits
                committed.append(real.__name__)
                _checkpoint_commit(j.store, "kept", messages, reuse=6)
            return real(names, older_than)

        return wrapper

    copies.delete_loose = commit_first(copies.delete_loose)  # type: ignore[method-assign]
    copies.retire_packs = commit_first(copies.retire_packs)  # type: ignore[method-assign]
    report = gc(other, prune_now=True, reflog_expiry=timedelta(0))
    assert committed and report.unreachable_objects == 14  # 6 links, 6 blobs, 2 checkpoints
    assert report.kept_young_objects == 12 and report.deleted_objects == 2
    assert j.checkpoints.load("kept").messages == messages
    assert fsck(j.store).ok
    report = gc(other, prune_now=True, reflog_expiry=timedelta(0))
    assert report.deleted_objects == 0 and report.unreachable_objects == 0
    assert j.checkpoints.load("kept").messages == messages
    assert fsck(j.store).ok
    j.close()
    other.close()


def test_replace_rows_repairs_a_damaged_row(tmp_path):
    from cas_journal.backends import new_object

    store = LocalStore(tmp_path / "s", durable=False)
    obj = new_object(Kind.BLOB, b"precious")
    store.objects.store_new([obj])
    corrupt_row(store, obj.oid)
    with pytest.raises(CorruptObject):
        store.objects.get(obj.oid)
    store.objects.store_new([obj])  # an ordinary write only freshens: still damaged
    with pytest.raises(CorruptObject):
        store.objects.get(obj.oid)
    store.objects.replace_rows([obj])
    assert store.objects.get(obj.oid) == (Kind.BLOB, b"precious")


def test_a_pack_whose_garbage_a_young_row_reaches_is_not_retired(tmp_path):
    """A commit after gc began re-links a packed garbage node (re-inserting it as a row):
    the pack holding what that node references must stay until the node goes."""
    from cas_journal.backends import RefUpdate, new_object
    from cas_journal.maintenance import pack
    from cas_journal.objects import MessageNode, canonical_json

    store = LocalStore(tmp_path / "s", durable=False)
    garbage = _chain(store, ["a", "b"])  # blob a, node a, blob b, node b -> node a
    pack(store)
    (packed,) = store.stored_copies.packs()
    copies = store.stored_copies
    copies.begin_collection()
    node_b = store.objects.get(garbage[3])[1]
    body = canonical_json({"content": "c"})
    blob_c = new_object(Kind.BLOB, body)
    node_c = new_object(Kind.MESSAGE, MessageNode(blob_c.oid, garbage[3]).body())
    relinked = new_object(Kind.MESSAGE, node_b)
    assert store.commit([relinked, blob_c, node_c], RefUpdate("checkpoints/x", None, node_c.oid))
    assert copies.retire_packs([packed.name], time.time() + 1) == {packed.name}
    assert store.objects.missing(garbage) == set()
    copies.begin_collection()  # a later gc, once the commit is old news: the pack may go
    assert copies.retire_packs([packed.name], time.time() + 1) == set()


def test_get_many_reads_rows_and_packs_in_one_pass_and_falls_back(tmp_path):
    """get_many answers packed objects pack by pack and rows with one query per chunk:
    every object verified (packed copies first: a damaged row beside one is not read), a
    damaged object with no other copy CorruptObject, an absent one ObjectNotFound."""
    from cas_journal.backends.local import objects as local_objects
    from cas_journal.errors import ObjectNotFound
    from cas_journal.maintenance import pack

    store = LocalStore(tmp_path / "s", durable=False)
    packed = [store.objects.put(Kind.BLOB, b"packed %d" % i) for i in range(30)]
    pack(store)
    rows = [store.objects.put(Kind.BLOB, b"row %d" % i) for i in range(1200)]
    both = packed[3]
    set_frame(store, both, ObjectCodec().encode(Kind.BLOB, b"packed 3")[1])  # a row copy too
    corrupt_row(store, both)  # damaged row, intact packed copy
    corrupt_row(store, rows[7])  # damaged, no other copy
    statements: list[str] = []
    conn = store.objects.db.connection()
    conn.set_trace_callback(statements.append)
    wanted = packed + [oid for oid in rows if oid != rows[7]]
    got = {oid: (kind, body) for oid, kind, body in store.objects.get_many(reversed(wanted))}
    conn.set_trace_callback(None)
    assert got == {oid: store.objects.get(oid) for oid in wanted}
    assert got[rows[1199]] == (Kind.BLOB, b"row 1199")
    selects = [s for s in statements if "FROM objects WHERE oid IN" in s]
    assert len(selects) == -(-1199 // local_objects._ROWS_PER_QUERY)  # not one per row
    with pytest.raises(CorruptObject):
        list(store.objects.get_many([rows[6], rows[7]]))
    with pytest.raises(ObjectNotFound):
        list(store.objects.get_many([rows[0], "ab" * 32]))


# -- deleting files under a live store (issue 16 item 1) ----------------------------------

_WRITER = """
import sys, time
from pathlib import Path
from cas_journal.backends import LocalStore, RefUpdate, new_object
from cas_journal.errors import StorageError
root, tag, count, pause = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
for attempt in range(200):  # opening may fail (one clear error) until the WAL is rescued
    try:
        store = LocalStore(root, durable=False, create=False)
        break
    except StorageError:
        time.sleep(0.05)
acks = open(root.parent / f"acks-{tag}", "a", buffering=1)
for i in range(count):
    blob = new_object(Kind.BLOB, b"%s %d" % (tag.encode(), i))
    try:
        if store.commit([blob], RefUpdate(f"tests/{tag}-{i}", None, blob.oid, "w")):
            acks.write(f"{tag}-{i} {blob.oid}\\n")
    except StorageError as exc:
        acks.write(f"refused {exc}\\n")
    time.sleep(pause)
print("done", flush=True)
time.sleep(60)  # killed here: never closes the store
"""


def _start_writer(root: Path, tag: str, count: int, pause: float) -> subprocess.Popen[bytes]:
    script = "from cas_journal.objects import Kind\n" + _WRITER
    return subprocess.Popen(
        [sys.executable, "-c", script, str(root), tag, str(count), str(pause)],
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE,
    )


def _finish_killed(writer: subprocess.Popen[bytes]) -> None:
    assert writer.stdout is not None
    assert writer.stdout.readline().strip() == b"done"
    writer.send_signal(signal.SIGKILL)
    writer.wait()


def _acknowledged(tmp_path: Path) -> tuple[dict[str, str], list[str]]:
    acked: dict[str, str] = {}
    refused: list[str] = []
    for path in tmp_path.glob("acks-*"):
        for line in path.read_text().splitlines():
            if line.startswith("refused "):
                refused.append(line)
            else:
                name, oid = line.split()
                acked[name] = oid
    return acked, refused


@pytest.mark.parametrize("victim", ["store.db-wal", "store.db-shm"])
def test_deleting_the_wal_or_its_index_under_live_writers_loses_no_acknowledged_write(
    tmp_path, victim
):
    """Two writer processes commit while the WAL (or the WAL index, which holds SQLite's
    locks) is deleted and a third process opens the store afresh and commits: every
    commit a writer acknowledged before it was killed (never closing the store) is there
    afterwards, and a writer whose files were replaced refuses instead of acknowledging
    into a file nobody else sees (or under a lock nobody else takes)."""
    from cas_journal.maintenance import fsck

    root = tmp_path / "s"
    LocalStore(root, durable=False).close()
    first = [_start_writer(root, tag, 40, 0.02) for tag in ("a", "b")]
    deadline = time.monotonic() + 60
    while len(_acknowledged(tmp_path)[0]) < 10 and time.monotonic() < deadline:
        time.sleep(0.01)  # both writers have the files open and have committed
    (root / victim).unlink()
    late = _start_writer(root, "c", 20, 0.02)  # opens after the deletion: new files
    for writer in [*first, late]:
        _finish_killed(writer)
    acked, refused = _acknowledged(tmp_path)
    with LocalStore(root, durable=False, create=False) as store:
        lost = [name for name, oid in acked.items() if store.refs.read_ref(f"tests/{name}") != oid]
        assert lost == []
        for oid in acked.values():
            assert store.objects.get(oid)[0] is Kind.BLOB
        assert fsck(store).ok
    assert len(acked) >= 60
    assert refused and all("deleted or replaced" in line for line in refused)


def test_file_ids_are_one_object_while_the_files_stay(tmp_path):
    """``file_ids`` returns the very tuple it found last while the WAL and its index stay
    the same files (a write's check compares by identity first), and a new, unequal one
    once a file was replaced."""
    store = LocalStore(tmp_path / "s", durable=False)
    assert store.refs.set_if_equals("threads/a", None, "1")
    conn = store.db.connection()
    opened = store.db._files[id(conn)]
    assert store.db.file_ids() is opened
    assert store.db.current_file_ids() == opened
    (store.root / "store.db-wal").unlink()
    replaced = store.db.file_ids()
    assert replaced is not opened and replaced != opened
    assert store.db.file_ids() is replaced
    store.close()


@pytest.mark.parametrize("victim", ["store.db-wal", "store.db-shm"])
def test_a_replaced_file_is_seen_when_the_directory_had_settled(tmp_path, monkeypatch, victim):
    """Once the store directory has not changed for a while, a write checks the WAL and
    its index with one fstat of the directory; deleting either file changes the
    directory, so the next write still refuses."""
    from cas_journal.backends.local import database
    from cas_journal.backends.local.database import FilesReplaced

    monkeypatch.setattr(database, "SETTLED_NS", 0)
    store = LocalStore(tmp_path / "s", durable=False)
    time.sleep(0.05)  # later than any timestamp tick the directory's last change had
    assert store.refs.set_if_equals("threads/a", None, "1")
    assert store.refs.set_if_equals("threads/a", "1", "2")
    settled = store.db._settled
    assert settled is not None and settled[1] == store.db.file_ids()
    calls: list[str] = []
    real_stat = os.stat

    def counting_stat(path, *args, **kwargs):
        calls.append(str(path))
        return real_stat(path, *args, **kwargs)

    monkeypatch.setattr(database.os, "stat", counting_stat)
    assert store.refs.set_if_equals("threads/a", "2", "3")
    # before and after COMMIT: the directory only, through the descriptor the store holds
    assert calls == [str(store.db._directory_fd)] * 2
    assert os.path.samestat(os.fstat(store.db._directory_fd), os.stat(store.root))
    monkeypatch.setattr(database.os, "stat", real_stat)
    time.sleep(0.05)
    (store.root / victim).unlink()
    with pytest.raises(FilesReplaced) as refused:
        store.refs.set_if_equals("threads/a", "3", "4")
    assert not refused.value.after_commit
    assert store.refs.set_if_equals("threads/a", "3", "4")  # reopened on the new files
    store.close()
    with LocalStore(tmp_path / "s", durable=False, create=False) as again:
        assert again.refs.read_ref("threads/a") == "4"


def test_a_deleted_format_file_never_reinitialises_the_store(tmp_path):
    """Opening (with create) a store whose FORMAT was deleted refuses and changes nothing:
    it never takes the database for what an interrupted init left."""
    from cas_journal.backends import RefUpdate, new_object

    root = tmp_path / "s"
    store = LocalStore(root, durable=False)
    blob = new_object(Kind.BLOB, b"kept")
    assert store.commit([blob], RefUpdate("threads/t", None, blob.oid))
    store.close()
    (root / "FORMAT").unlink()
    with pytest.raises(StoreFormatError, match="FORMAT file is missing"):
        LocalStore(root, durable=False)
    (root / "FORMAT").write_text("cas-journal 2\n")
    with LocalStore(root, durable=False, create=False) as again:
        assert again.refs.read_ref("threads/t") == blob.oid
        assert again.objects.get(blob.oid) == (Kind.BLOB, b"kept")


def test_deleting_every_other_file_never_lets_gc_past_a_writer(tmp_path):
    """A writer between storing objects and linking them holds the writers' lock (on the
    store directory): with every file but the database deleted meanwhile, a pruning gc in
    another process still waits for it (no lock lives in a file one can delete)."""
    root = tmp_path / "s"
    LocalStore(root, durable=False).close()
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            textwrap.dedent(
                """
                import sys, time
                from cas_journal.backends import LocalStore
                store = LocalStore(sys.argv[1], durable=False)
                with store.objects.write_guard():
                    print("locked", flush=True)
                    time.sleep(60)
                """
            ),
            str(root),
        ],
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE,
    )
    assert holder.stdout is not None
    try:
        assert holder.stdout.readline().strip() == b"locked"
        for path in root.rglob("*"):
            if path.is_file() and not path.name.startswith("store.db") and path.name != "FORMAT":
                path.unlink()
        other = LocalStore(root, durable=False, create=False)
        waited = threading.Event()

        def prune() -> None:
            with other.writers.exclusive():
                waited.set()

        pruner = threading.Thread(target=prune, daemon=True)
        pruner.start()
        assert not waited.wait(1.0)  # still excluded by the writer
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    assert waited.wait(30)  # and gets in once the writer is gone
    pruner.join()
    other.close()


def test_checkpoints_run_beside_the_commits(tmp_path, monkeypatch):
    """A thread of the store's own checkpoints the WAL every CHECKPOINT_EVERY writes (so no
    commit pays for a checkpoint's syncs): with SQLite's automatic checkpoint off, the WAL
    still stays small, and closing the store stops the thread."""
    from cas_journal.backends import RefUpdate, new_object
    from cas_journal.backends.local import database

    monkeypatch.setattr(database, "CHECKPOINT_EVERY", 20)
    monkeypatch.setattr(database, "RELAXED_RESTART_FRAMES", 1000)  # (not durable)
    monkeypatch.setattr(database, "AUTOCHECKPOINT_PAGES", 0)  # 0: SQLite never checkpoints
    store = LocalStore(tmp_path / "s", durable=False)
    old = None
    seen = 0
    for i in range(600):
        blob = new_object(Kind.BLOB, b"%d" % i * 300)
        assert store.commit([blob], RefUpdate("threads/t", old, blob.oid))
        old = blob.oid
        if i % 100 == 99:  # let the checkpointer keep up on a loaded machine
            deadline = time.monotonic() + 10
            while store.db.checkpointer.checkpoints <= seen:
                assert time.monotonic() < deadline
                time.sleep(0.01)
            seen = store.db.checkpointer.checkpoints
    assert seen >= 6
    # a background checkpoint that starts after the last write (it copies every frame),
    # then: the first checkpoint asked for may be one that began before the last writes
    # (a request while one runs is remembered, not repeated), the second began after it
    for _ in range(2):
        count = store.db.checkpointer.checkpoints
        store.db.checkpointer.request()
        deadline = time.monotonic() + 10
        while store.db.checkpointer.checkpoints <= count:
            assert time.monotonic() < deadline
            time.sleep(0.01)
    for i in range(2):  # a write that copies what it left, and one that starts the WAL over
        blob = new_object(Kind.BLOB, b"last %d" % i)
        assert store.commit([blob], RefUpdate("threads/t", old, blob.oid))
        old = blob.oid
    with sqlite3.connect(store.root / "store.db") as raw:
        _, frames, _ = raw.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
    raw.close()
    assert frames < 50  # never started over: about 3,000 frames (600 commits)
    thread = store.db.checkpointer._thread
    assert thread is not None and thread.is_alive()
    store.close()
    assert not thread.is_alive()
    with LocalStore(tmp_path / "s", durable=False, create=False) as again:
        assert again.refs.read_ref("threads/t") == old


def test_big_transactions_ask_for_a_checkpoint_before_checkpoint_every(tmp_path, monkeypatch):
    """Background checkpoints are paced by the pages written too: a few batch-sized
    transactions (hundreds of objects each) ask for one long before CHECKPOINT_EVERY
    transactions, and small ones below CHECKPOINT_PAGES do not."""
    from cas_journal.backends import RefUpdate, new_object
    from cas_journal.backends.local import database

    monkeypatch.setattr(database, "CHECKPOINT_EVERY", 10**9)
    store = LocalStore(tmp_path / "s", durable=False)
    old = None
    for i in range(20):  # 20 small commits: about 5 pages each
        blob = new_object(Kind.BLOB, b"small %d" % i)
        assert store.commit([blob], RefUpdate("threads/t", old, blob.oid))
        old = blob.oid
    assert store.db.checkpointer._thread is None
    for i in range(4):  # 4 batches of 300 objects: over CHECKPOINT_PAGES
        batch = [new_object(Kind.BLOB, b"batch %d object %d" % (i, k)) for k in range(300)]
        assert store.commit(batch, RefUpdate("threads/t", old, batch[-1].oid))
        old = batch[-1].oid
    assert store.db.checkpointer._thread is not None
    deadline = time.monotonic() + 10
    while store.db.checkpointer.checkpoints < 1:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    store.close()


def test_a_short_wal_never_makes_a_writer_checkpoint(tmp_path, monkeypatch):
    """Below RESTART_FRAMES a writer never pays for finishing a background checkpoint (its
    syncs); the background thread still copies the WAL into store.db, and once it has
    copied everything, the next write starts the WAL over for free."""
    from cas_journal.backends import RefUpdate, new_object
    from cas_journal.backends.local import database

    monkeypatch.setattr(database, "CHECKPOINT_EVERY", 20)
    monkeypatch.setattr(database, "RELAXED_RESTART_FRAMES", 10**9)  # (not durable)
    monkeypatch.setattr(database, "AUTOCHECKPOINT_PAGES", 0)
    finished: list[object] = []
    monkeypatch.setattr(database.Checkpointer, "finish", lambda self, conn: finished.append(conn))
    store = LocalStore(tmp_path / "s", durable=False)
    old = None
    for i in range(200):
        blob = new_object(Kind.BLOB, b"%d" % i * 300)
        assert store.commit([blob], RefUpdate("threads/t", old, blob.oid))
        old = blob.oid
    assert store.db.checkpointer._thread is not None  # requested every 20 writes
    seen = -1
    while seen != store.db.checkpointer.checkpoints:  # until the requested ones are done
        seen = store.db.checkpointer.checkpoints
        time.sleep(0.2)
    store.db.checkpointer.request()  # one more, after the last write
    deadline = time.monotonic() + 10
    while store.db.checkpointer.checkpoints <= seen:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    for i in range(2):
        blob = new_object(Kind.BLOB, b"last %d" % i)
        assert store.commit([blob], RefUpdate("threads/t", old, blob.oid))
        old = blob.oid
    assert finished == []
    with sqlite3.connect(store.root / "store.db") as raw:
        _, frames, _ = raw.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
    raw.close()
    assert frames < 50  # started over (about 1,000 frames were written)
    store.close()


def test_freshen_is_not_synced_alone_on_a_durable_store(tmp_path):
    """freshen's transaction skips the sync (the commit that links the objects syncs the
    WAL, and with it everything written before); every other write stays synced, also
    after a relaxed one failed."""
    from cas_journal.backends import new_object

    store = LocalStore(tmp_path / "s", durable=True)
    blob = new_object(Kind.BLOB, b"linked later")
    store.objects.store_new([blob])

    def level(conn: sqlite3.Connection) -> int:
        return int(conn.execute("PRAGMA synchronous").fetchone()[0])

    assert store.db.write(level, "probe") == 2  # FULL
    assert store.db.write(level, "probe", sync=False) == 1  # NORMAL, for this one only
    assert store.db.write(level, "probe") == 2

    def fail(conn: sqlite3.Connection) -> None:
        raise cj_errors.StorageError("boom")

    with pytest.raises(cj_errors.StorageError):
        store.db.write(fail, "probe", sync=False)
    assert level(store.db.connection()) == 2
    seen: list[int] = []
    real_write = store.db.write

    def recording(work, what, damaged=cj_errors.CorruptRef, sync=True):
        return real_write(
            lambda conn: (seen.append(level(conn)), work(conn))[1], what, damaged, sync
        )

    store.db.write = recording  # type: ignore[method-assign]
    assert store.objects.freshen([blob.oid]) == set()
    assert seen == [1]
    store.close()
    with LocalStore(tmp_path / "s", durable=False) as nd:  # nothing to relax
        assert nd.db.write(level, "probe", sync=False) == 1


def test_read_refs_reads_many_names_in_chunks(tmp_path, monkeypatch):
    from cas_journal.backends.local import refs as local_refs

    monkeypatch.setattr(local_refs, "_REFS_PER_QUERY", 3)
    store = LocalStore(tmp_path / "s", durable=False)
    names = [f"threads/t{i}" for i in range(10)]
    for i, name in enumerate(names[:7]):
        assert store.refs.set_if_equals(name, None, f"v{i}")
    found = store.refs.read_refs(reversed(names))
    assert found == {name: (f"v{i}" if i < 7 else None) for i, name in enumerate(names)}
    with pytest.raises(ValueError):
        store.refs.read_refs(["threads/ok", "Bad/x"])


def test_commit_freshens_linked_rows_in_its_own_transaction(tmp_path):
    """A fork's commit raises its entry's row time in the transaction of the swap: one
    write transaction in all, so one sync on a durable store."""
    from cas_journal.backends import RefUpdate, new_object

    store = LocalStore(tmp_path / "s", durable=True)
    kept = store.objects.put(Kind.BLOB, b"an entry")
    before = store.objects.row_time(kept)
    head = new_object(Kind.BLOB, b"a state linking it")
    statements: list[str] = []
    store.db.connection().set_trace_callback(statements.append)
    assert store.commit([head], RefUpdate("threads/f", None, head.oid), linked=[kept])
    store.db.connection().set_trace_callback(None)
    assert sum(s.startswith("BEGIN") for s in statements) == 1
    assert sum(s == "COMMIT" for s in statements) == 1
    after = store.objects.row_time(kept)
    assert before is not None and after is not None and after > before
    store.close()


def test_commit_links_a_packed_object_through_a_row_copy(tmp_path):
    from cas_journal.backends import RefUpdate, new_object
    from cas_journal.maintenance import pack

    store = LocalStore(tmp_path / "s", durable=False)
    kept = store.objects.put(Kind.BLOB, b"packed before the fork")
    pack(store)
    assert row_oids(store) == []
    head = new_object(Kind.BLOB, b"head")
    assert store.commit([head], RefUpdate("threads/f", None, head.oid), linked=[kept])
    assert sorted(row_oids(store)) == sorted([kept, head.oid])
    assert store.objects.verify_row(kept) is Kind.BLOB


def test_commit_links_an_object_another_process_packed_meanwhile(tmp_path):
    """The row went into a pack this store has not seen yet: the commit writes nothing,
    finds the pack, writes a row copy and commits again; an object stored nowhere is
    LinkedObjectsMissing with nothing written."""
    from cas_journal.backends import RefUpdate, new_object
    from cas_journal.maintenance import pack

    store = LocalStore(tmp_path / "s", durable=False)
    kept = store.objects.put(Kind.BLOB, b"packed by another process")
    with LocalStore(tmp_path / "s", durable=False) as other:
        pack(other)
    assert row_oids(store) == []
    head = new_object(Kind.BLOB, b"head")
    before = store.committer.transactions
    assert store.commit([head], RefUpdate("threads/f", None, head.oid), linked=[kept])
    assert store.committer.transactions - before == 3  # missing, row copy, commit
    assert store.refs.read_ref("threads/f") == head.oid
    assert sorted(row_oids(store)) == sorted([kept, head.oid])
    with pytest.raises(cj_errors.LinkedObjectsMissing) as raised:
        store.commit([], RefUpdate("threads/g", None, head.oid), linked=[kept, "d" * 64])
    assert raised.value.oids == ["d" * 64]
    assert store.refs.read_ref("threads/g") is None
    store.close()
