"""Segments: a checkpoint's message list as one object per save.

The object (parse, canonical body, hostile bodies), the save/load round trip against the
simple model "the list as saved" (random lists and edits, across reopening, on top of
runs saved as message chains), what a save writes (one segment, the smallest base, none
when nothing changed), lying segments, and the walkers: gc, fsck, sync, pack, stats.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.journal_helpers import save_growing_run, stored, typed

import cas_journal as cj
from cas_journal.errors import CorruptObject
from cas_journal.journal import chains
from cas_journal.maintenance import fsck, gc, stats, sync
from cas_journal.objects import (
    CheckpointNode,
    Kind,
    SegmentNode,
    canonical_json,
    object_id,
    parse_node,
    segment_body,
)

OID = "a" * 64
OTHER = "b" * 64

json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**80), max_value=2**80)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=6)
)
json_values = st.recursive(
    json_scalars,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3)
    ),
    max_leaves=8,
)
messages_st = st.dictionaries(st.text(max_size=4), json_values, max_size=3)


def segmented(store=None) -> cj.Journal:
    """A journal whose saves write segments."""
    j = cj.Journal(store) if store is not None else cj.Journal.memory()
    j.checkpoints.segments = True
    return j


def head_node(j: cj.Journal, run: str = "r") -> CheckpointNode:
    oid = j.store.refs.read_ref(f"checkpoints/{run}")
    assert oid is not None
    return CheckpointNode.parse(j.store.objects.get(oid)[1], oid)


def segment(j: cj.Journal, oid: str) -> SegmentNode:
    kind, body = j.store.objects.get(oid)
    assert kind is Kind.SEGMENT
    return SegmentNode.parse(body, oid)


# -- the object ---------------------------------------------------------------------------


@given(
    st.lists(messages_st, max_size=4),
    st.integers(min_value=0, max_value=10),
    st.sampled_from(["none", "base", "base_chain"]),
)
def test_segment_bodies_round_trip_and_the_fast_builder_agrees(messages, keep, below):
    keep = 0 if below == "none" else keep + 1
    node = SegmentNode(
        messages,
        keep,
        OID if below == "base" else None,
        OTHER if below == "base_chain" else None,
    )
    body = node.body()
    assert segment_body([canonical_json(m) for m in messages], *node[1:]) == body
    parsed = SegmentNode.parse(body, object_id(Kind.SEGMENT, body))
    assert typed(parsed.messages) == typed(messages) and parsed[1:] == node[1:]
    assert parsed.length == keep + len(messages)
    refs = {"none": [], "base": [(OID, Kind.SEGMENT)], "base_chain": [(OTHER, Kind.MESSAGE)]}
    assert node.typed_references() == refs[below]


HOSTILE_SEGMENTS = [
    b"",
    b"[]",
    b"null",
    b'{"messages":{}}',
    b'{"messages":[1]}',
    b'{"messages":[[]]}',
    b'{"messages":[{}],"extra":1}',
    b'{"keep":1,"messages":[]}',
    b'{"base":"' + OID.encode() + b'","messages":[]}',
    b'{"base":"' + OID.encode() + b'","keep":0,"messages":[]}',
    b'{"base":"' + OID.encode() + b'","keep":-1,"messages":[]}',
    b'{"base":"' + OID.encode() + b'","keep":1.0,"messages":[]}',
    b'{"base":"' + OID.encode() + b'","keep":true,"messages":[]}',
    b'{"base":"' + OID.upper().encode() + b'","keep":1,"messages":[]}',
    b'{"base":"x","keep":1,"messages":[]}',
    b'{"base":"'
    + OID.encode()
    + b'","base_chain":"'
    + OTHER.encode()
    + b'","keep":1,"messages":[]}',
    b'{"messages":[{"a":1}',
    b'{"messages":[{"a":"\xff"}]}',
    b"[" * 100_000,
]


@pytest.mark.parametrize("body", HOSTILE_SEGMENTS)
def test_hostile_segment_bodies_are_corrupt_objects_naming_the_oid(body):
    oid = object_id(Kind.SEGMENT, body)
    with pytest.raises(CorruptObject) as raised:
        parse_node(Kind.SEGMENT, body, oid)
    assert oid in str(raised.value)


@given(st.binary(max_size=64) | st.text(max_size=64).map(str.encode))
def test_any_bytes_parse_as_a_segment_or_are_a_corrupt_object(body):
    try:
        node = SegmentNode.parse(b'{"messages":[' + body + b"]}")
    except CorruptObject:
        return
    assert all(type(message) is dict for message in node.messages)


def test_a_checkpoint_names_a_chain_or_a_segment_never_both():
    t = "2026-01-02T03:04:05.000006Z"
    both = CheckpointNode("r", t, message_count=1, messages=OID, segment=OTHER).body()
    with pytest.raises(CorruptObject, match="both"):
        CheckpointNode.parse(both)
    uncounted = CheckpointNode("r", t, segment=OTHER).body()
    with pytest.raises(CorruptObject, match="disagree"):
        CheckpointNode.parse(uncounted)
    node = CheckpointNode("r", t, message_count=2, segment=OTHER)
    assert CheckpointNode.parse(node.body()) == node
    assert node.typed_references() == [(OTHER, Kind.SEGMENT)]


# -- the journal against the simple model -------------------------------------------------

edits = st.one_of(
    st.tuples(st.just("append"), st.lists(messages_st, min_size=1, max_size=4)),
    st.tuples(st.just("truncate"), st.integers(min_value=0, max_value=20)),
    st.tuples(st.just("edit"), st.integers(min_value=0, max_value=20), messages_st),
    st.tuples(st.just("same"), st.none()),
    st.tuples(st.just("reopen"), st.none()),
    st.tuples(st.just("segments"), st.booleans()),
)


def _apply(current: list[dict], edit: tuple) -> list[dict]:
    what, arg = edit[0], edit[1]
    if what == "append":
        return current + arg
    if what == "truncate":
        return current[: min(arg, len(current))]
    if what == "edit" and current:
        index = arg % len(current)
        return [*current[:index], edit[2], *current[index + 1 :]]
    return list(current)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(edits, min_size=1, max_size=12),
    st.booleans(),
    st.integers(10, 400),
    st.integers(2, 4),
    st.integers(40, 800),
)
def test_saves_and_loads_match_the_list_as_saved(
    edit_list, start_with_chains, limit, merge_segments, merge_bytes
):
    saved: list[list[dict]] = []
    j = segmented()
    j.checkpoints.segments = not start_with_chains
    current: list[dict] = []
    real = chains.SEGMENT_BYTES, chains.MERGE_SEGMENTS, chains.MERGE_BYTES
    chains.SEGMENT_BYTES = limit  # many split saves
    chains.MERGE_SEGMENTS, chains.MERGE_BYTES = merge_segments, merge_bytes  # many merges
    try:
        for i, edit in enumerate(edit_list):
            if edit[0] == "reopen":
                segments = j.checkpoints.segments
                j = cj.Journal(j.store)  # a new process: no memo, no images
                j.checkpoints.segments = segments
                continue
            if edit[0] == "segments":
                j.checkpoints.segments = edit[1]
                continue
            current = _apply(current, edit)
            j.checkpoints.save(cj.Checkpoint(run_id="r", iteration=i, messages=current))
            saved.append(current)
            assert typed(j.checkpoints.load("r").messages) == typed(current)
        fresh = cj.Journal(j.store)
        history = fresh.checkpoints.history("r") if saved else []
        assert [c.message_count for c in history] == [len(s) for s in reversed(saved)]
        for checkpoint, expected in zip(history, reversed(saved), strict=True):
            loaded = fresh.checkpoints.load("r", checkpoint.iteration).messages
            assert typed(loaded) == typed(expected)
        assert fsck(j.store).ok
    finally:
        chains.SEGMENT_BYTES, chains.MERGE_SEGMENTS, chains.MERGE_BYTES = real


# -- what a save writes -------------------------------------------------------------------


def _added(j: cj.Journal, before: set[str]) -> list[Kind]:
    return sorted(j.store.objects.get(oid)[0] for oid in stored(j) - before)


def test_a_save_writes_one_segment_on_the_smallest_base():
    j = segmented()
    messages = [{"role": "user", "content": f"m{i}"} for i in range(10)]
    j.checkpoints.save(cj.Checkpoint(run_id="r", iteration=1, messages=messages[:4]))
    first = head_node(j).segment
    j.checkpoints.save(cj.Checkpoint(run_id="r", iteration=2, messages=messages[:8]))
    second = head_node(j).segment
    assert first and second and segment(j, second)[1:] == (4, first, None)
    before = stored(j)
    j.checkpoints.save(cj.Checkpoint(run_id="r", iteration=3, messages=messages))
    assert _added(j, before) == sorted([Kind.SEGMENT, Kind.CHECKPOINT])
    # a list a stored segment holds exactly: nothing written but the checkpoint
    before = stored(j)
    j.checkpoints.save(cj.Checkpoint(run_id="r", iteration=4, messages=messages[:8]))
    assert _added(j, before) == [Kind.CHECKPOINT] and head_node(j).segment == second
    j.checkpoints.save(cj.Checkpoint(run_id="r", iteration=5, messages=messages))
    # an edit at 3 keeps 3 messages: the first segment (length 4) is the smallest base
    edited = [*messages[:3], {"role": "user", "content": "changed"}]
    j.checkpoints.save(cj.Checkpoint(run_id="r", iteration=6, messages=edited))
    assert segment(j, head_node(j).segment)[1:] == (3, first, None)
    before = stored(j)  # the same list again: nothing but the checkpoint
    j.checkpoints.save(cj.Checkpoint(run_id="r", iteration=7, messages=edited))
    assert _added(j, before) == [Kind.CHECKPOINT]
    j.checkpoints.save(cj.Checkpoint(run_id="r", iteration=8, messages=messages[:2]))
    truncating = head_node(j).segment
    assert segment(j, truncating)[1:] == (2, first, None) and segment(j, truncating).messages == []
    for fresh in (cj.Journal(j.store), j):
        assert fresh.checkpoints.load("r", 4).messages == messages[:8]
        assert fresh.checkpoints.load("r", 7).messages == edited
        assert fresh.checkpoints.load("r", 8).messages == messages[:2]


def test_a_run_saved_as_a_chain_continues_with_segments_on_its_nodes(tmp_path):
    messages = [{"role": "user", "content": f"m{i}"} for i in range(6)]
    with cj.Journal.open(tmp_path / "s", durable=False) as j:
        j.checkpoints.segments = False
        j.checkpoints.save(cj.Checkpoint(run_id="r", iteration=1, messages=messages[:4]))
        chain = head_node(j).messages
        assert chain is not None and head_node(j).segment is None
    with cj.Journal.open(tmp_path / "s", durable=False) as j:
        j.checkpoints.segments = True
        j.checkpoints.save(cj.Checkpoint(run_id="r", iteration=2, messages=messages))
        assert segment(j, head_node(j).segment)[1:] == (4, None, chain)
        edited = [*messages[:2], {"edited": True}]  # the node holding two messages
        j.checkpoints.save(cj.Checkpoint(run_id="r", iteration=3, messages=edited))
        base_chain = segment(j, head_node(j).segment).base_chain
        assert base_chain is not None and base_chain != chain
    with cj.Journal.open(tmp_path / "s", durable=False) as j:
        assert j.checkpoints.load("r", 1).messages == messages[:4]
        assert j.checkpoints.load("r", 2).messages == messages
        assert j.checkpoints.load("r", 3).messages == edited
        assert fsck(j.store).ok


def test_a_save_larger_than_the_cap_is_split_into_chained_segments(monkeypatch):
    monkeypatch.setattr(chains, "SEGMENT_BYTES", 4096)
    j = segmented()
    messages = [{"role": "user", "content": f"{i} " + "x" * 300} for i in range(40)]
    before = stored(j)
    j.checkpoints.save(cj.Checkpoint(run_id="r", messages=messages))
    segments = [oid for oid in stored(j) - before if j.store.objects.get(oid)[0] is Kind.SEGMENT]
    assert len(segments) >= 3
    assert all(len(j.store.objects.get(oid)[1]) <= 4096 for oid in segments)
    assert cj.Journal(j.store).checkpoints.load("r").messages == messages


def _chain_of(j: cj.Journal, oid: str | None) -> list[SegmentNode]:
    out = []
    while oid is not None:
        out.append(segment(j, oid))
        oid = out[-1].base
    return out


def test_small_segments_are_merged_so_a_load_reads_few_segments_each_once(tmp_path):
    from support.journal_helpers import ReadCounter

    messages: list[dict] = []
    with cj.Journal.open(tmp_path / "s", durable=False) as j:
        j.checkpoints.segments = True
        for i in range(50):
            messages = [*messages, {"role": "user", "content": f"{i}"}, {"n": i}]
            j.checkpoints.save(cj.Checkpoint(run_id="r", iteration=i, messages=messages))
            chain = _chain_of(j, head_node(j).segment)
            small = [s for s in chain if len(s.messages) < chains.MERGE_SEGMENTS]
            # at most MERGE_SEGMENTS - 1 small segments, all at the chain's end
            assert len(small) < chains.MERGE_SEGMENTS and chain[: len(small)] == small
        # every 16th save merged the 15 before it: 3 merged segments and 2 small ones
        assert [len(s.messages) for s in chain] == [2, 2, 32, 32, 32]
        assert fsck(j.store).ok
    with cj.Journal.open(tmp_path / "s", durable=False) as j:
        counter = ReadCounter(j)
        assert j.checkpoints.load("r").messages == messages
        assert counter.reads[Kind.SEGMENT] == 5 and counter.reads[Kind.MESSAGE] == 0
        # every iteration still loads (the small segments merged stay for older ones)
        for checkpoint in j.checkpoints.history("r"):
            count = checkpoint.message_count
            assert j.checkpoints.load("r", checkpoint.iteration).messages == messages[:count]


def test_a_packed_load_brings_in_only_the_segments_of_its_list(tmp_path):
    from cas_journal.maintenance import pack

    messages: list[dict] = []
    with cj.Journal.open(tmp_path / "s", durable=False) as j:
        j.checkpoints.segments = True
        for i in range(40):  # merges at saves 16 and 32: small segments packed beside them
            messages = [*messages, {"role": "user", "content": f"{i}"}, {"n": i}]
            j.checkpoints.save(cj.Checkpoint(run_id="r", iteration=i, messages=messages))
        pack(j.store)
    with cj.Journal.open(tmp_path / "s", durable=False) as j:
        wanted = {oid for oid in _segment_oids(j, head_node(j).segment)}
        brought: list[str] = []
        objects = j.store.objects
        original_get, original_nearby = objects.get, objects.get_with_neighbours

        def get(oid: str) -> tuple[Kind, bytes]:
            brought.append(oid)
            return original_get(oid)

        def get_with_neighbours(oid: str) -> list[tuple[str, Kind, bytes]]:
            found = original_nearby(oid)
            brought.extend(other for other, _, _ in found)
            return found

        objects.get = get  # type: ignore[method-assign]
        objects.get_with_neighbours = get_with_neighbours  # type: ignore[method-assign]
        assert j.checkpoints.load("r").messages == messages
        segments = [oid for oid in brought if original_get(oid)[0] is Kind.SEGMENT]
        # each segment of the list once (2 merged, the 8 saved since): none of the 32
        # small ones the merged ones repeat, packed beside them
        assert sorted(segments) == sorted(wanted) and len(wanted) == 10


def _segment_oids(j: cj.Journal, oid: str | None) -> list[str]:
    out = []
    while oid is not None:
        out.append(oid)
        oid = segment(j, oid).base
    return out


def test_a_run_saved_before_merging_merges_only_its_last_small_segments(monkeypatch):
    j = segmented()
    monkeypatch.setattr(chains, "MERGE_SEGMENTS", 10**9)  # as code before merging saved
    messages: list[dict] = []
    for i in range(41):
        messages = [*messages, {"role": "user", "content": f"{i}"}, {"i": i}]
        if i < 40:
            j.checkpoints.save(cj.Checkpoint(run_id="r", iteration=i, messages=messages))
    assert len(_chain_of(j, head_node(j).segment)) == 40
    monkeypatch.setattr(chains, "MERGE_SEGMENTS", 16)
    j = cj.Journal(j.store)  # a new process: the memo is read from the store
    j.checkpoints.save(cj.Checkpoint(run_id="r", iteration=40, messages=messages))
    chain = _chain_of(j, head_node(j).segment)
    # the last 15 small segments and the new messages, not the whole run
    assert [len(s.messages) for s in chain] == [32] + [2] * 25
    assert cj.Journal(j.store).checkpoints.load("r").messages == messages


def test_small_segments_merge_once_they_reach_merge_bytes(tmp_path):
    j = segmented()
    big = "x" * (chains.MERGE_BYTES // 5)
    messages = []
    for i in range(6):
        messages = [*messages, {"role": "user", "content": f"{i} {big}"}]
        j.checkpoints.save(cj.Checkpoint(run_id="r", iteration=i, messages=messages))
    lengths = [len(s.messages) for s in _chain_of(j, head_node(j).segment)]
    assert lengths == [1, 5]  # the fifth save made 5 x MERGE_BYTES/5: merged
    assert cj.Journal(j.store).checkpoints.load("r").messages == messages


# -- lying objects ------------------------------------------------------------------------


def _put_checkpoint(j: cj.Journal, target: str, count: int) -> None:
    node = CheckpointNode("r", "2026-01-02T03:04:05.000006Z", message_count=count, segment=target)
    oid = j.store.objects.put(Kind.CHECKPOINT, node.body())
    old = j.store.refs.read_ref("checkpoints/r")
    from cas_journal.backends import RefUpdate

    assert j.store.commit([], RefUpdate("checkpoints/r", old, oid))


def test_a_segment_keeping_more_than_its_base_holds_is_a_clear_error():
    j = segmented()
    base = j.store.objects.put(Kind.SEGMENT, segment_body([b'{"a":1}', b'{"b":2}']))
    liar = j.store.objects.put(Kind.SEGMENT, segment_body([b'{"c":3}'], 3, base))
    _put_checkpoint(j, liar, 4)
    with pytest.raises(CorruptObject) as raised:
        cj.Journal(j.store).checkpoints.load("r")
    assert liar in str(raised.value) and "keeps 3" in str(raised.value)
    report = fsck(j.store)
    assert [(p.subject, p.message) for p in report.problems] == [
        (liar, "segment keeps 3 messages of a list of 2")
    ]
    assert fsck(j.store, quick=True).ok  # quick mode checks reachability only
    target = cj.Journal.memory()
    with pytest.raises(CorruptObject, match="keeps 3 messages of a list of 2"):
        sync(j.store, target.store)


def test_a_checkpoint_counting_other_than_its_segment_is_a_clear_error():
    j = segmented()
    one = j.store.objects.put(Kind.SEGMENT, segment_body([b'{"a":1}', b'{"b":2}']))
    _put_checkpoint(j, one, 3)
    with pytest.raises(CorruptObject) as raised:
        cj.Journal(j.store).checkpoints.load("r")
    assert one in str(raised.value)
    problems = [p.message for p in fsck(j.store).problems]
    assert problems == ["checkpoint claims 3 messages, its segment holds 2"]
    kind_lie = j.store.objects.put(Kind.BLOB, b'{"messages":[{}]}')
    _put_checkpoint(j, kind_lie, 1)
    with pytest.raises(CorruptObject, match="expected a segment"):
        cj.Journal(j.store).checkpoints.load("r")


# -- walkers ------------------------------------------------------------------------------


def _segment_run(j: cj.Journal, saves: int = 30) -> list[dict]:
    messages: list[dict] = []
    for i in range(saves):
        messages = [*messages, {"role": "user", "content": f"{i} " + "y" * 50}, {"i": i}]
        if i % 7 == 6:
            messages = messages[: len(messages) // 2]
        j.checkpoints.save(cj.Checkpoint(run_id="r", iteration=i, messages=messages))
    return messages


def test_gc_fsck_pack_stats_and_sync_know_segments(tmp_path):
    with cj.Journal.open(tmp_path / "s", durable=False) as j:
        j.checkpoints.segments = True
        messages = _segment_run(j)
        garbage = j.store.objects.put(Kind.SEGMENT, segment_body([b'{"garbage":1}']))
        assert fsck(j.store).ok
        gc(j.store, prune_now=True)
        assert not j.store.objects.has(garbage)
        kinds = [j.store.objects.get(oid)[0] for oid in j.store.objects.iter_oids()]
        assert Kind.SEGMENT in kinds
        report = stats(j.store)
        assert report.objects_by_kind["segment"] == kinds.count(Kind.SEGMENT)
        assert report.logical_checkpoints == 30 and report.dedup_ratio > 1
        target = cj.Journal.memory()
        sync(j.store, target.store)
        assert target.checkpoints.load("r").messages == messages
        assert fsck(target.store).ok
    with cj.Journal.open(tmp_path / "s", durable=False) as j:
        from cas_journal.maintenance import pack

        pack(j.store)
        assert fsck(j.store).ok
    with cj.Journal.open(tmp_path / "s", durable=False) as j:
        assert j.checkpoints.load("r").messages == messages
        history = j.checkpoints.history("r")
        assert all(
            len(j.checkpoints.load("r", c.iteration).messages) == c.message_count for c in history
        )


def test_pack_order_puts_a_merged_segment_amid_the_small_ones_it_repeats():
    from cas_journal.maintenance.layout import pack_order

    j = segmented()
    messages: list[dict] = []
    for i in range(40):  # merges at saves 16 and 32
        messages = [*messages, {"role": "user", "content": f"{i}"}, {"i": i}]
        j.checkpoints.save(cj.Checkpoint(run_id="r", iteration=i, messages=messages))
    order = pack_order(j.store, j.store.objects.iter_oids())
    segments = [oid for oid in order if j.store.objects.get(oid)[0] is Kind.SEGMENT]
    spans = [(segment(j, oid).keep, segment(j, oid).length) for oid in segments]
    assert len(spans) == 40 and spans == sorted(spans, key=lambda span: span[0] + span[1])
    merged = [at for at, (keep, length) in enumerate(spans) if length - keep > 2]
    assert len(merged) == 2
    for at in merged:
        keep, length = spans[at]
        repeated = [k for k, (first, last) in enumerate(spans) if keep <= first < last <= length]
        # half the small segments it repeats before it, half after, all next to it
        assert repeated == list(range(at - 8, at + 8)) and at in repeated


def test_gc_keeps_the_bases_of_a_young_unreachable_segment(tmp_path):
    from datetime import timedelta

    from support.store_helpers import set_all_row_times

    messages = [{"role": "user", "content": f"m{i}"} for i in range(6)]
    with cj.Journal.open(tmp_path / "s", durable=False) as j:
        j.checkpoints.segments = True
        for n in (2, 4, 6):
            j.checkpoints.save(cj.Checkpoint(run_id="a", iteration=n, messages=messages[:n]))
        middle = segment(j, head_node(j, "a").segment).base
        assert middle is not None
        j.checkpoints.delete("a")
        old = __import__("time").time() - 7200  # all two hours old but the middle segment
        set_all_row_times(j.store, old, except_oids=(middle,))
        report = gc(j.store, reflog_expiry=timedelta(0))
        assert report.deleted_objects > 0 and report.kept_young_objects >= 2
        assert fsck(j.store).ok  # full mode: every stored object's references are there
        assert j.store.objects.has(middle)
        assert j.store.objects.has(segment(j, middle).base)  # type: ignore[arg-type]


def test_stats_count_a_segment_run_as_the_same_run_saved_as_chains():
    reports = []
    for segments in (False, True):
        j = cj.Journal.memory()
        j.checkpoints.segments = segments
        _segment_run(j, 20)
        reports.append(stats(j.store))
    chain, segs = reports
    assert segs.logical_bytes == chain.logical_bytes > 0
    assert segs.logical_checkpoints == chain.logical_checkpoints == 20
    assert segs.content_bytes >= chain.content_bytes  # a message re-sent is stored again


def test_a_save_on_a_deleted_runs_segment_during_gc_keeps_what_it_reaches(tmp_path):
    """A save builds on its memo's segment, which gc marked as garbage (the run was
    deleted) and is about to sweep: the save freshens it, and the sweep keeps it."""
    from datetime import timedelta

    from cas_journal.backends import LocalStore

    j = cj.Journal.open(tmp_path / "s", durable=False)
    j.checkpoints.segments = True
    messages = [{"role": "user", "content": f"m{i}"} for i in range(8)]
    j.checkpoints.save(cj.Checkpoint(run_id="a", iteration=1, messages=messages[:3]))
    j.checkpoints.save(cj.Checkpoint(run_id="a", iteration=2, messages=messages[:6]))
    j.checkpoints.delete("a")
    other = LocalStore(tmp_path / "s", durable=False)  # another process's gc
    copies = other.stored_copies
    saved: list[bool] = []

    def save_first(real):
        def wrapper(names, older_than):
            if not saved:  # gc has marked and listed its garbage: the run is saved again
                saved.append(True)
                j.checkpoints.save(cj.Checkpoint(run_id="a", iteration=3, messages=messages))
            return real(names, older_than)

        return wrapper

    copies.delete_loose = save_first(copies.delete_loose)  # type: ignore[method-assign]
    copies.retire_packs = save_first(copies.retire_packs)  # type: ignore[method-assign]
    gc(other, prune_now=True, reflog_expiry=timedelta(0))
    assert saved
    assert segment(j, head_node(j, "a").segment).keep == 6  # it built on the old segment
    assert cj.Journal(j.store).checkpoints.load("a").messages == messages
    assert fsck(j.store).ok
    j.close()
    other.close()


def test_a_load_keeps_no_segment_body_and_a_save_after_it_reads_them_again(tmp_path):
    """A new process's load leaves the segment bodies out of its memo; its first save
    reads them again to compare, so it still writes only what changed (in place too)."""
    with cj.Journal.open(tmp_path / "s", durable=False) as j:
        messages = save_growing_run(j, "r", 40)
    with cj.Journal.open(tmp_path / "s", durable=False) as j:
        loaded = j.checkpoints.load("r").messages
        assert loaded == messages
        memo = j.checkpoints._memos.get("r")
        assert memo is not None and memo.parts
        assert all(part.text is None and part.size > 0 for part in memo.parts)
        longer = [*loaded, {"role": "assistant", "content": "after the load"}]
        j.checkpoints.save(cj.Checkpoint(run_id="r", iteration=40, messages=longer))
        written = segment(j, head_node(j).segment)
        assert (written.keep, written.messages) == (len(messages), longer[-1:])
        longer[5]["content"] = "changed in place"
        j.checkpoints.save(cj.Checkpoint(run_id="r", iteration=41, messages=longer))
        assert segment(j, head_node(j).segment).keep == 5
    with cj.Journal.open(tmp_path / "s", durable=False) as j:
        assert j.checkpoints.load("r").messages == longer


def test_a_save_after_a_load_whose_segments_were_collected_writes_the_list_whole(tmp_path):
    """The run a journal loaded is deleted and collected by another process: the
    journal's next save cannot read the loaded list's segments again and writes its
    list whole, as a new history of the run."""
    from datetime import timedelta

    from cas_journal.backends import LocalStore

    messages = [{"role": "user", "content": f"m{i}"} for i in range(9)]
    with cj.Journal.open(tmp_path / "s", durable=False) as j:
        for i in (3, 6, 9):
            j.checkpoints.save(cj.Checkpoint(run_id="r", iteration=i, messages=messages[:i]))
    j = cj.Journal.open(tmp_path / "s", durable=False)
    assert j.checkpoints.load("r").messages == messages
    other = LocalStore(tmp_path / "s", durable=False)
    cj.Journal(other).checkpoints.delete("r")
    gc(other, prune_now=True, reflog_expiry=timedelta(0))
    old = j.checkpoints._memos.get("r")
    assert old is not None and not any(j.store.objects.has(stop.oid) for stop in old.stops)
    longer = [*messages, {"role": "assistant", "content": "saved after gc"}]
    j.checkpoints.save(cj.Checkpoint(run_id="r", iteration=10, messages=longer))
    written = segment(j, head_node(j).segment)
    assert (written.keep, written.messages) == (0, longer)
    assert [c.iteration for c in j.checkpoints.history("r")] == [10]
    assert cj.Journal(other).checkpoints.load("r").messages == longer
    assert fsck(j.store).ok
    j.close()
    other.close()
