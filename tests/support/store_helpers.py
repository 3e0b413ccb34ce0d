"""Reaching into a local store's database from tests: damage a row, age it, plant garbage.

Tests use a separate sqlite3 connection, as another process (or an attacker) would.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from cas_journal.backends.local.database import DATABASE_FILE


def root_of(store_or_root: object) -> Path:
    """The directory of a LocalStore (or a path given as is)."""
    if isinstance(store_or_root, (str, os.PathLike)):
        return Path(store_or_root)
    return Path(store_or_root.root)  # type: ignore[attr-defined]


@contextmanager
def database(store_or_root: object) -> Iterator[sqlite3.Connection]:
    """A raw connection to a store's database, committed and closed afterwards."""
    conn = sqlite3.connect(root_of(store_or_root) / DATABASE_FILE, isolation_level=None, timeout=30)
    try:
        conn.execute("BEGIN IMMEDIATE")
        yield conn
        conn.execute("COMMIT")
    finally:
        conn.close()


def frame_of(store_or_root: object, oid: str) -> bytes | None:
    """The stored frame of an object's row, or None."""
    with database(store_or_root) as conn:
        row = conn.execute(
            "SELECT frame FROM objects WHERE oid = ?", (bytes.fromhex(oid),)
        ).fetchone()
    return None if row is None else row[0]


def set_frame(store_or_root: object, oid: str, frame: object) -> None:
    """Replace (or create) the row of an object with any value as its frame."""
    with database(store_or_root) as conn:
        conn.execute(
            "INSERT INTO objects (oid, written, frame) VALUES (?, 1, ?) "
            "ON CONFLICT (oid) DO UPDATE SET frame = excluded.frame",
            (bytes.fromhex(oid), frame),
        )


def corrupt_row(store_or_root: object, oid: str) -> None:
    """Flip one byte near the end of an object's stored frame."""
    frame = frame_of(store_or_root, oid)
    assert frame is not None, f"{oid} has no row"
    data = bytearray(frame)
    data[-3] ^= 0xFF
    set_frame(store_or_root, oid, bytes(data))


def delete_row(store_or_root: object, oid: str) -> None:
    """Remove an object's row (as if the object had been lost)."""
    with database(store_or_root) as conn:
        conn.execute("DELETE FROM objects WHERE oid = ?", (bytes.fromhex(oid),))


def set_row_time(store_or_root: object, oid: str, seconds: float) -> None:
    """Pretend an object's row was last written at ``seconds`` (unix time)."""
    with database(store_or_root) as conn:
        conn.execute(
            "UPDATE objects SET written = ? WHERE oid = ?",
            (int(seconds * 10**6), bytes.fromhex(oid)),
        )


def set_all_row_times(
    store_or_root: object, seconds: float, except_oids: tuple[str, ...] = ()
) -> None:
    """Pretend every row (but the given ones) was last written at ``seconds``."""
    keep = [bytes.fromhex(oid) for oid in except_oids]
    with database(store_or_root) as conn:
        marks = ",".join("?" * len(keep))
        where = f" WHERE oid NOT IN ({marks})" if keep else ""
        conn.execute(f"UPDATE objects SET written = ?{where}", (int(seconds * 10**6), *keep))


def row_oids(store_or_root: object) -> list[str]:
    """The oids that have a row."""
    with database(store_or_root) as conn:
        return sorted(raw.hex() for (raw,) in conn.execute("SELECT oid FROM objects"))


def set_ref_raw(store_or_root: object, name: str, value: object) -> None:
    """Store any value (text, bytes, a number) as a ref's value."""
    with database(store_or_root) as conn:
        conn.execute(
            "INSERT INTO refs (name, value) VALUES (?, ?) "
            "ON CONFLICT (name) DO UPDATE SET value = excluded.value",
            (name, value),
        )


def add_reflog_row(
    store_or_root: object, name: str, old: object, new: object, time: object, reason: object
) -> None:
    """Append any row to a ref's reflog."""
    with database(store_or_root) as conn:
        conn.execute(
            "INSERT INTO reflog (name, old, new, time, reason) VALUES (?, ?, ?, ?, ?)",
            (name, old, new, time, reason),
        )


def move_rows_into_batch_pack(store: object, oids: list[str]) -> None:
    """Move rows into a batch pack, then merge batch packs (what a sync or an import of
    many objects writes; a batch commit itself writes rows)."""
    from cas_journal.backends.local.packs import PackedObject, write_pack

    objects = store.objects  # type: ignore[attr-defined]
    write_pack(
        objects.packs_dir,
        (PackedObject(oid, objects.canonical(oid)[0]) for oid in oids),
        durable=False,
    )
    objects.remove_rows(oids)
    objects.refresh_packs()
    objects.merge_batch_packs()
