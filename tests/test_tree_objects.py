"""The tree object kind: canonical bodies, strict parsing, typed references."""

from __future__ import annotations

import contextlib
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cas_journal.errors import CorruptObject, JournalError
from cas_journal.objects import Kind, TreeNode, canonical_json, parse_node, typed_references

OID = "ab" * 32
OTHER = "cd" * 32

oids = st.text(alphabet="0123456789abcdef", min_size=64, max_size=64)
json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(), children, max_size=4)
    ),
    max_leaves=20,
)
trees = st.builds(
    TreeNode,
    refs=st.dictionaries(
        st.text(min_size=1, max_size=20), st.tuples(st.sampled_from(list(Kind)), oids), max_size=6
    ),
    data=json_values,
)


@given(trees)
def test_round_trip(tree: TreeNode) -> None:
    body = tree.body()
    parsed = parse_node(Kind.TREE, body)
    assert parsed == tree
    assert isinstance(parsed, TreeNode) and parsed.body() == body
    assert typed_references(Kind.TREE, body) == [
        (oid, kind) for _, (kind, oid) in sorted(tree.refs.items())
    ]


@given(st.binary(max_size=300))
def test_arbitrary_bytes_raise_only_journal_errors(body: bytes) -> None:
    with contextlib.suppress(JournalError):
        TreeNode.parse(body)


@given(trees)
def test_any_other_spelling_of_a_tree_is_refused(tree: TreeNode) -> None:
    value = json.loads(tree.body())
    loose = json.dumps(value, indent=1, sort_keys=False).encode()
    if loose != tree.body():
        with pytest.raises(CorruptObject):
            TreeNode.parse(loose)


@pytest.mark.parametrize(
    "body",
    [
        b'{"data":null}',  # the canonical form omits null data
        b'{"refs":{}}',  # ... and empty refs
        b'{"refs":{"a":["blob","' + OID.encode() + b'"]},"data":1}',  # key order
        b'{"data":1, "refs":{"a":["blob","' + OID.encode() + b'"]}}',  # whitespace
        b'{"data":"\\u00e9"}',  # an escape the canonical form does not use
        b'{"data":1,"data":2}',  # duplicate key
        b'{"data":NaN}',
        b'{"refs":{"a":["blob","' + OID.upper().encode() + b'"]}}',
        b'{"refs":{"a":["blob","' + OID[:-1].encode() + b'"]}}',
        b'{"refs":{"a":["nonsense","' + OID.encode() + b'"]}}',
        b'{"refs":{"a":[["blob"],"' + OID.encode() + b'"]}}',
        b'{"refs":{"a":["blob"]}}',
        b'{"refs":{"a":"blob ' + OID.encode() + b'"}}',
        b'{"refs":{"":["blob","' + OID.encode() + b'"]}}',
        b'{"refs":["blob","' + OID.encode() + b'"]}',
        b'{"data":1,"other":2}',
        b"[]",
        b'{"data":"\\ud800"}',
    ],
)
def test_malformed_bodies_are_corrupt(body: bytes) -> None:
    with pytest.raises(CorruptObject):
        TreeNode.parse(body, OTHER)


def test_refs_come_back_typed_and_in_name_order() -> None:
    tree = TreeNode(refs={"b": (Kind.MESSAGE, OID), "a": ("blob", OTHER)}, data={"k": [1]})
    assert tree.body() == canonical_json(
        {"data": {"k": [1]}, "refs": {"a": ["blob", OTHER], "b": ["message", OID]}}
    )
    assert tree.typed_references() == [(OTHER, Kind.BLOB), (OID, Kind.MESSAGE)]
    assert tree.references() == [OTHER, OID]
    assert TreeNode().body() == b"{}"
