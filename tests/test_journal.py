"""The journal's behaviour (the seed's, and what content addressing adds), on every store."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.backend_contract import HOSTILE_NAMES
from support.journal_helpers import ReadCounter, assistant, at, contents, stored, user

import cas_journal as cj
from cas_journal.objects import Kind


@pytest.fixture(params=["memory", "local", "local-durable", "s3"])
def j(request, tmp_path):
    if request.param == "memory":
        journal = cj.Journal.memory()
    elif request.param == "s3":
        server = request.getfixturevalue("s3_server")
        journal = cj.Journal(server.open(server.new_bucket()))
    else:
        journal = cj.Journal.open(tmp_path / "store", durable=request.param == "local-durable")
    yield journal
    journal.close()


# -- threads -------------------------------------------------------------------------------


def test_create_and_read_thread(j):
    meta = j.create_thread(cj.ThreadMeta(id="t1", title="hello", created_at=at(0)))
    assert meta.id == "t1" and meta.title == "hello"
    assert meta.created_at == at(0) and meta.updated_at == at(0) and meta.leaf_id == ""
    assert j.thread("t1") == meta
    with pytest.raises(cj.ThreadExists):
        j.create_thread(cj.ThreadMeta(id="t1"))
    with pytest.raises(cj.ThreadNotFound):
        j.thread("nope")
    with pytest.raises(KeyError):
        j.thread("nope")


def test_generated_thread_ids_are_unique(j):
    ids = {j.create_thread().id for _ in range(20)}
    assert len(ids) == 20


@pytest.mark.parametrize("name", HOSTILE_NAMES)
def test_hostile_thread_ids_round_trip(j, name):
    j.create_thread(cj.ThreadMeta(id=name))
    entry = user(j, name, "hi")
    assert j.thread(name).leaf_id == entry.id
    assert [t.id for t in j.list_threads()] == [name]
    assert j.path(name)[0].thread_id == name


@pytest.mark.parametrize("bad", ["", "a\0b", "x" * 1025, "\ud800"])
def test_invalid_thread_ids_are_value_errors(j, bad):
    if bad:  # an empty id asks create_thread to generate one
        with pytest.raises(ValueError):
            j.create_thread(cj.ThreadMeta(id=bad))
    with pytest.raises(ValueError):
        j.thread(bad)
    with pytest.raises(ValueError):
        j.checkpoints.save(cj.Checkpoint(run_id=bad))


@given(st.text(max_size=12), st.integers(min_value=0, max_value=6))
@settings(max_examples=300, deadline=None)
def test_validate_id_accepts_exactly_the_rule(text, limit):
    # the rule: a str, not empty, no NUL, at most ``limit`` UTF-8 bytes (ASCII ids take a
    # shortcut that must agree with it, at the limit too)
    from cas_journal.names import InvalidInputError, split_ref_name, validate_id

    try:
        size = len(text.encode("utf-8"))
    except UnicodeEncodeError:
        size = None
    valid = size is not None and 0 < size <= limit and "\0" not in text
    if valid:
        assert validate_id(text, "id", limit) is text
    else:
        with pytest.raises(InvalidInputError):
            validate_id(text, "id", limit)
    ref_valid = size is not None and size > 0 and "\0" not in text
    if ref_valid:
        assert split_ref_name("ns/" + text) == ("ns", text)
    else:
        with pytest.raises(InvalidInputError):
            split_ref_name("ns/" + text)


def test_naive_datetimes_are_refused(j):
    from datetime import datetime

    with pytest.raises(ValueError):
        cj.ThreadMeta(id="t", created_at=datetime(2026, 1, 1))
    j.create_thread(cj.ThreadMeta(id="t"))
    with pytest.raises(ValueError):
        user(j, "t", "x", now=datetime(2026, 1, 1))


def test_list_threads_order_cursor_and_archived(j):
    for i, (tid, seconds) in enumerate([("b", 10), ("a", 10), ("c", 20), ("d", 5), ("e", 30)]):
        j.create_thread(cj.ThreadMeta(id=tid, created_at=at(seconds), archived=(tid == "e")))
        # each thread is there at once, with the time and flag it was created with
        meta = j.thread(tid)
        assert (meta.created_at, meta.archived) == (at(seconds), tid == "e")
        assert len(j.list_threads(include_archived=True)) == i + 1
    assert [t.id for t in j.list_threads()] == ["c", "a", "b", "d"]
    assert [t.id for t in j.list_threads(include_archived=True)] == ["e", "c", "a", "b", "d"]
    assert [t.id for t in j.list_threads(limit=2)] == ["c", "a"]
    page = j.list_threads(limit=2, after_created_at=at(10), after_id="a")
    assert [t.id for t in page] == ["b", "d"]
    assert [t.id for t in j.list_threads(after_created_at=at(20), after_id="c")] == ["a", "b", "d"]


def test_title_updates_do_not_reorder(j):
    for tid, seconds in [("old", 1), ("new", 2)]:
        j.create_thread(cj.ThreadMeta(id=tid, created_at=at(seconds)))
    meta = j.thread("old")
    meta.title = "renamed"
    meta.title_status = cj.ThreadTitleStatus.READY
    meta.title_source = cj.ThreadTitleSource.PROVIDER
    meta.title_updated_at = at(100)
    j.update_thread(meta)
    assert [t.id for t in j.list_threads()] == ["new", "old"]
    again = j.thread("old")
    assert again.title == "renamed" and again.title_status is cj.ThreadTitleStatus.READY
    assert again.title_updated_at == at(100)


def test_update_thread_never_moves_the_leaf_or_created_at(j):
    j.create_thread(cj.ThreadMeta(id="t", created_at=at(0)))
    first = user(j, "t", "one")
    stale = j.thread("t")
    second = user(j, "t", "two")
    stale.title = "t!"
    stale.leaf_id = first.id
    stale.created_at = at(999)
    updated = j.update_thread(stale)
    assert updated.leaf_id == second.id and updated.created_at == at(0) and updated.title == "t!"


def test_concurrent_metadata_edits_conflict(j):
    j.create_thread(cj.ThreadMeta(id="t"))
    mine, theirs = j.thread("t"), j.thread("t")
    theirs.title = "theirs"
    j.update_thread(theirs)
    mine.status = "mine"
    with pytest.raises(cj.ConflictError):
        j.update_thread(mine)
    assert j.thread("t").title == "theirs"
    # a fresh ThreadMeta (not read from the store) is a deliberate overwrite
    j.update_thread(cj.ThreadMeta(id="t", title="fresh"))
    assert j.thread("t").title == "fresh"


def test_delete_and_restore(j):
    j.create_thread(cj.ThreadMeta(id="t", created_at=at(0)))
    entry = user(j, "t", "keep me")
    j.acquire_turn_lease(cj.TurnLease(thread_id="t", turn_id="u", owner_id="w"))
    j.delete_thread("t")
    with pytest.raises(cj.ThreadNotFound):
        j.thread("t")
    with pytest.raises(cj.ThreadNotFound):
        j.delete_thread("t")
    assert j.list_threads() == []
    restored = j.restore_thread("t")
    assert restored.leaf_id == entry.id and contents(j.path("t")) == ["keep me"]
    assert [t.id for t in j.list_threads()] == ["t"]
    assert j.active_turn_lease("t") is None
    with pytest.raises(cj.ThreadExists):
        j.restore_thread("t")
    with pytest.raises(cj.ThreadNotFound):
        j.restore_thread("never-existed")


# -- entries -------------------------------------------------------------------------------


def test_append_sets_leaf_updated_at_and_content_ids(j):
    j.create_thread(cj.ThreadMeta(id="t", created_at=at(0)))
    entry = user(j, "t", "hi", now=at(5))
    assert entry.thread_id == "t" and entry.parent_id == "" and entry.created_at == at(5)
    assert entry.raw == cj.raw_for_entry(entry)
    assert entry.raw_hash == cj.prepare_entry(entry).raw_hash
    meta = j.thread("t")
    assert meta.leaf_id == entry.id and meta.updated_at == at(5)
    assert j.store.objects.get(entry.id)[0] is Kind.ENTRY
    assert j.store.objects.get(entry.raw_hash) == (Kind.BLOB, entry.raw.encode())
    reply = assistant(j, "t", "hello", now=at(6))
    assert reply.parent_id == entry.id
    assert j.entry("t", entry.id) == entry


def test_identical_append_is_harmless(j):
    j.create_thread(cj.ThreadMeta(id="t"))
    first = user(j, "t", "once", now=at(1))
    child = user(j, "t", "once", now=at(1))  # the default parent is now `first`: a new entry
    assert child.parent_id == first.id and child.id != first.id
    j.move_leaf("t", None)
    before = stored(j)
    retry = user(j, "t", "once", now=at(1))  # same (no) parent, content and time
    assert retry.id == first.id and j.thread("t").leaf_id == first.id
    added = {j.store.objects.get(oid)[0] for oid in stored(j) - before}
    assert added == {Kind.THREAD}  # only the thread state that moved the leaf


def test_retry_of_same_parent_content_and_time_stores_nothing(j):
    j.create_thread(cj.ThreadMeta(id="t"))
    root = user(j, "t", "root", now=at(0))
    child = user(j, "t", "child", now=at(1), parent_id=root.id)
    before = stored(j)
    retry = user(j, "t", "child", now=at(1), parent_id=root.id)
    assert retry.id == child.id
    assert stored(j) == before


def test_identical_payloads_are_stored_once_across_threads(j):
    for tid in ("a", "b"):
        j.create_thread(cj.ThreadMeta(id=tid))
    x = user(j, "a", "same words", now=at(1))
    y = user(j, "b", "same words", now=at(2))
    assert x.id != y.id and x.raw_hash == y.raw_hash
    blobs = [oid for oid in stored(j) if j.store.objects.get(oid)[0] is Kind.BLOB]
    assert blobs.count(x.raw_hash) == 1


def test_explicit_parent_must_belong_to_the_thread(j):
    for tid in ("a", "b"):
        j.create_thread(cj.ThreadMeta(id=tid))
    foreign = user(j, "b", "elsewhere")
    mine = user(j, "a", "here")
    with pytest.raises(cj.InvalidParent):
        user(j, "a", "x", parent_id=foreign.id)
    with pytest.raises(cj.InvalidParent):
        user(j, "a", "x", parent_id="f" * 64)
    with pytest.raises(ValueError):  # InvalidParent is a ValueError too
        user(j, "a", "x", parent_id="not-an-id")
    with pytest.raises(cj.EntryNotFound):
        j.entry("a", foreign.id)
    assert j.entry("a", mine.id).id == mine.id
    with pytest.raises(cj.ThreadNotFound):
        user(j, "missing", "x")


def test_move_leaf_keeps_the_old_branch(j):
    j.create_thread(cj.ThreadMeta(id="t"))
    a = user(j, "t", "a", now=at(1))
    b = assistant(j, "t", "b", now=at(2))
    j.move_leaf("t", a.id)
    c = assistant(j, "t", "c", now=at(3))
    assert contents(j.path("t")) == ["a", "c"]
    assert contents(j.path("t", b.id)) == ["a", "b"]
    assert contents(j.entries("t")) == ["a", "b", "c"]
    assert j.entry("t", b.id).id == b.id
    j.move_leaf("t", "")
    assert j.path("t") == [] and j.thread("t").leaf_id == ""
    d = user(j, "t", "new root", now=at(4))
    assert d.parent_id == "" and contents(j.entries("t")) == ["a", "b", "c", "new root"]
    assert c.id in {e.id for e in j.entries("t")}
    with pytest.raises(cj.EntryNotFound):
        j.move_leaf("t", "e" * 64)


def test_fork_at_and_before(j):
    j.create_thread(cj.ThreadMeta(id="src"))
    a = user(j, "src", "a", now=at(1))
    b = assistant(j, "src", "b", now=at(2))
    c = user(j, "src", "c", now=at(3))
    at_fork = j.fork("src", b.id, cj.ForkPosition.AT, new_thread_id="at", now=at(10))
    assert at_fork.leaf_id == b.id and at_fork.forked_from_entry_id == b.id
    assert at_fork.forked_from_thread_id == "src" and at_fork.parent_thread_id == "src"
    assert at_fork.created_at == at(10)
    assert [e.id for e in j.path("at")] == [a.id, b.id]
    assert all(e.thread_id == "at" for e in j.path("at"))
    before = j.fork("src", b.id, cj.ForkPosition.BEFORE, new_thread_id="before")
    assert before.leaf_id == a.id and before.forked_from_entry_id == a.id
    default = j.fork("src", new_thread_id="default")
    assert default.leaf_id == c.id
    root_before = j.fork("src", a.id, cj.ForkPosition.BEFORE, new_thread_id="empty")
    assert root_before.leaf_id == "" and j.path("empty") == []
    # the fork diverges without touching the source
    d = user(j, "at", "d")
    assert contents(j.path("at")) == ["a", "b", "d"] and contents(j.path("src")) == ["a", "b", "c"]
    with pytest.raises(cj.EntryNotFound):
        j.entry("src", d.id)
    with pytest.raises(cj.EntryNotFound):
        j.fork("src", d.id, new_thread_id="nope")


@settings(max_examples=60, deadline=None)
@given(
    moment=st.datetimes(
        min_value=datetime(1, 1, 2), max_value=datetime(9999, 12, 30), timezones=st.timezones()
    ),
    before=st.booleans(),
    which=st.integers(0, 2),
)
def test_fork_builds_the_metadata_meta_to_state_and_meta_from_state_would(moment, before, which):
    """A fork builds its state's metadata and the ThreadMeta it returns directly: the state
    is the one ``meta_to_state`` of the fork's ThreadMeta gives, and the result equals (also
    in its set fields) what ``meta_from_state`` reads back."""
    from cas_journal.journal.state import meta_from_state, meta_to_state

    j = cj.Journal.memory()
    j.create_thread(cj.ThreadMeta(id="src"))
    entries = [user(j, "src", text, now=at(k)) for k, text in enumerate("ab")]
    target = [None, entries[0].id, entries[1].id][which]
    position = cj.ForkPosition.BEFORE if before else cj.ForkPosition.AT
    got = j.fork("src", target, position, new_thread_id="f", now=moment)
    head = j._states.read("f")
    back = meta_from_state(head.state_oid, head.state)
    assert got == back and got.model_fields_set == back.model_fields_set
    assert got._state_oid == head.state_oid
    leaf = target or entries[1].id
    if before:
        leaf = j.entry_node(leaf).parent or ""
    reference = cj.ThreadMeta(
        id="f",
        parent_thread_id="src",
        forked_from_thread_id="src",
        forked_from_entry_id=leaf,
        created_at=moment,
        updated_at=moment,
    )
    assert head.state.meta == meta_to_state(reference)
    assert head.state.leaf == (leaf or None)


def test_fork_to_an_existing_id_changes_nothing(j):
    j.create_thread(cj.ThreadMeta(id="src"))
    j.create_thread(cj.ThreadMeta(id="taken", title="mine"))
    user(j, "src", "a")
    before = j.thread("taken")
    with pytest.raises(cj.ThreadExists):
        j.fork("src", new_thread_id="taken")
    assert j.thread("taken") == before
    assert sorted(t.id for t in j.list_threads()) == ["src", "taken"]


def test_fork_of_an_entry_no_longer_stored_creates_nothing(j):
    j.create_thread(cj.ThreadMeta(id="src"))
    leaf = user(j, "src", "a")
    j.store.objects.delete(leaf.id)  # as a gc that found it unreachable would have
    with pytest.raises(cj.EntryNotFound, match="no longer stored"):
        j.fork("src", new_thread_id="f")
    with pytest.raises(cj.ThreadNotFound):
        j.thread("f")
    assert [t.id for t in j.list_threads()] == ["src"]


def test_fork_on_a_remembered_source_reads_no_ref_and_checks_it_in_its_commit(j):
    j.create_thread(cj.ThreadMeta(id="src"))
    a = user(j, "src", "a")
    b = assistant(j, "src", "b")
    refs = j.store.refs
    read_ref = refs.read_ref
    reads: list[str] = []

    def counted(name: str) -> str | None:
        reads.append(name)
        return read_ref(name)

    refs.read_ref = counted  # type: ignore[method-assign]
    try:
        assert j.fork("src", a.id, new_thread_id="f1").leaf_id == a.id
        if j.store.capabilities.atomic_commit:  # checked inside the fork's transaction
            assert "threads/src" not in reads
        other = cj.Journal(j.store)  # another writer moves the source meanwhile
        c = user(other, "src", "c")
        assert j.fork("src", c.id, new_thread_id="f2").leaf_id == c.id  # read anew
        assert j.fork("src", new_thread_id="f3").leaf_id == c.id
        other.delete_thread("src")
        with pytest.raises(cj.ThreadNotFound):
            j.fork("src", b.id, new_thread_id="f4")  # the check fails: nothing written
    finally:
        refs.read_ref = read_ref  # type: ignore[method-assign]
    with pytest.raises(cj.ThreadNotFound):
        j.thread("f4")
    assert sorted(t.id for t in j.list_threads()) == ["f1", "f2", "f3"]
    assert [e.id for e in j.path("f1")] == [a.id]


def remote(j: cj.Journal) -> bool:
    """True on the S3 store, where tests scale their sizes down (each request is a round trip)."""
    return j.store.url.startswith("s3://")


def test_fork_copies_nothing_whatever_the_history(j):
    j.create_thread(cj.ThreadMeta(id="long"))
    with j.batch("long") as b:
        for i in range(200 if remote(j) else 1000):
            b.append(
                cj.Entry(
                    type=cj.EntryType.USER_MESSAGE, message=cj.Message(role="user", content=str(i))
                )
            )
    before = stored(j)
    j.fork("long", new_thread_id="f1")
    j.fork("long", b.entries[10].id, new_thread_id="f2")
    new = stored(j) - before
    kinds = [j.store.objects.get(oid)[0] for oid in new]
    assert kinds == [Kind.THREAD, Kind.THREAD]
    assert [e.id for e in j.path("f2")] == [e.id for e in b.entries[:11]]


@pytest.mark.parametrize(
    "j",
    ["memory", "local", "local-durable", pytest.param("s3", marks=pytest.mark.slow)],
    indirect=True,
)
def test_first_page_does_not_read_every_thread(j):
    count = 150 if remote(j) else 400
    for i in range(count):
        j.create_thread(cj.ThreadMeta(id=f"t{i:04d}", created_at=at(i)))
    fresh = cj.Journal(j.store)
    counter = ReadCounter(fresh)
    page = fresh.list_threads(limit=50)
    assert [t.id for t in page] == [f"t{i:04d}" for i in range(count - 1, count - 51, -1)]
    assert counter.reads[Kind.THREAD] <= 60


def test_path_and_entries_of_unknown_thread(j):
    with pytest.raises(cj.ThreadNotFound):
        j.path("x")
    with pytest.raises(cj.ThreadNotFound):
        j.entries("x")
    j.create_thread(cj.ThreadMeta(id="x"))
    assert j.path("x") == [] and j.entries("x") == []


# -- batches -------------------------------------------------------------------------------


def test_batch_is_one_ref_update(j):
    j.create_thread(cj.ThreadMeta(id="t"))
    first = user(j, "t", "before")
    log_before = len(j.store.refs.reflog("threads/t"))
    with j.batch("t") as b:
        for i in range(150):
            b.append(
                cj.Entry(
                    type=cj.EntryType.USER_MESSAGE, message=cj.Message(role="user", content=f"m{i}")
                )
            )
    assert len(j.store.refs.reflog("threads/t")) == log_before + 1
    path = j.path("t")
    assert [e.id for e in path] == [first.id] + [e.id for e in b.entries]
    assert b.entries[0].parent_id == first.id and j.thread("t").leaf_id == b.entries[-1].id
    assert j.entry("t", b.entries[70].id) == b.entries[70]


def test_batch_discarded_on_exception_and_conflicts_when_the_leaf_moves(j):
    j.create_thread(cj.ThreadMeta(id="t"))
    user(j, "t", "start")
    before = j.thread("t")
    with pytest.raises(RuntimeError), j.batch("t") as b:
        b.append(
            cj.Entry(
                type=cj.EntryType.USER_MESSAGE, message=cj.Message(role="user", content="lost")
            )
        )
        raise RuntimeError("boom")
    assert j.thread("t").leaf_id == before.leaf_id
    with pytest.raises(cj.ConflictError), j.batch("t") as b:
        b.append(
            cj.Entry(
                type=cj.EntryType.USER_MESSAGE, message=cj.Message(role="user", content="mine")
            )
        )
        user(j, "t", "someone else")
    assert contents(j.path("t")) == ["start", "someone else"]


def test_batch_merges_a_metadata_only_change(j):
    j.create_thread(cj.ThreadMeta(id="t"))
    with j.batch("t") as b:
        b.append(
            cj.Entry(type=cj.EntryType.USER_MESSAGE, message=cj.Message(role="user", content="x"))
        )
        meta = j.thread("t")
        meta.title = "titled meanwhile"
        j.update_thread(meta)
    after = j.thread("t")
    assert after.title == "titled meanwhile" and after.leaf_id == b.entries[0].id


def test_batch_with_explicit_parents_builds_branches(j):
    j.create_thread(cj.ThreadMeta(id="t"))
    root = user(j, "t", "root")
    with j.batch("t") as b:
        left = b.append(
            cj.Entry(
                type=cj.EntryType.USER_MESSAGE, message=cj.Message(role="user", content="left")
            )
        )
        right = b.append(
            cj.Entry(
                type=cj.EntryType.USER_MESSAGE, message=cj.Message(role="user", content="right")
            ),
            parent_id=root.id,
        )
        with pytest.raises(cj.InvalidParent):
            b.append(cj.Entry(type=cj.EntryType.USER_MESSAGE), parent_id="f" * 64)
    assert j.thread("t").leaf_id == right.id
    assert contents(j.path("t", left.id)) == ["root", "left"]
    assert sorted(contents(j.entries("t"))) == ["left", "right", "root"]


# -- leases --------------------------------------------------------------------------------


def test_turn_leases(j):
    j.create_thread(cj.ThreadMeta(id="t"))
    with pytest.raises(cj.ThreadNotFound):
        j.acquire_turn_lease(cj.TurnLease(thread_id="nope", turn_id="u", owner_id="w"))
    lease = j.acquire_turn_lease(
        cj.TurnLease(thread_id="t", turn_id="u1", owner_id="w1", created_at=at(0))
    )
    assert j.active_turn_lease("t") == lease
    with pytest.raises(cj.ActiveTurn):
        j.acquire_turn_lease(cj.TurnLease(thread_id="t", turn_id="u2", owner_id="w2"))
    j.release_turn_lease(cj.TurnLease(thread_id="t", turn_id="u1", owner_id="someone else"))
    j.release_turn_lease(cj.TurnLease(thread_id="t", turn_id="other turn", owner_id="w1"))
    assert j.active_turn_lease("t") == lease
    assert j.clear_expired_turn_lease("t", at(0)) is None  # not before the cutoff
    assert j.clear_expired_turn_lease("t", at(1)) == lease
    assert j.active_turn_lease("t") is None
    second = j.acquire_turn_lease(cj.TurnLease(thread_id="t", turn_id="u2", owner_id="w2"))
    assert second.created_at is not None
    j.release_turn_lease(second)
    assert j.active_turn_lease("t") is None
    j.release_turn_lease(second)  # no-op


# -- reopening -----------------------------------------------------------------------------


def test_everything_identical_after_reopen(tmp_path):
    path = tmp_path / "store"
    with cj.Journal.open(path) as j:
        j.create_thread(cj.ThreadMeta(id="t", title="x", created_at=at(0)))
        a = user(j, "t", "a", now=at(1))
        assistant(j, "t", "b", now=at(2))
        j.move_leaf("t", a.id)
        user(j, "t", "c", now=at(3))
        j.fork("t", a.id, new_thread_id="f", now=at(4))
        j.checkpoints.save(
            cj.Checkpoint(run_id="r", iteration=1, messages=[{"role": "user", "content": "q"}])
        )
        snapshot = (
            j.list_threads(include_archived=True),
            j.path("t"),
            j.entries("t"),
            j.path("f"),
            j.thread("f"),
            j.checkpoints.load("r"),
            j.checkpoints.list(),
        )
    with cj.Journal.open(path) as again:
        assert (
            again.list_threads(include_archived=True),
            again.path("t"),
            again.entries("t"),
            again.path("f"),
            again.thread("f"),
            again.checkpoints.load("r"),
            again.checkpoints.list(),
        ) == snapshot


def test_lease_created_at_is_kept(j):
    j.create_thread(cj.ThreadMeta(id="t"))
    lease = j.acquire_turn_lease(
        cj.TurnLease(thread_id="t", turn_id="u", owner_id="w", created_at=at(3))
    )
    assert lease.created_at == at(3)
    assert j.clear_expired_turn_lease("t", at(3) + timedelta(microseconds=1)) == lease


def test_a_stale_listing_entry_never_shows_a_thread_twice(j):
    j.create_thread(cj.ThreadMeta(id="t", created_at=at(1)))
    stale = j.thread("t")
    j.delete_thread("t")
    # an interrupted delete leaves the old listing ref behind; the id is then reused
    from cas_journal.journal.state import index_key

    assert stale.created_at is not None
    j.store.refs.set_if_equals(index_key(stale.created_at, "t"), None, "1", log=False)
    j.create_thread(cj.ThreadMeta(id="t", created_at=at(5)))
    assert [t.id for t in j.list_threads()] == ["t"]


def test_thread_states_form_a_skip_list(j):
    from cas_journal.objects import ThreadStateNode, ancestor_at

    j.create_thread(cj.ThreadMeta(id="t"))
    count = 12 if remote(j) else 70
    for i in range(count):
        user(j, "t", f"m{i}")
    meta = j.thread("t")
    meta.title = "renamed"
    j.update_thread(meta)
    j.move_leaf("t", None)
    states = [e.new for e in j.store.refs.reflog("threads/t")]  # create, appends, update, move

    def lookup(oid: str) -> ThreadStateNode:
        kind, body = j.store.objects.get(oid)
        assert kind is Kind.THREAD
        return ThreadStateNode.parse(body, oid)

    head = states[-1]
    assert lookup(head).depth == len(states) - 1
    for depth, oid in enumerate(states):
        assert ancestor_at(lookup, head, depth) == oid
    fork = j.fork("t", new_thread_id="f")  # a new thread's first state starts a new chain
    assert lookup(j.store.refs.read_ref("threads/f")).depth == 0 and fork.id == "f"


# -- options, snapshots, bounded reading, damage --------------------------------------------


def test_open_options_are_checked(tmp_path):
    with pytest.raises(cj.InvalidInputError, match=r"durabel.*valid options: create, durable"):
        cj.Journal.open(tmp_path / "s", durabel=False)  # type: ignore[call-arg]
    with pytest.raises(cj.InvalidInputError, match="endpoint_url"):
        cj.Journal.open(tmp_path / "s", endpoint_url="http://localhost:9000")
    with pytest.raises(cj.InvalidInputError, match="memory store"):
        cj.Journal.open("memory://", durable=True)
    assert not (tmp_path / "s").exists()  # nothing was created by a refused open
    with cj.Journal.open(tmp_path / "s", durable=False, max_object_size=1024) as j:
        j.create_thread(cj.ThreadMeta(id="t"))
        with pytest.raises(cj.InvalidInputError):
            user(j, "t", "x" * 2000)


def test_snapshot_reads_one_state(j):
    j.create_thread(cj.ThreadMeta(id="t"))
    a = user(j, "t", "a")
    snap = j.snapshot("t")
    b = assistant(j, "t", "b")
    assert snap.leaf == a.id and snap.meta.leaf_id == a.id
    assert contents(snap.path()) == ["a"] and contents(j.path("t")) == ["a", "b"]
    assert not snap.contains(b.id) and j.snapshot("t").contains(b.id)
    with pytest.raises(cj.EntryNotFound):
        snap.entry(b.id)
    assert snap.heads == (a.id,) and snap.state.leaf == a.id
    assert snap.resolve(a.id[:10]) == a.id


@pytest.mark.parametrize(
    "j",
    ["memory", "local", "local-durable", pytest.param("s3", marks=pytest.mark.slow)],
    indirect=True,
)
def test_iter_path_walks_back_from_the_leaf_with_a_limit(j):
    j.create_thread(cj.ThreadMeta(id="t"))
    entries = [user(j, "t", f"m{i}", now=at(i)) for i in range(30)]
    assert [e.id for e in j.iter_path("t")] == [e.id for e in reversed(entries)]
    assert [e.id for e in j.iter_path("t", limit=5)] == [e.id for e in entries[:-6:-1]]
    middle = entries[10]
    assert [e.id for e in j.iter_path("t", middle.id, limit=3)] == [e.id for e in entries[10:7:-1]]
    fresh = cj.Journal(j.store)  # nothing cached: entries are read as the walk goes
    counter = ReadCounter(fresh)
    walked = list(fresh.iter_path("t", limit=4))
    assert walked == entries[:-5:-1]
    assert counter.reads[Kind.ENTRY] <= 4 + 2 and counter.reads[Kind.BLOB] == 4
    j.create_thread(cj.ThreadMeta(id="other"))
    foreign = user(j, "other", "x")
    with pytest.raises(cj.EntryNotFound):
        list(j.iter_path("t", foreign.id))
    assert list(j.iter_path("other", limit=0)) == [foreign]


def test_deleted_threads_are_listed_until_restored(j):
    for tid in ("a", "b"):
        j.create_thread(cj.ThreadMeta(id=tid))
    assert j.deleted_threads() == []
    j.delete_thread("b")
    assert j.deleted_threads() == ["b"]
    j.restore_thread("b")
    assert j.deleted_threads() == []


def test_a_damaged_thread_state_is_skipped_and_reported(j):
    for i, tid in enumerate(("good", "bad", "other")):
        j.create_thread(cj.ThreadMeta(id=tid, created_at=at(i)))
        user(j, tid, f"hello {tid}")
    blob = j.store.objects.put(Kind.BLOB, b"not a thread state")
    current = j.store.refs.read_ref("threads/bad")
    assert j.store.refs.set_if_equals("threads/bad", current, blob)
    damaged: list[tuple[str, Exception]] = []
    listed = j.list_threads(on_damaged=lambda tid, exc: damaged.append((tid, exc)))
    assert [t.id for t in listed] == ["other", "good"]
    assert [tid for tid, _ in damaged] == ["bad"]
    assert isinstance(damaged[0][1], cj.CorruptObject)
    assert [t.id for t in j.list_threads()] == ["other", "good"]  # default: a logged warning
    assert contents(j.path("good")) == ["hello good"]  # other threads keep working
    with pytest.raises(cj.CorruptObject):
        j.thread("bad")


def test_a_payload_that_does_not_fit_the_model_is_corrupt_not_a_crash(j):
    from cas_journal.objects import EntryNode, format_time

    payload = b'{"message":5,"type":"user_message"}'
    payload_oid = j.store.objects.put(Kind.BLOB, payload)
    node = EntryNode(payload=payload_oid, created_at=format_time(at(0)))
    entry_oid = j.store.objects.put(Kind.ENTRY, node.body())
    j.create_thread_with_heads(cj.ThreadMeta(id="t", leaf_id=entry_oid), [entry_oid])
    with pytest.raises(cj.CorruptObject, match="payload"):
        j.path("t")
    with pytest.raises(cj.CorruptObject):
        list(j.iter_path("t"))


def test_entries_read_back_equal_what_was_validated_when_written(tmp_path):
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).parent.parent / "fixtures"))
    from make_golden_entries import cases

    blocks = [
        {"type": "text", "text": "reading"},
        {"type": "tool_use", "id": "t1", "name": "read", "input": {"path": "a", "n": 1.5}},
        {"type": "custom", "extra": [1, True, None, {"x": -0.0}]},
    ]
    block_entry = cj.Entry(
        type=cj.EntryType.TOOL_CALL, message=cj.Message(role="assistant", content=blocks)
    )
    with cj.Journal.open(tmp_path / "s", durable=False) as j:
        j.create_thread(cj.ThreadMeta(id="t"))
        written = [
            j.append(entry.model_copy(update={"thread_id": "t"}))
            for entry in [*(entry for _, entry in cases()), block_entry]
        ]
    with cj.Journal.open(tmp_path / "s") as again:
        read = again.path("t")
    assert read == written
    for entry in read:  # the same as a full pydantic validation of the stored data
        assert cj.Entry.model_validate(entry.model_dump()) == entry


# -- a writer's remembered head ------------------------------------------------------------


@pytest.fixture(params=["memory", "local"])
def two_writers(request, tmp_path):
    """Two journals over one store: each remembers the heads it wrote, the other moves them."""
    if request.param == "memory":
        first = cj.Journal.memory()
        second = cj.Journal(first.store)
    else:
        first = cj.Journal.open(tmp_path / "store", durable=False)
        second = cj.Journal.open(tmp_path / "store", durable=False)
    yield first, second
    first.close()
    second.close()


def _message(text: str, **fields) -> cj.Entry:
    return cj.Entry(
        thread_id="t",
        type=cj.EntryType.USER_MESSAGE,
        message=cj.Message(role="user", content=text),
        **fields,
    )


def test_an_append_after_another_writer_moved_the_thread_goes_on_its_leaf(two_writers):
    a, b = two_writers
    a.create_thread(cj.ThreadMeta(id="t"))
    first = a.append(_message("one"))
    theirs = b.append(_message("two"))  # a's remembered head is now stale
    mine = a.append(_message("three"))
    assert mine.parent_id == theirs.id
    assert [e.id for e in b.path("t")] == [first.id, theirs.id, mine.id]


def test_a_parent_only_the_other_writer_added_is_found(two_writers):
    a, b = two_writers
    a.create_thread(cj.ThreadMeta(id="t"))
    a.append(_message("one"))
    theirs = b.append(_message("two"))
    mine = a.append(_message("reply"), parent_id=theirs.id)  # not in a's remembered head
    assert mine.parent_id == theirs.id and b.thread("t").leaf_id == mine.id


def test_a_retry_is_not_taken_for_a_no_op_on_a_stale_head(two_writers):
    a, b = two_writers
    a.create_thread(cj.ThreadMeta(id="t"))
    root = a.append(_message("one", created_at=at(1)))
    again = _message("two", created_at=at(2))
    second = a.append(again, parent_id=root.id)
    b.move_leaf("t", root.id)  # a still remembers ``second`` as the leaf
    assert a.append(again, parent_id=root.id).id == second.id  # the same entry, rebuilt
    assert b.thread("t").leaf_id == second.id  # and made the leaf again: not skipped
    b.move_leaf("t", root.id)
    a.move_leaf("t", second.id)  # a remembers it there already: must still move it
    assert b.thread("t").leaf_id == second.id


def test_a_thread_deleted_by_another_writer_is_not_appended_to(two_writers):
    a, b = two_writers
    a.create_thread(cj.ThreadMeta(id="t"))
    a.append(_message("one"))
    b.delete_thread("t")
    with pytest.raises(cj.ThreadNotFound):
        a.append(_message("two"))


def test_a_writer_appending_to_its_own_thread_reads_no_ref(two_writers):
    a, _ = two_writers
    a.create_thread(cj.ThreadMeta(id="t"))
    a.append(_message("one"))
    reads = []
    original = a.store.refs.read_ref
    a.store.refs.read_ref = lambda name: reads.append(name) or original(name)  # type: ignore[method-assign]
    for n in range(5):
        a.append(_message(f"more {n}"))
    assert reads == []
