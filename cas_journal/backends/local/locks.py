"""The local store's two locks, both ``flock`` locks on things no one can delete alone.

* The writers' lock, on the store directory itself: a writer that stores objects before
  the commit that links them (``ObjectStore.write_guard``, held from the first write to
  the ref swap) holds it shared; ``gc --prune-now`` holds it exclusively for its whole
  run, so it never sees an object stored but not yet linked. Threads of one process share
  one shared hold, counted, so the last of them to leave releases it.
* The maintenance lock, on the ``FORMAT`` file: one pack, gc, batch-pack merge or format
  migration at a time. After locking, the holder checks that ``FORMAT`` still names the
  locked file (a migration replaces it once) and locks again if not.

``flock`` locks belong to an open file description and vanish with the process that
holds them, so a killed writer or gc never blocks anyone. Neither lock lives in a file
whose deletion would let a second holder in: deleting the store directory or its
``FORMAT`` file deletes the store (new processes cannot open it), it does not free a lock.
Descriptors inherited over ``fork`` are never used for locking (a forked child shares
its parent's open file description, and with it the parent's locks).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import threading
import weakref
from collections.abc import Iterator
from pathlib import Path

from ...errors import StoreFormatError
from .fsutil import storage_errors

_ALL: weakref.WeakSet[WritersLock] = weakref.WeakSet()


def _reset_after_fork() -> None:
    for lock in list(_ALL):
        lock._reset()


os.register_at_fork(after_in_child=_reset_after_fork)


def _open_directory(path: Path) -> int:
    return os.open(path, os.O_RDONLY | os.O_DIRECTORY)


class WritersLock:
    """Shared for writers between storing and linking, exclusive for a pruning gc."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._fd: int | None = None
        self._reset()
        _ALL.add(self)

    def _reset(self) -> None:
        # after fork, in the child: the inherited descriptor shares the parent's open file
        # description (and any lock on it), so it is closed, never unlocked or used
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._fd)
        self._fd = None
        self._guard = threading.Lock()
        self._holders = 0

    def _descriptor(self) -> int:
        if self._fd is None:
            with storage_errors("taking the writers' lock"):
                self._fd = _open_directory(self.root)
        return self._fd

    @contextlib.contextmanager
    def shared(self) -> Iterator[None]:
        """Held by a writer from its first object write to its ref swap."""
        with self._guard:
            if self._holders == 0:
                fcntl.flock(self._descriptor(), fcntl.LOCK_SH)
            self._holders += 1
        try:
            yield
        finally:
            with self._guard:
                self._holders -= 1
                if self._holders == 0 and self._fd is not None:
                    fcntl.flock(self._fd, fcntl.LOCK_UN)

    def close(self) -> None:
        """Close the descriptor (releasing any shared hold)."""
        with self._guard:
            if self._fd is not None:
                with contextlib.suppress(OSError):
                    os.close(self._fd)
                self._fd = None
            self._holders = 0

    @contextlib.contextmanager
    def exclusive(self) -> Iterator[None]:
        """Held by a pruning gc: no writer is between storing and linking meanwhile."""
        with storage_errors("taking the writers' lock"):
            fd = _open_directory(self.root)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)


@contextlib.contextmanager
def maintenance_lock(format_file: Path, wait: bool = True) -> Iterator[bool]:
    """Exclusive across processes and threads: one pack, gc, merge or migration at a time.

    Yields True once held; with ``wait=False`` it yields False at once if another holds it.
    """
    while True:
        try:
            with storage_errors("taking the maintenance lock"):
                fd = os.open(format_file, os.O_RDONLY)
        except FileNotFoundError as exc:
            raise StoreFormatError(f"{format_file} is missing: this is no longer a store") from exc
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX if wait else fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                yield False
                return
            try:
                same = os.stat(format_file).st_ino == os.fstat(fd).st_ino
            except FileNotFoundError:
                same = False
            if not same:  # replaced (a migration) while we waited: lock the current one
                fcntl.flock(fd, fcntl.LOCK_UN)
                continue
            try:
                yield True
                return
            finally:
                fcntl.flock(fd, fcntl.LOCK_UN)  # explicit: a forked child may share the fd
        finally:
            os.close(fd)
