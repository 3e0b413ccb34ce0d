"""Packs on S3: batches become packs, reads go through cached indexes and ranged GETs,
pack and gc work on a bucket (two-phase deletion, safe while others write), the manifest
survives damage."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.copies_contract import StoredCopiesContract
from support.s3_server import PREFIX, S3Server

import cas_journal as cj
from cas_journal.backends import Store
from cas_journal.backends.s3 import S3Store
from cas_journal.backends.s3.manifest import ManifestError, decode_manifest
from cas_journal.journal.refnames import thread_ref
from cas_journal.maintenance import fsck, gc, pack, sync
from cas_journal.maintenance.copying import CopyLimits
from cas_journal.objects import Kind

pytestmark = pytest.mark.usefixtures("hermetic_aws")


@pytest.fixture
def s3(s3_server: S3Server) -> Iterator[S3Server]:
    s3_server.faults()
    yield s3_server
    s3_server.faults()


@pytest.fixture
def store(s3: S3Server) -> Iterator[S3Store]:
    opened = s3.open(s3.new_bucket())
    yield opened
    opened.close()


def reopen(s3: S3Server, store: S3Store) -> S3Store:
    return S3Store.from_url(store.url, create=False, **s3.options)


def message(text: str, thread_id: str = "") -> cj.Entry:
    return cj.Entry(
        thread_id=thread_id,
        type=cj.EntryType.USER_MESSAGE,
        message=cj.Message(role="user", content=text),
    )


def fill(journal: cj.Journal, thread_id: str, count: int, tag: str = "") -> list[str]:
    journal.create_thread(cj.ThreadMeta(id=thread_id))
    with journal.batch(thread_id) as batch:
        for i in range(count):
            batch.append(message(f"{tag}message {i} " + "x" * (i % 50)))
    return [entry.id for entry in batch.entries]


def test_batch_is_one_pack_and_a_cold_read_takes_few_requests(s3: S3Server, store: S3Store) -> None:
    ids = fill(cj.Journal(store), "t", 1500)
    usage = store.objects.usage()
    assert usage["packs"] == 1 and usage["loose_objects"] == 1  # the thread's creation
    cold = reopen(s3, store)
    try:
        before = cold.bucket.stats.total
        path = cj.Journal(cold).path("t")
        requests = cold.bucket.stats.total - before
        assert [entry.id for entry in path] == ids
        # thread ref, manifest, one index, a few ranged GETs of the pack: not 3,000 GETs
        assert requests <= 20, cold.bucket.stats.snapshot()
    finally:
        cold.close()


@pytest.mark.slow
def test_pack_folds_loose_objects_and_reads_still_verify(s3: S3Server, store: S3Store) -> None:
    journal = cj.Journal(store)
    journal.create_thread(cj.ThreadMeta(id="t"))
    ids = [journal.append(message(f"single {i}", "t")).id for i in range(5)]
    assert store.objects.usage()["loose_objects"] > 0
    report = pack(store)
    assert report.loose_objects_packed > 0
    usage = store.objects.usage()
    assert usage["loose_objects"] == 0 and usage["packs"] == 1
    cold = reopen(s3, store)
    try:
        assert [e.id for e in cj.Journal(cold).path("t")] == ids
        assert fsck(cold).ok
    finally:
        cold.close()


@pytest.mark.slow
def test_gc_condemns_then_deletes_and_rescues_what_became_reachable(
    s3: S3Server, store: S3Store
) -> None:
    journal = cj.Journal(store)
    fill(journal, "keep", 40, "k")
    gone = fill(journal, "gone", 40, "g")
    revived = fill(journal, "revived", 40, "r")
    revived_state = store.refs.read_ref(thread_ref("revived"))
    journal.delete_thread("gone")
    journal.delete_thread("revived")
    grace = timedelta(seconds=1)
    expiry = timedelta(0)  # reflogs expire at once: deleted threads become garbage
    time.sleep(1.2)
    report = gc(store, grace=grace, reflog_expiry=expiry)
    assert report.condemned_objects > 0 and report.deleted_objects == 0
    assert store.objects.missing(gone) == set(gone)  # no writer relies on condemned copies
    assert store.objects.get(gone[0])[0] is Kind.ENTRY  # readers still find them
    # a writer that found these objects live before gc condemned them links them now
    # (within its deadline): the next gc rescues them instead of deleting them
    assert store.refs.set_if_equals(thread_ref("revived"), None, revived_state)
    time.sleep(1.2)
    report = gc(store, grace=grace, reflog_expiry=expiry)
    assert report.deleted_objects > 0
    assert not any(store.objects.has(oid) for oid in gone)
    assert [e.id for e in journal.path("revived")] == revived
    assert store.objects.missing(revived) == set()  # live again
    assert [len(journal.path(t)) for t in ("keep", "revived")] == [40, 40]
    cold = reopen(s3, store)
    try:
        assert fsck(cold).ok
    finally:
        cold.close()


@pytest.mark.slow
def test_gc_while_writers_append_loses_nothing(s3: S3Server, store: S3Store) -> None:
    """Writers on their own handles append singly and in batches while gc runs with a
    short grace period, over and over: every acknowledged entry stays readable."""
    setup = cj.Journal(store)
    for name in ("a", "b", "shared"):
        setup.create_thread(cj.ThreadMeta(id=name))
    fill(setup, "doomed", 30, "d")
    setup.delete_thread("doomed")
    acked: dict[str, list[str]] = {"a": [], "b": [], "shared": []}
    errors: list[BaseException] = []

    def writer(name: str, seed: int) -> None:
        handle = reopen(s3, store)
        journal = cj.Journal(handle)
        try:
            for i in range(1, 9):
                if i % 3:
                    entry = journal.append(message(f"{name} {seed} {i}", name))
                    acked[name].append(entry.id)
                else:
                    with journal.batch(name) as batch:
                        for k in range(20):
                            batch.append(message(f"{name} {seed} {i} batch {k}"))
                    acked[name].extend(e.id for e in batch.entries)
                entry = journal.append(message(f"shared {seed} {i}", "shared"))
                acked["shared"].append(entry.id)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)
        finally:
            handle.close()

    threads = [threading.Thread(target=writer, args=(n, k)) for k, n in enumerate("ab")]
    for thread in threads:
        thread.start()
    collector = reopen(s3, store)
    runs = 0
    try:
        while runs < 2 or any(thread.is_alive() for thread in threads):
            time.sleep(0.6)
            gc(collector, grace=timedelta(seconds=0.5), reflog_expiry=timedelta(0))
            runs += 1
    finally:
        for thread in threads:
            thread.join()
        collector.close()
    assert not errors, errors
    cold = reopen(s3, store)
    try:
        journal = cj.Journal(cold)
        for name, ids in acked.items():
            on_path = {entry.id for entry in journal.path(name)}
            assert set(ids) <= on_path, name
        assert fsck(cold).ok
    finally:
        cold.close()


def test_damaged_manifest_keeps_every_pack_readable(s3: S3Server, store: S3Store) -> None:
    ids = fill(cj.Journal(store), "t", 30)
    bucket = store.url.removeprefix("s3://").split("/")[0]
    s3.raw().put_object(Bucket=bucket, Key=f"{PREFIX}/MANIFEST", Body=b"{not json")
    cold = reopen(s3, store)
    try:
        assert [e.id for e in cj.Journal(cold).path("t")] == ids
        journal = cj.Journal(cold)
        more = fill(journal, "u", 30)  # the next writer rewrites it from the listing
        assert [e.id for e in journal.path("u")] == more
        assert not cold.objects.packs.manifests.read().damaged
        assert fsck(cold).ok
    finally:
        cold.close()


_field = st.one_of(
    st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=5), st.lists(st.none())
)


@settings(max_examples=200, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    st.one_of(
        st.binary(max_size=64),
        st.dictionaries(
            st.sampled_from(["format", "live", "condemned", "x"]),
            st.one_of(
                _field,
                st.lists(
                    st.dictionaries(
                        st.sampled_from(
                            ["name", "data", "index", "index_hash", "objects", "added", "condemned"]
                        ),
                        _field,
                    ),
                    max_size=3,
                ),
            ),
        ).map(lambda value: repr(value).replace("'", '"').encode()),
    )
)
def test_hostile_manifest_is_refused_with_manifest_error(body: bytes) -> None:
    try:
        manifest = decode_manifest(body, None, 0.0)
    except ManifestError:
        return
    for entry in (*manifest.live, *manifest.condemned):  # whatever parses is in bounds
        assert entry.name.startswith("pack-") and entry.data >= 0 and entry.index >= 0


def test_valid_manifest_round_trips() -> None:
    good = (
        b'{"format":1,"live":[{"name":"pack-' + b"a" * 40 + b'","data":10,"index":20,'
        b'"index_hash":"","objects":3,"added":1.5}],"condemned":[]}'
    )
    manifest = decode_manifest(good, '"e"', 0.0)
    assert manifest.live[0].objects == 3
    assert decode_manifest(manifest.encode(), None, 0.0).live == manifest.live


@pytest.mark.slow
def test_gc_removes_tombstones_older_than_the_reflog_expiry(store: S3Store) -> None:
    journal = cj.Journal(store)
    for name in ("gone", "back"):
        journal.create_thread(cj.ThreadMeta(id=name))
        journal.delete_thread(name)
    journal.create_thread(cj.ThreadMeta(id="back"))  # recreated: no longer a tombstone
    assert store.refs.conditional_deletes()  # moto honours If-Match on DELETE
    time.sleep(1.1)
    kept = gc(store, grace=timedelta(seconds=1))  # reflogs (30 days) keep the tombstones
    assert kept.tombstones_removed == 0
    report = gc(store, grace=timedelta(seconds=1), reflog_expiry=timedelta(0))
    # the thread ref and listing ref of "gone", the first listing ref of "back" (its
    # listing key names its creation time)
    assert report.tombstones_removed == 3
    assert journal.thread("back").id == "back"
    assert [meta.id for meta in journal.list_threads()] == ["back"]
    journal.create_thread(cj.ThreadMeta(id="gone"))  # created afresh, as never seen
    assert journal.thread("gone").id == "gone"


@pytest.mark.slow
def test_prune_now_deletes_at_once_and_empties_condemned_packs(store: S3Store) -> None:
    journal = cj.Journal(store)
    kept = fill(journal, "keep", 20, "k")
    gone = fill(journal, "gone", 20, "g")
    journal.delete_thread("gone")
    time.sleep(1.1)
    first = gc(store, grace=timedelta(seconds=1), reflog_expiry=timedelta(0))
    assert first.condemned_objects > 0 and store.objects.has(gone[0])
    report = gc(store, prune_now=True, reflog_expiry=timedelta(0))
    assert report.deleted_objects >= first.condemned_objects
    assert not any(store.objects.has(oid) for oid in gone)
    assert store.objects.packs.refresh().condemned == ()
    assert [e.id for e in journal.path("keep")] == kept
    assert fsck(store).ok


@pytest.mark.parametrize("damage", ["flipped", "truncated", "index"])
def test_damaged_pack_in_the_bucket_is_a_clear_error(
    s3: S3Server, store: S3Store, damage: str
) -> None:
    ids = fill(cj.Journal(store), "t", 40)
    (entry,) = store.objects.packs.refresh().live
    bucket = store.url.removeprefix("s3://").split("/")[0]
    raw = s3.raw()
    key = f"{PREFIX}/packs/{entry.name}." + ("idx" if damage == "index" else "pack")
    body = bytearray(raw.get_object(Bucket=bucket, Key=key)["Body"].read())
    if damage == "truncated":
        body = body[: len(body) // 2]
    else:
        for at in range(len(body) // 3, len(body) - 40, 97):
            body[at] ^= 0x55
    raw.put_object(Bucket=bucket, Key=key, Body=bytes(body))
    cold = reopen(s3, store)
    try:
        with pytest.raises(cj.JournalError):  # CorruptObject or ObjectNotFound, one line
            list(cj.Journal(cold).iter_path("t"))
        report = fsck(cold)
        assert not report.ok and report.problems
    finally:
        cold.close()
    assert len(ids) == 40


@pytest.mark.slow
def test_a_push_killed_midway_resumes_and_its_debris_goes(
    s3: S3Server, store: S3Store, tmp_path: Any
) -> None:
    src = cj.Journal.open(tmp_path / "src", durable=False)
    fill(src, "t", 300, "bulk ")
    fill(src, "u", 300, "more ")
    small = CopyLimits(batch_bytes=16 * 1024, writers=2)
    original = store.bucket.put
    indexes = 0

    def dying_put(key: str, *args: Any, **kwargs: Any) -> str | None:
        nonlocal indexes
        if key.endswith(".idx"):
            indexes += 1
            if indexes == 4:  # killed with a pack's data uploaded, its index not
                raise KeyboardInterrupt("killed")
        return original(key, *args, **kwargs)

    def dead_delete_many(keys: Any, what: str) -> None:
        return None  # a killed process cleans nothing up

    cleanup = store.bucket.delete_many
    store.bucket.put = dying_put  # type: ignore[method-assign,assignment]
    store.bucket.delete_many = dead_delete_many  # type: ignore[method-assign]
    with pytest.raises(KeyboardInterrupt):
        sync(src.store, store, limits=small)
    store.bucket.put = original  # type: ignore[method-assign]
    store.bucket.delete_many = cleanup  # type: ignore[method-assign]
    partial = reopen(s3, store)
    try:
        arrived = set(partial.objects.iter_oids())
        assert arrived and cj.Journal(partial).list_threads() == []  # no ref before objects
        assert fsck(partial).ok
        report = sync(src.store, partial, limits=small)
        total = set(src.store.objects.iter_oids())
        assert report.objects_copied == len(total - arrived)  # nothing sent twice
        assert [e.id for e in cj.Journal(partial).path("t")] == [e.id for e in src.path("t")]
        cleaned = gc(partial, prune_now=True)
        assert cleaned.temp_files_removed >= 1  # the killed pack's data key
        listed = partial.objects.packs.refresh().names()
        bucket = store.url.removeprefix("s3://").split("/")[0]
        keys = s3.raw().list_objects_v2(Bucket=bucket, Prefix=f"{PREFIX}/packs/")
        names = {item["Key"].rsplit("/", 1)[1].split(".")[0] for item in keys["Contents"]}
        assert names == listed
        assert fsck(partial).ok
    finally:
        partial.close()
        src.close()


class TestS3StoredCopies(StoredCopiesContract):
    """Loose keys and packs listed by the manifest."""

    @pytest.fixture
    def store(self, s3: S3Server) -> Iterator[S3Store]:
        self.s3 = s3
        opened = s3.open(s3.new_bucket())
        yield opened
        opened.close()

    def reopen(self, store: Store) -> Store:
        assert isinstance(store, S3Store)
        return reopen(self.s3, store)

    # 300 and 100 loose objects written one request each: run with -m slow

    @pytest.mark.slow
    def test_write_pack_keeps_order_and_reads_back_after_reopen(self, store: Store) -> None:
        super().test_write_pack_keeps_order_and_reads_back_after_reopen(store)

    @pytest.mark.slow
    def test_write_pack_with_a_dictionary(self, store: Store) -> None:
        super().test_write_pack_with_a_dictionary(store)

    def damage_loose(self, store: Store, oid: str) -> None:
        assert isinstance(store, S3Store)
        bucket = store.url.removeprefix("s3://").split("/")[0]
        key = f"{PREFIX}/objects/{oid[:2]}/{oid[2:]}"
        raw = self.s3.raw()
        data = bytearray(raw.get_object(Bucket=bucket, Key=key)["Body"].read())
        data[len(data) // 2] ^= 0x5A
        raw.put_object(Bucket=bucket, Key=key, Body=bytes(data))
