"""Codex CLI rollout files (``~/.codex/sessions/YYYY/MM/DD/rollout-<time>-<id>.jsonl``).

Each line is ``{"timestamp": ..., "type": ..., "payload": {...}}``; the first is a
``session_meta`` whose payload holds the session ``id`` (and ``forked_from_id`` for a
fork). Then ``response_item`` (what the model saw and said: messages, reasoning,
function calls and their outputs), ``event_msg`` (UI events), ``turn_context`` and
``compacted`` (a compaction: the summary ``message`` and, in newer versions, the
``replacement_history`` that replaced the conversation).

Mapping (every line becomes one entry and keeps its whole JSON; see docs/transcripts.md):

* the thread is ``codex/<session id>``; the lines form one chain, in file order;
* a fork copies its source's history (with fresh line timestamps) after its own
  ``session_meta``: the copied lines that match the source's path share the source's
  entries (a fork in the journal: ``forked_from_thread_id``/``forked_from_entry_id``),
  the fork's own ``session_meta`` follows them, and the rewritten timestamps are kept
  in the fork's manifest;
* user / assistant ``message`` -> user_message / assistant_message (developer and
  system messages -> custom); ``function_call``, ``custom_tool_call`` and
  ``local_shell_call`` -> tool_call; their outputs -> tool_result; ``compacted`` -> a
  compaction entry carrying the summary; everything else -> custom.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any

from ..journal import CompactionResult, Entry, Message
from ..journal.helpers import compaction_entry
from .plan import (
    EPOCH,
    PlannedRecord,
    SessionPlan,
    as_str,
    custom_entry,
    find_jsonl,
    json_args,
    message_entry,
    parse_timestamp,
    text_of,
)
from .source import SourceFile

NAME = "codex"
CALLS = {"function_call": "arguments", "custom_tool_call": "input", "local_shell_call": "action"}
OUTPUTS = ("function_call_output", "custom_tool_call_output")


def _output_text(output: Any) -> str:
    while isinstance(output, dict):
        output = output.get("content")
    if isinstance(output, str):
        return output
    return text_of(output)


def _response_entry(payload: dict[str, Any]) -> Entry:
    kind = payload.get("type")
    if kind == "message":
        role = payload.get("role")
        text = text_of(payload.get("content"))
        if role in ("user", "assistant"):
            return message_entry(Message(role=str(role), content=text))
        return custom_entry().model_copy(update={"message": Message(role="system", content=text)})
    if isinstance(kind, str) and kind in CALLS:
        call_id = as_str(payload.get("call_id")) or as_str(payload.get("id"))
        name = as_str(payload.get("name")) or ("shell" if kind == "local_shell_call" else "")
        return message_entry(
            Message(
                role="assistant",
                tool_call_id=call_id,
                tool_name=name or kind,
                tool_args=json_args(payload.get(CALLS[kind])),
            )
        )
    if kind in OUTPUTS:
        return message_entry(
            Message(
                role="tool",
                tool_call_id=as_str(payload.get("call_id")),
                content=_output_text(payload.get("output")),
            )
        )
    if kind == "reasoning":
        summary = text_of(payload.get("summary"), kinds=("summary_text",))
        return custom_entry().model_copy(
            update={"message": Message(role="assistant", reasoning=summary)}
        )
    return custom_entry()


def _entry(record: dict[str, Any], index: int) -> Entry:
    payload = record.get("payload")
    if not isinstance(payload, dict):
        return custom_entry()
    kind = record.get("type")
    if kind == "response_item":
        return _response_entry(payload)
    if kind == "compacted":
        return compaction_entry(
            CompactionResult(
                compaction_id=f"line-{index + 1}",
                summary=as_str(payload.get("message")),
                trigger="codex",
            )
        )
    return custom_entry()


class CodexFormat:
    """Codex CLI rollout JSONL."""

    name = NAME

    def find_sessions(self, root: Path) -> list[Path]:
        """Every ``*.jsonl`` under the directory."""
        return find_jsonl(root)

    def plan(self, source: SourceFile) -> SessionPlan:
        """Map a rollout onto a chain of entries."""
        first = source.lines[0]
        meta = first.record.get("payload")
        if first.record.get("type") != "session_meta" or not isinstance(meta, dict):
            raise source.error(
                first.number, "not a Codex rollout: the first record is no session_meta"
            )
        session_id = meta.get("id")
        if not isinstance(session_id, str) or not session_id:
            raise source.error(first.number, "session_meta has no session id")
        plan = SessionPlan(format=NAME, source=source, session_key=session_id)
        forked = meta.get("forked_from_id")
        if isinstance(forked, str) and forked and forked != session_id:
            plan.fork_of = forked
            plan.fork_header = 0
            plan.fork_ignore = ("timestamp",)
        plan.created_at = parse_timestamp(meta.get("timestamp") or first.record.get("timestamp"))
        last_time: datetime = plan.created_at if plan.created_at != EPOCH else EPOCH
        previous: str | None = None
        for index, line in enumerate(source.lines):
            created = parse_timestamp(line.record.get("timestamp"), last_time)
            last_time = created
            key = f"#{index}"
            plan.records.append(
                PlannedRecord(index, key, previous, _entry(line.record, index), created)
            )
            previous = key
        plan.leaf = previous
        return plan


FORMAT = CodexFormat()
