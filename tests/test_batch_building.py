"""Batches build the same entries as single appends: skip pointers found through the
batch's own line of ancestors equal those a walk of the stored chain finds."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

import cas_journal as cj
from cas_journal.objects import ancestor_at, skip_depth

T0 = datetime(2026, 1, 1, tzinfo=UTC)


@settings(max_examples=40, deadline=None)
@given(
    sizes=st.lists(st.integers(1, 60), min_size=1, max_size=5),
    seed=st.integers(0, 2**32),
    branching=st.sampled_from([0.0, 0.1, 0.3]),
)
def test_batched_entries_have_the_skip_pointers_of_their_chain(sizes, seed, branching):
    rng = random.Random(seed)
    j = cj.Journal.memory()
    j.create_thread(cj.ThreadMeta(id="t"))
    ids: list[str] = []
    moment = 0
    for size in sizes:
        with j.batch("t") as batch:
            for _ in range(size):
                moment += 1
                # now and then an explicit parent: any earlier entry (a branch), else the tip
                parent = rng.choice(ids) if ids and rng.random() < branching else None
                entry = cj.Entry(thread_id="t", type=cj.EntryType.CUSTOM, turn_id=str(moment))
                made = batch.append(entry, parent_id=parent, now=T0 + timedelta(seconds=moment))
                ids.append(made.id)
    fresh = cj.Journal(j.store)  # nodes read back from the store
    for oid in ids:
        node = fresh.entry_node(oid)
        if node.depth >= 2:
            assert node.skip == ancestor_at(fresh.entry_node, node.parent, skip_depth(node.depth))
    # each entry appended alone, under the same parent at the same time, is the same entry
    single = cj.Journal.memory()
    single.create_thread(cj.ThreadMeta(id="t"))
    for oid in ids:
        node = fresh.entry_node(oid)
        again = single.append(
            cj.Entry(thread_id="t", type=cj.EntryType.CUSTOM, turn_id=node.turn_id),
            parent_id=node.parent,
            now=datetime.fromisoformat(node.created_at),
        )
        assert again.id == oid


@settings(max_examples=30, deadline=None)
@given(
    count=st.integers(1, 150),
    seed=st.integers(0, 2**32),
    branching=st.sampled_from([0.0, 0.1, 0.3]),
)
def test_single_appends_have_the_skip_pointers_of_their_chains(count, seed, branching):
    """Entries and thread states take skip pointers from the lines the journal keeps of
    what it appended lately; each equals what a walk of the stored chain finds."""
    rng = random.Random(seed)
    j = cj.Journal.memory()
    threads = ["a", "b"]
    for thread in threads:
        j.create_thread(cj.ThreadMeta(id=thread))
    ids: dict[str, list[str]] = {thread: [] for thread in threads}
    for moment in range(count):
        thread = rng.choice(threads)
        parent = rng.choice(ids[thread]) if ids[thread] and rng.random() < branching else None
        entry = cj.Entry(thread_id=thread, type=cj.EntryType.CUSTOM, turn_id=str(moment))
        made = j.append(entry, parent_id=parent, now=T0 + timedelta(seconds=moment))
        ids[thread].append(made.id)
    fresh = cj.Journal(j.store)  # nodes and states read back from the store
    for oid in ids["a"] + ids["b"]:
        node = fresh.entry_node(oid)
        if node.depth >= 2:
            assert node.skip == ancestor_at(fresh.entry_node, node.parent, skip_depth(node.depth))
    for thread in threads:
        oid = j.store.refs.read_ref(f"threads/{thread}")
        states = fresh._states
        while oid is not None:
            state = states.state(oid)
            if state.depth >= 2:
                assert state.skip == ancestor_at(
                    states.state, state.parents[0], skip_depth(state.depth)
                )
            oid = state.parent
