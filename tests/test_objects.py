"""The object format: golden vectors, round trips, hash independence, hostile frames."""

from __future__ import annotations

import base64
import contextlib
import json
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest
import zstandard
from hypothesis import example, given, settings
from hypothesis import strategies as st

from cas_journal.errors import CorruptObject, InvalidInputError, JournalError
from cas_journal.objects import (
    CheckpointNode,
    EntryNode,
    Kind,
    MessageNode,
    ObjectCodec,
    SegmentNode,
    ThreadStateNode,
    TreeNode,
    canonical_json,
    object_id,
    parse_node,
    references,
    skip_depth,
)

GOLDEN = json.loads((Path(__file__).parent.parent / "fixtures" / "golden_objects.json").read_text())
NODE_TYPES = {
    "entry": EntryNode,
    "thread": ThreadStateNode,
    "checkpoint": CheckpointNode,
    "message": MessageNode,
    "tree": TreeNode,
    "segment": SegmentNode,
}


def build(vector: dict) -> bytes:
    spec = vector["input"]
    if vector["kind"] == "blob":
        return base64.b64decode(spec["base64"])
    fields = {k: tuple(v) if isinstance(v, list) else v for k, v in spec["fields"].items()}
    return NODE_TYPES[vector["kind"]](**fields).body()


def test_golden_vectors_cover_every_kind():
    assert len(GOLDEN) >= 10
    assert {v["kind"] for v in GOLDEN} == {kind.value for kind in Kind}


@pytest.mark.parametrize("vector", GOLDEN, ids=[v["name"] for v in GOLDEN])
def test_golden_vector_bytes_and_id(vector):
    body = build(vector)
    assert body == base64.b64decode(vector["canonical_body_base64"])
    assert object_id(Kind(vector["kind"]), body) == vector["oid"]
    codec = ObjectCodec()
    oid, frame = codec.encode(Kind(vector["kind"]), body)
    assert oid == vector["oid"]
    assert codec.decode(oid, frame) == (Kind(vector["kind"]), body)
    if vector["kind"] != "blob":
        node = parse_node(Kind(vector["kind"]), body, oid)
        assert node is not None and node.body() == body


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


@given(st.binary(max_size=4096), st.sampled_from(list(Kind)))
def test_encode_decode_round_trip(body, kind):
    codec = ObjectCodec()
    oid, frame = codec.encode(kind, body)
    assert oid == object_id(kind, body)
    assert codec.decode(oid, frame) == (kind, body)


@given(st.binary(max_size=256))
def test_two_kinds_never_share_an_id(body):
    assert len({object_id(kind, body) for kind in Kind}) == len(Kind)


@given(st.dictionaries(st.text(), json_values, max_size=8), st.randoms())
def test_canonical_json_ignores_key_order(mapping, rnd):
    items = list(mapping.items())
    rnd.shuffle(items)
    assert canonical_json(dict(items)) == canonical_json(mapping)
    assert json.loads(canonical_json(mapping)) == mapping


def test_canonical_json_is_not_pydantic_or_json_defaults():
    # fixed separators, sorted keys, raw UTF-8: independent of json.dumps defaults
    assert canonical_json({"b": 1, "a": "\u00e9"}) == '{"a":"é","b":1}'.encode()
    with pytest.raises(InvalidInputError):
        canonical_json({"a": float("nan")})
    with pytest.raises(InvalidInputError):
        canonical_json({"a": "\ud800"})
    with pytest.raises(InvalidInputError):
        canonical_json({"a": object()})


@given(st.binary(max_size=2048))
def test_random_bytes_never_decode(data):
    codec = ObjectCodec()
    with pytest.raises(CorruptObject):
        codec.decode("0" * 64, data)


@given(st.binary(min_size=1, max_size=512), st.integers(min_value=0), st.integers(0, 7))
def test_bit_flips_are_detected(body, position, bit):
    codec = ObjectCodec()
    oid, frame = codec.encode(Kind.BLOB, body)
    damaged = bytearray(frame)
    damaged[position % len(damaged)] ^= 1 << bit
    # a flip either is detected or (in a bit zstd ignores) changes nothing: never wrong data
    with contextlib.suppress(CorruptObject):
        assert codec.decode(oid, bytes(damaged)) == (Kind.BLOB, body)


@given(st.binary(max_size=300))
def test_truncated_frames_are_detected(body):
    codec = ObjectCodec()
    oid, frame = codec.encode(Kind.BLOB, body)
    for cut in range(len(frame)):
        with pytest.raises(CorruptObject):
            codec.decode(oid, frame[:cut])


def test_wrong_content_names_the_oid():
    codec = ObjectCodec()
    oid, _ = codec.encode(Kind.BLOB, b"one")
    _, other = codec.encode(Kind.BLOB, b"two")
    with pytest.raises(CorruptObject) as info:
        codec.decode(oid, other)
    assert info.value.oid == oid and oid in str(info.value)


def test_decompression_bomb_is_refused_before_allocation():
    codec = ObjectCodec(max_object_size=1024)
    bomb = zstandard.ZstdCompressor(write_content_size=True).compress(b"\0" * (10 * 1024 * 1024))
    assert len(bomb) < 2000
    with pytest.raises(CorruptObject, match="declares"):
        codec.decode("0" * 64, bomb)
    # a frame that hides its size is refused too
    hidden = zstandard.ZstdCompressor(write_content_size=False).compress(b"\0" * 4096)
    with pytest.raises(CorruptObject, match="declare"):
        codec.decode("0" * 64, hidden)


def test_oversized_put_is_refused():
    with pytest.raises(InvalidInputError):
        ObjectCodec(max_object_size=10).encode(Kind.BLOB, b"x" * 11)


def test_trailing_data_is_refused():
    codec = ObjectCodec()
    oid, frame = codec.encode(Kind.BLOB, b"payload")
    with pytest.raises(CorruptObject):
        codec.decode(oid, frame + frame)


@given(st.binary(max_size=200))
def test_structured_parsers_raise_only_journal_errors(body):
    for kind in Kind:
        with contextlib.suppress(JournalError):
            references(kind, body)


def test_parsers_refuse_inconsistent_nodes():
    bad = [
        (
            Kind.ENTRY,
            {"payload": "a" * 64, "created_at": "2026-01-02T03:04:05.000006Z", "depth": 1},
        ),
        (Kind.ENTRY, {"payload": "x", "created_at": "2026-01-02T03:04:05.000006Z"}),
        (Kind.ENTRY, {"payload": "a" * 64, "created_at": "yesterday"}),
        (Kind.THREAD, {"meta": {}}),
        (
            Kind.CHECKPOINT,
            {"run_id": "r", "created_at": "2026-01-02T03:04:05.000006Z", "message_count": 2},
        ),
        (Kind.MESSAGE, {"message": "a" * 64, "extra": 1}),
    ]
    for kind, value in bad:
        with pytest.raises(CorruptObject):
            parse_node(kind, canonical_json(value))


def test_skip_depths_point_strictly_backwards_and_reach_fast():
    for depth in range(2, 5000):
        target = skip_depth(depth)
        assert 0 <= target < depth - 1 or (depth == 2 and target == 0)
    # walking from depth n to 0 with greedy skips is logarithmic
    for start in (1000, 4097, 65535):
        hops, depth = 0, start
        while depth > 0:
            depth = skip_depth(depth) if depth >= 2 else depth - 1
            hops += 1
        assert hops <= 40


def test_golden_entries():
    import sys

    sys.path.insert(0, str(Path(__file__).parent.parent / "fixtures"))
    from make_golden_entries import build

    pinned = json.loads(
        (Path(__file__).parent.parent / "fixtures" / "golden_entries.json").read_text()
    )
    assert len(pinned) >= 8
    assert build() == pinned


oids = st.text(alphabet="0123456789abcdef", min_size=64, max_size=64)


@given(
    payload=oids,
    depth=st.integers(0, 10**6),
    parent=oids,
    skip=oids,
    # any text, and ASCII (quoted as it is unless it holds a quote, backslash or control)
    turn_id=st.text(max_size=30) | st.text(st.characters(max_codepoint=127), max_size=30),
    seconds=st.integers(0, 10**10),
)
def test_fast_entry_body_equals_the_generic_encoding(
    payload, depth, parent, skip, turn_id, seconds
):
    from datetime import UTC, datetime, timedelta

    from cas_journal.objects import format_time

    created = format_time(datetime(1970, 1, 1, tzinfo=UTC) + timedelta(microseconds=seconds))
    node = EntryNode(
        payload=payload,
        created_at=created,
        depth=depth,
        parent=parent if depth else None,
        skip=skip if depth >= 2 else None,
        turn_id=turn_id,
    )
    assert node.body() == node.generic_body()
    assert EntryNode.parse(node.body()) == node


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner),
    max_leaves=8,
)


@pytest.mark.slow
@settings(max_examples=300)
@given(
    meta=st.dictionaries(st.text(max_size=6), json_values, max_size=5),
    leaf=st.none() | st.just("") | oids,
    heads=st.lists(oids, max_size=3),
    parents=st.lists(oids, max_size=2),
    depth=st.integers(0, 2**70),
    skip=st.none() | oids,
)
@example(meta={"n": 1e-7, "m": [0.5]}, leaf=None, heads=[], parents=[], depth=0, skip=None)
def test_a_state_body_is_the_reference_encoding(meta, leaf, heads, parents, depth, skip):
    from cas_journal.objects.canonical import reference_json

    state = ThreadStateNode(meta, leaf, tuple(heads), tuple(parents), depth, skip)
    fields = {"meta": meta, "leaf": leaf, "heads": sorted(heads), "parents": parents}
    fields.update(depth=depth, skip=skip)
    expected = {k: v for k, v in fields.items() if k == "meta" or v not in (None, "", 0, [])}
    assert state.body() == reference_json(expected)


@settings(max_examples=300)
@given(
    moment=st.datetimes(
        min_value=datetime(1, 1, 2), max_value=datetime(9999, 12, 30), timezones=st.just(UTC)
    )
    | st.datetimes(
        min_value=datetime(1, 1, 2),
        max_value=datetime(9999, 12, 30),
        timezones=st.sampled_from(
            [timezone(timedelta(hours=5, minutes=30)), timezone(-timedelta(hours=7))]
        ),
    ),
    whole=st.booleans(),
)
def test_format_time_writes_what_isoformat_writes(moment, whole):
    from cas_journal.objects import format_time, parse_time
    from cas_journal.objects.canonical import reference_time_text

    if whole:
        moment = moment.replace(microsecond=0)
    in_utc = moment.astimezone(UTC)
    expected = (
        f"{in_utc.year:04d}-{in_utc.month:02d}-{in_utc.day:02d}T{in_utc.hour:02d}:"
        f"{in_utc.minute:02d}:{in_utc.second:02d}.{in_utc.microsecond:06d}Z"
    )
    assert reference_time_text(in_utc) == expected
    assert format_time(moment) == expected
    assert format_time(moment) == expected  # the second's text kept from the first call
    later = moment + timedelta(microseconds=1)
    assert format_time(later) == reference_time_text(later.astimezone(UTC))
    assert parse_time(expected) == in_utc


@given(message=oids, parent=st.none() | oids, noise=st.sampled_from(["", " ", "\n"]))
def test_a_message_node_reads_its_canonical_body_as_the_json_parser_does(message, parent, noise):
    from cas_journal.objects import MessageNode
    from cas_journal.objects.canonical import parse_json

    node = MessageNode(message, parent)
    body = node.body()
    assert MessageNode.parse(body) == node
    assert parse_json(body) == {"message": message, **({"parent": parent} if parent else {})}
    spaced = body.replace(b":", noise.encode() + b":")  # not canonical: the JSON parser reads it
    assert MessageNode.parse(spaced) == node
    upper = body.replace(message.encode(), message.upper().encode())
    if upper != body:  # an oid in capitals is no oid, however the body is read
        with pytest.raises(CorruptObject):
            MessageNode.parse(upper)


def test_thread_state_depth_and_skip_must_agree_with_parents():
    meta = {"id": "t"}
    bad = [
        {"meta": meta, "depth": 1},  # a depth needs a parent
        {"meta": meta, "depth": 2, "parents": ["a" * 64]},  # depth 2 needs a skip pointer
        {"meta": meta, "depth": 1, "parents": ["a" * 64], "skip": "b" * 64},
        {"meta": meta, "depth": -1, "parents": ["a" * 64]},
    ]
    for value in bad:
        with pytest.raises(CorruptObject):
            ThreadStateNode.parse(canonical_json(value))
    # a state written before states had depths (a parent, no depth) still parses
    legacy = ThreadStateNode.parse(canonical_json({"meta": meta, "parents": ["a" * 64]}))
    assert legacy.depth == 0 and legacy.skip is None and legacy.parent == "a" * 64
    linked = ThreadStateNode(meta, parents=("a" * 64,), depth=3, skip="b" * 64)
    assert ThreadStateNode.parse(linked.body()) == linked
    assert "b" * 64 in linked.references()
    assert ("b" * 64, Kind.THREAD) in linked.typed_references()


def _skip_chain(
    length: int, tag: str, prefix: list[str] | None = None, known: dict | None = None
) -> tuple[list[str], dict]:
    """A first-parent chain of thread states with skip pointers, continuing ``prefix``
    (whose nodes are in ``known``); returns the whole chain and every node."""
    from cas_journal.objects import ancestor_at

    nodes: dict[str, ThreadStateNode] = dict(known or {})
    chain = list(prefix or [])
    for _ in range(length):
        depth = len(chain)
        parent = chain[-1] if chain else None
        skip = ancestor_at(nodes.__getitem__, parent, skip_depth(depth)) if depth >= 2 else None
        node = ThreadStateNode(
            {"id": "t", "side": tag},
            parents=(parent,) if parent else (),
            depth=depth,
            skip=skip,
        )
        oid = object_id(Kind.THREAD, node.body())
        nodes[oid] = node
        chain.append(oid)
    return chain, nodes


@given(st.integers(1, 3000), st.data())
def test_ancestor_at_follows_skip_pointers_in_logarithmic_reads(length, data):
    from cas_journal.objects import ancestor_at

    chain, nodes = _skip_chain(length, "x")
    reads = 0

    def lookup(oid: str) -> ThreadStateNode:
        nonlocal reads
        reads += 1
        return nodes[oid]

    depth = data.draw(st.integers(0, length - 1))
    assert ancestor_at(lookup, chain[-1], depth) == chain[depth]
    assert reads <= 4 * length.bit_length() + 4
    with pytest.raises(ValueError):
        ancestor_at(lookup, chain[depth], depth + 1)


@given(st.integers(1, 600), st.integers(0, 300), st.integers(0, 300))
def test_meeting_point_of_two_diverged_chains(shared, left, right):
    from cas_journal.objects import meeting_point

    base, nodes = _skip_chain(shared, "base")
    a, a_nodes = _skip_chain(left, "a", base, nodes)
    b, b_nodes = _skip_chain(right, "b", base, nodes)
    reads = 0

    def remote(oid: str) -> ThreadStateNode:
        nonlocal reads
        reads += 1
        return b_nodes[oid]

    assert meeting_point(a_nodes.__getitem__, a[-1], remote, b[-1]) == base[-1]
    depth = max(len(a), len(b)).bit_length()
    assert reads <= 4 * depth * depth + 4
    unrelated, other = _skip_chain(5, "unrelated")
    assert meeting_point(a_nodes.__getitem__, a[-1], other.__getitem__, unrelated[-1]) is None


# -- the fast canonical encoder against the reference ---------------------------------------

orjson = pytest.importorskip("orjson")  # in the test extra: these tests always run in CI

text_with_edges = st.text(
    alphabet=st.one_of(
        st.characters(codec="utf-8"),  # any code point but lone surrogates
        st.sampled_from(list('\u2028\u2029\x00\x1f\x7f"\\/\b\f\n\r\t\ufeff\uffff')),
    )
)
scalars = (
    st.none()
    | st.booleans()
    | st.integers()  # big ints beyond 64 bits included
    | st.integers(-(2**64), 2**64)
    | st.floats()  # NaN and infinities included: both must refuse them
    | st.floats(allow_nan=False, allow_infinity=False)
    | text_with_edges
)
keys = text_with_edges | st.integers() | st.booleans() | st.none() | st.floats()
any_json = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=5)
        | st.tuples(inner, inner)
        | st.dictionaries(text_with_edges, inner, max_size=5)
        | st.dictionaries(keys, inner, max_size=3)
    ),
    max_leaves=30,
)


def _outcome(encode, value):
    try:
        return encode(value)
    except InvalidInputError:
        return "refused"


@given(any_json)
def test_fast_encoder_writes_exactly_the_reference_bytes(value):
    from cas_journal.objects.canonical import reference_json

    assert _outcome(canonical_json, value) == _outcome(reference_json, value)


plain_json = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63) + 1, 2**63 - 1)
    | text_with_edges
    | st.sampled_from(["\ud800", "a\udfff"]),  # lone surrogates: refused by both
    lambda inner: (
        st.lists(inner, max_size=5)
        | st.tuples(inner, inner)
        | st.dictionaries(text_with_edges, inner, max_size=5)
    ),
    max_leaves=30,
)


@given(plain_json)
def test_encoding_a_value_known_plain_writes_exactly_the_reference_bytes(value):
    from cas_journal.objects.canonical import canonical_json_of_plain, reference_json

    assert _outcome(canonical_json_of_plain, value) == _outcome(reference_json, value)
    deep: list = [value]
    for _ in range(300):  # deeper than orjson allows: the reference decides
        deep = [deep]
    assert _outcome(canonical_json_of_plain, deep) == _outcome(reference_json, deep)


@pytest.mark.parametrize(
    "value",
    [
        {"x": "\ud800"},  # a lone surrogate cannot be UTF-8
        ["ok", "\udfff"],
        {"\ud83d": 1},
        {"x": float("nan")},
        [float("inf")],
        {"x": object()},
        {(1, 2): "tuple key"},
    ],
)
def test_fast_encoder_refuses_what_the_reference_refuses(value):
    with pytest.raises(InvalidInputError):
        canonical_json(value)


def test_fast_encoder_edge_cases():
    import uuid
    from enum import Enum

    class Colour(Enum):
        RED = "red"

    # types orjson would write but the reference refuses stay refused
    for value in (uuid.uuid4(), Colour.RED, {"when": __import__("datetime").date(2026, 1, 1)}):
        with pytest.raises(InvalidInputError):
            canonical_json(value)
    assert canonical_json(2**64) == b"18446744073709551616"
    assert canonical_json(-(2**63) - 1) == b"-9223372036854775809"
    assert canonical_json([1e16, 1e-5, -0.0, 1.0]) == b"[1e+16,1e-05,-0.0,1.0]"
    assert canonical_json({2: "b", 1: "a"}) == b'{"1":"a","2":"b"}'  # keys of one type
    with pytest.raises(InvalidInputError):
        canonical_json({1: "a", "b": 2.5})  # keys of mixed types cannot be sorted
    assert canonical_json({"\u2028": "\x1f\x7f"}) == '{"\u2028":"\\u001f\x7f"}'.encode()
    deep: list = []
    for _ in range(2000):  # deeper than orjson allows: the reference decides
        deep = [deep]
    with pytest.raises(RecursionError):
        canonical_json(deep)


@given(any_json)
def test_fast_parser_reads_what_the_reference_parser_reads(value):
    from cas_journal.objects.canonical import parse_json, reference_json

    try:
        data = reference_json(value)
    except InvalidInputError:
        return
    parsed = parse_json(data)
    expected = json.loads(data)
    assert parsed == expected and _types(parsed) == _types(expected)


def _types(value):
    """The value's structure with every scalar's type (1, 1.0 and True differ)."""
    if isinstance(value, dict):
        return {k: _types(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_types(v) for v in value]
    return (type(value).__name__, repr(value))


@given(st.binary(max_size=64) | st.text(max_size=40).map(str.encode))
def test_fast_parser_accepts_and_refuses_like_the_reference(data):
    from cas_journal.objects.canonical import parse_json

    try:
        expected = ("ok", _types(json.loads(data)))
    except (ValueError, RecursionError) as exc:
        expected = ("error", type(exc).__name__ == "RecursionError")
    try:
        got = ("ok", _types(parse_json(data)))
    except (ValueError, RecursionError) as exc:
        got = ("error", type(exc).__name__ == "RecursionError")
    assert got == expected


@given(any_json, st.booleans())
def test_exact_parser_reads_what_the_reference_parser_reads(value, orjson_text):
    """parse_json_exact (segments) takes shortcuts at C speed: a text that is orjson's own
    writing, or one without 19 digits in a row; neither may change what is read."""
    import orjson

    from cas_journal.objects.canonical import parse_json_exact, reference_json

    try:
        data = orjson.dumps(value, option=orjson.OPT_SORT_KEYS) if orjson_text else None
    except TypeError:
        data = None
    try:
        data = data or reference_json(value)
    except InvalidInputError:
        return
    parsed = parse_json_exact(data)
    expected = json.loads(data)
    assert parsed == expected and _types(parsed) == _types(expected)


@given(st.binary(max_size=64) | st.text(max_size=40).map(str.encode))
def test_exact_parser_accepts_and_refuses_like_the_reference(data):
    from cas_journal.objects.canonical import parse_json_exact

    try:
        expected = ("ok", _types(json.loads(data)))
    except (ValueError, RecursionError) as exc:
        expected = ("error", type(exc).__name__ == "RecursionError")
    try:
        got = ("ok", _types(parse_json_exact(data)))
    except (ValueError, RecursionError) as exc:
        got = ("error", type(exc).__name__ == "RecursionError")
    assert got == expected


@pytest.mark.parametrize(
    "data",
    [
        b'{"n":18446744073709551616}',  # orjson reads these as floats
        b'{"n":-9223372036854775809,"s":"x"}',
        b"[123456789012345678901234567890,1.5]",
        b'{"a":1e16,"n":99999999999999999999}',
        b'{"s":"1234567890123456789012"}',  # 22 digits in a string: read as it is
        b'{"f":1.2345678901234568e+23}',
        b"[1e400]",
        b"[-0.0,0,1.0,true]",
    ],
)
def test_exact_parser_keeps_long_integers_and_floats_apart(data):
    from cas_journal.objects.canonical import parse_json_exact

    assert _types(parse_json_exact(data)) == _types(json.loads(data))


def test_parse_json_keeps_big_integers_exact():
    from cas_journal.objects.canonical import parse_json

    assert parse_json(b'{"n":123456789012345678901234567890}') == {
        "n": 123456789012345678901234567890
    }
    assert parse_json(b"[18446744073709551616, 1.5]") == [18446744073709551616, 1.5]
    assert parse_json(b'"\\ud800"') == "\ud800"  # what the standard parser gives


def test_everything_works_without_orjson(monkeypatch):
    """orjson is optional (the fast extra): without it the reference encoder and the
    standard parser do all the work, with the same bytes."""
    import cas_journal as cj
    from cas_journal.objects import canonical

    with_fast = canonical_json({"b": [1, "\u00e9"], "a": None})
    monkeypatch.setattr(canonical, "_fast", False)
    assert canonical._fast_json() is None
    assert canonical_json({"b": [1, "\u00e9"], "a": None}) == with_fast
    assert canonical.parse_json(with_fast) == {"a": None, "b": [1, "\u00e9"]}
    j = cj.Journal.memory()
    j.create_thread(cj.ThreadMeta(id="t"))
    entry = j.append(
        cj.Entry(thread_id="t", type=cj.EntryType.USER_MESSAGE, message=cj.Message(content="hi"))
    )
    assert cj.Journal(j.store).path("t") == [entry]
    j.checkpoints.save(cj.Checkpoint(run_id="r", messages=[{"n": 2**70}]))
    assert cj.Journal(j.store).checkpoints.load("r").messages == [{"n": 2**70}]
