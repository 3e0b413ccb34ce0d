"""pack, gc, fsck and stats on real stores."""

from __future__ import annotations

import contextlib
import os
import random
import sqlite3
import time
from datetime import UTC, datetime, timedelta

import pytest
from support.copies_contract import StoredCopiesContract
from support.journal_helpers import ReadCounter, stored, user
from support.store_helpers import (
    corrupt_row,
    delete_row,
    frame_of,
    row_oids,
    set_frame,
    set_row_time,
)

import cas_journal as cj
from cas_journal.backends import LocalStore, Store
from cas_journal.backends.local.database import DATABASE_FILE
from cas_journal.backends.local.packs import LocalPack, PackedObject, write_pack
from cas_journal.maintenance import fsck, gc, pack, stats
from cas_journal.objects import Kind, ObjectCodec, canonical_json


def build(j: cj.Journal, forks: int = 4, length: int = 30) -> dict[str, list[str]]:
    """A base thread, forks at different points, and a checkpoint run."""
    j.create_thread(cj.ThreadMeta(id="base"))
    big = "def handler(request):\n    return respond(request.body)\n" * 100
    for i in range(length):
        user(j, "base", f"question {i} about the parser and its error handling")
        cj.append_message(
            j, "base", f"u{i}", cj.Message(role="tool", content=big, tool_call_id=f"c{i}")
        )
    path = [e.id for e in j.path("base")]
    for f in range(forks):
        j.fork("base", path[(f + 1) * 7], new_thread_id=f"fork{f}")
        for k in range(5):
            user(j, f"fork{f}", f"fork {f} message {k}")
    messages: list[dict] = []
    for i in range(8):
        messages = [*messages, {"role": "user", "content": f"iteration {i} " * 50}]
        j.checkpoints.save(
            cj.Checkpoint(run_id="run", iteration=i, messages=messages, system_prompt="S" * 500)
        )
    return {t.id: [e.id for e in j.path(t.id)] for t in j.list_threads()}


@pytest.fixture
def j(tmp_path):
    journal = cj.Journal.open(tmp_path / "s", durable=False)
    yield journal
    journal.close()


def snapshot(j: cj.Journal) -> tuple:
    threads = j.list_threads(include_archived=True)
    return (
        threads,
        {t.id: j.path(t.id) for t in threads},
        {t.id: j.entries(t.id) for t in threads},
        j.checkpoints.load("run") if j.checkpoints.has_checkpoint("run") else None,
        j.checkpoints.history("run") if j.checkpoints.has_checkpoint("run") else None,
    )


def reopen(j: cj.Journal) -> cj.Journal:
    return cj.Journal.open(j.store.root, durable=False)


# -- pack ----------------------------------------------------------------------------------


def test_pack_keeps_everything_readable_and_shrinks(j):
    build(j)
    before = snapshot(j)
    loose_bytes = j.store.objects.usage()["loose_bytes"]
    report = pack(j.store)
    usage = j.store.objects.usage()
    assert usage["loose_objects"] == 0 and usage["packs"] == 1
    assert report.loose_objects_packed > 0 and report.bytes_after < loose_bytes
    again = reopen(j)
    assert snapshot(again) == before
    assert fsck(again.store).ok
    assert pack(again.store).objects == 0  # nothing left to do


def test_pack_gives_the_database_pages_of_packed_rows_back(j):
    build(j)
    database = j.store.root / DATABASE_FILE
    pack(j.store)
    with contextlib.closing(sqlite3.connect(database)) as conn:
        assert conn.execute("PRAGMA freelist_count").fetchone()[0] == 0


def test_small_objects_compress_far_better_packed_than_one_frame_each(j):
    rng = random.Random(7)
    sentences = [
        f"The {noun} in module {mod} {verb} when the input is empty."
        for noun in ("parser", "tokenizer", "cache", "scheduler", "handler")
        for mod in ("core", "io", "net", "cli")
        for verb in ("fails", "hangs", "returns None", "raises KeyError")
    ]
    for i in range(2000):
        text = " ".join(rng.choice(sentences) for _ in range(rng.randrange(2, 8)))
        record = {"role": rng.choice(["user", "assistant"]), "turn": i, "content": text}
        j.store.objects.put(Kind.BLOB, canonical_json(record))
    loose_bytes = j.store.objects.usage()["loose_bytes"]
    report = pack(j.store)
    (reader,) = j.store.objects.packs()
    # the compressed content is a small fraction; the index adds 48 bytes per object
    assert reader.pack_path.stat().st_size < loose_bytes / 6
    assert report.bytes_after < loose_bytes / 2
    assert fsck(j.store).ok


def test_pack_merges_batch_packs_and_new_loose_objects(j):
    build(j)
    pack(j.store)
    # a put_many of many objects outside a commit (a sync, an import) writes a batch pack
    j.store.objects.put_many([(Kind.BLOB, b"batched %d" % i) for i in range(100)])
    user(j, "fork0", "one more, loose")
    assert j.store.objects.usage()["packs"] == 2
    before = snapshot(j)
    report = pack(j.store)
    assert report.packs_merged == 2 and j.store.objects.usage()["packs"] == 1
    assert snapshot(reopen(j)) == before


def test_a_crash_mid_pack_leaves_a_valid_store(j, monkeypatch):
    build(j)
    before = snapshot(j)

    def crash(*args, **kwargs):
        raise KeyboardInterrupt("killed after the new pack was written")

    monkeypatch.setattr(j.store.stored_copies, "delete_loose", crash)
    with pytest.raises(KeyboardInterrupt):
        pack(j.store)
    monkeypatch.undo()
    again = reopen(j)
    assert fsck(again.store).ok and snapshot(again) == before
    pack(again.store)  # finishes the job
    assert again.store.objects.usage()["loose_objects"] == 0
    assert fsck(again.store).ok and snapshot(reopen(again)) == before


def test_pack_needs_a_local_store():
    with pytest.raises(ValueError):
        pack(cj.Journal.memory().store)


def test_packed_reads_look_in_packs_and_loose_transparently(j):
    build(j)
    pack(j.store)
    fresh = user(j, "base", "written after packing")
    again = reopen(j)
    assert again.path("base")[-1] == fresh
    assert again.store.objects.get(fresh.raw_hash)[0] is Kind.BLOB


# -- gc ------------------------------------------------------------------------------------


def test_gc_keeps_deleted_threads_until_the_reflog_expires(j):
    build(j)
    j.delete_thread("fork2")
    report = gc(j.store, prune_now=True)
    assert report.deleted_objects == 0
    j.restore_thread("fork2")
    assert len(j.path("fork2")) > 5


def test_gc_removes_what_nothing_reaches(j):
    paths = build(j)
    only_fork3 = set(paths["fork3"]) - set().union(
        *(set(p) for t, p in paths.items() if t != "fork3")
    )
    assert len(only_fork3) == 5
    j.delete_thread("fork3")
    j.checkpoints.delete("run")
    keep = snapshot(j)
    dry = gc(j.store, dry_run=True, prune_now=True, reflog_expiry=timedelta(0))
    assert dry.deleted_objects > 0 and dry.deleted_bytes > 0
    assert stored(j) and all(j.store.objects.has(oid) for oid in only_fork3)
    report = gc(j.store, prune_now=True, reflog_expiry=timedelta(0))
    assert report.deleted_objects == dry.deleted_objects
    assert report.reflog_entries_expired > 0
    assert not any(j.store.objects.has(oid) for oid in only_fork3)
    again = reopen(j)
    assert snapshot(again) == keep
    assert fsck(again.store).ok
    with pytest.raises(cj.ThreadNotFound):
        again.restore_thread("fork3")


def test_gc_rewrites_packs_without_garbage(j):
    paths = build(j)
    pack(j.store)
    j.delete_thread("fork1")
    report = gc(j.store, prune_now=True, reflog_expiry=timedelta(0))
    assert report.packs_rewritten == 1 and report.deleted_objects >= 5
    gone = set(paths["fork1"]) - set(paths["base"])
    assert gone and not any(j.store.objects.has(oid) for oid in gone)
    assert j.store.objects.usage()["packs"] == 1
    assert fsck(reopen(j).store).ok


def test_gc_spares_young_unreachable_objects(j):
    build(j)
    orphan = j.store.objects.put(Kind.BLOB, b"a writer is about to link me")
    report = gc(j.store, reflog_expiry=timedelta(0))  # default one-hour grace
    assert j.store.objects.has(orphan) and report.kept_young_objects >= 1
    later = datetime.now(UTC) + timedelta(hours=2)
    gc(j.store, reflog_expiry=timedelta(0), now=later)
    assert not j.store.objects.has(orphan)


def _age_into_an_old_pack(j: cj.Journal, body: bytes) -> tuple[str, LocalPack]:
    """Store ``body`` unreachable, three hours old, inside an old pack."""
    oid = j.store.objects.put(Kind.BLOB, body)
    old = time.time() - 3 * 3600
    set_row_time(j.store, oid, old)
    pack(j.store)
    (reader,) = j.store.objects.packs()
    os.utime(reader.pack_path, (old, old))
    return oid, reader


def test_old_unreachable_packed_objects_are_collected(j):
    build(j)
    oid, _ = _age_into_an_old_pack(j, b"old garbage nobody wants")
    gc(j.store, reflog_expiry=timedelta(0))  # default one-hour grace
    assert not j.store.objects.has(oid)


def test_reusing_an_old_packed_object_makes_it_young_again(j):
    build(j)
    oid, _ = _age_into_an_old_pack(j, b"old garbage that a writer reuses")
    j.store.objects._freshened.clear()
    assert j.store.objects.put(Kind.BLOB, b"old garbage that a writer reuses") == oid
    written = j.store.objects.object_time(oid)
    assert written is not None and written > time.time() - 60
    gc(j.store, reflog_expiry=timedelta(0))
    assert j.store.objects.has(oid)


def test_gc_mark_never_reads_blobs(j):
    build(j)
    counter = ReadCounter(j)
    gc(j.store, dry_run=True)
    assert counter.reads[Kind.BLOB] == 0 and counter.reads[Kind.ENTRY] > 0


def test_gc_on_a_memory_store(tmp_path):
    m = cj.Journal.memory()
    build(m)
    m.delete_thread("fork0")
    m.store.objects.put(Kind.BLOB, b"orphan")
    report = gc(m.store, reflog_expiry=timedelta(0))
    assert report.deleted_objects >= 6
    assert fsck(m.store).ok


# -- fsck ----------------------------------------------------------------------------------


def test_fsck_passes_on_a_healthy_store(j):
    build(j)
    report = fsck(j.store)
    assert report.ok and report.problems == []
    assert report.objects_checked == len(stored(j)) and report.refs_checked == 6
    quick = fsck(j.store, quick=True)
    assert quick.ok and quick.quick


def test_fsck_reports_a_damaged_loose_object(j):
    paths = build(j)
    victim = paths["base"][3]
    corrupt_row(j.store, victim)
    report = fsck(j.store)
    assert not report.ok
    assert any(p.subject == victim for p in report.problems)
    quick = fsck(reopen(j).store, quick=True)
    assert not quick.ok and any(victim in p.subject for p in quick.problems)


def test_fsck_reports_missing_objects_and_bad_refs(j):
    paths = build(j)
    entry = j.entry("fork0", paths["fork0"][-1])
    delete_row(j.store, entry.raw_hash)
    j.store.refs.set_if_equals("threads/ghost", None, "f" * 64, "test")
    j.store.refs.set_if_equals("threads/garbage", None, "not-an-oid", "test")
    j.store.refs.set_if_equals("leases/base", None, "{broken", log=False)
    report = fsck(j.store)
    messages = " | ".join(f"{p.subject}: {p.message}" for p in report.problems)
    assert not report.ok
    assert entry.raw_hash in messages
    assert "ghost" in messages and "garbage" in messages and "leases/base" in messages


def test_fsck_reports_a_damaged_pack(j):
    build(j)
    pack(j.store)
    (reader,) = j.store.objects.packs()
    index = bytearray(reader.index_path.read_bytes())
    index[-40] ^= 0xFF  # inside the block table, before the trailer
    reader.index_path.chmod(0o644)
    reader.index_path.write_bytes(bytes(index))
    report = fsck(reopen(j).store)
    assert not report.ok
    assert any(reader.name in p.subject or reader.name in p.message for p in report.problems)


def test_a_pack_index_pointing_past_its_file_is_refused(j):
    build(j)
    pack(j.store)
    (reader,) = j.store.objects.packs()
    pack_path = reader.pack_path
    pack_path.chmod(0o644)
    with open(pack_path, "r+b") as f:
        f.truncate(os.path.getsize(pack_path) // 2)
    with pytest.raises(cj.CorruptObject):
        LocalPack(reader.index_path, ObjectCodec().max_object_size)


# -- stats ---------------------------------------------------------------------------------


def test_stats_counts_and_ratios(j):
    build(j)
    report = stats(j.store)
    assert report.threads == 5 and report.runs == 1
    assert report.objects == len(stored(j))
    assert sum(report.objects_by_kind.values()) == report.objects
    threads = sum(len(e.raw.encode()) for t in j.list_threads() for e in j.entries(t.id))
    runs = 0
    for saved in j.checkpoints.history("run"):
        full = j.checkpoints.load("run", iteration=saved.iteration)
        runs += len(full.system_prompt.encode())
        runs += sum(len(canonical_json(message)) for message in full.messages)
    assert report.logical_bytes == threads + runs
    assert report.dedup_ratio > 1.5
    assert report.content_bytes * report.dedup_ratio == pytest.approx(report.logical_bytes, 0.01)
    assert report.loose_objects == report.objects and report.stored_bytes > 0
    pack(j.store)
    packed = stats(j.store)
    assert packed.loose_objects == 0 and 0 < packed.stored_bytes < report.stored_bytes
    assert packed.logical_bytes == report.logical_bytes
    assert packed.overall_ratio > report.overall_ratio


def test_gc_removes_temp_files_left_by_killed_writers(j):
    build(j)
    pack(j.store)
    leftover = j.store.root / "packs" / ".tmp-killed-writer"
    leftover.write_bytes(b"half an object")
    fresh = leftover.with_name(".tmp-writing-now")
    fresh.write_bytes(b"still being written")
    old = time.time() - 7200
    os.utime(leftover, (old, old))
    report = gc(j.store)
    assert report.temp_files_removed == 1
    assert not leftover.exists() and fresh.exists()


# -- the stored-copies contract on the local store ------------------------------------------


class TestLocalStoredCopies(StoredCopiesContract):
    """Database rows and pack files."""

    @pytest.fixture
    def store(self, tmp_path):
        opened = LocalStore(tmp_path / "s", durable=False)
        yield opened
        opened.close()

    def reopen(self, store: Store) -> Store:
        assert isinstance(store, LocalStore)
        return LocalStore(store.root, durable=False, create=False)

    def damage_loose(self, store: Store, oid: str) -> None:
        assert isinstance(store, LocalStore)
        frame = frame_of(store, oid)
        assert frame is not None
        data = bytearray(frame)
        data[len(data) // 2] ^= 0x5A
        set_frame(store, oid, bytes(data))


# -- gc over stored copies: order of work and the closure invariant ------------------------


class Recorder:
    """Wraps a store's stored copies: records each primitive called and, after every
    removal, checks that each object still stored finds everything it references."""

    def __init__(self, store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls: list[str] = []
        self.broken: list[str] = []
        copies = store.stored_copies
        assert copies is not None
        for name in ("delete_loose", "retire_packs", "write_pack", "loosen"):
            monkeypatch.setattr(copies, name, self._wrap(store, name, getattr(copies, name)))

    def _wrap(self, store, name, real):
        def wrapper(*args, **kwargs):
            result = real(*args, **kwargs)
            self.calls.append(name)
            if name in ("delete_loose", "retire_packs"):
                self.broken += closure_problems(store)
            return result

        return wrapper


def closure_problems(store: Store) -> list[str]:
    from cas_journal.objects import typed_references

    problems = []
    present = set(store.objects.iter_oids())
    for oid in present:
        kind, body = store.objects.get(oid)
        for ref, _ in typed_references(kind, body, oid):
            if ref not in present:
                problems.append(f"{oid} references missing {ref}")
    return problems


def batch_of(j: cj.Journal, thread: str, tag: str, count: int = 70) -> None:
    """A batch of entries whose objects end up in a batch pack, as a sync or an import
    writes them (a batch commit itself writes rows: they are moved into the pack)."""
    before = set(row_oids(j.store))
    with j.batch(thread) as b:
        for i in range(count):
            b.append(
                cj.Entry(
                    type=cj.EntryType.USER_MESSAGE,
                    message=cj.Message(role="user", content=f"{tag} {i}"),
                )
            )
    objects = j.store.objects
    new = [oid for oid in row_oids(j.store) if oid not in before]
    write_pack(
        objects.packs_dir,
        (PackedObject(oid, objects.canonical(oid)[0]) for oid in new),
        durable=False,
    )
    objects.remove_rows(new)
    objects.refresh_packs()
    objects.merge_batch_packs()


def test_gc_frees_space_before_it_writes(j, monkeypatch):
    """Issue 16 item 8: loose garbage and packs holding only garbage go first, without
    any write; only then are packs that mix garbage and live objects rewritten."""
    build(j)
    j.create_thread(cj.ThreadMeta(id="doomed"))
    batch_of(j, "doomed", "doomed batch")  # a batch pack of garbage only
    user(j, "doomed", "a loose garbage entry after the batch")
    pack(j.store)  # one maintained pack: live and (after the deletes) garbage
    j.create_thread(cj.ThreadMeta(id="doomed2"))
    batch_of(j, "doomed2", "second doomed batch")
    user(j, "doomed2", "loose garbage")
    j.delete_thread("fork1")
    j.delete_thread("doomed")
    j.delete_thread("doomed2")
    recorder = Recorder(j.store, monkeypatch)
    report = gc(j.store, prune_now=True, reflog_expiry=timedelta(0))
    assert recorder.broken == []
    first_write = recorder.calls.index("write_pack")
    assert "delete_loose" in recorder.calls[:first_write]
    assert "retire_packs" in recorder.calls[:first_write]  # the batch pack of garbage
    assert report.packs_removed == 2 and report.packs_rewritten == 1
    assert closure_problems(j.store) == []
    assert fsck(reopen(j).store).ok


def test_gc_through_a_cycle_of_packs_and_loose_objects(tmp_path, monkeypatch):
    """A merged pack holds the batch before a loose entry and the batch after it, so its
    garbage and the loose garbage reference each other both ways: gc loosens what it
    must and never leaves an object referencing one gone."""
    from cas_journal.packs import merging

    monkeypatch.setattr(merging, "MERGE_MIN_PACKS", 1)
    journal = cj.Journal.open(tmp_path / "s", durable=False)
    journal.create_thread(cj.ThreadMeta(id="keep"))
    user(journal, "keep", "kept")
    journal.create_thread(cj.ThreadMeta(id="t"))
    batch_of(journal, "t", "first")
    middle = user(journal, "t", "a loose entry between two batches")
    batch_of(journal, "t", "second")  # merged with the first: one pack on both sides
    assert len(journal.store.objects.packs()) == 1
    assert middle.id in row_oids(journal.store)
    journal.delete_thread("t")
    recorder = Recorder(journal.store, monkeypatch)
    report = gc(journal.store, prune_now=True, reflog_expiry=timedelta(0))
    assert recorder.broken == []
    assert "loosen" in recorder.calls
    assert report.deleted_objects >= 2 * 70 * 2
    assert not journal.store.objects.has(middle.id)
    assert journal.path("keep")[0].message.content == "kept"
    assert fsck(journal.store).ok
    journal.close()


def test_gc_keeps_a_pack_a_writer_freshens_meanwhile(j, monkeypatch):
    build(j)
    pack(j.store)
    j.delete_thread("fork2")
    copies = j.store.stored_copies
    real = copies.retire_packs

    def freshen_first(names, older_than):
        for reader in j.store.objects.packs():
            reader.freshen()  # a writer reuses an object of every pack right now
        return real(names, older_than)

    monkeypatch.setattr(copies, "retire_packs", freshen_first)
    before = snapshot(j)
    gc(j.store, reflog_expiry=timedelta(0), now=datetime.now(UTC) + timedelta(hours=2))
    assert fsck(reopen(j).store).ok
    assert snapshot(reopen(j)) == before


def test_gc_deletes_chains_in_one_call_where_deletion_is_atomic(j, monkeypatch):
    """A backend whose delete_loose is one transaction gets each chain of loose garbage
    in one call (not one call per level of references); the outcome is the same."""
    paths = build(j, forks=2, length=12)
    only_fork1 = set(paths["fork1"]) - set(paths["base"])
    j.delete_thread("fork1")
    j.checkpoints.delete("run")
    monkeypatch.setattr(j.store.stored_copies, "atomic_delete", True)
    recorder = Recorder(j.store, monkeypatch)
    report = gc(j.store, prune_now=True, reflog_expiry=timedelta(0))
    assert recorder.calls.count("delete_loose") == 1
    assert report.deleted_objects > 20 and recorder.broken == []
    assert not any(j.store.objects.has(oid) for oid in only_fork1)
    assert fsck(reopen(j).store).ok


@pytest.mark.parametrize("quick", [False, True])
def test_fsck_checks_that_each_ref_agrees_with_what_it_points_at(j, quick):
    """Issue 16 item 3 (fsck): a threads/x ref holding another thread's state, a run's
    ref holding another run's checkpoint, and a state whose metadata does not parse."""
    from cas_journal.objects import ThreadStateNode

    build(j, forks=1, length=5)
    j.checkpoints.save(cj.Checkpoint(run_id="other", iteration=1, messages=[{"a": 1}]))
    assert fsck(j.store, quick=quick).ok
    refs = j.store.refs
    refs.set_if_equals("threads/victim", None, refs.read_ref("threads/base"), "test")
    refs.set_if_equals("checkpoints/stolen", None, refs.read_ref("checkpoints/other"), "test")
    bad = ThreadStateNode({"id": "odd", "created_at": "yesterday"})
    refs.set_if_equals("threads/odd", None, j.store.objects.put(Kind.THREAD, bad.body()), "t")
    report = fsck(j.store, quick=quick)
    found = {p.subject: p.message for p in report.problems}
    assert not report.ok and set(found) == {
        "ref threads/victim",
        "ref checkpoints/stolen",
        "ref threads/odd",
    }
    assert "belongs to 'base'" in found["ref threads/victim"]
    assert "belongs to 'other'" in found["ref checkpoints/stolen"]
    assert "malformed" in found["ref threads/odd"]
