"""The embedded local store: a directory, no server.

Layout (format 3; format 2 had the same layout)::

    FORMAT                 "cas-journal 3"; a newer version is refused on open
    store.db               SQLite database (WAL mode): refs, reflog, objects not yet packed
    store.db-wal, -shm     SQLite's write-ahead log and its index (part of the data)
    packs/pack-*.pack|idx  packed objects and their index

A store of an older format is upgraded when opened for writing (``migration``): format 1
(a file per loose object, per ref and per reflog) gets its database, format 2 (today's
layout, but no object of a kind added in format 3) only its new ``FORMAT``.

A commit (objects, one compare-and-swap, its reflog row and the listing-index updates) is
one database transaction; concurrent commits of one process share one transaction, and
with it one fsync (``commits.Committer``). ``durable=True`` syncs every commit
(``synchronous=FULL``); ``durable=False`` survives a killed process, not a power loss
(``synchronous=NORMAL``). The store's two locks are described in ``locks``; SQLite's own
locks die with their process.

``read_only=True`` opens an existing store for callers that only read (the command
line's reading commands): nothing is created, migrated or written (a write raises
StorageError). A format-2 store opens read-only as it is (its layout is today's); a
format-1 store must be opened for writing once (StoreUpgradeRequired).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import stat
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from ...errors import (
    LinkedObjectsMissing,
    StorageError,
    StoreFormatError,
    StoreUpgradeRequired,
)
from ...names import split_ref_name
from ...objects import DEFAULT_MAX_OBJECT_SIZE, ObjectCodec, is_oid
from ..base import (
    Capabilities,
    IndexUpdate,
    NewObject,
    RefCheck,
    RefUpdate,
    Store,
    check_ref_value,
    parse_format_record,
)
from .commits import Change, Committer
from .database import (
    DATABASE_FILE,
    Database,
    check_schema,
    connect,
    create_database,
    database_errors,
)
from .fsutil import fsync_dir, storage_errors, temp_name, write_new_file
from .locks import WritersLock
from .objects import LocalObjectStore, ensure_reserve
from .refs import LocalRefStore

if TYPE_CHECKING:
    from .copies import LocalStoredCopies

KNOWN_REF_NAMES = 4096
"""Valid ref names a store remembers (``LocalStore._check_name``); more start it over."""

FORMAT_FILE = "FORMAT"
FORMAT_NAME = "cas-journal"
FORMAT_VERSION = 3
"""The store format this code writes: format 3 may hold objects of kind ``segment``."""
OLDEST_READABLE_VERSION = 2
"""The oldest format a read-only open reads without upgrading (older ones need a writer)."""
PACKS_DIR = "packs"
LINKED_ATTEMPTS = 3
"""Commits tried before a linked object whose row keeps vanishing counts as missing."""
_INIT_LEFTOVERS = (
    PACKS_DIR,
    DATABASE_FILE,
    f"{DATABASE_FILE}-wal",
    f"{DATABASE_FILE}-shm",
    "reserve",
)


def read_format_version(root: Path) -> int | None:
    """The store format version recorded in ``root``, or None if there is no store."""
    try:
        with open(root / FORMAT_FILE, "rb") as f:
            text = f.read(64)
    except FileNotFoundError:
        return None
    except IsADirectoryError as exc:
        raise StoreFormatError(f"{root} has a directory where its {FORMAT_FILE} belongs") from exc
    version = parse_format_record(text)
    if version is None:
        raise StoreFormatError(f"{root} has an unreadable {FORMAT_FILE} file: {text[:60]!r}")
    return version


def _readable_version(root: Path, version: int | None) -> int:
    """``version`` if this code reads it; StoreFormatError for a newer one (or none)."""
    if version is None:
        raise StoreFormatError(f"{root} lost its {FORMAT_FILE} file while being opened")
    if version > FORMAT_VERSION:
        raise StoreFormatError(
            f"store {root} has format {version}; this cas-journal reads up to "
            f"{FORMAT_VERSION}. Upgrade cas-journal to open it."
        )
    return version


def check_database_files(root: Path) -> None:
    """Refuse to open a database whose file, WAL or WAL index is anything but a regular
    file in the store (a FIFO would block SQLite forever, a symlink would lead out of the
    store): StorageError."""
    for suffix in ("", "-wal", "-shm"):
        path = root / f"{DATABASE_FILE}{suffix}"
        try:
            mode = os.lstat(path).st_mode
        except FileNotFoundError:
            continue
        if stat.S_ISLNK(mode):
            raise StorageError(f"{path} is a symlink; refused")
        if not stat.S_ISREG(mode):
            raise StorageError(f"{path} is not a regular file; refused")


def is_store(path: str | os.PathLike[str]) -> bool:
    """True if ``path`` holds a cas-journal store."""
    return (Path(path) / FORMAT_FILE).is_file()


def write_format(root: Path, version: int, replace: bool) -> None:
    """Publish ``FORMAT`` (synced, then renamed or linked into place; the directory is
    synced). ``replace=False`` never overwrites an existing file (first creation)."""
    tmp = temp_name(root, "format-")
    write_new_file(tmp, f"{FORMAT_NAME} {version}\n".encode(), durable=True, mode=0o444)
    try:
        if replace:
            os.replace(tmp, root / FORMAT_FILE)
        else:
            with contextlib.suppress(FileExistsError):
                os.link(tmp, root / FORMAT_FILE)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
    fsync_dir(root)


_STORE_ENTRIES = frozenset({FORMAT_FILE, *_INIT_LEFTOVERS})


def _unexpected_entries(root: Path) -> bool:
    """True if ``root`` holds anything besides the store's own files: then
    ``migration.remove_leftovers`` looks for what a migration left behind (a store that
    holds nothing else never imports the migration code)."""
    with os.scandir(root) as entries:
        return any(entry.name not in _STORE_ENTRIES for entry in entries)


def _interrupted_init(root: Path) -> bool:
    """True if ``root`` is empty or holds only what an interrupted init leaves behind:
    an empty packs directory, a database nothing points at yet, temp files (the FORMAT
    file is written last)."""
    with os.scandir(root) as entries:
        for entry in entries:
            if entry.name.startswith(".tmp-") and entry.is_file(follow_symlinks=False):
                continue
            if entry.name == PACKS_DIR and entry.is_dir(follow_symlinks=False):
                with os.scandir(entry.path) as inside:
                    if next(inside, None) is None:
                        continue
                return False
            if entry.name in _INIT_LEFTOVERS and entry.is_file(follow_symlinks=False):
                continue
            return False
    return True


def _check_unused_database(root: Path) -> None:
    """Accept the database an interrupted init left (ours, holding nothing); refuse any
    other: a store whose FORMAT file was deleted is never re-initialised over its data."""
    check_database_files(root)
    path = root / DATABASE_FILE
    lost = StoreFormatError(
        f"{root} holds a cas-journal database but its FORMAT file is missing; nothing was "
        f"changed. If this is your store, restore FORMAT with the line "
        f"'{FORMAT_NAME} {FORMAT_VERSION}'"
    )
    with database_errors(f"opening {path}", StoreFormatError):
        conn = connect(path, durable=True)
        try:
            check_schema(conn, path)
            for table in ("refs", "reflog", "objects"):
                if conn.execute(f"SELECT 1 FROM {table} LIMIT 1").fetchone() is not None:
                    raise lost
        finally:
            conn.close()


def create_store(root: Path) -> None:
    """Create an empty store of the current format in ``root`` (made if missing, else empty
    or left by an interrupted init). Concurrent creators are serialised by an flock on ``root``; the
    FORMAT file is published last, so a crash at any point leaves a directory that the
    next attempt accepts."""
    root.mkdir(parents=True, exist_ok=True)
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        if read_format_version(root) is not None:
            return  # another process created it meanwhile
        if not _interrupted_init(root):
            raise StoreFormatError(f"{root} is not empty and holds no cas-journal store")
        if os.path.lexists(root / DATABASE_FILE):
            # a database is renamed into place complete: an init killed after that step
            # left an empty one (kept); one holding anything means FORMAT was deleted
            _check_unused_database(root)
        else:
            for leftover in _INIT_LEFTOVERS[2:]:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(root / leftover)
            (root / PACKS_DIR).mkdir(exist_ok=True)
            tmp = Path(temp_name(root, "db-"))
            try:
                with database_errors(f"creating store {root}"):
                    create_database(tmp)
                os.rename(tmp, root / DATABASE_FILE)
            finally:
                for suffix in ("", "-wal", "-shm", "-journal"):
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(f"{tmp}{suffix}")
        (root / PACKS_DIR).mkdir(exist_ok=True)
        fsync_dir(root)
        ensure_reserve(root)
        write_format(root, FORMAT_VERSION, replace=False)
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


class LocalStore(Store):
    """A store in a local directory (created if missing unless ``create=False``).

    ``format_version`` is the store's format once open: ``FORMAT_VERSION``, or an older
    readable one for a store opened read-only without upgrading."""

    capabilities = Capabilities(atomic_commit=True, object_times=True, stored_copies=True)

    def __init__(
        self,
        path: str | os.PathLike[str],
        durable: bool = True,
        max_object_size: int = DEFAULT_MAX_OBJECT_SIZE,
        create: bool = True,
        read_only: bool = False,
    ) -> None:
        self.root = Path(path)
        self.durable = durable
        self.read_only = read_only
        self.url = str(self.root)
        with storage_errors(f"opening store {self.root}"):
            version = read_format_version(self.root)
            if version is None:
                if not create or read_only:
                    raise StoreFormatError(
                        f"no cas-journal store at {self.root} (create one with 'cas-journal init')"
                    )
                if self.root.exists() and not self.root.is_dir():
                    raise StoreFormatError(f"{self.root} is a file, not a store directory")
                create_store(self.root)
                version = read_format_version(self.root)
            version = _readable_version(self.root, version)
            if version < FORMAT_VERSION and not read_only:
                from .migration import migrate

                migrate(self.root, max_object_size)
                version = _readable_version(self.root, read_format_version(self.root))
            elif version < OLDEST_READABLE_VERSION:
                raise StoreUpgradeRequired(
                    f"store {self.root} has format {version} and must be upgraded once: "
                    "open it writable (any command that writes does it)"
                )
            elif not read_only and _unexpected_entries(self.root):
                from .migration import remove_leftovers

                remove_leftovers(self.root)
        self.format_version = version
        check_database_files(self.root)
        self.db = Database(self.root / DATABASE_FILE, durable, read_only)
        with database_errors(f"opening store {self.root}", StoreFormatError):
            check_schema(self.db.connection(), self.db.path)
        self.committer = Committer(self.db)
        self.writers = WritersLock(self.root)
        codec = ObjectCodec(max_object_size=max_object_size)
        self.objects: LocalObjectStore = LocalObjectStore(
            self.root, codec, durable, self.db, self.committer, self.writers
        )
        self.refs: LocalRefStore = LocalRefStore(self.db, self.committer)
        self._stored_copies: LocalStoredCopies | None = None
        self._ref_names: set[str] = set()
        """Ref names ``commit`` validated (at most ``KNOWN_REF_NAMES``, see ``_check_name``)."""

    @property
    def stored_copies(self) -> LocalStoredCopies:
        """The store's loose rows and packs, for pack, gc and fsck (made on first use:
        commands that only read and write threads never import the pack writer)."""
        if self._stored_copies is None:
            from .copies import LocalStoredCopies

            self._stored_copies = LocalStoredCopies(self.objects)
        return self._stored_copies

    @stored_copies.setter
    def stored_copies(self, copies: LocalStoredCopies) -> None:
        self._stored_copies = copies

    def commit(
        self,
        objects: Sequence[NewObject],
        swap: RefUpdate,
        index: Sequence[IndexUpdate] = (),
        linked: Sequence[str] = (),
        expect: Sequence[RefCheck] = (),
    ) -> bool:
        """Objects, the freshening of ``linked``, the ``expect`` checks, the
        compare-and-swap, its reflog row and the index updates in one transaction
        (shared with other threads' commits); False if the swap lost or a check failed.

        A linked object found in a pack gets a row copy in the transaction; the others
        must have a row, whose ``written`` time the transaction raises (see
        ``objects``). If a row is missing (another process packed it meanwhile, or it
        was collected), nothing is written: ``freshen`` then copies what is in a pack
        into rows and the commit is tried again; LinkedObjectsMissing if an object is
        stored nowhere."""
        known = self._ref_names
        if swap.name not in known:
            self._check_name(swap.name)
        new = swap.new
        # a short printable ASCII value is a valid one (else check_ref_value says why not)
        if new is not None and not (
            type(new) is str and new.isascii() and new.isprintable() and 0 < len(new) < 256
        ):
            check_ref_value(new)
        for update in index:
            if update.name not in known:
                self._check_name(update.name)
            check_ref_value(update.value)
        for check in expect:
            if check.name not in known:
                self._check_name(check.name)
        rows = self.objects.rows_of(objects)
        what = f"updating {swap.name!r}"
        if not linked:
            return self.committer.submit(Change(rows, swap, index, what, expect=expect))
        wanted = list(dict.fromkeys(linked))
        invalid = [oid for oid in wanted if not is_oid(oid)]
        if invalid:
            raise LinkedObjectsMissing(invalid)
        copies, expected = self.objects.linked_rows(wanted)
        for _ in range(LINKED_ATTEMPTS):
            change = Change([*rows, *copies], swap, index, what, expected, expect)
            result = self.committer.submit(change)
            if not change.missing:
                return result
            missing = self.objects.freshen(wanted)  # rows for what another process packed
            if missing:
                raise LinkedObjectsMissing(list(missing))
            copies, expected = [], [bytes.fromhex(oid) for oid in wanted]
        raise LinkedObjectsMissing(wanted)  # collected again at every attempt

    def _check_name(self, name: str) -> None:
        """Validate a ref name (``split_ref_name``) and note it as valid: the names a
        process commits to repeat (a thread's ref at every append), and one noted is
        not validated again."""
        split_ref_name(name)
        known = self._ref_names
        if len(known) >= KNOWN_REF_NAMES:
            known.clear()
        known.add(name)

    def close(self) -> None:
        """Close the database connections and unmap packs."""
        self.objects.close()
        self.refs.close()
        self.db.close()
        self.writers.close()
