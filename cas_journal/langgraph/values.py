"""Channel values and write values, serialized with LangGraph's serializer and stored by content.

A value goes through the saver's serializer (``dumps_typed``: a type tag and bytes, the
protocol every LangGraph serializer follows, JsonPlusSerializer by default). Small
values stay inline in their record; larger ones become a blob holding ``type NUL
bytes``. A list (exactly ``list``, non-empty, not tiny; also the list of a
``DeltaChannel`` snapshot) is stored element by element: each element its own blob, so
an element is stored once however many checkpoints, writes or copied threads hold it. A
channel's list is stored in leaves (see ``records``): the next checkpoint's list shares
every full leaf of its parent's and costs only its new elements.

Nothing is serialized or decoded twice. The saver remembers, per record and channel, the
list as Python objects together with the ids of their blobs and leaves (a ``ListMemo``):
a put whose list starts with the very objects (``is``) of its parent checkpoint's list,
as LangGraph's reducers hand them on, serializes only the elements after them; a
get_tuple of a checkpoint the saver wrote or read before returns a new list of the same
element objects without decoding anything, and one of another checkpoint decodes only
the elements not decoded before (each element's decoded value is cached by its blob id).
So an element changed in place, without a write that replaces it, is not saved, as with
LangGraph's ``DeltaChannel``; values handed out are shared and must be treated as
read-only (every list is a new list; the checkpoint and metadata dicts are copies). All
of it lives in the journal's record cache, bounded by its budget.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from langgraph.checkpoint.serde.base import SerializerProtocol
from langgraph.checkpoint.serde.types import _DeltaSnapshot

from ..errors import InvalidInputError
from ..journal.records import RecordChange, RecordStore, blob_id
from .history import Chains
from .records import (
    BLOB,
    CHAIN,
    DELTA_SNAPSHOT,
    EXTENDS,
    INLINE,
    ITEMS,
    LEAVES,
    Serialized,
    StoredValue,
    decode_serialized,
    encode_serialized,
    leaf_tree,
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
bytes (a reference costs about 80 bytes; a list of tiny items is cheaper as one blob)."""
LEAF_SIZE = 16
"""Elements per leaf of a stored list: a record holds at most this many element
references less one; a read of n elements reads n / LEAF_SIZE leaves."""
MAX_JSON_DEPTH = 64
LIST_TAG = "langgraph list "
VALUE_TAG = "langgraph value "


def value_blob_oid(serialized: Serialized) -> str:
    """The oid of ``encode_serialized(serialized)`` as a blob, hashed without building it."""
    type_tag, data = serialized
    if not isinstance(type_tag, str) or "\0" in type_tag:
        raise InvalidInputError(f"serializer type tag {type_tag!r} is not a string without NUL")
    return blob_id(type_tag.encode("utf-8") + b"\0", data)


@dataclass(frozen=True, slots=True)
class ListMemo:
    """A stored list as Python objects, with the blob ids of its elements and its leaves."""

    items: tuple[Any, ...]
    oids: tuple[str, ...]
    size: int
    """The serialized elements' bytes, in total."""
    leaves: tuple[str, ...] = ()
    """Leaf ``j`` holds elements ``j * LEAF_SIZE`` .. ``(j + 1) * LEAF_SIZE - 1`` (none if
    the list is not stored in leaves of ``LEAF_SIZE``)."""

    @property
    def weight(self) -> int:
        """Memory held beyond the elements themselves (which the value cache counts)."""
        return 16 * len(self.items) + 8 * len(self.leaves) + 128


@dataclass
class EncodedValue:
    """A value ready to store: where it will be and the objects to write for it."""

    value: StoredValue
    blobs: list[tuple[str, bytes]] = field(default_factory=list)
    """Blobs to write (id, body)."""
    leaves: list[tuple[tuple[str, ...], str | None]] = field(default_factory=list)
    """Leaves to write (elements, leaf before), first to last."""
    memo: ListMemo | None = None
    """The list as stored (to remember once the record is written)."""

    def write(self, change: RecordChange) -> None:
        """Add this value's objects to ``change``, each after what it references."""
        for oid, body in self.blobs:
            change.blob(body, oid)
        for elements, before in self.leaves:
            change.record(None, leaf_tree(elements, before).refs)


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


def _common_prefix(items: Sequence[Any], known: tuple[Any, ...]) -> int:
    """How many leading elements of ``items`` are the very objects of ``known``."""
    length = len(known)
    if len(items) >= length and all(map(_same, items[:length], known)):
        return length
    common = 0
    for mine, theirs in zip(items, known, strict=False):
        if mine is not theirs:
            break
        common += 1
    return common


def _common_length(a: Sequence[str], b: Sequence[str]) -> int:
    """The length of the common prefix of two sequences of ids."""
    common = 0
    for mine, theirs in zip(a, b, strict=False):
        if mine != theirs:
            break
        common += 1
    return common


def _same(a: object, b: object) -> bool:
    return a is b


class ValueCodec:
    """Encodes values into stored values plus objects, and decodes them back, for one
    serializer (``tag`` names it in the journal's cache)."""

    def __init__(self, chains: Chains, serde: SerializerProtocol, tag: str) -> None:
        self.chains = chains
        self.records: RecordStore = chains.records
        self.serde = serde
        self._lists = LIST_TAG + tag
        self._values = VALUE_TAG + tag

    # -- remembering lists ----------------------------------------------------------------

    def list_memo(self, record: str, channel: str) -> ListMemo | None:
        """The list of ``channel`` in record ``record`` as this saver last wrote or read it."""
        found: ListMemo | None = self.records.recall(f"{self._lists} {channel}", record)
        return found

    def remember_list(self, record: str, channel: str, memo: ListMemo) -> None:
        """Remember the list of ``channel`` in a record written or read."""
        self.records.remember(f"{self._lists} {channel}", record, memo, memo.weight)

    # -- encoding -------------------------------------------------------------------------

    def encode_write(self, value: Any) -> EncodedValue:
        """A pending write's value: a list as ``items``, anything else inline or a blob."""
        if type(value) is list and value:
            elements = [self.serde.dumps_typed(item) for item in value]
            total = sum(len(data) for _, data in elements)
            if total > INLINE_WRITE_LIMIT and total >= MIN_ELEMENT_BYTES * len(elements):
                blobs = []
                for serialized in elements:
                    body = encode_serialized(serialized)
                    blobs.append((value_blob_oid(serialized), body))
                oids = tuple(oid for oid, _ in blobs)
                return EncodedValue(StoredValue(ITEMS, oids=oids, count=len(oids)), blobs)
        return self.encode_single(self.serde.dumps_typed(value), INLINE_WRITE_LIMIT)

    def encode_channel(
        self,
        value: Any,
        parent: ListMemo | None,
        written: Sequence[tuple[Any, str, int]] = (),
    ) -> EncodedValue:
        """A channel's value. A list (or a DeltaChannel snapshot's list) is stored in
        leaves, reusing what ``parent`` (the parent checkpoint's list of the same channel)
        holds: its leading elements that are the very objects of ``parent`` are neither
        serialized nor written again, nor are its elements that are the very objects of
        ``written`` (list items of writes in the record the put replaces, with their blob
        ids and sizes: stored already, and reachable)."""
        items, wrapper = value, ""
        if isinstance(value, _DeltaSnapshot) and type(value.value) is list:
            items, wrapper = value.value, DELTA_SNAPSHOT
        if type(items) is not list or not items:
            return self.encode_single(self.serde.dumps_typed(value))
        common, size = 0, 0
        oids: list[str] = []
        if parent is not None and parent.items:
            common = _common_prefix(items, parent.items)
            oids = list(parent.oids[:common])
            size = parent.size * common // len(parent.items)
        known = {id(obj): (obj, oid, length) for obj, oid, length in written}
        stored = set(parent.oids) if parent is not None and common < len(parent.oids) else ()
        blobs: list[tuple[str, bytes]] = []
        for item in items[common:]:
            hit = known.get(id(item))
            if hit is not None and hit[0] is item:
                oids.append(hit[1])
                size += hit[2]
                continue
            serialized = self.serde.dumps_typed(item)
            size += len(serialized[1])
            oid = value_blob_oid(serialized)
            oids.append(oid)
            if oid not in stored:  # (the parent's elements are stored and reachable)
                blobs.append((oid, encode_serialized(serialized)))
        if size <= INLINE_LIMIT or size < MIN_ELEMENT_BYTES * len(items):
            return self.encode_single(self.serde.dumps_typed(value))
        if parent is not None and common < len(parent.oids):
            # the elements the parent's leaves hold, whatever objects they came from
            common = common + _common_length(oids[common:], parent.oids[common:])
        return self._leaves(items, tuple(oids), size, parent, common, blobs, wrapper)

    def _leaves(
        self,
        items: list[Any],
        oids: tuple[str, ...],
        size: int,
        parent: ListMemo | None,
        common: int,
        blobs: list[tuple[str, bytes]],
        wrapper: str,
    ) -> EncodedValue:
        full = len(oids) // LEAF_SIZE
        reused: list[str] = []
        if parent is not None:
            reused = list(parent.leaves[: min(common // LEAF_SIZE, full)])
        leaves: list[tuple[tuple[str, ...], str | None]] = []
        chain = list(reused)
        for j in range(len(reused), full):
            elements = oids[j * LEAF_SIZE : (j + 1) * LEAF_SIZE]
            before = chain[-1] if chain else None
            leaves.append((elements, before))
            chain.append(_leaf_oid(elements, before))
        tail = oids[full * LEAF_SIZE :]
        stored = StoredValue(
            LEAVES,
            oids=tail,
            count=len(oids),
            base=chain[-1] if chain else None,
            leaf_size=LEAF_SIZE,
            wrapper=wrapper,
        )
        memo = ListMemo(tuple(items), oids, size, tuple(chain))
        return EncodedValue(stored, blobs, leaves, memo)

    def encode_single(self, serialized: Serialized, limit: int = INLINE_LIMIT) -> EncodedValue:
        """A serialized value inline (up to ``limit`` bytes) or as one blob."""
        type_tag, data = serialized
        body = encode_serialized(serialized)  # checks the tag and the bytes
        if len(data) <= limit:
            return EncodedValue(StoredValue(INLINE, serialized=(type_tag, bytes(data))))
        oid = blob_id(body)
        return EncodedValue(StoredValue(BLOB, oids=(oid,)), [(oid, body)])

    def flattened(self, value: StoredValue, channel: str) -> EncodedValue:
        """A stored list of record format 1 (``extends``, ``chain``) in leaves, its
        elements already stored (a rewritten chain's records then need no other)."""
        oids, _ = self.chains.list_elements(value, channel)
        full = len(oids) // LEAF_SIZE
        leaves: list[tuple[tuple[str, ...], str | None]] = []
        before: str | None = None
        for j in range(full):
            elements = oids[j * LEAF_SIZE : (j + 1) * LEAF_SIZE]
            leaves.append((elements, before))
            before = _leaf_oid(elements, before)
        stored = StoredValue(
            LEAVES, oids=oids[full * LEAF_SIZE :], count=len(oids), base=before, leaf_size=LEAF_SIZE
        )
        return EncodedValue(stored, [], leaves)

    # -- decoding -------------------------------------------------------------------------

    def element(self, oid: str) -> Any:
        """A list element's value (decoded once, then shared from the cache)."""
        return self.records.derived(self._values, oid, self._decode_blob(oid))

    def _decode_blob(self, oid: str) -> Any:
        serde = self.serde

        def decode(body: bytes) -> Any:
            return serde.loads_typed(decode_serialized(body, oid))

        return decode

    def decode(self, value: StoredValue, channel: str = "", record: str | None = None) -> Any:
        """The value back, deserialized; a list is a new list (its elements shared with
        the cache). ``record``: the record holding it (whose list is remembered)."""
        if value.form == INLINE:
            assert value.serialized is not None
            return self.serde.loads_typed(value.serialized)
        if value.form == BLOB:
            oid = value.oids[0]
            return self.serde.loads_typed(decode_serialized(self.records.blob(oid), oid))
        memo = self.read_list(value, channel, record)
        if value.wrapper == DELTA_SNAPSHOT:
            return _DeltaSnapshot(list(memo.items))
        return list(memo.items)

    def read_list(self, value: StoredValue, channel: str, record: str | None) -> ListMemo:
        """A stored list as a memo (remembered for ``record``)."""
        if record is not None:
            found = self.list_memo(record, channel)
            if found is not None and len(found.oids) == value.count:
                return found
        oids, leaves = self.chains.list_elements(value, channel)
        records, tag = self.records, self._values
        records.read_blobs(oid for oid in oids if not records.has_derived(tag, oid))
        items = tuple(self.element(oid) for oid in oids)
        size = sum(len(self.records.blob(oid)) for oid in oids)
        if value.form != LEAVES or value.leaf_size != LEAF_SIZE:
            leaves = ()
        memo = ListMemo(items, oids, size, leaves)
        if record is not None:
            self.remember_list(record, channel, memo)
        return memo

    def decode_part(self, part: dict[str, Any] | StoredValue) -> Any:
        """A record's checkpoint or metadata: plain JSON (copied) or a serialized blob."""
        if isinstance(part, StoredValue):
            return self.decode(part)
        return copy_json(part)

    def encode_part(self, value: Any) -> EncodedValue | dict[str, Any]:
        """A checkpoint or metadata dict: inline if plain JSON, else a serialized blob."""
        if type(value) is dict and is_plain_json(value):
            return value
        body = encode_serialized(self.serde.dumps_typed(value))
        oid = blob_id(body)
        return EncodedValue(StoredValue(BLOB, oids=(oid,)), [(oid, body)])


def _leaf_oid(elements: tuple[str, ...], before: str | None) -> str:
    from ..journal.records import RecordChange

    change = RecordChange()
    oid, _ = change.record(None, leaf_tree(elements, before).refs)
    return oid


__all__ = [
    "CHAIN",
    "EXTENDS",
    "EncodedValue",
    "ListMemo",
    "ValueCodec",
    "copy_json",
    "is_plain_json",
    "value_blob_oid",
]
