"""The stored-copies contract (``cas_journal.backends.copies``): what pack, gc and fsck
rely on, for every backend that keeps its own copies.

A subclass provides ``make_store`` (a fresh, empty store with
``capabilities.stored_copies``), ``reopen`` (a second handle on the same data) and
``damage_loose`` (flip bytes of an object's loose copy). Objects stored with a plain
``put`` must become loose copies.
"""

from __future__ import annotations

import time

import pytest

from cas_journal.backends import Store
from cas_journal.backends.copies import PackOptions, StoredCopies
from cas_journal.errors import CorruptObject, ObjectNotFound
from cas_journal.objects import Kind, canonical_form, object_id


def bodies(count: int, tag: str = "object") -> list[bytes]:
    return [f"{tag} {i}: {'some shared text ' * (i % 7)}".encode() for i in range(count)]


class StoredCopiesContract:
    """Subclass and implement the three fixtures below."""

    @pytest.fixture
    def store(self) -> Store:
        raise NotImplementedError

    def reopen(self, store: Store) -> Store:
        raise NotImplementedError

    def damage_loose(self, store: Store, oid: str) -> None:
        raise NotImplementedError

    # -- helpers --------------------------------------------------------------------------

    @staticmethod
    def copies(store: Store) -> StoredCopies:
        assert store.capabilities.stored_copies and store.stored_copies is not None
        return store.stored_copies

    @staticmethod
    def put_loose(store: Store, items: list[bytes]) -> list[str]:
        return [store.objects.put(Kind.BLOB, body) for body in items]

    # -- scan ------------------------------------------------------------------------------

    def test_scan_lists_loose_and_packed_copies(self, store: Store) -> None:
        copies = self.copies(store)
        before = time.time()
        loose = self.put_loose(store, bodies(5, "loose"))
        written = copies.write_pack(loose[:3], PackOptions(level=3))
        assert written.pack is not None and written.skipped == set()
        found = {}
        for copy in copies.scan():
            found.setdefault(copy.oid, []).append(copy)
        assert set(found) >= set(loose)
        for oid in loose[:3]:
            assert {c.pack for c in found[oid]} == {None, written.pack.name}
        for oid in loose[3:]:
            assert [c.pack for c in found[oid]] == [None]
        for oid in loose:
            for copy in found[oid]:
                assert copy.written >= before - 2 and copy.size > 0

    def test_packs_describe_what_they_hold(self, store: Store) -> None:
        copies = self.copies(store)
        oids = self.put_loose(store, bodies(40))
        written = copies.write_pack(oids, PackOptions(level=3))
        assert written.pack is not None
        (summary,) = [p for p in copies.packs() if p.name == written.pack.name]
        assert summary.objects == 40 and summary.maintained and summary.stored_bytes > 0

    # -- write_pack ------------------------------------------------------------------------

    def test_write_pack_keeps_order_and_reads_back_after_reopen(self, store: Store) -> None:
        copies = self.copies(store)
        items = bodies(300)
        oids = self.put_loose(store, items)
        written = copies.write_pack(list(reversed(oids)), PackOptions(level=3, block_size=4096))
        assert written.pack is not None and written.pack.objects == 300
        copies.delete_loose(oids, None)
        again = self.reopen(store)
        for oid, body in zip(oids, items, strict=True):
            assert again.objects.get(oid) == (Kind.BLOB, body)
            assert self.copies(again).read_canonical(oid) == canonical_form(Kind.BLOB, body)

    def test_write_pack_with_a_dictionary(self, store: Store) -> None:
        copies = self.copies(store)
        oids = self.put_loose(store, bodies(100))
        raw = b"some shared text " * 30
        dictionary = canonical_form(Kind.BLOB, raw)
        from cas_journal.packs import PackedObject

        options = PackOptions(
            level=3, dictionary=PackedObject(object_id(Kind.BLOB, raw), dictionary)
        )
        written = copies.write_pack(oids, options)
        assert written.pack is not None
        assert written.pack.dictionary_oid == object_id(Kind.BLOB, raw)
        copies.delete_loose(oids, None)
        again = self.reopen(store)
        assert all(again.objects.get(oid)[0] is Kind.BLOB for oid in oids)

    def test_write_pack_skips_objects_without_an_intact_copy(self, store: Store) -> None:
        copies = self.copies(store)
        oids = self.put_loose(store, bodies(10))
        self.damage_loose(store, oids[4])
        absent = object_id(Kind.BLOB, b"never stored")
        written = copies.write_pack([*oids, absent], PackOptions(level=3))
        assert written.skipped == {oids[4], absent}
        assert written.pack is not None and written.pack.objects == 9

    def test_write_pack_of_nothing_writes_no_pack(self, store: Store) -> None:
        copies = self.copies(store)
        written = copies.write_pack([object_id(Kind.BLOB, b"absent")], PackOptions(level=3))
        assert written.pack is None and copies.packs() == []

    # -- delete, retire, loosen -----------------------------------------------------------

    def test_delete_loose_spares_copies_written_since_the_cutoff(self, store: Store) -> None:
        copies = self.copies(store)
        oids = self.put_loose(store, bodies(4))
        assert copies.delete_loose(oids[:2], None) == set()
        assert not store.objects.has(oids[0]) and store.objects.has(oids[2])
        cutoff = time.time() - 3600
        assert copies.delete_loose(oids[2:], cutoff) == set(oids[2:])  # too young
        assert all(store.objects.has(oid) for oid in oids[2:])
        assert copies.delete_loose([object_id(Kind.BLOB, b"absent")], None) == set()

    def test_retire_packs_spares_packs_freshened_since_the_cutoff(self, store: Store) -> None:
        copies = self.copies(store)
        oids = self.put_loose(store, bodies(20))
        written = copies.write_pack(oids, PackOptions(level=3))
        assert written.pack is not None
        copies.delete_loose(oids, None)
        name = written.pack.name
        assert copies.retire_packs([name], time.time() - 3600) == {name}
        assert store.objects.has(oids[0])
        assert copies.retire_packs([name], None) == set()
        assert all(p.name != name for p in copies.packs())
        assert not self.reopen(store).objects.has(oids[0])

    def test_loosen_keeps_the_write_time(self, store: Store) -> None:
        copies = self.copies(store)
        oids = self.put_loose(store, bodies(5))
        written = copies.write_pack(oids, PackOptions(level=3))
        assert written.pack is not None
        copies.delete_loose(oids, None)
        packed_time = {c.oid: c.written for c in copies.scan()}
        copies.loosen(oids[:2])
        copies.retire_packs([written.pack.name], None)
        loose = {c.oid: c for c in copies.scan()}
        assert set(loose) == set(oids[:2])
        for oid in oids[:2]:
            assert loose[oid].pack is None
            assert abs(loose[oid].written - packed_time[oid]) <= 1.0

    # -- verify, read ------------------------------------------------------------------------

    def test_verify_reports_each_damaged_copy(self, store: Store) -> None:
        copies = self.copies(store)
        oids = self.put_loose(store, bodies(6))
        written = copies.write_pack(oids, PackOptions(level=3))
        assert written.pack is not None
        self.damage_loose(store, oids[1])
        checks = list(copies.verify())
        packs = [c for c in checks if c.oid is None]
        assert [c.where for c in packs] == [written.pack.name] and packs[0].problem is None
        damaged = [c for c in checks if c.problem is not None]
        assert [(c.oid, c.where, c.kind) for c in damaged] == [(oids[1], "loose", None)]
        good = {(c.oid, c.where) for c in checks if c.oid is not None and c.problem is None}
        assert (oids[1], written.pack.name) in good
        assert all(c.kind is Kind.BLOB for c in checks if c.oid is not None and c.problem is None)

    def test_a_damaged_copy_is_read_from_another(self, store: Store) -> None:
        copies = self.copies(store)
        items = bodies(3)
        oids = self.put_loose(store, items)
        copies.write_pack(oids, PackOptions(level=3))
        self.damage_loose(store, oids[0])
        assert copies.read_canonical(oids[0]) == canonical_form(Kind.BLOB, items[0])
        assert self.reopen(store).objects.get(oids[0]) == (Kind.BLOB, items[0])

    def test_read_canonical_of_a_lost_object(self, store: Store) -> None:
        copies = self.copies(store)
        (oid,) = self.put_loose(store, [b"only copy"])
        self.damage_loose(store, oid)
        with pytest.raises(CorruptObject):
            copies.read_canonical(oid)
        with pytest.raises(ObjectNotFound):
            copies.read_canonical(object_id(Kind.BLOB, b"absent"))

    # -- locks ---------------------------------------------------------------------------------

    def test_one_maintenance_lock_holder_at_a_time(self, store: Store) -> None:
        other = self.reopen(store)
        with self.copies(store).maintenance_lock() as held:
            assert held
            with self.copies(other).maintenance_lock(wait=False) as second:
                assert not second
        with self.copies(other).maintenance_lock(wait=False) as second:
            assert second
