"""The writers' lock: writers share it while they commit, a pruning gc takes it alone.

A writer stores objects, then links them with a ref swap; between the two they are
unreachable. gc's grace period protects them from an ordinary gc, but ``prune_now``
has no grace period, so it takes this lock exclusively: it waits for commits in flight
and holds new ones off until it is done. ``flock`` locks vanish with their process, so
a killed writer or gc never blocks anyone. Threads of one process share one shared
lock, counted, so the last of them to leave releases it.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import threading
import weakref
from collections.abc import Iterator
from pathlib import Path

from .fsutil import storage_errors

_ALL: weakref.WeakSet[WritersLock] = weakref.WeakSet()


def _reset_after_fork() -> None:
    for lock in list(_ALL):
        lock._reset()


os.register_at_fork(after_in_child=_reset_after_fork)


class WritersLock:
    """Shared for commits, exclusive for pruning, on ``locks/writers``."""

    def __init__(self, locks_dir: Path) -> None:
        self.path = locks_dir / "writers"
        self._reset()
        _ALL.add(self)

    def _reset(self) -> None:
        # descriptors inherited over fork are never used: a forked child shares the
        # parent's open file description, and with it the parent's flock
        self._guard = threading.Lock()
        self._holders = 0
        self._fd: int | None = None

    def _open(self) -> int:
        with storage_errors("opening the writers' lock"):
            self.path.parent.mkdir(parents=True, exist_ok=True)
            return os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)

    @contextlib.contextmanager
    def shared(self) -> Iterator[None]:
        """Held by a writer from its first object write to its ref swap."""
        with self._guard:
            if self._holders == 0:
                fd = self._open()
                try:
                    fcntl.flock(fd, fcntl.LOCK_SH)
                except BaseException:
                    os.close(fd)
                    raise
                self._fd = fd
            self._holders += 1
        try:
            yield
        finally:
            with self._guard:
                self._holders -= 1
                if self._holders == 0 and self._fd is not None:
                    # unlock explicitly: a child forked meanwhile holds a copy of the
                    # descriptor, and closing ours alone would leave the lock held
                    fcntl.flock(self._fd, fcntl.LOCK_UN)
                    os.close(self._fd)
                    self._fd = None

    @contextlib.contextmanager
    def exclusive(self) -> Iterator[None]:
        """Held by a pruning gc: no writer is between writing and linking meanwhile."""
        fd = self._open()
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)
