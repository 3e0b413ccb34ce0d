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
from typing import cast

from .content import IMAGE, TEXT, TOOL_RESULT, TOOL_USE, ContentBlock
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
IMAGE_TOKEN_ESTIMATE = 1600
"""Tokens counted for one image block (about what a 1.15 megapixel image costs)."""


def _signal_text(tool_name: str, args: object) -> str | None:
    """The text a control-signal call carries (args parsed or as a JSON string), else None."""
    key = CONTROL_SIGNALS.get(tool_name)
    if key is None:
        return None
    if isinstance(args, str):
        try:
            args = json.loads(args or "{}")
        except ValueError:
            return None
    text = args.get(key) if isinstance(args, dict) else None
    return text if isinstance(text, str) else None


def _project_calls(message: Message) -> tuple[Message, set[str]] | None:
    if message.role != Role.ASSISTANT:
        return None
    legacy = _signal_text(message.tool_name, message.tool_args)
    legacy_call_left = bool(message.tool_call_id or message.tool_name) and legacy is None
    ids: set[str] = set()
    content: str | list[ContentBlock]
    if isinstance(message.content, str):
        if legacy is None:
            return None
        content = legacy if not message.content else f"{message.content}\n\n{legacy}"
        calls_left = False
    else:
        blocks: list[ContentBlock] = []
        for block in message.content:
            text = None
            if block.get("type") == TOOL_USE:
                text = _signal_text(str(block["name"]), block["input"])
            if text is None:
                blocks.append(block)
            else:
                blocks.append({"type": TEXT, "text": text})
                ids.add(str(block["id"]))
        if legacy is not None:
            blocks.append({"type": TEXT, "text": legacy})
        if not ids and legacy is None:
            return None
        content = blocks
        calls_left = any(block.get("type") == TOOL_USE for block in blocks)
    update: dict[str, object] = {"content": content}
    if legacy is not None:
        if message.tool_call_id:
            ids.add(message.tool_call_id)
        update.update(tool_call_id="", tool_name="", tool_args="")
    if not calls_left and not legacy_call_left:
        update["kind"] = MESSAGE_KIND_CONTROL_SIGNAL
    return message.model_copy(update=update), ids


def _answer_projected(message: Message, projected: set[str]) -> Message:
    """A tool result answering a projected control signal, as user text (else unchanged)."""
    if message.role == Role.TOOL and message.tool_call_id in projected:
        return Message(
            role=Role.USER,
            content=message.content,
            kind=MESSAGE_KIND_CONTROL_SIGNAL,
            entry_id=message.entry_id,
            parent_entry_id=message.parent_entry_id,
        )
    if message.role != Role.USER or isinstance(message.content, str):
        return message
    blocks: list[ContentBlock] = []
    changed = False
    for block in message.content:
        if block.get("type") == TOOL_RESULT and block.get("tool_use_id") in projected:
            inner = block.get("content", "")
            if isinstance(inner, list):
                blocks.extend(item for item in inner if isinstance(item, dict))
            else:
                blocks.append({"type": TEXT, "text": str(inner)})
            changed = True
        else:
            blocks.append(block)
    if not changed:
        return message
    only_answers = not any(block.get("type") == TOOL_RESULT for block in blocks)
    kind = MESSAGE_KIND_CONTROL_SIGNAL if only_answers and not message.kind else message.kind
    return message.model_copy(update={"content": blocks, "kind": kind})


def project_control_signals(messages: Sequence[Message]) -> list[Message]:
    """Replace control-signal calls by assistant text, and their results by user text.

    A tool result (a ``tool`` message or a ``tool_result`` block) that answers a
    projected call becomes user text carrying its content, so no result is left
    without its call.
    """
    projected: set[str] = set()
    out: list[Message] = []
    for message in messages:
        done = _project_calls(message)
        if done is not None:
            message, ids = done
            projected |= ids
        elif projected:
            message = _answer_projected(message, projected)
        out.append(message)
    return out


def visible_message(entry: Entry) -> Message | None:
    """The message an entry contributes to the provider context, if any.

    A system message always counts (whatever the entry type), so a system prompt
    appended to a thread is never left out.
    """
    message = entry.message
    if message is not None and (
        message.role == Role.SYSTEM or (entry.type in PROVIDER_VISIBLE and message.role)
    ):
        pass
    elif entry.type is EntryType.BRANCH_SUMMARY and entry.summary:
        message = Message(role=Role.ASSISTANT, content=entry.summary)
    else:
        return None
    assert message is not None
    return message.model_copy(update={"entry_id": entry.id, "parent_entry_id": entry.parent_id})


def _is_system_message(message: Message) -> bool:
    return message.role == Role.SYSTEM


def _answered_ids(message: Message) -> list[str]:
    if message.role == Role.TOOL:
        return [message.tool_call_id]
    if isinstance(message.content, str):
        return []
    return [
        str(block.get("tool_use_id", ""))
        for block in message.content
        if block.get("type") == TOOL_RESULT
    ]


def _unanswered(path: Sequence[Entry], start: int, skip: int) -> set[str]:
    """Call ids answered in ``path[start:]`` (without ``path[skip]``) but not made there."""
    made: set[str] = set()
    needed: set[str] = set()
    for i in range(start, len(path)):
        message = visible_message(path[i]) if i != skip else None
        if message is None:
            continue
        made.update(call.id for call in message.tool_calls())
        needed.update(cid for cid in _answered_ids(message) if cid and cid not in made)
    return needed


def _cover_calls(path: Sequence[Entry], start: int, skip: int) -> int:
    """Move a tail start back so each tool result in the tail keeps the call it answers.

    The tail is ``path[start:]`` without ``path[skip]`` (the compaction). Moving back may
    take in more results, whose calls are then taken in too. Results whose call is
    nowhere on the path stay as they are.
    """
    while needed := _unanswered(path, start, skip):
        earlier = start
        for i in range(min(start, skip) - 1, -1, -1):
            message = visible_message(path[i])
            if message is not None and {call.id for call in message.tool_calls()} & needed:
                earlier = i
        if earlier == start:
            return start
        start = earlier
    return start


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
        parts.extend(f"- {message.text()}" for message in kept_users)
    if has_tail:
        parts.append("The most recent messages follow this checkpoint and take precedence.")
    return "\n\n".join(parts)


def build_context(path: Sequence[Entry]) -> list[Message]:
    """The messages to send to a provider for a path (root to leaf).

    Control-signal calls become text (see ``project_control_signals``). With a
    compaction on the path, system messages of the compacted part are kept, first.
    """
    compaction_index = -1
    for i, entry in enumerate(path):
        if entry.type is EntryType.COMPACTION:
            compaction_index = i
    if compaction_index < 0:
        return project_control_signals([m for m in map(visible_message, path) if m is not None])

    compaction = path[compaction_index]
    first_kept = -1
    if compaction.first_kept_entry_id:
        first_kept = next(
            (i for i, e in enumerate(path) if e.id == compaction.first_kept_entry_id), -1
        )
    if first_kept < 0 and not compaction.kept_user_entry_ids:
        first_kept = _default_tail_start(path, compaction_index)
    start = first_kept if 0 <= first_kept < compaction_index else compaction_index + 1
    start = _cover_calls(path, start, compaction_index)
    kept_before = path[start:compaction_index]
    tail_entries = [*kept_before, *path[compaction_index + 1 :]]
    tail = [m for m in map(visible_message, tail_entries) if m is not None]
    compacted = (visible_message(entry) for entry in path[:start])
    messages = [m for m in compacted if m is not None and _is_system_message(m)]
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
    return project_control_signals(messages + tail)


def _content_chars(content: str | Sequence[ContentBlock]) -> tuple[int, int]:
    """Characters of text and number of images in a content (tool_result blocks included)."""
    if isinstance(content, str):
        return len(content), 0
    chars = images = 0
    for block in content:
        kind = block.get("type")
        if kind == IMAGE:
            images += 1
        elif kind == TEXT:
            chars += len(str(block.get("text", "")))
        elif kind == TOOL_RESULT:
            inner = block.get("content", "")
            inner_chars, inner_images = _content_chars(
                cast(list[ContentBlock], inner) if isinstance(inner, list) else str(inner)
            )
            chars += inner_chars
            images += inner_images
        else:
            chars += len(json.dumps(block, ensure_ascii=False))
    return chars, images


def estimate_tokens(message: Message) -> int:
    """A rough token count: about four characters per token plus a little framing, and
    ``IMAGE_TOKEN_ESTIMATE`` per image."""
    chars, images = _content_chars(message.content)
    chars += sum(len(text) for text in (message.reasoning, message.tool_args, message.tool_name))
    return math.ceil(chars / 4) + 4 + images * IMAGE_TOKEN_ESTIMATE


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
        first_call = next(iter(message.tool_calls()), None)
        segments.append(
            ProjectedSegment(
                entry_id=message.entry_id,
                entry_type=entry_type,
                message_index=index,
                role=message.role,
                tool_call_id=first_call.id if first_call else message.tool_call_id,
                tool_name=first_call.name if first_call else message.tool_name,
                token_estimate=estimate_tokens(message),
                artifact_refs=artifacts if test_ui else [],
                ui_preview=_preview(message.text()) if test_ui else "",
            )
        )
    return ContextProjection(messages=messages, segments=segments)
