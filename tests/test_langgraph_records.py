"""LangGraph checkpoint records: round trips through tree objects, strict decoding, write merging."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cas_journal.errors import CorruptObject, InvalidInputError
from cas_journal.langgraph.records import (
    BLOB,
    CHAIN,
    EXTENDS,
    INLINE,
    ITEMS,
    Record,
    StoredValue,
    StoredWrite,
    decode_serialized,
    encode_serialized,
    merge_writes,
)
from cas_journal.objects import Kind, TreeNode

oids = st.text(alphabet="0123456789abcdef", min_size=64, max_size=64)
names = st.text(min_size=1, max_size=12)
serialized = st.tuples(st.text(max_size=8).filter(lambda t: "\0" not in t), st.binary(max_size=40))
json_dicts = st.dictionaries(
    st.text(max_size=6), st.none() | st.integers() | st.text(max_size=6), max_size=4
)


def channel_values() -> st.SearchStrategy[StoredValue]:
    return st.one_of(
        serialized.map(lambda s: StoredValue(INLINE, serialized=s)),
        oids.map(lambda o: StoredValue(BLOB, oids=(o,))),
        st.builds(lambda o, n: StoredValue(CHAIN, oids=(o,), count=n), oids, st.integers(1, 9)),
        st.builds(
            lambda base, added, extra: StoredValue(
                EXTENDS, oids=tuple(added), count=len(added) + extra, base=base
            ),
            oids,
            st.lists(oids, min_size=1, max_size=3),
            st.integers(1, 9),
        ),
    )


write_values = st.one_of(
    serialized.map(lambda s: StoredValue(INLINE, serialized=s)),
    oids.map(lambda o: StoredValue(BLOB, oids=(o,))),
    st.lists(oids, min_size=1, max_size=3).map(
        lambda os: StoredValue(ITEMS, oids=tuple(os), count=len(os))
    ),
)
writes = st.lists(
    st.builds(StoredWrite, names, st.integers(-4, 5), names, st.text(max_size=8), write_values),
    max_size=5,
).map(lambda ws: merge_writes((), ws))


@st.composite
def records(draw: st.DrawFn) -> Record:
    checkpoint_id = draw(st.text(min_size=1, max_size=10))
    newest = draw(
        st.one_of(st.just(""), st.text(max_size=12).map(lambda t: checkpoint_id + "~" + t))
    )
    previous = draw(st.none() | oids)
    if draw(st.booleans()):  # a writes record
        return Record(checkpoint_id, writes=draw(writes), previous=previous, newest=newest)
    part = st.one_of(json_dicts, oids.map(lambda o: StoredValue(BLOB, oids=(o,))))
    return Record(
        checkpoint_id,
        checkpoint=draw(part),
        metadata=draw(part),
        parent_id=draw(st.none() | st.text(max_size=10)),
        values=draw(st.dictionaries(names, channel_values(), max_size=4)),
        writes=draw(writes),
        previous=previous,
        newest=newest,
    )


@given(records())
def test_records_round_trip_through_trees(record: Record) -> None:
    tree = record.tree()
    body = tree.body()
    again = Record.from_tree(TreeNode.parse(body))
    assert again == record
    assert again.tree().body() == body


@given(serialized)
def test_value_blobs_round_trip(value: tuple[str, bytes]) -> None:
    assert decode_serialized(encode_serialized(value)) == value


def test_type_tags_with_nul_are_refused() -> None:
    with pytest.raises(InvalidInputError):
        encode_serialized(("a\0b", b""))
    with pytest.raises(CorruptObject):
        decode_serialized(b"no tag here")


OID = "ab" * 32


@pytest.mark.parametrize(
    ("data", "refs"),
    [
        ({"checkpoint": {}}, {}),  # no metadata
        ({"id": 1, "checkpoint": {}, "metadata": {}}, {}),
        ({"id": "x", "metadata": {}}, {}),  # a writes record with checkpoint fields
        ({"id": "x", "checkpoint": {}, "metadata": {}}, {"stray": (Kind.BLOB, OID)}),
        ({"id": "x", "checkpoint": {}, "metadata": {}, "values": {"c": ["blob"]}}, {}),
        (
            {"id": "x", "checkpoint": {}, "metadata": {}, "values": {"c": ["blob"]}},
            {"v/0": (Kind.MESSAGE, OID)},
        ),
        (
            {"id": "x", "checkpoint": {}, "metadata": {}, "values": {"c": ["items", 1]}},
            {"v/0/0": (Kind.BLOB, OID)},
        ),
        (
            {"id": "x", "checkpoint": {}, "metadata": {}, "values": {"c": ["extends", 1, 1]}},
            {"v/0/0": (Kind.BLOB, OID), "v/0/base": (Kind.TREE, OID)},
        ),
        ({"id": "x", "checkpoint": {}, "metadata": {}, "values": {"c": ["inline", "t", "ā"]}}, {}),
        (
            {
                "id": "x",
                "writes": [
                    ["t", 0, "c", "", ["inline", "t", ""]],
                    ["t", 0, "c", "", ["inline", "t", ""]],
                ],
            },
            {},
        ),
        (
            {
                "id": "x",
                "writes": [
                    ["t", 1, "c", "", ["inline", "t", ""]],
                    ["t", 0, "c", "", ["inline", "t", ""]],
                ],
            },
            {},
        ),
        ({"id": "x", "writes": [["t", True, "c", "", ["inline", "t", ""]]]}, {}),
        ({"id": "x", "writes": []}, {}),
        ({"id": "x", "newest": "a"}, {}),
        ({"id": "x", "other": 1}, {}),
        ({"id": "x"}, {"previous": (Kind.BLOB, OID)}),
        ("not an object", {}),
    ],
)
def test_malformed_records_are_corrupt(data: object, refs: dict[str, tuple[Kind, str]]) -> None:
    with pytest.raises(CorruptObject):
        Record.from_tree(TreeNode(refs=refs, data=data), OID)


def write(task: str, idx: int, path: str = "", tag: str = "v") -> StoredWrite:
    return StoredWrite(task, idx, "ch", path, StoredValue(INLINE, serialized=(tag, b"")))


def test_merge_keeps_regular_writes_and_replaces_special_ones() -> None:
    first = merge_writes((), [write("b", 0, "p2"), write("a", 1, "p1"), write("a", -1, tag="e1")])
    assert [(w.task_path, w.task_id, w.idx) for w in first] == [
        ("", "a", -1),
        ("p1", "a", 1),
        ("p2", "b", 0),
    ]
    again = merge_writes(first, [write("b", 0, "p2", tag="new"), write("a", -1, tag="e2")])
    tags = {w.key: w.value.serialized for w in again}
    assert tags[("b", 0)] == ("v", b"")  # a regular write is kept as first stored
    assert tags[("a", -1)] == ("e2", b"")  # a special one is replaced
    assert merge_writes(again, [write("b", 0, "p2")]) == again
