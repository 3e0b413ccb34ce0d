"""The backend contract run against the memory and local backends, plus local specifics."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from backend_contract import StoreContract

from cas_journal.backends import LocalStore, MemoryStore
from cas_journal.backends.local.objects import verify_loose_file
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
        path = Path(store.objects.loose_path(oid))
        data = bytearray(path.read_bytes())
        data[-3] ^= 0xFF
        path.chmod(0o644)
        path.write_bytes(bytes(data))


class TestLocalStoreDurable(TestLocalStore):
    def make_store(self, tmp_path):
        return LocalStore(tmp_path / "store", durable=True)

    def reopen(self, store):
        return LocalStore(store.root, durable=True, create=False)


ROOT = Path(__file__).resolve().parent.parent


def run_children(script: str, count: int, *args: str) -> list[subprocess.CompletedProcess]:
    """Start ``count`` Python children running ``script`` at once; wait for all."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", textwrap.dedent(script), *args, str(i)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for i in range(count)
    ]
    results = []
    for proc in procs:
        out, err = proc.communicate(timeout=300)
        results.append(subprocess.CompletedProcess(proc.args, proc.returncode, out, err))
    return results


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
    loose = list(store.objects.iter_loose())
    assert len(loose) == 1000  # one copy of each
    for oid, path in loose:
        verify_loose_file(oid, path, store.objects.codec)
    leftovers = [p for p in (store.root / "objects").rglob(".tmp-*")]
    assert leftovers == []


def test_a_killed_lock_holder_never_blocks_others(tmp_path):
    store = LocalStore(tmp_path / "s", durable=False)
    script = """
        import sys, time
        from cas_journal.backends import LocalStore
        refs = LocalStore(sys.argv[1], durable=False).refs
        with refs._locks.hold("threads/victim"):
            print("locked", flush=True)
            time.sleep(60)
    """
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    holder = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(script), str(store.root)],
        env=env,
        stdout=subprocess.PIPE,
    )
    assert holder.stdout is not None
    assert holder.stdout.readline().strip() == b"locked"
    holder.send_signal(signal.SIGKILL)
    holder.wait()
    start = time.monotonic()
    assert store.refs.set_if_equals("threads/victim", None, "v")
    assert time.monotonic() - start < 5
    assert store.refs.read_ref("threads/victim") == "v"


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
    LocalStore(tmp_path / "s").close()
    (tmp_path / "s" / "FORMAT").write_text("something else")
    with pytest.raises(StoreFormatError):
        LocalStore(tmp_path / "s")


def test_names_never_escape_the_store(tmp_path):
    store = LocalStore(tmp_path / "s", durable=False)
    for name in ["../x", "../../escape", "/abs", "a/../../b", "..", "."]:
        assert store.refs.set_if_equals(f"threads/{name}", None, "v")
    outside = [p for p in tmp_path.iterdir() if p.name != "s"]
    assert outside == []
    for path in (store.root / "refs").rglob("*"):
        assert path.resolve().is_relative_to(store.root.resolve())


def test_durable_store_syncs_objects_before_the_ref(tmp_path, monkeypatch):
    store = LocalStore(tmp_path / "s", durable=True)
    events = []
    real_fsync = os.fsync
    real_replace = os.replace

    def fsync(fd):
        events.append(("fsync", os.readlink(f"/proc/self/fd/{fd}")))
        return real_fsync(fd)

    def replace(src, dst):
        events.append(("rename", str(dst)))
        return real_replace(src, dst)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    oid = store.objects.put(Kind.BLOB, b"durable")
    store.refs.set_if_equals("threads/t", None, oid)
    object_path = str(store.objects.loose_path(oid))
    renames = [target for kind, target in events if kind == "rename"]
    assert renames[0] == object_path
    first_object_sync = next(i for i, (k, t) in enumerate(events) if k == "fsync" and ".tmp-" in t)
    ref_rename = events.index(("rename", str(store.root / "refs" / "threads" / "t")))
    assert first_object_sync < events.index(("rename", object_path)) < ref_rename
    # the object's directory is synced before the ref moves
    dir_syncs = [
        i for i, (k, t) in enumerate(events) if k == "fsync" and t == str(Path(object_path).parent)
    ]
    assert dir_syncs and dir_syncs[0] < ref_rename


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


def test_an_oversized_loose_file_is_refused_without_reading_it_whole(tmp_path, monkeypatch):
    store = LocalStore(tmp_path / "s", durable=False, max_object_size=4096)
    oid = store.objects.put(Kind.BLOB, b"small")
    path = Path(store.objects.loose_path(oid))
    os.chmod(path, 0o644)
    limit = store.objects.codec.max_frame_size
    path.write_bytes(path.read_bytes() + b"\0" * (limit * 4))
    reads = []
    real_read = os.read
    monkeypatch.setattr(os, "read", lambda fd, n: reads.append(n) or real_read(fd, n))
    with pytest.raises(CorruptObject) as caught:
        store.objects.get(oid)
    assert oid in str(caught.value)
    with pytest.raises(CorruptObject):
        verify_loose_file(oid, path, store.objects.codec)
    assert reads and max(reads) <= limit + 1
