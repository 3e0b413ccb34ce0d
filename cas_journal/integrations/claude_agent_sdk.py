"""A Claude Agent SDK ``SessionStore`` on journal threads, in which forks share entries.

```python
from claude_agent_sdk import ClaudeAgentOptions
from cas_journal.integrations.claude_agent_sdk import CasJournalSessionStore

store = CasJournalSessionStore(journal)
options = ClaudeAgentOptions(session_store=store, ...)
fork_id = await store.fork({"project_key": key, "session_id": sid}, up_to_uuid=uuid)
```

Mapping:

- a transcript is a thread ``claude-agent-sdk/<project key>/<session id>``, a subagent
  transcript ``.../<session id>/<subpath>`` (project key and session id
  percent-encoded, so no two keys share a thread); each transcript line is one
  ``custom`` entry holding the line's JSON (keys sorted) in its metadata under
  ``ENTRY_KEY``; ``load`` gives the lines of the thread's path, in order;
- ``append`` commits a batch in one journal commit. A line whose ``uuid`` the transcript
  already holds is skipped (the SDK treats ``uuid`` as an idempotency key, so a retried
  batch is not stored twice); lines without a uuid are always appended;
- ``list_sessions`` gives each main transcript's id and the thread's ``updated_at`` in
  epoch milliseconds; it reads the journal's thread listing (every thread of the store);
- the summary sidecar (``fold_session_summary``) of a main transcript lives in a thread
  ``claude-agent-sdk-summary/<project key>/<session id>``, updated by a compare-and-swap
  after each append (``list_session_summaries`` reads them); its ``mtime`` is that
  thread's ``updated_at``, never older than the transcript's. A crash between the two
  leaves a sidecar older than the transcript, which the SDK detects and rebuilds;
- ``delete`` of a main transcript removes it, its subagent transcripts and its sidecar
  (each thread restorable from the reflog until gc expires it);
- ``fork`` makes a new session that shares its source's lines up to a uuid (a journal
  fork: nothing is copied). Shared lines keep their uuids; ``load`` of the fork shows
  their ``sessionId`` as the fork's id, as ``fork_session`` would write them. The SDK's
  own ``fork_session_via_store`` still works on this store, but rewrites and appends
  every line (new uuids), so its forks share nothing.

Journal calls run in a worker thread (``asyncio.to_thread``); calls on one store object
are serialized.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import uuid
from collections import OrderedDict
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, TypeVar, cast
from urllib.parse import quote, unquote

from claude_agent_sdk import fold_session_summary
from claude_agent_sdk.types import (
    SessionKey,
    SessionListSubkeysKey,
    SessionStore,
    SessionStoreEntry,
    SessionStoreListEntry,
    SessionSummaryEntry,
)

from ..errors import EntryNotFound, InvalidInputError, ThreadExists, ThreadNotFound
from ..journal import Entry, EntryType, Journal, ThreadMeta

ENTRY_KEY = "claude_agent_sdk.entry"
"""The metadata key of a transcript line's entry: the line as canonical JSON."""
SUMMARY_KEY = "claude_agent_sdk.summary"
"""The metadata key of a sidecar entry: the summary's ``data`` as canonical JSON."""
TRANSCRIPTS = "claude-agent-sdk"
SUMMARIES = "claude-agent-sdk-summary"
_CACHED_TRANSCRIPTS = 64
"""Transcripts whose uuids a store keeps in memory for the idempotency check."""
_T = TypeVar("_T")


def _encode(value: object, what: str) -> str:
    try:
        return json.dumps(
            value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
        )
    except (TypeError, ValueError) as exc:
        raise InvalidInputError(f"{what} is not JSON-compatible: {exc}") from exc


def line_entry(line: SessionStoreEntry) -> Entry:
    """The entry that stores one transcript line."""
    return Entry(type=EntryType.CUSTOM, metadata={ENTRY_KEY: _encode(line, "transcript line")})


def entry_line(entry: Entry) -> SessionStoreEntry | None:
    """The transcript line an entry stores, or None for an entry that is not one."""
    text = entry.metadata.get(ENTRY_KEY)
    return None if text is None else cast(SessionStoreEntry, json.loads(text))


def _millis(moment: datetime | None) -> int:
    return int(moment.timestamp() * 1000) if moment is not None else 0


def _session_prefix(kind: str, project_key: str) -> str:
    return f"{kind}/{quote(project_key, safe='')}/"


def thread_id_for(key: SessionKey) -> str:
    """The thread that holds a transcript (a subpath adds one more path part)."""
    subpath = key.get("subpath")
    if subpath == "":
        raise InvalidInputError("subpath must be omitted for the main transcript, not empty")
    main = _session_prefix(TRANSCRIPTS, key["project_key"]) + quote(key["session_id"], safe="")
    return f"{main}/{subpath}" if subpath else main


def summary_thread_id(key: SessionKey | SessionListSubkeysKey) -> str:
    """The thread that holds a main transcript's summary sidecar."""
    return _session_prefix(SUMMARIES, key["project_key"]) + quote(key["session_id"], safe="")


class CasJournalSessionStore(SessionStore):
    """A ``SessionStore`` whose transcripts are journal threads (see the module doc)."""

    def __init__(self, journal: Journal) -> None:
        self.journal = journal
        self._lock = threading.Lock()
        self._uuids: OrderedDict[str, tuple[str, set[str]]] = OrderedDict()
        """Per transcript thread: the leaf last seen and the uuids on its path."""

    async def _run(self, call: Callable[..., _T], *args: Any) -> _T:
        def locked() -> _T:
            with self._lock:
                return call(*args)

        return await asyncio.to_thread(locked)

    # -- writing -------------------------------------------------------------------------

    def _path_lines(self, thread_id: str) -> list[tuple[Entry, SessionStoreEntry]]:
        found = []
        for entry in self.journal.path(thread_id):
            line = entry_line(entry)
            if line is not None:
                found.append((entry, line))
        return found

    def _commit_lines(
        self, thread_id: str, lines: list[SessionStoreEntry]
    ) -> list[SessionStoreEntry]:
        """Append the lines whose uuid the transcript lacks; return those appended."""
        encoded = [(line, line_entry(line)) for line in lines]  # refuse bad input first
        with contextlib.suppress(ThreadExists):  # it may exist already: fine
            self.journal.create_thread(ThreadMeta(id=thread_id))
        fresh: list[SessionStoreEntry] = []
        known: set[str] = set()

        def missing() -> list[Entry]:
            """The lines whose uuid the transcript lacks (decided at each attempt)."""
            known.clear()
            known.update(self._known_uuids(thread_id))
            fresh.clear()
            chosen = []
            for line, entry in encoded:
                line_uuid = line.get("uuid")
                if isinstance(line_uuid, str):
                    if line_uuid in known:
                        continue
                    known.add(line_uuid)
                chosen.append(entry)
                fresh.append(line)
            return chosen

        appended = self.journal.append_many(thread_id, missing)
        if appended:
            self._remember(thread_id, appended[-1].id, known)
        return fresh

    def _known_uuids(self, thread_id: str) -> set[str]:
        """The uuids of the lines on the transcript's path (cached while the leaf stays)."""
        leaf = self.journal.thread(thread_id).leaf_id
        cached = self._uuids.get(thread_id)
        if cached is not None and cached[0] == leaf:
            return set(cached[1])
        known = set()
        for _, line in self._path_lines(thread_id):
            line_uuid = line.get("uuid")
            if isinstance(line_uuid, str):
                known.add(line_uuid)
        self._remember(thread_id, leaf, known)
        return set(known)

    def _remember(self, thread_id: str, leaf: str, known: set[str]) -> None:
        self._uuids[thread_id] = (leaf, known)
        self._uuids.move_to_end(thread_id)
        while len(self._uuids) > _CACHED_TRANSCRIPTS:
            self._uuids.popitem(last=False)

    def _read_summary(self, thread_id: str) -> dict[str, Any] | None:
        leaf = self.journal.thread(thread_id).leaf_id
        if not leaf:
            return None
        text = self.journal.entry(thread_id, leaf).metadata.get(SUMMARY_KEY)
        return None if text is None else cast(dict[str, Any], json.loads(text))

    def _fold_summary(self, key: SessionKey, lines: list[SessionStoreEntry]) -> None:
        """Fold lines into the sidecar in one commit (``Journal.append_many``: folded again
        into the sidecar as it is then if another writer moved it meanwhile)."""
        thread_id = summary_thread_id(key)
        with contextlib.suppress(ThreadExists):
            self.journal.create_thread(ThreadMeta(id=thread_id))
        written = self.journal.thread(thread_id_for(key)).updated_at

        def folded() -> list[Entry]:
            """The sidecar entry folding ``lines`` into the summary as it is now."""
            data = self._read_summary(thread_id)
            prev = None
            if data is not None:
                prev = SessionSummaryEntry(session_id=key["session_id"], mtime=0, data=data)
            summary = fold_session_summary(prev, key, lines)
            entry = Entry(
                type=EntryType.CUSTOM,
                metadata={SUMMARY_KEY: _encode(summary["data"], "session summary")},
            )
            return [entry]

        now = datetime.now(UTC)
        self.journal.append_many(thread_id, folded, now=max(now, written) if written else now)

    def _append(self, key: SessionKey, lines: list[SessionStoreEntry]) -> None:
        fresh = self._commit_lines(thread_id_for(key), lines)
        if fresh and key.get("subpath") is None:
            self._fold_summary(key, fresh)

    async def append(self, key: SessionKey, entries: list[SessionStoreEntry]) -> None:
        """Mirror a batch of transcript lines (one commit; known uuids are skipped)."""
        if entries:
            await self._run(self._append, key, list(entries))

    # -- reading -------------------------------------------------------------------------

    def _load(self, key: SessionKey) -> list[SessionStoreEntry] | None:
        thread_id = thread_id_for(key)
        try:
            meta = self.journal.thread(thread_id)
        except ThreadNotFound:
            return None
        pairs = self._path_lines(thread_id)
        if meta.forked_from_entry_id and key.get("subpath") is None:
            # lines up to the fork point came from the source: show them as this session's
            inherited = next(
                (i for i, (e, _) in enumerate(pairs) if e.id == meta.forked_from_entry_id), -1
            )
            for i in range(inherited + 1):
                if "sessionId" in pairs[i][1]:
                    line = cast(dict[str, Any], dict(pairs[i][1]))
                    line["sessionId"] = key["session_id"]
                    pairs[i] = (pairs[i][0], cast(SessionStoreEntry, line))
        return [line for _, line in pairs]

    async def load(self, key: SessionKey) -> list[SessionStoreEntry] | None:
        """A transcript's lines in order; None if it was never written (or was deleted)."""
        return await self._run(self._load, key)

    def _threads(self, prefix: str) -> list[ThreadMeta]:
        return [
            meta
            for meta in self.journal.list_threads(include_archived=True)
            if meta.id.startswith(prefix)
        ]

    def _list_sessions(self, project_key: str) -> list[SessionStoreListEntry]:
        prefix = _session_prefix(TRANSCRIPTS, project_key)
        return [
            {"session_id": unquote(meta.id[len(prefix) :]), "mtime": _millis(meta.updated_at)}
            for meta in self._threads(prefix)
            if "/" not in meta.id[len(prefix) :]
        ]

    async def list_sessions(self, project_key: str) -> list[SessionStoreListEntry]:
        """The main transcripts of a project with their last write time (epoch ms)."""
        return await self._run(self._list_sessions, project_key)

    def _list_summaries(self, project_key: str) -> list[SessionSummaryEntry]:
        prefix = _session_prefix(SUMMARIES, project_key)
        found: list[SessionSummaryEntry] = []
        for meta in self._threads(prefix):
            data = self._read_summary(meta.id)
            if data is not None:
                session_id = unquote(meta.id[len(prefix) :])
                found.append(
                    {"session_id": session_id, "mtime": _millis(meta.updated_at), "data": data}
                )
        return found

    async def list_session_summaries(self, project_key: str) -> list[SessionSummaryEntry]:
        """The summary sidecars of a project's main transcripts."""
        return await self._run(self._list_summaries, project_key)

    def _list_subkeys(self, key: SessionListSubkeysKey) -> list[str]:
        prefix = thread_id_for({"project_key": key["project_key"], "session_id": key["session_id"]})
        return [meta.id[len(prefix) + 1 :] for meta in self._threads(prefix + "/")]

    async def list_subkeys(self, key: SessionListSubkeysKey) -> list[str]:
        """The subpaths (subagent transcripts) written under a session."""
        return await self._run(self._list_subkeys, key)

    # -- deleting and forking ------------------------------------------------------------

    def _delete(self, key: SessionKey) -> None:
        doomed = [thread_id_for(key)]
        if key.get("subpath") is None:
            doomed += [meta.id for meta in self._threads(doomed[0] + "/")]
            doomed.append(summary_thread_id(key))
        for thread_id in doomed:
            with contextlib.suppress(ThreadNotFound):
                self.journal.delete_thread(thread_id)

    async def delete(self, key: SessionKey) -> None:
        """Delete a transcript; a main transcript takes its subagent transcripts and
        summary with it. Deleting what does not exist is not an error."""
        await self._run(self._delete, key)

    def _fork(self, key: SessionKey, new_session_id: str, up_to_uuid: str | None) -> str:
        if key.get("subpath") is not None:
            raise InvalidInputError("fork a main transcript (a key without subpath)")
        source = thread_id_for(key)
        pairs = self._path_lines(source)
        if not pairs:
            raise ThreadNotFound(f"session {key['session_id']!r} has no transcript to fork")
        cut = len(pairs) - 1
        if up_to_uuid is not None:
            matches = [i for i, (_, line) in enumerate(pairs) if line.get("uuid") == up_to_uuid]
            if not matches:
                raise EntryNotFound(f"no line with uuid {up_to_uuid!r} in {key['session_id']!r}")
            cut = matches[-1]
        new_key: SessionKey = {"project_key": key["project_key"], "session_id": new_session_id}
        self.journal.fork(source, pairs[cut][0].id, new_thread_id=thread_id_for(new_key))
        inherited = self._load(new_key)
        assert inherited is not None
        self._fold_summary(new_key, inherited)
        return new_session_id

    async def fork(
        self,
        key: SessionKey,
        new_session_id: str | None = None,
        *,
        up_to_uuid: str | None = None,
    ) -> str:
        """A new session sharing this one's lines up to ``up_to_uuid`` (inclusive; the
        whole transcript if None), without copying them. Returns the new session id
        (a fresh uuid4 unless given). The sidecar of the fork is folded from its lines."""
        new_id = new_session_id or str(uuid.uuid4())
        return await self._run(self._fork, key, new_id, up_to_uuid)
