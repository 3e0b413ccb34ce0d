"""Entries rendered like a chat transcript: who spoke, when, and everything they said.

One entry becomes a header line (role or entry type, short id, time, turn) followed by
its full text indented by four spaces: message content, reasoning, a tool call's name
and pretty-printed arguments, a tool result, a turn marker, a compaction summary, an
error. Nothing is cut. Control characters are escaped (a transcript must not drive the
terminal); colour is added only when stdout is a terminal (``output.paint``).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from .output import human_time, paint, printable, short

if TYPE_CHECKING:
    from ..journal import Entry, Message

INDENT = "    "
ROLE_COLOURS = {"user": "green", "assistant": "cyan", "tool": "yellow", "system": "magenta"}
"""The colour of each speaker's header on a terminal."""


def _lines(text: str) -> Iterator[str]:
    """Text as indented, printable lines (blank lines kept)."""
    for line in text.splitlines() or [""]:
        yield (INDENT + printable(line)).rstrip()


def pretty_arguments(arguments: str) -> str:
    """Tool arguments as indented JSON when they parse, else as given."""
    try:
        parsed = json.loads(arguments)
    except ValueError:
        return arguments
    return json.dumps(parsed, indent=2, ensure_ascii=False)


def block_text(block: Any) -> str:
    """The words of one content block (text, tool use, tool result, anything else)."""
    if isinstance(block, str):
        return block
    if not isinstance(block, dict):
        return json.dumps(block, ensure_ascii=False, default=str)
    if isinstance(block.get("text"), str):
        return str(block["text"])
    if block.get("type") == "tool_use":
        arguments = json.dumps(block.get("input", {}), indent=2, ensure_ascii=False)
        return f"{block.get('name', '?')} {arguments}"
    if block.get("type") == "tool_result":
        inner = block.get("content")
        if isinstance(inner, list):
            return "\n".join(block_text(item) for item in inner)
        return str(inner if inner is not None else "")
    return json.dumps(block, indent=2, ensure_ascii=False, default=str)


def content_text(content: Any) -> str:
    """A message's content as text: a string as is, a list of blocks block by block."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(block_text(block) for block in content)
    if content is None:
        return ""
    return json.dumps(content, indent=2, ensure_ascii=False, default=str)


def speaker(entry: Entry) -> str:
    """Who an entry is from: the message role (with the tool it calls or answers), or the
    entry type for entries without a message."""
    message = entry.message
    if message is None:
        return entry.type.value
    role = message.role or "message"
    calls = [call.name for call in message.tool_calls() if call.name]
    if calls:
        return f"{role} -> {', '.join(calls)}"
    if role == "tool" and message.tool_name:
        return f"tool {message.tool_name}"
    return role


def header(entry: Entry) -> str:
    """``<speaker>  <short id>  <time>  turn <turn>`` (the speaker coloured on a terminal)."""
    role = entry.message.role if entry.message is not None else ""
    who = paint(printable(speaker(entry)), fg=ROLE_COLOURS.get(role, "white"), bold=True)
    parts = [who, paint(short(entry.id), fg="yellow"), human_time(entry.created_at)]
    if entry.turn_id:
        parts.append(printable(f"turn {entry.turn_id}"))
    return "  ".join(parts)


def _message_body(entry: Entry, message: Message) -> Iterator[str]:
    if message.reasoning:
        for line in _lines(message.reasoning):
            yield paint(line, dim=True)
    text = content_text(message.content)
    if text:
        yield from _lines(text)
    if entry.type == "tool_call" and (message.tool_args or message.tool_call_id):
        if message.tool_args:
            yield from _lines(pretty_arguments(message.tool_args))
        if message.tool_call_id:
            yield paint(printable(f"{INDENT}(call {message.tool_call_id})"), dim=True)
    elif message.role == "tool" and message.tool_call_id:
        yield paint(printable(f"{INDENT}(answers call {message.tool_call_id})"), dim=True)
    view = message.tool_result
    if view is not None and view.truncated:
        note = (
            f"(truncated: {view.visible_bytes} of {view.original_bytes} bytes shown"
            + (
                f"; full output: {view.full_output.url or view.full_output.id}"
                if view.full_output
                else ""
            )
            + ")"
        )
        yield paint(printable(INDENT + note), dim=True)


def render(entry: Entry) -> Iterator[str]:
    """The lines of one entry: its header, then everything it says, indented."""
    yield header(entry)
    message = entry.message
    if message is not None:
        yield from _message_body(entry, message)
    if entry.turn_status is not None:
        yield INDENT + f"turn {entry.turn_status.value}"
    if entry.summary:
        yield from _lines(entry.summary)
    if entry.error:
        for line in _lines(entry.error):
            yield paint(line, fg="red")
    if entry.model or entry.provider:
        yield INDENT + printable(" ".join(part for part in (entry.provider, entry.model) if part))
    if entry.metadata and message is None:
        text = json.dumps(entry.metadata, indent=2, sort_keys=True, ensure_ascii=False)
        yield from _lines(text)


def transcript(entries: Iterator[Entry] | list[Entry]) -> Iterator[str]:
    """Entries one after the other, separated by blank lines."""
    for index, entry in enumerate(entries):
        if index:
            yield ""
        yield from render(entry)
