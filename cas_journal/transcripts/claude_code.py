"""Claude Code session files (``~/.claude/projects/<project>/<session id>.jsonl``).

Each line is one record. Conversation records (``type`` user, assistant, system) carry a
``uuid`` and a ``parentUuid``: the records form a tree, and a rewind or an edited prompt
starts a new branch in the same file. Records without a uuid (``summary``,
``custom-title``, ``file-history-snapshot``, ``queue-operation`` ...) are session
metadata.

Mapping (every record becomes one entry and keeps its whole JSON; see docs/transcripts.md):

* the thread is ``claude-code/<session id>`` (the file name); a subagent's file
  (``agent-<id>.jsonl``, beside the sessions or under ``<session id>/subagents/``) is
  ``claude-code/<session id>/agent-<id>``, its parent thread the session's;
* an entry hangs under the entry of its ``parentUuid``; a ``compact_boundary`` (whose
  ``parentUuid`` is null) under its ``logicalParentUuid``, so the history before a
  compaction stays on the path; a record whose parent is not in the file is a root; a
  record without a uuid hangs under the last record with one before it (a side branch,
  never on the path);
* messages keep their content blocks (Claude Code writes Anthropic Messages blocks):
  a user prompt -> user_message; an assistant record -> assistant_message, or
  tool_call when it holds ``tool_use`` blocks; a user record of ``tool_result`` blocks
  -> tool_result (a user message answering the calls); content that does not validate
  as blocks is kept as text; ``compact_boundary`` -> a compaction entry
  whose summary is the text of the following ``isCompactSummary`` record (that record
  becomes a custom entry, so the summary is not sent twice); anything else -> custom;
* ``sessionId`` is a placeholder: a resumed session that copies earlier records under a
  new session id shares their entries;
* the leaf is the last record with a uuid that is not a sidechain (in a subagent's
  file: the last with a uuid); the title is the last ``custom-title``, else the summary
  of the leaf, else the last summary.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
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
    json_args,
    message_entry,
    parse_timestamp,
    text_of,
)
from .source import SourceFile

NAME = "claude-code"
PLACEHOLDERS = ("sessionId",)


def _tool_result_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    return text_of(content)


def _blocks(role: str, content: Any, kind: EntryType | None = None) -> Entry | None:
    """The message with Claude's own content blocks (they are Anthropic Messages blocks),
    or None if they do not validate as such (the caller falls back to text)."""
    if not isinstance(content, list):
        return None
    try:
        return message_entry(Message(role=role, content=content), kind)
    except ValueError:
        return None


def _user_entry(record: dict[str, Any], message: dict[str, Any]) -> Entry:
    content = message.get("content")
    if isinstance(content, list):
        results = [b for b in content if isinstance(b, dict) and b.get("type") == "tool_result"]
        if results:
            entry = _blocks("user", content, EntryType.TOOL_RESULT)
            if entry is not None:
                return entry
            first = results[0]
            text = "\n".join(_tool_result_text(block.get("content")) for block in results)
            return message_entry(
                Message(role="tool", content=text, tool_call_id=as_str(first.get("tool_use_id")))
            )
    if record.get("isCompactSummary") is True:
        summary = Message(role="user", content=text_of(content), kind="compaction_summary")
        return custom_entry().model_copy(update={"message": summary})
    return _blocks("user", content) or message_entry(Message(role="user", content=text_of(content)))


def _assistant_entry(message: dict[str, Any]) -> Entry:
    content = message.get("content")
    entry = _blocks("assistant", content)
    if entry is not None:
        return entry
    blocks = content if isinstance(content, list) else []
    reasoning = "\n".join(
        as_str(b.get("thinking"))
        for b in blocks
        if isinstance(b, dict) and b.get("type") == "thinking"
    )
    call = next((b for b in blocks if isinstance(b, dict) and b.get("type") == "tool_use"), None)
    fields: dict[str, Any] = {
        "role": "assistant",
        "content": text_of(content),
        "reasoning": reasoning,
    }
    if call is not None:
        fields.update(
            tool_call_id=as_str(call.get("id")),
            tool_name=as_str(call.get("name")),
            tool_args=json_args(call.get("input")),
        )
    return message_entry(Message(**fields))


def _entry(record: dict[str, Any], summaries: dict[str, str]) -> Entry:
    kind = record.get("type")
    message = record.get("message")
    if kind == "user" and isinstance(message, dict):
        return _user_entry(record, message)
    if kind == "assistant" and isinstance(message, dict):
        return _assistant_entry(message)
    if kind == "system" and record.get("subtype") == "compact_boundary":
        meta = record.get("compactMetadata")
        meta = meta if isinstance(meta, dict) else {}
        uuid = as_str(record.get("uuid"))
        return compaction_entry(
            CompactionResult(
                compaction_id=uuid,
                summary=summaries.get(uuid, ""),
                trigger=as_str(meta.get("trigger")),
                tokens_before=as_int(meta.get("preTokens")),
            )
        )
    return custom_entry()


class ClaudeCodeFormat:
    """Claude Code session JSONL."""

    name = NAME

    def find_sessions(self, root: Path) -> list[Path]:
        """Every ``*.jsonl`` under the directory (sessions and subagent files)."""
        return find_jsonl(root)

    def _session_key(self, source: SourceFile) -> tuple[str, str | None]:
        stem = source.path.stem
        if not stem.startswith("agent-"):
            return stem, None
        parent = next(
            (
                line.record["sessionId"]
                for line in source.lines
                if isinstance(line.record.get("sessionId"), str) and line.record["sessionId"]
            ),
            None,
        )
        if parent is None and source.path.parent.name == "subagents":
            parent = source.path.parent.parent.name
        if parent is None:
            return stem, None
        return f"{parent}/{stem}", parent

    def plan(self, source: SourceFile) -> SessionPlan:
        """Map a Claude Code session (or subagent) file onto entries."""
        key, parent_session = self._session_key(source)
        plan = SessionPlan(
            format=NAME,
            source=source,
            session_key=key,
            placeholders=PLACEHOLDERS,
            parent_session=parent_session,
        )
        uuids = {
            line.record["uuid"] for line in source.lines if isinstance(line.record.get("uuid"), str)
        }
        summaries: dict[str, str] = {}
        for line in source.lines:
            record = line.record
            parent = record.get("parentUuid")
            message = record.get("message")
            if record.get("isCompactSummary") is True and isinstance(parent, str):
                content = message.get("content") if isinstance(message, dict) else None
                summaries.setdefault(parent, text_of(content))
        last_with_uuid: str | None = None
        first_time = next(
            (line.record["timestamp"] for line in source.lines if "timestamp" in line.record),
            None,
        )
        last_time: datetime = parse_timestamp(first_time)
        subagent = parent_session is not None
        titles: list[str] = []
        summary_by_leaf: dict[str, str] = {}
        for index, line in enumerate(source.lines):
            record = line.record
            uuid = record.get("uuid")
            created = parse_timestamp(record.get("timestamp"), last_time)
            if plan.created_at is None and isinstance(record.get("timestamp"), str):
                plan.created_at = created
            last_time = created
            if isinstance(uuid, str) and uuid:
                parent = record.get("parentUuid")
                if parent is None and record.get("subtype") == "compact_boundary":
                    parent = record.get("logicalParentUuid")
                record_key = uuid
                parent_key = parent if isinstance(parent, str) and parent in uuids else None
                if parent_key == uuid:
                    raise plan.error(index, "record is its own parent")
                last_with_uuid = uuid
                if subagent or record.get("isSidechain") is not True:
                    plan.leaf = uuid
            else:
                record_key = f"#{index}"
                parent_key = last_with_uuid
                if record.get("type") == "custom-title" and isinstance(
                    record.get("customTitle"), str
                ):
                    titles.append(record["customTitle"])
                if record.get("type") == "summary" and isinstance(record.get("summary"), str):
                    summary_by_leaf[as_str(record.get("leafUuid"))] = record["summary"]
            plan.records.append(
                PlannedRecord(index, record_key, parent_key, _entry(record, summaries), created)
            )
        if titles:
            plan.title = titles[-1]
        elif summary_by_leaf:
            plan.title = summary_by_leaf.get(plan.leaf or "", list(summary_by_leaf.values())[-1])
        return plan


FORMAT = ClaudeCodeFormat()
