"""A checkpoint's message chain, and the memo that makes saving it cost O(new messages).

A run's message list is stored as a chain of message nodes (each: the message blob and
the previous node). Saving iteration k+1 must not re-encode and re-hash the k messages it
shares with iteration k, so ``ChainMemo`` remembers, for the run's newest checkpoint,
each message's stored node and canonical bytes. A new list is compared with it position
by position and only the messages after the first difference are encoded.

The comparison is exact: the memo keeps each message as parsed back from its canonical
bytes (a copy nobody else holds) and a message matches only if it is ``==`` to that copy
(a C-speed comparison) and every number in it has the same type and, for zeros, the
same sign (``==`` alone says 1 == 1.0 == True and 0.0 == -0.0, which encode
differently). NaN never equals anything, so a NaN is always encoded, and refused.
Whatever does not match is simply encoded: a miss costs time, never correctness.

A memo is built from the stored chain when a process first saves or loads a run (one
read of the chain), so it survives reopening the store.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from ..backends import NewObject, ObjectStore
from ..errors import CorruptObject, InvalidInputError
from ..objects import Kind, MessageNode, canonical_json, object_id
from ..objects.canonical import parse_json

Path = tuple[str | int, ...]


def _numbers(value: Any) -> tuple[tuple[Path, type, bool], ...]:
    """Every number in a parsed JSON value: its path, exact type and, for a float, its
    sign bit (0.0 and -0.0 are equal but encode differently)."""
    found: list[tuple[Path, type, bool]] = []
    pending: list[tuple[Path, Any]] = [((), value)]
    while pending:
        path, current = pending.pop()
        kind = type(current)
        if kind is dict:
            pending.extend(((*path, key), item) for key, item in current.items())
        elif kind is list:
            pending.extend(((*path, index), item) for index, item in enumerate(current))
        elif kind is int or kind is bool:
            found.append((path, kind, False))
        elif kind is float:
            found.append((path, kind, math.copysign(1.0, current) < 0))
    return tuple(found)


@dataclass(slots=True)
class Link:
    """One stored message of a chain: its node, its canonical bytes and, once needed,
    the parsed copy (and the numbers in it) that new messages are compared with."""

    node: str
    body: bytes
    _copy: Any = None
    _numbers: tuple[tuple[Path, type, bool], ...] = ()

    def matches(self, message: Any) -> bool:
        """True if ``message`` encodes to exactly ``body`` (see the module docstring)."""
        if self._copy is None:
            self._copy = parse_json(self.body)
            self._numbers = _numbers(self._copy)
        if message != self._copy:
            return False
        for path, kind, negative in self._numbers:
            value: Any = message
            for step in path:
                value = value[step]
            if type(value) is not kind:
                return False
            if kind is float and (math.copysign(1.0, cast(float, value)) < 0) != negative:
                return False
        return True


@dataclass(slots=True)
class ChainMemo:
    """The chain of one checkpoint: ``links[i]`` is its message ``i``."""

    checkpoint: str | None
    """The checkpoint whose chain this is (None: the run has none yet)."""
    links: list[Link] = field(default_factory=list)
    prompt: str | None = None
    """The checkpoint's system prompt blob."""

    @property
    def weight(self) -> int:
        """Roughly the bytes this memo holds."""
        return sum(3 * len(link.body) + 200 for link in self.links)


@dataclass(slots=True)
class EncodedChain:
    """A message list as a chain: the links, and the objects not stored yet."""

    links: list[Link]
    objects: list[NewObject]
    shared: int
    """How many leading links came from the memo (already stored)."""

    @property
    def last(self) -> str | None:
        """The last node (what a checkpoint points at), None for no messages."""
        return self.links[-1].node if self.links else None


def encode_chain(messages: Sequence[Any], memo: ChainMemo) -> EncodedChain:
    """The chain of ``messages``, reusing the memo's links up to the first difference and
    encoding (once) only the messages after it."""
    for index, message in enumerate(messages):
        if not isinstance(message, dict):
            raise InvalidInputError(f"message {index} is not a JSON object")
    shared = 0
    old = memo.links
    while shared < len(old) and shared < len(messages) and old[shared].matches(messages[shared]):
        shared += 1
    links = old[:shared]
    parent = links[-1].node if links else None
    objects: list[NewObject] = []
    for message in messages[shared:]:
        body = canonical_json(message)
        blob = object_id(Kind.BLOB, body)
        node_body = MessageNode(blob, parent).body()
        parent = object_id(Kind.MESSAGE, node_body)
        objects += [NewObject(blob, Kind.BLOB, body), NewObject(parent, Kind.MESSAGE, node_body)]
        links.append(Link(parent, body))
    return EncodedChain(links, objects, shared)


def _get(objects: ObjectStore, oid: str, kind: Kind) -> bytes:
    found, body = objects.get(oid)
    if found is not kind:
        raise CorruptObject(f"expected a {kind.value}, found a {found.value}", oid)
    return body


def read_chain(objects: ObjectStore, last: str | None, count: int) -> list[Link]:
    """The links of the chain ending at ``last``, first message first; CorruptObject if
    the chain does not hold ``count`` messages or a message is not a JSON object."""
    nodes: list[tuple[str, str]] = []  # node oid, message blob oid, newest first
    current = last
    while current is not None:
        if len(nodes) >= count:
            raise CorruptObject(f"message chain is longer than the {count} it claims", last)
        link = MessageNode.parse(_get(objects, current, Kind.MESSAGE), current)
        nodes.append((current, link.message))
        current = link.parent
    if len(nodes) != count:
        raise CorruptObject(f"message chain has {len(nodes)} links, expected {count}", last)
    nodes.reverse()
    bodies = _read_blobs(objects, [blob for _, blob in nodes])
    return [Link(node, body) for (node, _), body in zip(nodes, bodies, strict=True)]


def _read_blobs(objects: ObjectStore, oids: Iterable[str]) -> Iterator[bytes]:
    for oid in oids:
        yield _get(objects, oid, Kind.BLOB)


def parse_messages(links: Sequence[Link]) -> list[dict[str, Any]]:
    """The messages of ``links``, freshly parsed (the caller may change them)."""
    messages = []
    for link in links:
        try:
            message = parse_json(link.body)
        except (ValueError, RecursionError) as exc:
            raise CorruptObject("checkpoint message is not JSON", link.node) from exc
        if not isinstance(message, dict):
            raise CorruptObject("checkpoint message is not a JSON object", link.node)
        messages.append(message)
    return messages
