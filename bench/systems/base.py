"""The adapter interface every benchmarked system implements.

One adapter per system, all driven by the same workload code (bench/drivers.py). A system
that lacks an operation says so in ``features`` and the driver skips it (reported as
"n/a", never faked). Adapters store what their real-world counterpart stores, in its
format, with its durability setting (``durable``).
"""

from __future__ import annotations

import abc
import uuid
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, ClassVar

from ..measure import dir_size
from ..workloads import CheckpointStep, Msg, SmallThread

JOURNAL = "journal"
"""Feature: threads, append, fork, path, list."""
BATCH = "batch"
"""Feature: a batched append (one commit / one sync for many entries)."""
CHECKPOINTS = "checkpoints"
"""Feature: saving a run's cumulative message list every iteration."""


def iso(ts: float) -> str:
    """A workload timestamp as RFC 3339 UTC text."""
    return datetime.fromtimestamp(ts, UTC).isoformat().replace("+00:00", "Z")


def utc(ts: float) -> datetime:
    """A workload timestamp as an aware UTC datetime."""
    return datetime.fromtimestamp(ts, UTC)


class IdMaker:
    """Random UUIDs, what the JSONL/SQLite/seed peers use as entry ids (36 characters)."""

    def __init__(self, seed: str = "") -> None:
        self.seed = seed

    def __call__(self) -> str:
        return str(uuid.uuid4())


def entry_type(msg: Msg) -> str:
    """The seed's entry type for a message role."""
    if msg.role == "user":
        return "user_message"
    if msg.role == "tool":
        return "tool_result"
    if msg.role == "assistant":
        return "tool_call" if msg.tool_name else "assistant_message"
    return "custom"


def message_dict(msg: Msg) -> dict[str, Any]:
    """The seed's Message JSON for a ``Msg`` (empty optional fields omitted)."""
    out: dict[str, Any] = {"role": msg.role, "content": msg.content}
    if msg.tool_call_id:
        out["tool_call_id"] = msg.tool_call_id
    if msg.tool_name:
        out["tool_name"] = msg.tool_name
    if msg.tool_args:
        out["tool_args"] = msg.tool_args
    return out


class System(abc.ABC):
    """A storage system under test, opened on a directory it owns."""

    name: ClassVar[str]
    """Short id used on the command line and in tables (e.g. ``cas``, ``jsonl``)."""
    label: ClassVar[str]
    """Human description for the tables."""
    durable: ClassVar[bool] = False
    """True if an acknowledged write survives power loss (fsync before returning)."""
    features: ClassVar[frozenset[str]] = frozenset({JOURNAL})
    compaction: ClassVar[str] = "none"
    """What ``compact`` does, for the tables."""

    def __init__(self, root: Path) -> None:
        self.root = root

    # -- lifecycle ------------------------------------------------------------------------

    @abc.abstractmethod
    def open(self) -> None:
        """Open (creating if needed) the store under ``root``; a fresh open reads no cache."""

    def close(self) -> None:  # noqa: B027 - most adapters hold nothing
        """Release files and connections."""

    # -- journal --------------------------------------------------------------------------

    def create_thread(self, thread_id: str, created_at: float, title: str = "") -> None:
        """Create an empty thread."""
        raise NotImplementedError

    def append(self, thread_id: str, msg: Msg) -> str:
        """Append one entry at the thread's leaf; return the new entry id."""
        raise NotImplementedError

    def append_batch(self, thread_id: str, msgs: Sequence[Msg]) -> list[str]:
        """Append several entries in one commit where the system can (default: one by one)."""
        return [self.append(thread_id, msg) for msg in msgs]

    def fork(
        self, source: str, prefix_ids: list[str], thread_id: str, created_at: float
    ) -> list[str]:
        """Fork ``source`` at ``prefix_ids[-1]`` into a new thread; return its path's ids."""
        raise NotImplementedError

    def read_path(self, thread_id: str) -> int:
        """Read root..leaf of a thread, decoding every payload; return the content chars."""
        raise NotImplementedError

    def fetch_path(self, thread_id: str) -> int | None:
        """The read alone: root..leaf of a thread as the system's own records, none of
        their fields looked at; how many entries (None: this system does not separate
        the read from the use). ``read_path`` is this read plus the caller's loop."""
        return None

    def list_page(self, limit: int = 50) -> list[str]:
        """Ids of the first page of threads, newest first."""
        raise NotImplementedError

    def open_thread(self, thread_id: str) -> int:
        """What a UI does to show a thread: its metadata and its path (content chars)."""
        return self.read_path(thread_id)

    def bulk_threads(self, threads: Iterable[SmallThread]) -> int:
        """Create many small threads (workload 4 setup); return how many."""
        count = 0
        for t in threads:
            self.create_thread(t.thread_id, t.created_at, t.title)
            self.append_batch(t.thread_id, t.messages)
            count += 1
        return count

    # -- checkpoints ----------------------------------------------------------------------

    def save_checkpoint(
        self, run_id: str, step: CheckpointStep, messages: list[dict[str, Any]], system_prompt: str
    ) -> None:
        """Save iteration ``step`` of a run whose full message list is ``messages``."""
        raise NotImplementedError

    def load_checkpoint(self, run_id: str) -> int:
        """Load the newest checkpoint of a run; return its message count."""
        raise NotImplementedError

    # -- storage --------------------------------------------------------------------------

    def settle(self) -> None:  # noqa: B027 - optional hook
        """Bring on-disk state to rest without compacting (e.g. fold a SQLite WAL)."""

    def stored(self) -> dict[str, int]:
        """Bytes on disk: apparent size, allocated blocks, file count."""
        return dir_size(self.root)

    def compact(self) -> None:  # noqa: B027 - systems without maintenance keep this
        """The system's own maintenance step (pack+gc, VACUUM, git gc ...)."""
