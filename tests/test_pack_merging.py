"""Batch packs are merged geometrically, so batch commits never pile up packs."""

from __future__ import annotations

import math
import os
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

import cas_journal as cj
from cas_journal.backends import LocalStore
from cas_journal.backends.local.packs import LocalPack, copy_packs, write_pack
from cas_journal.maintenance import fsck, gc, pack
from cas_journal.objects import Kind, canonical_form, object_id
from cas_journal.packs import PACK_MAGIC, PackedObject, merging
from cas_journal.packs.merging import MERGE_FACTOR, MERGE_MIN_PACKS, merge_prefix

BATCH = 100


def pack_files(store: LocalStore) -> list[Path]:
    return sorted((store.root / "packs").glob("*.idx"))


def write_batches(store: LocalStore, batches: int, tag: str = "b") -> list[str]:
    oids: list[str] = []
    for b in range(batches):
        oids += store.objects.put_many(
            [(Kind.BLOB, f"{tag} {b} object {i}".encode()) for i in range(BATCH)]
        )
    return oids


def simulate(batches: list[int]) -> list[list[int]]:
    """The pack counts after each batch, merging as the store does."""
    packs: list[int] = []
    history = []
    for size in batches:
        packs = sorted([*packs, size])
        prefix = merge_prefix(packs)
        if prefix:
            packs = sorted([sum(packs[:prefix]), *packs[prefix:]])
        history.append(packs)
    return history


@pytest.fixture
def eager(monkeypatch):
    """Merge as soon as two batch packs break the ratio (the store tolerates a few)."""
    monkeypatch.setattr(merging, "MERGE_MIN_PACKS", 1)


def test_a_few_batch_packs_are_left_alone():
    assert merge_prefix([100] * MERGE_MIN_PACKS) == 0
    assert merge_prefix([100] * (MERGE_MIN_PACKS + 1)) == MERGE_MIN_PACKS + 1


def test_merge_prefix_picks_the_smallest_packs_that_break_the_ratio(eager):
    assert merge_prefix([]) == 0
    assert merge_prefix([100]) == 0
    assert merge_prefix([100, 100]) == 2
    assert merge_prefix([100, 200]) == 0
    assert merge_prefix([100, 100, 1000]) == 2
    assert merge_prefix([100, 150, 400]) == 3
    assert merge_prefix([5, 100, 1000]) == 0


@given(st.lists(st.integers(min_value=64, max_value=5000), min_size=1, max_size=300))
def test_packs_stay_few_and_keep_the_ratio(batches):
    history = simulate(batches)
    for before, packs in zip([[], *history], history, strict=False):
        total = sum(packs)
        assert len(packs) <= MERGE_MIN_PACKS + 1 + math.log(total / 64, MERGE_FACTOR + 1)
        if len(packs) <= len(before):  # a merge ran: every pack now holds MERGE_FACTOR x
            below = 0  # all smaller ones together
            for count in packs:
                assert count >= MERGE_FACTOR * below
                below += count
    assert sum(history[-1]) == sum(batches)  # merging neither loses nor invents objects


def test_many_batch_commits_leave_few_packs_and_every_object(tmp_path):
    store = LocalStore(tmp_path / "s", durable=False)
    oids = write_batches(store, 60)
    assert len(pack_files(store)) <= MERGE_MIN_PACKS + 1 + math.log(60, MERGE_FACTOR + 1)
    again = LocalStore(store.root, create=False)
    assert sorted(again.objects.iter_oids()) == sorted(set(oids))
    for i in (0, 1234, len(oids) - 1):
        assert again.objects.get(oids[i]) == (
            Kind.BLOB,
            f"b {i // BATCH} object {i % BATCH}".encode(),
        )
    assert fsck(cj.Journal(again).store).ok


def test_merging_keeps_write_times_for_gc(tmp_path, eager):
    store = LocalStore(tmp_path / "s", durable=False)
    first = store.objects.put_many([(Kind.BLOB, b"old %d" % i) for i in range(BATCH)])
    (old_pack,) = store.objects.packs()
    past = old_pack.file_time() - 10_000
    os.utime(old_pack.pack_path, (past, past))
    write_batches(store, 1)  # two equal packs: merged
    assert len(pack_files(store)) == 1
    # the merged pack is new, so its objects are young: a merge never makes one older
    assert store.objects.object_time(first[0]) >= past + 10_000 - 5


def test_no_merge_while_pack_or_gc_holds_the_maintenance_lock(tmp_path):
    store = LocalStore(tmp_path / "s", durable=False)
    other = LocalStore(tmp_path / "s", durable=False)
    with other.objects.maintenance_lock() as held:
        assert held
        write_batches(store, MERGE_MIN_PACKS + 3)
        assert len(pack_files(store)) == MERGE_MIN_PACKS + 3
    write_batches(store, 1, tag="after")
    assert len(pack_files(store)) < MERGE_MIN_PACKS + 4


def test_a_damaged_pack_stops_merging_and_loses_nothing(tmp_path, eager):
    store = LocalStore(tmp_path / "s", durable=False)
    oids = write_batches(store, 1)
    (damaged,) = store.objects.packs()
    data = bytearray(damaged.pack_path.read_bytes())
    data[-20] ^= 0xFF
    os.chmod(damaged.pack_path, 0o644)
    damaged.pack_path.write_bytes(bytes(data))
    fresh = LocalStore(store.root, create=False)
    newer = write_batches(fresh, 3, tag="new")  # the commit succeeds; the merge gives up
    assert damaged.index_path.exists()
    assert all(fresh.objects.get(oid)[0] is Kind.BLOB for oid in newer)
    assert fresh.objects.has(oids[0])
    assert not fsck(fresh).ok  # the damage is reported, not hidden


def test_a_crash_mid_merge_leaves_a_valid_store(tmp_path, monkeypatch, eager):
    store = LocalStore(tmp_path / "s", durable=True)
    oids = write_batches(store, 1)
    real_remove = store.objects.remove_pack

    def crash(pack_reader):
        raise KeyboardInterrupt("killed between publishing the merged pack and removing")

    monkeypatch.setattr(store.objects, "remove_pack", crash)
    with pytest.raises(KeyboardInterrupt):
        write_batches(store, 1, tag="second")
    monkeypatch.setattr(store.objects, "remove_pack", real_remove)
    again = LocalStore(store.root, create=False)
    assert len(pack_files(again)) == 3  # the merged pack and both originals
    assert fsck(again).ok
    assert again.objects.get(oids[5]) == (Kind.BLOB, b"b 0 object 5")
    pack(again)
    assert len(pack_files(again)) == 1 and fsck(again).ok


def test_journal_batches_merge_and_gc_still_keeps_every_entry(tmp_path):
    j = cj.Journal.open(tmp_path / "s", durable=False)
    j.create_thread(cj.ThreadMeta(id="t"))
    for b in range(20):
        with j.batch("t") as batch:
            for i in range(70):
                batch.append(
                    cj.Entry(
                        type=cj.EntryType.USER_MESSAGE,
                        message=cj.Message(role="user", content=f"batch {b} message {i}"),
                    )
                )
    assert len(pack_files(j.store)) <= MERGE_MIN_PACKS + 3
    gc(j.store, prune_now=True)
    path = cj.Journal.open(tmp_path / "s", durable=False).path("t")
    assert len(path) == 20 * 70
    assert path[-1].message is not None and path[-1].message.content == "batch 19 message 69"
    assert fsck(j.store).ok


def test_merge_limit_leaves_big_batch_packs_alone(tmp_path, monkeypatch, eager):
    monkeypatch.setattr(merging, "MERGE_LIMIT", BATCH)
    store = LocalStore(tmp_path / "s", durable=False)
    write_batches(store, 3)
    assert len(pack_files(store)) == 3


def test_merging_copies_compressed_blocks_and_keeps_one_copy_of_each_object(tmp_path):
    directory = tmp_path / "packs"
    directory.mkdir()
    first = [PackedObject(*_canonical(b"shared %d" % i)) for i in range(50)]
    second = first[25:] + [PackedObject(*_canonical(b"own %d" % i)) for i in range(50)]
    readers = [
        LocalPack(write_pack(directory, objs, durable=False), 1 << 20) for objs in (first, second)
    ]
    merged = LocalPack(copy_packs(directory, readers, durable=False), 1 << 20)
    sizes = [r.pack_path.stat().st_size - len(PACK_MAGIC) for r in readers]
    assert merged.pack_path.stat().st_size == len(PACK_MAGIC) + sum(sizes)  # verbatim
    assert merged.count == 100
    for obj in first + second:
        assert merged.read_canonical(obj.oid) == obj.data


def _canonical(body: bytes) -> tuple[str, bytes]:
    data = canonical_form(Kind.BLOB, body)
    return object_id(Kind.BLOB, body), data
