"""An OpenAI Agents SDK ``Session`` on a journal thread, with O(1) forks.

```python
from agents import Agent, Runner
from cas_journal.integrations.openai_agents import CasJournalSession

session = CasJournalSession("support-42", journal)       # thread "support-42"
await Runner.run(agent, "hello", session=session)
branch = await session.fork("support-42-alt", at=-3)      # shares every item up to there
```

Mapping:

- the session is the thread whose id is ``session_id`` (created by the first
  ``add_items``); each item is one ``custom`` entry holding the item's JSON (keys sorted)
  in its metadata under ``ITEM_KEY``; the items are the path's entries that hold one,
  in order (other entries on the thread are skipped);
- ``add_items`` appends all its items in one commit (``Journal.append_many``: another
  writer's items that got there first come before them);
- ``pop_item`` moves the thread's leaf back before the last item and returns the item:
  the entry stays in the thread's history (``journal.entries``), and ``restore`` moves
  the leaf forward to it again;
- ``clear_session`` empties the leaf the same way: nothing is deleted, the history stays
  readable and restorable (``journal.delete_thread`` removes the thread);
- ``fork`` is a journal fork: a new thread whose leaf is one of the items' entries; no
  item is copied, whatever the session's length;
- ``get_items(limit)`` follows ``SQLiteSession``: ``limit`` (else
  ``session_settings.limit``) newest items in order; 0 gives none, a negative limit all;
- every method also takes the SDK's optional ``wrapper`` keyword (the run context), so
  the runner passes it; the journal does not need it.

Journal calls run in a worker thread (``asyncio.to_thread``) so the event loop is never
blocked on storage. Calls on one session object are serialized; two processes writing
one session at once are kept consistent by the journal (an append never loses another),
except that a ``pop_item`` racing an ``add_items`` in another process may move the leaf
back over the other process's items (they stay in the history).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
from typing import Any, cast

from agents.items import TResponseInputItem
from agents.memory import SessionSettings
from agents.memory.session_settings import resolve_session_limit
from agents.run_context import RunContextWrapper

from ..errors import EntryNotFound, InvalidInputError, ThreadExists, ThreadNotFound
from ..journal import Entry, EntryType, Journal, ThreadMeta

ITEM_KEY = "openai_agents.item"
"""The metadata key of an item entry: the item as canonical JSON."""


def item_entry(item: TResponseInputItem) -> Entry:
    """The entry that stores one item (JSON, keys sorted, so equal items share a payload)."""
    try:
        text = json.dumps(
            item, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
        )
    except (TypeError, ValueError) as exc:
        raise InvalidInputError(f"session item is not JSON-compatible: {exc}") from exc
    return Entry(type=EntryType.CUSTOM, metadata={ITEM_KEY: text})


def entry_item(entry: Entry) -> TResponseInputItem | None:
    """The item an entry stores, or None for an entry that is not an item."""
    text = entry.metadata.get(ITEM_KEY)
    if text is None:
        return None
    return cast(TResponseInputItem, json.loads(text))


class CasJournalSession:
    """A ``Session`` (the Agents SDK protocol) whose items are a journal thread's path."""

    session_settings: SessionSettings | None

    def __init__(
        self,
        session_id: str,
        journal: Journal,
        session_settings: SessionSettings | None = None,
    ) -> None:
        self.session_id = session_id
        self.journal = journal
        self.session_settings = session_settings or SessionSettings()
        self._lock = threading.Lock()

    # -- reading -------------------------------------------------------------------------

    def _item_entries(self) -> list[tuple[Entry, TResponseInputItem]]:
        try:
            path = self.journal.path(self.session_id)
        except ThreadNotFound:
            return []
        found = []
        for entry in path:
            item = entry_item(entry)
            if item is not None:
                found.append((entry, item))
        return found

    def _limited(self, limit: int | None) -> list[tuple[Entry, TResponseInputItem]]:
        pairs = self._item_entries()
        wanted = resolve_session_limit(limit, self.session_settings)
        if wanted is None or wanted < 0:
            return pairs
        return pairs[-wanted:] if wanted > 0 else []

    async def get_items(
        self, limit: int | None = None, wrapper: RunContextWrapper[Any] | None = None
    ) -> list[TResponseInputItem]:
        """The session's items, oldest first; with a limit only the newest ``limit``."""
        pairs = await asyncio.to_thread(self._locked, self._limited, limit)
        return [item for _, item in pairs]

    async def get_item_ids(self, limit: int | None = None) -> list[str]:
        """The entry id of each item ``get_items`` returns, in the same order."""
        pairs = await asyncio.to_thread(self._locked, self._limited, limit)
        return [entry.id for entry, _ in pairs]

    # -- writing -------------------------------------------------------------------------

    def _locked(self, call: Any, *args: Any) -> Any:
        with self._lock:
            return call(*args)

    def _ensure_thread(self) -> None:
        try:
            self.journal.thread(self.session_id)
        except ThreadNotFound:
            with contextlib.suppress(ThreadExists):  # someone else created it meanwhile
                self.journal.create_thread(ThreadMeta(id=self.session_id))

    def _add(self, entries: list[Entry]) -> None:
        self._ensure_thread()
        self.journal.append_many(self.session_id, entries)

    async def add_items(
        self, items: list[TResponseInputItem], wrapper: RunContextWrapper[Any] | None = None
    ) -> None:
        """Append items after the last one, in one commit."""
        if not items:
            return
        entries = [item_entry(item) for item in items]
        await asyncio.to_thread(self._locked, self._add, entries)

    def _pop(self) -> TResponseInputItem | None:
        pairs = self._item_entries()
        if not pairs:
            return None
        entry, item = pairs[-1]
        self.journal.move_leaf(self.session_id, entry.parent_id or None)
        return item

    async def pop_item(
        self, wrapper: RunContextWrapper[Any] | None = None
    ) -> TResponseInputItem | None:
        """Take the newest item off the session and return it (None if there is none).

        The leaf moves back to the item's parent; the item's entry stays in the thread's
        history, and ``restore(entry_id)`` brings it (and what followed it) back.
        """
        return cast(TResponseInputItem | None, await asyncio.to_thread(self._locked, self._pop))

    def _clear(self) -> None:
        with contextlib.suppress(ThreadNotFound):
            self.journal.move_leaf(self.session_id, None)

    async def clear_session(self, wrapper: RunContextWrapper[Any] | None = None) -> None:
        """Empty the session: the leaf moves to nothing; the history stays restorable."""
        await asyncio.to_thread(self._locked, self._clear)

    async def restore(self, entry_id: str) -> None:
        """Make an entry of the thread's history (e.g. a popped item's) the newest item.

        EntryNotFound unless the entry belongs to the thread.
        """
        await asyncio.to_thread(self._locked, self.journal.move_leaf, self.session_id, entry_id)

    # -- forking -------------------------------------------------------------------------

    def _fork(self, new_session_id: str | None, at: int | str | None) -> str:
        if isinstance(at, str):
            entry_id: str | None = at
        elif at is None:
            entry_id = None
        else:
            pairs = self._item_entries()
            try:
                entry_id = pairs[at][0].id
            except IndexError:
                raise EntryNotFound(
                    f"session {self.session_id!r} has {len(pairs)} items; no item {at}"
                ) from None
        try:
            meta = self.journal.fork(self.session_id, entry_id, new_thread_id=new_session_id)
        except ThreadNotFound:
            if at is not None:
                raise
            meta = self.journal.create_thread(ThreadMeta(id=new_session_id or ""))
        return meta.id

    async def fork(
        self, new_session_id: str | None = None, *, at: int | str | None = None
    ) -> CasJournalSession:
        """A new session holding this one's items up to ``at``, in O(1): no item is copied.

        ``at`` is an index into ``get_items()`` (``-1`` the newest item, ``0`` the first),
        an entry id from ``get_item_ids()``, or None for every current item. The new
        session's id is ``new_session_id`` (generated if None); the fork records where it
        came from (``journal.thread(id).forked_from_thread_id`` and ``_entry_id``).
        """
        new_id = await asyncio.to_thread(self._locked, self._fork, new_session_id, at)
        return CasJournalSession(new_id, self.journal, self.session_settings)
