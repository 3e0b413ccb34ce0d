"""Group commit: many appends, one ref update, one sync.

Inside ``with journal.batch("t") as b``, each ``b.append`` builds its entry immediately
(ids are final: they are content hashes) but writes nothing. Leaving the block stores
every object in one ``put_many`` (a single pack file on the local store, synced once
when durable) and swaps the thread ref once. If the thread's leaf moved in the meantime
the batch raises ConflictError and commits nothing; a metadata-only change (a title,
say) is merged. An exception inside the block discards the batch.
"""

from __future__ import annotations

from datetime import datetime
from types import TracebackType
from typing import TYPE_CHECKING

from ..backends import NewObject
from ..errors import ConflictError, InvalidInputError, InvalidParent
from ..objects import EntryNode, Kind, ensure_utc, format_time, object_id, utc_now
from .commit import Update, commit
from .models import Entry
from .payload import payload_bytes
from .state import ThreadHead

if TYPE_CHECKING:
    from .journal import Journal


class Batch:
    """Appends collected for one commit to one thread."""

    def __init__(self, journal: Journal, thread_id: str) -> None:
        self.journal = journal
        self.thread_id = thread_id
        self.entries: list[Entry] = []
        self._base: ThreadHead | None = None
        self._objects: list[NewObject] = []
        self._pending: dict[str, EntryNode] = {}
        self._tip: str | None = None
        self._last_time: datetime | None = None
        self._closed = False

    def __enter__(self) -> Batch:
        self._base = self.journal.states.read(self.thread_id)
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
        base = self._base
        if (
            explicit is not None
            and explicit not in self._pending
            and not self.journal.graph.contains(base.state.heads, explicit, base.leaf)
        ):
            raise InvalidParent(f"entry {explicit!r} is not part of thread {self.thread_id!r}")
        parent = explicit if explicit is not None else self._tip
        created = ensure_utc(now or entry.created_at or utc_now())
        payload = payload_bytes(entry)
        payload_oid = object_id(Kind.BLOB, payload)
        node = self.journal.new_entry_node(
            payload_oid, parent, created, entry.turn_id, self._pending
        )
        body = node.body()
        oid = object_id(Kind.ENTRY, body)
        self._pending[oid] = node
        self._objects += [
            NewObject(payload_oid, Kind.BLOB, payload),
            NewObject(oid, Kind.ENTRY, body),
        ]
        stored = entry.model_copy(
            update={
                "id": oid,
                "thread_id": self.thread_id,
                "parent_id": parent or "",
                "created_at": created,
                "raw": payload.decode("utf-8"),
                "raw_hash": payload_oid,
            }
        )
        self.entries.append(stored)
        self._tip = oid
        self._last_time = created
        return stored

    def _heads(self, head: ThreadHead) -> tuple[str, ...]:
        heads = set(head.state.heads)
        for oid, node in self._pending.items():  # parents come before their children
            heads.discard(node.parent or "")
            heads.add(oid)
        return tuple(heads)

    def commit(self) -> list[Entry]:
        """Write everything and move the leaf to the last appended entry."""
        assert self._base is not None
        self._closed = True
        if not self.entries:
            return []
        base = self._base

        def build(head: ThreadHead) -> Update:
            if head.state_oid != base.state_oid and head.leaf != base.leaf:
                raise ConflictError(
                    f"thread {self.thread_id!r} moved during the batch; nothing was committed"
                )
            assert self._last_time is not None
            meta = dict(head.state.meta, updated_at=format_time(self._last_time))
            state = self.journal.states.successor(head, meta, self._tip, self._heads(head))
            return Update(state, self._objects)

        commit(self.journal.states, self.thread_id, build, f"append {len(self.entries)}", base)
        for oid, node in self._pending.items():
            self.journal.graph.remember(oid, node)
        self.journal.reader.remember(self.thread_id, self.entries)
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
