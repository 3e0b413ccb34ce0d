"""One contract every backend passes: subclass StoreContract and provide the fixtures.

A subclass defines ``make_store`` (a fresh, empty store), ``reopen`` (a second handle on
the same data) and ``corrupt`` (damage one stored object's bytes).
"""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta

import pytest

from cas_journal.backends import IndexUpdate, RefCheck, RefUpdate, Store, new_object
from cas_journal.errors import (
    CorruptObject,
    InvalidInputError,
    LinkedObjectsMissing,
    ObjectNotFound,
)
from cas_journal.objects import Kind, object_id

GARBAGE_FORMAT_RECORDS = (
    "something else",
    "cas-journal 0\n",
    "cas-journal \u00b2\n",
    "cas-journal \u0661\n",
    "cas-journal -1",
    "cas-journal 02",
)
"""FORMAT records every store must refuse (each backend's tests add their own)."""

HOSTILE_NAMES = [
    "../x",
    "../../etc/passwd",
    "a/b",
    "a_b",
    "a%2Fb",
    "A",
    "a",
    ".",
    "..",
    " ",
    "tab\there",
    "new\nline",
    "\u00e9t\u00e9",
    "\U0001f600",
    "x" * 1024,
    "\u00e9" * 512,
    "con",
    "-",
    "+",
    "%",
]


class StoreContract:
    """The shared contract suite."""

    def make_store(self, tmp_path) -> Store:  # pragma: no cover - overridden
        raise NotImplementedError

    def reopen(self, store: Store) -> Store:  # pragma: no cover - overridden
        raise NotImplementedError

    def corrupt(self, store: Store, oid: str) -> None:  # pragma: no cover - overridden
        raise NotImplementedError

    @pytest.fixture
    def store(self, tmp_path):
        store = self.make_store(tmp_path)
        yield store
        store.close()

    # -- objects ----------------------------------------------------------------------

    def test_put_get_round_trip(self, store):
        oid = store.objects.put(Kind.BLOB, b"hello")
        assert oid == object_id(Kind.BLOB, b"hello")
        assert store.objects.get(oid) == (Kind.BLOB, b"hello")
        assert store.objects.has(oid)

    def test_put_is_idempotent(self, store):
        first = store.objects.put(Kind.ENTRY, b"{}")
        second = store.objects.put(Kind.ENTRY, b"{}")
        assert first == second
        assert list(store.objects.iter_oids()).count(first) == 1

    def test_missing_object(self, store):
        absent = "f" * 64
        assert not store.objects.has(absent)
        with pytest.raises(ObjectNotFound):
            store.objects.get(absent)
        with pytest.raises(KeyError):
            store.objects.get(absent)
        assert store.objects.missing([absent]) == {absent}

    def test_put_many_keeps_order_and_batches(self, store):
        items = [(Kind.BLOB, b"item %d" % i) for i in range(300)]
        oids = store.objects.put_many(items)
        assert oids == [object_id(kind, body) for kind, body in items]
        for oid, (kind, body) in zip(oids, items, strict=True):
            assert store.objects.get(oid) == (kind, body)
        assert set(oids) <= set(store.objects.iter_oids())
        assert store.objects.missing(oids) == set()

    def test_oids_with_prefix(self, store):
        oids = store.objects.put_many([(Kind.BLOB, b"prefix %d" % i) for i in range(300)])
        target = oids[17]
        for length in (2, 4, 8, 64):
            found = store.objects.oids_with_prefix(target[:length])
            assert target in found and found == sorted(found)
            assert all(oid.startswith(target[:length]) for oid in found)
        assert store.objects.oids_with_prefix("0" * 63 + "x") == []

    def test_delete(self, store):
        oid = store.objects.put(Kind.BLOB, b"doomed")
        store.objects.delete(oid)
        assert not store.objects.has(oid)
        store.objects.delete(oid)  # idempotent

    def test_large_object_round_trip(self, store):
        body = bytes(range(256)) * 4096
        oid = store.objects.put(Kind.BLOB, body)
        assert store.objects.get(oid) == (Kind.BLOB, body)

    def test_oversized_object_is_refused(self, store):
        with pytest.raises(InvalidInputError):
            store.objects.put(Kind.BLOB, b"x" * (store.objects.codec.max_object_size + 1))

    def test_corrupt_object_is_detected(self, store):
        oid = store.objects.put(Kind.BLOB, b"precious data")
        self.corrupt(store, oid)
        with pytest.raises(CorruptObject) as info:
            store.objects.get(oid)
        assert info.value.oid == oid

    def test_data_survives_reopen(self, store):
        oid = store.objects.put(Kind.BLOB, b"kept")
        assert store.refs.set_if_equals("threads/t", None, oid)
        again = self.reopen(store)
        assert again.objects.get(oid) == (Kind.BLOB, b"kept")
        assert again.refs.read_ref("threads/t") == oid

    # -- refs -------------------------------------------------------------------------

    def test_compare_and_swap(self, store):
        refs = store.refs
        a, b = "a" * 64, "b" * 64
        assert refs.read_ref("threads/x") is None
        assert refs.set_if_equals("threads/x", None, a, "create")
        assert not refs.set_if_equals("threads/x", None, b, "create again")
        assert not refs.set_if_equals("threads/x", b, a, "wrong old")
        assert refs.read_ref("threads/x") == a
        assert refs.set_if_equals("threads/x", a, b, "move")
        assert refs.read_ref("threads/x") == b
        assert not refs.set_if_equals("threads/x", a, None, "stale delete")
        assert refs.set_if_equals("threads/x", b, None, "delete")
        assert refs.read_ref("threads/x") is None

    def test_reflog_records_every_update_and_outlives_the_ref(self, store):
        refs = store.refs
        a, b = "a" * 64, "b" * 64
        before = datetime.now(UTC) - timedelta(seconds=1)
        refs.set_if_equals("threads/x", None, a, "create")
        refs.set_if_equals("threads/x", a, b, "append")
        refs.set_if_equals("threads/x", b, None, "delete")
        log = refs.reflog("threads/x")
        assert [(e.old, e.new, e.reason) for e in log] == [
            (None, a, "create"),
            (a, b, "append"),
            (b, None, "delete"),
        ]
        assert all(e.time >= before and e.time.tzinfo is not None for e in log)
        assert refs.reflog_names("threads/") == ["threads/x"]
        dropped = refs.rewrite_reflog("threads/x", lambda e: e.reason != "append")
        assert dropped == 1
        assert [e.reason for e in refs.reflog("threads/x")] == ["create", "delete"]

    def test_unlogged_updates(self, store):
        assert store.refs.set_if_equals("leases/x", None, '{"a":1}', log=False)
        assert store.refs.reflog("leases/x") == []

    def test_list_refs_sorted_with_cursor(self, store):
        names = ["threads/b", "threads/a", "threads/a/b", "threads/\u00e9", "threads/A", "other/z"]
        for name in names:
            assert store.refs.set_if_equals(name, None, "v")
        listed = store.refs.list_refs("threads/")
        assert listed == sorted(n for n in names if n.startswith("threads/"))
        assert store.refs.list_refs("threads/", start_after="threads/a") == listed[2:]
        assert store.refs.list_refs("threads/", limit=2) == listed[:2]
        assert store.refs.list_refs("threads/a") == ["threads/a", "threads/a/b"]

    @pytest.mark.parametrize("name", HOSTILE_NAMES)
    def test_hostile_names_round_trip_without_collisions(self, store, name):
        refs = store.refs
        full = f"threads/{name}"
        assert refs.set_if_equals(full, None, "v1")
        assert refs.read_ref(full) == "v1"
        assert refs.list_refs("threads/") == [full]
        assert refs.list_refs("checkpoints/") == []
        # every other hostile name is still free
        for other in HOSTILE_NAMES:
            if other != name:
                assert refs.read_ref(f"threads/{other}") is None

    def test_all_hostile_names_coexist(self, store):
        for i, name in enumerate(HOSTILE_NAMES):
            assert store.refs.set_if_equals(f"threads/{name}", None, f"v{i}")
        for i, name in enumerate(HOSTILE_NAMES):
            assert store.refs.read_ref(f"threads/{name}") == f"v{i}"
        assert store.refs.list_refs("threads/") == sorted(f"threads/{n}" for n in HOSTILE_NAMES)

    def test_read_refs_agrees_with_read_ref(self, store):
        names = [f"threads/{name}" for name in HOSTILE_NAMES]
        for i, name in enumerate(names[::2]):
            assert store.refs.set_if_equals(name, None, f"v{i}")
        wanted = [*names, "threads/absent", names[0]]
        assert store.refs.read_refs(wanted) == {name: store.refs.read_ref(name) for name in wanted}
        assert store.refs.read_refs([]) == {}

    @pytest.mark.parametrize(
        "bad", ["threads/", "threads/a\0b", "", "noslash", "Bad/x", "x" * 3000]
    )
    def test_invalid_names_are_value_errors(self, store, bad):
        with pytest.raises(ValueError):
            store.refs.set_if_equals(bad, None, "v")
        with pytest.raises(ValueError):
            store.refs.read_ref(bad)

    @pytest.mark.parametrize("bad", ["", "two\nlines", "nul\0"])
    def test_invalid_values_are_refused(self, store, bad):
        with pytest.raises(ValueError):
            store.refs.set_if_equals("threads/x", None, bad)
        assert store.refs.read_ref("threads/x") is None

    def test_threads_racing_on_one_ref_lose_no_increment(self, store):
        refs = store.refs
        refs.set_if_equals("threads/counter", None, "0")

        def work():
            for _ in range(100):
                while True:
                    current = refs.read_ref("threads/counter")
                    if refs.set_if_equals("threads/counter", current, str(int(current) + 1)):
                        break

        workers = [threading.Thread(target=work) for _ in range(6)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        assert refs.read_ref("threads/counter") == "600"
        assert len(refs.reflog("threads/counter")) == 601

    # -- commit: objects + one compare-and-swap + index updates ---------------------------

    def test_commit_stores_objects_swaps_and_indexes(self, store):
        blob = new_object(Kind.BLOB, b"payload")
        entry = new_object(Kind.ENTRY, b'{"x":1}')
        ok = store.commit(
            [blob, entry],
            RefUpdate("threads/t", None, entry.oid, "create"),
            [IndexUpdate("threadindex/0001/t", "1")],
        )
        assert ok
        assert store.objects.get(blob.oid) == (Kind.BLOB, b"payload")
        assert store.objects.get(entry.oid) == (Kind.ENTRY, b'{"x":1}')
        assert store.refs.read_ref("threads/t") == entry.oid
        assert store.refs.read_ref("threadindex/0001/t") == "1"
        [logged] = store.refs.reflog("threads/t")
        assert (logged.old, logged.new, logged.reason) == (None, entry.oid, "create")
        assert store.refs.reflog("threadindex/0001/t") == []

    def test_commit_that_loses_its_swap_changes_no_ref(self, store):
        first = new_object(Kind.BLOB, b"first")
        second = new_object(Kind.BLOB, b"second")
        assert store.commit([first], RefUpdate("threads/t", None, first.oid))
        lost = store.commit(
            [second],
            RefUpdate("threads/t", None, second.oid),
            [IndexUpdate("threadindex/0002/t", None), IndexUpdate("threadindex/0003/t", None)],
        )
        assert not lost
        assert store.refs.read_ref("threads/t") == first.oid
        assert len(store.refs.reflog("threads/t")) == 1

    def test_commit_moves_and_removes_index_refs(self, store):
        a = new_object(Kind.BLOB, b"a")
        b = new_object(Kind.BLOB, b"b")
        store.commit(
            [a], RefUpdate("threads/t", None, a.oid), [IndexUpdate("threadindex/1/t", "1")]
        )
        store.commit(
            [b],
            RefUpdate("threads/t", a.oid, b.oid, "move"),
            [IndexUpdate("threadindex/1/t", None), IndexUpdate("threadindex/2/t", "1")],
        )
        assert store.refs.list_refs("threadindex/") == ["threadindex/2/t"]
        store.commit(
            [],
            RefUpdate("threads/t", b.oid, None, "delete"),
            [IndexUpdate("threadindex/2/t", None)],
        )
        assert store.refs.read_ref("threads/t") is None
        assert store.refs.list_refs("threadindex/") == []
        assert [e.reason for e in store.refs.reflog("threads/t")] == ["", "move", "delete"]

    def test_unlogged_commit_for_leases(self, store):
        assert store.commit([], RefUpdate("leases/t", None, '{"turn":"u1"}', log=False))
        assert not store.commit([], RefUpdate("leases/t", None, '{"turn":"u2"}', log=False))
        assert store.refs.read_ref("leases/t") == '{"turn":"u1"}'
        assert store.refs.reflog("leases/t") == []

    def test_committed_objects_survive_reopen(self, store):
        blob = new_object(Kind.BLOB, b"kept")
        assert store.commit([blob], RefUpdate("threads/kept", None, blob.oid))
        again = self.reopen(store)
        try:
            assert again.refs.read_ref("threads/kept") == blob.oid
            assert again.objects.get(blob.oid) == (Kind.BLOB, b"kept")
        finally:
            if again is not store:
                again.close()

    def test_commit_links_stored_objects_it_did_not_write(self, store):
        kept = store.objects.put(Kind.BLOB, b"linked, not written")
        head = new_object(Kind.BLOB, b"head")
        assert store.commit([head], RefUpdate("threads/t", None, head.oid), linked=[kept, kept])
        assert store.refs.read_ref("threads/t") == head.oid
        assert store.objects.get(kept) == (Kind.BLOB, b"linked, not written")

    def test_commit_linking_a_missing_object_changes_nothing(self, store):
        kept = store.objects.put(Kind.BLOB, b"here")
        head = new_object(Kind.BLOB, b"head")
        absent = "e" * 64
        with pytest.raises(LinkedObjectsMissing) as raised:
            store.commit(
                [head],
                RefUpdate("threads/t", None, head.oid),
                [IndexUpdate("threadindex/0001/t", "1")],
                linked=[kept, absent],
            )
        assert raised.value.oids == [absent]
        assert store.refs.read_ref("threads/t") is None
        assert store.refs.read_ref("threadindex/0001/t") is None
        assert store.refs.reflog("threads/t") == []
        with pytest.raises(LinkedObjectsMissing):
            store.commit([], RefUpdate("threads/t", None, kept), linked=["not an oid"])
        assert store.refs.read_ref("threads/t") is None

    def test_commit_applies_only_while_its_checks_hold(self, store):
        source = new_object(Kind.BLOB, b"source")
        moved = new_object(Kind.BLOB, b"moved")
        fork = new_object(Kind.BLOB, b"fork")
        assert store.commit([source], RefUpdate("threads/src", None, source.oid))
        held = [RefCheck("threads/src", source.oid), RefCheck("threads/none", None)]
        assert store.commit(
            [fork],
            RefUpdate("threads/a", None, fork.oid, "fork"),
            [IndexUpdate("threadindex/0001/a", "1")],
            expect=held,
        )
        assert store.refs.read_ref("threads/a") == fork.oid
        assert store.refs.read_ref("threadindex/0001/a") == "1"
        assert store.commit([moved], RefUpdate("threads/src", source.oid, moved.oid))
        for stale in (
            [RefCheck("threads/src", source.oid)],  # the source moved since it was read
            [RefCheck("threads/src", None)],  # it exists
            [RefCheck("threads/src", moved.oid), RefCheck("threads/a", None)],
        ):
            assert not store.commit(
                [fork],
                RefUpdate("threads/b", None, fork.oid, "fork"),
                [IndexUpdate("threadindex/0001/b", "1")],
                expect=stale,
            )
            assert store.refs.read_ref("threads/b") is None
            assert store.refs.read_ref("threadindex/0001/b") is None
            assert store.refs.reflog("threads/b") == []
        kept = store.objects.put(Kind.BLOB, b"linked")
        assert not store.commit(
            [], RefUpdate("threads/c", None, kept), linked=[kept], expect=[held[0]]
        )
        assert store.refs.read_ref("threads/c") is None
        assert store.commit([], RefUpdate("threads/c", None, kept), linked=[kept], expect=[held[1]])

    def test_freshen_reports_what_is_missing(self, store):
        kept = store.objects.put(Kind.BLOB, b"here")
        absent = "e" * 64
        assert store.objects.freshen([kept, absent]) == {absent}

    def test_threads_racing_on_commits_lose_no_increment(self, store):
        store.commit([], RefUpdate("threads/counter", None, "0"))

        def work():
            for _ in range(50):
                while True:
                    current = store.refs.read_ref("threads/counter")
                    blob = new_object(Kind.BLOB, current.encode())
                    if store.commit(
                        [blob], RefUpdate("threads/counter", current, str(int(current) + 1))
                    ):
                        break

        workers = [threading.Thread(target=work) for _ in range(4)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        assert store.refs.read_ref("threads/counter") == "200"
        assert len(store.refs.reflog("threads/counter")) == 201
