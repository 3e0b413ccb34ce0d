"""Context messages as Anthropic Messages parameters (``system`` and ``messages``).

- Every system message goes to the top-level ``system`` (text blocks, in order, after
  the ``system=`` text if given): the Messages API takes instructions there.
- Blocks pass through: text, image, thinking (only with a signature: the API refuses
  unsigned thinking), and any type cas-journal does not know (documents, server tools
  ...), which are Anthropic's own. Empty text blocks are left out (the API refuses them).
- A tool call made through the tool fields becomes a ``tool_use`` block (its arguments
  must be a JSON object); a ``tool`` message becomes a ``tool_result`` block.
- Consecutive messages of one role are merged into one message (the API merges them
  anyway), tool results first in a user message, as the API requires. A message left
  with no content is left out.

A call whose arguments are not a JSON object raises ``ProviderFormatError``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Literal, NotRequired, TypedDict, cast

from ..journal import Message
from ..journal.content import TEXT, THINKING, ContentBlock
from .turns import Call, ProviderFormatError, Turn, text_blocks, to_turns, unsupported

if TYPE_CHECKING:
    from anthropic.types import (
        AssistantMessageParam,
        ContentBlockParam,
        MessageParam,
        TextBlockParam,
        ToolResultBlockParam,
        UserMessageParam,
    )

PROVIDER = "Anthropic Messages"


class AnthropicRequest(TypedDict):
    """The context part of ``client.messages.create(**request, model=..., max_tokens=...)``."""

    messages: list[MessageParam]
    system: NotRequired[list[TextBlockParam]]


def _block(block: ContentBlock) -> ContentBlockParam | None:
    """A stored block as an Anthropic block param; None for blocks the API refuses."""
    kind = block.get("type")
    if kind == TEXT and not block.get("text"):
        return None
    if kind == THINKING and not block.get("signature"):
        return None
    return cast("ContentBlockParam", block)


def _call(call: Call, entry_id: str) -> ContentBlockParam:
    if call.input is None:
        raise ProviderFormatError(
            f"tool call {call.id!r} of entry {entry_id or '?'} has arguments that are not a "
            f"JSON object ({call.arguments[:60]!r}); Anthropic needs an object"
        )
    return {"type": "tool_use", "id": call.id, "name": call.name, "input": call.input}


def _result(turn: Turn) -> ToolResultBlockParam:
    block: ToolResultBlockParam = {"type": "tool_result", "tool_use_id": turn.call_id}
    if isinstance(turn.content, str):
        block["content"] = turn.content
    else:
        kept = [b for b in map(_block, turn.content) if b is not None]
        block["content"] = cast("list[TextBlockParam]", kept)
    if turn.is_error:
        block["is_error"] = True
    return block


def _blocks(turn: Turn) -> list[ContentBlockParam]:
    if turn.role == "tool":
        return [_result(turn)]
    if turn.role == "user":
        return [b for b in map(_block, text_blocks(turn.content)) if b is not None]
    out: list[ContentBlockParam] = []
    for part in turn.parts:
        block = _call(part, turn.entry_id) if isinstance(part, Call) else _block(part)
        if block is not None:
            out.append(block)
    return out


def _system_blocks(turn: Turn) -> list[TextBlockParam]:
    blocks: list[TextBlockParam] = []
    for block in text_blocks(turn.content):
        if block.get("type") != TEXT:
            raise unsupported(block, f"{PROVIDER} system", turn.entry_id)
        if block["text"]:
            blocks.append(cast("TextBlockParam", block))
    return blocks


def to_anthropic(messages: Sequence[Message], system: str = "") -> AnthropicRequest:
    """``system`` and ``messages`` for ``client.messages.create`` for a context."""
    system_blocks: list[TextBlockParam] = [{"type": "text", "text": system}] if system else []
    grouped: list[tuple[Literal["user", "assistant"], list[ContentBlockParam], Turn]] = []
    for turn in to_turns(messages):
        if turn.role == "system":
            system_blocks.extend(_system_blocks(turn))
            continue
        role: Literal["user", "assistant"] = "assistant" if turn.role == "assistant" else "user"
        blocks = _blocks(turn)
        if not blocks:
            continue
        if grouped and grouped[-1][0] == role:
            grouped[-1][1].extend(blocks)
        else:
            grouped.append((role, blocks, turn))
    out: list[MessageParam] = []
    for role, blocks, first in grouped:
        sole_text = len(blocks) == 1 and first.role == "user" and isinstance(first.content, str)
        content: str | list[ContentBlockParam] = (
            str(first.content) if sole_text and blocks[0].get("type") == TEXT else blocks
        )
        if role == "user":
            user: UserMessageParam = {"role": "user", "content": content}
            out.append(user)
        else:
            assistant: AssistantMessageParam = {"role": "assistant", "content": content}
            out.append(assistant)
    request: AnthropicRequest = {"messages": out}
    if system_blocks:
        request["system"] = system_blocks
    return request
