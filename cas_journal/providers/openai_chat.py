"""Context messages as OpenAI Chat Completions ``messages``.

- System messages stay where they are, as ``system`` messages; ``system=`` adds one first.
- User content: a string stays a string; text and image blocks become ``text`` and
  ``image_url`` parts (base64 images as ``data:`` URLs).
- An assistant turn is one ``assistant`` message: its text (a string, or text parts when
  it has several blocks) and its tool calls as ``tool_calls`` (function calls with the
  JSON arguments as recorded). Thinking blocks are left out (the API takes no
  reasoning input).
- Each tool result is one ``tool`` message (text only; ``is_error`` has no field here).

Anything else (an image in a tool result, a block type Chat Completions does not know)
raises ``ProviderFormatError``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from ..journal import Message
from ..journal.content import IMAGE, TEXT, ContentBlock
from .turns import REASONING_BLOCKS, Call, Turn, image_url, to_turns, unsupported

if TYPE_CHECKING:
    from openai.types.chat import (
        ChatCompletionAssistantMessageParam,
        ChatCompletionContentPartParam,
        ChatCompletionContentPartTextParam,
        ChatCompletionMessageFunctionToolCallParam,
        ChatCompletionMessageParam,
    )

PROVIDER = "OpenAI Chat Completions"


def _text_parts(
    content: str | list[ContentBlock], entry_id: str
) -> str | list[ChatCompletionContentPartTextParam]:
    if isinstance(content, str):
        return content
    parts: list[ChatCompletionContentPartTextParam] = []
    for block in content:
        if block.get("type") != TEXT:
            raise unsupported(block, PROVIDER, entry_id)
        parts.append({"type": "text", "text": str(block["text"])})
    return parts


def _user_parts(
    content: str | list[ContentBlock], entry_id: str
) -> str | list[ChatCompletionContentPartParam]:
    if isinstance(content, str):
        return content
    parts: list[ChatCompletionContentPartParam] = []
    for block in content:
        if block.get("type") == TEXT:
            parts.append({"type": "text", "text": str(block["text"])})
        elif block.get("type") == IMAGE:
            parts.append({"type": "image_url", "image_url": {"url": image_url(block)}})
        else:
            raise unsupported(block, PROVIDER, entry_id)
    return parts


def _assistant(turn: Turn) -> ChatCompletionMessageParam:
    texts: list[ChatCompletionContentPartTextParam] = []
    calls: list[ChatCompletionMessageFunctionToolCallParam] = []
    for part in turn.parts:
        if isinstance(part, Call):
            calls.append(
                {
                    "id": part.id,
                    "type": "function",
                    "function": {"name": part.name, "arguments": part.arguments or "{}"},
                }
            )
        elif part.get("type") == TEXT:
            texts.append({"type": "text", "text": str(part["text"])})
        elif part.get("type") not in REASONING_BLOCKS:
            raise unsupported(part, PROVIDER, turn.entry_id)
    message: ChatCompletionAssistantMessageParam = {"role": "assistant"}
    if len(texts) == 1:
        message["content"] = texts[0]["text"]
    elif texts or not calls:
        message["content"] = texts or ""
    if calls:
        message["tool_calls"] = calls
    return message


def to_openai_chat(
    messages: Sequence[Message], system: str = ""
) -> list[ChatCompletionMessageParam]:
    """The ``messages`` argument of ``client.chat.completions.create`` for a context."""
    out: list[ChatCompletionMessageParam] = []
    if system:
        out.append({"role": "system", "content": system})
    for turn in to_turns(messages):
        if turn.role == "system":
            out.append({"role": "system", "content": _text_parts(turn.content, turn.entry_id)})
        elif turn.role == "user":
            out.append({"role": "user", "content": _user_parts(turn.content, turn.entry_id)})
        elif turn.role == "assistant":
            out.append(_assistant(turn))
        else:
            out.append(
                {
                    "role": "tool",
                    "tool_call_id": turn.call_id,
                    "content": _text_parts(turn.content, turn.entry_id),
                }
            )
    return out
