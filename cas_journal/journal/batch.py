"""Group commit: many appends, one ref update, one sync.

Inside ``with journal.batch("t") as b``, each ``b.append`` builds its entry immediately
(ids are final: they are content hashes) but writes nothing. Leaving the block stores
every object and swaps the thread ref in one ``Store.commit`` (one transaction, synced
once when durable). If the thread's leaf moved in the meantime the batch raises
ConflictError and commits nothing; a metadata-only change (a title, say) is merged. An
exception inside the block discards the batch.
"""

from __future__ import annotations

from datetime import datetime
from types import TracebackType

from ..errors import InvalidInputError, InvalidParent
from ..objects import EntryNode
from .building import BuiltEntry, build_entry
from .models import Entry
from .state import ThreadHead
from .writer import ThreadWriter


class Batch:
    """Appends collected for one commit to one thread."""

    def __init__(self, writer: ThreadWriter, thread_id: str) -> None:
        self._writer = writer
        self.thread_id = thread_id
        self.entries: list[Entry] = []
        """The entries appended so far, as they will be stored."""
        self._base: ThreadHead | None = None
        self._built: list[BuiltEntry] = []
        self._pending: dict[str, EntryNode] = {}
        self._builder = writer.builder
        self._lookup = writer.builder.lookup(self._pending)
        """Nodes of this batch's entries, else of the store's (parents and skip targets)."""
        self._tip: str | None = None
        self._line: dict[int, str] = {}
        """Ancestors of the tip (itself included) by depth, as far as this batch knows them
        (its entries and the skip targets it found): their skip pointers are not looked
        for twice."""
        self._last_time: datetime | None = None
        self._closed = False

    def __enter__(self) -> Batch:
        self._base = self._writer.states.read(self.thread_id)
        self._tip = self._base.leaf
        return self

    def append(
        self, entry: Entry, parent_id: str | None = None, now: datetime | None = None
    ) -> Entry:
        """Add an entry after the previous one (or under an explicit parent of the thread)."""
        if self._base is None or self._closed:
            raise InvalidInputError("use the batch inside a 'with' block")
        if entry.thread_id and entry.thread_id != self.thread_id:
            raise InvalidInputError(
                f"entry is for thread {entry.thread_id!r}, the batch for {self.thread_id!r}"
            )
        explicit = parent_id or entry.parent_id or None
        if (
            explicit is not None
            and explicit not in self._pending
            and not self._writer.contains(self._base, explicit)
        ):
            raise InvalidParent(f"entry {explicit!r} is not part of thread {self.thread_id!r}")
        builder = self._builder
        prepared = builder.prepare(entry, now)
        parent = explicit if explicit is not None else self._tip
        if parent != self._tip:
            self._line = {}  # a branch: the tip's ancestors are not all the parent's
        built = build_entry(
            prepared.payload,
            prepared.payload_oid,
            parent,
            prepared.created_at,
            entry.turn_id,
            self._lookup,
            self._line,
        )
        stored = builder.stored(prepared, built, self.thread_id)
        self._line[built.node.depth] = built.oid
        self._pending[built.oid] = built.node
        self._built.append(built)
        self.entries.append(stored)
        self._tip = built.oid
        self._last_time = prepared.created
        return stored

    def commit(self) -> list[Entry]:
        """Write everything and move the leaf to the last appended entry."""
        assert self._base is not None
        self._closed = True
        if not self.entries:
            return []
        assert self._last_time is not None
        self._writer.commit_batch(
            self._base, self._tip, self._pending, self._built, self.entries, self._last_time
        )
        return self.entries

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc_type is None:
            self.commit()
        else:
            self._closed = True
