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
from ..objects.canonical import parse_json
from .models import Entry

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
_PLAIN_VALUES = frozenset({str, int, bool, type(None)})


def payload_dict(entry: Entry) -> dict[str, Any]:
    """The payload fields of an entry as a plain dict (``type`` always present).

    Fields equal to their (empty or zero) default are left out, recursively; a nested
    model that is present is kept even when all its fields are empty. This is exactly
    ``entry.model_dump(mode="json", exclude_defaults=True)`` of the payload fields
    (``reference_payload_dict``; a property test compares the two), built here from the
    fields the entry has set (a field never set holds its default), with nested models
    dumped by their own serializers: it runs once per appended entry.
    """
    if type(entry) is not Entry:
        return reference_payload_dict(entry)
    fields = entry.__dict__
    defaults = _DEFAULTS
    out: dict[str, Any] = {}
    for name in entry.__pydantic_fields_set__:
        default = defaults.get(name, _MISSING)
        if default is _MISSING:  # a node field, or one with a default factory
            if name in _NODE_FIELD_SET:
                continue
            return reference_payload_dict(entry)
        value = fields[name]
        if value is default:
            continue
        kind = type(value)
        if kind in _PLAIN_VALUES or isinstance(value, Enum):
            if value == default:
                continue
            out[name] = value if kind in _PLAIN_VALUES else value.value
        elif isinstance(value, BaseModel) and default is None:  # (never equal to None)
            out[name] = kind.__pydantic_serializer__.to_python(
                value, mode="json", exclude_defaults=True
            )
        else:
            return reference_payload_dict(entry)
    out["type"] = entry.type.value
    return out


_MISSING: Any = object()


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
    return canonical_json(payload_dict(entry))


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
