"""Context messages as OpenAI Responses ``input`` items.

- System messages stay where they are, as ``system`` message items; ``system=`` adds
  one first (pass it as ``instructions`` instead if you prefer: the API accepts both).
- User content: a string stays a string; text and image blocks become ``input_text``
  and ``input_image`` parts (base64 images as ``data:`` URLs, detail ``auto``).
- Assistant turns become items in their own order: each text block an ``assistant``
  message item, each tool call a ``function_call`` item (arguments as recorded).
  Thinking blocks are left out (reasoning items need ids only OpenAI issues).
- Each tool result is a ``function_call_output`` item: a string, or ``input_text`` and
  ``input_image`` parts.

Anything else (a block type the Responses API does not know here) raises
``ProviderFormatError``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from ..journal import Message
from ..journal.content import IMAGE, TEXT, ContentBlock
from .turns import REASONING_BLOCKS, Call, Turn, image_url, to_turns, unsupported

if TYPE_CHECKING:
    from openai.types.responses import (
        ResponseFunctionCallOutputItemParam,
        ResponseInputContentParam,
        ResponseInputItemParam,
    )

PROVIDER = "OpenAI Responses"


def _input_parts(
    content: str | list[ContentBlock], entry_id: str, allow_images: bool = True
) -> str | list[ResponseInputContentParam]:
    if isinstance(content, str):
        return content
    parts: list[ResponseInputContentParam] = []
    for block in content:
        if block.get("type") == TEXT:
            parts.append({"type": "input_text", "text": str(block["text"])})
        elif block.get("type") == IMAGE and allow_images:
            parts.append({"type": "input_image", "image_url": image_url(block), "detail": "auto"})
        else:
            raise unsupported(block, PROVIDER, entry_id)
    return parts


def _output(
    content: str | list[ContentBlock], entry_id: str
) -> str | list[ResponseFunctionCallOutputItemParam]:
    if isinstance(content, str):
        return content
    parts: list[ResponseFunctionCallOutputItemParam] = []
    for block in content:
        if block.get("type") == TEXT:
            parts.append({"type": "input_text", "text": str(block["text"])})
        elif block.get("type") == IMAGE:
            parts.append({"type": "input_image", "image_url": image_url(block), "detail": "auto"})
        else:
            raise unsupported(block, PROVIDER, entry_id)
    return parts


def _assistant(turn: Turn) -> list[ResponseInputItemParam]:
    items: list[ResponseInputItemParam] = []
    for part in turn.parts:
        if isinstance(part, Call):
            items.append(
                {
                    "type": "function_call",
                    "call_id": part.id,
                    "name": part.name,
                    "arguments": part.arguments or "{}",
                }
            )
        elif part.get("type") == TEXT:
            if part["text"]:
                items.append({"type": "message", "role": "assistant", "content": str(part["text"])})
        elif part.get("type") not in REASONING_BLOCKS:
            raise unsupported(part, PROVIDER, turn.entry_id)
    return items


def to_openai_responses(
    messages: Sequence[Message], system: str = ""
) -> list[ResponseInputItemParam]:
    """The ``input`` argument of ``client.responses.create`` for a context."""
    out: list[ResponseInputItemParam] = []
    if system:
        out.append({"type": "message", "role": "system", "content": system})
    for turn in to_turns(messages):
        if turn.role == "system":
            content = _input_parts(turn.content, turn.entry_id, allow_images=False)
            out.append({"type": "message", "role": "system", "content": content})
        elif turn.role == "user":
            content = _input_parts(turn.content, turn.entry_id)
            out.append({"type": "message", "role": "user", "content": content})
        elif turn.role == "assistant":
            out.extend(_assistant(turn))
        else:
            out.append(
                {
                    "type": "function_call_output",
                    "call_id": turn.call_id,
                    "output": _output(turn.content, turn.entry_id),
                }
            )
    return out
