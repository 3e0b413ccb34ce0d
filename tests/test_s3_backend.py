"""The S3 backend against a real S3-protocol server: moto's S3 app on loopback.

The server runs in a subprocess (so client and server use both cores): moto's S3 WSGI
application behind a small HTTP/1.1 keep-alive bridge (werkzeug's development server
closes every connection, which made this file ~40% slower) and a layer that (1) handles
one request at a time, because moto checks If-Match/If-None-Match and then writes without
a lock, so two concurrent conditional writes could both pass, which real S3 never allows;
and (2) can inject faults on request: error answers (503 SlowDown, 500), garbage bodies,
"commit then fail", or dropping the condition headers. Tests reach the store only through ``S3Store`` (``from_url`` / ``open_store``),
the code path a user points at AWS or MinIO; a raw boto3 client is used only to set up
buckets and to damage data behind the store's back.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from botocore.config import Config
from botocore.exceptions import ClientError
from hypothesis import given
from hypothesis import strategies as st
from support.backend_contract import GARBAGE_FORMAT_RECORDS, StoreContract
from support.s3_server import PREFIX, S3Server

from cas_journal.backends import new_object, open_store
from cas_journal.backends.s3 import S3Store
from cas_journal.backends.s3.keys import decode_ordered, encode_ordered
from cas_journal.backends.s3.objects import _waves
from cas_journal.errors import (
    CorruptObject,
    InvalidInputError,
    ObjectNotFound,
    StorageError,
    StoreFormatError,
)
from cas_journal.maintenance import gc
from cas_journal.objects import Kind, MessageNode, ObjectCodec, object_id

pytestmark = pytest.mark.usefixtures("hermetic_aws")


@pytest.fixture
def s3(s3_server: S3Server) -> Iterator[S3Server]:
    s3_server.faults()
    yield s3_server
    s3_server.faults()


@pytest.fixture
def bucket(s3: S3Server) -> str:
    return s3.new_bucket()


@pytest.fixture
def store(s3: S3Server, bucket: str) -> Iterator[S3Store]:
    opened = s3.open(bucket)
    yield opened
    opened.close()


def object_key(oid: str) -> str:
    return f"{PREFIX}/objects/{oid[:2]}/{oid[2:]}"


# -- the shared contract ----------------------------------------------------------------


class TestS3Store(StoreContract):
    @pytest.fixture(autouse=True)
    def _server(self, s3: S3Server) -> None:
        self.s3 = s3

    def make_store(self, tmp_path: Any) -> S3Store:
        return self.s3.open(self.s3.new_bucket())

    def reopen(self, store: S3Store) -> S3Store:
        return S3Store.from_url(store.url, create=False, **self.s3.options)

    def corrupt(self, store: S3Store, oid: str) -> None:
        _, other = ObjectCodec().encode(Kind.BLOB, b"something else")
        bucket = store.url.removeprefix("s3://").split("/")[0]
        self.s3.raw().put_object(Bucket=bucket, Key=object_key(oid), Body=other)

    # each increment is several round trips to the server: seconds here, run with -m slow

    @pytest.mark.slow
    def test_threads_racing_on_one_ref_lose_no_increment(self, store: S3Store) -> None:
        super().test_threads_racing_on_one_ref_lose_no_increment(store)

    @pytest.mark.slow
    def test_threads_racing_on_commits_lose_no_increment(self, store: S3Store) -> None:
        super().test_threads_racing_on_commits_lose_no_increment(store)


# -- the server really enforces what the backend relies on ------------------------------


def test_server_refuses_stale_conditional_writes(s3: S3Server, bucket: str) -> None:
    raw = s3.raw()
    first = raw.put_object(Bucket=bucket, Key="k", Body=b"1", IfNoneMatch="*")["ETag"]
    with pytest.raises(ClientError) as exists:
        raw.put_object(Bucket=bucket, Key="k", Body=b"2", IfNoneMatch="*")
    assert exists.value.response["ResponseMetadata"]["HTTPStatusCode"] == 412
    second = raw.put_object(Bucket=bucket, Key="k", Body=b"2", IfMatch=first)["ETag"]
    with pytest.raises(ClientError) as stale:
        raw.put_object(Bucket=bucket, Key="k", Body=b"3", IfMatch=first)
    assert stale.value.response["Error"]["Code"] == "PreconditionFailed"
    assert raw.get_object(Bucket=bucket, Key="k")["Body"].read() == b"2"
    assert raw.head_object(Bucket=bucket, Key="k")["ETag"] == second


# -- layout ---------------------------------------------------------------------------


def test_layout_keys_stay_under_the_prefix(s3: S3Server, bucket: str, store: S3Store) -> None:
    oid = store.objects.put(Kind.BLOB, b"payload")
    for name in ["../x", "a/../../b", "..", "new\nline", "\u00e9"]:
        assert store.refs.set_if_equals(f"threads/{name}", None, oid, "create")
    keys = [o["Key"] for o in s3.raw().list_objects_v2(Bucket=bucket)["Contents"]]
    assert all(k.startswith(f"{PREFIX}/") for k in keys)
    assert f"{PREFIX}/FORMAT" in keys
    assert object_key(oid) in keys
    assert f"{PREFIX}/refs/threads/.2E.2E.2Fx" in keys
    assert f"{PREFIX}/refs/threads/new!0Aline" in keys
    allowed = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789/-_.!(")
    for key in keys:
        assert set(key) <= allowed, key
        assert "/../" not in key and not key.endswith("/..") and "/./" not in key
    assert (
        s3.raw().get_object(Bucket=bucket, Key=object_key(oid))["Body"].read()
        == (ObjectCodec().encode(Kind.BLOB, b"payload")[1])
    )


@given(st.text(max_size=40), st.text(max_size=40))
def test_key_encoding_preserves_order_and_prefixes(a: str, b: str) -> None:
    ea, eb = encode_ordered(a), encode_ordered(b)
    assert decode_ordered(ea) == a
    assert (a < b) == (ea < eb) and (a == b) == (ea == eb)
    assert b.startswith(a) == eb.startswith(ea)
    assert "/" not in ea


@pytest.mark.parametrize("bad", ["!0", "!2D", "9", "Z41", "zG1", "%41", "\u00e9", "z80z"])
def test_key_decoding_refuses_foreign_text(bad: str) -> None:
    with pytest.raises(ValueError):
        decode_ordered(bad)


# -- names longer than a key ------------------------------------------------------------


def test_longest_ids_and_names_round_trip(store: S3Store) -> None:
    refs = store.refs
    thread_id = "\u00e9" * 512  # 1,024 UTF-8 bytes: a hashed key
    longest = "threads/" + "y" * (2048 - len("threads/"))  # the 2,048-byte name limit
    short = ["threads/a", "threads/z", "threads/\u00e9"]
    names = [f"threads/{thread_id}", longest, f"threads/{'x' * 1024}", *short]
    for i, name in enumerate(names):
        assert refs.set_if_equals(name, None, f"v{i}", "create")
        assert not refs.set_if_equals(name, None, "again")
    for i, name in enumerate(names):
        assert refs.read_ref(name) == f"v{i}"
    everything = sorted(names)
    assert refs.list_refs("threads/") == everything
    assert refs.list_refs("threads/", limit=3) == everything[:3]
    assert refs.list_refs("threads/", start_after=everything[2]) == everything[3:]
    assert refs.list_refs("threads/\u00e9") == sorted(["threads/\u00e9", f"threads/{thread_id}"])
    assert refs.reflog_names("threads/") == everything
    assert refs.set_if_equals(longest, "v1", None, "delete")
    assert longest not in refs.list_refs("threads/")
    assert [(e.old, e.new) for e in refs.reflog(longest)] == [(None, "v1"), ("v1", None)]
    assert refs.reflog_names("threads/y") == [longest]
    assert refs.set_if_equals(longest, None, "back", "recreate")
    assert refs.read_ref(longest) == "back"
    with pytest.raises(InvalidInputError):
        refs.set_if_equals(longest + "y", None, "v")


@pytest.mark.slow
def test_listing_pages_through_runs_of_tombstones(store: S3Store) -> None:
    refs = store.refs
    names = [f"threads/n{i:02d}" for i in range(40)]
    for name in names:
        assert refs.set_if_equals(name, None, "v")
    for name in names[5:30]:
        assert refs.set_if_equals(name, "v", None)
    assert refs.set_if_equals("checkpoints/r", None, "v")
    live = names[:5] + names[30:]
    walked: list[str] = []
    cursor = None
    while page := refs.list_refs("threads/", start_after=cursor, limit=3):
        assert len(page) <= 3
        walked += page
        cursor = page[-1]
    assert walked == live
    assert refs.list_refs("") == ["checkpoints/r", *live]
    assert refs.list_refs("thr") == live
    assert refs.reflog_names("") == ["checkpoints/r", *names]
    assert refs.reflog_names("check") == ["checkpoints/r"]


def test_store_at_the_bucket_root(s3: S3Server, bucket: str) -> None:
    root = S3Store.from_url(f"s3://{bucket}", **s3.options)
    oid = root.objects.put(Kind.BLOB, b"at the root")
    assert root.refs.set_if_equals("threads/t", None, oid)
    keys = {o["Key"] for o in s3.raw().list_objects_v2(Bucket=bucket)["Contents"]}
    assert {"FORMAT", f"objects/{oid[:2]}/{oid[2:]}", "refs/threads/t"} <= keys
    assert (
        S3Store.from_url(f"s3://{bucket}/", create=False, **s3.options).refs.read_ref("threads/t")
        == oid
    )


def test_deleted_ref_is_a_tombstone_that_reads_as_absent(
    s3: S3Server, bucket: str, store: S3Store
) -> None:
    refs = store.refs
    assert refs.set_if_equals("threads/t", None, "a", "create")
    assert refs.set_if_equals("threads/t", "a", None, "delete")
    key = f"{PREFIX}/refs/threads/t"
    assert s3.raw().head_object(Bucket=bucket, Key=key)["ContentLength"] == 54
    assert refs.read_ref("threads/t") is None
    assert refs.list_refs("threads/") == []
    assert not refs.set_if_equals("threads/t", "a", "b")
    assert refs.set_if_equals("threads/t", None, "c", "recreate")
    assert refs.read_ref("threads/t") == "c"
    log = refs.reflog("threads/t")
    assert [e.reason for e in log] == ["create", "delete", "recreate"]
    assert log[0].time < log[1].time < log[2].time


def test_reflog_entries_too_long_for_a_key_are_read_from_their_body(
    s3: S3Server, bucket: str, store: S3Store
) -> None:
    refs = store.refs
    long_reason = "why " * 400
    lease = '{"owner": "w1", "turn": "u1"}'
    assert refs.set_if_equals("threads/r", None, "a", "short")
    assert refs.set_if_equals("threads/r", "a", lease, long_reason)
    listed = s3.raw().list_objects_v2(Bucket=bucket, Prefix=f"{PREFIX}/logs/threads/r/")
    tails = [o["Key"].rsplit("/", 1)[1] for o in listed["Contents"]]
    assert [len(t) > 49 for t in tails] == [True, False]  # inline, then body only
    log = refs.reflog("threads/r")
    assert [(e.old, e.new, e.reason) for e in log] == [
        (None, "a", "short"),
        ("a", lease, long_reason),
    ]
    assert refs.rewrite_reflog("threads/r", lambda e: e.reason == "short") == 1
    assert [e.reason for e in refs.reflog("threads/r")] == ["short"]


# -- compare-and-swap under contention ------------------------------------------------


@pytest.mark.slow
def test_independent_handles_racing_on_one_ref_lose_no_increment(s3: S3Server, bucket: str) -> None:
    """Each handle has its own client, cache and locks: only S3's conditions protect."""
    handles = [s3.open(bucket) for _ in range(3)]
    assert handles[0].refs.set_if_equals("threads/counter", None, "0", "init")
    lost = [0]

    def work(store: S3Store) -> None:
        for _ in range(20):
            while True:
                current = store.refs.read_ref("threads/counter")
                assert current is not None
                if store.refs.set_if_equals("threads/counter", current, str(int(current) + 1)):
                    break
                lost[0] += 1

    workers = [threading.Thread(target=work, args=(h,)) for h in handles]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert handles[1].refs.read_ref("threads/counter") == "60"
    log = handles[2].refs.reflog("threads/counter")
    assert len(log) == 61  # no entry of a lost race survives
    assert [int(e.new or 0) for e in log] == list(range(61))
    assert lost[0] > 0  # the handles really raced
    for handle in handles:
        handle.close()


def test_stale_handle_loses_with_412_and_leaves_no_reflog_entry(s3: S3Server, bucket: str) -> None:
    first, second = s3.open(bucket), s3.open(bucket)
    assert first.refs.set_if_equals("threads/t", None, "0", "create")
    assert second.refs.read_ref("threads/t") == "0"  # second caches value and ETag
    assert first.refs.set_if_equals("threads/t", "0", "1", "first wins")
    s3.faults(
        {"method": "PUT", "path": "/refs/threads/t", "count": 0},
        {"method": "DELETE", "path": "/logs/threads/t/", "count": 0},
    )
    assert not second.refs.set_if_equals("threads/t", "0", "2", "stale")
    put, delete = s3.rule_states()
    assert put["hits"] == 1 and delete["hits"] == 1  # a refused If-Match, then cleanup
    assert first.refs.read_ref("threads/t") == "1"
    assert [e.reason for e in first.refs.reflog("threads/t")] == ["create", "first wins"]


def test_conditional_request_conflict_is_retried_not_lost(s3: S3Server, store: S3Store) -> None:
    assert store.refs.set_if_equals("threads/t", None, "a", "create")
    s3.faults(
        {
            "method": "PUT",
            "path": "/refs/threads/t",
            "status": "409 Conflict",
            "code": "ConditionalRequestConflict",
            "count": 1,
        }
    )
    assert store.refs.set_if_equals("threads/t", "a", "b", "move")
    assert s3.rule_states()[0]["hits"] == 2
    assert store.refs.read_ref("threads/t") == "b"
    assert [e.reason for e in store.refs.reflog("threads/t")] == ["create", "move"]


def test_lost_answer_of_a_committed_write_still_counts(s3: S3Server, store: S3Store) -> None:
    """The server commits, then answers 500; botocore's retry gets 412 from our own write."""
    assert store.refs.set_if_equals("threads/t", None, "a", "create")
    s3.faults({"method": "PUT", "path": "/refs/threads/t", "after_commit": True, "count": 1})
    assert store.refs.set_if_equals("threads/t", "a", "b", "move")
    assert s3.rule_states()[0]["hits"] == 2  # committed, answered 500, retried, refused
    assert store.refs.read_ref("threads/t") == "b"
    assert [e.reason for e in store.refs.reflog("threads/t")] == ["create", "move"]
    s3.faults({"method": "PUT", "path": "/objects/", "after_commit": True, "count": 1})
    oid = store.objects.put(Kind.BLOB, b"committed twice")
    assert store.objects.get(oid) == (Kind.BLOB, b"committed twice")


# -- damaged data -----------------------------------------------------------------------


@pytest.mark.parametrize("garbage", [b"", b"not a zstd frame", b"\x28\xb5\x2f\xfd" + b"\0" * 9])
def test_garbage_in_the_bucket_is_corrupt_object(
    s3: S3Server, bucket: str, store: S3Store, garbage: bytes
) -> None:
    oid = store.objects.put(Kind.BLOB, b"precious")
    s3.raw().put_object(Bucket=bucket, Key=object_key(oid), Body=garbage)
    with pytest.raises(CorruptObject) as info:
        store.objects.get(oid)
    assert info.value.oid == oid


def test_server_answering_garbage_is_corrupt_object(s3: S3Server, store: S3Store) -> None:
    oid = store.objects.put(Kind.BLOB, b"fine in the bucket")
    s3.faults({"method": "GET", "path": oid[2:], "body": b"<html>oops</html>".hex()})
    with pytest.raises(CorruptObject) as info:
        store.objects.get(oid)
    assert info.value.oid == oid
    s3.faults()
    assert store.objects.get(oid) == (Kind.BLOB, b"fine in the bucket")


def test_huge_stored_body_is_refused_before_reading(s3: S3Server, bucket: str) -> None:
    store = s3.open(bucket, max_object_size=1000)
    oid = store.objects.put(Kind.BLOB, b"small")
    s3.raw().put_object(Bucket=bucket, Key=object_key(oid), Body=os.urandom(200_000))
    with pytest.raises(CorruptObject, match="more than any object"):
        store.objects.get(oid)


# -- retries and errors -------------------------------------------------------------


def test_5xx_and_throttling_are_retried(s3: S3Server, store: S3Store) -> None:
    oid = store.objects.put(Kind.BLOB, b"retry me")
    s3.faults(
        {
            "method": "GET",
            "path": oid[2:],
            "status": "500 Internal",
            "code": "InternalError",
            "count": 2,
        }
    )
    assert store.objects.get(oid) == (Kind.BLOB, b"retry me")
    assert s3.rule_states()[0]["hits"] == 3
    s3.faults(
        {
            "method": "PUT",
            "path": "/refs/threads/t",
            "status": "503 Slow Down",
            "code": "SlowDown",
            "count": 1,
        }
    )
    assert store.refs.set_if_equals("threads/t", None, oid)
    assert s3.rule_states()[0]["hits"] == 2
    assert store.refs.read_ref("threads/t") == oid


def test_persistent_failure_is_one_line_storage_error(s3: S3Server, bucket: str) -> None:
    store = s3.open(bucket, config=Config(retries={"mode": "standard", "total_max_attempts": 3}))
    oid = store.objects.put(Kind.BLOB, b"unreachable")
    s3.faults(
        {
            "method": "GET",
            "path": oid[2:],
            "status": "503 Unavailable",
            "code": "ServiceUnavailable",
        }
    )
    with pytest.raises(StorageError) as info:
        store.objects.get(oid)
    assert "\n" not in str(info.value) and "ServiceUnavailable" in str(info.value)
    assert s3.rule_states()[0]["hits"] == 3  # max_attempts, no more
    s3.faults({"method": "GET", "path": oid[2:], "status": "403 Forbidden", "code": "AccessDenied"})
    with pytest.raises(StorageError, match="access denied"):
        store.objects.get(oid)
    assert s3.rule_states()[0]["hits"] == 1  # client errors are not retried


def test_missing_bucket_and_dead_endpoint_are_storage_errors(s3: S3Server) -> None:
    with pytest.raises(StorageError, match="does not exist"):
        s3.open("cas-no-such-bucket")
    quick = Config(retries={"mode": "standard", "total_max_attempts": 2}, connect_timeout=1)
    dead = {**s3.options, "endpoint_url": "http://127.0.0.1:9", "config": quick}
    with pytest.raises(StorageError) as info:
        S3Store.from_url("s3://cas-any/p", **dead)
    assert "\n" not in str(info.value)


def test_missing_object_is_object_not_found(store: S3Store) -> None:
    with pytest.raises(ObjectNotFound):
        store.objects.get("0" * 64)
    assert store.objects.missing(["0" * 64, "1" * 64]) == {"0" * 64, "1" * 64}


# -- opening, format and configuration ------------------------------------------------


def test_newer_format_is_refused(s3: S3Server, bucket: str) -> None:
    s3.open(bucket).close()
    s3.raw().put_object(Bucket=bucket, Key=f"{PREFIX}/FORMAT", Body=b"cas-journal 99\n")
    with pytest.raises(StoreFormatError, match="format 99"):
        s3.open(bucket)
    for garbage in [*GARBAGE_FORMAT_RECORDS, " cas-journal 1"]:
        s3.raw().put_object(Bucket=bucket, Key=f"{PREFIX}/FORMAT", Body=garbage.encode())
        with pytest.raises(StoreFormatError):
            s3.open(bucket)


def test_absent_and_foreign_prefixes_are_refused(s3: S3Server, bucket: str) -> None:
    with pytest.raises(StoreFormatError, match="no cas-journal store"):
        s3.open(bucket, create=False)
    s3.raw().put_object(Bucket=bucket, Key=f"{PREFIX}/notes.txt", Body=b"mine")
    with pytest.raises(StoreFormatError, match="not empty"):
        s3.open(bucket)
    other = S3Store.from_url(f"s3://{bucket}/elsewhere", **s3.options)
    assert other.refs.list_refs("") == []


def test_server_ignoring_conditions_is_refused(s3: S3Server, bucket: str) -> None:
    s3.open(bucket).close()
    s3.faults({"method": "PUT", "path": "/FORMAT", "strip_conditions": True})
    with pytest.raises(StorageError, match="ignored an If-None-Match"):
        s3.open(bucket)
    s3.open(bucket, check_conditional_writes=False).close()


def test_open_store_and_environment_configuration(
    s3: S3Server, bucket: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3.endpoint)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    with open_store(f"s3://{bucket}/{PREFIX}") as store:
        assert isinstance(store, S3Store)
        assert store.url == f"s3://{bucket}/{PREFIX}"
        assert store.refs.set_if_equals("threads/env", None, "v")
    again = S3Store.from_url(f"s3://{bucket}/{PREFIX}/", create=False)
    assert again.refs.read_ref("threads/env") == "v"


def test_missing_boto3_gives_install_hint(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "boto3", None)
    with pytest.raises(StorageError, match=r"pip install 'cas-journal\[s3\]'"):
        S3Store.from_url("s3://cas-any/p")


@pytest.mark.parametrize("url", ["s3://", "s3:///prefix", "http://bucket/x", "s3://b/p?x=1"])
def test_malformed_urls_are_refused(url: str) -> None:
    with pytest.raises(InvalidInputError):
        S3Store.from_url(url)


def test_importing_cas_journal_does_not_import_boto3() -> None:
    code = (
        "import sys, cas_journal, cas_journal.backends, cas_journal.backends.s3\n"
        "assert 'boto3' not in sys.modules and 'botocore' not in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


# -- objects ----------------------------------------------------------------------------


@pytest.mark.slow
def test_gc_grace_period_covers_written_and_freshened_objects(store: S3Store) -> None:
    old = store.objects.put(Kind.BLOB, b"old garbage")
    reused = store.objects.put(Kind.BLOB, b"reused later")
    written = store.objects.object_time(reused)
    assert written is not None and abs(written - time.time()) < 120
    assert store.objects.object_time("0" * 64) is None
    while time.time() < written + 2.2:
        time.sleep(0.1)
    assert store.objects.put(Kind.BLOB, b"reused later") == reused  # a writer reuses it
    freshened = store.objects.object_time(reused)
    assert freshened is not None and freshened >= written + 2
    grace = timedelta(hours=1)
    report = gc(store, grace=grace, now=datetime.fromtimestamp(written + 1, UTC) + grace)
    assert report.kept_young_objects == 1
    assert report.condemned_objects == 1 and report.deleted_objects == 0
    # condemned: still readable, but no writer may rely on it any more
    assert store.objects.get(old) == (Kind.BLOB, b"old garbage")
    assert store.objects.missing([old, reused]) == {old}
    assert store.objects.freshen([old, reused]) == {old}
    assert store.objects.get(reused) == (Kind.BLOB, b"reused later")  # freshened: kept
    # one grace period after its condemnation, the next gc deletes it for good
    later = datetime.fromtimestamp(time.time() + 5, UTC) + grace
    report = gc(store, grace=grace, now=later)
    assert report.deleted_objects == 1
    assert not store.objects.has(old)
    with pytest.raises(ObjectNotFound):
        store.objects.get(old)
    assert store.objects.get(reused) == (Kind.BLOB, b"reused later")  # condemned now


def test_put_many_uploads_referenced_objects_first() -> None:
    blobs = [(Kind.BLOB, b"message %d" % i) for i in range(4)]
    chain: list[tuple[Kind, bytes]] = []
    parent = None
    for kind, body in blobs:
        node = MessageNode(message=object_id(kind, body), parent=parent)
        chain.append((Kind.MESSAGE, node.body()))
        parent = object_id(Kind.MESSAGE, node.body())
    items = [*blobs, *chain, blobs[0]]
    oids = [object_id(kind, body) for kind, body in items]
    waves = _waves([new_object(kind, body) for kind, body in items])
    assert [len(w) for w in waves] == [4, 1, 1, 1, 1]  # blobs together, then the chain
    position = {obj.oid: i for i, wave in enumerate(waves) for obj in wave}
    for oid, (kind, body) in zip(oids, items, strict=True):
        if kind is Kind.MESSAGE:
            node = MessageNode.parse(body)
            assert position[node.message] < position[oid]
            assert node.parent is None or position[node.parent] < position[oid]


def test_put_many_in_parallel_stores_everything_once(store: S3Store) -> None:
    items = [(Kind.BLOB, b"parallel %d" % i) for i in range(50)] * 2
    start = time.monotonic()
    oids = store.objects.put_many(items)
    elapsed = time.monotonic() - start
    assert oids == [object_id(kind, body) for kind, body in items]
    assert sorted(store.objects.iter_oids()) == sorted(set(oids))
    assert store.objects.missing(oids) == set()
    frames = {oid: ObjectCodec().encode(k, b)[1] for oid, (k, b) in zip(oids, items, strict=True)}
    usage = store.objects.usage()  # 50 objects at once: one pack, no loose keys
    assert (usage["loose_objects"], usage["packs"]) == (0, 1)
    read = {oid: (kind, body) for oid, kind, body in store.objects.get_many(oids[:50])}
    assert read == dict(zip(oids[:50], items[:50], strict=True))
    few = store.objects.put_many(items[:3])  # a small write: loose keys
    assert store.objects.usage()["loose_objects"] == 0  # already packed: nothing new
    small = [(Kind.BLOB, b"loose %d" % i) for i in range(3)]
    loose = store.objects.put_many(small)
    usage = store.objects.usage()
    assert (usage["loose_objects"], usage["packs"]) == (3, 1)
    loose_frames = [ObjectCodec().encode(kind, body)[1] for kind, body in small]
    assert usage["loose_bytes"] == sum(len(frame) for frame in loose_frames)
    assert store.objects.stored_size(loose[0]) == len(loose_frames[0])
    assert few == oids[:3] and len(frames) == 50
    assert elapsed < 30
