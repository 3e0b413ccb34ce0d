"""Provider-visible context from a path: compaction, control signals, projections.

Only user, assistant, tool-call and tool-result entries (and branch summaries, as
assistant text) reach the model. With compaction entries on the path only the last one
counts: its summary becomes one user message of kind ``compaction_summary`` (with the
kept user inputs that are not already in the retained tail), followed by the retained
tail. Two tool calls are control signals and become plain assistant text: ``ask_user``
(the question) and ``task_complete`` (the output). Every message carries the id of the
entry it came from and that entry's parent.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence

from .models import (
    MESSAGE_KIND_COMPACTION_SUMMARY,
    MESSAGE_KIND_CONTROL_SIGNAL,
    ContextProjection,
    Entry,
    EntryType,
    Message,
    ProjectedSegment,
    ProjectionPurpose,
    Role,
)

PROVIDER_VISIBLE = frozenset(
    {
        EntryType.USER_MESSAGE,
        EntryType.ASSISTANT_MESSAGE,
        EntryType.TOOL_CALL,
        EntryType.TOOL_RESULT,
    }
)
CONTROL_SIGNALS = {"ask_user": "question", "task_complete": "output"}
PREVIEW_LIMIT = 240


def project_control_signal(message: Message) -> Message | None:
    """The provider-safe form of an ``ask_user``/``task_complete`` call, else None."""
    key = CONTROL_SIGNALS.get(message.tool_name)
    if key is None:
        return None
    try:
        args = json.loads(message.tool_args or "{}")
    except ValueError:
        return None
    text = args.get(key) if isinstance(args, dict) else None
    if not isinstance(text, str):
        return None
    return Message(
        role=Role.ASSISTANT,
        content=text,
        reasoning=message.reasoning,
        kind=MESSAGE_KIND_CONTROL_SIGNAL,
    )


def visible_message(entry: Entry) -> Message | None:
    """The message an entry contributes to the provider context, if any."""
    if entry.type in PROVIDER_VISIBLE and entry.message is not None and entry.message.role:
        message = entry.message
        if entry.type is EntryType.TOOL_CALL:
            message = project_control_signal(message) or message
    elif entry.type is EntryType.BRANCH_SUMMARY and entry.summary:
        message = Message(role=Role.ASSISTANT, content=entry.summary)
    else:
        return None
    return message.model_copy(update={"entry_id": entry.id, "parent_entry_id": entry.parent_id})


def _default_tail_start(path: Sequence[Entry], compaction_index: int) -> int:
    """The last provider-visible entry before the compaction, stepped back to its tool call."""
    for i in range(compaction_index - 1, -1, -1):
        if path[i].type in PROVIDER_VISIBLE:
            start = i
            while start > 0 and path[start].type is EntryType.TOOL_RESULT:
                start -= 1
            return start
    return -1


def summary_text(summary: str, kept_users: Sequence[Message], has_tail: bool) -> str:
    """The content of the compaction-summary message."""
    parts = [
        "[Context checkpoint] Earlier conversation was compacted. Summary of it:",
        summary,
    ]
    if kept_users:
        parts.append("User inputs from the compacted part, kept verbatim:")
        parts.extend(f"- {message.content}" for message in kept_users)
    if has_tail:
        parts.append("The most recent messages follow this checkpoint and take precedence.")
    return "\n\n".join(parts)


def build_context(path: Sequence[Entry]) -> list[Message]:
    """The messages to send to a provider for a path (root to leaf)."""
    compaction_index = -1
    for i, entry in enumerate(path):
        if entry.type is EntryType.COMPACTION:
            compaction_index = i
    if compaction_index < 0:
        return [m for m in map(visible_message, path) if m is not None]

    compaction = path[compaction_index]
    first_kept = -1
    if compaction.first_kept_entry_id:
        first_kept = next(
            (i for i, e in enumerate(path) if e.id == compaction.first_kept_entry_id), -1
        )
    if first_kept < 0 and not compaction.kept_user_entry_ids:
        first_kept = _default_tail_start(path, compaction_index)
    kept_before = path[first_kept:compaction_index] if 0 <= first_kept < compaction_index else []
    tail_entries = [*kept_before, *path[compaction_index + 1 :]]
    tail = [m for m in map(visible_message, tail_entries) if m is not None]
    messages: list[Message] = []
    if compaction.summary:
        in_tail = {e.id for e in tail_entries}
        users = {
            e.id: e
            for e in path[:compaction_index]
            if e.type is EntryType.USER_MESSAGE
            and e.message is not None
            and e.message.role == Role.USER
        }
        kept: list[Message] = []
        seen: set[str] = set()
        for entry_id in compaction.kept_user_entry_ids:
            if entry_id in seen or entry_id in in_tail or entry_id not in users:
                continue
            seen.add(entry_id)
            message = visible_message(users[entry_id])
            if message is not None:
                kept.append(message)
        messages.append(
            Message(
                role=Role.USER,
                content=summary_text(compaction.summary, kept, bool(tail)),
                kind=MESSAGE_KIND_COMPACTION_SUMMARY,
                entry_id=compaction.id,
                parent_entry_id=compaction.parent_id,
                compaction_id=compaction.compaction_id,
                compaction_generation=compaction.compaction_generation,
                compaction_window_id=compaction.compaction_window_id,
            )
        )
    return messages + tail


def estimate_tokens(message: Message) -> int:
    """A rough token count: about four characters per token plus a little framing."""
    chars = sum(
        len(text)
        for text in (message.content, message.reasoning, message.tool_args, message.tool_name)
    )
    return math.ceil(chars / 4) + 4


def _preview(text: str) -> str:
    return text if len(text) <= PREVIEW_LIMIT else text[:PREVIEW_LIMIT] + "..."


def build_context_projection(
    path: Sequence[Entry], purpose: ProjectionPurpose = ProjectionPurpose.PROVIDER_REQUEST
) -> ContextProjection:
    """The context messages of a path plus one segment per message saying where it came from."""
    messages = build_context(path)
    types = {entry.id: entry.type for entry in path}
    segments = []
    for index, message in enumerate(messages):
        entry_type = types.get(message.entry_id)
        if entry_type is None and message.kind == MESSAGE_KIND_COMPACTION_SUMMARY:
            entry_type = EntryType.COMPACTION
        artifacts = []
        if message.tool_result is not None and message.tool_result.full_output is not None:
            artifacts.append(message.tool_result.full_output)
        test_ui = ProjectionPurpose(purpose) is ProjectionPurpose.TEST_UI
        segments.append(
            ProjectedSegment(
                entry_id=message.entry_id,
                entry_type=entry_type,
                message_index=index,
                role=message.role,
                tool_call_id=message.tool_call_id,
                tool_name=message.tool_name,
                token_estimate=estimate_tokens(message),
                artifact_refs=artifacts if test_ui else [],
                ui_preview=_preview(message.content) if test_ui else "",
            )
        )
    return ContextProjection(messages=messages, segments=segments)
