"""Convenience appends with the seed's semantics: messages, turn markers, failures, compactions."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING

from .models import CompactionResult, Entry, EntryType, Message, Role, TurnMarkerStatus

if TYPE_CHECKING:
    from .journal import Journal


def entry_type_for_message(message: Message) -> EntryType:
    """user -> user_message, tool -> tool_result, assistant with a tool field or a
    tool_use block -> tool_call, other assistant -> assistant_message, anything else
    (system included) -> custom."""
    if message.role == Role.USER:
        return EntryType.USER_MESSAGE
    if message.role == Role.TOOL:
        return EntryType.TOOL_RESULT
    if message.role == Role.ASSISTANT:
        if message.tool_call_id or message.tool_name or message.tool_args or message.tool_calls():
            return EntryType.TOOL_CALL
        return EntryType.ASSISTANT_MESSAGE
    return EntryType.CUSTOM


def append_message(
    journal: Journal, thread_id: str, turn_id: str, message: Message, now: datetime | None = None
) -> Entry:
    """Append a message; its entry type follows its role."""
    entry = Entry(
        thread_id=thread_id, turn_id=turn_id, type=entry_type_for_message(message), message=message
    )
    return journal.append(entry, now=now)


def append_turn_marker(
    journal: Journal,
    thread_id: str,
    turn_id: str,
    status: TurnMarkerStatus,
    metadata: dict[str, str] | None = None,
) -> Entry:
    """Record a turn's state (started, completed, failed ...)."""
    entry = Entry(
        thread_id=thread_id,
        turn_id=turn_id,
        type=EntryType.TURN_MARKER,
        turn_status=status,
        metadata=metadata or {},
    )
    return journal.append(entry)


def append_failure(journal: Journal, thread_id: str, turn_id: str, text: str) -> Entry:
    """Record that a run failed, with its error text."""
    return journal.append(
        Entry(thread_id=thread_id, turn_id=turn_id, type=EntryType.RUN_FAILURE, error=text)
    )


def append_active_tools(journal: Journal, thread_id: str, metadata: dict[str, str]) -> Entry:
    """Record a change of the active tool set."""
    return journal.append(
        Entry(thread_id=thread_id, type=EntryType.ACTIVE_TOOLS, metadata=dict(metadata))
    )


def compaction_generation(result: CompactionResult) -> int:
    """The given generation if > 0, else details["compaction_generation"], else 2 after a
    previous compaction, else 1."""
    if result.compaction_generation > 0:
        return result.compaction_generation
    detail = result.details.get("compaction_generation", "").strip()
    if detail.isdigit() and int(detail) > 0:
        return int(detail)
    return 2 if result.previous_compaction_id else 1


def compaction_entry(result: CompactionResult, *, thread_id: str = "", turn_id: str = "") -> Entry:
    """The entry recording a compaction result: its details become the entry's metadata,
    its generation and window follow ``compaction_generation`` and the first id present.
    ``append_compaction`` appends it at a thread's leaf; importers place it anywhere in a
    tree."""
    return Entry(
        thread_id=thread_id,
        turn_id=turn_id,
        type=EntryType.COMPACTION,
        compaction_id=result.compaction_id,
        previous_compaction_id=result.previous_compaction_id,
        compacted_through_entry_id=result.compacted_through_entry_id,
        summary_schema_version=result.summary_schema_version,
        compaction_generation=compaction_generation(result),
        compaction_window_id=(
            result.compaction_window_id or result.compaction_id or result.first_kept_entry_id
        ),
        first_kept_entry_id=result.first_kept_entry_id,
        kept_user_entry_ids=list(result.kept_user_entry_ids),
        summary=result.summary,
        compaction_trigger=result.trigger,
        compaction_reason=result.reason,
        compaction_phase=result.phase,
        tokens_before=result.tokens_before,
        tokens_after_estimate=result.tokens_after_estimate,
        context_usage_before=result.usage_before,
        context_usage_after=result.usage_after,
        metadata=dict(result.details),
    )


def append_compaction(
    journal: Journal, thread_id: str, turn_id: str, result: CompactionResult
) -> Entry:
    """Record a compaction; its details become the entry's metadata."""
    entry = compaction_entry(result, thread_id=thread_id, turn_id=turn_id)
    return journal.append(entry)
