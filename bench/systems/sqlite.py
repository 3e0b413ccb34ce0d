"""SQLite peer: threads and entries as rows (WAL); a fork copies the prefix rows.

``sqlite`` is durable (``synchronous=FULL``); ``sqlite-nd`` uses ``synchronous=OFF``.
One transaction per append (entry row plus the thread's leaf), one per batch. Stored
bytes are measured after folding the WAL into the database; the maintenance step is
VACUUM. Checkpoints: one row per saved iteration holding the full message list as JSON.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from typing import Any

from ..workloads import CheckpointStep, Msg
from .base import BATCH, CHECKPOINTS, JOURNAL, IdMaker, System, entry_type

SCHEMA = """
CREATE TABLE IF NOT EXISTS threads (
    id TEXT PRIMARY KEY, created_at REAL NOT NULL, updated_at REAL NOT NULL,
    title TEXT NOT NULL DEFAULT '', leaf_id TEXT, length INTEGER NOT NULL DEFAULT 0,
    forked_from_thread_id TEXT, forked_from_entry_id TEXT
);
CREATE INDEX IF NOT EXISTS threads_newest ON threads (created_at DESC, id);
CREATE TABLE IF NOT EXISTS entries (
    thread_id TEXT NOT NULL, seq INTEGER NOT NULL, id TEXT NOT NULL, parent_id TEXT,
    type TEXT NOT NULL, turn_id TEXT, created_at REAL NOT NULL, role TEXT NOT NULL,
    content TEXT NOT NULL, tool_name TEXT, tool_call_id TEXT, tool_args TEXT
);
CREATE UNIQUE INDEX IF NOT EXISTS entries_path ON entries (thread_id, seq);
CREATE TABLE IF NOT EXISTS checkpoints (
    run_id TEXT NOT NULL, iteration INTEGER NOT NULL, created_at REAL NOT NULL,
    input_tokens INTEGER, output_tokens INTEGER, system_prompt TEXT, messages TEXT,
    PRIMARY KEY (run_id, iteration)
);
"""
COLUMNS = (
    "id, parent_id, type, turn_id, created_at, role, content, tool_name, tool_call_id, tool_args"
)


class SqliteSystem(System):
    """Rows in one SQLite file."""

    name = "sqlite"
    label = "SQLite rows, WAL, synchronous=FULL"
    durable = True
    features = frozenset({JOURNAL, BATCH, CHECKPOINTS})
    compaction = "VACUUM"
    synchronous = "FULL"

    def open(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        self.db_path = self.root / "journal.sqlite"
        self.db = sqlite3.connect(self.db_path, isolation_level=None)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute(f"PRAGMA synchronous={self.synchronous}")
        self.db.executescript(SCHEMA)
        self.ids = IdMaker(f"{self.name}:{self.root}")

    def close(self) -> None:
        self.db.close()

    def create_thread(self, thread_id: str, created_at: float, title: str = "") -> None:
        self.db.execute(
            "INSERT INTO threads (id, created_at, updated_at, title) VALUES (?, ?, ?, ?)",
            (thread_id, created_at, created_at, title),
        )

    def append_batch(self, thread_id: str, msgs: Sequence[Msg]) -> list[str]:
        ids = []
        self.db.execute("BEGIN IMMEDIATE")
        try:
            leaf, length = self.db.execute(
                "SELECT leaf_id, length FROM threads WHERE id = ?", (thread_id,)
            ).fetchone()
            rows = []
            for msg in msgs:
                entry_id = self.ids()
                rows.append(
                    (
                        thread_id,
                        length,
                        entry_id,
                        leaf,
                        entry_type(msg),
                        msg.turn_id,
                        msg.created_at,
                        msg.role,
                        msg.content,
                        msg.tool_name or None,
                        msg.tool_call_id or None,
                        msg.tool_args or None,
                    )
                )
                leaf, length = entry_id, length + 1
                ids.append(entry_id)
            self.db.executemany(
                f"INSERT INTO entries (thread_id, seq, {COLUMNS}) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                rows,
            )
            self.db.execute(
                "UPDATE threads SET leaf_id = ?, length = ?, updated_at = ? WHERE id = ?",
                (leaf, length, msgs[-1].created_at, thread_id),
            )
            self.db.execute("COMMIT")
        except BaseException:
            self.db.execute("ROLLBACK")
            raise
        return ids

    def append(self, thread_id: str, msg: Msg) -> str:
        return self.append_batch(thread_id, [msg])[0]

    def fork(
        self, source: str, prefix_ids: list[str], thread_id: str, created_at: float
    ) -> list[str]:
        length = len(prefix_ids)
        self.db.execute("BEGIN IMMEDIATE")
        self.db.execute(
            f"INSERT INTO entries (thread_id, seq, {COLUMNS}) SELECT ?, seq, {COLUMNS} "
            "FROM entries WHERE thread_id = ? AND seq < ?",
            (thread_id, source, length),
        )
        self.db.execute(
            "INSERT INTO threads (id, created_at, updated_at, leaf_id, length, "
            "forked_from_thread_id, forked_from_entry_id) VALUES (?, ?, ?, ?, ?, ?, ?)",
            (thread_id, created_at, created_at, prefix_ids[-1], length, source, prefix_ids[-1]),
        )
        self.db.execute("COMMIT")
        return list(prefix_ids)

    def read_path(self, thread_id: str) -> int:
        rows = self.db.execute(
            f"SELECT {COLUMNS} FROM entries WHERE thread_id = ? ORDER BY seq", (thread_id,)
        ).fetchall()
        return sum(len(row[6]) for row in rows)

    def fetch_path(self, thread_id: str) -> int | None:
        return len(
            self.db.execute(
                f"SELECT {COLUMNS} FROM entries WHERE thread_id = ? ORDER BY seq", (thread_id,)
            ).fetchall()
        )

    def list_page(self, limit: int = 50) -> list[str]:
        rows = self.db.execute(
            "SELECT id, title, created_at FROM threads ORDER BY created_at DESC, id LIMIT ?",
            (limit,),
        ).fetchall()
        return [row[0] for row in rows]

    def open_thread(self, thread_id: str) -> int:
        self.db.execute("SELECT * FROM threads WHERE id = ?", (thread_id,)).fetchone()
        return self.read_path(thread_id)

    def save_checkpoint(
        self, run_id: str, step: CheckpointStep, messages: list[dict[str, Any]], system_prompt: str
    ) -> None:
        self.db.execute(
            "INSERT INTO checkpoints VALUES (?, ?, ?, ?, ?, ?, ?)",
            (
                run_id,
                step.iteration,
                step.created_at,
                step.input_tokens,
                step.output_tokens,
                system_prompt,
                json.dumps(messages),
            ),
        )

    def load_checkpoint(self, run_id: str) -> int:
        row = self.db.execute(
            "SELECT messages FROM checkpoints WHERE run_id = ? ORDER BY iteration DESC LIMIT 1",
            (run_id,),
        ).fetchone()
        return len(json.loads(row[0]))

    def settle(self) -> None:
        self.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")

    def compact(self) -> None:
        self.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        self.db.execute("VACUUM")
        self.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")


class SqliteNoSyncSystem(SqliteSystem):
    """The same schema with synchronous=OFF (no fsync)."""

    name = "sqlite-nd"
    label = "SQLite rows, WAL, synchronous=OFF"
    durable = False
    synchronous = "OFF"
