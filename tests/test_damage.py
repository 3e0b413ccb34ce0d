"""Damage stays local and can be repaired (issue 16 items 6 to 9).

A pack that does not open is set aside instead of failing every command; reads fall
back to another intact copy; pack and gc proceed around damage; ``fsck --repair-from``
restores what a replica holds; gc frees space on a full disk; and FIFOs or symlinks where
store files should be never block or lead out of the store.
"""

from __future__ import annotations

import errno
import os
import shutil
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path

import pytest
from click.testing import CliRunner
from support.journal_helpers import user
from support.store_helpers import frame_of, row_oids, set_frame

import cas_journal as cj
from cas_journal.backends import LocalStore
from cas_journal.backends.local.packs import PackedObject, write_pack
from cas_journal.cli import cli as cli_main
from cas_journal.maintenance import fsck, gc, pack, repair, sync
from cas_journal.objects import Kind


def make(path: Path, threads: int = 3, length: int = 12) -> cj.Journal:
    j = cj.Journal.open(path, durable=False)
    for t in range(threads):
        j.create_thread(cj.ThreadMeta(id=f"t{t}"))
        for i in range(length):
            user(j, f"t{t}", f"thread {t} message {i} " + "words " * 30)
    return j


def flip(path: Path, at: int) -> None:
    data = bytearray(path.read_bytes())
    data[at % len(data)] ^= 0x5A
    path.chmod(0o644)
    path.write_bytes(bytes(data))


def flip_row(j: cj.Journal, oid: str, at: int) -> None:
    """Damage the loose copy (the database row) of an object."""
    frame = frame_of(j.store, oid)
    assert frame is not None, f"{oid} has no row"
    data = bytearray(frame)
    data[at % len(data)] ^= 0x5A
    set_frame(j.store, oid, bytes(data))


def into_batch_pack(j: cj.Journal, oids: list[str]) -> None:
    """Move rows into a batch pack (what a sync or an import writes)."""
    objects = j.store.objects
    write_pack(
        objects.packs_dir,
        (PackedObject(oid, objects.canonical(oid)[0]) for oid in oids),
        durable=False,
    )
    objects.remove_rows(oids)
    objects.refresh_packs()


def the_pack(j: cj.Journal):
    (reader,) = j.store.objects.packs()
    return reader


@contextmanager
def deadline(seconds: int) -> Iterator[None]:
    """Fail (instead of hanging the suite) if the body blocks."""

    def expired(_signum, _frame):
        raise TimeoutError(f"blocked for more than {seconds} s")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


# -- item 6: a damaged index is set aside ------------------------------------------------------


def test_a_damaged_index_does_not_stop_the_store_from_opening(tmp_path):
    j = make(tmp_path / "s")
    pack(j.store)
    j.create_thread(cj.ThreadMeta(id="after"))
    written = [user(j, "after", f"written after the pack {i}").id for i in range(3)]
    j.close()
    index = next((tmp_path / "s" / "packs").glob("*.idx"))
    flip(index, 2)  # the magic number
    with cj.Journal.open(tmp_path / "s", durable=False) as again:
        assert [e.id for e in again.path("after")] == written  # intact data still works
        assert again.thread("after").leaf_id == written[-1]
        assert again.store.objects.unreadable_packs()
        report = fsck(again.store)
        assert not report.ok
        assert any(index.stem in p.subject for p in report.problems)
        with pytest.raises(cj.JournalError):
            again.path("t0")  # its entries were in the pack: a clear error, not a crash
        assert pack(again.store).objects > 0  # maintenance proceeds around it
        assert gc(again.store).unreadable_reachable_objects > 0  # reported, not raised


# -- item 7: reads fall back, repair from a replica, pack and gc proceed ---------------------


def test_reads_fall_back_to_another_intact_copy(tmp_path):
    j = make(tmp_path / "s", threads=1)
    before = [e.id for e in j.path("t0")]
    entry = j.path("t0")[3]
    kept = frame_of(j.store, entry.id)
    pack(j.store)
    set_frame(j.store, entry.id, kept)  # a loose copy (a row) beside the packed one
    reader = the_pack(j)
    _, block, _, _ = reader.index.place(reader.position(entry.id))
    flip(reader.pack_path, block.offset + block.compressed_length // 2)
    again = cj.Journal.open(tmp_path / "s", durable=False)
    # the loose copy serves the read (the other objects of that block are lost)
    assert again.store.objects.get(entry.id)[0] is Kind.ENTRY
    assert before[3] == entry.id
    again.close()


def test_two_packs_one_damaged(tmp_path):
    from cas_journal.backends.copies import PackOptions

    j = make(tmp_path / "s", threads=1)
    pack(j.store)
    first = the_pack(j)
    some = list(first.iter_oids())[:5]
    second = j.store.stored_copies.write_pack(some, PackOptions(level=3))  # second copies
    assert second.pack is not None
    _, block, _, _ = first.index.place(first.position(some[2]))
    flip(first.pack_path, block.offset + block.compressed_length // 2)
    for name in ("a", "b"):  # whichever pack a reader tries first
        again = LocalStore(tmp_path / "s", durable=False)
        if name == "b":
            again.objects._last_found = next(
                p for p in again.objects.packs() if p.name == first.name
            )
        assert again.objects.get(some[2])[0] in (Kind.ENTRY, Kind.BLOB, Kind.THREAD)
        again.close()


def test_fsck_repair_from_a_replica(tmp_path):
    j = make(tmp_path / "s")
    replica = cj.Journal.open(tmp_path / "replica", durable=False)
    sync(j.store, replica.store)
    pack(j.store)
    loose_entry = user(j, "t2", "a loose entry, also synced")
    sync(j.store, replica.store)
    expected = {t: [e.message.content for e in j.path(t)] for t in ("t0", "t1", "t2")}
    reader = the_pack(j)
    flip(reader.pack_path, reader.pack_size // 2)  # a packed copy
    flip_row(j, loose_entry.raw_hash, 20)  # a loose one
    j.close()
    damaged = cj.Journal.open(tmp_path / "s", durable=False)
    assert not fsck(damaged.store).ok
    # a sync from the replica copies nothing: the objects exist here, damaged
    assert sync(replica.store, damaged.store).objects_copied == 0
    report = fsck(damaged.store, repair_from=replica.store)
    assert report.ok, report.problems
    assert report.repair is not None and report.repair.restored and report.repair.repacked
    assert report.repair.still_lost == []
    assert {t: [e.message.content for e in damaged.path(t)] for t in expected} == expected
    assert gc(damaged.store, prune_now=True).kept_for_damage is False
    assert fsck(cj.Journal.open(tmp_path / "s", durable=False).store).ok
    damaged.close()
    replica.close()


def test_repair_reports_what_the_replica_lacks(tmp_path):
    j = make(tmp_path / "s", threads=1)
    empty = cj.Journal.open(tmp_path / "empty", durable=False)
    entry = j.path("t0")[5]
    flip_row(j, entry.id, 10)
    report = repair(j.store, empty.store)
    assert report.damaged == [entry.id] and report.still_lost == [entry.id]
    assert not fsck(j.store).ok


def test_the_cli_repairs_from_a_replica(tmp_path):
    j = make(tmp_path / "s", threads=1)
    replica = cj.Journal.open(tmp_path / "replica", durable=False)
    sync(j.store, replica.store)
    entry = j.path("t0")[4]
    flip_row(j, entry.raw_hash, 15)
    j.close()
    replica.close()
    runner = CliRunner()
    failed = runner.invoke(cli_main, ["--store", str(tmp_path / "s"), "fsck"])
    assert failed.exit_code == 1
    fixed = runner.invoke(
        cli_main,
        [
            "--store",
            str(tmp_path / "s"),
            "fsck",
            "--json",
            "--repair-from",
            str(tmp_path / "replica"),
        ],
    )
    assert fixed.exit_code == 0, fixed.output
    assert entry.raw_hash in fixed.output


def test_pack_proceeds_around_a_damaged_object(tmp_path):
    j = make(tmp_path / "s", threads=2)
    victim = j.path("t0")[6]
    flip_row(j, victim.raw_hash, 10)
    report = pack(j.store)
    assert report.damaged_objects_left == 1 and report.objects > 0
    assert victim.raw_hash in row_oids(j.store)  # kept for repair
    assert [e.id for e in j.path("t1")]  # everything else reads from the new pack
    problems = fsck(j.store).problems  # the blob, and the entry that references it
    assert victim.raw_hash in [p.subject for p in problems]
    assert all(victim.raw_hash in p.subject + p.message for p in problems)


def test_gc_proceeds_around_a_damaged_blob(tmp_path):
    """A damaged payload references nothing: gc still deletes garbage around it."""
    j = make(tmp_path / "s", threads=2)
    victim = j.path("t0")[6]
    flip_row(j, victim.raw_hash, 10)
    j.delete_thread("t1")
    report = gc(j.store, prune_now=True, reflog_expiry=timedelta(0))
    assert report.unreadable_reachable_objects == 0  # gc's mark never reads blobs
    assert report.deleted_objects > 12 and not report.kept_for_damage


def test_gc_keeps_garbage_while_a_reachable_entry_is_damaged(tmp_path):
    """What a damaged entry references is unknown: gc deletes nothing, and says why,
    instead of failing forever (or deleting what the entry may need)."""
    j = make(tmp_path / "s", threads=2)
    victim = j.path("t0")[6]
    flip_row(j, victim.id, 10)
    j.delete_thread("t1")
    report = gc(j.store, prune_now=True, reflog_expiry=timedelta(0))
    assert report.kept_for_damage and report.deleted_objects == 0
    assert report.unreadable_reachable_objects == 1


# -- item 8: a full disk ---------------------------------------------------------------------


def test_gc_frees_space_on_a_full_disk(tmp_path, monkeypatch):
    """Every write fails with ENOSPC: gc --prune-now still deletes the loose garbage and
    the packs holding only garbage before it needs to write anything."""
    j = make(tmp_path / "s", threads=2)
    j.create_thread(cj.ThreadMeta(id="big"))
    before = set(row_oids(j.store))
    with j.batch("big") as batch:
        for i in range(100):
            batch.append(
                cj.Entry(
                    type=cj.EntryType.USER_MESSAGE,
                    message=cj.Message(role="user", content=f"big {i} " * 50),
                )
            )
    into_batch_pack(j, [oid for oid in row_oids(j.store) if oid not in before])
    j.delete_thread("big")
    j.delete_thread("t1")
    j.store.refs.rewrite_reflog("threads/big", lambda e: False)  # expired beforehand
    j.store.refs.rewrite_reflog("threads/t1", lambda e: False)
    packs_before = len(j.store.objects.packs())
    loose_before = j.store.objects.usage()["loose_objects"]
    real_write = os.write

    def full(fd, data):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "write", full)
    report = gc(j.store, prune_now=True)
    monkeypatch.setattr(os, "write", real_write)
    assert report.deleted_objects > 100
    assert len(j.store.objects.packs()) == packs_before - 1  # the batch pack of garbage
    assert j.store.objects.usage()["loose_objects"] < loose_before
    again = cj.Journal.open(tmp_path / "s", durable=False)
    assert fsck(again.store).ok
    assert len(again.path("t0")) == 12


def test_gc_on_a_full_disk_with_mixed_packs_frees_what_it_can(tmp_path, monkeypatch):
    j = make(tmp_path / "s", threads=2)
    pack(j.store)  # one pack: live and (soon) garbage together
    j.delete_thread("t1")
    j.store.refs.rewrite_reflog("threads/t1", lambda e: False)
    user(j, "t0", "loose and live")
    monkeypatch.setattr(
        os, "write", lambda fd, data: (_ for _ in ()).throw(OSError(errno.ENOSPC, "full"))
    )
    with pytest.raises(cj.StorageError, match="no space left"):
        gc(j.store, prune_now=True)
    monkeypatch.undo()
    assert fsck(cj.Journal.open(tmp_path / "s", durable=False).store).ok
    report = gc(j.store, prune_now=True)  # space is back
    assert report.deleted_objects > 0 and fsck(j.store).ok


# -- item 9: FIFOs and symlinks ------------------------------------------------------------------


def test_a_fifo_in_place_of_store_files_never_blocks(tmp_path):
    j = make(tmp_path / "s", threads=2)
    pack(j.store)
    user(j, "t0", "loose")
    victim = j.path("t1")[-1]  # packed
    j.close()
    packs = tmp_path / "s" / "packs"
    (data_file,) = packs.glob("*.pack")
    data_file.unlink()
    os.mkfifo(data_file)
    (packs / "pack-0000000000000000000000000000000000000000.idx").symlink_to("/etc/passwd")
    with deadline(60):
        again = cj.Journal.open(tmp_path / "s", durable=False)
        report = fsck(again.store)
        assert not report.ok
        messages = " ".join(f"{p.subject} {p.message}" for p in report.problems)
        assert "not a regular file" in messages and "symlink" in messages
        with pytest.raises(cj.JournalError):
            again.store.objects.get(victim.id)
        pack(again.store)
        gc(again.store, prune_now=True)
        again.close()


def _mount_tmpfs(target: Path, size: str) -> bool:
    import subprocess

    target.mkdir()
    if os.geteuid() != 0:
        return False
    try:
        done = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(target)],
            capture_output=True,
            timeout=10,
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


def test_gc_frees_space_on_a_real_full_disk(tmp_path):
    """A tiny tmpfs filled to the last byte: gc --prune-now still removes a deleted
    thread (a batch pack of garbage and loose garbage), and writes work again after."""
    import random
    import subprocess

    mount = tmp_path / "tiny"
    if not _mount_tmpfs(mount, "1500k"):
        pytest.skip("mounting a tmpfs needs root and mount rights (ENOSPC is covered above)")
    rng = random.Random(3)

    def text(i: int) -> str:
        return f"{i} " + "".join(rng.choice("abcdefghijklmnopqrstuvwxyz ") for _ in range(1500))

    try:
        store = mount / "s"
        with cj.Journal.open(store, durable=True) as j:
            j.create_thread(cj.ThreadMeta(id="live"))
            user(j, "live", "kept")
            j.create_thread(cj.ThreadMeta(id="doomed"))
            with j.batch("doomed") as batch:
                for i in range(150):
                    batch.append(
                        cj.Entry(
                            type=cj.EntryType.USER_MESSAGE,
                            message=cj.Message(role="user", content=text(i)),
                        )
                    )
            for i in range(10):
                user(j, "doomed", text(i))
            j.delete_thread("doomed")
            j.create_thread(cj.ThreadMeta(id="filler"))
            with pytest.raises((cj.StorageError, cj.AppendCommittedError)):
                for i in range(100_000):
                    user(j, "filler", text(i))
        free_before = shutil.disk_usage(mount).free
        with cj.Journal.open(store, durable=True) as j:
            report = gc(j.store, prune_now=True, reflog_expiry=timedelta(0))
            assert report.deleted_objects >= 150
            assert shutil.disk_usage(mount).free > free_before + 200_000
            assert fsck(j.store).ok
            user(j, "live", "space is back")
            assert [e.message.content for e in j.path("live")] == ["kept", "space is back"]
    finally:
        subprocess.run(["umount", str(mount)], check=False)


@pytest.mark.parametrize("name", ["store.db", "store.db-wal", "store.db-shm"])
def test_a_fifo_or_a_symlink_in_place_of_the_database_is_refused_without_blocking(tmp_path, name):
    j = make(tmp_path / "s", threads=1)
    j.close()
    target = tmp_path / "s" / name
    target.unlink(missing_ok=True)
    os.mkfifo(target)
    with deadline(60), pytest.raises(cj.StorageError, match="not a regular file"):
        cj.Journal.open(tmp_path / "s", durable=False)
    target.unlink()
    outside = tmp_path / "outside"
    outside.write_bytes(b"")
    target.symlink_to(outside)
    with deadline(60), pytest.raises(cj.StorageError, match="symlink"):
        cj.Journal.open(tmp_path / "s", durable=False)
    assert outside.read_bytes() == b""
