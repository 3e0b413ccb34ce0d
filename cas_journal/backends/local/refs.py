"""Local refs: rows of the store database, updated by compare-and-swap in a transaction.

A ref is a row ``(name, value)`` of the ``refs`` table; user-chosen ids inside names are
data, never file names. A compare-and-swap is one conditional statement inside a write
transaction (``commits.apply_change``), together with its reflog row, so an update and
its log line are committed together or not at all. Listing is a range query on the
primary key (``name >= prefix AND name < the prefix's successor``), so a page of refs
costs the same whatever else the table holds. SQLite compares TEXT as UTF-8 bytes, which
orders names by code point, exactly as Python's ``sorted`` does.

Every value read back is checked: a row that is not a non-empty single line of text (a
damaged or hostile database) raises CorruptRef naming the ref, never a raw error.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterable
from datetime import UTC, datetime

from ...errors import CorruptRef
from ...names import split_ref_name
from ..base import ReflogEntry, RefStore, RefUpdate, check_ref_value
from .commits import Change, Committer
from .database import Database, translate_error

MAX_REFLOG_TIME = 253402300799 * 10**6  # 9999-12-31T23:59:59Z in microseconds


_READ_REF = "SELECT value FROM refs WHERE name = ?"
_REFS_PER_QUERY = 500
"""Names per ``read_refs`` query (SQLite allows 32,766 parameters)."""


def prefix_end(prefix: str) -> str | None:
    """The smallest string greater than every string that starts with ``prefix`` (None if
    there is none: the prefix is empty or made only of the highest code point)."""
    while prefix:
        last = ord(prefix[-1]) + 1
        if 0xD800 <= last <= 0xDFFF:
            last = 0xE000  # surrogates are not valid in UTF-8 text
        if last <= 0x10FFFF:
            return prefix[:-1] + chr(last)
        prefix = prefix[:-1]
    return None


def _encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def parse_value(name: str, value: object) -> str:
    """A ref value as stored, checked: a non-empty single line of text."""
    if not isinstance(value, str) or not value or "\n" in value or "\r" in value:
        raise CorruptRef(f"ref {name!r} holds a malformed value ({type(value).__name__})")
    return value


def parse_reflog_row(name: str, row: tuple[object, ...]) -> ReflogEntry:
    """One reflog row ``(old, new, time, reason)``, checked; CorruptRef if malformed."""
    if len(row) != 4:
        raise CorruptRef(f"reflog of {name!r} has a malformed row")
    old, new, when, reason = row
    for value in (old, new):
        if value is not None and (not isinstance(value, str) or not value or "\n" in value):
            raise CorruptRef(f"reflog of {name!r} holds a malformed value: {value!r:.80}")
    if not isinstance(when, int) or isinstance(when, bool) or not 0 <= when <= MAX_REFLOG_TIME:
        raise CorruptRef(f"reflog of {name!r} holds a malformed time: {when!r:.40}")
    if not isinstance(reason, str):
        raise CorruptRef(f"reflog of {name!r} holds a malformed reason: {reason!r:.40}")
    assert old is None or isinstance(old, str)
    assert new is None or isinstance(new, str)
    moment = datetime.fromtimestamp(when // 10**6, UTC).replace(microsecond=when % 10**6)
    return ReflogEntry(old, new, moment, reason)


def _range(prefix: str) -> tuple[str, tuple[str, ...]]:
    """A WHERE clause and its parameters for names starting with ``prefix``."""
    end = prefix_end(prefix)
    if end is None:
        return "name >= ?", (prefix,)
    return "name >= ? AND name < ?", (prefix, end)


class LocalRefStore(RefStore):
    """Refs and reflogs in the store database."""

    def __init__(self, db: Database, committer: Committer) -> None:
        self.db = db
        self.committer = committer

    def read_ref(self, name: str) -> str | None:
        split_ref_name(name)
        try:  # (the error's words are made only on an error: a read is on every fork)
            found = self.db.connection().execute(_READ_REF, (name,)).fetchone()
        except sqlite3.Error as exc:
            raise translate_error(exc, f"reading ref {name!r}") from exc
        return None if found is None else parse_value(name, found[0])

    def read_refs(self, names: Iterable[str]) -> dict[str, str | None]:
        """Several refs with one query per ``_REFS_PER_QUERY`` names (None: absent)."""
        wanted = list(dict.fromkeys(names))
        for name in wanted:
            split_ref_name(name)
        values: dict[str, str | None] = dict.fromkeys(wanted)
        for start in range(0, len(wanted), _REFS_PER_QUERY):
            chunk = wanted[start : start + _REFS_PER_QUERY]
            sql = f"SELECT name, value FROM refs WHERE name IN ({','.join('?' * len(chunk))})"
            for found, value in self.db.rows(sql, tuple(chunk), "reading refs"):
                if isinstance(found, str) and found in values:
                    values[found] = parse_value(found, value)
        return values

    def set_if_equals(
        self, name: str, old: str | None, new: str | None, reason: str = "", log: bool = True
    ) -> bool:
        split_ref_name(name)
        check_ref_value(new)
        change = Change(swap=RefUpdate(name, old, new, reason, log), what=f"updating ref {name!r}")
        return self.committer.submit(change)

    def list_refs(self, prefix: str, start_after: str | None = None, limit: int = 0) -> list[str]:
        if not _encodable(prefix) or (start_after is not None and not _encodable(start_after)):
            return []
        where, params = _range(prefix)
        if start_after is not None and start_after >= prefix:
            where += " AND name > ?"
            params += (start_after,)
        sql = f"SELECT name FROM refs WHERE {where} ORDER BY name"
        if limit > 0:
            sql += f" LIMIT {int(limit)}"
        rows = self.db.rows(sql, params, "listing refs")
        return [str(name) for (name,) in rows]

    def reflog(self, name: str) -> list[ReflogEntry]:
        split_ref_name(name)
        rows = self.db.rows(
            "SELECT old, new, time, reason FROM reflog WHERE name = ? ORDER BY seq",
            (name,),
            f"reading the reflog of {name!r}",
        )
        return [parse_reflog_row(name, row) for row in rows]

    def reflog_names(self, prefix: str) -> list[str]:
        if not _encodable(prefix):
            return []
        where, params = _range(prefix)
        rows = self.db.rows(
            f"SELECT DISTINCT name FROM reflog WHERE {where} ORDER BY name",
            params,
            "listing reflogs",
        )
        return [str(name) for (name,) in rows]

    def rewrite_reflog(self, name: str, keep: Callable[[ReflogEntry], bool]) -> int:
        split_ref_name(name)

        def work(conn: sqlite3.Connection) -> int:
            rows = conn.execute(
                "SELECT seq, old, new, time, reason FROM reflog WHERE name = ? ORDER BY seq",
                (name,),
            ).fetchall()
            dropped = [
                (seq,) for seq, *fields in rows if not keep(parse_reflog_row(name, tuple(fields)))
            ]
            conn.executemany("DELETE FROM reflog WHERE seq = ?", dropped)
            return len(dropped)

        return self.db.write(work, f"rewriting the reflog of {name!r}")

    def close(self) -> None:
        """Nothing of its own to release (the store closes the database)."""
