"""sync between stores: copying what is missing, fast-forwards, merges, crashes and lies."""

from __future__ import annotations

import json
import threading
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.journal_helpers import at, contents, stored, user
from support.store_helpers import set_row_time

import cas_journal as cj
from cas_journal.maintenance import fsck, gc, sync
from cas_journal.maintenance.copying import CopyLimits
from cas_journal.objects import (
    CheckpointNode,
    EntryNode,
    Kind,
    ObjectCodec,
    ThreadStateNode,
    canonical_json,
    parse_node,
)


@pytest.fixture(
    # S3 as the source is slow (every object a request to the server): run with -m slow
    params=["memory", "local", "local-to-s3", pytest.param("s3-to-local", marks=pytest.mark.slow)]
)
def pair(request, tmp_path):
    if request.param == "memory":
        yield cj.Journal.memory(), cj.Journal.memory()
    elif "s3" in request.param:
        server = request.getfixturevalue("s3_server")
        remote = cj.Journal(server.open(server.new_bucket()))
        local = cj.Journal.open(tmp_path / "local", durable=False)
        yield (local, remote) if request.param == "local-to-s3" else (remote, local)
        local.close()
        remote.close()
    else:
        src = cj.Journal.open(tmp_path / "src", durable=False)
        dst = cj.Journal.open(tmp_path / "dst", durable=False)
        yield src, dst
        src.close()
        dst.close()


def populate(j: cj.Journal) -> None:
    j.create_thread(cj.ThreadMeta(id="t", title="main", created_at=at(0)))
    for i in range(20):
        user(j, "t", f"message {i}", now=at(i + 1))
    j.fork("t", j.path("t")[5].id, new_thread_id="f", now=at(50))
    user(j, "f", "fork message", now=at(51))
    j.checkpoints.save(
        cj.Checkpoint(run_id="r", iteration=1, messages=[{"role": "user", "content": "x"}])
    )


def view(j: cj.Journal) -> tuple:
    return (
        [t.id for t in j.list_threads()],
        {t.id: [e.id for e in j.path(t.id)] for t in j.list_threads()},
        {t.id: sorted(e.id for e in j.entries(t.id)) for t in j.list_threads()},
        j.checkpoints.load("r").messages if j.checkpoints.has_checkpoint("r") else None,
    )


def test_initial_sync_copies_everything(pair):
    src, dst = pair
    populate(src)
    report = sync(src.store, dst.store)
    assert report.refs_created == 3 and report.objects_copied == len(stored(src))
    assert stored(dst) == stored(src)
    assert view(dst) == view(src)
    assert fsck(dst.store).ok
    again = sync(src.store, dst.store)
    assert again.objects_copied == 0 and again.refs_up_to_date == 3


def test_incremental_sync_copies_only_what_is_new(pair):
    src, dst = pair
    populate(src)
    sync(src.store, dst.store)
    user(src, "t", "one more", now=at(100))
    asked: list[int] = []
    original_missing = dst.store.objects.missing

    def counting_missing(oids):
        oids = list(oids)
        asked.append(len(oids))
        return original_missing(oids)

    dst.store.objects.missing = counting_missing
    report = sync(src.store, dst.store, ["threads/t"])
    assert report.objects_copied == 3  # payload blob, entry node, thread state
    assert report.refs_fast_forwarded == 1
    # the walk stopped at objects the destination had: the new state, then its parent,
    # skip pointer and leaf, then the leaf's payload, parent and skip pointer
    assert sum(asked) <= 7
    assert contents(dst.path("t"))[-1] == "one more"


def test_a_destination_ahead_is_left_alone(pair):
    src, dst = pair
    populate(src)
    sync(src.store, dst.store)
    user(dst, "t", "only on dst", now=at(200))
    report = sync(src.store, dst.store)
    assert report.refs_ahead == 1
    assert contents(dst.path("t"))[-1] == "only on dst"


def test_diverged_threads_merge_without_losing_an_entry(pair):
    src, dst = pair
    populate(src)
    sync(src.store, dst.store)
    mine = user(src, "t", "from src", now=at(300))
    theirs = user(dst, "t", "from dst", now=at(301))
    meta = dst.thread("t")
    meta.title = "renamed on dst"
    dst.update_thread(meta)
    refused = sync(src.store, dst.store, merge=False)
    assert refused.diverged == ["threads/t"] and dst.thread("t").leaf_id == theirs.id
    report = sync(src.store, dst.store)
    assert report.refs_merged == 1
    merged = dst.thread("t")
    assert merged.leaf_id == theirs.id  # the newer leaf
    assert merged.title == "renamed on dst"  # the newer metadata
    ids = {e.id for e in dst.entries("t")}
    assert mine.id in ids and theirs.id in ids
    state = dst.snapshot("t").state
    assert len(state.parents) == 2
    # syncing the merge back fast-forwards the source
    back = sync(dst.store, src.store)
    assert back.refs_fast_forwarded == 1
    assert {e.id for e in src.entries("t")} == ids
    assert fsck(dst.store).ok and fsck(src.store).ok


def test_diverged_checkpoint_histories_are_both_kept(pair):
    src, dst = pair
    populate(src)
    sync(src.store, dst.store)
    src.checkpoints.save(
        cj.Checkpoint(run_id="r", iteration=2, created_at=at(400), messages=[{"a": 1}])
    )
    dst.checkpoints.save(
        cj.Checkpoint(run_id="r", iteration=3, created_at=at(401), messages=[{"b": 2}])
    )
    assert sync(src.store, dst.store).refs_merged == 1
    history = dst.checkpoints.history("r")
    assert sorted(c.iteration for c in history) == [1, 2, 3]
    assert dst.checkpoints.load("r").messages == [{"b": 2}]  # the newer side
    assert dst.checkpoints.load("r", iteration=2).messages == [{"a": 1}]


def test_new_threads_are_listed_on_the_destination(pair):
    src, dst = pair
    populate(src)
    sync(src.store, dst.store, ["threads/f"])
    assert [t.id for t in dst.list_threads()] == ["f"]
    assert contents(dst.path("f"))[-1] == "fork message"


def test_a_sync_killed_midway_resumes_without_resending(tmp_path):
    src = cj.Journal.open(tmp_path / "src", durable=False)
    dst = cj.Journal.open(tmp_path / "dst", durable=False)
    populate(src)
    with src.batch("t") as b:
        for i in range(600):
            b.append(
                cj.Entry(
                    type=cj.EntryType.USER_MESSAGE,
                    message=cj.Message(role="user", content=f"bulk {i}"),
                )
            )
    small = CopyLimits(batch_bytes=8 * 1024, writers=2)
    calls = 0
    original = dst.store.objects.store_new

    def dying_store_new(objects):
        nonlocal calls
        calls += 1
        if calls == 5:
            raise KeyboardInterrupt("killed")
        return original(objects)

    dst.store.objects.store_new = dying_store_new
    with pytest.raises(KeyboardInterrupt):
        sync(src.store, dst.store, limits=small)
    dst.store.objects.store_new = original
    partial = cj.Journal.open(tmp_path / "dst", durable=False)
    arrived = stored(partial)
    assert 0 < len(arrived) < len(stored(src))
    assert partial.list_threads() == []  # no ref before its objects
    assert fsck(partial.store).ok  # every stored object's references are stored
    report = sync(src.store, partial.store, limits=small)
    assert report.refs_created == 3
    assert report.objects_copied == len(stored(src)) - len(arrived)  # nothing sent twice
    assert view(partial) == view(src) and fsck(partial.store).ok


def test_batches_keep_bytes_in_flight_bounded():
    src, dst = cj.Journal.memory(), cj.Journal.memory()
    src.create_thread(cj.ThreadMeta(id="t", created_at=at(0)))
    big = "x" * 40_000
    for i in range(30):
        user(src, "t", f"{i} {big}", now=at(i + 1))
    limits = CopyLimits(batch_bytes=64 * 1024, bytes_in_flight=128 * 1024, writers=3)
    lock = threading.Lock()
    in_flight = [0, 0]  # now, most
    original = dst.store.objects.store_new

    def slow_store_new(objects):
        size = sum(len(obj.body) for obj in objects)
        with lock:
            in_flight[0] += size
            in_flight[1] = max(in_flight[1], in_flight[0])
        time.sleep(0.01)
        original(objects)
        with lock:
            in_flight[0] -= size

    dst.store.objects.store_new = slow_store_new
    report = sync(src.store, dst.store, limits=limits)
    assert report.batches_written > 5
    assert 64 * 1024 < in_flight[1] <= limits.bytes_in_flight + limits.batch_bytes + 41_000
    assert view(dst) == view(src)


def test_a_lying_source_is_refused(pair):
    src, dst = pair
    if not hasattr(src.store.objects, "corrupt_for_tests"):
        src, dst = cj.Journal.memory(), dst
    populate(src)
    victim = src.path("t")[3].raw_hash
    _, other = ObjectCodec().encode(Kind.BLOB, b"not what was promised")
    src.store.objects.corrupt_for_tests(victim, other)
    with pytest.raises(cj.CorruptObject):
        sync(src.store, dst.store)
    assert dst.list_threads() == []  # no ref moved
    assert fsck(dst.store).ok


def test_unknown_and_foreign_refs(pair):
    src, dst = pair
    populate(src)
    with pytest.raises(cj.NotFoundError):
        sync(src.store, dst.store, ["threads/nope"])
    with pytest.raises(ValueError):
        sync(src.store, dst.store, ["leases/t"])


# -- what sync adopts is checked ---------------------------------------------------------


def _put(store, kind: Kind, body: bytes) -> str:
    return store.objects.put(kind, body)


def _state(store, thread: str) -> ThreadStateNode:
    value = store.refs.read_ref(f"threads/{thread}")
    return ThreadStateNode.parse(store.objects.get(value)[1], value)


def _point(store, name: str, value: str) -> None:
    assert store.refs.set_if_equals(name, store.refs.read_ref(name), value, "tamper")


def _renamed_state(store):
    """threads/victim -> a newer state that names thread "other"."""
    state = _state(store, "victim")
    meta = dict(state.meta, id="other", updated_at="2030-01-01T00:00:00.000000Z")
    _point(
        store,
        "threads/victim",
        _put(
            store,
            Kind.THREAD,
            state._replace(meta=meta, parents=(store.refs.read_ref("threads/victim"),)).body(),
        ),
    )


def _other_threads_state(store):
    """threads/victim -> the current state of thread "other" (which dst holds)."""
    _point(store, "threads/victim", store.refs.read_ref("threads/other"))


def _unparsable_metadata(store):
    state = _state(store, "victim")
    meta = dict(state.meta, created_at="yesterday")
    _point(store, "threads/victim", _put(store, Kind.THREAD, state._replace(meta=meta).body()))


def _entry_as_payload(store):
    state = _state(store, "victim")
    leaf = EntryNode.parse(store.objects.get(state.leaf)[1], state.leaf)
    bad = _put(
        store,
        Kind.ENTRY,
        leaf._replace(payload=state.leaf, created_at="2030-01-01T00:00:00.000000Z").body(),
    )
    _point(
        store,
        "threads/victim",
        _put(store, Kind.THREAD, state._replace(leaf=bad, heads=(bad,)).body()),
    )


def _payload_not_json(store):
    state = _state(store, "victim")
    leaf = EntryNode.parse(store.objects.get(state.leaf)[1], state.leaf)
    blob = _put(store, Kind.BLOB, b"not a payload")
    bad = _put(store, Kind.ENTRY, leaf._replace(payload=blob).body())
    _point(
        store,
        "threads/victim",
        _put(store, Kind.THREAD, state._replace(leaf=bad, heads=(bad,)).body()),
    )


def _wrong_depth(store):
    state = _state(store, "victim")
    leaf = EntryNode.parse(store.objects.get(state.leaf)[1], state.leaf)
    bad = _put(
        store,
        Kind.ENTRY,
        leaf._replace(depth=leaf.depth + 2, parent=state.leaf, skip=state.leaf).body(),
    )
    _point(
        store,
        "threads/victim",
        _put(store, Kind.THREAD, state._replace(leaf=bad, heads=(bad,)).body()),
    )


def _skip_to_another_branch(store):
    """A new entry whose skip pointer names an entry at the right depth on another thread."""
    state = _state(store, "victim")
    leaf = EntryNode.parse(store.objects.get(state.leaf)[1], state.leaf)
    other = _state(store, "other")
    root = other.leaf
    while (node := EntryNode.parse(store.objects.get(root)[1], root)).parent:
        root = node.parent
    blob = _put(store, Kind.BLOB, store.objects.get(leaf.payload)[1])
    bad = _put(
        store,
        Kind.ENTRY,
        EntryNode(blob, "2030-01-01T00:00:00.000000Z", leaf.depth + 1, state.leaf, root).body(),
    )
    _point(
        store,
        "threads/victim",
        _put(store, Kind.THREAD, state._replace(leaf=bad, heads=(bad,)).body()),
    )


def _checkpoint_count_lies(store):
    value = store.refs.read_ref("checkpoints/r")
    node = CheckpointNode.parse(store.objects.get(value)[1], value)
    bad = node._replace(message_count=node.message_count + 3, previous=(value,), iteration=9)
    _point(store, "checkpoints/r", _put(store, Kind.CHECKPOINT, bad.body()))


def _checkpoint_of_another_run(store):
    value = store.refs.read_ref("checkpoints/r")
    node = CheckpointNode.parse(store.objects.get(value)[1], value)
    _point(
        store,
        "checkpoints/r",
        _put(store, Kind.CHECKPOINT, node._replace(run_id="elsewhere").body()),
    )


def _ref_not_an_oid(store):
    _point(store, "threads/victim", "not-an-object-id")


HOSTILE = {
    "state names another thread": _renamed_state,
    "ref holds another thread's state": _other_threads_state,
    "metadata does not parse": _unparsable_metadata,
    "payload slot holds an entry": _entry_as_payload,
    "payload is not a payload": _payload_not_json,
    "entry depth lies": _wrong_depth,
    "skip pointer names another branch": _skip_to_another_branch,
    "checkpoint count lies": _checkpoint_count_lies,
    "checkpoint names another run": _checkpoint_of_another_run,
    "ref is not an object id": _ref_not_an_oid,
}


def two_threads(j: cj.Journal) -> None:
    for name in ("victim", "other"):
        j.create_thread(cj.ThreadMeta(id=name, title=name, created_at=at(0)))
        for i in range(4):
            user(j, name, f"{name} {i}", now=at(i + 1))
    j.checkpoints.save(
        cj.Checkpoint(
            run_id="r",
            iteration=1,
            created_at=at(9),
            messages=[{"role": "user", "content": "x"}, {"role": "user", "content": "y"}],
        )
    )


@pytest.mark.parametrize("attack", sorted(HOSTILE))
def test_hostile_sources_are_refused_before_any_ref_moves(attack):
    src, dst = cj.Journal.memory(), cj.Journal.memory()
    two_threads(src)
    sync(src.store, dst.store)
    before = {name: dst.store.refs.read_ref(name) for name in dst.store.refs.list_refs("")}
    HOSTILE[attack](src.store)
    with pytest.raises(cj.CorruptObject):
        sync(src.store, dst.store)
    assert {name: dst.store.refs.read_ref(name) for name in dst.store.refs.list_refs("")} == before
    assert [e.message.content for e in dst.path("victim")][-1] == "victim 3"
    assert fsck(dst.store).ok
    fresh = cj.Journal.memory()  # nor is any ref created in an empty destination
    with pytest.raises(cj.CorruptObject):
        sync(src.store, fresh.store)
    assert fresh.store.refs.list_refs("") == []


def test_unrelated_threads_sharing_an_id_are_not_merged_unless_asked():
    src, dst = cj.Journal.memory(), cj.Journal.memory()
    for j, who in ((src, "src"), (dst, "dst")):
        j.create_thread(cj.ThreadMeta(id="t", title=who, created_at=at(0)))
        user(j, "t", f"from {who}", now=at(1))
    mine = dst.store.refs.read_ref("threads/t")
    report = sync(src.store, dst.store)
    assert report.unrelated == ["threads/t"] and report.refs_merged == 0
    assert dst.store.refs.read_ref("threads/t") == mine
    merged = sync(src.store, dst.store, allow_unrelated=True)
    assert merged.refs_merged == 1
    assert {e.message.content for e in dst.entries("t")} == {"from src", "from dst"}
    assert fsck(dst.store).ok


def test_objects_the_destination_holds_are_freshened_against_a_concurrent_gc(tmp_path):
    """Leftovers of an interrupted pull, older than gc's grace period, that the new refs
    link: a gc running while the sync links them must keep them (issue: "object not found")."""
    src = cj.Journal.open(tmp_path / "src", durable=False)
    dst = cj.Journal.open(tmp_path / "dst", durable=False)
    src.create_thread(cj.ThreadMeta(id="t", created_at=at(0)))
    for i in range(5):
        user(src, "t", f"m{i}", now=at(i + 1))
    leftovers = [oid for oid in stored(src) if src.store.objects.get(oid)[0] is not Kind.THREAD]
    dst.store.objects.put_many([src.store.objects.get(oid) for oid in leftovers])
    old = time.time() - 3 * 3600
    for oid in leftovers:
        set_row_time(dst.store, oid, old)
    freshened: list[str] = []
    collected: list[int] = []
    original = dst.store.objects.freshen

    def freshen_then_gc(oids):
        oids = list(oids)
        freshened.extend(oids)
        missing = original(oids)
        collected.append(gc(dst.store).deleted_objects)  # a gc marking before the refs move
        return missing

    dst.store.objects.freshen = freshen_then_gc
    report = sync(src.store, dst.store)
    entries = {oid for oid in leftovers if src.store.objects.get(oid)[0] is Kind.ENTRY}
    assert set(freshened) == entries  # what the copied states link (blobs hang below)
    assert collected == [0]  # gc keeps those young objects and everything below them
    assert report.objects_copied == len(stored(src)) - len(leftovers)
    assert fsck(dst.store).ok and view(dst) == view(src)


def test_objects_gone_before_the_freshen_are_copied_again(tmp_path):
    src = cj.Journal.open(tmp_path / "src", durable=False)
    dst = cj.Journal.open(tmp_path / "dst", durable=False)
    src.create_thread(cj.ThreadMeta(id="t", created_at=at(0)))
    for i in range(5):
        user(src, "t", f"m{i}", now=at(i + 1))
    leftovers = [oid for oid in stored(src) if src.store.objects.get(oid)[0] is not Kind.THREAD]
    dst.store.objects.put_many([src.store.objects.get(oid) for oid in leftovers])
    original = dst.store.objects.freshen
    rounds = []

    def gc_then_freshen(oids):
        oids = list(oids)
        if not rounds:  # a gc took every unreachable object after the walk saw them
            for oid in leftovers:
                dst.store.objects.delete(oid)
        rounds.append(sorted(oids))
        return original(oids)

    dst.store.objects.freshen = gc_then_freshen
    report = sync(src.store, dst.store)
    assert len(rounds) == 1  # then nothing present was linked any more: no second round
    assert report.objects_copied == len(stored(src))  # what vanished was sent after all
    assert fsck(dst.store).ok and view(dst) == view(src)


def test_repair_replaces_damaged_copies_from_a_healthy_replica():
    src, dst = cj.Journal.memory(), cj.Journal.memory()
    populate(src)
    sync(src.store, dst.store)
    victim = dst.path("t")[3]
    _, other = ObjectCodec().encode(Kind.BLOB, b"bit rot")
    dst.store.objects.corrupt_for_tests(victim.raw_hash, other)
    dst.store.objects.corrupt_for_tests(victim.id, other)
    assert not fsck(dst.store).ok
    assert sync(src.store, dst.store).objects_copied == 0  # a plain sync trusts what is there
    report = sync(src.store, dst.store, repair=True)
    assert report.objects_repaired == 2 and report.refs_up_to_date == 3
    assert fsck(dst.store).ok
    fresh = cj.Journal(dst.store)
    assert view(fresh) == view(src)


# -- fuzz: a source whose refs point at mutated objects -----------------------------------

_FIELD_VALUES = st.one_of(
    st.none(),
    st.integers(min_value=-3, max_value=10**6),
    st.text(max_size=12),
    st.sampled_from(["2026-01-01T00:00:00.000000Z", "0" * 64]),
    st.lists(st.text(max_size=3), max_size=2),
)


def _mutated(store, oid: str, data) -> str:
    """A new object: ``oid``'s body with one field set to something else (often another
    stored oid), written to the store; returns its oid."""
    kind, body = store.objects.get(oid)
    fields = json.loads(body)
    stored_oids = sorted(store.objects.iter_oids())
    name = data.draw(st.sampled_from([*sorted(fields), "extra"]), label="field")
    value = data.draw(st.one_of(_FIELD_VALUES, st.sampled_from(stored_oids)), label="value")
    if value is None:
        fields.pop(name, None)
    elif name == "meta" and isinstance(value, str) and isinstance(fields["meta"], dict):
        fields["meta"] = dict(
            fields["meta"],
            **{data.draw(st.sampled_from(["id", "created_at", "title", "archived"])): value},
        )
    else:
        fields[name] = value
    return store.objects.put(kind, canonical_json(fields))


@settings(max_examples=60)
@given(st.data())
def test_fuzzed_sources_are_adopted_whole_or_refused(data):
    src, dst = cj.Journal.memory(), cj.Journal.memory()
    two_threads(src)
    sync(src.store, dst.store)
    user(src, "victim", "after the first sync", now=at(20))
    before = {name: dst.store.refs.read_ref(name) for name in dst.store.refs.list_refs("")}
    for _ in range(data.draw(st.integers(1, 2), label="mutations")):
        name = data.draw(st.sampled_from(["threads/victim", "threads/other", "checkpoints/r"]))
        tip = src.store.refs.read_ref(name)
        kind, body = src.store.objects.get(tip)
        try:
            node = parse_node(kind, body, tip)
            refs = [
                ref
                for ref, _ in node.typed_references()
                if src.store.objects.has(ref) and src.store.objects.get(ref)[0] is not Kind.BLOB
            ]
        except cj.CorruptObject:  # mutated beyond parsing already
            refs = []
        target = data.draw(st.sampled_from([tip, *refs]), label="target")
        mutated = _mutated(src.store, target, data)
        if target == tip:
            new = mutated
        else:  # the tip, now referencing the mutated object instead
            fields = json.loads(body)
            text = json.dumps(fields).replace(target, mutated)
            new = src.store.objects.put(kind, canonical_json(json.loads(text)))
        _point(src.store, name, new)
    try:
        sync(src.store, dst.store)
    except cj.JournalError:
        after = {name: dst.store.refs.read_ref(name) for name in dst.store.refs.list_refs("")}
        assert after == before  # refused as a whole: no ref moved
    assert fsck(dst.store).ok
    for thread in dst.list_threads(include_archived=True):  # whatever was adopted reads back
        dst.path(thread.id)
        dst.entries(thread.id)
    if dst.checkpoints.has_checkpoint("r"):
        dst.checkpoints.load("r")
        dst.checkpoints.history("r")
