"""The local object store: rows of the store database (objects not yet packed) plus packs.

An object not yet packed is a row of the ``objects`` table: its raw 32-byte oid, the zstd
frame of its canonical form (the same bytes a loose file of format 1 held) and
``written``, when the row was last written or freshened (microseconds). Rows are written
by the commit that links them, in the same transaction (``commits.Change``); writing an
object that already has a row only raises its ``written`` time. A ``put_many`` of many
objects outside a commit (a sync, an import) is written as one pack instead. Reads look
in packs, then rows, then rescan the pack directory (another process may have packed
meanwhile and deleted the rows).

gc and rows, the rule: every commit writes, in its own transaction, every object its new
ref value links directly (new objects, and reused ones, which it re-inserts: that only
raises their ``written`` time; a stored object it links without writing it, its
``linked``, has its row's ``written`` time raised, or a row copy written if it is packed,
and the commit writes nothing if that row is gone), and ``freshen`` turns an object a
writer is about to link into a young row too. ``written`` never goes down. So once gc has
read the moment it starts (``gc_start``, taken under the database's write lock, so every
commit stamped earlier is visible to it), anything a commit links later is a row written
at or after that moment, or is reachable from one. gc therefore deletes a row only if it
was unreachable from the refs and reflogs it read after starting, its ``written`` time is
older than its start (and its grace period), and no row written since then references it,
directly or through other garbage: ``sweep_rows`` checks the last two inside the one
transaction that deletes, so no commit can slip between the check and the deletion.
Commits therefore take no lock against gc. The one case the rule cannot see is a writer
that read an object before gc started from a ref that stopped reaching it (deleted, and
its reflog expired) and links it only after gc swept it; with the default reflog expiry
of 30 days, that needs a writer stalled that long. Writers that store objects before a
separate ref update (``put_many`` then ``set_if_equals``: sync, import) hold
``write_guard`` in between, which ``gc --prune-now`` excludes. The rule assumes the
system clock does not step back by more than gc's run while gc runs.

Packed objects keep the times recorded in their pack index; before gc drops a pack it
gives the pack's garbage rows with those times (``loosen_many``), so the same rule
covers them.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from operator import itemgetter
from pathlib import Path
from typing import TYPE_CHECKING

from ...errors import CorruptObject, JournalError, ObjectNotFound, StorageError
from ...objects import (
    Kind,
    ObjectCodec,
    canonical_form,
    is_oid,
    object_id,
    parse_canonical,
    require_oid,
    typed_references,
)
from ..base import NewObject, ObjectStore
from .commits import FRESHEN_OBJECT, Change, Committer, now_micros
from .database import Database
from .fsutil import storage_errors
from .locks import WritersLock, maintenance_lock

if TYPE_CHECKING:
    from ...packs import BlockCache
    from .packs import LocalPack

# The pack modules (reader, writer, merging) are imported where packs are read or
# written: a store that holds only rows (a new or small one) never imports them.

RESERVE_FILE = "reserve"
RESERVE_BYTES = 512 * 1024
"""Disk space the store keeps aside (a preallocated file) so that gc can start on a
full disk: the database needs to write a little before it can free anything."""
PACK_THRESHOLD = 64
"""A put_many of at least this many new objects (outside a commit) is written as a pack."""
FRESHEN_INTERVAL = 60.0
_READ_ROW = "SELECT substr(frame, 1, ?), length(frame) FROM objects WHERE oid = ?"
_READ_ROWS = "SELECT oid, substr(frame, 1, ?), length(frame) FROM objects WHERE oid IN ({marks})"
_ROWS_PER_QUERY = 500
"""Oids per ``get_many`` query (SQLite allows 32,766 parameters; smaller keeps memory flat)."""
_READ_ROW_WINDOW = (
    "SELECT oid, CASE WHEN oid = ?2 OR length(frame) <= ?3 THEN substr(frame, 1, ?1) END, rowid "
    "FROM objects WHERE rowid BETWEEN (SELECT rowid FROM objects WHERE oid = ?2) - ?4 "
    "AND (SELECT rowid FROM objects WHERE oid = ?2) + ?5 "
    "AND (rowid NOT BETWEEN ?6 AND ?7 OR oid = ?2)"
)
"""The rows around one (``ROWS_BEFORE``, ``ROWS_AFTER``) but those of the last window
(rowids ``?6`` to ``?7``: read already, so kept or handed out since), the row itself
always."""
_READ_ROW_NUMBERED = "SELECT substr(frame, 1, ?), rowid FROM objects WHERE oid = ?"
ROWS_BEFORE, ROWS_AFTER = 96, 8
"""Rows written just before (and after) a row that ``get_with_neighbours`` reads with it,
once the rows it was asked for lie close together: rows are numbered in write order, so
a chain appended one commit at a time (entry, payload, thread state per append) lies in
the rows just before its newest node. Scattered reads (skip-pointer hops) read one row
each."""
NEIGHBOUR_FRAME_BYTES = 64 * 1024
"""Frames of neighbouring rows kept (undecoded) at most this long each."""
WINDOW_BYTES = 16 * 1024 * 1024
"""Frames of neighbouring rows kept at most, over the windows read lately (the oldest
go first): a chain walked back from its newest node and then read forwards (a path's
payloads) finds the rows of its last windows already read."""


def ensure_reserve(root: Path) -> None:
    """Set ``RESERVE_BYTES`` aside in the store's reserve file, if the disk has room (best
    effort: a store without its reserve works the same, gc just needs some free space
    to start on a full disk)."""
    path = root / RESERVE_FILE
    try:
        if os.lstat(path).st_size >= RESERVE_BYTES:
            return
    except FileNotFoundError:
        pass
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    except OSError:
        return
    try:
        os.posix_fallocate(fd, 0, RESERVE_BYTES)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(path)
    finally:
        os.close(fd)


def _size(path: Path) -> int:
    try:
        return os.lstat(path).st_size
    except FileNotFoundError:
        return 0


def _hex_range(prefix: str) -> tuple[bytes, bytes | None]:
    """The raw-oid range ``[low, high)`` of oids starting with a lowercase hex prefix."""
    shift = 4 * (64 - len(prefix))
    value = int(prefix, 16) if prefix else 0
    low = (value << shift).to_bytes(32, "big")
    top = (value + 1) << shift
    return low, (top.to_bytes(32, "big") if top < 1 << 256 else None)


class LocalObjectStore(ObjectStore):
    """Objects in a store directory: database rows and packs."""

    def __init__(
        self,
        root: Path,
        codec: ObjectCodec,
        durable: bool,
        db: Database,
        committer: Committer,
        writers: WritersLock,
    ) -> None:
        self.codec = codec
        self.durable = durable
        self.db = db
        self.committer = committer
        self.writers = writers
        self.root = root
        self.packs_dir = root / "packs"
        self.cache: BlockCache | None = None
        """Decompressed blocks shared by the packs (made with the first pack)."""
        self._packs: dict[str, LocalPack] = {}
        self._unreadable: dict[str, str] = {}
        self._last_found: LocalPack | None = None
        self._merging_failed = False
        self._packs_stamp: tuple[int, int] | None = None
        self._freshened: dict[str, float] = {}
        self._window: dict[str, bytes] = {}
        """Frames of the rows read with the last row windows (``get_with_neighbours``),
        by oid, each decoded and verified only when asked for, oldest first, at most
        ``WINDOW_BYTES`` in all."""
        self._window_bytes = 0
        self._last_row: int | None = None
        self._window_rows: tuple[int, int] = (0, -1)
        """The first and last rowid the last row window read (none at first): the next
        window leaves them out (a chain walked back reads overlapping windows)."""
        self._rows_close = False
        """Whether the last two rows asked for lay close together (the next read is
        then a window)."""
        self._lock = threading.Lock()
        self._window_lock = threading.Lock()
        self.refresh_packs()

    # -- packs ------------------------------------------------------------------------

    def refresh_packs(self) -> bool:
        """Re-read the pack directory if it changed; True if the set of packs changed."""
        with self._lock:
            try:
                stat = os.stat(self.packs_dir)
            except FileNotFoundError:
                return False
            stamp = (stat.st_mtime_ns, stat.st_ino)
            if stamp == self._packs_stamp:
                return False
            names = {
                entry[: -len(".idx")]
                for entry in os.listdir(self.packs_dir)
                if entry.endswith(".idx") and not entry.startswith(".")
            }
            changed = False
            for gone in set(self._packs) - names:
                # not closed: another thread may be reading it; the mapping goes with the
                # last reference (on POSIX a removed file stays readable while mapped)
                del self._packs[gone]
                changed = True
            if self._last_found is not None and self._last_found.name not in names:
                self._last_found = None
            for gone in set(self._unreadable) - names:
                del self._unreadable[gone]
            added = sorted(names - set(self._packs))
            if added:
                from ...packs import BlockCache
                from .packs import LocalPack

                if self.cache is None:
                    self.cache = BlockCache()
            for name in added:
                index_path = self.packs_dir / f"{name}.idx"
                try:
                    self._packs[name] = LocalPack(
                        index_path, self.codec.max_object_size, self.cache
                    )
                    self._unreadable.pop(name, None)
                    changed = True
                except FileNotFoundError:
                    continue  # removed by a concurrent repack; the next refresh settles it
                except (CorruptObject, StorageError) as exc:
                    if os.path.lexists(index_path):  # not just retired by a concurrent gc
                        # set aside: every other pack keeps working; fsck reports this one
                        self._unreadable[name] = str(exc)
            self._packs_stamp = stamp
            return changed

    def unreadable_packs(self) -> dict[str, str]:
        """Packs set aside because they do not open (damaged index, missing data, not a
        regular file), with the reason: reads skip them, fsck reports them."""
        self.refresh_packs()
        with self._lock:
            return dict(self._unreadable)

    def packs(self) -> list[LocalPack]:
        """The packs currently known (refreshes first)."""
        self.refresh_packs()
        with self._lock:
            return list(self._packs.values())

    def _find_in_packs(self, oid: str) -> LocalPack | None:
        found = self._locate(oid)
        return None if found is None else found[0]

    def _locate(self, oid: str) -> tuple[LocalPack, int] | None:
        """The pack holding ``oid`` and its position there. The pack of the last hit is
        searched first: objects read together (a thread's chain) were packed together."""
        raw = bytes.fromhex(oid)
        last = self._last_found
        if last is not None:
            position = last.index.position(raw)
            if position >= 0:
                return last, position
        for pack in list(self._packs.values()):
            if pack is last:
                continue
            position = pack.index.position(raw)
            if position >= 0:
                self._last_found = pack
                return pack, position
        return None

    def _freshen_pack(self, pack: LocalPack) -> None:
        """Mark a pack as just written (at most once a minute): gc treats its objects as
        no older than the pack file's mtime."""
        now = time.monotonic()
        if now - self._freshened.get(pack.name, -FRESHEN_INTERVAL) >= FRESHEN_INTERVAL:
            self._freshened[pack.name] = now
            with contextlib.suppress(FileNotFoundError):
                os.utime(pack.pack_path)

    @contextlib.contextmanager
    def maintenance_lock(self, wait: bool = True) -> Iterator[bool]:
        """The store's maintenance lock (see ``locks.maintenance_lock``)."""
        with maintenance_lock(self.root / "FORMAT", wait) as held:
            yield held

    def merge_batch_packs(self) -> int:
        """Merge small batch packs as ``merging`` describes; return how many were merged.

        Skipped while pack or gc runs. A merge that fails (a damaged pack, a full disk)
        leaves every pack in place and is not tried again by this process; fsck reports
        the damage. The merged pack is complete, synced and checked before any old one
        goes, so a crash at any point leaves at worst duplicates.
        """
        if self._merging_failed or len(self.packs()) < 2:
            return 0
        from ...packs.merging import packs_to_merge
        from .packs import write_merged_pack

        if len(packs_to_merge(self.packs())) < 2:
            return 0
        with self.maintenance_lock(wait=False) as held:
            chosen = packs_to_merge(self.packs()) if held else []
            if len(chosen) < 2:
                return 0
            try:
                index = write_merged_pack(self.packs_dir, chosen, self.durable)
                self.refresh_packs()
                merged = next(p for p in self.packs() if p.index_path == index)
                wanted: set[bytes] = set()
                for old in chosen:
                    table = old.oid_table()
                    wanted.update(table[at : at + 32] for at in range(0, len(table), 32))
                if merged.oid_table() != b"".join(sorted(wanted)):
                    raise CorruptObject(f"merged pack {merged.name} does not hold what it merged")
            except (OSError, ValueError, CorruptObject, StopIteration):
                self._merging_failed = True
                return 0
            for old in chosen:
                if old.name != merged.name:
                    self.remove_pack(old)
            return len(chosen)

    def remove_pack(self, pack: LocalPack) -> None:
        """Delete a pack: its index first, so no reader finds an index without data."""
        from .packs import remove_pack_files

        remove_pack_files(self.packs_dir, pack.name, self.durable)
        self.refresh_packs()

    # -- rows ---------------------------------------------------------------------------

    def _read_row(self, oid: str) -> bytes | None:
        """The stored frame of an object's row (None if there is none), read only up to
        the largest frame an object within the size limit can have."""
        limit = self.codec.max_frame_size
        found = self.db.row(
            _READ_ROW, (limit + 1, bytes.fromhex(oid)), "reading an object", CorruptObject
        )
        if found is None:
            return None
        frame, length = found
        if not isinstance(frame, bytes) or not isinstance(length, int):
            raise CorruptObject("object row does not hold a frame", oid)
        if length > limit:
            raise CorruptObject(
                f"stored frame is {length} bytes, more than the {limit}-byte limit", oid
            )
        return frame

    def iter_rows(self) -> list[tuple[str, int, int]]:
        """``(oid, written in microseconds, frame bytes)`` of every row, as one snapshot."""
        rows = self.db.rows(
            "SELECT oid, written, length(frame) FROM objects",
            what="listing objects",
            damaged=CorruptObject,
        )
        found = []
        for raw, written, size in rows:
            if isinstance(raw, bytes) and len(raw) == 32 and isinstance(written, int):
                found.append((raw.hex(), written, int(size) if isinstance(size, int) else 0))
        return found

    def iter_loose(self) -> Iterator[tuple[str, int]]:
        """``(oid, written in microseconds)`` of every object not yet packed."""
        for oid, written, _ in self.iter_rows():
            yield oid, written

    def verify_row(self, oid: str) -> Kind:
        """Decode and verify an object's row (fsck); CorruptObject if it is damaged,
        ObjectNotFound if the row is gone (packed meanwhile)."""
        frame = self._read_row(oid)
        if frame is None:
            raise ObjectNotFound(f"object {oid} has no row")
        if not frame:
            raise CorruptObject("object row holds an empty frame", oid)
        return self.codec.decode(oid, frame)[0]

    def row_time(self, oid: str) -> int | None:
        """When an object's row was last written or freshened (microseconds), or None."""
        found = self.db.row(
            "SELECT written FROM objects WHERE oid = ?",
            (bytes.fromhex(oid),),
            "reading an object's time",
            CorruptObject,
        )
        if found is None or not isinstance(found[0], int):
            return None
        return found[0]

    def replace_rows(self, objects: Sequence[NewObject]) -> None:
        """Store fresh rows for objects, overwriting any row already there (a damaged
        one: repair), in one transaction. The caller has checked each oid."""
        rows = [(raw, frame) for raw, frame in self.rows_of(objects)]
        now = now_micros()
        self.db.write(
            lambda conn: self.db.cursor().executemany(
                "INSERT INTO objects (oid, written, frame) VALUES (?, ?, ?) ON CONFLICT (oid) "
                "DO UPDATE SET frame = excluded.frame, written = max(excluded.written, "
                "objects.written + 1)",
                [(raw, now, frame) for raw, frame in rows],
            ),
            "repairing objects",
            CorruptObject,
        )

    def remove_rows(self, oids: Iterable[str]) -> None:
        """Delete the rows of objects that are now packed (``pack``), in one transaction."""
        raws = [(bytes.fromhex(oid),) for oid in oids]
        self.db.write(
            lambda conn: self.db.cursor().executemany("DELETE FROM objects WHERE oid = ?", raws),
            "removing packed objects",
            CorruptObject,
        )

    def loosen(self, oid: str) -> None:
        """Give a packed object a row that keeps its recorded write time (see
        ``loosen_many``)."""
        self.loosen_many([oid])

    def loosen_many(self, oids: Iterable[str]) -> None:
        """Give packed objects rows that keep their recorded write times, in one
        transaction (gc does this before dropping a pack, so no object vanishes before
        its referrers). A row that exists already is left as it is."""
        rows = []
        for oid in oids:
            data, when = self.canonical(oid)
            kind, body = parse_canonical(oid, data)
            rows.append((bytes.fromhex(oid), when * 10**6, self.codec.compress(kind, body)))
        if rows:
            self.db.write(
                lambda conn: self.db.cursor().executemany(
                    "INSERT INTO objects (oid, written, frame) VALUES (?, ?, ?) "
                    "ON CONFLICT (oid) DO NOTHING",
                    rows,
                ),
                "copying packed objects",
                CorruptObject,
            )

    def gc_start(self) -> int:
        """The moment a gc starts, in the clock of row times (microseconds), read while
        holding the database's write lock: every commit stamped earlier has committed
        (so the refs gc reads next show it), and every later commit is stamped later."""
        return self.db.write(lambda conn: now_micros(), "starting gc", CorruptObject)

    def sweep_rows(
        self, garbage: Iterable[str], before: int, since: int, keep: Iterable[str] = ()
    ) -> set[str]:
        """Delete the rows of ``garbage`` (objects a gc that started at ``since`` found
        unreachable; see the module docstring) in one transaction, except rows written at
        or after ``before`` (gc's cutoff: its start, or the end of its grace period if
        earlier) and everything that a row written since ``since``, or an object of
        ``keep``, references through other garbage. Returns the garbage kept."""
        doomed = {bytes.fromhex(oid) for oid in garbage}
        roots = [bytes.fromhex(oid) for oid in keep]

        def work(conn: sqlite3.Connection) -> set[bytes]:
            times = {
                raw: written
                for raw, written in conn.execute("SELECT oid, written FROM objects")
                if isinstance(raw, bytes) and isinstance(written, int)
            }
            stack = [raw for raw, written in times.items() if written >= since]
            stack += [raw for raw in doomed if times.get(raw, -1) >= before]  # too young
            stack += roots
            visited: set[bytes] = set()
            while stack:
                raw = stack.pop()
                if raw in visited:
                    continue
                visited.add(raw)
                for ref in self._references(conn, raw):
                    if ref in doomed and ref not in visited:
                        stack.append(ref)
            kept = {raw for raw in doomed & visited if raw in times}
            for raw in doomed - visited:
                if raw in times:
                    conn.execute("DELETE FROM objects WHERE oid = ? AND written < ?", (raw, before))
            return kept

        kept = self.db.write(work, "deleting objects", CorruptObject)
        return {raw.hex() for raw in kept}

    def packed_only_reached_from_young_rows(
        self, conn: sqlite3.Connection, since: int, packs: Sequence[LocalPack]
    ) -> set[str]:
        """The names of those ``packs`` that hold the only copy of an object a row written
        at or after ``since`` reaches, through other such objects (so retiring them now
        would leave a young row referencing nothing). Read in the caller's transaction."""
        leaving = {pack.name for pack in packs}
        young = [
            raw
            for raw, written in conn.execute("SELECT oid, written FROM objects")
            if isinstance(written, int) and written >= since and isinstance(raw, bytes)
        ]
        every_pack = self.packs()
        needed: set[str] = set()
        visited: set[bytes] = set(young)
        stack = list(young)
        while stack:
            for ref in self._references(conn, stack.pop()):
                if ref in visited:
                    continue
                visited.add(ref)
                if conn.execute("SELECT 1 FROM objects WHERE oid = ?", (ref,)).fetchone():
                    continue  # it has a row: it stays (and the row rule covers it)
                holders = {p.name for p in every_pack if p.index.position(ref) >= 0}
                if holders and holders <= leaving:
                    needed |= holders
                    stack.append(ref)
        return needed

    def _references(self, conn: sqlite3.Connection, raw: bytes) -> list[bytes]:
        """The oids an object references (read from its row, or its pack); none if it is
        a blob, absent or damaged (damage is fsck's to report)."""
        oid = raw.hex()
        try:
            found = conn.execute(_READ_ROW, (self.codec.max_frame_size + 1, raw)).fetchone()
            if found is not None and isinstance(found[0], bytes):
                kind, body = self.codec.decode(oid, found[0])
            else:
                located = self._locate(oid)
                if located is None:
                    return []
                pack, position = located
                kind, body = parse_canonical(oid, pack.canonical_at(position))
            if kind is Kind.BLOB:
                return []
            return [bytes.fromhex(ref) for ref, _ in typed_references(kind, body, oid)]
        except (JournalError, OSError, ValueError):
            return []

    def spend_reserve(self) -> None:
        """Make room for gc on a full disk: delete the reserve file (space set aside so
        that the database can always write a little), then fold the WAL into the database
        and truncate it (which frees the WAL's own space). gc calls this before it starts
        and ``keep_reserve`` when it is done."""
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.root / RESERVE_FILE)
        with contextlib.suppress(sqlite3.Error):
            self.db.connection().execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()

    def keep_reserve(self) -> None:
        """Set the reserve aside again (see ``ensure_reserve``)."""
        ensure_reserve(self.root)

    def release_space(self) -> None:
        """Give the pages of deleted rows back to the file system (after pack or gc):
        an incremental vacuum (the database is created with ``auto_vacuum=INCREMENTAL``;
        it moves pages in place and needs no copy of the file), then a checkpoint that
        empties and truncates the WAL. Best effort: on a full disk or a busy store it
        leaves things as they are (the free pages are reused by later writes)."""
        conn = self.db.connection()
        with contextlib.suppress(sqlite3.Error):
            if conn.execute("PRAGMA freelist_count").fetchone()[0]:
                # executescript steps the pragma to its end; execute() would free one page
                conn.executescript("PRAGMA incremental_vacuum")
        with contextlib.suppress(sqlite3.Error):
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
        self.keep_reserve()

    def canonical(self, oid: str) -> tuple[bytes, int]:
        """The verified canonical form of an object, from its first intact copy, and
        when that copy was last written (unix seconds)."""
        return self._intact_copy(oid, None)

    def _intact_copy(self, oid: str, first_error: JournalError | None) -> tuple[bytes, int]:
        """The canonical form from any intact copy (every pack holding ``oid``, then its
        row) and that copy's write time. A damaged copy is skipped (fsck reports it); if
        none is intact the first error is raised, ObjectNotFound if none exists."""
        for pack in self.packs():
            position = pack.position(oid)
            if position >= 0:
                try:
                    data = pack.canonical_at(position)
                    parse_canonical(oid, data)
                    return data, max(pack.time_at(position), pack.file_time())
                except CorruptObject as exc:
                    first_error = first_error or exc
        try:
            frame = self._read_row(oid)
            written = self.row_time(oid)
            if frame is not None and written is not None:
                kind, body = self.codec.decode(oid, frame)
                return canonical_form(kind, body), written // 10**6
        except JournalError as exc:
            first_error = first_error or exc
        if first_error is not None:
            raise first_error
        raise ObjectNotFound(f"object {oid} not found")

    # -- protocol -----------------------------------------------------------------------

    def write_guard(self) -> contextlib.AbstractContextManager[None]:
        """Shared hold on the writers' lock (a pruning gc waits for it, see locks)."""
        return self.writers.shared()

    def put_many(self, items: Sequence[tuple[Kind, bytes]]) -> list[str]:
        for _, body in items:
            self.codec.check_size(body)
        oids = [object_id(kind, body) for kind, body in items]
        if len(items) >= PACK_THRESHOLD:
            new = []
            for oid, (kind, body) in zip(oids, items, strict=True):
                pack = self._find_in_packs(oid)
                if pack is None:
                    new.append((oid, kind, body))
                else:
                    self._freshen_pack(pack)
            if len(new) >= PACK_THRESHOLD:
                self._write_batch_pack(new)
                return oids
            items = [(kind, body) for _, kind, body in new]
            oids_new = [oid for oid, _, _ in new]
        else:
            oids_new = oids
        rows = self.codec.rows(
            (oid, kind, body) for oid, (kind, body) in zip(oids_new, items, strict=True)
        )
        if rows:
            self.committer.submit(Change(rows=rows, what="writing objects"))
        return oids

    def _write_batch_pack(self, new: list[tuple[str, Kind, bytes]]) -> None:
        from ...packs import PackedObject
        from .packs import write_pack

        with storage_errors("writing objects"):
            self.packs_dir.mkdir(exist_ok=True)
            write_pack(
                self.packs_dir,
                (PackedObject(oid, canonical_form(kind, body)) for oid, kind, body in new),
                self.durable,
            )
            self.refresh_packs()
            self.merge_batch_packs()

    def store_new(self, objects: Sequence[NewObject]) -> None:
        """Store objects under the oids the caller computed (no second hash)."""
        if objects:
            self.committer.submit(Change(rows=self.rows_of(objects), what="writing objects"))

    def rows_of(self, objects: Sequence[NewObject]) -> list[tuple[bytearray, bytearray]]:
        """``(raw oid, frame)`` rows for objects (sizes checked first; bytearrays, see
        ``ObjectCodec.rows``)."""
        return self.codec.rows(objects)

    def linked_rows(
        self, oids: Sequence[str]
    ) -> tuple[list[tuple[bytearray, bytearray]], list[bytes]]:
        """What a commit that links stored objects it did not write does with them: for
        each one found in a pack, a row copy the commit writes (as ``freshen`` would);
        the others by raw oid, whose rows the commit freshens (and finds missing if they
        are not there). ``oids`` are valid and each listed once."""
        copies: list[tuple[bytearray, bytearray]] = []
        rows: list[bytes] = []
        for oid in oids:
            located = self._locate(oid) if self._packs else None
            if located is None:
                rows.append(bytes.fromhex(oid))
                continue
            raw, frame = self._row_copy(oid, *located)
            copies.append((bytearray(raw), bytearray(frame)))
        return copies, rows

    def _row_copy(self, oid: str, pack: LocalPack, position: int) -> tuple[bytes, bytes]:
        """``(raw oid, zstd frame)``: a row copy of the object at ``position`` of ``pack``."""
        with storage_errors("reading an object"):
            kind, body = parse_canonical(oid, pack.canonical_at(position))
        return bytes.fromhex(oid), self.codec.compress(kind, body)

    def freshen(self, oids: Iterable[str]) -> set[str]:
        """Make every object a young row: an existing row has its ``written`` time raised,
        a packed object gets a row copy written now (so gc's rule protects it, and what it
        references, exactly as if a commit had written it); return the oids stored
        nowhere."""
        wanted = [oid for oid in dict.fromkeys(oids) if is_oid(oid)]
        if not wanted:
            return set()
        copies: dict[bytes, bytes] = {}
        missing: set[str] = set()

        def raise_times(conn: sqlite3.Connection) -> list[str]:
            now = now_micros()
            return [
                oid
                for oid in wanted
                if conn.execute(FRESHEN_OBJECT, (now, bytes.fromhex(oid))).rowcount == 0
            ]

        # not synced: the commit that links these objects syncs it (the WAL is in order)
        for oid in self.db.write(raise_times, "freshening objects", CorruptObject, sync=False):
            located = self._locate(oid)
            if located is None and self.refresh_packs():
                located = self._locate(oid)
            if located is None:
                missing.add(oid)
                continue
            raw, frame = self._row_copy(oid, *located)
            copies[raw] = frame
        if copies:
            rows = [(bytearray(raw), bytearray(frame)) for raw, frame in copies.items()]
            self.committer.submit(Change(rows=rows, what="freshening objects"))
        return missing

    def object_time(self, oid: str) -> int | None:
        """When an object was last written or freshened (unix seconds), None if absent."""
        written = self.row_time(oid)
        newest = None if written is None else written // 10**6
        for pack in self.packs():
            position = pack.position(oid)
            if position >= 0:
                when = max(pack.time_at(position), pack.file_time())
                newest = when if newest is None else max(newest, when)
        return newest

    def get(self, oid: str) -> tuple[Kind, bytes]:
        require_oid(oid)
        for attempt in range(2):
            located = self._locate(oid)
            if located is not None:
                pack, position = located
                try:
                    with storage_errors("reading an object"):
                        return parse_canonical(oid, pack.canonical_at(position))
                except CorruptObject as exc:  # another copy may be intact
                    return parse_canonical(oid, self._intact_copy(oid, exc)[0])
            try:
                frame = self._read_row(oid)
                if frame is not None:
                    return self.codec.decode(oid, frame)
            except CorruptObject as exc:
                return parse_canonical(oid, self._intact_copy(oid, exc)[0])
            if attempt == 0 and not self.refresh_packs():
                break
        raise ObjectNotFound(f"object {oid} not found")

    def get_with_neighbours(self, oid: str) -> list[tuple[str, Kind, bytes]]:
        """The object and, if it is packed, every other object of its pack block (each
        named by its own hash); a damaged block falls back to ``get``."""
        require_oid(oid)
        located = self._locate(oid)
        if located is not None:
            pack, position = located
            try:
                with storage_errors("reading objects"):
                    found = pack.block_objects(position)
            except CorruptObject:
                found = []
            if oid in map(itemgetter(0), found):  # at C speed: a block holds hundreds
                return found
        else:  # not packed: its row, without a second search of the packs
            try:
                frame = self._from_window(oid)
                if frame is None:
                    frame = self._read_row_nearby(oid)
                if frame is not None:
                    kind, body = self.codec.decode(oid, frame)
                    return [(oid, kind, body)]
            except CorruptObject:
                pass  # ``get`` looks for another copy, or says why there is none
        kind, body = self.get(oid)
        return [(oid, kind, body)]

    def get_if_read(self, oid: str) -> tuple[Kind, bytes] | None:
        """The object if a recent row window read its frame (taken from the window,
        decoded and verified), else None (a damaged frame too: ``get`` then decides)."""
        frame = self._from_window(oid)
        if frame is None:
            return None
        try:
            return self.codec.decode(oid, frame)
        except CorruptObject:
            return None

    def _from_window(self, oid: str) -> bytes | None:
        """The frame of ``oid`` kept from a row window (taken out of it), or None."""
        frame = self._window.pop(oid, None)  # atomic: no lock on this path
        if frame is not None:
            # the count only bounds memory: it restarts from zero when nothing is kept
            self._window_bytes = self._window_bytes - len(frame) if self._window else 0
        return frame

    def _read_row_nearby(self, oid: str) -> bytes | None:
        """The frame of ``oid``'s row (None if there is none or it is too long: ``get``
        then says why). When the rows asked for lately lie close together, it is read in
        one query with the rows written just before and after it, whose frames join
        the window kept for the next calls. A row's frame is immutable (a damaged one
        fails verification when it is decoded, and ``get`` looks for another copy), so a
        kept frame is never stale, only perhaps deleted since."""
        raw = bytes.fromhex(oid)
        limit = self.codec.max_frame_size
        found: bytes | None = None
        number: object = None
        if self._rows_close:
            low, high = self._window_rows
            params = (limit + 1, raw, NEIGHBOUR_FRAME_BYTES, ROWS_BEFORE, ROWS_AFTER, low, high)
            rows = self.db.rows(_READ_ROW_WINDOW, params, "reading objects", CorruptObject)
            numbers = [rowid for _, _, rowid in rows if isinstance(rowid, int)]
            if numbers:
                self._window_rows = (min(numbers), max(numbers))
            with self._window_lock:
                window = self._window
                kept = self._window_bytes
                for other, frame, rowid in rows:
                    if not isinstance(other, bytes) or not isinstance(frame, bytes):
                        continue
                    if other == raw:
                        found, number = frame, rowid
                        continue
                    key = other.hex()
                    if key not in window:
                        window[key] = frame
                        kept += len(frame)
                while kept > WINDOW_BYTES and window:
                    try:  # another thread may take a frame meanwhile (without the lock)
                        dropped = window.pop(next(iter(window)), None)
                    except (RuntimeError, StopIteration):
                        break
                    if dropped is not None:
                        kept -= len(dropped)
                self._window_bytes = kept
        else:
            row = self.db.row(
                _READ_ROW_NUMBERED, (limit + 1, raw), "reading an object", CorruptObject
            )
            if row is not None and isinstance(row[0], bytes):
                found, number = row[0], row[1]
        last, self._last_row = self._last_row, number if isinstance(number, int) else None
        self._rows_close = (
            last is not None
            and self._last_row is not None
            and abs(self._last_row - last) <= 2 * ROWS_BEFORE
        )
        return found if found is not None and len(found) <= limit else None

    def get_many(self, oids: Iterable[str]) -> Iterator[tuple[str, Kind, bytes]]:
        """Read several objects, each verified: the packed ones pack by pack (each block
        read and decompressed once), the rest from the frames row windows kept (see
        ``get_with_neighbours``), else with one query per ``_ROWS_PER_QUERY`` rows.
        Anything damaged or not found in that pass goes through ``get`` (another intact
        copy, a rescan of the packs, else ObjectNotFound)."""
        wanted = list(dict.fromkeys(oids))
        for oid in wanted:
            require_oid(oid)
        by_pack: dict[str, tuple[LocalPack, list[str]]] = {}
        unpacked: list[str] = []
        for oid in wanted:
            located = self._locate(oid)
            if located is None:
                unpacked.append(oid)
            else:
                by_pack.setdefault(located[0].name, (located[0], []))[1].append(oid)
        retry: list[str] = []
        for pack, members in by_pack.values():
            done: set[str] = set()
            try:
                with storage_errors("reading objects"):
                    for oid, kind, body in pack.read_many(members):
                        done.add(oid)
                        yield oid, kind, body
            except CorruptObject:  # another copy may be intact
                retry.extend(oid for oid in members if oid not in done)
        if unpacked and self._window:  # rows a window read already: no second query
            rest: list[str] = []
            for oid in unpacked:
                kept = self.get_if_read(oid)  # a damaged kept frame: its row is read below
                if kept is None:
                    rest.append(oid)
                else:
                    yield oid, *kept
            unpacked = rest
        limit = self.codec.max_frame_size
        for start in range(0, len(unpacked), _ROWS_PER_QUERY):
            chunk = unpacked[start : start + _ROWS_PER_QUERY]
            sql = _READ_ROWS.format(marks=",".join("?" * len(chunk)))
            params = (limit + 1, *(bytes.fromhex(oid) for oid in chunk))
            found: dict[str, tuple[object, object]] = {}
            for raw, frame, length in self.db.rows(sql, params, "reading objects", CorruptObject):
                if isinstance(raw, bytes):
                    found[raw.hex()] = (frame, length)
            for oid in chunk:
                row = found.get(oid)
                if row is None or not isinstance(row[0], bytes) or row[1] != len(row[0]):
                    retry.append(oid)  # packed meanwhile, missing, damaged or too large
                    continue
                try:
                    kind, body = self.codec.decode(oid, row[0])
                except CorruptObject:
                    retry.append(oid)
                    continue
                yield oid, kind, body
        for oid in retry:
            kind, body = self.get(oid)
            yield oid, kind, body

    def has(self, oid: str) -> bool:
        if not is_oid(oid):
            return False
        if self._find_in_packs(oid) is not None:
            return True
        if self.db.row(
            "SELECT 1 FROM objects WHERE oid = ?", (bytes.fromhex(oid),), "looking up an object"
        ):
            return True
        return self.refresh_packs() and self._find_in_packs(oid) is not None

    def iter_oids(self) -> Iterator[str]:
        seen: set[str] = set()
        for pack in self.packs():
            for oid in pack.iter_oids():
                if oid not in seen:
                    seen.add(oid)
                    yield oid
        for oid, _, _ in self.iter_rows():
            if oid not in seen:
                seen.add(oid)
                yield oid

    def oids_with_prefix(self, prefix: str) -> list[str]:
        """Sorted oids starting with ``prefix`` (an index range in the database)."""
        if not prefix or any(c not in "0123456789abcdef" for c in prefix) or len(prefix) > 64:
            return super().oids_with_prefix(prefix)
        found: set[str] = set()
        if len(prefix) >= 2:
            for pack in self.packs():
                found.update(pack.oids_with_prefix(prefix))
        else:
            found.update(oid for pack in self.packs() for oid in pack.iter_oids())
            found = {oid for oid in found if oid.startswith(prefix)}
        low, high = _hex_range(prefix)
        sql, params = (
            "SELECT oid FROM objects WHERE oid >= ?",
            (low, *(() if high is None else (high,))),
        )
        if high is not None:
            sql += " AND oid < ?"
        for (raw,) in self.db.rows(sql, params, "listing objects", CorruptObject):
            if isinstance(raw, bytes) and len(raw) == 32:
                found.add(raw.hex())
        return sorted(found)

    def delete(self, oid: str) -> None:
        """Remove the row of an object (packed copies go when gc rewrites packs)."""
        if not is_oid(oid):
            return
        raw = bytes.fromhex(oid)
        self.db.write(
            lambda conn: self.db.cursor().execute("DELETE FROM objects WHERE oid = ?", (raw,)),
            "deleting an object",
            CorruptObject,
        )

    def usage(self) -> dict[str, int]:
        """Objects and bytes on disk: rows (their frames), the database files, packs."""
        found = self.db.row(
            "SELECT count(*), coalesce(sum(length(frame)), 0) FROM objects",
            what="measuring the store",
            damaged=CorruptObject,
        )
        rows, row_bytes = found if found is not None else (0, 0)
        packs = self.packs()
        pack_bytes = index_bytes = 0
        for pack in packs:
            with contextlib.suppress(FileNotFoundError):
                pack_bytes += os.stat(pack.pack_path).st_size
                index_bytes += os.stat(pack.index_path).st_size
        files = disk = 0
        database = {"": 0, "-wal": 0, "-shm": 0}
        for suffix in database:
            with contextlib.suppress(FileNotFoundError):
                database[suffix] = os.stat(f"{self.db.path}{suffix}").st_size
        for directory, _dirs, names in os.walk(self.root):
            for name in [".", *names]:
                with contextlib.suppress(FileNotFoundError):
                    stat = os.lstat(os.path.join(directory, name))
                    files += stat.st_size if name != "." else 0
                    disk += stat.st_blocks * 512
        return {
            "loose_objects": int(rows) if isinstance(rows, int) else 0,
            "loose_bytes": int(row_bytes) if isinstance(row_bytes, int) else 0,
            "packs": len(packs),
            "packed_objects": sum(pack.count for pack in packs),
            "packed_bytes": pack_bytes + index_bytes,
            "pack_data_bytes": pack_bytes,
            "pack_index_bytes": index_bytes,
            "database_bytes": database[""],
            "wal_bytes": database["-wal"],
            "shm_bytes": database["-shm"],
            "reserve_bytes": _size(self.root / RESERVE_FILE),
            "file_bytes": files,
            "disk_bytes": disk,
        }

    def close(self) -> None:
        """Unmap every pack."""
        with self._lock:
            for pack in self._packs.values():
                pack.close()
            self._packs.clear()
            self._packs_stamp = None
