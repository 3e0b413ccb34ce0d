"""The kinds of stored objects. The kind tag is part of every object id."""

from __future__ import annotations

from enum import StrEnum


class Kind(StrEnum):
    """What an object is. Two objects of different kinds never share an id."""

    BLOB = "blob"
    """Opaque bytes: an entry payload, a checkpoint message, a system prompt, a dictionary."""
    ENTRY = "entry"
    """One node of a journal tree: parent, payload, turn id, created_at, depth, skip."""
    THREAD = "thread"
    """A thread state: metadata, leaf, branch heads and the previous state(s)."""
    CHECKPOINT = "checkpoint"
    """One saved iteration of a run: metadata plus the object that spells its message list
    (a segment, or the last node of a message chain)."""
    MESSAGE = "message"
    """One link of a checkpoint's message chain: parent node and message blob (how runs
    saved messages before segments; still read, and still written by integrations)."""
    TREE = "tree"
    """A generic structure for integrations: named, typed references plus inline data."""
    SEGMENT = "segment"
    """A checkpoint's message list as one object: a kept prefix of an older list (a
    segment or a message chain) plus the messages one save added, inline."""


KINDS_BY_TAG: dict[bytes, Kind] = {kind.value.encode("ascii"): kind for kind in Kind}
