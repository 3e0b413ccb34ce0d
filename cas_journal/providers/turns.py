"""Context messages as provider-neutral turns, with every tool call paired to its result.

``to_turns`` reads the messages ``build_context`` returns and gives one ``Turn`` per
system, user, assistant or tool-result step, in order:

- an assistant message's parts are its content blocks and its tool calls (the tool
  fields become a call after the content; ``tool_use`` blocks stay where they are);
  consecutive assistant messages are merged into one turn while they make calls, so
  that every call of a turn comes before the results;
- a ``tool`` message is one result; each ``tool_result`` block of a user message is one
  result, placed before the rest of that message (which becomes a user turn);
- ``reasoning`` is not carried: no provider accepts plain reasoning text as input.

The pairing is checked: every result must answer a call of the assistant turn before
it, and every call must be answered before the next user, system or assistant turn
(and before the context ends). Anything else raises ``ProviderFormatError`` naming the
call and the entry, as does a message of a role no provider knows.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from ..errors import InvalidInputError
from ..journal import Message, Role
from ..journal.content import TEXT, THINKING, TOOL_RESULT, TOOL_USE, ContentBlock


class ProviderFormatError(InvalidInputError):
    """A context cannot be expressed in a provider's format (unpaired tool call, a block
    the provider has no form for, an unknown role)."""


@dataclass(frozen=True)
class Call:
    """One tool call: ``arguments`` as the JSON string recorded, ``input`` parsed (None
    when the arguments are not a JSON object)."""

    id: str
    name: str
    arguments: str
    input: dict[str, object] | None


Part = ContentBlock | Call
"""One piece of an assistant turn: a content block (not tool_use) or a tool call."""


@dataclass
class Turn:
    """One step of a conversation in provider-neutral form."""

    role: Literal["system", "user", "assistant", "tool"]
    content: str | list[ContentBlock] = ""
    """System, user and tool turns: the content (a tool turn's is the result's)."""
    parts: list[Part] = field(default_factory=list)
    """Assistant turns: content blocks and calls, in order."""
    call_id: str = ""
    """Tool turns: the call answered."""
    is_error: bool = False
    """Tool turns: whether the tool reported an error."""
    entry_id: str = ""
    """The journal entry this turn came from (the first one, for a merged turn)."""

    def calls(self) -> list[Call]:
        """The tool calls of an assistant turn."""
        return [part for part in self.parts if isinstance(part, Call)]


def text_blocks(content: str | list[ContentBlock]) -> list[ContentBlock]:
    """A content as blocks (a non-empty string is one text block)."""
    if isinstance(content, str):
        return [{"type": TEXT, "text": content}] if content else []
    return content


def parse_arguments(arguments: str) -> dict[str, object] | None:
    """A call's JSON arguments as a dict ("" counts as ``{}``); None if not a JSON object."""
    try:
        value = json.loads(arguments or "{}")
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _assistant_parts(message: Message) -> list[Part]:
    parts: list[Part] = []
    for block in text_blocks(message.content):
        if block.get("type") == TOOL_USE:
            given = block["input"]
            assert isinstance(given, dict)
            arguments = json.dumps(given, ensure_ascii=False)
            parts.append(Call(str(block["id"]), str(block["name"]), arguments, dict(given)))
        else:
            parts.append(block)
    if message.tool_call_id or message.tool_name:
        parsed = parse_arguments(message.tool_args)
        parts.append(Call(message.tool_call_id, message.tool_name, message.tool_args, parsed))
    return parts


def _split_user(message: Message) -> list[Turn]:
    if isinstance(message.content, str):
        return [Turn("user", message.content, entry_id=message.entry_id)]
    turns: list[Turn] = []
    rest: list[ContentBlock] = []
    for block in message.content:
        if block.get("type") != TOOL_RESULT:
            rest.append(block)
            continue
        inner = block.get("content", "")
        turns.append(
            Turn(
                "tool",
                [item for item in inner if isinstance(item, dict)]
                if isinstance(inner, list)
                else str(inner),
                call_id=str(block["tool_use_id"]),
                is_error=block.get("is_error") is True,
                entry_id=message.entry_id,
            )
        )
    if rest or not turns:
        turns.append(Turn("user", rest, entry_id=message.entry_id))
    return turns


def _turns_of(message: Message) -> list[Turn]:
    role = message.role
    if role == Role.SYSTEM:
        return [Turn("system", message.content, entry_id=message.entry_id)]
    if role == Role.USER:
        return _split_user(message)
    if role == Role.ASSISTANT:
        return [Turn("assistant", parts=_assistant_parts(message), entry_id=message.entry_id)]
    if role == Role.TOOL:
        return [
            Turn("tool", message.content, call_id=message.tool_call_id, entry_id=message.entry_id)
        ]
    raise ProviderFormatError(
        f"message of entry {message.entry_id or '?'} has role {role!r}; providers know "
        "system, user, assistant and tool"
    )


def to_turns(messages: Sequence[Message]) -> list[Turn]:
    """The turns of a context, calls merged and pairing checked (see the module doc)."""
    turns: list[Turn] = []
    open_calls: dict[str, Call] = {}
    answered: set[str] = set()
    answering = False  # a result of the open calls was seen
    for message in messages:
        for turn in _turns_of(message):
            if turn.role == "tool":
                if turn.call_id not in open_calls:
                    why = (
                        "which was answered already"
                        if turn.call_id in answered
                        else "which no assistant message before it makes"
                    )
                    raise ProviderFormatError(
                        f"the tool result of entry {turn.entry_id or '?'} answers call "
                        f"{turn.call_id!r}, {why}"
                    )
                del open_calls[turn.call_id]
                answered.add(turn.call_id)
                answering = True
                turns.append(turn)
                continue
            if turn.role == "assistant" and open_calls and not answering:
                _open(turn.calls(), open_calls, turn.entry_id)
                turns[-1].parts.extend(turn.parts)  # calls, then more: one assistant turn
                continue
            _require_answered(open_calls, turn)
            answering = False
            if turn.role == "assistant":
                _open(turn.calls(), open_calls, turn.entry_id)
            turns.append(turn)
    if open_calls:
        _require_answered(open_calls, None)
    return turns


def _open(calls: list[Call], open_calls: dict[str, Call], entry: str) -> None:
    for call in calls:
        if not call.id or not call.name:
            raise ProviderFormatError(
                f"a tool call of entry {entry or '?'} has no id or no name; providers need both"
            )
        if call.id in open_calls:
            raise ProviderFormatError(
                f"tool call id {call.id!r} of entry {entry or '?'} is already waiting for "
                "its result; a result could not tell the two calls apart"
            )
        open_calls[call.id] = call


def _require_answered(open_calls: dict[str, Call], turn: Turn | None) -> None:
    if not open_calls:
        return
    call = next(iter(open_calls.values()))
    where = f"before the {turn.role} message of entry {turn.entry_id or '?'}" if turn else ""
    raise ProviderFormatError(
        f"tool call {call.id!r} ({call.name}) has no result {where}".rstrip()
        + "; append its tool result (an error result if it never ran) first"
    )


def image_url(block: ContentBlock) -> str:
    """An image block's source as a URL (a ``data:`` URL for base64 data)."""
    source = block.get("source")
    assert isinstance(source, dict)
    if source.get("type") == "base64":
        return f"data:{source['media_type']};base64,{source['data']}"
    if source.get("type") == "url":
        return str(source["url"])
    raise ProviderFormatError(f"image source of type {source.get('type')!r} has no URL form")


def unsupported(block: ContentBlock, provider: str, entry_id: str) -> ProviderFormatError:
    """The error for a block a provider format cannot carry."""
    return ProviderFormatError(
        f"{provider} has no form for a {block.get('type')!r} block here (entry {entry_id or '?'})"
    )


REASONING_BLOCKS = frozenset({THINKING, "redacted_thinking"})
"""Reasoning blocks: OpenAI formats do not take them back as input."""
