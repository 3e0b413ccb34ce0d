"""What a format module makes of a transcript file: a plan of entries, nothing written yet.

A format module (``claude_code``, ``codex``, ``pi``) reads the records of one session
file and says, for each record, which journal entry it becomes (type, message,
compaction fields) and under which other record it hangs (its journal parent). It also
names the session (the thread id is ``<format>/<session key>``), its leaf, its title and
its relations to other sessions. The importer (``importer``) turns plans into objects,
shares what sessions have in common, and writes threads; the exporter rebuilds files
from the stored records alone, so no format module is needed to export.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

from ..journal import (
    Entry,
    EntryType,
    Message,
    entry_type_for_message,
)
from .source import SourceFile, TranscriptError, compact_json


@dataclass
class PlannedRecord:
    """One record that becomes one journal entry."""

    index: int
    """Position of the record among the file's records (0-based)."""
    key: str
    """Unique within the session: the record's own id, or ``#<index>`` if it has none."""
    parent: str | None
    """Key of the record this entry hangs under in the journal (None: a root)."""
    entry: Entry
    """Type, message and compaction fields (metadata is filled in by the importer)."""
    created_at: datetime
    refs: dict[str, str] = field(default_factory=dict)
    """Entry fields that name another record's entry (``first_kept_entry_id`` ->
    record key): filled in with that entry's id once it is known (an ancestor's is)."""


@dataclass
class SessionPlan:
    """One session file, mapped onto entries."""

    format: str
    source: SourceFile
    session_key: str
    records: list[PlannedRecord] = field(default_factory=list)
    headers: list[int] = field(default_factory=list)
    """Record positions kept in the session's manifest rather than as entries (a header
    that is not part of the conversation tree, e.g. pi's ``session`` line)."""
    leaf: str | None = None
    title: str = ""
    created_at: datetime | None = None
    placeholders: tuple[str, ...] = ()
    """Top-level keys whose values are stored per session, not per entry (a session id
    that a resumed copy of a record changes), so copies share their entries."""
    fork_of: str | None = None
    """Session key of the session this one was forked from, by copying its records."""
    fork_header: int | None = None
    """Position of the record that opens the fork (its own header): it moves after the
    records shared with the source."""
    fork_ignore: tuple[str, ...] = ()
    """Top-level keys a copied record may change (e.g. a timestamp rewritten on copy)."""
    parent_session: str | None = None
    """Session key of the session this one belongs to (a subagent's main session)."""

    @property
    def thread_id(self) -> str:
        """The thread the session becomes."""
        return thread_id_for(self.format, self.session_key)

    def error(self, index: int, message: str) -> TranscriptError:
        """A TranscriptError naming the file and the line of record ``index``."""
        return self.source.error(self.source.lines[index].number, message)


def thread_id_for(format_name: str, session_key: str) -> str:
    """The thread id of a session: ``<format>/<session key>``."""
    return f"{format_name}/{session_key}"


class TranscriptFormat(Protocol):
    """What a format module provides."""

    name: str
    """The ``--format`` value."""

    def find_sessions(self, root: Path) -> list[Path]:
        """The session files under a directory, in a stable order."""
        ...

    def plan(self, source: SourceFile) -> SessionPlan:
        """Map one parsed file onto entries; TranscriptError if it is not this format."""
        ...


# -- helpers shared by the format modules ---------------------------------------------------

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def parse_timestamp(value: Any, fallback: datetime | None = None) -> datetime:
    """An ISO-8601 timestamp (``Z`` or an offset) or Unix milliseconds, as aware UTC;
    ``fallback`` (else the epoch) when absent or unreadable: times never fail an import."""
    moment: datetime | None = None
    if isinstance(value, str) and 10 <= len(value) <= 40:
        try:
            moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            moment = None
        if moment is not None and moment.tzinfo is None:
            moment = moment.replace(tzinfo=UTC)
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        try:
            moment = datetime.fromtimestamp(value / 1000, tz=UTC)
        except (ValueError, OverflowError, OSError):
            moment = None
    if moment is None:
        return fallback or EPOCH
    try:
        return moment.astimezone(UTC)
    except (ValueError, OverflowError):
        return fallback or EPOCH


def text_of(content: Any, kinds: Sequence[str] = ("text", "input_text", "output_text")) -> str:
    """The text of a message content: a string, or the text blocks of a block list."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [
            block["text"]
            for block in content
            if isinstance(block, dict)
            and block.get("type") in kinds
            and isinstance(block.get("text"), str)
        ]
        return "\n".join(parts)
    return ""


def as_str(value: Any) -> str:
    """A string field, or "" when absent or of another type."""
    return value if isinstance(value, str) else ""


def json_args(value: Any) -> str:
    """Tool arguments as a JSON string (already a string: kept as it is)."""
    if isinstance(value, str):
        return value
    if value is None:
        return ""
    try:
        return compact_json(value)
    except (TypeError, ValueError, RecursionError):
        return ""


def message_entry(message: Message, kind: EntryType | None = None) -> Entry:
    """An entry for a message; the type follows the role unless given."""
    return Entry(type=kind or entry_type_for_message(message), message=message)


def custom_entry() -> Entry:
    """An entry that is not part of the provider context (metadata, snapshots, markers)."""
    return Entry(type=EntryType.CUSTOM)


def as_int(value: Any) -> int:
    """A non-negative integer field, or 0."""
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2**62:
        return value
    return 0


def find_jsonl(root: Path) -> list[Path]:
    """Every ``*.jsonl`` file under a directory (hidden names skipped), sorted."""
    return sorted(
        path
        for path in root.rglob("*.jsonl")
        if not any(part.startswith(".") for part in path.relative_to(root).parts)
    )
