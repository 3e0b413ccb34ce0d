"""Crash at any instant: a child works on a store and is SIGKILLed; nothing acknowledged
is lost and nothing unacknowledged is half-visible (see tests/support/harness.py).

The CI subset runs a little over 200 kill points; ``python -m bench.soak`` runs thousands.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import time
from datetime import timedelta
from pathlib import Path

import pytest
from support import harness
from support.store_helpers import move_rows_into_batch_pack, row_oids, set_all_row_times

import cas_journal as cj
from cas_journal.backends import LocalStore
from cas_journal.maintenance import fsck, gc
from cas_journal.objects import Kind, MessageNode, canonical_json, object_id

# (seed, durable, mode): both durability settings, both kinds of kill timing
STORES = [
    (11, False, "delay"),
    (12, True, "delay"),
    (13, False, "syscall"),
    (14, True, "syscall"),
    (15, False, "mixed"),
    (16, True, "mixed"),
    (17, False, "mixed"),
    (18, True, "mixed"),
    (19, False, "syscall"),
    (20, True, "delay"),
    (21, False, "mixed"),
    (22, True, "syscall"),
    (23, True, "mixed"),
    (24, False, "mixed"),
]
CYCLES_PER_STORE = 16


@pytest.mark.slow
def test_two_hundred_kill_points_lose_nothing(tmp_path: Path) -> None:
    stats = harness.CycleStats()
    started = time.monotonic()
    for seed, durable, mode in STORES:
        harness.run_store(tmp_path / f"s{seed}", seed, CYCLES_PER_STORE, durable, mode, stats=stats)
    elapsed = time.monotonic() - started
    print(
        f"\n{stats.kills} kill points survived in {elapsed:.1f} s; in flight: "
        f"{dict(sorted(stats.interrupted.items()))}; {stats.in_sql_commit} inside an SQLite "
        f"COMMIT, {stats.in_sql_statement} right after another statement"
    )
    assert stats.failures == []
    assert stats.kills >= 200
    assert stats.in_sql_commit > 0 and stats.in_sql_statement > 0
    # kills landed inside the interesting operations, not only between them
    for op in ("append", "batch", "pack", "sync", "ckpt"):
        assert stats.interrupted.get(op, 0) > 0, stats.interrupted
    assert stats.interrupted.get("gc", 0) + stats.interrupted.get("gc-prune", 0) > 0


def test_the_verifier_catches_a_lost_entry(tmp_path: Path) -> None:
    """The harness itself can fail: a store that lost an acknowledged entry is reported."""
    stats = harness.run_store(tmp_path / "s", 5, 2, False, "delay")
    assert stats.failures == []
    records = harness.read_log(tmp_path / "s" / "acks")
    model, _ = harness.replay(records)
    with cj.Journal.open(tmp_path / "s" / "store", durable=False) as j:
        live = model.live_threads()
        j.create_thread(cj.ThreadMeta(id="intruder"))
        if live:
            with j.batch(live[0]) as b:
                b.append(
                    cj.Entry(
                        type=cj.EntryType.USER_MESSAGE, message=cj.Message(role="user", content="x")
                    )
                )
    problems, _ = harness.verify(
        tmp_path / "s" / "store", tmp_path / "s" / "mirror", tmp_path / "s" / "acks"
    )
    assert not live or any("unacknowledged" in p for p in problems), problems
    assert any("listed" in p for p in problems), problems


def _chain(messages: list[dict[str, str]]) -> list[str]:
    links, parent = [], None
    for message in messages:
        body = MessageNode(object_id(Kind.BLOB, canonical_json(message)), parent).body()
        parent = object_id(Kind.MESSAGE, body)
        links.append(parent)
    return links


def test_gc_keeps_what_a_young_unreachable_object_references(tmp_path: Path) -> None:
    """Regression (fixed in maintenance/collector.py): the grace period kept a young
    unreachable message node but deleted the older nodes below it; a later checkpoint
    reusing that chain (save freshens only the last shared node) became unloadable."""
    messages = [{"role": "user", "content": f"m{i}"} for i in range(3)]
    with cj.Journal.open(tmp_path / "s", durable=False) as j:
        j.checkpoints.segments = False  # a run saved as a chain (test_segments: segments)
        j.checkpoints.save(cj.Checkpoint(run_id="a", iteration=1, messages=messages[:2]))
        j.checkpoints.save(cj.Checkpoint(run_id="a", iteration=2, messages=messages))
        j.checkpoints.delete("a")
        links = _chain(messages)
        old = time.time() - 7200  # everything two hours old except one freshened node
        set_all_row_times(j.store, old, except_oids=(links[1],))
        report = gc(j.store, reflog_expiry=timedelta(0))
        assert report.deleted_objects > 0 and report.kept_young_objects >= 3
        assert fsck(j.store).ok
        j.checkpoints.save(cj.Checkpoint(run_id="b", iteration=1, messages=messages))
        assert j.checkpoints.load("b").messages == messages
        assert fsck(j.store).ok


def _gc_killed_at_delete(store: Path, k: int) -> bool:
    """Run a prune-now gc in a child that SIGKILLs itself before its kth row deletion."""
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        real, calls = sqlite3.connect, [0]

        def trace(sql: str) -> None:
            if sql.startswith("DELETE FROM objects"):
                calls[0] += 1
                if calls[0] == k:
                    os.kill(os.getpid(), signal.SIGKILL)

        def connect(*args: object, **kwargs: object) -> sqlite3.Connection:
            conn = real(*args, **kwargs)  # type: ignore[arg-type]
            conn.set_trace_callback(trace)
            return conn

        sqlite3.connect = connect  # type: ignore[assignment]
        with cj.Journal.open(store, durable=False) as j:
            gc(j.store, prune_now=True, reflog_expiry=timedelta(0))
        os._exit(0)
    _, status = os.waitpid(pid, 0)
    return os.WIFSIGNALED(status)


@pytest.mark.slow
def test_gc_killed_mid_sweep_keeps_garbage_closed(tmp_path: Path) -> None:
    messages = [{"role": "user", "content": f"m{i}"} for i in range(12)]
    broken = []
    kills = 0
    for k in range(1, 60):
        store = tmp_path / f"s{k}"
        with cj.Journal.open(store, durable=False) as j:
            j.checkpoints.segments = False  # a chain: 21 objects, each a kill point
            j.checkpoints.save(cj.Checkpoint(run_id="a", iteration=1, messages=messages[:10]))
            j.checkpoints.delete("a")
        if not _gc_killed_at_delete(store, k):
            break  # gc finished before its kth deletion: every deletion has been a kill point
        kills += 1
        with cj.Journal.open(store, durable=False) as j:
            if not fsck(j.store).ok:
                broken.append(f"fsck after kill at deletion {k}")
            j.checkpoints.save(cj.Checkpoint(run_id="b", iteration=1, messages=messages))
            try:
                j.checkpoints.load("b")
            except cj.JournalError as exc:
                broken.append(f"kill at deletion {k}: acknowledged checkpoint unloadable: {exc}")
    assert kills >= 21  # 10 blobs, 10 message nodes and the checkpoint are garbage
    assert broken == []


@pytest.mark.slow
def test_a_store_whose_creation_was_killed_opens(tmp_path: Path) -> None:
    """Regression (fixed in backends/local/store.py): a process killed while creating a
    store (layout directories made, FORMAT not yet written) left a directory that every
    later open refused as "not empty and holds no cas-journal store"."""
    from cas_journal.backends import LocalStore

    outcomes = set()
    for k in range(1, 200):
        target = tmp_path / f"s{k}"
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child
            trap = harness.SyscallTrap(k)
            trap.install()
            trap.armed = True
            LocalStore(target, durable=True).close()
            os._exit(0)
        _, status = os.waitpid(pid, 0)
        outcomes.add(os.WIFSIGNALED(status))
        with cj.Journal.open(target) as j:  # must not raise StoreFormatError
            j.create_thread(cj.ThreadMeta(id="t"))
        assert fsck(j.store).ok
        if not os.WIFSIGNALED(status):
            break  # creation made fewer calls than k: every call has been a kill point
    assert outcomes == {True, False}  # some kills landed inside the creation
    (tmp_path / "foreign").mkdir()
    (tmp_path / "foreign" / "objects").mkdir()
    (tmp_path / "foreign" / "objects" / "mine.txt").write_text("user data")
    with pytest.raises(cj.StoreFormatError):
        LocalStore(tmp_path / "foreign")


def test_pack_never_removes_a_batch_pack_written_while_it_ran(tmp_path: Path) -> None:
    """Regression (fixed in maintenance/packer.py ``pack``): pack listed the packs, then
    removed every pack present when it started writing, including a batch pack a writer
    had published in between, whose objects were not in the new pack."""
    from cas_journal.maintenance import pack

    with cj.Journal.open(tmp_path / "s", durable=False) as j:
        objects = j.store.objects
        objects.put(Kind.BLOB, b"loose one")
        written: list[str] = []
        real_usage = objects.usage

        def usage_then_a_writer_commits() -> dict[str, int]:
            result = real_usage()
            if not written:  # a concurrent batch commit lands right after pack listed packs
                written.extend(objects.put_many([(Kind.BLOB, b"batch %d" % i) for i in range(100)]))
            return result

        objects.usage = usage_then_a_writer_commits  # type: ignore[method-assign]
        pack(j.store)
        objects.usage = real_usage  # type: ignore[method-assign]
        assert len(written) == 100
        assert all(objects.has(oid) for oid in written)
        assert objects.get(written[7]) == (Kind.BLOB, b"batch 7")


def _batch(store: LocalStore, tag: str, size: int = 80) -> list[str]:
    """A put_many of ``size`` objects outside a commit (what sync and import do): one
    batch pack, then a merge of batch packs."""
    return store.objects.put_many(
        [(Kind.BLOB, b"%s object %d" % (tag.encode(), i)) for i in range(size)]
    )


@pytest.mark.slow
def test_a_batch_write_killed_at_every_call_of_its_pack_merge(tmp_path: Path) -> None:
    """Kill a batch write (which publishes a pack, then merges batch packs) at each of its
    file-system calls: the store stays fsck-clean, holds every earlier object, and the
    batch is either wholly there or wholly absent."""
    import shutil

    from cas_journal.packs import merging

    template = tmp_path / "template"
    with LocalStore(template) as store:
        base = [oid for n in range(3) for oid in _batch(store, f"base {n}")]
    killed_batch = [object_id(Kind.BLOB, b"killed object %d" % i) for i in range(80)]
    merged_runs = overlapping = kills = 0
    for k in range(1, 400):
        target = tmp_path / f"s{k}"
        shutil.copytree(template, target)
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child
            merging.MERGE_MIN_PACKS = 1  # merge as soon as the ratio breaks
            with LocalStore(target) as store:
                trap = harness.SyscallTrap(k)
                trap.install()
                with trap.operation():
                    _batch(store, "killed")
            os._exit(0)
        _, status = os.waitpid(pid, 0)
        with LocalStore(target) as store:
            report = fsck(store)
            assert report.ok, (k, report.problems)
            assert store.objects.missing(base) == set(), k
            assert len(store.objects.missing(killed_batch)) in (0, 80), k
            packs = len(store.objects.packs())
        shutil.rmtree(target)
        if not os.WIFSIGNALED(status):
            assert packs == 1  # the write finished: everything was merged into one pack
            break
        kills += 1
        merged_runs += packs == 1
        overlapping += packs == 4  # two old, the new batch pack and the merged one
    assert kills >= 20  # the write and its merge make at least this many calls
    assert overlapping >= 1  # some kills left the merged pack beside the packs it holds
    assert merged_runs >= 1  # and some landed after the old packs were gone


def _batch_in_a_pack(j: cj.Journal, tag: str, size: int) -> None:
    """A batch commit to thread "t" whose objects are then moved into a batch pack."""
    before = set(row_oids(j.store))
    with j.batch("t") as b:
        for i in range(size):
            b.append(_entry("t", f"{tag} message {i}"))
    move_rows_into_batch_pack(j.store, [oid for oid in row_oids(j.store) if oid not in before])


@pytest.mark.slow
def test_gc_over_packs_killed_at_every_call(tmp_path: Path) -> None:
    """Kill a prune-now gc at its file-system calls while it removes loose garbage, a
    pack mixing garbage with live objects (which it rewrites) and a merged batch pack
    whose garbage and a loose object reference each other both ways (which it loosens):
    after every kill the store is fsck-clean and every live thread reads back whole; an
    unkilled run leaves no garbage."""
    import shutil

    from cas_journal.maintenance import pack
    from cas_journal.packs import merging

    template = tmp_path / "template"
    saved = merging.MERGE_MIN_PACKS
    merging.MERGE_MIN_PACKS = 1
    try:
        with cj.Journal.open(template, durable=False) as j:
            for name in ("live", "doomed"):
                j.create_thread(cj.ThreadMeta(id=name))
                for i in range(4):
                    j.append(_entry(name, f"{name} {i}"))
            pack(j.store)  # live and doomed in one pack
            j.create_thread(cj.ThreadMeta(id="t"))
            _batch_in_a_pack(j, "first", 30)
            j.append(_entry("t", "between the batches"))
            _batch_in_a_pack(j, "second", 30)  # merged with the first around the loose entry
            j.create_thread(cj.ThreadMeta(id="garbage-pack"))
            with j.batch("garbage-pack") as b:
                for i in range(40):
                    b.append(_entry("garbage-pack", f"garbage {i}"))
            for name in ("doomed", "t", "garbage-pack"):
                j.delete_thread(name)
            live = [e.id for e in j.path("live")]
    finally:
        merging.MERGE_MIN_PACKS = saved
    kills = 0
    for k in range(1, 2000, 9):  # every 9th of its ~300 calls (CI time)
        store = tmp_path / f"s{k}"
        shutil.copytree(template, store)
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child
            trap = harness.SyscallTrap(k)
            trap.install()  # before opening: SQL statements count as kill points too
            with cj.Journal.open(store, durable=False) as j, trap.operation():
                gc(j.store, prune_now=True, reflog_expiry=timedelta(0))
            os._exit(0)
        _, status = os.waitpid(pid, 0)
        with cj.Journal.open(store, durable=False) as j:
            report = fsck(j.store)
            assert report.ok, (k, report.problems)
            assert [e.id for e in j.path("live")] == live, k
            if not os.WIFSIGNALED(status):
                assert {t.id for t in j.list_threads(include_archived=True)} == {"live"}
                assert gc(j.store, prune_now=True, reflog_expiry=timedelta(0)).deleted_objects == 0
        shutil.rmtree(store)
        if not os.WIFSIGNALED(status):
            break
        kills += 1
    assert kills >= 25


def _entry(thread: str, text: str) -> cj.Entry:
    return cj.Entry(
        thread_id=thread,
        type=cj.EntryType.USER_MESSAGE,
        message=cj.Message(role="user", content=text),
    )


def _gc_killed_at_removal(store: Path, k: int) -> bool:
    """Run a prune-now gc in a child that SIGKILLs itself at its kth removal point: right
    after a file unlink (a pack's index or data) or right before a COMMIT (a transaction
    deleting or adding rows). True if the kill landed."""
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        real_unlink, real_connect, calls = os.unlink, sqlite3.connect, [0]

        def count() -> None:
            calls[0] += 1
            if calls[0] == k:
                os.kill(os.getpid(), signal.SIGKILL)

        def unlink(*args: object, **kwargs: object) -> None:
            real_unlink(*args, **kwargs)  # type: ignore[arg-type]
            count()

        def trace(sql: str) -> None:
            if sql.strip().upper() == "COMMIT":
                count()

        def connect(*args: object, **kwargs: object) -> sqlite3.Connection:
            conn = real_connect(*args, **kwargs)  # type: ignore[arg-type]
            conn.set_trace_callback(trace)
            return conn

        with cj.Journal.open(store, durable=False) as j:
            os.unlink = unlink  # type: ignore[assignment]
            sqlite3.connect = connect  # type: ignore[assignment]
            j.store.close()  # reconnect through the traced connect
            gc(j.store, prune_now=True, reflog_expiry=timedelta(0))
        os._exit(0)
    _, status = os.waitpid(pid, 0)
    return os.WIFSIGNALED(status)


def test_gc_killed_between_packs_that_share_garbage(tmp_path: Path) -> None:
    """Regression (fixed in maintenance/sweep.py ``retire_packs``; the crash soak's
    "references missing thread" after a killed gc): gc retired in one call two packs that
    both held an old thread state, judging each pack alone ("its garbage is stored
    elsewhere too"), while a newer state referencing it kept a row (waiting for its own
    referencer). Killed after both packs went and before that row did, the store held a
    state whose parent was gone. A pack killed after publishing its new pack leaves such
    a store: the new pack beside the old one, and the rows."""
    import shutil

    from cas_journal.backends.copies import PackOptions
    from cas_journal.maintenance import pack

    template = tmp_path / "template"
    with cj.Journal.open(template, durable=False) as j:
        for name in ("live", "doomed"):
            j.create_thread(cj.ThreadMeta(id=name))
            for i in range(3):
                j.append(_entry(name, f"{name} {i}"))
        pack(j.store)  # the old pack: both threads so far
        for i in range(3):
            j.append(_entry("doomed", f"doomed later {i}"))  # rows over the packed states
        copies = j.store.stored_copies
        assert copies is not None
        dictionaries = {p.dictionary_oid for p in copies.packs()}
        everything = sorted({c.oid for c in copies.scan()} - dictionaries)
        copies.write_pack(everything, PackOptions())  # what the killed pack published
        j.delete_thread("doomed")
        live = [e.id for e in j.path("live")]
        assert len(copies.packs()) == 2
    kills = 0
    for k in range(1, 200):
        store = tmp_path / f"s{k}"
        shutil.copytree(template, store)
        killed = _gc_killed_at_removal(store, k)
        with cj.Journal.open(store, durable=False) as j:
            report = fsck(j.store)
            assert report.ok, (k, [f"{p.subject[:16]} {p.message}" for p in report.problems][:3])
            assert [e.id for e in j.path("live")] == live, k
            if not killed:  # gc finished: every removal point has been a kill point
                assert {t.id for t in j.list_threads(include_archived=True)} == {"live"}
                assert gc(j.store, prune_now=True, reflog_expiry=timedelta(0)).deleted_objects == 0
        shutil.rmtree(store)
        if not killed:
            break
        kills += 1
    assert kills >= 10  # two packs (index and data each) and the row transactions
