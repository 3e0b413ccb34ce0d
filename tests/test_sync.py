"""sync between stores: copying what is missing, fast-forwards, merges, crashes and lies."""

from __future__ import annotations

import pytest
from journal_helpers import at, contents, stored, user

import cas_journal as cj
from cas_journal.maintenance import fsck, sync
from cas_journal.objects import Kind, ObjectCodec


@pytest.fixture(params=["memory", "local", "local-to-s3", "s3-to-local"])
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
    j.checkpoints.save(cj.Checkpoint(run_id="r", iteration=1, messages=[{"role": "user", "content": "x"}]))


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
    src.checkpoints.save(cj.Checkpoint(run_id="r", iteration=2, created_at=at(400), messages=[{"a": 1}]))
    dst.checkpoints.save(cj.Checkpoint(run_id="r", iteration=3, created_at=at(401), messages=[{"b": 2}]))
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


def test_a_sync_killed_midway_leaves_a_valid_destination(tmp_path):
    src = cj.Journal.open(tmp_path / "src", durable=False)
    dst = cj.Journal.open(tmp_path / "dst", durable=False)
    populate(src)
    with src.batch("t") as b:
        for i in range(600):
            b.append(cj.Entry(type=cj.EntryType.USER_MESSAGE, message=cj.Message(role="user", content=f"bulk {i}")))
    calls = 0
    original = dst.store.objects.put_many

    def dying_put_many(items):
        nonlocal calls
        calls += 1
        if calls == 3:
            raise KeyboardInterrupt("killed")
        return original(items)

    dst.store.objects.put_many = dying_put_many
    with pytest.raises(KeyboardInterrupt):
        sync(src.store, dst.store)
    dst.store.objects.put_many = original
    partial = cj.Journal.open(tmp_path / "dst", durable=False)
    assert 0 < len(stored(partial)) < len(stored(src))
    assert fsck(partial.store).ok  # every stored object's references are stored
    report = sync(src.store, partial.store)
    assert report.refs_created == 3
    assert view(partial) == view(src) and fsck(partial.store).ok


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
