"""Channel values and write values, serialized with LangGraph's serializer and stored by content.

A value goes through the saver's serializer (``dumps_typed``: a type tag and bytes, the
protocol every LangGraph serializer follows, JsonPlusSerializer by default). Small
values stay inline in their record; larger ones become a blob holding ``type NUL
bytes``. A list (exactly ``list``, non-empty, not tiny) is stored element by element:
each element its own blob, so an element is stored once however many checkpoints,
writes or copied threads hold it. A channel's list is a chain of ``message`` nodes, so
the list of the next checkpoint, which usually extends this one, shares every node of
its prefix and costs only its new elements; a write's list refers to its element blobs
directly.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import blake3
from langgraph.checkpoint.serde.base import SerializerProtocol

from ..backends import NewObject
from ..errors import InvalidInputError
from ..journal.cache import BoundedCache
from ..objects import Kind, MessageNode, object_id
from ..objects.codec import object_header
from .history import RecordStore
from .records import (
    BLOB,
    CHAIN,
    EXTENDS,
    INLINE,
    ITEMS,
    Serialized,
    StoredValue,
    decode_serialized,
    encode_serialized,
)

INLINE_LIMIT = 128
"""Serialized channel values up to this many bytes stay inside their record (a value
that does not change is referred to by every later checkpoint, so only small ones are
worth repeating)."""
INLINE_WRITE_LIMIT = 1024
"""Write values up to this many bytes stay inside their record (a write belongs to one
checkpoint; a separate object would cost more than it could share)."""
MIN_ELEMENT_BYTES = 48
"""A list is stored element by element only if its elements average at least this many
bytes (a node costs about 150 bytes; a list of tiny items is cheaper as one blob)."""
MAX_JSON_DEPTH = 64


def value_blob_oid(serialized: Serialized) -> str:
    """The oid of ``encode_serialized(serialized)`` as a blob, hashed without building it."""
    type_tag, data = serialized
    if not isinstance(type_tag, str) or "\0" in type_tag:
        raise InvalidInputError(f"serializer type tag {type_tag!r} is not a string without NUL")
    prefix = type_tag.encode("utf-8") + b"\0"
    hasher = blake3.blake3(object_header(Kind.BLOB, len(prefix) + len(data)))
    hasher.update(prefix)
    hasher.update(data)
    return str(hasher.hexdigest())


def node_body(message: str, parent: str | None) -> bytes:
    """``MessageNode(message, parent).body()``, built directly (it is on the put path; a
    test checks that both agree)."""
    if parent is None:
        return f'{{"message":"{message}"}}'.encode("ascii")
    return f'{{"message":"{message}","parent":"{parent}"}}'.encode("ascii")


@dataclass
class EncodedValue:
    """A value ready to store: where it will be and the objects to write for it."""

    value: StoredValue
    objects: list[NewObject] = field(default_factory=list)
    """Blobs and nodes, each after everything it references."""
    elements: tuple[str, ...] = ()
    """A list's element blobs (to cache once the record is written)."""


def is_plain_json(value: Any, depth: int = 0) -> bool:
    """True if ``value`` comes back unchanged from canonical JSON (exact types only:
    dict with str keys, list, str, int, finite float, bool, None)."""
    kind = type(value)
    if value is None or kind is bool or kind is int:
        return True
    if kind is str:
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return False
        return True
    if kind is float:
        return math.isfinite(value)
    if depth >= MAX_JSON_DEPTH:
        return False
    if kind is list:
        return all(is_plain_json(item, depth + 1) for item in value)
    if kind is dict:
        return all(
            type(key) is str and is_plain_json(key) and is_plain_json(item, depth + 1)
            for key, item in value.items()
        )
    return False


def copy_json(value: Any) -> Any:
    """A deep copy of plain JSON data (cached records are shared; callers get their own)."""
    if type(value) is dict:
        return {key: copy_json(item) for key, item in value.items()}
    if type(value) is list:
        return [copy_json(item) for item in value]
    return value


class ValueCodec:
    """Encodes values into stored values plus objects, and decodes them back."""

    def __init__(self, records: RecordStore) -> None:
        self.records = records
        self._oids: BoundedCache[Serialized, str] = BoundedCache(
            1 << 16, weigh=lambda item: len(item[1]), max_weight=32 << 20
        )

    def _blob_oid(self, serialized: Serialized) -> str:
        """``value_blob_oid``, remembered by the serialized bytes: a list's elements come
        back every checkpoint, and a dict lookup costs less than hashing them again."""
        oid = self._oids.get(serialized)
        if oid is None:
            oid = self._oids.put(serialized, value_blob_oid(serialized))
        return oid

    # -- encoding -------------------------------------------------------------------------

    def encode(
        self,
        serde: SerializerProtocol,
        value: Any,
        *,
        list_form: str = EXTENDS,
        channel: str = "",
        base: tuple[str, StoredValue] | None = None,
    ) -> EncodedValue:
        """Serialize ``value``; a list becomes ``items`` (``list_form=ITEMS``, for writes)
        or, for a channel, an extension of ``base`` (the parent record and its value of
        the same channel: stored and reachable from the ref being swapped) when it
        extends that list, else a chain."""
        limit = INLINE_WRITE_LIMIT if list_form == ITEMS else INLINE_LIMIT
        if type(value) is list and value:
            elements = [serde.dumps_typed(item) for item in value]
            total = sum(len(data) for _, data in elements)
            if total > limit and total >= MIN_ELEMENT_BYTES * len(elements):
                if list_form == ITEMS:
                    return self._items([encode_serialized(item) for item in elements])
                return self._list(elements, channel, base)
        return self.encode_single(serde.dumps_typed(value), limit)

    def _list(
        self, elements: list[Serialized], channel: str, base: tuple[str, StoredValue] | None
    ) -> EncodedValue:
        blob_oids = tuple(map(self._blob_oid, elements))
        if base is not None and base[1].form in (CHAIN, EXTENDS):
            known = self.records.list_elements(base[1], channel)
            if blob_oids == known:
                return EncodedValue(base[1], elements=known)  # same list: same description
            if len(known) < len(blob_oids) and blob_oids[: len(known)] == known:
                added = len(known)
                objects = []
                for i in range(added, len(elements)):
                    body = encode_serialized(elements[i])
                    objects.append(NewObject(blob_oids[i], Kind.BLOB, body))
                    self.records.remember_blob(blob_oids[i], body)
                extended = StoredValue(
                    EXTENDS, oids=blob_oids[added:], count=len(blob_oids), base=base[0]
                )
                return EncodedValue(extended, objects, blob_oids)
        chain_base = base[1] if base is not None and base[1].form == CHAIN else None
        return self.chain(blob_oids, elements, chain_base)

    def encode_single(self, serialized: Serialized, limit: int = INLINE_LIMIT) -> EncodedValue:
        """A serialized value inline (up to ``limit`` bytes) or as one blob."""
        type_tag, data = serialized
        body = encode_serialized(serialized)  # checks the tag and the bytes
        if len(data) <= limit:
            return EncodedValue(StoredValue(INLINE, serialized=(type_tag, bytes(data))))
        oid = object_id(Kind.BLOB, body)
        self.records.remember_blob(oid, body)
        return EncodedValue(StoredValue(BLOB, oids=(oid,)), [NewObject(oid, Kind.BLOB, body)])

    def _items(self, bodies: list[bytes]) -> EncodedValue:
        objects = [NewObject(object_id(Kind.BLOB, body), Kind.BLOB, body) for body in bodies]
        for obj in objects:
            self.records.remember_blob(obj.oid, obj.body)
        oids = tuple(obj.oid for obj in objects)
        return EncodedValue(StoredValue(ITEMS, oids=oids, count=len(oids)), objects)

    def chain(
        self,
        blob_oids: tuple[str, ...],
        elements: list[Serialized] | None = None,
        base: StoredValue | None = None,
    ) -> EncodedValue:
        """A list as a chain of message nodes (reusing the common prefix of ``base``'s
        chain, or any stored prefix). ``elements``: the serialized elements to write,
        None when they are all stored and reachable already (flattening a stored list)."""
        objects: list[NewObject] = []
        shared, parent = 0, None
        if base is not None and base.form == CHAIN:
            # the parent checkpoint's list: its nodes are stored and reachable from the
            # ref being swapped, so the common prefix is reused without a write
            known = self.records.elements(base.oids[0], base.count)
            limit = min(len(known), len(blob_oids))
            while shared < limit and known[shared] == blob_oids[shared]:
                shared += 1
            if shared:
                parent = self._node_at(base.oids[0], base.count, shared)
        if not shared:
            node_oids: list[str] = []
            for blob_oid in blob_oids:
                parent = object_id(Kind.MESSAGE, node_body(blob_oid, parent))
                node_oids.append(parent)
            shared = self._stored_prefix(node_oids)
            parent = node_oids[shared - 1] if shared else None
            if parent is not None:  # reused without a reachable referrer: freshen it for gc
                previous = node_oids[shared - 2] if shared > 1 else None
                objects.append(
                    NewObject(parent, Kind.MESSAGE, node_body(blob_oids[shared - 1], previous))
                )
        for i in range(shared, len(blob_oids)):
            body = node_body(blob_oids[i], parent)
            node_oid = object_id(Kind.MESSAGE, body)
            if elements is not None:
                element = encode_serialized(elements[i])
                objects.append(NewObject(blob_oids[i], Kind.BLOB, element))
                self.records.remember_blob(blob_oids[i], element)
            objects.append(NewObject(node_oid, Kind.MESSAGE, body))
            self.records.remember_node(node_oid, MessageNode(blob_oids[i], parent))
            parent = node_oid
        assert parent is not None
        self.records.remember_elements(parent, blob_oids)
        chain = StoredValue(CHAIN, oids=(parent,), count=len(blob_oids))
        return EncodedValue(chain, objects, blob_oids)

    def _node_at(self, head: str, count: int, length: int) -> str:
        """The oid of the node ending the first ``length`` elements of a chain."""
        current = head
        for _ in range(count - length):
            parent = self.records.node(current).parent
            assert parent is not None
            current = parent
        return current

    def _stored_prefix(self, chain: list[str]) -> int:
        """How many leading nodes of a chain are stored (by the closure rule, a stored
        node's ancestors are too, so a binary search finds the first missing one)."""
        has: Callable[[str], bool] = self.records.store.objects.has
        lo, hi = 0, len(chain)
        while lo < hi:
            mid = (lo + hi) // 2
            if has(chain[mid]):
                lo = mid + 1
            else:
                hi = mid
        return lo

    # -- decoding -------------------------------------------------------------------------

    def decode(self, serde: SerializerProtocol, value: StoredValue, channel: str = "") -> Any:
        """The value back, deserialized (``channel``: whose list an ``extends`` continues)."""
        if value.form == INLINE:
            assert value.serialized is not None
            return serde.loads_typed(value.serialized)
        if value.form == BLOB:
            return self._load(serde, value.oids[0])
        return [self._load(serde, oid) for oid in self.records.list_elements(value, channel)]

    def _load(self, serde: SerializerProtocol, oid: str) -> Any:
        return serde.loads_typed(decode_serialized(self.records.blob(oid), oid))

    def decode_part(self, serde: SerializerProtocol, part: dict[str, Any] | StoredValue) -> Any:
        """A record's checkpoint or metadata: plain JSON (copied) or a serialized blob."""
        if isinstance(part, StoredValue):
            return self.decode(serde, part)
        return copy_json(part)

    def encode_part(self, serde: SerializerProtocol, value: Any) -> EncodedValue | dict[str, Any]:
        """A checkpoint or metadata dict: inline if plain JSON, else a serialized blob."""
        if type(value) is dict and is_plain_json(value):
            return value
        serialized = serde.dumps_typed(value)
        body = encode_serialized(serialized)
        oid = object_id(Kind.BLOB, body)
        return EncodedValue(StoredValue(BLOB, oids=(oid,)), [NewObject(oid, Kind.BLOB, body)])
