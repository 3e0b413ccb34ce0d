"""A checkpoint's message chain, and the memo that makes saving it cost O(new messages).

A run's message list is stored as a chain of message nodes (each: the message blob and
the previous node). Saving iteration k+1 must not re-encode and re-hash the k messages it
shares with iteration k, so ``ChainMemo`` remembers, for a checkpoint of the run, each
message's stored node, canonical bytes and a *snapshot*: a copy of the message's dicts
and lists (nobody else holds them, so changing a saved message in place cannot change
its snapshot) that shares the message's strings and numbers. A new list is compared with
the snapshots in one C-level list comparison, which meets the shared strings by identity
and so costs a few hash lookups per message, not a byte comparison; only the messages
after the first difference are encoded and hashed.

The comparison is exact. ``==`` alone says 1 == 1.0 == True and 0.0 == -0.0, which encode
differently, so every number of a snapshot is also checked for its exact type (and a
float's sign). NaN equals nothing, so a NaN is always encoded (and refused); a message
holding anything but str-keyed dicts, lists, tuples, str, int, float, bool and None gets
no snapshot and is always encoded. A miss costs time, never correctness.

A memo is built from the stored chain when a process first saves or loads a run (one
read of the chain; its snapshots are then parsed copies, replaced by shared ones as the
caller's messages match them), so it survives reopening the store.

``MessagesImage`` keeps a loaded message list for fresh copies: its dicts and lists
pickled (in memory only, never stored or read from anywhere), its strings of
``SHARED_STRING`` characters or more kept aside once per distinct value and shared by
every copy (strings are immutable; allocating and copying them was most of the cost).
Unpickling gives back exactly the types and key order pickled.
"""

from __future__ import annotations

import io
import math
import pickle
from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import repeat
from typing import Any, cast

from ..backends import NewObject
from ..errors import CorruptObject, InvalidInputError, ObjectNotFound
from ..objects import Kind, MessageNode, canonical_json, object_id
from ..objects.canonical import (
    canonical_json_of_plain,
    parse_json,
    parse_json_noting_long_ints,
)
from .nearby import NearbyObjects

Path = tuple[str | int, ...]
Number = tuple[Path, type, bool]
"""Where a number is, its exact type and, for a float, its sign bit."""
_LEAVES = frozenset({str, int, float, bool, type(None)})
_LONG = 2**63
"""orjson reads integers at or beyond this magnitude as floats."""


class _Unmatchable:
    """The snapshot of a message that cannot be compared exactly: equal to nothing."""

    __slots__ = ()

    def __eq__(self, other: object) -> bool:
        return False

    def __ne__(self, other: object) -> bool:
        return True

    __hash__ = None  # type: ignore[assignment]


UNMATCHABLE = _Unmatchable()


def snapshot(message: Any) -> tuple[Any, tuple[Number, ...], bool]:
    """A copy of the message's containers sharing its leaves, where its numbers are, and
    whether one is an integer beyond 64 bits (``UNMATCHABLE`` for anything but dicts,
    lists, tuples and JSON scalars; InvalidInputError for a key that is not a string)."""
    numbers: list[Number] = []
    long_ints = False

    def copy(value: Any, path: Path) -> Any:
        kind = type(value)
        if kind is str or value is None:
            return value
        if kind is dict:
            out = {}
            for key, item in value.items():
                if type(key) is not str:
                    raise InvalidInputError(f"message keys must be strings, got {key!r:.40}")
                out[key] = copy(item, (*path, key))
            return out
        if kind is list or kind is tuple:
            items = [copy(item, (*path, index)) for index, item in enumerate(value)]
            return items if kind is list else tuple(items)
        if kind is int or kind is bool or kind is float:
            numbers.append((path, kind, kind is float and math.copysign(1.0, value) < 0))
            if kind is int and abs(value) >= _LONG:
                nonlocal long_ints
                long_ints = True
            return value
        raise TypeError(kind)

    try:
        return copy(message, ()), tuple(numbers), long_ints
    except (TypeError, RecursionError):
        return UNMATCHABLE, (), True


def _numbers_match(message: Any, numbers: tuple[Number, ...]) -> bool:
    """True if the numbers of ``message`` (equal to a snapshot) have the snapshot's types."""
    for path, kind, negative in numbers:
        value: Any = message
        for step in path:
            value = value[step]
        if type(value) is not kind:
            return False
        if kind is float and (math.copysign(1.0, cast(float, value)) < 0) != negative:
            return False
    return True


@dataclass(slots=True)
class Link:
    """One stored message of a chain: its node and canonical bytes, where its numbers are
    and whether one is an integer beyond 64 bits (None: not known yet)."""

    node: str
    body: bytes
    numbers: tuple[Number, ...] = ()
    long_ints: bool | None = None


def link_weight(link: Link) -> int:
    """Roughly the bytes a link and its snapshot hold."""
    return 3 * len(link.body) + 300


@dataclass(slots=True)
class ChainMemo:
    """The chain of one checkpoint of a run: ``links[i]`` is its message ``i`` and
    ``snapshots[i]`` what a new message ``i`` is compared with."""

    checkpoint: str | None
    """The checkpoint whose chain this is (None: the run has none yet)."""
    links: list[Link] = field(default_factory=list)
    prompt: str | None = None
    """The checkpoint's system prompt blob."""
    weight: int = -1
    """Roughly the bytes this memo holds (computed if not given)."""
    snapshots: list[Any] | None = None
    """None until first needed (a memo read from the store parses them then)."""
    numbered: list[int] = field(default_factory=list)
    """The positions of the messages that hold numbers (their types are checked)."""
    parsed: int = 0
    """How many leading snapshots were parsed from stored bytes, not shared with a
    caller's message (slower to compare; replaced when the caller's messages match)."""

    def __post_init__(self) -> None:
        if self.weight < 0:
            self.weight = sum(map(link_weight, self.links))

    def ensure_snapshots(self) -> list[Any]:
        """The snapshots, parsed from the stored bytes if not made yet."""
        if self.snapshots is None:
            snapshots, numbered = [], []
            for index, link in enumerate(self.links):
                copy, link.numbers, link.long_ints = snapshot(parse_json(link.body))
                snapshots.append(copy)
                if link.numbers:
                    numbered.append(index)
            self.snapshots, self.numbered, self.parsed = snapshots, numbered, len(snapshots)
        return self.snapshots


@dataclass(slots=True)
class EncodedChain:
    """A message list as a chain: its memo-to-be, and the objects not stored yet."""

    memo: ChainMemo
    """The chain as a memo (its checkpoint still unknown)."""
    objects: list[NewObject]
    shared: int
    """How many leading links came from the memo (already stored)."""

    @property
    def links(self) -> list[Link]:
        """The chain's links, first message first."""
        return self.memo.links

    @property
    def last(self) -> str | None:
        """The last node (what a checkpoint points at), None for no messages."""
        return self.memo.links[-1].node if self.memo.links else None


def _shared_prefix(messages: Sequence[Any], memo: ChainMemo) -> int:
    """How many leading messages encode exactly as the memo's leading links."""
    snapshots = memo.ensure_snapshots()
    count = min(len(messages), len(snapshots))
    if list(messages[:count]) != snapshots[:count]:  # one C-level comparison, usually
        count = next(i for i in range(count) if messages[i] != snapshots[i])
    for index in memo.numbered:
        if index >= count:
            break
        if not _numbers_match(messages[index], memo.links[index].numbers):
            return index
    return count


def encode_chain(messages: Sequence[Any], memo: ChainMemo) -> EncodedChain:
    """The chain of ``messages``, reusing the memo's links up to the first difference and
    encoding (once) only the messages after it."""
    if not all(map(isinstance, messages, repeat(dict))):
        index = next(i for i, message in enumerate(messages) if not isinstance(message, dict))
        raise InvalidInputError(f"message {index} is not a JSON object")
    shared = _shared_prefix(messages, memo)
    assert memo.snapshots is not None
    links, snapshots = memo.links[:shared], memo.snapshots[:shared]
    numbered = [index for index in memo.numbered if index < shared]
    for index in range(min(memo.parsed, shared)):  # share the caller's leaves from now on
        snapshots[index] = snapshot(messages[index])[0]
    weight = memo.weight if shared == len(memo.links) else sum(map(link_weight, links))
    parent = links[-1].node if links else None
    objects: list[NewObject] = []
    for message in messages[shared:]:
        copy, numbers, long_ints = snapshot(message)  # refuses keys that are not strings
        if copy is UNMATCHABLE or long_ints or any(kind is float for _, kind, _ in numbers):
            body = canonical_json(message)
        else:  # the snapshot walked it: plain JSON, encoded without a second walk
            body = canonical_json_of_plain(message)
        blob = object_id(Kind.BLOB, body)
        node_body = MessageNode(blob, parent).body()
        parent = object_id(Kind.MESSAGE, node_body)
        objects += [NewObject(blob, Kind.BLOB, body), NewObject(parent, Kind.MESSAGE, node_body)]
        if numbers:
            numbered.append(len(links))
        links.append(Link(parent, body, numbers, long_ints))
        snapshots.append(copy)
        weight += link_weight(links[-1])
    return EncodedChain(ChainMemo(None, links, None, weight, snapshots, numbered), objects, shared)


def read_chain(objects: NearbyObjects, last: str | None, count: int) -> list[Link]:
    """The links of the chain ending at ``last``, first message first; CorruptObject if
    the chain does not hold ``count`` messages (or a link is not the kind it must be).

    One walk from the last node: each node's message is picked up on the way when the
    read of a node brought it at no cost (a pack block split for a node holds the
    messages packed beside it; a row window holds the rows written with it, and a
    message is written just before its node), and whatever is left is read afterwards
    in one batch. Every object is verified once, by the read that brings it."""
    nodes: list[str] = []
    blobs: list[str] = []
    bodies: dict[str, bytes] = {}
    get, get_if_read, parse = objects.get, objects.get_if_read, MessageNode.parse
    message_kind, blob_kind = Kind.MESSAGE, Kind.BLOB
    current = last
    while current is not None:
        if len(nodes) >= count:
            raise CorruptObject(f"message chain is longer than the {count} it claims", last)
        kind, body = get(current)
        if kind is not message_kind:
            raise CorruptObject(f"expected a message, found a {kind.value}", current)
        link = parse(body, current)
        blob = link.message
        nodes.append(current)
        blobs.append(blob)
        if blob not in bodies:
            found = get_if_read(blob)
            if found is not None:
                if found[0] is not blob_kind:
                    raise CorruptObject(f"expected a blob, found a {found[0].value}", blob)
                bodies[blob] = found[1]
        current = link.parent
    if len(nodes) != count:
        raise CorruptObject(f"message chain has {len(nodes)} links, expected {count}", last)
    nodes.reverse()
    blobs.reverse()
    rest = [blob for blob in blobs if blob not in bodies]
    if rest:
        for oid, kind, body in objects.get_many(rest):
            if kind is not blob_kind:
                raise CorruptObject(f"expected a blob, found a {kind.value}", oid)
            bodies[oid] = body
        missing = next((blob for blob in rest if blob not in bodies), None)
        if missing is not None:
            raise ObjectNotFound(f"object {missing} not found")
    return [Link(node, bodies[blob]) for node, blob in zip(nodes, blobs, strict=True)]


def parse_messages(links: Sequence[Link]) -> list[dict[str, Any]]:
    """The messages of ``links``, freshly parsed (the caller may change them)."""
    messages = []
    for link in links:
        try:
            if link.long_ints is None:  # learn it once: later loads skip the scan
                message, link.long_ints = parse_json_noting_long_ints(link.body)
            else:
                message = parse_json(link.body, long_ints=link.long_ints)
        except (ValueError, RecursionError) as exc:
            raise CorruptObject("checkpoint message is not JSON", link.node) from exc
        if not isinstance(message, dict):
            raise CorruptObject("checkpoint message is not a JSON object", link.node)
        messages.append(message)
    return messages


SHARED_STRING = 8
"""Strings at least this long are shared by the copies of a ``MessagesImage`` (shorter
ones are cheaper to allocate than to fetch; measured: 8 beats 4, 16 and 64)."""


class _ImagePickler(pickle.Pickler):
    def __init__(self, out: io.BytesIO, strings: list[str]) -> None:
        super().__init__(out, protocol=5)
        self.strings = strings
        self.positions: dict[str, int] = {}

    def persistent_id(self, obj: Any) -> int | None:
        if type(obj) is not str or len(obj) < SHARED_STRING:
            return None
        position = self.positions.get(obj)  # equal strings share one copy
        if position is None:
            position = self.positions[obj] = len(self.strings)
            self.strings.append(obj)
        return position


class _ImageUnpickler(pickle.Unpickler):
    def __init__(self, data: bytes, strings: list[str]) -> None:
        super().__init__(io.BytesIO(data))
        # the list's own __getitem__: a shared string per persistent id, no Python frame
        self.persistent_load = strings.__getitem__  # type: ignore[method-assign]


class MessagesImage:
    """A message list kept in memory for fresh copies (see the module docstring)."""

    __slots__ = ("data", "strings", "weight")

    def __init__(self, messages: list[dict[str, Any]]) -> None:
        """Image ``messages`` (RecursionError if nested too deeply to pickle)."""
        out = io.BytesIO()
        self.strings: list[str] = []
        _ImagePickler(out, self.strings).dump(messages)
        self.data = out.getvalue()
        self.weight = len(self.data) + sum(map(len, self.strings)) + 64 * len(self.strings)
        """Roughly the bytes the image holds."""

    def copy(self) -> list[dict[str, Any]]:
        """A fresh copy of the messages: new dicts and lists, shared strings."""
        messages: list[dict[str, Any]] = _ImageUnpickler(self.data, self.strings).load()
        return messages
