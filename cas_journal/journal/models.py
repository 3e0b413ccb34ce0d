"""The public data models (pydantic v2): messages, entries, threads, leases, checkpoints.

Field names follow the Go packages cas-journal descends from (sessiontree, session).
Times are timezone-aware UTC datetimes; a naive datetime is refused with a ValueError.
Entries and messages are immutable (an entry's id is the hash of its content).
"""

from __future__ import annotations

from datetime import UTC, datetime
from enum import StrEnum
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, PrivateAttr, SkipValidation

from .content import ContentBlock, ToolCall, block_tool_calls, check_content, content_text


def _to_utc(value: datetime | None) -> datetime | None:
    if value is None:
        return None
    if value.tzinfo is None or value.tzinfo.utcoffset(value) is None:
        raise ValueError("datetime must be timezone-aware (UTC); got a naive datetime")
    return value.astimezone(UTC)


UtcDatetime = Annotated[datetime | None, AfterValidator(_to_utc)]
MessageContent = Annotated[str | list[ContentBlock], AfterValidator(check_content)]
"""A message's content: a string, or a list of content blocks (``journal.content``)."""


class Role(StrEnum):
    """Who said a message."""

    SYSTEM = "system"
    USER = "user"
    ASSISTANT = "assistant"
    TOOL = "tool"


class EntryType(StrEnum):
    """What a journal entry records."""

    THREAD_INFO = "thread_info"
    TURN_MARKER = "turn_marker"
    USER_MESSAGE = "user_message"
    ASSISTANT_MESSAGE = "assistant_message"
    TOOL_CALL = "tool_call"
    TOOL_RESULT = "tool_result"
    MODEL_CHANGE = "model_change"
    ACTIVE_TOOLS = "active_tools_change"
    COMPACTION = "compaction"
    BRANCH_SUMMARY = "branch_summary"
    RUN_FAILURE = "run_failure"
    CUSTOM = "custom"


class TurnMarkerStatus(StrEnum):
    """The state a turn marker entry records."""

    STARTED = "started"
    SAVE_POINT = "save_point"
    COMPLETED = "completed"
    WAITING = "waiting"
    FAILED = "failed"
    ABORTED = "aborted"


class ThreadTitleStatus(StrEnum):
    """Whether a thread title was generated."""

    READY = "ready"
    FAILED = "failed"


class ThreadTitleSource(StrEnum):
    """Who produced a thread title."""

    PROVIDER = "provider"
    HOST = "host"


class ForkPosition(StrEnum):
    """Where a fork starts relative to the chosen entry."""

    AT = "at"
    """The fork's leaf is the entry itself."""
    BEFORE = "before"
    """The fork's leaf is the entry's parent (the entry is left out)."""


class ProjectionPurpose(StrEnum):
    """What a context projection is for."""

    PROVIDER_REQUEST = "provider_request"
    COMPACTION = "compaction"
    TEST_UI = "test_ui"


MESSAGE_KIND_COMPACTION_SUMMARY = "compaction_summary"
MESSAGE_KIND_CONTROL_SIGNAL = "control_signal"


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", use_enum_values=False)


class ArtifactRef(_Frozen):
    """A pointer to a stored artifact (e.g. a tool's full output)."""

    id: str = ""
    label: str = ""
    url: str = ""
    kind: str = ""
    mime: str = ""
    size: int = 0


class ToolResultView(_Frozen):
    """How a tool result was shown to the model: truncation and where the full output is."""

    truncated: bool = False
    original_bytes: int = 0
    visible_bytes: int = 0
    original_lines: int = 0
    visible_lines: int = 0
    strategy: str = ""
    content_hash: str = ""
    full_output: ArtifactRef | None = None


class Message(_Frozen):
    """One provider-facing message.

    ``content`` is a string or a list of content blocks (text, images, ``tool_use``,
    ``tool_result`` ...; see ``cas_journal.journal.content``). An assistant message makes
    one tool call through ``tool_call_id``/``tool_name``/``tool_args``, or any number
    through ``tool_use`` blocks; a ``tool`` message answers ``tool_call_id``, a user
    message may answer several calls with ``tool_result`` blocks.
    """

    role: str = ""
    content: MessageContent = ""
    reasoning: str = ""
    tool_call_id: str = ""
    tool_name: str = ""
    tool_args: str = ""
    """Tool call arguments as a JSON string."""
    entry_id: str = ""
    parent_entry_id: str = ""
    kind: str = ""
    """"" for a normal message, "compaction_summary" or "control_signal"."""
    tool_result: ToolResultView | None = None
    compaction_id: str = ""
    compaction_generation: int = 0
    compaction_window_id: str = ""

    def text(self) -> str:
        """The message's words: ``content`` itself, or its text blocks joined by newlines."""
        return content_text(self.content)

    def tool_calls(self) -> list[ToolCall]:
        """The tool calls an assistant message makes (the tool fields, then tool_use blocks)."""
        if self.role != Role.ASSISTANT:
            return []
        calls = block_tool_calls(self.content)
        if self.tool_call_id or self.tool_name:
            calls.insert(0, ToolCall(self.tool_call_id, self.tool_name, self.tool_args))
        return calls


class ContextUsage(_Frozen):
    """Token usage of a context window at a point in time."""

    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    context_window: int = 0


class Entry(_Frozen):
    """One journal entry. ``id`` is the hash of its entry object; ``raw`` its payload JSON."""

    id: str = ""
    thread_id: str = ""
    parent_id: str = ""
    type: EntryType = EntryType.CUSTOM
    turn_id: str = ""
    created_at: UtcDatetime = None
    message: Message | None = None
    raw: str = ""
    raw_hash: str = ""
    turn_status: TurnMarkerStatus | None = None
    provider: str = ""
    model: str = ""
    compaction_id: str = ""
    previous_compaction_id: str = ""
    compacted_through_entry_id: str = ""
    summary_schema_version: str = ""
    compaction_generation: int = 0
    compaction_window_id: str = ""
    first_kept_entry_id: str = ""
    kept_user_entry_ids: list[str] = Field(default_factory=list)
    summary: str = ""
    compaction_trigger: str = ""
    compaction_reason: str = ""
    compaction_phase: str = ""
    tokens_before: int = 0
    tokens_after_estimate: int = 0
    context_usage_before: ContextUsage | None = None
    context_usage_after: ContextUsage | None = None
    error: str = ""
    metadata: dict[str, str] = Field(default_factory=dict)


class ThreadMeta(BaseModel):
    """A thread's metadata; ``leaf_id`` is the entry new appends attach to by default."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    id: str = ""
    leaf_id: str = ""
    parent_thread_id: str = ""
    forked_from_thread_id: str = ""
    forked_from_entry_id: str = ""
    archived: bool = False
    title: str = ""
    title_status: ThreadTitleStatus | None = None
    title_source: ThreadTitleSource | None = None
    title_updated_at: UtcDatetime = None
    title_error: str = ""
    created_at: UtcDatetime = None
    updated_at: UtcDatetime = None
    status: str = ""
    last_viewed_at: UtcDatetime = None

    _state_oid: str | None = PrivateAttr(default=None)
    """The thread state this metadata was read from (for conflict detection)."""


class TurnLease(_Frozen):
    """An exclusive claim on a thread's next turn, shared by every process using the store."""

    thread_id: str
    turn_id: str
    owner_id: str
    created_at: UtcDatetime = None


class CompactionResult(_Frozen):
    """What a compaction produced; ``append_compaction`` records it as an entry."""

    compaction_id: str = ""
    previous_compaction_id: str = ""
    compacted_through_entry_id: str = ""
    summary_schema_version: str = ""
    compaction_generation: int = 0
    compaction_window_id: str = ""
    first_kept_entry_id: str = ""
    kept_user_entry_ids: list[str] = Field(default_factory=list)
    summary: str = ""
    trigger: str = ""
    reason: str = ""
    phase: str = ""
    tokens_before: int = 0
    tokens_after_estimate: int = 0
    usage_before: ContextUsage | None = None
    usage_after: ContextUsage | None = None
    details: dict[str, str] = Field(default_factory=dict)


class Checkpoint(BaseModel):
    """A run's conversation state after one iteration.

    ``messages`` are arbitrary JSON-compatible dicts (Anthropic or OpenAI message params)
    and load back equal. They are kept as given, not copied or checked one by one when
    the model is built (a run's list grows to hundreds of messages, saved every step):
    ``CheckpointStore.save`` checks them, refusing anything that is not a JSON object
    with string keys. ``message_count`` is filled in when a checkpoint is read, so
    listings that skip the messages still say how many there are.
    """

    model_config = ConfigDict(extra="forbid")

    run_id: str
    task_name: str = ""
    iteration: int = 0
    messages: list[SkipValidation[dict[str, Any]]] = Field(default_factory=list)
    system_prompt: str = ""
    input_tokens: int = 0
    output_tokens: int = 0
    created_at: UtcDatetime = None
    message_count: int = 0


class ProjectedSegment(_Frozen):
    """Where one context message came from, and roughly what it costs."""

    entry_id: str = ""
    entry_type: EntryType | None = None
    message_index: int = 0
    role: str = ""
    tool_call_id: str = ""
    tool_name: str = ""
    token_estimate: int = 0
    artifact_refs: list[ArtifactRef] = Field(default_factory=list)
    ui_preview: str = ""


class ContextProjection(_Frozen):
    """The provider-visible messages of a path plus one segment per message."""

    messages: list[Message] = Field(default_factory=list)
    segments: list[ProjectedSegment] = Field(default_factory=list)
