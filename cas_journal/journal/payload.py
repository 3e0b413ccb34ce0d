"""Entry payloads: the canonical JSON (``raw``) of what an entry says, and back.

The payload holds everything about an entry except where it sits in the tree (parent,
depth), when it was written, its turn and its thread: identical payloads are stored once
across all threads and runs. ``raw_hash`` is the oid of the payload blob. The model's own
optional fields are omitted when empty or zero; user-supplied maps (``metadata``) come
back exactly as given, empty strings included.
"""

from __future__ import annotations

from enum import Enum
from typing import Any

import blake3
from pydantic import BaseModel, ValidationError

from ..errors import CorruptObject
from ..objects import Kind, canonical_json, object_id
from ..objects.canonical import canonical_json_of_plain, parse_json
from .models import Entry, Message

NODE_FIELDS = frozenset(
    {"id", "thread_id", "parent_id", "turn_id", "created_at", "raw", "raw_hash"}
)
"""Entry fields that live in the entry node (or are derived), not in the payload."""
_NODE_FIELD_SET = set(NODE_FIELDS)
PAYLOAD_FIELDS = tuple(name for name in Entry.model_fields if name not in NODE_FIELDS)
_PAYLOAD_FIELD_SET = frozenset(PAYLOAD_FIELDS)


def _is_empty(value: Any) -> bool:
    return value is None or value is False or value in ("", 0, [], {})


def compact_model(model: BaseModel) -> dict[str, Any]:
    """A model as a plain dict without its empty optional fields (nested models kept)."""
    out: dict[str, Any] = {}
    for name in type(model).model_fields:
        value = getattr(model, name)
        if isinstance(value, BaseModel):
            out[name] = compact_model(value)
        elif not _is_empty(value):
            out[name] = _plain(value)
    return out


def _plain(value: Any) -> Any:
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, list):
        return [_plain(item) for item in value]
    if isinstance(value, dict):
        return {key: _plain(item) for key, item in value.items()}
    return value


_DEFAULTS = {
    name: field.default
    for name, field in Entry.model_fields.items()
    if name not in NODE_FIELDS and field.default_factory is None
}
"""The payload fields with a plain default (those with a default factory go the long way)."""
_SERIALIZE = Entry.__pydantic_serializer__.to_python
_SERIALIZE_MESSAGE = Message.__pydantic_serializer__.to_python
_PLAIN_VALUES = frozenset({str, int, bool, type(None)})
_MISSING: Any = object()
_NOT_IN_LOOP = _NODE_FIELD_SET | {"type"}
"""Fields ``_payload`` does not look at one by one: the node fields, and ``type`` (always
written)."""
_STR_OR_INT = frozenset({str, int})
_MESSAGE_SHORT_WAY = all(
    field.default_factory is None
    and (
        (field.annotation is str and field.default == "")
        or (field.annotation is int and field.default == 0)
        or name in ("content", "tool_result")
    )
    for name, field in Message.model_fields.items()
)
_MESSAGE_SHORT_WAY = (
    _MESSAGE_SHORT_WAY
    and Message.model_fields["content"].default == ""
    and Message.model_fields["tool_result"].default is None
)
"""Every field of a message is a str defaulting to "" or an int defaulting to 0, besides
``content`` (a str defaulting to "", or a list) and ``tool_result`` (a model, or None):
then a message with a str content and no tool result dumps as its non-empty fields."""


def payload_dict(entry: Entry) -> dict[str, Any]:
    """The payload fields of an entry as a plain dict (``type`` always present).

    Fields equal to their (empty or zero) default are left out, recursively; a nested
    model that is present is kept even when all its fields are empty. This is exactly
    ``entry.model_dump(mode="json", exclude_defaults=True)`` of the payload fields
    (``reference_payload_dict``; a property test compares the two), built here from the
    fields the entry has set (a field never set holds its default), with a message of
    str and int fields taken as its non-empty ones and other nested models dumped by
    their own serializers: it runs once per appended entry.
    """
    return _payload(entry)[0]


def _payload(entry: Entry) -> tuple[dict[str, Any], bool]:
    """``payload_dict(entry)``, and True if it is known to hold only str, int, bool and
    None values and str-keyed dicts of them (so its canonical encoding needs no walk to
    look for floats or other types first)."""
    if type(entry) is not Entry:
        return reference_payload_dict(entry), False
    fields = entry.__dict__
    defaults = _DEFAULTS
    plain = True
    out: dict[str, Any] = {}
    for name in entry.__pydantic_fields_set__ - _NOT_IN_LOOP:
        default = defaults.get(name, _MISSING)
        if default is _MISSING:  # a field with a default factory
            return reference_payload_dict(entry), False
        value = fields[name]
        if value is default:
            continue
        kind = type(value)
        if kind in _PLAIN_VALUES:
            if value != default:
                out[name] = value
        elif isinstance(value, Enum):
            if value != default:
                out[name] = value._value_
                plain = plain and type(value._value_) in _PLAIN_VALUES
        elif kind is Message:  # (the default is None: never equal)
            message = value.__dict__
            if (
                _MESSAGE_SHORT_WAY
                and message["tool_result"] is None
                and type(message["content"]) is str
            ):
                # a field differs from its default ("" or 0) if it is not empty or zero
                out[name] = dumped = {key: item for key, item in message.items() if item}
                plain = plain and _STR_OR_INT.issuperset(map(type, dumped.values()))
            else:
                out[name] = _SERIALIZE_MESSAGE(value, mode="json", exclude_defaults=True)
                plain = False
        elif isinstance(value, BaseModel) and default is None:  # (never equal to None)
            out[name] = kind.__pydantic_serializer__.to_python(
                value, mode="json", exclude_defaults=True
            )
            plain = False
        else:
            return reference_payload_dict(entry), False
    type_value = entry.type._value_
    out["type"] = type_value
    return out, plain and type(type_value) is str


def reference_payload_dict(entry: Entry) -> dict[str, Any]:
    """``payload_dict`` through pydantic's generic dump (the reference; and the way for
    fields the short way does not handle)."""
    out: dict[str, Any] = _SERIALIZE(
        entry, mode="json", exclude_defaults=True, exclude=_NODE_FIELD_SET
    )
    out["type"] = entry.type.value
    return out


def payload_bytes(entry: Entry) -> bytes:
    """The canonical payload of an entry: the bytes of its payload blob."""
    fields, plain = _payload(entry)
    return canonical_json_of_plain(fields) if plain else canonical_json(fields)


def raw_for_entry(entry: Entry) -> str:
    """The canonical payload JSON of an entry (what ``Entry.raw`` holds)."""
    return payload_bytes(entry).decode("utf-8")


def stable_hash(text: str) -> str:
    """BLAKE3-256 hex of a string's UTF-8 bytes."""
    return blake3.blake3(text.encode("utf-8")).hexdigest()


def prepare_entry(entry: Entry) -> Entry:
    """The entry with ``raw`` (canonical payload JSON) and ``raw_hash`` (its blob oid) set."""
    raw = payload_bytes(entry)
    return entry.model_copy(
        update={"raw": raw.decode("utf-8"), "raw_hash": object_id(Kind.BLOB, raw)}
    )


def parse_payload(oid: str, body: bytes | str) -> dict[str, Any]:
    """Parse a payload blob into its fields; CorruptObject if it is not one (the field
    values are checked when the Entry is built, see ``EntryReader.build``)."""
    try:
        fields = canonical_fields(body)
    except (ValueError, TypeError) as exc:
        raise CorruptObject(f"entry payload is malformed: {exc}".splitlines()[0], oid) from exc
    return fields


def check_payload(oid: str, body: bytes) -> dict[str, Any]:
    """Parse and fully validate a payload from an untrusted source (an import)."""
    fields = parse_payload(oid, body)
    try:
        Entry.model_validate(fields)
    except ValidationError as exc:
        raise CorruptObject(f"entry payload is malformed: {exc}".splitlines()[0], oid) from exc
    return fields


def canonical_fields(body: bytes | str) -> dict[str, Any]:
    """Parse payload JSON into its field dict, refusing keys that are not payload fields."""
    fields = parse_json(body)
    if type(fields) is not dict or "type" not in fields:
        raise ValueError("payload is not an object with a type")
    if not _PAYLOAD_FIELD_SET.issuperset(fields):
        raise ValueError(f"payload has unknown fields {sorted(fields.keys() - _PAYLOAD_FIELD_SET)}")
    return fields
