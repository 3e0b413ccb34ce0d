"""pi coding-agent session files (``~/.pi/agent/sessions/--<cwd>--/<time>_<id>.jsonl``).

The first line is the session header ``{"type": "session", "version": 3, "id": ...,
"timestamp": ..., "cwd": ..., "parentSession"?: <path of the session it was forked
from>}``. Every other line is an entry with ``id`` and ``parentId`` (a tree: navigating
to an earlier entry and continuing starts a branch in the same file): ``message``
(roles user, assistant, toolResult, bashExecution, custom, ...), ``compaction``
(``summary``, ``firstKeptEntryId``, ``tokensBefore``), ``branch_summary`` (``fromId``,
``summary``), ``label`` (``targetId``, ``label``), ``session_info`` (``name``),
``model_change``, ``thinking_level_change``, ``custom``, ``custom_message``. Version 1
files have no ids: their entries form a chain in file order.

Mapping (every line is kept whole; see docs/transcripts.md):

* the thread is ``pi/<session id>``; the header is kept in the session manifest (it is
  not part of the tree), so a ``/fork`` that copies entries with their ids shares them;
* an entry hangs under its ``parentId`` (a parent not in the file: a root);
* user / assistant / toolResult messages -> user_message / assistant_message or
  tool_call / tool_result, with their content blocks as Anthropic Messages blocks
  (``toolCall`` -> ``tool_use``, images with a base64 source; blocks that do not
  validate are kept as text); ``custom_message`` -> user_message (pi sends it to the
  model); ``compaction`` -> a compaction entry whose ``first_kept_entry_id`` is the
  entry of ``firstKeptEntryId``; ``branch_summary`` -> branch_summary;
  ``model_change`` -> model_change; everything else (labels included) -> custom;
* the leaf is the last entry of the file; the title the last ``session_info`` name.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path, PurePosixPath
from typing import Any

from ..journal import CompactionResult, Entry, EntryType, Message
from ..journal.helpers import compaction_entry
from .plan import (
    PlannedRecord,
    SessionPlan,
    as_int,
    as_str,
    custom_entry,
    find_jsonl,
    message_entry,
    parse_timestamp,
    text_of,
)
from .source import SourceFile

NAME = "pi"


def _block(block: Any) -> Any:
    """A pi content block as an Anthropic Messages block (``toolCall`` -> ``tool_use``,
    pi's flat image -> an image with a base64 source); other blocks as they are."""
    if not isinstance(block, dict):
        return block
    kind = block.get("type")
    if kind == "toolCall":
        rest = {k: v for k, v in block.items() if k not in ("type", "arguments")}
        return {"type": "tool_use", **rest, "input": block.get("arguments")}
    if kind == "image" and "source" not in block:
        source = {"type": "base64", "media_type": block.get("mimeType"), "data": block.get("data")}
        return {"type": "image", "source": source}
    return block


def _content(content: Any) -> Any:
    """Message content for the journal: a string as it is, blocks converted (``_block``)."""
    if isinstance(content, list):
        return [_block(block) for block in content]
    return content if isinstance(content, str) else ""


def _message(fields: dict[str, Any], content: Any) -> Message:
    """The message with converted blocks, or with their text if they do not validate."""
    try:
        return Message(**fields, content=_content(content))
    except ValueError:
        return Message(**fields, content=text_of(content))


def _message_entry(message: dict[str, Any]) -> Entry:
    role = message.get("role")
    content = message.get("content")
    if role == "user":
        return message_entry(_message({"role": "user"}, content))
    if role == "assistant":
        entry = message_entry(_message({"role": "assistant"}, content))
        return entry.model_copy(
            update={
                "provider": as_str(message.get("provider")),
                "model": as_str(message.get("model")),
            }
        )
    if role == "toolResult":
        fields = {
            "role": "tool",
            "tool_call_id": as_str(message.get("toolCallId")),
            "tool_name": as_str(message.get("toolName")),
        }
        if isinstance(content, list) and all(
            isinstance(b, dict) and b.get("type") == "text" for b in content
        ):
            content = text_of(content)
        return message_entry(_message(fields, content))
    return custom_entry()


def _entry(record: dict[str, Any]) -> tuple[Entry, dict[str, str]]:
    kind = record.get("type")
    if kind == "message" and isinstance(record.get("message"), dict):
        return _message_entry(record["message"]), {}
    if kind == "compaction":
        entry = compaction_entry(
            CompactionResult(
                compaction_id=as_str(record.get("id")),
                summary=as_str(record.get("summary")),
                tokens_before=as_int(record.get("tokensBefore")),
                trigger="extension" if record.get("fromHook") is True else "pi",
            )
        )
        first_kept = record.get("firstKeptEntryId")
        return entry, ({"first_kept_entry_id": first_kept} if isinstance(first_kept, str) else {})
    if kind == "branch_summary":
        return Entry(type=EntryType.BRANCH_SUMMARY, summary=as_str(record.get("summary"))), {}
    if kind == "custom_message":
        content = text_of(record.get("content"))
        return message_entry(Message(role="user", content=content)), {}
    if kind == "model_change":
        return Entry(
            type=EntryType.MODEL_CHANGE,
            provider=as_str(record.get("provider")),
            model=as_str(record.get("modelId")),
        ), {}
    return custom_entry(), {}


def _session_id_of_path(value: Any) -> str | None:
    """The session id in a session file path (``<time>_<id>.jsonl``)."""
    if not isinstance(value, str) or not value.endswith(".jsonl"):
        return None
    stem = PurePosixPath(value.replace("\\", "/")).stem
    return stem.rpartition("_")[2] or None


class PiFormat:
    """pi coding-agent session JSONL (versions 1 to 3)."""

    name = NAME

    def find_sessions(self, root: Path) -> list[Path]:
        """Every ``*.jsonl`` under the directory."""
        return find_jsonl(root)

    def plan(self, source: SourceFile) -> SessionPlan:
        """Map a pi session onto a tree of entries."""
        header = source.lines[0]
        if header.record.get("type") != "session":
            raise source.error(
                header.number, "not a pi session: the first record is no session header"
            )
        session_id = header.record.get("id")
        if not isinstance(session_id, str) or not session_id:
            raise source.error(header.number, "session header has no id")
        plan = SessionPlan(format=NAME, source=source, session_key=session_id, headers=[0])
        parent_session = _session_id_of_path(header.record.get("parentSession"))
        if parent_session and parent_session != session_id:
            plan.parent_session = parent_session
        plan.created_at = parse_timestamp(header.record.get("timestamp"))
        ids = {
            line.record["id"] for line in source.lines[1:] if isinstance(line.record.get("id"), str)
        }
        last_time: datetime = plan.created_at
        previous: str | None = None
        for index, line in enumerate(source.lines[1:], start=1):
            record = line.record
            created = parse_timestamp(record.get("timestamp"), last_time)
            last_time = created
            own = record.get("id")
            if isinstance(own, str) and own:
                key = own
                parent = record.get("parentId")
                parent_key = parent if isinstance(parent, str) and parent in ids else None
            else:  # version 1: no ids, a chain in file order
                key = f"#{index}"
                parent_key = previous
            entry, refs = _entry(record)
            if record.get("type") == "session_info" and isinstance(record.get("name"), str):
                plan.title = record["name"]
            plan.records.append(PlannedRecord(index, key, parent_key, entry, created, refs))
            previous = key
        plan.leaf = previous
        return plan


FORMAT = PiFormat()
