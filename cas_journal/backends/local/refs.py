"""Local refs: one small file per ref, updated by compare-and-swap under a file lock.

Ref ``<namespace>/<name>`` lives at ``refs/<namespace>/<encoded name>`` and holds only its
value and a newline; its reflog is ``logs/<namespace>/<encoded name>``, one JSON line per
update. An update takes an exclusive ``flock`` on one of 256 lock files (chosen by the
ref name's hash), re-reads the value, compares, appends the reflog line, and renames a
fully written temp file over the ref. ``flock`` locks belong to the open file and vanish
with the process that holds them, so a killed writer never leaves a lock that blocks
anyone; a stale lock *file* is just an empty file.
"""

from __future__ import annotations

import bisect
import contextlib
import fcntl
import json
import os
import threading
import weakref
from collections.abc import Callable, Iterator
from pathlib import Path

import blake3

from ...errors import CorruptRef
from ...names import DIRECTORY_SUFFIX, decode_name, encode_name, name_to_parts, split_ref_name
from ...objects import format_time, parse_time, utc_now
from ..base import ReflogEntry, RefStore, check_ref_value
from .fsutil import atomic_replace, fsync_dir, storage_errors, write_all

LOCK_STRIPES = 256
_ALL_LOCKS: weakref.WeakSet[_StripeLocks] = weakref.WeakSet()


def _reset_after_fork() -> None:
    for locks in list(_ALL_LOCKS):
        locks._reset()


os.register_at_fork(after_in_child=_reset_after_fork)


class _StripeLocks:
    """Per-process lock files (one fd each) plus thread locks, reset after fork."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._reset()
        _ALL_LOCKS.add(self)

    def _reset(self) -> None:
        # Never reuse descriptors inherited over fork: flock locks belong to the open file
        # description, which a forked child shares with its parent.
        self._fds: dict[int, int] = {}
        self._threads = [threading.Lock() for _ in range(LOCK_STRIPES)]
        self._open_lock = threading.Lock()

    def _fd(self, stripe: int) -> int:
        fd = self._fds.get(stripe)
        if fd is None:
            with self._open_lock:
                fd = self._fds.get(stripe)
                if fd is None:
                    self.directory.mkdir(parents=True, exist_ok=True)
                    fd = os.open(self.directory / f"{stripe:02x}", os.O_RDWR | os.O_CREAT, 0o644)
                    self._fds[stripe] = fd
        return fd

    @contextlib.contextmanager
    def hold(self, name: str) -> Iterator[None]:
        stripe = blake3.blake3(name.encode("utf-8")).digest()[0] % LOCK_STRIPES
        with self._threads[stripe]:
            fd = self._fd(stripe)
            fcntl.flock(fd, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(fd, fcntl.LOCK_UN)

    def close(self) -> None:
        with self._open_lock:
            for fd in self._fds.values():
                with contextlib.suppress(OSError):
                    os.close(fd)
            self._fds.clear()


def _format_line(entry: ReflogEntry) -> bytes:
    # Each record starts with a newline, so a record torn by a crash never swallows the
    # next one; readers skip empty and torn (non-JSON) segments.
    record = {
        "old": entry.old or "",
        "new": entry.new or "",
        "time": format_time(entry.time),
        "reason": entry.reason,
    }
    return b"\n" + json.dumps(record, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def _parse_line(line: bytes, where: str) -> ReflogEntry | None:
    try:
        record = json.loads(line)
    except ValueError:
        return None  # torn by a crash mid-append
    try:
        return ReflogEntry(
            old=record["old"] or None,
            new=record["new"] or None,
            time=parse_time(record["time"]),
            reason=str(record["reason"]),
        )
    except (ValueError, KeyError, TypeError) as exc:
        raise CorruptRef(f"reflog {where} has a malformed line: {line[:80]!r}") from exc


class LocalRefStore(RefStore):
    """Refs, reflogs and lock files under a store directory."""

    def __init__(self, root: Path, durable: bool) -> None:
        self.refs_dir = root / "refs"
        self.logs_dir = root / "logs"
        self.durable = durable
        self._locks = _StripeLocks(root / "locks")
        self._path_cache: dict[str, tuple[str, str]] = {}

    def _paths(self, name: str) -> tuple[str, str]:
        """``(ref file, reflog file)`` of a ref name (validated; cached)."""
        found = self._path_cache.get(name)
        if found is None:
            namespace, rest = split_ref_name(name)
            relative = os.path.join(namespace, *name_to_parts(rest))
            found = (os.path.join(self.refs_dir, relative), os.path.join(self.logs_dir, relative))
            if len(self._path_cache) > 4096:
                self._path_cache.clear()
            self._path_cache[name] = found
        return found

    def _ref_path(self, name: str) -> str:
        return self._paths(name)[0]

    def _log_path(self, name: str) -> str:
        return self._paths(name)[1]

    def _read(self, path: str, name: str) -> str | None:
        try:
            with open(path, "rb") as f:
                data = f.read(70 * 1024)
        except (FileNotFoundError, NotADirectoryError):
            return None
        if not data.endswith(b"\n") or data.count(b"\n") != 1 or len(data) < 2:
            raise CorruptRef(f"ref {name!r} holds a malformed value ({len(data)} bytes)")
        try:
            return data[:-1].decode("utf-8")
        except UnicodeDecodeError as exc:
            raise CorruptRef(f"ref {name!r} is not valid UTF-8") from exc

    def read_ref(self, name: str) -> str | None:
        path = self._ref_path(name)
        with storage_errors(f"reading ref {name!r}"):
            return self._read(path, name)

    def set_if_equals(
        self, name: str, old: str | None, new: str | None, reason: str = "", log: bool = True
    ) -> bool:
        check_ref_value(new)
        path = self._ref_path(name)
        with storage_errors(f"updating ref {name!r}"), self._locks.hold(name):
            if self._read(path, name) != old:
                return False
            if log:
                self._append_log(name, ReflogEntry(old, new, utc_now(), reason))
            if new is None:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(path)
                if self.durable:
                    fsync_dir(os.path.dirname(path))
            else:
                try:
                    atomic_replace(path, new.encode("utf-8") + b"\n", self.durable)
                except FileNotFoundError:
                    os.makedirs(os.path.dirname(path), exist_ok=True)
                    atomic_replace(path, new.encode("utf-8") + b"\n", self.durable)
                    if self.durable:
                        fsync_dir(self.refs_dir)
            return True

    def _append_log(self, name: str, entry: ReflogEntry) -> None:
        path = self._log_path(name)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        except FileNotFoundError:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            write_all(fd, _format_line(entry))
            if self.durable:
                os.fsync(fd)
        finally:
            os.close(fd)

    def _encoded(self, top: str) -> list[str]:
        """The encoded names under one namespace directory, long names' chunks joined."""
        found: list[str] = []
        pending = [(top, "")]
        while pending:
            directory, joined = pending.pop()
            try:
                entries = list(os.scandir(directory))
            except (FileNotFoundError, NotADirectoryError):
                continue
            for entry in entries:
                name = entry.name
                if name.startswith("."):
                    continue  # temp files
                if name.endswith(DIRECTORY_SUFFIX) and entry.is_dir(follow_symlinks=False):
                    pending.append((entry.path, joined + name[: -len(DIRECTORY_SUFFIX)]))
                else:
                    found.append(joined + name)
        return found

    def _listing(
        self, base: Path, prefix: str, start_after: str | None = None, limit: int = 0
    ) -> list[str]:
        """Names under ``prefix``, sorted, after ``start_after``: the encoding sorts like
        the names, so only the names returned are decoded."""
        namespace, _, rest = prefix.partition("/")
        if not namespace:
            spaces = sorted(e.name for e in os.scandir(base)) if base.is_dir() else []
            names = [n for space in spaces for n in self._listing(base, f"{space}/")]
            names = [n for n in names if start_after is None or n > start_after]
            return names[:limit] if limit > 0 else names
        encoded = sorted(
            e
            for e in self._encoded(os.path.join(base, namespace))
            if e.startswith(encode_name(rest))
        )
        if start_after is not None:
            after_space, _, after_rest = start_after.partition("/")
            if after_space > namespace:
                return []
            if after_space == namespace:
                encoded = encoded[bisect.bisect_right(encoded, encode_name(after_rest)) :]
        out: list[str] = []
        for name in encoded:
            try:
                out.append(f"{namespace}/{decode_name(name)}")
            except ValueError:
                continue  # not one of ours
            if limit > 0 and len(out) >= limit:
                break
        return out

    def list_refs(self, prefix: str, start_after: str | None = None, limit: int = 0) -> list[str]:
        with storage_errors("listing refs"):
            return self._listing(self.refs_dir, prefix, start_after, limit)

    def reflog(self, name: str) -> list[ReflogEntry]:
        path = self._log_path(name)
        try:
            with storage_errors(f"reading reflog of {name!r}"), open(path, "rb") as f:
                data = f.read()
        except (FileNotFoundError, NotADirectoryError):
            return []
        parsed = (_parse_line(line, repr(name)) for line in data.split(b"\n") if line)
        return [entry for entry in parsed if entry is not None]

    def reflog_names(self, prefix: str) -> list[str]:
        with storage_errors("listing reflogs"):
            return self._listing(self.logs_dir, prefix)

    def rewrite_reflog(self, name: str, keep: Callable[[ReflogEntry], bool]) -> int:
        path = self._log_path(name)
        with storage_errors(f"rewriting reflog of {name!r}"), self._locks.hold(name):
            entries = self.reflog(name)
            kept = [entry for entry in entries if keep(entry)]
            if len(kept) == len(entries):
                return 0
            if kept:
                atomic_replace(path, b"".join(map(_format_line, kept)), self.durable)
            else:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(path)
            return len(entries) - len(kept)

    def close(self) -> None:
        """Close the lock files."""
        self._locks.close()
