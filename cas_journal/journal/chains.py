"""A checkpoint's message list as stored, and the memo that makes saving it cost O(new
messages).

A run's list is a **segment**: an object holding the messages one save added, inline,
after the first ``keep`` messages of an older list (its ``base``: another segment, or the
last node of a message chain, as runs saved before segments have). A save whose list
shares its first p messages with the memo's writes one segment with ``keep = p`` on the
*smallest* stored list of the memo's chain that holds those p messages (so a load never
reads a segment that contributes nothing), or several chained segments when the new
messages would make a body over ``SEGMENT_BYTES``; when nothing is new and a stored
list is exactly the p messages, the checkpoint points at it and nothing is written.
So that a load reads few segments, not one per save, small segments do not pile up: once
the small ones at the end of the chain (under half ``MERGE_BYTES`` and ``MERGE_SEGMENTS``
messages each) and the new messages reach ``MERGE_BYTES`` or ``MERGE_SEGMENTS``
segments, the save writes them as one segment on the list before them (their messages
encoded again from the caller's list, which equals them exactly; only as many as reach
those limits, so a save on a long run written before merging stays small). A merged segment is
never small, so each message is stored at most twice, and pack order puts a merged
segment just before the small ones it repeats, in one compressed block (see
``maintenance.layout``). The small ones stay: older checkpoints still name them.
Stores whose format predates segments get message-chain nodes (message blob + previous
node) instead. A load walks from the list's object towards its start, reading each
segment once (its one JSON parse gives its messages) and stopping once every message is
gathered; a segment keeping more messages than its base's list holds is a CorruptObject.

Saving iteration k+1 must not re-encode and re-hash the k messages it shares with
iteration k, so ``ChainMemo`` remembers, for a checkpoint of the run, the list's messages
as stored bytes (``Part``), the stored objects that spell its prefixes (``Stop``s for
segments, ``nodes`` for a chain) and a *snapshot* of each message: a copy of the
message's dicts and lists (nobody else holds them, so changing a saved message in place
cannot change its snapshot) that shares the message's strings and numbers. A new list is
compared with the snapshots in one C-level list comparison, which meets the shared
strings by identity and so costs a few hash lookups per message, not a byte comparison;
only the messages after the first difference are encoded.

The comparison is exact. ``==`` alone says 1 == 1.0 == True and 0.0 == -0.0, which encode
differently, so every number of a snapshot is also checked for its exact type (and a
float's sign). NaN equals nothing, so a NaN is always encoded (and refused); a message
holding anything but str-keyed dicts, lists, tuples, str, int, float, bool and None gets
no snapshot and is always encoded. A miss costs time, never correctness. Parsing stays
exact for integers beyond 64 bits (``parse_json_exact``).

A memo is built from the stored list when a process first saves or loads a run (one
read of the list), so it survives reopening the store. It has no snapshots then: its
first save compares the caller's messages with the stored ones, parsed, one by one (a
message equal to the stored one has its numbers where the stored one has them, each
checked for type and sign), and takes the caller's snapshots. Built for a save, the
memo hands that save the messages its read parsed; built by a load, it keeps no segment
body (a new process restoring a run keeps only what it returns: the load of the
benchmark's 750-message run took 1,038 page faults keeping its 1.6 MB of bodies and 549
without, each about 5 us on the benchmark VM), and the first save after it reads the
segments again. A save that cannot read them again (the run was deleted and collected
meanwhile) writes its list whole.

``MessagesImage`` keeps a loaded message list for fresh copies, in memory only (never
stored or read from anywhere). One walk of the list gives each distinct string a
position; a *template* unpickler holds the strings at their positions in its memo, and
the image is the list pickled with every string written as a reference to its position
and no container remembered. A copy is then the template's memo copied (one array copy
in C, no call per string) and a tree of new dicts and lists around the shared strings
(strings are immutable; allocating and copying them was most of the cost). Unpickling
gives back exactly the types and key order pickled. Where an unpickler cannot take
another's memo (checked once per process on a small list), each copy is a plain
unpickling instead.
"""

from __future__ import annotations

import functools
import io
import math
import pickle
from bisect import bisect_left
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from itertools import repeat
from operator import attrgetter
from typing import Any, cast

from ..backends import NewObject
from ..errors import CorruptObject, InvalidInputError, ObjectNotFound
from ..objects import Kind, MessageNode, SegmentNode, canonical_json, object_id, segment_body
from ..objects.canonical import canonical_json_of_plain, parse_json_exact
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
                # a string or None is shared as is: no call and no path for most leaves
                out[key] = item if type(item) is str or item is None else copy(item, (*path, key))
            return out
        if kind is list or kind is tuple:
            items = [
                item if type(item) is str or item is None else copy(item, (*path, index))
                for index, item in enumerate(value)
            ]
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


SEGMENT_BYTES = 1024 * 1024
"""A save's new messages go into one segment whose body stays under this size, or into
several chained segments when they do not fit (a message longer than this gets a segment
of its own, which the store refuses only beyond its ``max_object_size``, as it would
refuse the message as a blob). 1 MiB keeps a segment far under every store's object size
limit and a load's read of one segment short, and a typical save (a few messages of a
few KiB) far under it."""
_SEGMENT_OVERHEAD = 200
"""Bytes of a segment body besides its messages and their commas, at most."""


@dataclass(slots=True)
class Link:
    """One stored message of a chain: its node and canonical bytes."""

    node: str
    body: bytes


@dataclass(slots=True)
class Stop:
    """A stored segment of a memo's chain: its list holds ``length`` messages, of which
    the first ``agreed`` are the memo's first (a later segment may keep fewer)."""

    oid: str
    length: int
    agreed: int


@dataclass(slots=True)
class Part:
    """Consecutive messages of a memo's list as stored bytes: the first ``count`` of a
    segment's messages (``segment``: ``text`` is its body), or of the JSON array
    ``text`` (messages read from a message chain, or about to be).

    A segment's body may be left out of memory (``text`` None, ``size`` its length):
    ``reread`` reads it again from the store when a save or a load needs its messages
    (see ``read_list``)."""

    text: bytes | None
    count: int
    segment: bool
    source: str
    """The object the messages were read from (named by errors; read again if need be)."""
    size: int = -1
    """The text's length in bytes (taken from ``text`` if not given)."""
    reread: Callable[[str], bytes] | None = None
    """Reads the body of segment ``source`` again (only for a part without ``text``)."""

    def __post_init__(self) -> None:
        if self.size < 0:
            assert self.text is not None
            self.size = len(self.text)

    def messages(self) -> list[dict[str, Any]]:
        """The part's messages, freshly parsed."""
        text = self.text
        if text is None:
            assert self.reread is not None and self.segment
            text = self.reread(self.source)
        if self.segment:
            return SegmentNode.parse(text, self.source).messages[: self.count]
        try:
            value = parse_json_exact(text)
        except (ValueError, UnicodeDecodeError, RecursionError) as exc:
            raise CorruptObject("checkpoint message is not JSON", self.source) from exc
        if type(value) is not list or not all(type(item) is dict for item in value):
            raise CorruptObject("checkpoint message is not a JSON object", self.source)
        return cast(list[dict[str, Any]], value[: self.count])


def _part_weight(part: Part) -> int:
    return 64 if part.text is None else 3 * part.size + 64


@dataclass(slots=True)
class ChainMemo:
    """The message list of one checkpoint of a run, as stored: what a save compares a
    new list with and builds on (see the module docstring)."""

    checkpoint: str | None
    """The checkpoint whose list this is (None: the run has none yet)."""
    parts: list[Part] = field(default_factory=list)
    """The list's messages as stored bytes, first message first."""
    nodes: list[str] = field(default_factory=list)
    """The message-chain node ending at each of the first ``len(nodes)`` positions (a run
    saved before segments; a prefix of the list, possibly all of it)."""
    stops: list[Stop] = field(default_factory=list)
    """The segments of the list's chain, the one nearest the chain's start first; their
    ``agreed`` lengths never decrease along it, and the last one's is the list's length."""
    prompt: str | None = None
    """The checkpoint's system prompt blob."""
    weight: int = -1
    """Roughly the bytes this memo holds (computed if not given)."""
    snapshots: list[Any] | None = None
    """What a new message ``i`` is compared with; None for a memo read from the store
    (its first save compares the caller's messages with the stored ones and snapshots
    the caller's)."""
    numbers: list[tuple[Number, ...]] = field(default_factory=list)
    """Where each snapshot's numbers are, with their exact types."""
    numbered: list[int] = field(default_factory=list)
    """The positions of the messages that hold numbers (their types are checked)."""
    stored: list[dict[str, Any]] | None = None
    """The list's messages as parsed from the stored bytes, when a read left them to the
    memo's first save (nobody else holds them); else that save parses them again."""

    def __post_init__(self) -> None:
        if self.weight < 0:
            self.weight = (
                sum(map(_part_weight, self.parts)) + 300 * self.length + 80 * len(self.nodes)
            )

    @property
    def length(self) -> int:
        """How many messages the list holds."""
        return self.stops[-1].agreed if self.stops else len(self.nodes)

    def holds(self, oid: str, kind: Kind, count: int) -> bool:
        """True if the list of ``oid`` (a segment or a chain's last node) holding ``count``
        messages is this list or a prefix of it that the memo knows stored as ``oid``."""
        if kind is Kind.MESSAGE:
            return 0 < count <= len(self.nodes) and self.nodes[count - 1] == oid
        return any(s.oid == oid and s.length == count <= s.agreed for s in self.stops)

    def messages(self, count: int) -> list[dict[str, Any]]:
        """The first ``count`` messages of the list, freshly parsed."""
        out: list[dict[str, Any]] = []
        for part in self.parts:
            if len(out) >= count:
                break
            out += part.messages()
        del out[count:]
        return out


@dataclass(slots=True)
class EncodedSave:
    """A message list as a save writes it: its memo-to-be, the objects not stored yet
    and the object the checkpoint names."""

    memo: ChainMemo
    """The list as a memo (its checkpoint still unknown)."""
    objects: list[NewObject]
    target: tuple[str, Kind] | None
    """The segment or chain node spelling the list (None: no messages)."""
    reused: str | None
    """The stored object the new objects (or the checkpoint) build on, if any."""

    @property
    def count(self) -> int:
        """How many messages the list holds."""
        return self.memo.length

    def oid_of(self, kind: Kind) -> str | None:
        """The target's oid if it is of ``kind``, else None."""
        return self.target[0] if self.target is not None and self.target[1] is kind else None


@dataclass(slots=True)
class _Shared:
    """The leading messages of a new list that encode exactly as the memo's: how many,
    and their snapshots, numbers and numbered positions (as ``ChainMemo`` has them)."""

    count: int
    snapshots: list[Any]
    numbers: list[tuple[Number, ...]]
    numbered: list[int]


def _shared_prefix(messages: Sequence[Any], memo: ChainMemo) -> _Shared:
    """How many leading messages encode exactly as the memo's leading ones, with the
    snapshots of those."""
    snapshots = memo.snapshots
    if snapshots is None:
        return _shared_with_stored(messages, memo)
    count = _shared_count(messages, memo, snapshots)
    return _Shared(
        count,
        snapshots[:count],
        memo.numbers[:count],
        [index for index in memo.numbered if index < count],
    )


def _shared_with_stored(messages: Sequence[Any], memo: ChainMemo) -> _Shared:
    """``_shared_prefix`` for a memo read from the store (no snapshots): the caller's
    messages are compared with the stored ones, parsed (the memo's ``stored``, else
    read again), one by one, and the snapshots are the caller's. Exact: a message equal
    to the stored one has its numbers where the stored one has them, and each of those
    is checked for the stored one's type and sign."""
    stored = memo.stored if memo.stored is not None else memo.messages(memo.length)
    memo.stored = None  # used once: the memo the save makes has snapshots
    shared = _Shared(0, [], [], [])
    for index in range(min(len(messages), len(stored))):
        message = messages[index]
        copy, found, _ = snapshot(message)
        if copy is UNMATCHABLE or message != stored[index]:
            break
        if found and not _numbers_match(stored[index], found):
            break
        shared.snapshots.append(copy)
        shared.numbers.append(found)
        if found:
            shared.numbered.append(index)
        shared.count += 1
    return shared


def _shared_count(messages: Sequence[Any], memo: ChainMemo, snapshots: list[Any]) -> int:
    """How many leading messages encode exactly as the memo's ``snapshots``."""
    count = min(len(messages), len(snapshots))
    mine = messages[:count]
    if type(mine) is not list:
        mine = list(mine)
    # one C-level comparison, usually, meeting the shared strings by identity: the part of
    # a save's cost that grows with the list (about 0.15 us per message kept, warm caches)
    if mine != (snapshots if count == len(snapshots) else snapshots[:count]):
        count = next(i for i in range(count) if messages[i] != snapshots[i])
    for index in memo.numbered:
        if index >= count:
            break
        if not _numbers_match(messages[index], memo.numbers[index]):
            return index
    return count


_agreed = attrgetter("agreed")


def _truncated_parts(parts: list[Part], count: int, length: int) -> list[Part]:
    """The parts holding the first ``count`` of their ``length`` messages (the last one
    shortened)."""
    if count == length:
        return list(parts)  # the usual save: nothing dropped, one C-level copy
    out: list[Part] = []
    left = count
    for part in parts:
        if left <= 0:
            break
        out.append(part if part.count <= left else replace(part, count=left))
        left -= part.count
    return out


def _chunks(bodies: list[bytes], limit: int) -> list[list[bytes]]:
    """``bodies`` cut into runs whose segment bodies stay under ``limit`` bytes."""
    chunks: list[list[bytes]] = [[]]
    size = _SEGMENT_OVERHEAD
    for body in bodies:
        if chunks[-1] and size + len(body) + 1 > limit:
            chunks.append([])
            size = _SEGMENT_OVERHEAD
        chunks[-1].append(body)
        size += len(body) + 1
    return chunks


def encode_save(
    messages: Sequence[Any], memo: ChainMemo, segments: bool = True, limit: int | None = None
) -> EncodedSave:
    """The objects a save of ``messages`` writes on top of ``memo``'s list, encoding (once)
    only the messages after the first difference.

    With ``segments`` the new messages go into segments (see the module docstring);
    without (a store whose format predates segments) into message-chain nodes, which
    can only extend a chain: a list whose kept prefix the memo holds in segments is then
    written whole. ``limit`` caps a segment's body (default ``SEGMENT_BYTES``)."""
    if limit is None:
        limit = SEGMENT_BYTES
    if not all(map(isinstance, messages, repeat(dict))):
        index = next(i for i, message in enumerate(messages) if not isinstance(message, dict))
        raise InvalidInputError(f"message {index} is not a JSON object")
    prefix = _shared_prefix(messages, memo)
    shared = prefix.count
    if not segments and shared > len(memo.nodes):
        return encode_save(messages, ChainMemo(None), segments, limit)
    snapshots, numbers, numbered = prefix.snapshots, prefix.numbers, prefix.numbered
    bodies: list[bytes] = []
    for message in messages[shared:]:
        copy, found, long_ints = snapshot(message)  # refuses keys that are not strings
        if copy is UNMATCHABLE or long_ints or any(kind is float for _, kind, _ in found):
            bodies.append(canonical_json(message))
        else:  # the snapshot walked it: plain JSON, encoded without a second walk
            bodies.append(canonical_json_of_plain(message))
        if found:
            numbered.append(len(snapshots))
        snapshots.append(copy)
        numbers.append(found)
    parts = _truncated_parts(memo.parts, shared, memo.length)
    nodes = memo.nodes[:shared]
    stops: list[Stop] = []
    target: tuple[str, Kind] | None = None
    if shared > len(nodes):  # the smallest stored list agreeing on the kept prefix
        at = bisect_left(memo.stops, shared, key=_agreed)
        base = memo.stops[at]
        stops = [*memo.stops[:at], Stop(base.oid, base.length, shared)]
        target = (base.oid, Kind.SEGMENT)
        current_length = base.length
    elif shared:
        target = (nodes[-1], Kind.MESSAGE)
        current_length = shared
    keep = shared
    merged = False
    if segments and bodies and stops:
        tail = _small_tail(parts, stops, len(nodes), sum(map(len, bodies)))
        if tail is not None:
            # the small segments at the chain's end and the new messages become one
            # segment on the list before them (the tail's messages encoded once more)
            merged = True
            keep = stops[tail.first - 1].agreed if tail.first else len(nodes)
            bodies = [canonical_json(message) for message in messages[keep:shared]] + bodies
            del parts[len(parts) - tail.parts :]
            del stops[tail.first :]
            if stops:
                target = (stops[-1].oid, Kind.SEGMENT)
            else:
                target = (nodes[-1], Kind.MESSAGE) if nodes else None
    reused = target[0] if target else None
    objects: list[NewObject] = []
    if bodies or (target is not None and current_length != shared):
        if segments:
            target = _write_segments(bodies, keep, target, limit, objects, parts, stops)
        else:
            target = _write_chain(bodies, target, objects, parts, nodes)
    weight = -1  # computed from the parts, unless the memo's list was kept whole
    if shared == memo.length and len(nodes) == len(memo.nodes) and not merged:
        added = parts[len(memo.parts) :]
        weight = memo.weight + sum(map(_part_weight, added)) + 300 * len(bodies)
    memo = ChainMemo(None, parts, nodes, stops, None, weight, snapshots, numbers, numbered)
    return EncodedSave(memo, objects, target, reused)


MERGE_BYTES = 64 * 1024
"""When the small segments at the end of a chain and a save's new messages reach this
many bytes, or ``MERGE_SEGMENTS`` segments, the save writes them as one segment on the
list before them (a segment is *small* below half this size and ``MERGE_SEGMENTS``
messages, so a merged one is never merged again). 64 KiB rather than 32: the checkpoint
benchmark's newest list is 30 segments instead of 55, which a new process loads in 5.8%
fewer instructions from rows and 3.2% fewer packed (callgrind), for 0.9% more
instructions over its 250 saves and a packed store 1% smaller."""
MERGE_SEGMENTS = 16
"""Small segments at the end of a chain that make a save merge them (see ``MERGE_BYTES``)."""


@dataclass(slots=True)
class _Tail:
    """The small segments at the end of a chain: ``stops[first:]``."""

    first: int
    segments: int
    """How many of them add messages (the others only keep fewer)."""
    parts: int
    """How many parts (the last ones) are theirs."""
    size: int
    """Their bodies' bytes and the new ones."""


def _small_tail(parts: list[Part], stops: list[Stop], chained: int, adding: int) -> _Tail | None:
    """The small segments at the end of the chain ``stops`` (whose first segment keeps
    ``chained`` messages of a message chain) that a save adding ``adding`` bytes merges:
    the last ones, as few as reach ``MERGE_BYTES`` or ``MERGE_SEGMENTS`` with the new
    bytes (so a save merges at most that much, even on a run saved before merging);
    None if they do not. Each segment adding messages has one part (the last ones are
    theirs); a segment adding none may have an empty one."""
    segments, size = 0, adding
    index = len(parts)
    for at in range(len(stops) - 1, -1, -1):
        own = stops[at].agreed - (stops[at - 1].agreed if at else chained)
        if own <= 0:
            continue
        while index and parts[index - 1].count == 0:
            index -= 1
        part = parts[index - 1]
        if not part.segment or own >= MERGE_SEGMENTS or 2 * part.size >= MERGE_BYTES:
            return None
        index -= 1
        segments += 1
        size += part.size
        if segments + 1 >= MERGE_SEGMENTS or size >= MERGE_BYTES:
            return _Tail(at, segments, len(parts) - index, size)
    return None


def _write_segments(
    bodies: list[bytes],
    keep: int,
    below: tuple[str, Kind] | None,
    limit: int,
    objects: list[NewObject],
    parts: list[Part],
    stops: list[Stop],
) -> tuple[str, Kind]:
    """Segments holding ``bodies`` on top of the first ``keep`` messages of ``below``;
    their objects, parts and stops appended to the lists given; returns the last."""
    for chunk in _chunks(bodies, limit):
        base = below[0] if below is not None and below[1] is Kind.SEGMENT else None
        chain = below[0] if below is not None and below[1] is Kind.MESSAGE else None
        body = segment_body(chunk, keep, base, chain)
        oid = object_id(Kind.SEGMENT, body)
        objects.append(NewObject(oid, Kind.SEGMENT, body))
        parts.append(Part(body, len(chunk), True, oid))
        keep += len(chunk)
        stops.append(Stop(oid, keep, keep))
        below = (oid, Kind.SEGMENT)
    assert below is not None
    return below


def _write_chain(
    bodies: list[bytes],
    below: tuple[str, Kind] | None,
    objects: list[NewObject],
    parts: list[Part],
    nodes: list[str],
) -> tuple[str, Kind] | None:
    """Message-chain nodes (and message blobs) for ``bodies`` after node ``below``."""
    parent = below[0] if below is not None else None
    for body in bodies:
        blob = object_id(Kind.BLOB, body)
        node_body = MessageNode(blob, parent).body()
        parent = object_id(Kind.MESSAGE, node_body)
        objects += [NewObject(blob, Kind.BLOB, body), NewObject(parent, Kind.MESSAGE, node_body)]
        nodes.append(parent)
    if bodies:
        parts.append(Part(b"[" + b",".join(bodies) + b"]", len(bodies), False, parent or ""))
    return None if parent is None else (parent, Kind.MESSAGE)


def read_chain(objects: NearbyObjects, last: str, count: int | None) -> list[Link]:
    """The links of the chain ending at ``last``, first message first; CorruptObject if
    the chain does not hold ``count`` messages (None: any number), or a link is not the
    kind it must be.

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
    current: str | None = last
    while current is not None:
        if count is not None and len(nodes) >= count:
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
    if count is not None and len(nodes) != count:
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


def _chain_messages(links: list[Link]) -> list[dict[str, Any]]:
    """The messages of ``links``, parsed as one JSON array (each alone if that fails, to
    name the message at fault)."""
    try:
        value = parse_json_exact(b"[" + b",".join(link.body for link in links) + b"]")
    except (ValueError, UnicodeDecodeError, RecursionError):
        value = None
    if type(value) is not list or len(value) != len(links):
        for link in links:
            try:
                parse_json_exact(link.body)
            except (ValueError, UnicodeDecodeError, RecursionError) as exc:
                raise CorruptObject("checkpoint message is not JSON", link.node) from exc
        raise CorruptObject("checkpoint messages are not JSON", links[-1].node)
    for link, message in zip(links, value, strict=True):
        if type(message) is not dict:
            raise CorruptObject("checkpoint message is not a JSON object", link.node)
    return cast(list[dict[str, Any]], value)


def _segment_body(get: Callable[[str], tuple[Kind, bytes]], oid: str) -> bytes:
    """The body of segment ``oid``, read with ``get``."""
    found, body = get(oid)
    if found is not Kind.SEGMENT:
        raise CorruptObject(f"expected a segment, found a {found.value}", oid)
    return body


def read_list(
    objects: NearbyObjects, oid: str, kind: Kind, count: int
) -> tuple[list[dict[str, Any]], ChainMemo]:
    """The ``count`` messages of the list of ``oid`` (a segment or a chain's last node),
    freshly parsed, and the list as a memo (no checkpoint set).

    Walks from ``oid`` to the list's start, reading each segment once (one JSON parse
    each, which is also where its messages come from) and stopping as soon as the
    messages still needed are all gathered; a segment keeping more messages than its
    base's list holds, or a list of another length than ``count``, is a CorruptObject
    naming the object at fault.

    A segment is read alone (the store's ``get``: one row, or one object sliced from its
    pack block, which the store's block cache keeps for the next segment), not with its
    neighbours: beside a merged segment lie the small ones it repeats, which a load never
    needs, and reading them with it doubled the bytes read, copied and hashed (callgrind,
    a new process's load of the benchmark's newest checkpoint: from rows 63.4M
    instructions against 59.0M alone, packed 68.9M against 58.2M)."""
    gathered: list[list[dict[str, Any]]] = []
    parts: list[Part] = []
    stops: list[Stop] = []
    nodes: list[str] = []
    need = count
    holder = oid  # the object that claims the ``need`` messages
    current: tuple[str, Kind] | None = (oid, kind)
    take, get = objects.take, objects.objects.get
    reread = functools.partial(_segment_body, get)
    while current is not None and current[1] is Kind.SEGMENT and need:
        at = current[0]
        kept = take(at, None)  # a neighbour an earlier read brought, else the segment alone
        found, body = kept if kept is not None else get(at)
        if found is not Kind.SEGMENT:
            raise CorruptObject(f"expected a segment, found a {found.value}", at)
        segment = SegmentNode.parse(body, at)
        length = segment.keep + len(segment.messages)
        if length < need or (at == oid and length != need):
            raise CorruptObject(
                f"{'claims' if at == oid else 'keeps'} {need} messages of a list of {length}",
                holder,
            )
        stops.append(Stop(at, length, need))
        own = need - segment.keep
        if own > 0:
            gathered.append(segment.messages[:own])
            parts.append(Part(None, own, True, at, len(body), reread))
            need = segment.keep
        holder, current = at, segment.below
    if need and current is not None:  # the rest is a message chain
        links = read_chain(objects, current[0], None if current[0] != oid else count)
        if len(links) < need:
            raise CorruptObject(f"keeps {need} messages of a chain of {len(links)}", holder)
        links = links[:need]
        gathered.append(_chain_messages(links))
        nodes = [link.node for link in links]
        text = b"[" + b",".join(link.body for link in links) + b"]"
        parts.append(Part(text, need, False, links[-1].node))
        need = 0
    if need:
        raise CorruptObject(f"claims {need} more messages than its list holds", holder)
    gathered.reverse()
    parts.reverse()
    stops.reverse()
    messages = gathered[0] if len(gathered) == 1 else [m for chunk in gathered for m in chunk]
    return messages, ChainMemo(None, parts, nodes, stops)


def _string_memo(messages: list[dict[str, Any]]) -> tuple[list[str], dict[int, tuple[int, Any]]]:
    """The distinct strings of ``messages`` (keys and values, in the order met) and a
    pickler memo naming every string object of the list by its value's position."""
    positions: dict[str, int] = {}
    memo: dict[int, tuple[int, Any]] = {}
    pending: list[Any] = [messages]
    pop, push, place = pending.pop, pending.append, positions.setdefault
    while pending:
        current = pop()
        if type(current) is dict:
            for key in current:
                if type(key) is str and (ident := id(key)) not in memo:
                    memo[ident] = (place(key, len(positions)), key)
            values = current.values()
        else:
            values = current
        for value in values:
            kind = type(value)
            if kind is str:
                if (ident := id(value)) not in memo:
                    memo[ident] = (place(value, len(positions)), value)
            elif kind is dict or kind is list or kind is tuple:
                push(value)
    return list(positions), memo


def _template(strings: list[str]) -> pickle.Unpickler:
    """An unpickler whose memo holds a copy of ``strings`` at their positions: it read
    them pickled as one tuple (a pickler memoizes a tuple's items in order, then the
    tuple)."""
    template = pickle.Unpickler(io.BytesIO(pickle.dumps(tuple(strings), protocol=5)))
    template.load()
    return template


def _fast_image(messages: Any, memo: dict[int, tuple[int, Any]]) -> bytes:
    """``messages`` pickled with every object of ``memo`` written as a reference to its
    position and no memo entry for anything else (each container written in full)."""
    out = io.BytesIO()
    pickler = pickle.Pickler(out, protocol=5)
    pickler.memo = memo
    pickler.fast = True
    pickler.dump(messages)
    return out.getvalue()


@functools.cache
def _memo_copies() -> bool:
    """Whether an unpickler takes a copy of another's memo (CPython's does), checked once
    on a small list."""
    probe = [{"key": "value", "list": ["text", 1, 2.5, True, None]}]
    strings, memo = _string_memo(probe)
    unpickler = pickle.Unpickler(io.BytesIO(_fast_image(probe, memo)))
    try:
        template = _template(strings)
        unpickler.memo = template.memo
        copy = unpickler.load()
    except (pickle.UnpicklingError, AttributeError, TypeError, KeyError, IndexError):
        return False
    return bool(copy == probe)


class MessagesImage:
    """A message list kept in memory for fresh copies (see the module docstring)."""

    __slots__ = ("data", "template", "weight")

    def __init__(self, messages: list[dict[str, Any]]) -> None:
        """Image ``messages`` (RecursionError if nested too deeply to pickle)."""
        self.template: pickle.Unpickler | None = None
        if _memo_copies():
            strings, memo = _string_memo(messages)
            self.data = _fast_image(messages, memo)
            self.template = _template(strings)
            held = sum(map(len, strings)) + 64 * len(strings)
        else:
            self.data = pickle.dumps(messages, protocol=5)
            held = 0
        self.weight = len(self.data) + held
        """Roughly the bytes the image holds."""

    def copy(self) -> list[dict[str, Any]]:
        """A fresh copy of the messages: new dicts and lists, shared strings."""
        unpickler = pickle.Unpickler(io.BytesIO(self.data))
        if self.template is not None:
            unpickler.memo = self.template.memo
        messages: list[dict[str, Any]] = unpickler.load()
        return messages
