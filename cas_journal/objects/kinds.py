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
    """One saved iteration of a run: metadata plus the last node of its message chain."""
    MESSAGE = "message"
    """One link of a checkpoint's message chain: parent node and message blob."""
    TREE = "tree"
    """A generic structure for integrations: named, typed references plus inline data."""


KINDS_BY_TAG: dict[bytes, Kind] = {kind.value.encode("ascii"): kind for kind in Kind}
