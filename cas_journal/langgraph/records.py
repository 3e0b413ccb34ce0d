"""Checkpoint records: how one LangGraph checkpoint (or a batch of late writes) is a tree.

A namespace of a LangGraph thread is a chain of records, newest first, each a ``tree``
object whose ``previous`` reference names the record before it. A *checkpoint record*
holds one checkpoint with its metadata, channel values and pending writes; a *writes
record* holds pending writes that arrived for an older checkpoint after later records.

The record's inline data (canonical JSON)::

    {"id": checkpoint id,
     "checkpoint": the checkpoint without "id" and "channel_values" (if JSON-exact),
     "metadata": the metadata (if JSON-exact),
     "parent": parent checkpoint id,
     "values": {channel: value spec},
     "writes": [[task id, idx, channel, task path, value spec], ...],
     "newest": the greatest checkpoint id of this record and every record before it}

and its references: ``previous`` (tree), ``checkpoint`` / ``metadata`` (a blob, when the
value is not plain JSON and went through the serializer), ``v/<k>`` for the value of the
k-th channel of ``values`` (in key order) and ``w/<n>`` for the value of write ``n``.
Absent members are omitted (``newest`` when it equals ``id``). A value spec says where a
serialized value is (``<name>`` is the value's reference name):

* ``["inline", type, text]``: small values, kept in the record itself; ``text`` is the
  serialized bytes decoded as Latin-1 (each byte one code point, so ASCII stays
  readable and compresses like the rest of the record);
* ``["blob"]``: one blob ``<name>`` holding ``type NUL bytes``;
* ``["leaves", n, f]``: a list of ``n`` elements, one blob per element, in *leaves* of
  ``f`` elements: ``<name>/leaves`` is the last full leaf (absent when ``n < f``) and
  ``<name>/0`` .. ``<name>/<k-1>`` are the ``k = n mod f`` elements after it. A leaf is
  a tree whose references ``0`` .. ``<f-1>`` are its elements and ``before`` the leaf
  before it (absent in the first). Leaves depend only on the elements they hold, so the
  next checkpoint's list reuses every full leaf of its parent's and a record holds at
  most ``f - 1`` element references: a checkpoint costs its new elements, one small
  record, and a new leaf every ``f`` elements, however long the conversation; reading
  the list reads ``n / f`` leaves and the elements, nothing else. ``["leaves", n, f,
  "delta-snapshot"]`` is the same list held in LangGraph's ``DeltaChannel`` snapshot;
* ``["items", n]``: a list of ``n`` element blobs ``<name>/0`` .. (writes only).

Records of the first format (record format 1; still read, never written) also hold:

* ``["extends", n, k]``: a list of ``n`` elements: the same channel's list in the record
  ``<name>/base`` (the parent checkpoint's), then ``k`` more elements, blobs
  ``<name>/0`` .. ``<name>/<k-1>``;
* ``["chain", n]``: a list of ``n`` elements, one blob per element linked by ``message``
  nodes, ``<name>`` being the last element's node.

Every list element is its own blob, so an element is stored once however many
checkpoints, writes and copied threads hold it.

The parser is strict: every reference is accounted for by the data, every value spec has
the references it needs with the right kinds, and anything else is a CorruptObject.
Nothing here imports LangGraph: values are already serialized ``(type, bytes)`` pairs.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from ..errors import CorruptObject, InvalidInputError
from ..journal.records import BLOB as BLOB_REF
from ..journal.records import NODE as NODE_REF
from ..journal.records import PREVIOUS, RefKind, Tree
from ..journal.records import RECORD as RECORD_REF

Serialized = tuple[str, bytes]
"""A value as LangGraph's serializer protocol gives it: ``(type tag, bytes)``."""

INLINE = "inline"
BLOB = "blob"
LEAVES = "leaves"
EXTENDS = "extends"
CHAIN = "chain"
ITEMS = "items"
DELTA_SNAPSHOT = "delta-snapshot"
"""The wrapper of a list held in a DeltaChannel snapshot."""
LEAF_BEFORE = "before"
"""A leaf's reference to the leaf before it."""

BASE = "base"
CHECKPOINT = "checkpoint"
METADATA = "metadata"
VALUE_PREFIX = "v/"
WRITE_PREFIX = "w/"


def encode_serialized(value: Serialized) -> bytes:
    """The body of a value blob: the type tag, a NUL, the serialized bytes."""
    type_tag, data = value
    if not isinstance(type_tag, str) or "\0" in type_tag:
        raise InvalidInputError(f"serializer type tag {type_tag!r} is not a string without NUL")
    if not isinstance(data, bytes | bytearray | memoryview):
        raise InvalidInputError(f"serializer returned {type(data).__name__}, not bytes")
    return type_tag.encode("utf-8") + b"\0" + bytes(data)


def decode_serialized(body: bytes, oid: str | None = None) -> Serialized:
    """Split a value blob back into ``(type tag, bytes)``; CorruptObject if malformed."""
    tag, nul, data = body.partition(b"\0")
    if not nul:
        raise CorruptObject("value blob has no type tag", oid)
    try:
        return tag.decode("utf-8"), data
    except UnicodeDecodeError as exc:
        raise CorruptObject("value blob's type tag is not UTF-8", oid) from exc


@dataclass(frozen=True, slots=True)
class StoredValue:
    """Where one serialized value is: inline, in a blob, or in element blobs."""

    form: str
    serialized: Serialized | None = None
    """The value itself, for ``inline``."""
    oids: tuple[str, ...] = ()
    """``blob``: the blob; ``chain``: the last element's node; ``extends``: the added
    elements; ``items``: every element."""
    count: int = 0
    """Number of elements of a list."""
    base: str | None = None
    """``extends``: the record whose list of the same channel this one extends;
    ``leaves``: the last full leaf (None if there is none)."""
    leaf_size: int = 0
    """``leaves``: elements per leaf."""
    wrapper: str = ""
    """``leaves``: what holds the list ("" the channel itself, or ``DELTA_SNAPSHOT``)."""

    def spec(self) -> list[Any]:
        """The JSON value spec kept in the record's data."""
        if self.form == INLINE:
            assert self.serialized is not None
            type_tag, data = self.serialized
            return [INLINE, type_tag, data.decode("latin-1")]
        if self.form == BLOB:
            return [BLOB]
        if self.form == EXTENDS:
            return [EXTENDS, self.count, len(self.oids)]
        if self.form == LEAVES:
            spec: list[Any] = [LEAVES, self.count, self.leaf_size]
            return [*spec, self.wrapper] if self.wrapper else spec
        return [self.form, self.count]

    def refs(self, name: str) -> dict[str, tuple[RefKind, str]]:
        """The references this value adds to its record under ``name``."""
        if self.form == BLOB:
            return {name: (BLOB_REF, self.oids[0])}
        if self.form == CHAIN:
            return {name: (NODE_REF, self.oids[0])}
        refs = {f"{name}/{i}": (BLOB_REF, oid) for i, oid in enumerate(self.oids)}
        if self.form == LEAVES:
            if self.base is not None:
                refs[f"{name}/{LEAVES}"] = (RECORD_REF, self.base)
            return refs
        if self.form == EXTENDS:
            assert self.base is not None
            refs[f"{name}/{BASE}"] = (RECORD_REF, self.base)
        return refs


@dataclass(frozen=True, slots=True)
class StoredWrite:
    """One pending write: the task that made it, its index, channel, path and value."""

    task_id: str
    idx: int
    channel: str
    task_path: str
    value: StoredValue

    @property
    def key(self) -> tuple[str, int]:
        """What identifies a write within its checkpoint: (task id, index)."""
        return self.task_id, self.idx

    @property
    def sort_key(self) -> tuple[str, str, int]:
        """LangGraph's order of a checkpoint's writes: task path, task id, index."""
        return self.task_path, self.task_id, self.idx


def merge_writes(
    existing: tuple[StoredWrite, ...], added: list[StoredWrite]
) -> tuple[StoredWrite, ...]:
    """Writes after adding ``added``: a regular write (idx >= 0) already stored under its
    (task id, idx) is kept as it was; a special one (error, interrupt, ...: idx < 0)
    replaces the stored one. The result is in LangGraph's order (``sort_key``)."""
    by_key = {write.key: write for write in existing}
    for write in added:
        if write.idx >= 0 and write.key in by_key:
            continue
        by_key[write.key] = write
    return tuple(sorted(by_key.values(), key=lambda w: w.sort_key))


@dataclass(frozen=True, slots=True)
class Record:
    """One record of a namespace's chain (see the module docstring)."""

    checkpoint_id: str
    checkpoint: dict[str, Any] | StoredValue | None = None
    """The checkpoint without id and channel values: JSON (dict) or a blob; None for a
    writes record."""
    metadata: dict[str, Any] | StoredValue | None = None
    parent_id: str | None = None
    values: Mapping[str, StoredValue] = field(default_factory=dict)
    writes: tuple[StoredWrite, ...] = ()
    previous: str | None = None
    newest: str = ""
    """The greatest checkpoint id in this record and the records before it ("" = own id)."""

    @property
    def is_checkpoint(self) -> bool:
        """True for a checkpoint record, False for a writes record."""
        return self.checkpoint is not None

    @property
    def newest_id(self) -> str:
        """The greatest checkpoint id in this record and the records before it."""
        return self.newest or self.checkpoint_id

    def with_writes(self, writes: tuple[StoredWrite, ...]) -> Record:
        """The same record with other writes."""
        return replace(self, writes=writes)

    def tree(self) -> Tree:
        """This record as a tree object."""
        data, refs = self.parts()
        if self.previous is not None:
            refs[PREVIOUS] = (RECORD_REF, self.previous)
        return Tree(refs=refs, data=data)

    def parts(self) -> tuple[dict[str, Any], dict[str, tuple[RefKind, str]]]:
        """This record's tree data and references, but its ``previous`` reference."""
        data: dict[str, Any] = {"id": self.checkpoint_id}
        refs: dict[str, tuple[RefKind, str]] = {}
        for key, part in ((CHECKPOINT, self.checkpoint), (METADATA, self.metadata)):
            if isinstance(part, StoredValue):
                refs.update(part.refs(key))
            elif part is not None:
                data[key] = part
        if self.parent_id is not None:
            data["parent"] = self.parent_id
        if self.values:
            specs: dict[str, Any] = {}
            for k, channel in enumerate(sorted(self.values)):
                specs[channel] = self.values[channel].spec()
                refs.update(self.values[channel].refs(f"{VALUE_PREFIX}{k}"))
            data["values"] = specs
        if self.writes:
            rows = []
            for n, write in enumerate(self.writes):
                rows.append(
                    [write.task_id, write.idx, write.channel, write.task_path, write.value.spec()]
                )
                refs.update(write.value.refs(f"{WRITE_PREFIX}{n}"))
            data["writes"] = rows
        if self.newest and self.newest != self.checkpoint_id:
            data["newest"] = self.newest
        return data, refs

    @classmethod
    def from_tree(cls, tree: Tree, oid: str | None = None) -> Record:
        """Read a record back from its tree; CorruptObject if the tree is not a record."""
        return _RecordReader(tree, oid).read()


class _RecordReader:
    """Strict decoding of one record, tracking which references the data accounts for."""

    FIELDS = frozenset({"id", CHECKPOINT, METADATA, "parent", "values", "writes", "newest"})

    def __init__(self, tree: Tree, oid: str | None) -> None:
        self.tree = tree
        self.oid = oid
        self.used: set[str] = set()

    def fail(self, message: str) -> CorruptObject:
        return CorruptObject(f"checkpoint record: {message}", self.oid)

    def ref(self, name: str, kind: RefKind) -> str:
        found = self.tree.refs.get(name)
        if found is None:
            raise self.fail(f"reference {name[:80]!r} is missing")
        if found[0] is not kind:
            raise self.fail(f"reference {name[:80]!r} is a {found[0].value}, not a {kind.value}")
        self.used.add(name)
        return found[1]

    def text(self, value: Any, what: str) -> str:
        if not isinstance(value, str):
            raise self.fail(f"{what} is not a string")
        return value

    def count(self, value: Any, name: str, minimum: int) -> int:
        if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
            raise self.fail(f"element count of {name[:80]!r} is out of range")
        return value

    def value(self, spec: Any, name: str, lists: frozenset[str]) -> StoredValue:
        if not isinstance(spec, list) or not spec or not isinstance(spec[0], str):
            raise self.fail(f"value spec of {name[:80]!r} is malformed")
        form = spec[0]
        if form == INLINE and len(spec) == 3:
            type_tag = self.text(spec[1], "an inline value's type")
            try:
                data = self.text(spec[2], "an inline value").encode("latin-1")
            except UnicodeEncodeError as exc:
                raise self.fail(f"inline value of {name[:80]!r} is not Latin-1 text") from exc
            return StoredValue(INLINE, serialized=(type_tag, data))
        if form == BLOB and len(spec) == 1:
            return StoredValue(BLOB, oids=(self.ref(name, BLOB_REF),))
        if form not in lists:
            raise self.fail(f"value spec of {name[:80]!r} is malformed")
        if form == CHAIN and len(spec) == 2:
            count = self.count(spec[1], name, 1)
            return StoredValue(CHAIN, oids=(self.ref(name, NODE_REF),), count=count)
        if form == ITEMS and len(spec) == 2:
            count = self.count(spec[1], name, 1)
            oids = tuple(self.ref(f"{name}/{i}", BLOB_REF) for i in range(count))
            return StoredValue(ITEMS, oids=oids, count=count)
        if form == LEAVES and len(spec) in (3, 4):
            count = self.count(spec[1], name, 1)
            leaf_size = self.count(spec[2], name, 2)
            if len(spec) == 4 and spec[3] != DELTA_SNAPSHOT:
                raise self.fail(f"value spec of {name[:80]!r} is malformed")
            tail = tuple(self.ref(f"{name}/{i}", BLOB_REF) for i in range(count % leaf_size))
            last = self.ref(f"{name}/{LEAVES}", RECORD_REF) if count >= leaf_size else None
            return StoredValue(
                LEAVES,
                oids=tail,
                count=count,
                base=last,
                leaf_size=leaf_size,
                wrapper=spec[3] if len(spec) == 4 else "",
            )
        if form == EXTENDS and len(spec) == 3:
            added = self.count(spec[2], name, 1)
            count = self.count(spec[1], name, added + 1)
            oids = tuple(self.ref(f"{name}/{i}", BLOB_REF) for i in range(added))
            base = self.ref(f"{name}/{BASE}", RECORD_REF)
            return StoredValue(EXTENDS, oids=oids, count=count, base=base)
        raise self.fail(f"value spec of {name[:80]!r} is malformed")

    def part(self, data: dict[str, Any], key: str) -> dict[str, Any] | StoredValue | None:
        if key in data:
            if not isinstance(data[key], dict):
                raise self.fail(f"{key} is not a JSON object")
            if key in self.tree.refs:
                raise self.fail(f"{key} is both inline and referenced")
            inline: dict[str, Any] = data[key]
            return inline
        if key in self.tree.refs:
            return StoredValue(BLOB, oids=(self.ref(key, BLOB_REF),))
        return None

    def write(self, row: Any, n: int) -> StoredWrite:
        if not isinstance(row, list) or len(row) != 5:
            raise self.fail(f"write {n} is malformed")
        task_id, idx, channel, task_path, spec = row
        if not isinstance(idx, int) or isinstance(idx, bool):
            raise self.fail(f"write {n} has a non-integer index")
        return StoredWrite(
            task_id=self.text(task_id, "a write's task id"),
            idx=idx,
            channel=self.text(channel, "a write's channel"),
            task_path=self.text(task_path, "a write's task path"),
            value=self.value(spec, f"{WRITE_PREFIX}{n}", frozenset({ITEMS})),
        )

    def read(self) -> Record:
        data = self.tree.data
        if not isinstance(data, dict):
            raise self.fail("data is not a JSON object")
        unknown = set(data) - self.FIELDS
        if unknown:
            raise self.fail(f"unknown fields {sorted(unknown)[:5]}")
        checkpoint_id = self.text(data.get("id"), "the checkpoint id")
        checkpoint = self.part(data, CHECKPOINT)
        metadata = self.part(data, METADATA)
        if checkpoint is None and (metadata is not None or "values" in data or "parent" in data):
            raise self.fail("a writes record holds checkpoint fields")
        if checkpoint is not None and metadata is None:
            raise self.fail("a checkpoint record has no metadata")
        parent = data.get("parent")
        values_spec = data.get("values", {})
        if not isinstance(values_spec, dict) or ("values" in data and not values_spec):
            raise self.fail("values is not a non-empty JSON object")
        channel_lists = frozenset({LEAVES, EXTENDS, CHAIN})
        values = {
            channel: self.value(values_spec[channel], f"{VALUE_PREFIX}{k}", channel_lists)
            for k, channel in enumerate(sorted(values_spec))
        }
        rows = data.get("writes", [])
        if not isinstance(rows, list) or ("writes" in data and not rows):
            raise self.fail("writes is not a non-empty list")
        writes = tuple(self.write(row, n) for n, row in enumerate(rows))
        if [w.sort_key for w in writes] != sorted(w.sort_key for w in writes) or len(
            {w.key for w in writes}
        ) != len(writes):
            raise self.fail("writes are not in order or repeat a (task id, idx)")
        previous = self.ref(PREVIOUS, RECORD_REF) if PREVIOUS in self.tree.refs else None
        newest = data.get("newest", "")
        if "newest" in data and (self.text(newest, "newest") <= checkpoint_id):
            raise self.fail("newest is not greater than the record's own id")
        unused = set(self.tree.refs) - self.used
        if unused:
            raise self.fail(f"references {sorted(unused)[:5]} are not accounted for")
        return Record(
            checkpoint_id=checkpoint_id,
            checkpoint=checkpoint,
            metadata=metadata,
            parent_id=None if parent is None else self.text(parent, "the parent id"),
            values=values,
            writes=writes,
            previous=previous,
            newest=newest,
        )


def leaf_tree(elements: tuple[str, ...], before: str | None) -> Tree:
    """The leaf holding ``elements`` after the leaf ``before`` (None: the first leaf)."""
    refs: dict[str, tuple[RefKind, str]] = {
        str(i): (BLOB_REF, oid) for i, oid in enumerate(elements)
    }
    if before is not None:
        refs[LEAF_BEFORE] = (RECORD_REF, before)
    return Tree(refs=refs)


def leaf_body(elements: tuple[str, ...], before: str | None) -> bytes:
    """``leaf_tree(elements, before).body()``, spelled directly (the canonical form: keys
    in code point order, no spaces; a test checks that both agree)."""
    names = sorted([*map(str, range(len(elements))), *([LEAF_BEFORE] if before else [])])
    parts = [
        f'"{name}":["{RECORD_REF.value}","{before}"]'
        if name == LEAF_BEFORE
        else f'"{name}":["{BLOB_REF.value}","{elements[int(name)]}"]'
        for name in names
    ]
    return ('{"refs":{' + ",".join(parts) + "}}").encode("ascii")


_LEAF_REFERENCE = re.compile(rb'"(\d+|before)":\["(?:blob|tree)","([0-9a-f]{64})"\]')


def read_leaf_body(body: bytes, oid: str, size: int) -> tuple[tuple[str, ...], str | None]:
    """A leaf's elements and the leaf before it, from its body; CorruptObject unless the
    body is exactly the leaf of ``size`` elements it spells (``leaf_body`` of them)."""
    found = dict(_LEAF_REFERENCE.findall(body))
    try:
        elements = tuple(found[str(i).encode()].decode() for i in range(size))
    except KeyError:
        raise CorruptObject(f"list leaf does not hold {size} elements", oid) from None
    before = found.get(b"before")
    previous = before.decode() if before is not None else None
    if len(found) != size + (before is not None) or leaf_body(elements, previous) != body:
        raise CorruptObject(f"list leaf is not a leaf of {size} elements", oid)
    return elements, previous


def read_leaf(tree: Tree, oid: str, size: int) -> tuple[tuple[str, ...], str | None]:
    """A leaf's elements and the leaf before it; CorruptObject unless it is a leaf of
    ``size`` elements."""
    refs = tree.refs
    before = refs.get(LEAF_BEFORE)
    if tree.data is not None or len(refs) != size + (before is not None):
        raise CorruptObject(f"list leaf does not hold {size} elements", oid)
    if before is not None and before[0] is not RECORD_REF:
        raise CorruptObject("list leaf's before reference is not a leaf", oid)
    elements = []
    for i in range(size):
        found = refs.get(str(i))
        if found is None or found[0] is not BLOB_REF:
            raise CorruptObject(f"list leaf has no element {i}", oid)
        elements.append(found[1])
    return tuple(elements), None if before is None else before[1]
