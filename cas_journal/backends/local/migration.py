"""Upgrading a store of an older format to the current one (``store.FORMAT_VERSION``).

What each version changed, and so what an upgrade from it does before the switch:

* Format 1 -> 2: the layout. Format 1 kept one file per loose object (``objects/ab/
  cdef...``, a zstd frame), per ref (``refs/<namespace>/<escaped name>``, the value and a
  newline) and per reflog (``logs/<namespace>/<escaped name>``, JSON lines each preceded
  by a newline), plus lock files under ``locks/``; format 2 keeps them as rows of the
  store database. Packs are the same in both formats and stay where they are.
* Format 2 -> 3: nothing in the layout. A format-3 store may hold objects of kind
  ``segment``, which code of format 2 does not know (it would report them as corrupt), so
  the version says that older code must not open it. A format-2 store holds no such
  object: a read-only open reads it as it is (``store.OLDEST_READABLE_VERSION``).

``migrate`` runs when a store of an older format is opened for writing, under the
maintenance lock (so one process migrates; the others wait and then find the current
format) and, for format 1, under every lock format-1 code takes (its writers',
maintenance and ref-stripe locks), so no process of an older version changes the store
meanwhile. A format-1 store gets its database built beside the old files under a temp
name, synced and renamed to ``store.db``; then, for every older version, ``FORMAT`` is
replaced (synced, renamed into place, the directory synced: ``store.write_format``) with
the current version: that rename is the switch, and the one path every upgrade takes (a
format-1 store goes straight to the current version). Only then are format 1's files
removed (``remove_leftovers``, also run on every later open, so a removal cut short is
finished). A crash before the switch leaves the old version (the next open migrates
again, starting afresh); a crash after it leaves the current one.

Processes of an older version that still hold the store open when it is migrated are not
stopped by the switch: a format-1 process keeps writing into the old files, which the new
format no longer reads; a format-2 process keeps working, but reports an object of a
kind added since as damage (fsck lists it; gc deletes no garbage while it reaches
damage). Stop them first.

Damage is carried over from format 1, not hidden and not fatal: a ref file that does not
hold a valid value becomes a row holding the raw bytes (reading that ref raises
CorruptRef and fsck reports it), a reflog line that is valid JSON but not a reflog record
becomes a row with an invalid time (same), a torn reflog line (cut by a crash; it was
never acknowledged) is dropped as format 1 itself did, and an object file is copied as it
is (fsck verifies it). Only regular files are read (never a FIFO, a device or a symlink),
each with a bounded read.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import sqlite3
import stat
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

from ...errors import StoreFormatError
from ...names import DIRECTORY_SUFFIX, parts_to_name, split_ref_name
from ...objects import ObjectCodec, is_oid, parse_time
from .database import DATABASE_FILE, connect, create_database, database_errors, translate_error
from .fsutil import fsync_dir, storage_errors
from .locks import maintenance_lock

FORMAT_1_DIRECTORIES = ("objects", "refs", "logs", "locks")
MIGRATION_FILE = ".tmp-migration.db"
MAX_REF_FILE = 70 * 1024
MAX_REFLOG_FILE = 256 * 1024 * 1024
INVALID_TIME = -1
"""The time of a reflog row carried over from a line that was not a reflog record."""
LOCK_STRIPES = 256
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


# -- reading format 1 ---------------------------------------------------------------------


def parse_ref_file(data: bytes) -> str | bytes:
    """The value a format-1 ref file holds, or its raw bytes if it holds no valid value."""
    if len(data) >= 2 and data.endswith(b"\n") and data.count(b"\n") == 1:
        try:
            value = data[:-1].decode("utf-8")
        except UnicodeDecodeError:
            return data
        if "\r" not in value and "\0" not in value:
            return value
    return data


ReflogRow = tuple[str | None, str | None, int, str]


def parse_reflog_file(data: bytes) -> list[ReflogRow]:
    """``(old, new, time in microseconds, reason)`` of every record of a format-1 reflog.

    Records start with a newline, so a torn record (a crash mid-append, never
    acknowledged) is a non-JSON segment and is dropped. A segment that is JSON but not a
    reflog record is kept as a row with time ``INVALID_TIME`` and the segment as its
    reason, so reading it reports the damage."""
    rows: list[ReflogRow] = []
    for segment in data.split(b"\n"):
        if not segment:
            continue
        try:
            record = json.loads(segment)
        except (ValueError, RecursionError):
            continue  # torn by a crash mid-append
        rows.append(_reflog_record(record, segment))
    return rows


def _reflog_record(record: object, segment: bytes) -> ReflogRow:
    damaged: ReflogRow = (None, None, INVALID_TIME, segment[:4096].decode("utf-8", "replace"))
    if not isinstance(record, dict):
        return damaged
    old, new, when, reason = (record.get(k) for k in ("old", "new", "time", "reason"))
    if not all(isinstance(v, str) for v in (old, new, when, reason)):
        return damaged
    assert isinstance(old, str) and isinstance(new, str) and isinstance(when, str)
    assert isinstance(reason, str)
    if any("\n" in v or "\r" in v for v in (old, new)):
        return damaged
    try:
        micros = (parse_time(when) - _EPOCH) // timedelta(microseconds=1)
    except (ValueError, OverflowError, OSError):
        return damaged
    if micros < 0:
        return damaged
    return (old or None, new or None, micros, reason)


def _read_regular(path: str, limit: int) -> tuple[bytes, int] | None:
    """A regular file's first ``limit`` bytes and mtime (µs); None for anything else."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except (FileNotFoundError, OSError):
        return None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            return None
        chunks = []
        remaining = min(info.st_size, limit)
        while remaining > 0:
            chunk = os.read(fd, remaining)
            if not chunk:
                break
            chunks.append(chunk)
            remaining -= len(chunk)
        return b"".join(chunks), info.st_mtime_ns // 1000
    finally:
        os.close(fd)


def iter_named_files(top: Path) -> Iterator[tuple[str, str]]:
    """``(ref name, path)`` of every file under a format-1 ``refs/`` or ``logs/`` tree
    whose path decodes to a valid ref name (temp files and foreign names are skipped)."""
    if not top.is_dir() or top.is_symlink():
        return
    for namespace in sorted(os.listdir(top)):
        base = top / namespace
        if base.is_symlink() or not base.is_dir():
            continue
        for directory, dirs, files in os.walk(base, followlinks=False):
            dirs[:] = [d for d in dirs if d.endswith(DIRECTORY_SUFFIX)]
            relative = os.path.relpath(directory, base)
            prefix = [] if relative == "." else relative.split(os.sep)
            for file_name in files:
                if file_name.startswith("."):
                    continue
                try:
                    name = f"{namespace}/{parts_to_name([*prefix, file_name])}"
                    split_ref_name(name)
                except ValueError:
                    continue
                yield name, os.path.join(directory, file_name)


def iter_loose_files(objects: Path, limit: int) -> Iterator[tuple[bytes, int, bytes]]:
    """``(raw oid, mtime in µs, bytes)`` of every loose object file of format 1."""
    if not objects.is_dir() or objects.is_symlink():
        return
    for prefix in sorted(os.listdir(objects)):
        directory = objects / prefix
        if len(prefix) != 2 or directory.is_symlink() or not directory.is_dir():
            continue
        for name in sorted(os.listdir(directory)):
            oid = prefix + name
            if not is_oid(oid):
                continue
            found = _read_regular(str(directory / name), limit)
            if found is not None:
                data, mtime = found
                yield bytes.fromhex(oid), mtime, data


# -- migration -------------------------------------------------------------------------------


@contextlib.contextmanager
def _format_1_locks(root: Path) -> Iterator[None]:
    """Every lock format-1 code takes, exclusively (a format-1 writer waits)."""
    locks = root / "locks"
    if not locks.is_dir():
        yield
        return
    names = ["maintenance", "writers", *(f"{i:02x}" for i in range(LOCK_STRIPES))]
    fds: list[int] = []
    try:
        for name in names:
            try:
                fd = os.open(locks / name, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
            except OSError:
                continue  # not a lock file we can take (a symlink, a directory): skip it
            fds.append(fd)
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        for fd in fds:
            with contextlib.suppress(OSError):
                fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)


def migrate(root: Path, max_object_size: int) -> None:
    """Upgrade a store of an older format to the current one (a no-op if another process
    did it): a format-1 store's files become its database, then the switch."""
    from .store import FORMAT_FILE, FORMAT_VERSION, read_format_version, write_format

    with storage_errors(f"upgrading store {root} to format {FORMAT_VERSION}"):
        with maintenance_lock(root / FORMAT_FILE) as held, _format_1_locks(root):
            assert held
            version = read_format_version(root)
            if version is None:
                raise StoreFormatError(f"{root} lost its FORMAT file while upgrading")
            if version >= FORMAT_VERSION:
                return
            if version == 1:
                _database_from_format_1(root, ObjectCodec(max_object_size=max_object_size))
            write_format(root, FORMAT_VERSION, replace=True)  # the switch
        remove_leftovers(root)


def _database_from_format_1(root: Path, codec: ObjectCodec) -> None:
    """Build the database of a format-1 store beside its files and rename it into place
    (``store.db``, synced; format-1 code never reads it, so this is not yet the switch)."""
    tmp = root / MIGRATION_FILE
    _remove_database(tmp)
    try:
        _build(root, tmp, codec)
        _remove_database(root / DATABASE_FILE)
        os.rename(tmp, root / DATABASE_FILE)
        fsync_dir(root)
    except BaseException:
        _remove_database(tmp)
        raise


def _remove_database(path: Path) -> None:
    for suffix in ("", "-wal", "-shm", "-journal"):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(f"{path}{suffix}")


def _build(root: Path, path: Path, codec: ObjectCodec) -> None:
    """Write the database of a format-1 store at ``path`` (synced, closed)."""
    what = f"upgrading {root} from format 1"
    with database_errors(what):
        create_database(path)
        conn = connect(path, durable=False)
    try:
        conn.execute("PRAGMA synchronous=OFF")
        conn.execute("BEGIN IMMEDIATE")
        refs = []
        for name, file_path in iter_named_files(root / "refs"):
            found = _read_regular(file_path, MAX_REF_FILE)
            if found is not None:
                refs.append((name, parse_ref_file(found[0])))
        conn.executemany("INSERT INTO refs (name, value) VALUES (?, ?)", refs)
        for name, file_path in iter_named_files(root / "logs"):
            found = _read_regular(file_path, MAX_REFLOG_FILE)
            if found is None:
                continue
            conn.executemany(
                "INSERT INTO reflog (name, old, new, time, reason) VALUES (?, ?, ?, ?, ?)",
                [(name, *row) for row in parse_reflog_file(found[0])],
            )
        conn.executemany(
            "INSERT INTO objects (oid, written, frame) VALUES (?, ?, ?) "
            "ON CONFLICT (oid) DO NOTHING",
            iter_loose_files(root / "objects", codec.max_frame_size + 1),
        )
        conn.execute("COMMIT")
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    except sqlite3.Error as exc:
        raise translate_error(exc, what) from exc
    finally:
        conn.close()
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def remove_leftovers(root: Path) -> None:
    """Remove what format 1 left behind in a migrated store (after a migration)."""
    for name in FORMAT_1_DIRECTORIES:
        path = root / name
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
    tmp = root / MIGRATION_FILE
    if os.path.lexists(tmp):
        _remove_database(tmp)
