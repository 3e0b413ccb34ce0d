"""Message content blocks: the list form of ``Message.content``.

A message's content is either a string or a list of content blocks. A block is a JSON
object with a string ``type``. The shapes cas-journal understands are those of the
Anthropic Messages API:

- ``{"type": "text", "text": str}``
- ``{"type": "image", "source": {"type": "base64", "media_type": str, "data": str}}``
  or ``{"type": "image", "source": {"type": "url", "url": str}}``
- ``{"type": "tool_use", "id": str, "name": str, "input": {...}}``: a tool call; an
  assistant message may hold several
- ``{"type": "tool_result", "tool_use_id": str, "content": str | [text and image
  blocks], "is_error": bool}``: a tool's answer; a user message may hold several
- ``{"type": "thinking", "thinking": str, "signature": str}``

A block of one of these types must have the fields shown with the types shown
(``tool_result.content``, ``is_error`` and ``thinking.signature`` are optional), else the
message is refused with a ``ValueError``. A block of any other type (a document, a
server tool's result ...) is stored as given; a provider conversion that cannot express
it refuses it. Every block comes back exactly as given, extra keys included (storage
sorts keys, nothing else).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import NamedTuple

from pydantic import JsonValue

ContentBlock = dict[str, JsonValue]
"""One content block: a JSON object with a string ``type``."""

TEXT = "text"
IMAGE = "image"
TOOL_USE = "tool_use"
TOOL_RESULT = "tool_result"
THINKING = "thinking"

_IMAGE_SOURCES = {"base64": ("media_type", "data"), "url": ("url",)}


class ToolCall(NamedTuple):
    """One tool call of an assistant message, whichever way it was written."""

    id: str
    name: str
    arguments: str
    """The arguments as a JSON string (``tool_args``, or a ``tool_use`` block's input)."""


def _require_str(block: ContentBlock, field: str, where: str, non_empty: bool = False) -> None:
    value = block.get(field)
    if not isinstance(value, str) or (non_empty and not value):
        kind = "a non-empty string" if non_empty else "a string"
        raise ValueError(f"{where}: {field!r} must be {kind}")


def _check_image(block: ContentBlock, where: str) -> None:
    source = block.get("source")
    if not isinstance(source, dict) or not isinstance(source.get("type"), str):
        raise ValueError(f"{where}: 'source' must be an object with a string 'type'")
    for field in _IMAGE_SOURCES.get(str(source["type"]), ()):
        if not isinstance(source.get(field), str):
            raise ValueError(f"{where}: a {source['type']} source needs a string {field!r}")


def _check_block(block: object, where: str, nested: bool = False) -> None:
    if not isinstance(block, dict) or not isinstance(block.get("type"), str) or not block["type"]:
        raise ValueError(f"{where}: a content block must be an object with a non-empty 'type'")
    kind = block["type"]
    where = f"{where} ({kind})"
    if nested and kind not in (TEXT, IMAGE):
        raise ValueError(f"{where}: a tool_result may only contain text and image blocks")
    if kind == TEXT:
        _require_str(block, "text", where)
    elif kind == IMAGE:
        _check_image(block, where)
    elif kind == TOOL_USE:
        _require_str(block, "id", where, non_empty=True)
        _require_str(block, "name", where, non_empty=True)
        if not isinstance(block.get("input"), dict):
            raise ValueError(f"{where}: 'input' must be a JSON object")
    elif kind == TOOL_RESULT:
        _require_str(block, "tool_use_id", where, non_empty=True)
        inner = block.get("content", "")
        if isinstance(inner, list):
            for i, item in enumerate(inner):
                _check_block(item, f"{where} content block {i}", nested=True)
        elif not isinstance(inner, str):
            raise ValueError(f"{where}: 'content' must be a string or a list of blocks")
        if not isinstance(block.get("is_error", False), bool):
            raise ValueError(f"{where}: 'is_error' must be a boolean")
    elif kind == THINKING:
        _require_str(block, "thinking", where)
        if not isinstance(block.get("signature", ""), str):
            raise ValueError(f"{where}: 'signature' must be a string")


def check_content(content: str | list[ContentBlock]) -> str | list[ContentBlock]:
    """Validate a message's content (see the module docstring); return it unchanged."""
    if isinstance(content, list):
        for i, block in enumerate(content):
            _check_block(block, f"content block {i}")
    return content


def content_text(content: str | Sequence[ContentBlock]) -> str:
    """The words of a content: the string itself, or its text blocks joined by newlines."""
    if isinstance(content, str):
        return content
    return "\n".join(str(block["text"]) for block in content if block.get("type") == TEXT)


def block_tool_calls(content: str | Sequence[ContentBlock]) -> list[ToolCall]:
    """The ``tool_use`` blocks of a content, in order."""
    if isinstance(content, str):
        return []
    return [
        ToolCall(str(block["id"]), str(block["name"]), json.dumps(block["input"]))
        for block in content
        if block.get("type") == TOOL_USE
    ]
