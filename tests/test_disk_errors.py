"""Disk full and read-only: a failing write raises a clear error and loses nothing.

os.write / os.replace / os.open (for writing) / os.fsync, and every statement that writes
to the store database, are made to fail with ENOSPC or EROFS (for the database, the
SQLITE_FULL or SQLITE_IOERR_WRITE error SQLite reports then) at their Nth call, for
every N until the operation gets through. Each failure
must be a StorageError (or AppendCommittedError when the commit already happened); the
store then passes fsck, every earlier acknowledged write reads back, and a later write
succeeds once space returns. A real tiny tmpfs is used too where mounting is allowed.
"""

from __future__ import annotations

import contextlib
import errno
import gc as collector
import os
import re
import shutil
import sqlite3
import subprocess
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

import cas_journal as cj
from cas_journal.backends.local.commits import Change
from cas_journal.maintenance import fsck, gc, pack, sync


def _msg(text: str, thread: str = "t") -> cj.Entry:
    return cj.Entry(
        thread_id=thread,
        type=cj.EntryType.USER_MESSAGE,
        message=cj.Message(role="user", content=text),
    )


_SQLITE_ERRORS = {
    errno.ENOSPC: (sqlite3.SQLITE_FULL, "SQLITE_FULL", "database or disk is full"),
    errno.EROFS: (sqlite3.SQLITE_IOERR_WRITE, "SQLITE_IOERR_WRITE", "disk I/O error"),
}
_READS = ("SELECT", "PRAGMA", "BEGIN\b(?! IMMEDIATE)")


class Faults:
    """Fail the Nth write-side call with the error a full or read-only disk gives: an
    OSError from a file-system call, or the sqlite3 error SQLite reports when a
    statement of the store database cannot write (raised in place of running it, on the
    connection or on a cursor of it; ``Connection.execute`` runs its statement without
    calling the cursor's ``execute``, so no statement counts twice)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, code: int, nth: int) -> None:
        self.code, self.nth, self.calls, self.fired = code, nth, 0, False
        for name in ("write", "replace", "fsync", "open"):
            monkeypatch.setattr(os, name, self._wrap(name, getattr(os, name)))
        real_connect = sqlite3.connect
        faults = self

        class Faulty:
            """Statements that may fail, on a connection or on a cursor of it."""

            def execute(self, sql: str, *args: Any) -> sqlite3.Cursor:
                faults._statement(sql)
                return super().execute(sql, *args)  # type: ignore[misc, no-any-return]

            def executemany(self, sql: str, *args: Any) -> sqlite3.Cursor:
                faults._statement(sql)
                return super().executemany(sql, *args)  # type: ignore[misc, no-any-return]

        class FaultyCursor(Faulty, sqlite3.Cursor):  # type: ignore[misc]
            """(the store's writes run their statements through a cursor it keeps)"""

        class FaultyConnection(Faulty, sqlite3.Connection):
            def cursor(self, factory: Any = FaultyCursor) -> Any:
                return super().cursor(factory)

        def connect(*args: Any, **kwargs: Any) -> sqlite3.Connection:
            return real_connect(*args, **kwargs, factory=FaultyConnection)

        monkeypatch.setattr(sqlite3, "connect", connect)

    def _fire(self) -> bool:
        if self.fired:
            return False
        self.calls += 1
        if self.calls == self.nth:
            self.fired = True
            return True
        return False

    def _statement(self, sql: str) -> None:
        if re.match("|".join(_READS), sql.strip(), re.IGNORECASE) or not self._fire():
            return
        code, name, message = _SQLITE_ERRORS[self.code]
        error = sqlite3.OperationalError(message)
        error.sqlite_errorcode = code
        error.sqlite_errorname = name
        try:
            raise error
        finally:  # (the error's traceback holds this frame: no cycle through ``error``)
            del error

    def _wrap(self, name: str, real: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            writing = name != "open" or (len(args) > 1 and args[1] & (os.O_WRONLY | os.O_RDWR))
            if writing and self._fire():
                raise OSError(self.code, os.strerror(self.code))
            return real(*args, **kwargs)

        return wrapper


def _seed(path: Path) -> tuple[list[str], list[dict[str, str]]]:
    with cj.Journal.open(path, durable=True) as j:
        j.create_thread(cj.ThreadMeta(id="t"))
        ids = [j.append(_msg(f"before {i}")).id for i in range(5)]
        messages = [{"role": "user", "content": f"c{i}"} for i in range(4)]
        j.checkpoints.save(cj.Checkpoint(run_id="r", iteration=1, messages=messages))
        j.create_thread(cj.ThreadMeta(id="doomed"))
        j.append(_msg("doomed", "doomed"))
        j.delete_thread("doomed")
    return ids, messages


def _operation(name: str, j: cj.Journal, mirror: Path) -> None:
    if name == "append":
        j.append(_msg("during"))
    elif name == "batch":
        with j.batch("t") as b:
            for i in range(40):
                b.append(_msg(f"batch {i}"))
    elif name == "checkpoint":
        j.checkpoints.save(
            cj.Checkpoint(run_id="r", iteration=2, messages=[{"role": "user", "content": "new"}])
        )
    elif name == "fork":
        j.fork("t", new_thread_id="f")
    elif name == "create-store":
        cj.Journal.open(mirror / "fresh").close()
    elif name == "pack":
        pack(j.store)
    elif name == "gc":
        gc(j.store, prune_now=True, reflog_expiry=timedelta(0))
    elif name == "sync":
        with cj.Journal.open(mirror / "m") as m:
            sync(j.store, m.store)


OPERATIONS = ["append", "batch", "checkpoint", "fork", "create-store", "pack", "gc", "sync"]


def _open_files_under(directory: Path) -> list[str]:
    """The files under ``directory`` this process holds open (Linux: /proc/self/fd)."""
    found = []
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):  # (the listing's own descriptor is gone)
            target = os.readlink(f"/proc/self/fd/{fd}")
            if target.startswith(f"{directory}/"):
                found.append(target)
    return found


def _points(limit: int) -> Iterator[int]:
    """Every call up to 40, then every 7th (CI time): operations make up to ~300 calls."""
    yield from range(1, 40)
    yield from range(40, limit, 7)


CASES = [(op, errno.ENOSPC) for op in OPERATIONS] + [
    (op, errno.EROFS) for op in ("append", "checkpoint", "pack", "gc")
]


@pytest.mark.parametrize(
    ("op", "code"), CASES, ids=[f"{op}-{errno.errorcode[c]}" for op, c in CASES]
)
def test_a_failing_write_at_every_point(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, op: str, code: int
) -> None:
    template = tmp_path / "template"
    ids, messages = _seed(template)
    unexpected: list[str] = []
    failures = 0
    held: list[BaseException] = []
    for nth in _points(400):
        work = tmp_path / f"n{nth}"
        shutil.copytree(template, work / "s")
        with monkeypatch.context() as patch:
            faults = Faults(patch, code, nth)  # before the store opens its connections
            j = cj.Journal.open(work / "s", durable=True)
            try:
                _operation(op, j, work)
            except (cj.StorageError, cj.AppendCommittedError) as exc:
                failures += 1
                assert "failed" in str(exc) or "committed" in str(exc), str(exc)
                held.append(exc)  # a caller may keep the error (and its traceback's frames)
            except Exception as exc:
                unexpected.append(f"fault at call {nth}: {type(exc).__name__}: {exc}")
        j.close()
        assert _open_files_under(work) == [], nth  # closed means closed, error kept or not
        held.clear()
        with cj.Journal.open(work / "s", durable=True) as again:
            report = fsck(again.store)
            assert report.ok, (nth, report.problems)
            path = [e.id for e in again.path("t")]
            assert path[:5] == ids, nth
            assert again.checkpoints.load("r", 1).messages == messages
            again.append(_msg("after the disk recovered"))  # space is back: writes work
            assert fsck(again.store).ok
        shutil.rmtree(work)
        if not faults.fired:
            break  # the operation made fewer calls than nth: every point was tried
    assert unexpected == []
    assert not faults.fired, "the operation never completed"
    assert failures > 0


def _mount_tmpfs(target: Path, size: str) -> bool:
    target.mkdir()
    try:
        done = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(target)],
            capture_output=True,
            timeout=10,
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


def test_a_real_full_disk(tmp_path: Path) -> None:
    mount = tmp_path / "tiny"
    if os.geteuid() != 0 or not _mount_tmpfs(mount, "600k"):
        pytest.skip(
            "mounting a tmpfs is not permitted in this sandbox (needs root and mount rights); the monkeypatch variant above covers ENOSPC"
        )
    try:
        store = mount / "s"
        acked: list[str] = []
        with cj.Journal.open(store, durable=True) as j:
            j.create_thread(cj.ThreadMeta(id="t"))
            with pytest.raises((cj.StorageError, cj.AppendCommittedError)):
                for i in range(100_000):
                    acked.append(j.append(_msg(f"filling the disk {i} " + "x" * 2000)).id)
        with cj.Journal.open(store, durable=True) as j:
            assert fsck(j.store).ok
            assert [e.id for e in j.path("t")][: len(acked)] == acked
            subprocess.run(["mount", "-o", "remount,size=4m", str(mount)], check=True)
            j.append(_msg("after"))  # space is back: writes work
            assert fsck(j.store).ok
    finally:
        unmounted = subprocess.run(["umount", str(mount)], check=False, capture_output=True)
    assert unmounted.returncode == 0, unmounted.stderr  # the store holds no file open


def test_a_failed_commit_holds_nothing_once_its_error_is_dropped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The error of a failed commit does not keep, in a reference cycle through its own
    traceback, the pending change and the frames that hold the store's connection: once
    the caller drops the error, they go at once, not at the collector's next pass."""
    with cj.Journal.open(tmp_path / "s", durable=True) as j:
        j.create_thread(cj.ThreadMeta(id="t"))
    failed = False
    collector.collect()
    collector.disable()
    try:
        with monkeypatch.context() as patch:
            Faults(patch, errno.ENOSPC, 1)  # the append's BEGIN IMMEDIATE fails
            with cj.Journal.open(tmp_path / "s", durable=True) as j:
                try:
                    j.append(_msg("no room"))
                except cj.StorageError:
                    failed = True
                assert [o for o in collector.get_objects() if type(o) is Change] == []
    finally:
        collector.enable()
    assert failed
