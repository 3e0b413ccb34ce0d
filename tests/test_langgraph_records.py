"""LangGraph checkpoint records: round trips through tree objects, strict decoding, write merging."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cas_journal.errors import CorruptObject, InvalidInputError
from cas_journal.langgraph.records import (
    BLOB,
    CHAIN,
    DELTA_SNAPSHOT,
    EXTENDS,
    INLINE,
    ITEMS,
    LEAVES,
    Record,
    StoredValue,
    StoredWrite,
    decode_serialized,
    encode_serialized,
    leaf_body,
    leaf_tree,
    merge_writes,
    read_leaf,
    read_leaf_body,
)
from cas_journal.objects import Kind, TreeNode, object_id

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
        st.builds(
            lambda size, leaves, tail, last, wrapper: StoredValue(
                LEAVES,
                oids=tuple(tail[: (size - 1)]),
                count=leaves * size + len(tail[: (size - 1)]),
                base=last if leaves else None,
                leaf_size=size,
                wrapper=wrapper,
            ),
            st.integers(2, 5),
            st.integers(0, 4),
            st.lists(oids, max_size=4),
            oids,
            st.sampled_from(["", DELTA_SNAPSHOT]),
        ).filter(lambda value: value.count > 0),
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
        (  # five elements in leaves of two: two leaves and one more; the leaves missing
            {"id": "x", "checkpoint": {}, "metadata": {}, "values": {"c": ["leaves", 5, 2]}},
            {"v/0/0": (Kind.BLOB, OID)},
        ),
        (  # a leaf of one element
            {"id": "x", "checkpoint": {}, "metadata": {}, "values": {"c": ["leaves", 1, 1]}},
            {"v/0/0": (Kind.BLOB, OID)},
        ),
        (  # an unknown wrapper
            {"id": "x", "checkpoint": {}, "metadata": {}, "values": {"c": ["leaves", 1, 2, "x"]}},
            {"v/0/0": (Kind.BLOB, OID)},
        ),
        (  # leaves are for channels, not writes
            {"id": "x", "writes": [["t", 0, "c", "", ["leaves", 1, 2]]]},
            {"w/0/0": (Kind.BLOB, OID)},
        ),
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


def test_golden_leaves_and_record() -> None:
    """The bytes and ids of record format 2's leaves and a record holding a list in them
    (a change to either is a format change)."""
    elements = tuple(f"{i:02x}" * 32 for i in range(1, 4))
    first = leaf_tree(elements[:2], None)
    assert first.body() == (
        b'{"refs":{"0":["blob","' + b"01" * 32 + b'"],"1":["blob","' + b"02" * 32 + b'"]}}'
    )
    first_oid = object_id(Kind.TREE, first.body())
    assert first_oid == "a0afa510ded4f19cccbb8ba397e523881e40a611bb779295a3faa62e9099dcf8"
    second = leaf_tree((elements[2], elements[0]), first_oid)
    second_oid = object_id(Kind.TREE, second.body())
    assert second_oid == "70568a6883af19ecc8fa6a6478040e9c923d90a95014b52c86e32e85f68f8f23"
    assert read_leaf(second, second_oid, 2) == ((elements[2], elements[0]), first_oid)
    record = Record(
        "1f0",
        checkpoint={"v": 4},
        metadata={"step": 1},
        values={
            "messages": StoredValue(
                LEAVES,
                oids=(elements[1],),
                count=5,
                base=second_oid,
                leaf_size=2,
                wrapper=DELTA_SNAPSHOT,
            ),
            "x": StoredValue(INLINE, serialized=("null", b"")),
        },
    )
    body = record.tree().body()
    assert body == (
        b'{"data":{"checkpoint":{"v":4},"id":"1f0","metadata":{"step":1},"values":'
        b'{"messages":["leaves",5,2,"delta-snapshot"],"x":["inline","null",""]}},'
        b'"refs":{"v/0/0":["blob","'
        + b"02" * 32
        + b'"],"v/0/leaves":["tree","'
        + second_oid.encode()
        + b'"]}}'
    )
    assert object_id(Kind.TREE, body) == (
        "d29b4ea3edeaa0d57fae8a57dfb858614ae19305a1f0cdadc694b4c31407298a"
    )
    assert Record.from_tree(TreeNode.parse(body)) == record


@pytest.mark.parametrize(
    "refs",
    [
        {"0": (Kind.BLOB, OID)},  # one element short
        {"0": (Kind.BLOB, OID), "1": (Kind.TREE, OID)},  # an element that is not a blob
        {"0": (Kind.BLOB, OID), "1": (Kind.BLOB, OID), "before": (Kind.BLOB, OID)},
        {"0": (Kind.BLOB, OID), "2": (Kind.BLOB, OID)},
    ],
)
def test_malformed_leaves_are_corrupt(refs: dict[str, tuple[Kind, str]]) -> None:
    with pytest.raises(CorruptObject):
        read_leaf(TreeNode(refs=refs), OID, 2)
    with pytest.raises(CorruptObject):
        read_leaf(TreeNode(refs={"0": (Kind.BLOB, OID), "1": (Kind.BLOB, OID)}, data=1), OID, 2)


@given(st.lists(oids, min_size=1, max_size=20), st.none() | oids)
def test_leaf_bodies_are_the_canonical_trees(elements: list[str], before: str | None) -> None:
    body = leaf_body(tuple(elements), before)
    assert body == leaf_tree(tuple(elements), before).body()
    assert read_leaf_body(body, OID, len(elements)) == (tuple(elements), before)
    assert read_leaf(TreeNode.parse(body), OID, len(elements)) == (tuple(elements), before)


@pytest.mark.parametrize(
    "body",
    [
        leaf_body(("ab" * 32,), None).replace(b":[", b": ["),  # not canonical
        leaf_body(("ab" * 32, "cd" * 32), None),  # two elements, not one
        b'{"data":1,' + leaf_body(("ab" * 32,), None)[1:],  # data
        leaf_body(("ab" * 32,), None).replace(b'"blob"', b'"tree"'),  # not a blob
        leaf_body(("ab" * 32,), "cd" * 32).replace(b'"tree"', b'"blob"'),  # before a blob
        leaf_body(("ab" * 32,), None)[:-1],  # cut
        b'{"refs":{"0":["blob","' + b"ab" * 32 + b'"],"x":["blob","' + b"ab" * 32 + b'"]}}',
    ],
)
def test_malformed_leaf_bodies_are_corrupt(body: bytes) -> None:
    with pytest.raises(CorruptObject):
        read_leaf_body(body, OID, 1)
