"""Changes to the local store's database, and the group committer that applies them.

A Change is what one call wants written at once: object rows (raw oid and zstd frame),
the raw oids of linked rows (stored objects the new ref value links that the caller did
not write), the refs that must hold a given value (``expect``), at most one
compare-and-swap of a ref (with its reflog row) and index-ref updates. It is applied
inside a write transaction in this order: the linked rows have their ``written`` time
raised as an upsert raises it (one statement; if its row count says a row is missing,
the change is ``missing``: nothing else is written and its result is False; raising the
times of the others is harmless), then the expected refs are read (one that differs:
the change writes nothing more and its result is False), then the compare-and-swap (one
statement whose row count says whether the ref held the expected value; if not, the
change writes nothing more and its result is False), then the object rows, the reflog
row and the index updates. An object row is an upsert: a new oid is inserted, an
existing one only has its ``written`` time raised (to now, and always by at least one
microsecond, so that gc can tell that a row was touched after it looked; see
``objects.py``). Rows are bytearrays, which ``sqlite3`` binds without looking for an
adapter. Nothing probes for existence first and nothing looks at the packs: an object
that is also packed simply has two copies until the next ``pack``.

Group commit: every change of a process goes through one ``Committer``. A caller queues
its change; while another caller leads a transaction it waits, and is woken as soon as
that transaction ends: if its change was applied, it returns that result at once;
otherwise the first one awake becomes the leader, takes every change queued so far (its
own included) and applies them in queue order in ONE transaction, so concurrent durable
commits of one process share one fsync. Threads that commit in a loop would otherwise
split into two halves that alternate (one half's transaction runs while the other half
prepares its next change), so a new leader first gathers: if callers the previous
transaction served (other than those queued) are not back yet, it waits for them, at
most as long as that transaction took and never more than ``GATHER_LIMIT``. A caller
alone never waits (it is the only one the previous transaction served): when nobody
leads and nothing else is queued it leads at once, without the condition's wait loop
and without building a new set of callers (its transaction still takes whatever was
queued before it got the leader lock). Each change keeps its own result: a lost
compare-and-swap fails only that change, and a later change in the same transaction
sees the effects of the earlier ones. If the transaction fails, each change of the
group is retried alone, so every caller gets its own error. Waiting callers are woken
when a leader finishes only if some are waiting (a change still queued, or a group of
several).
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
import weakref
from collections.abc import Sequence

from ...errors import JournalError, StorageError
from ..base import IndexUpdate, RefCheck, RefUpdate
from .database import Database, FilesReplaced

INSERT_OBJECT = (
    "INSERT INTO objects (oid, written, frame) VALUES (?, ?, ?) "
    "ON CONFLICT (oid) DO UPDATE SET written = max(excluded.written, objects.written + 1)"
)
FRESHEN_OBJECT = "UPDATE objects SET written = max(?, written + 1) WHERE oid = ?"
_INSERT_REF = "INSERT INTO refs (name, value) VALUES (?, ?) ON CONFLICT (name) DO NOTHING"
_UPDATE_REF = "UPDATE refs SET value = ? WHERE name = ? AND value = ?"
_DELETE_REF = "DELETE FROM refs WHERE name = ? AND value = ?"
_READ_REF = "SELECT value FROM refs WHERE name = ?"
_SET_INDEX = (
    "INSERT INTO refs (name, value) VALUES (?, ?) "
    "ON CONFLICT (name) DO UPDATE SET value = excluded.value"
)
_REMOVE_INDEX = "DELETE FROM refs WHERE name = ?"
_LOG = "INSERT INTO reflog (name, old, new, time, reason) VALUES (?, ?, ?, ?, ?)"
_LOG_CREATED = "INSERT INTO reflog (name, old, new, time, reason) VALUES (?, NULL, ?, ?, ?)"
_LOG_DELETED = "INSERT INTO reflog (name, old, new, time, reason) VALUES (?, ?, NULL, ?, ?)"
"""The reflog row of a ref created or deleted: its absent side a NULL of the statement,
not a bound None (``sqlite3`` binds None only after looking for an adapter for it and
failing, about 3,000 instructions, once per fork or new thread)."""


_get_ident, _monotonic, _time_ns = threading.get_ident, time.monotonic, time.time_ns
"""(Module globals: an attribute of a module looked up at every commit costs more.)"""

GATHER_LIMIT = 0.002
"""Seconds a new leader waits at most for the callers of the previous transaction."""


def now_micros() -> int:
    """Wall-clock time in microseconds since the epoch."""
    return time.time_ns() // 1000


class Change:
    """One caller's writes, applied together (see the module docstring).

    ``rows`` are ``(raw 32-byte oid, zstd frame)`` of every object to store or freshen,
    ``swap`` the compare-and-swap (if any), ``index`` the derived refs to set, ``what``
    the words for an error, ``linked`` the raw oids (each once) of rows the swap links
    without writing them (freshened), ``expect`` the refs that must hold a value. The
    committer fills in ``result``, ``missing`` (a linked row was not there: nothing was
    written, the result is False), ``error``,
    ``stamp`` (the ``written`` time the transaction gave new rows, in microseconds) and
    ``done``; ``caller`` is the submitting thread (``threading.get_ident``). A plain
    class, not a dataclass: one is built per commit, and the CLI pays for a dataclass at
    import.
    """

    __slots__ = (
        "caller",
        "done",
        "error",
        "expect",
        "index",
        "linked",
        "missing",
        "result",
        "rows",
        "stamp",
        "swap",
        "what",
    )

    def __init__(
        self,
        rows: Sequence[tuple[bytearray, bytearray]] = (),
        swap: RefUpdate | None = None,
        index: Sequence[IndexUpdate] = (),
        what: str = "committing",
        linked: Sequence[bytes] = (),
        expect: Sequence[RefCheck] = (),
    ) -> None:
        self.rows = rows
        self.expect = expect
        self.swap = swap
        self.index = index
        self.what = what
        self.linked = linked
        self.result = False
        self.missing = False
        self.error: BaseException | None = None
        self.done = False
        self.stamp = 0
        self.caller = 0


def _compare_and_swap(cursor: sqlite3.Cursor, swap: RefUpdate) -> bool:
    name, old, new = swap.name, swap.old, swap.new
    if old is None and new is None:
        return cursor.execute(_READ_REF, (name,)).fetchone() is None
    if old is None:
        return cursor.execute(_INSERT_REF, (name, new)).rowcount == 1
    if new is None:
        return cursor.execute(_DELETE_REF, (name, old)).rowcount == 1
    if old == new:
        found = cursor.execute(_READ_REF, (name,)).fetchone()
        return found is not None and found[0] == old
    return cursor.execute(_UPDATE_REF, (new, name, old)).rowcount == 1


def _each(cursor: sqlite3.Cursor, statement: str, params: list[tuple[object, ...]]) -> int:
    """Run ``statement`` once per parameter tuple; the rows it changed. One tuple goes
    through ``execute``: ``executemany`` costs more for a single row."""
    if len(params) == 1:
        return cursor.execute(statement, params[0]).rowcount
    return cursor.executemany(statement, params).rowcount


def _insert_rows(
    cursor: sqlite3.Cursor, rows: Sequence[tuple[bytearray, bytearray]], now: int
) -> None:
    """Upsert object rows (``INSERT_OBJECT``) with ``written`` time ``now``, one row per
    statement. Not several rows to a statement: SQLite keeps a statement journal for a
    statement that writes several rows (so that it can undo part of it), which a batch's
    pages overflow into a temporary file (strace, 3,000 batched entries of the
    benchmark: 13,130 ``pwrite`` calls instead of 7,832)."""
    _each(cursor, INSERT_OBJECT, [(oid, now, frame) for oid, frame in rows])


def apply_change(cursor: sqlite3.Cursor, change: Change, now: int) -> bool:
    """Apply one change inside the caller's write transaction, through
    ``cursor``; False if its swap lost, an expected ref differs or a linked row is missing
    (then ``change.missing``)."""
    linked = change.linked
    change.missing = False
    if linked:
        found = _each(cursor, FRESHEN_OBJECT, [(now, bytearray(oid)) for oid in linked])
        if found != len(linked):
            change.missing = True
            return False
    for check in change.expect:
        found = cursor.execute(_READ_REF, (check.name,)).fetchone()
        if (None if found is None else found[0]) != check.value:
            return False
    swap = change.swap
    if swap is not None and not _compare_and_swap(cursor, swap):
        return False
    rows = change.rows
    if rows:
        _insert_rows(cursor, rows, now)
    if swap is not None and swap.log:
        old, new = swap.old, swap.new
        if old is None:
            if new is not None:
                cursor.execute(_LOG_CREATED, (swap.name, new, now, swap.reason))
            else:
                cursor.execute(_LOG, (swap.name, None, None, now, swap.reason))
        elif new is None:
            cursor.execute(_LOG_DELETED, (swap.name, old, now, swap.reason))
        else:
            cursor.execute(_LOG, (swap.name, old, new, now, swap.reason))
    for update in change.index:
        if update.value is None:
            cursor.execute(_REMOVE_INDEX, (update.name,))
        else:
            cursor.execute(_SET_INDEX, (update.name, update.value))
    return True


_ALL: weakref.WeakSet[Committer] = weakref.WeakSet()


def _reset_after_fork() -> None:
    for committer in list(_ALL):
        committer._reset()


os.register_at_fork(after_in_child=_reset_after_fork)


class Committer:
    """Applies the changes of every thread of this process, several per transaction."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self.transactions = 0
        """Write transactions run (a measure of how much group commit shared)."""
        self._reset()
        _ALL.add(self)

    def _reset(self) -> None:
        # a child forked while another thread led a group must not inherit held locks
        self._queue: list[Change] = []
        self._lock = threading.Lock()
        """Guards the queue and ``_leading`` (taken directly, not through the condition:
        ``Condition.__enter__`` is a Python call around the same lock)."""
        self._state = threading.Condition(self._lock)
        """Notified when a leader finishes (its lock is ``_lock``)."""
        self._leading = False
        self._gathering = False
        self._served: frozenset[int] = frozenset()
        """The callers of the previous transaction."""
        self._sole = 0
        """The caller of the previous transaction if it served that one alone (else 0)."""
        self._sole_set: frozenset[int] = frozenset()
        """``_served`` when it was set to ``{_sole}`` (a caller alone reuses it, and takes
        the short way only while ``_served`` is still this very set)."""
        self._took = 0.0
        """How long the previous transaction took (seconds)."""
        self._leader = threading.Lock()
        """Held by the leader while it applies its group (tests hold it to queue changes)."""

    def submit(self, change: Change) -> bool:
        """Apply ``change`` (alone or with others queued meanwhile); return its result."""
        lock = self._lock
        change.caller = caller = _get_ident()
        with lock:
            queue = self._queue
            queue.append(change)
            if (
                self._leading
                or len(queue) > 1
                or self._sole != caller
                or self._served is not self._sole_set
            ):
                self._wait_or_lead(change)
                lead = not change.done
            else:  # alone, as in the previous transaction: lead at once
                self._leading = lead = True
        if lead:
            group: list[Change] = []
            try:
                with self._leader:
                    with lock:
                        group, self._queue = self._queue, []
                    started = _monotonic()
                    try:
                        self._run(group)
                    finally:
                        self._took = _monotonic() - started
                        if len(group) > 1:
                            self._sole = 0
                            self._served = frozenset(queued.caller for queued in group)
                        elif self._sole != caller or self._served is not self._sole_set:
                            self._sole = caller  # (the group is this caller's change)
                            self._served = self._sole_set = frozenset((caller,))
            finally:
                with lock:
                    self._leading = False
                    if self._queue or len(group) > 1:
                        self._state.notify_all()
        error = change.error
        if error is not None:
            # the error's traceback holds the frames that hold ``change``: break the
            # cycle, or the connection those frames hold stays open until a collection
            change.error = None
            try:
                raise error
            finally:
                del error
        return change.result

    def _wait_or_lead(self, change: Change) -> None:
        """(Holding ``_lock``, ``change`` queued.) Wait while another caller leads, until
        ``change`` is applied or nobody leads; in the latter case become the leader
        (``_leading``), first gathering the callers of the previous transaction if it
        served others."""
        state = self._state
        if self._gathering:
            state.notify_all()
        while self._leading and not change.done:
            state.wait()
        if not change.done:
            self._leading = True
            served = self._served
            if served and (len(served) > 1 or change.caller not in served):
                self._gather()

    def _gather(self) -> None:
        """Wait (holding ``_lock``) until every caller of the previous transaction has
        queued again, or for as long as that transaction took (at most GATHER_LIMIT)."""
        deadline = time.monotonic() + min(self._took, GATHER_LIMIT)
        self._gathering = True
        try:
            while not self._served <= {queued.caller for queued in self._queue}:
                left = deadline - time.monotonic()
                if left <= 0:
                    return
                self._state.wait(left)
        finally:
            self._gathering = False

    def _run(self, group: list[Change]) -> None:
        try:
            self._transaction(group, group[0].what if len(group) == 1 else "committing")
        except JournalError as exc:
            if len(group) == 1 or (isinstance(exc, FilesReplaced) and exc.after_commit):
                for change in group:  # applied or not: never applied a second time
                    _finish(change, error=exc)
                return
            for change in group:  # each caller gets its own outcome
                try:
                    self._transaction([change], change.what)
                except JournalError as single:
                    _finish(change, error=single)
        except BaseException as exc:
            for change in group:
                if not change.done:
                    _finish(change, error=StorageError(f"{change.what} was interrupted"))
            raise exc

    def _transaction(self, group: list[Change], what: str) -> None:
        """Apply ``group`` in one write transaction, then finish each change with its
        result (``_finish``)."""
        db = self.db

        def work(conn: sqlite3.Connection) -> list[bool]:
            now = _time_ns() // 1000  # (now_micros, without the call)
            cursor = db.cursor()  # (this thread's, as ``conn`` is)
            for change in group:
                change.stamp = now
            return [apply_change(cursor, change, now) for change in group]

        page_size = db.page_size
        if len(group) == 1:
            pages = _pages(group[0], page_size)
        else:
            pages = sum(_pages(change, page_size) for change in group)
        results = db.write(work, what, pages=pages)
        self.transactions += 1
        for change, result in zip(group, results, strict=True):
            _finish(change, result)


def _pages(change: Change, page_size: int) -> int:
    """Roughly how many pages a change writes: a leaf of the oid index per row (oids are
    random), the rows' own bytes, and the ref, reflog and index pages."""
    size = 0
    for _, frame in change.rows:  # (a loop, not sum over a generator: most changes hold one)
        size += len(frame)
    return len(change.rows) + size // page_size + 3


def _finish(change: Change, result: bool = False, error: BaseException | None = None) -> None:
    change.result = result
    change.error = error
    change.done = True
