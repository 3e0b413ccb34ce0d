"""The local store's SQLite database: schema, one connection per thread, transactions, errors.

File ``store.db`` (stdlib ``sqlite3``, WAL mode) holds three tables::

    refs     (name TEXT PRIMARY KEY, value TEXT)       every ref: threads/, checkpoints/,
                                                        threadindex/, leases/ ...
    reflog   (seq INTEGER PRIMARY KEY, name, old, new,  one row per logged update, in order;
              time, reason), index (name, seq)          old/new NULL = absent, time in
                                                        microseconds since the epoch (UTC)
    objects  (oid BLOB UNIQUE, written INTEGER,         objects not yet packed: the raw
              frame BLOB)                               32-byte oid, when the row was last
                                                        written or freshened (microseconds),
                                                        and the same zstd frame a loose file
                                                        of format 1 held

``PRAGMA application_id`` marks the file as ours and ``user_version`` is the schema
version. On open the schema is compared with the one above, statement for statement: a
database that holds anything else (a trigger, a view, another table) is refused, so a
hostile file cannot run code inside our transactions.

Connections: one per thread (``check_same_thread`` is off only so ``close`` can close them
all), opened lazily, never shared; a write transaction runs its statements through one
cursor kept with the connection (``cursor``); ``close`` closes that cursor before its
connection, as SQLite keeps a connection's files open until its last statement is
finalized (a caller that keeps the error of a failed write keeps the cursor through the
traceback's frames). ``durable=True`` sets ``synchronous=FULL``
(the WAL is synced at every commit), ``durable=False`` ``synchronous=NORMAL`` (a commit
survives a killed process; the WAL is synced only at checkpoints). A child process made by ``fork``
never touches its parent's connections (SQLite forbids it): they are kept referenced, so
that the garbage collector never closes them, and the child opens its own.

Checkpoints: copying the WAL into ``store.db`` syncs both files (also with
``synchronous=NORMAL``), which costs tens of milliseconds on a busy disk. SQLite would do
it inside the COMMIT of whichever write crosses its threshold, so one commit in a hundred
paid for all of them. Instead a thread of the process's own (``Checkpointer``, started on
demand, one per open store) runs a passive checkpoint after every ``CHECKPOINT_EVERY``
write transactions, or sooner once the writes since the last one changed about
``CHECKPOINT_PAGES`` pages (the committer estimates the pages of each transaction,
``write``'s ``pages``: a batch of thousands of objects is one transaction), beside the commits
(a passive checkpoint never blocks a writer). Once the WAL holds ``RESTART_FRAMES``
frames (``RELAXED_RESTART_FRAMES`` when not durable), the next write of the process
copies the few frames committed meanwhile (a small checkpoint, but with the syncs of
any checkpoint; SQLite starts the WAL over only when a write finds every frame copied);
below that the WAL simply grows, so that those syncs are paid at most once per that
many frames written, not after every background checkpoint of a process that writes
little.
A WAL that started over is overwritten in place, which a durable commit syncs faster
than a growing file. SQLite's automatic checkpoint stays as a backstop at
``AUTOCHECKPOINT_PAGES``.

Errors: SQLite's busy handler waits up to ``BUSY_TIMEOUT`` seconds for another process's
write lock; after that, and for every other failure, the caller gets a JournalError with
one line (``database_errors``): ConflictError when the database stayed locked (nothing of
the call was applied: another process held the store's write lock all that time, which
is a lost race for the lock, not a failure of the medium, so retrying later is right),
StorageError for a full disk, a read-only file system, an I/O error or missing
permissions, and CorruptRef or CorruptObject (as the caller says) for a damaged file.
Never a raw ``sqlite3.Error``.

Deleted files: SQLite's cross-process locks and its committed-but-not-checkpointed data
live in ``store.db-shm`` and ``store.db-wal``. A process that opens the store after one of
them was deleted creates a new one, and with it a second, independent set of locks. So
each connection records which files (device and inode) its WAL and WAL index are when it
opens, and every write transaction checks, once it holds the write lock and again after
COMMIT, that the paths still name them. Each check costs one ``fstat`` of the store
directory (through a descriptor of it opened once: no path to walk) when nothing in it
changed since a check that looked at both files (its modification time is older than
``SETTLED_NS``, so that a change in the same tick of the file system's clock cannot
hide), and stats the two files otherwise. If a file was replaced, the write is refused
(``FilesReplaced``, a StorageError: nothing is acknowledged from a connection whose
locks no longer exclude anyone); when only the WAL was replaced (the WAL index, and with
it the lock, is still shared), the connection first checkpoints its WAL into
``store.db``, which saves every commit acknowledged before the deletion; then it is
closed, and the next call opens a connection on the files now in place. ``close`` does
the same rescue. Deleting ``store.db`` itself deletes the store: SQLite refuses writes to
a moved or unlinked database, and a new process cannot open it.

Exit: closing the store's last connection (``close``, in whichever process is the store's
last user) lets SQLite copy the WAL into ``store.db`` and delete it, so the next process
opens a store without a WAL. A process that ends without closing its stores (no
``close``, no ``with``) has them closed at interpreter exit (``atexit``): otherwise it
would leave its WAL behind (up to ``RELAXED_RESTART_FRAMES`` frames, 8 MiB with 2 KiB
pages; with 4 KiB pages, 9 MiB after 250 checkpoint saves of 750 messages without
``durable``), and the next process to open
the store would read all of it to rebuild the WAL index (measured on a loaded 2-core VM:
opening that store took 7-19 ms instead of 2, in every new process until one closed
it). A killed process still leaves its WAL; the next process reads it as SQLite's recovery
does, and nothing committed is lost either way.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import sqlite3
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

from ...errors import ConflictError, CorruptRef, JournalError, StorageError, StoreFormatError

DATABASE_FILE = "store.db"
APPLICATION_ID = 0x434A5354  # "CJST"
SCHEMA_VERSION = 1
BUSY_TIMEOUT = 30.0
"""Seconds a statement waits for another process's write lock before giving up."""
PAGE_SIZE = 2048
"""The page size of a database this version creates (one made with another size, such as
the 4,096 of earlier versions, keeps its own: SQLite reads any). An append changes a few
bytes in each of about 9 pages of 4 KiB (11 of 2 KiB; three at random keys of the oid
index) and writes each whole to the WAL, which a durable commit then syncs: smaller
pages, 38% fewer bytes synced (10.7 frames of 2,048 bytes against 8.7 of 4,096).
Measured (``python -m bench store``, 8 runs alternating with 4,096, 2-core VM): durable
single appends 1,190/s against 1,080 (median append 716 us against 792), the durable
transactions alone (section ``floor``) 421 us against 489 for an append and 388 against
452 for a fork; non-durable appends, batches and the forks made right after batches (which
wait on the checkpoint of the batch) unchanged. 1,024 (a smaller alternating test) was no
better for durable forks, made non-durable appends 8-17% slower and the file larger (after
3,200 small appends: 5,921 KiB against 4,912 with 2,048 and 4,556 with 4,096)."""
CACHE_KIB = 8192
"""Page cache per connection (KiB)."""
WAL_LIMIT = 64 * 1024 * 1024
"""The WAL is truncated to this size after a checkpoint that emptied it."""
CHECKPOINT_EVERY = 128
"""Write transactions of one process between two background checkpoints."""
CHECKPOINT_PAGES = 1024
"""Pages changed (as the writes estimate them) after which a background checkpoint is
asked for even before ``CHECKPOINT_EVERY`` transactions: 128 single appends change about
900 pages, a batch of 100 entries about 200, so batches no longer let the WAL grow to
thousands of frames before its first checkpoint (which then copies it all while the next
commits sync beside it)."""
AUTOCHECKPOINT_PAGES = 16384
"""SQLite's own checkpoint inside a COMMIT, only if the background ones fall behind."""
RESTART_FRAMES = 1024
"""WAL frames (pages) after which a writer finishes a background checkpoint so the WAL
starts over (2 MiB with a new store's 2 KiB pages). A WAL that grows makes every durable
commit's sync also record the file's new size; once it has started over, commits
overwrite the file in place. Measured (same run, alternating, 2-core VM, 4 KiB pages):
250 durable checkpoint saves in a new process and 3,000 durable appends were about 10%
faster with 1,024 or 512 than with 4,096; 512 made non-durable appends pay the finish's
syncs more often."""
RELAXED_RESTART_FRAMES = 4096
"""``RESTART_FRAMES`` of a store that is not durable (8 MiB of 2 KiB pages): its commits
are never synced, so a WAL that grows costs them nothing, while each finish costs the
writer a checkpoint's two syncs. Measured (alternating, loaded 2-core VM, 4 KiB pages):
3,000 non-durable appends paid 12-13 finishes with 1,024 (48-54 us per append on average),
5 with 4,096 (21 us). The WAL index stays small either way: the background checkpoints
keep up, and readers look up only the frames not yet copied."""
SETTLED_NS = 100_000_000
"""How old the store directory's last change must be before a file check trusts it: more
than a tick of the kernel's file time clock (a jiffy, at most 10 ms); file systems that
keep whole seconds only are never trusted."""

SCHEMA = (
    (
        "table",
        "refs",
        "CREATE TABLE refs (name TEXT PRIMARY KEY NOT NULL, value TEXT NOT NULL) WITHOUT ROWID",
    ),
    (
        "table",
        "reflog",
        "CREATE TABLE reflog (seq INTEGER PRIMARY KEY, name TEXT NOT NULL, old TEXT, "
        "new TEXT, time INTEGER NOT NULL, reason TEXT NOT NULL)",
    ),
    ("index", "reflog_by_name", "CREATE INDEX reflog_by_name ON reflog (name, seq)"),
    (
        "table",
        "objects",
        "CREATE TABLE objects (oid BLOB UNIQUE NOT NULL, written INTEGER NOT NULL, "
        "frame BLOB NOT NULL)",
    ),
    ("index", "sqlite_autoindex_objects_1", None),
)
"""``(type, name, sql)`` of every schema object, as ``sqlite_master`` lists them."""

T = TypeVar("T")

# -- errors -----------------------------------------------------------------------------

_BUSY_CODES = frozenset({sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED})
_STORAGE_REASONS = {
    sqlite3.SQLITE_FULL: "no space left on device",
    sqlite3.SQLITE_READONLY: "the database is read-only (read-only file system or file)",
    sqlite3.SQLITE_IOERR: "input/output error",
    sqlite3.SQLITE_CANTOPEN: "the database file cannot be opened",
    sqlite3.SQLITE_PERM: "permission denied",
    sqlite3.SQLITE_NOMEM: "out of memory",
    sqlite3.SQLITE_NOLFS: "file too large for this file system",
    sqlite3.SQLITE_PROTOCOL: "the database's lock protocol failed",
}
_DAMAGE_CODES = frozenset({sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB, sqlite3.SQLITE_FORMAT})


def _primary_code(exc: sqlite3.Error) -> int:
    code = getattr(exc, "sqlite_errorcode", None)
    return -1 if code is None else int(code) & 0xFF


def translate_error(
    exc: sqlite3.Error, what: str, damaged: type[JournalError] = CorruptRef
) -> JournalError:
    """The JournalError (one line) that a failed SQLite call becomes."""
    code = _primary_code(exc)
    name = getattr(exc, "sqlite_errorname", None) or type(exc).__name__
    if code in _BUSY_CODES:
        return ConflictError(
            f"{what} failed: the store stayed locked by another process for "
            f"{BUSY_TIMEOUT:.0f} s ({name}); nothing was written, try again"
        )
    if code in _DAMAGE_CODES:
        return damaged(f"{what} failed: the database file is damaged ({name}): {exc}")
    reason = _STORAGE_REASONS.get(code)
    if reason is None:
        reason = str(exc).splitlines()[0] if str(exc) else name
    elif code == sqlite3.SQLITE_IOERR and name != "SQLITE_IOERR":
        reason = f"{reason} ({name})"
    return StorageError(f"{what} failed: {reason}")


@contextlib.contextmanager
def database_errors(what: str, damaged: type[JournalError] = CorruptRef) -> Iterator[None]:
    """Turn any ``sqlite3.Error`` (and OSErrors of the files around it) into a JournalError."""
    try:
        yield
    except sqlite3.Error as exc:
        raise translate_error(exc, what, damaged) from exc


# -- connections ------------------------------------------------------------------------

_OPEN: weakref.WeakSet[Database] = weakref.WeakSet()
_INHERITED: list[sqlite3.Connection] = []
"""Connections a forked child inherited: kept alive so they are never closed or used."""


def _after_fork_in_child() -> None:
    for database in list(_OPEN):
        database._forget_connections()


os.register_at_fork(after_in_child=_after_fork_in_child)


def _close_all_at_exit() -> None:
    """Close every store this process still has open (see "Exit" in the module docstring);
    best effort: a store that fails to close keeps its WAL, which loses nothing."""
    for database in list(_OPEN):
        with contextlib.suppress(Exception):
            database.close()


atexit.register(_close_all_at_exit)


class FilesReplaced(StorageError):
    """The WAL or WAL index of a connection was deleted or replaced while it was open:
    the write was refused (``after_commit``: the check after COMMIT failed, so the write
    may be in the store; it is not acknowledged and must not be retried blindly)."""

    def __init__(self, message: str, after_commit: bool) -> None:
        super().__init__(message)
        self.after_commit = after_commit


FileIds = tuple[tuple[int, int] | None, tuple[int, int] | None]
"""(device, inode) of ``-wal`` and ``-shm`` (None: absent)."""


class Checkpointer:
    """A thread that runs passive checkpoints of one database when asked (see the module
    docstring). Best effort: a failed checkpoint is left for the next one, or SQLite's."""

    def __init__(self, path: Path, durable: bool) -> None:
        self.path = path
        self.durable = durable
        self.restart_frames = RESTART_FRAMES if durable else RELAXED_RESTART_FRAMES
        """WAL frames after which the next writer finishes a checkpoint (``finish``)."""
        self.checkpoints = 0
        """Checkpoints run (for tests and benchmarks)."""
        self.finish_wanted = False
        """A background checkpoint found a long WAL: the next writer finishes it (see
        ``finish``)."""
        self._wake = threading.Event()
        self._stopping = False
        self._thread: threading.Thread | None = None
        self._guard = threading.Lock()

    def request(self) -> None:
        """Ask for a checkpoint soon (starts the thread on first use)."""
        with self._guard:
            if self._stopping:
                return
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name=f"checkpointer {self.path}", daemon=True
                )
                self._thread.start()
        self._wake.set()

    def _run(self) -> None:
        conn: sqlite3.Connection | None = None
        try:
            while True:
                self._wake.wait()
                self._wake.clear()
                if self._stopping:
                    return
                try:
                    if conn is None:
                        conn = connect(self.path, self.durable)
                    found = conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
                    if found is None or int(found[1]) >= self.restart_frames:
                        self.finish_wanted = True
                    self.checkpoints += 1  # last: a checkpoint counted has had its effect
                except sqlite3.Error:
                    if conn is not None:
                        with contextlib.suppress(sqlite3.Error):
                            conn.close()
                    conn = None
        finally:
            if conn is not None:
                with contextlib.suppress(sqlite3.Error):
                    conn.close()

    def finish(self, conn: sqlite3.Connection) -> None:
        """After a background checkpoint, copy the few frames committed while it ran,
        from the writer's own connection between two of its transactions: SQLite starts
        the WAL over only at a write that finds every frame copied, which a checkpoint
        running beside continuous commits never leaves behind. Costs a small checkpoint's
        two syncs once per ``restart_frames`` frames written."""
        self.finish_wanted = False
        with contextlib.suppress(sqlite3.Error):
            conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()

    def close(self) -> None:
        """Stop the thread (after the checkpoint it is running, if any)."""
        with self._guard:
            self._stopping = True
            thread, self._thread = self._thread, None
        self._wake.set()
        if thread is not None and thread is not threading.current_thread():
            thread.join()


class Database:
    """The store's database file: a connection per thread and the transactions on it."""

    def __init__(self, path: Path, durable: bool, read_only: bool = False) -> None:
        self.path = path
        self.durable = durable
        self.read_only = read_only
        self._local = threading.local()
        self._connections: list[sqlite3.Connection] = []
        self._idle: list[sqlite3.Connection] = []
        """Connections of finished threads, for the next new thread."""
        self._files: dict[int, FileIds] = {}
        """The WAL and WAL-index files each connection (by ``id``) opened."""
        self._cursors: dict[int, sqlite3.Cursor] = {}
        """The kept cursor of each connection (by ``id``) that made one (``cursor``)."""
        self._guard = threading.Lock()
        self._writes = 0
        """Write transactions so far."""
        self._pages = 0
        """Pages changed since the last checkpoint request, as the writers estimate them."""
        self.page_size = PAGE_SIZE
        """The database's page size (read when the first connection opens)."""
        self.directory = os.fspath(path.parent)
        self._settled: tuple[tuple[int, int, int, int], FileIds] | None = None
        """The directory's (device, inode, mtime, ctime) at a check and the files then."""
        self._directory_fd = -1
        """A descriptor of the store directory (-1: none yet), see ``current_file_ids``."""
        self._last_ids: FileIds = (None, None)
        """What ``file_ids`` found last: it returns this very tuple while the files stay the
        same, so the ids a connection opened and those a check finds are one object (a
        write's check is then one identity test, not a comparison of nested tuples)."""
        self.checkpointer = Checkpointer(path, durable)
        _OPEN.add(self)

    def file_ids(self) -> FileIds:
        """(device, inode) of the WAL and the WAL index now at their paths."""
        found: list[tuple[int, int] | None] = []
        for suffix in ("-wal", "-shm"):
            try:
                st = os.stat(f"{self.path}{suffix}")
            except FileNotFoundError:
                found.append(None)
            else:
                found.append((st.st_dev, st.st_ino))
        ids = found[0], found[1]
        if ids == self._last_ids:
            return self._last_ids  # the same object: a write compares it by identity first
        self._last_ids = ids
        return ids

    def current_file_ids(self) -> FileIds:
        """``file_ids``, from one stat of the directory when it has not changed since a
        check that found it settled (see the module docstring)."""
        try:
            # through a descriptor of the directory: no path to walk (half the time of a
            # stat by path); any doubt (a closed or reused descriptor) takes the long way
            st = os.stat(self._directory_fd if self._directory_fd >= 0 else self._open_directory())
        except OSError:
            return self.file_ids()
        stamp = (st.st_dev, st.st_ino, st.st_mtime_ns, st.st_ctime_ns)
        settled = self._settled
        if settled is not None and settled[0] == stamp:
            return settled[1]
        now = time.time_ns()
        found = self.file_ids()
        newest = max(st.st_mtime_ns, st.st_ctime_ns)
        # a whole second as timestamp: perhaps a file system with coarse times, never trusted
        if newest % 1_000_000_000 and now - newest > SETTLED_NS:
            self._settled = (stamp, found)
        return found

    def _open_directory(self) -> int:
        """A descriptor of the store directory, for ``current_file_ids`` (opened once)."""
        with self._guard:
            if self._directory_fd < 0:
                self._directory_fd = os.open(
                    self.directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
                )
            return self._directory_fd

    # -- connections --------------------------------------------------------------------

    def connection(self) -> sqlite3.Connection:
        """This thread's connection (on first use, one a finished thread left, else a new
        one: a host that runs each call in a new thread, as LangGraph's executors do,
        neither opens a connection per thread nor keeps the dead threads' open)."""
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            with self._guard:
                conn = self._idle.pop() if self._idle else None
            if conn is None:
                conn = self._open()
            self._local.conn = conn
            self._local.cursor = self._cursors.get(id(conn))
            self._local.returned = _ReturnedAtExit(self, conn)
        return conn

    def _release(self, conn: sqlite3.Connection) -> None:
        """(The thread that used ``conn`` is gone.) Keep it for another thread."""
        with self._guard:
            if conn in self._connections and not conn.in_transaction:
                self._idle.append(conn)

    def cursor(self) -> sqlite3.Cursor:
        """This thread's cursor on its connection (made on first use). A write's
        statements run through it: ``Connection.execute`` makes and drops a cursor at
        every call, which costs a statement as much as binding its values."""
        cursor: sqlite3.Cursor | None = getattr(self._local, "cursor", None)
        # (set only beside the connection it belongs to, see ``_drop``)
        return cursor if cursor is not None else self._new_cursor()

    def _new_cursor(self) -> sqlite3.Cursor:
        conn = self.connection()
        cursor = self._local.cursor = conn.cursor()
        with self._guard:
            self._cursors[id(conn)] = cursor
        return cursor

    def _open(self) -> sqlite3.Connection:
        with database_errors(f"opening {self.path}", StoreFormatError):
            conn = connect(self.path, self.durable, self.read_only)
            try:  # a first read opens the WAL and its index: note which files they are
                conn.execute("SELECT 1 FROM sqlite_master LIMIT 1").fetchall()
                self.page_size = int(conn.execute("PRAGMA page_size").fetchone()[0])
            except BaseException:
                conn.close()
                raise
        with self._guard:
            self._connections.append(conn)
            self._files[id(conn)] = self.file_ids()
        return conn

    def _check_files(self, conn: sqlite3.Connection, what: str, after_commit: bool) -> None:
        """FilesReplaced if the WAL or WAL index of ``conn`` is no longer at its path
        (see the module docstring); rescues and drops the connection first."""
        opened = self._files.get(id(conn))
        now = self.current_file_ids()
        if opened is None or now == opened:
            return
        names = [
            f"{self.path.name}{suffix}"
            for suffix, was, is_ in zip(("-wal", "-shm"), opened, now, strict=True)
            if was != is_
        ]
        if conn.in_transaction:
            with contextlib.suppress(sqlite3.Error):
                conn.execute("ROLLBACK")
        self._rescue(conn, opened, now)
        self._drop(conn)
        outcome = "it may or may not have been applied" if after_commit else "nothing was written"
        raise FilesReplaced(
            f"{what} failed: {' and '.join(names)} was deleted or replaced while the store "
            f"was open ({outcome}); the store was reopened, check and try again",
            after_commit,
        )

    def _rescue(self, conn: sqlite3.Connection, opened: FileIds, now: FileIds) -> None:
        """Checkpoint a replaced WAL into the database through the connection that still
        holds it, when the WAL index (the lock) is still shared with everyone else."""
        if opened[0] != now[0] and opened[1] == now[1] and not self.read_only:
            with contextlib.suppress(sqlite3.Error):
                conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()

    def _drop(self, conn: sqlite3.Connection) -> None:
        with self._guard:
            with contextlib.suppress(ValueError):
                self._connections.remove(conn)
            with contextlib.suppress(ValueError):
                self._idle.remove(conn)
            self._files.pop(id(conn), None)
            cursor = self._cursors.pop(id(conn), None)
        if getattr(self._local, "conn", None) is conn:
            self._local.conn = self._local.cursor = None
        _close(conn, cursor)

    def _forget_connections(self) -> None:
        """After fork, in the child: abandon the parent's connections (never close them)."""
        with contextlib.suppress(Exception):
            _INHERITED.extend(self._connections)
        self._connections = []
        self._idle = []
        self._cursors = {}
        self._local = threading.local()
        self._guard = threading.Lock()
        self.checkpointer = Checkpointer(self.path, self.durable)  # the thread stayed behind

    def close(self) -> None:
        """Close every connection opened so far (a later call opens a new one: the
        store stays usable, as a closed file store did)."""
        self.checkpointer.close()
        self.checkpointer = Checkpointer(self.path, self.durable)  # the store stays usable
        with self._guard:
            connections, self._connections = self._connections, []
            self._idle = []
            files, self._files = self._files, {}
            cursors, self._cursors = self._cursors, {}
            directory_fd, self._directory_fd = self._directory_fd, -1
        if directory_fd >= 0:
            with contextlib.suppress(OSError):
                os.close(directory_fd)
        now = self.file_ids()
        for conn in connections:
            opened = files.get(id(conn))
            if opened is not None and opened != now:
                self._rescue(conn, opened, now)
            _close(conn, cursors.get(id(conn)))
        self._local = threading.local()

    # -- statements -----------------------------------------------------------------------

    def rows(
        self,
        sql: str,
        params: tuple[object, ...] = (),
        what: str = "reading the store",
        damaged: type[JournalError] = CorruptRef,
    ) -> list[tuple[object, ...]]:
        """All rows of one read statement (its own snapshot)."""
        try:  # (not ``database_errors``: a generator's context costs every read)
            return self.connection().execute(sql, params).fetchall()
        except sqlite3.Error as exc:
            raise translate_error(exc, what, damaged) from exc

    def row(
        self,
        sql: str,
        params: tuple[object, ...] = (),
        what: str = "reading the store",
        damaged: type[JournalError] = CorruptRef,
    ) -> tuple[object, ...] | None:
        """The first row of one read statement, or None."""
        try:
            found: tuple[object, ...] | None = self.connection().execute(sql, params).fetchone()
        except sqlite3.Error as exc:
            raise translate_error(exc, what, damaged) from exc
        return found

    @contextlib.contextmanager
    def snapshot(self, what: str = "reading the store") -> Iterator[sqlite3.Connection]:
        """A read transaction: every statement inside sees the same committed state."""
        conn = self.connection()
        with database_errors(what):
            conn.execute("BEGIN")
        try:
            yield conn
        finally:
            with contextlib.suppress(sqlite3.Error):
                conn.execute("COMMIT")

    def write(
        self,
        work: Callable[[sqlite3.Connection], T],
        what: str,
        damaged: type[JournalError] = CorruptRef,
        sync: bool = True,
        pages: int = 0,
    ) -> T:
        """Run ``work`` in one write transaction (``BEGIN IMMEDIATE`` ... ``COMMIT``).

        ``pages``: about how many pages the write changes, if the caller knows (the
        committer estimates it): this paces the background checkpoints (see the module
        docstring).

        ``sync=False`` skips the durable store's sync of this commit, for a write that
        only matters together with a later synced commit of this process (``freshen``
        before the commit that links the objects): the WAL is one file written in order,
        so that sync makes this write durable too, and a crash before it loses both."""
        if self.read_only:
            raise StorageError(f"{what} failed: the store was opened read-only")
        cursor = self.cursor()
        conn = cursor.connection
        opened = self._files.get(id(conn))
        relaxed = self.durable and not sync
        try:
            if relaxed:
                conn.execute("PRAGMA synchronous=NORMAL")
            cursor.execute("BEGIN IMMEDIATE")
            try:
                ids = self.current_file_ids()
                # (the same files: the same tuple object; ``opened`` None: unequal to any)
                if ids is not opened and ids != opened:
                    self._check_files(conn, what, after_commit=False)
                result = work(conn)
                cursor.execute("COMMIT")
            except BaseException:
                with contextlib.suppress(sqlite3.Error):  # (closed by _check_files)
                    if conn.in_transaction:
                        cursor.execute("ROLLBACK")  # (resets the cursor's statement too)
                raise
            finally:
                if relaxed:
                    with contextlib.suppress(sqlite3.Error):  # (closed by _check_files)
                        conn.execute("PRAGMA synchronous=FULL")
        except sqlite3.Error as exc:
            raise translate_error(exc, what, damaged) from exc
        ids = self.current_file_ids()
        if ids is not opened and ids != opened:
            self._check_files(conn, what, after_commit=True)
        self._writes += 1
        self._pages += pages
        if self.checkpointer.finish_wanted:
            self.checkpointer.finish(conn)
        elif self._writes % CHECKPOINT_EVERY == 0 or self._pages >= CHECKPOINT_PAGES:
            self._pages = 0
            self.checkpointer.request()
        return result


class _ReturnedAtExit:
    """Kept in a thread's local data beside its connection: when the thread ends and its
    local data goes, the connection goes back to the database for another thread."""

    __slots__ = ("conn", "database")

    def __init__(self, database: Database, conn: sqlite3.Connection) -> None:
        self.database = weakref.ref(database)
        self.conn = conn

    def __del__(self) -> None:
        database = self.database()
        if database is not None:
            with contextlib.suppress(Exception):  # (never raise from a finalizer)
                database._release(self.conn)


def _close(conn: sqlite3.Connection, cursor: sqlite3.Cursor | None) -> None:
    """Close ``conn`` and its kept cursor. The cursor first: SQLite keeps a connection
    (and its open files) until its last statement is finalized, and a cursor holds its
    statement for as long as anything holds the cursor (a traceback of a failed write,
    kept by the caller, holds it through the frames it passed)."""
    if cursor is not None:
        with contextlib.suppress(sqlite3.Error):
            cursor.close()
    with contextlib.suppress(sqlite3.Error):
        conn.close()


def connect(path: Path, durable: bool, read_only: bool = False) -> sqlite3.Connection:
    """A configured connection to an existing database file (sqlite3 errors propagate)."""
    if read_only:
        uri = f"{Path(path).absolute().as_uri()}?mode=ro&nofollow=1"
        conn = sqlite3.connect(
            uri, uri=True, timeout=BUSY_TIMEOUT, isolation_level=None, check_same_thread=False
        )
    else:
        conn = sqlite3.connect(
            f"{Path(path).absolute().as_uri()}?mode=rw&nofollow=1",
            uri=True,
            timeout=BUSY_TIMEOUT,
            isolation_level=None,
            check_same_thread=False,
        )
    try:
        conn.execute(f"PRAGMA synchronous={'FULL' if durable else 'NORMAL'}")
        conn.execute(f"PRAGMA cache_size=-{CACHE_KIB}")
        conn.execute("PRAGMA cell_size_check=ON")
        conn.execute("PRAGMA trusted_schema=OFF")
        if not read_only:
            conn.execute(f"PRAGMA journal_size_limit={WAL_LIMIT}")
            conn.execute(f"PRAGMA wal_autocheckpoint={AUTOCHECKPOINT_PAGES}")
    except BaseException:
        conn.close()
        raise
    return conn


def create_database(path: Path) -> None:
    """Create an empty database with our schema at ``path`` (which must not exist), WAL
    mode, synced. The caller publishes it (rename) once it is complete."""
    conn = sqlite3.connect(
        f"{Path(path).absolute().as_uri()}?mode=rwc", uri=True, isolation_level=None
    )
    try:
        conn.execute(f"PRAGMA page_size={PAGE_SIZE}")
        conn.execute("PRAGMA auto_vacuum=INCREMENTAL")  # before any table: lets pack and
        # gc give freed pages back to the file system without a full VACUUM
        conn.execute(f"PRAGMA application_id={APPLICATION_ID}")
        conn.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
        conn.execute("BEGIN")
        for _, _, sql in SCHEMA:
            if sql is not None:
                conn.execute(sql)
        conn.execute("COMMIT")
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=FULL")
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        conn.close()
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def check_schema(conn: sqlite3.Connection, path: Path) -> None:
    """Refuse a database that is not ours or holds anything beyond our schema."""
    try:
        application = conn.execute("PRAGMA application_id").fetchone()[0]
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        found = conn.execute(
            "SELECT type, name, sql FROM sqlite_master ORDER BY type, name"
        ).fetchall()
        mode = conn.execute("PRAGMA journal_mode").fetchone()[0]
    except sqlite3.DatabaseError as exc:
        raise StoreFormatError(f"{path} is not a readable cas-journal database: {exc}") from exc
    if application != APPLICATION_ID:
        raise StoreFormatError(f"{path} is not a cas-journal database")
    if version != SCHEMA_VERSION:
        raise StoreFormatError(
            f"{path} has database schema {version}; this cas-journal reads {SCHEMA_VERSION}"
        )
    expected = sorted(SCHEMA, key=lambda item: (item[0], item[1]))
    if [tuple(row) for row in found] != [tuple(item) for item in expected]:
        raise StoreFormatError(
            f"{path} holds tables, indexes or triggers this cas-journal did not create"
        )
    if str(mode).lower() != "wal":
        raise StoreFormatError(f"{path} is not in WAL mode ({mode})")
