"""Format versions: the local store's 2 -> 3 and the S3 store's 1 -> 2 upgrades.

``fixtures/format2/store`` was written by commit 1cca0ed, the last code of format 2
(``fixtures/format2/make_store.py``); ``expected.json`` is what that code read back from
it. Today's code opens it writable (upgraded to format 3, killed at every step of the
upgrade too) and read-only (read as it is), and must find everything. Code of an older
format meeting a newer store is played by this code with its version set back: the
refusal is the same comparison and message in both.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner
from support.fixture_stores import check_journal_holds, events_of_an_open, open_killed_at
from support.s3_server import PREFIX, S3Server

import cas_journal as cj
from cas_journal.backends import LocalStore
from cas_journal.backends.local import store as local_store
from cas_journal.backends.local.store import FORMAT_VERSION, read_format_version
from cas_journal.backends.s3 import S3Store
from cas_journal.backends.s3 import store as s3_store
from cas_journal.cli import cli
from cas_journal.maintenance import fsck, gc, pack

FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "format2"
EXPECTED = json.loads((FIXTURE / "expected.json").read_text())


def _copy(target: Path) -> Path:
    shutil.copytree(FIXTURE / "store", target)
    return target


def _check_everything(store: LocalStore) -> None:
    """``store`` holds exactly what expected.json lists, and fsck passes."""
    check_journal_holds(cj.Journal(store), EXPECTED)
    assert sorted(oid for oid, _, _ in store.objects.iter_rows()) == EXPECTED["unpacked_objects"]
    assert sorted(p.name for p in (store.root / "packs").glob("*.idx")) == EXPECTED["packs"]


def test_the_fixture_is_what_format_2_wrote(tmp_path: Path) -> None:
    assert (FIXTURE / "store" / "FORMAT").read_bytes() == b"cas-journal 2\n"
    assert EXPECTED["unpacked_objects"] and len(EXPECTED["packs"]) == 2
    assert EXPECTED["runs"] and EXPECTED["lease"] and EXPECTED["deleted_threads"]
    size = sum(p.stat().st_size for p in FIXTURE.rglob("*") if p.is_file())
    assert size < 300 * 1024


def test_a_format_2_store_opened_writable_is_upgraded_and_whole(tmp_path: Path) -> None:
    root = _copy(tmp_path / "s")
    files = {p.name for p in root.iterdir()}
    with LocalStore(root, durable=False) as store:
        assert store.format_version == FORMAT_VERSION == 3
        assert (root / "FORMAT").read_bytes() == b"cas-journal 3\n"
        _check_everything(store)
    # the upgrade only replaced FORMAT: no file was added but the database's own
    assert {p.name for p in root.iterdir()} - files <= {"store.db-wal", "store.db-shm", "reserve"}


def test_an_upgraded_store_works_on(tmp_path: Path) -> None:
    root = _copy(tmp_path / "s")
    with cj.Journal.open(root, durable=False) as j:
        cj.append_message(j, "main", "turn-5", cj.Message(role="user", content="after the upgrade"))
        j.fork("main-fork", new_thread_id="fork-after")
        assert j.restore_thread("doomed").id == "doomed"
        j.checkpoints.save(cj.Checkpoint(run_id="run-2", iteration=2, messages=[{"a": 1}]))
        pack(j.store)
        gc(j.store, prune_now=True)
        assert fsck(j.store).ok
        assert j.path("main")[-1].message.content == "after the upgrade"  # type: ignore[union-attr]
        assert [e.message.content for e in j.path("doomed")] == ["soon deleted"]  # type: ignore[union-attr]
        assert j.checkpoints.load("run-2").messages == [{"a": 1}]


def test_a_read_only_open_reads_a_format_2_store_as_it_is(tmp_path: Path) -> None:
    root = _copy(tmp_path / "s")
    with LocalStore(root, read_only=True) as store:
        assert store.format_version == 2
        _check_everything(store)
        with pytest.raises(cj.StorageError, match="read-only"):
            store.refs.set_if_equals("threads/x", None, "0" * 64)
    assert read_format_version(root) == 2
    assert (root / "FORMAT").read_bytes() == b"cas-journal 2\n"


def test_a_read_only_open_still_refuses_format_1(tmp_path: Path) -> None:
    root = tmp_path / "s"
    shutil.copytree(FIXTURE.parent / "format1" / "store", root)
    with pytest.raises(cj.StoreUpgradeRequired, match="upgraded once"):
        LocalStore(root, read_only=True)
    assert read_format_version(root) == 1
    with LocalStore(root, durable=False) as store:  # one path: straight to the current format
        assert store.format_version == FORMAT_VERSION
    assert read_format_version(root) == FORMAT_VERSION


READING_COMMANDS = (
    ["threads"],
    ["threads", "--json"],
    ["show", "main"],
    ["log", "main"],
    ["tree", "main"],
    ["diff", "main", "main-fork"],
    ["reflog", "main"],
    ["stats"],
    ["checkpoints", "list"],
    ["checkpoints", "show", "run-1"],
    ["checkpoints", "history", "run-1"],
    ["checkpoints", "reflog", "run-1"],
    ["cat", EXPECTED["unpacked_objects"][0]],
    ["export", "main"],
)


def _file_bytes(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and not p.name.startswith("store.db-")
    }


@pytest.mark.parametrize("args", READING_COMMANDS, ids=lambda args: " ".join(args[:2]))
def test_reading_commands_leave_a_format_2_store_as_it_was(tmp_path: Path, args: list[str]) -> None:
    root = _copy(tmp_path / "s")
    before = _file_bytes(root)
    result = CliRunner().invoke(cli, ["--store", str(root), *args])
    assert result.exit_code == 0, result.output
    assert result.output.strip()
    assert _file_bytes(root) == before  # not upgraded, nothing written: older code reads it
    assert read_format_version(root) == 2


def test_a_reading_command_upgrades_a_format_1_store_it_cannot_read_as_it_is(
    tmp_path: Path,
) -> None:
    root = tmp_path / "s"
    shutil.copytree(FIXTURE.parent / "format1" / "store", root)
    result = CliRunner().invoke(cli, ["--store", str(root), "threads", "--json"])
    assert result.exit_code == 0, result.output
    listed = {thread["id"] for thread in json.loads(result.output)["threads"]}
    assert listed
    assert read_format_version(root) == FORMAT_VERSION
    with LocalStore(root, read_only=True) as store:
        assert {t.id for t in cj.Journal(store).list_threads()} == listed


def test_read_only_is_an_option_of_local_stores_only(tmp_path: Path) -> None:
    root = _copy(tmp_path / "s")
    with cj.Journal.open(root, read_only=True) as journal:
        assert journal.store.format_version == 2  # type: ignore[attr-defined]
        assert journal.path("main")
        with pytest.raises(cj.StorageError, match="read-only"):
            journal.fork("main", new_thread_id="refused")
    assert read_format_version(root) == 2
    with pytest.raises(cj.InvalidInputError, match="read_only"):
        cj.Journal.open("s3://bucket/prefix", read_only=True)
    with pytest.raises(cj.InvalidInputError, match="read_only"):
        cj.Journal.open("memory://", read_only=True)


def test_concurrent_upgraders_all_open_the_store(tmp_path: Path) -> None:
    root = _copy(tmp_path / "s")
    children = []
    for _ in range(4):
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child
            code = 1
            try:
                with LocalStore(root, durable=True) as store:
                    code = 0 if store.format_version == FORMAT_VERSION else 2
            finally:
                os._exit(code)
        children.append(pid)
    for pid in children:
        _, status = os.waitpid(pid, 0)
        assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
    assert read_format_version(root) == FORMAT_VERSION
    with LocalStore(root, read_only=True) as store:
        _check_everything(store)


# -- code of an older format meets a newer store --------------------------------------------


def test_format_2_code_refuses_a_format_3_store_with_a_clear_message(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "s"
    LocalStore(root, durable=False).close()
    monkeypatch.setattr(local_store, "FORMAT_VERSION", 2)
    message = (
        f"store {root} has format 3; this cas-journal reads up to 2. "
        "Upgrade cas-journal to open it."
    )
    for read_only in (False, True):
        with pytest.raises(cj.StoreFormatError) as info:
            LocalStore(root, read_only=read_only)
        assert str(info.value) == message
    result = CliRunner().invoke(cli, ["--store", str(root), "threads"])
    assert result.exit_code == 1
    assert result.stderr.strip() == f"Error: {message}"
    assert read_format_version(root) == 3


def test_sync_into_an_older_store_upgrades_it(tmp_path: Path) -> None:
    destination = _copy(tmp_path / "dst")
    with cj.Journal.open(tmp_path / "src", durable=False) as source:
        source.create_thread(cj.ThreadMeta(id="new-thread"))
        cj.append_message(source, "new-thread", "t", cj.Message(role="user", content="synced"))
    result = CliRunner().invoke(cli, ["sync", str(tmp_path / "src"), str(destination)])
    assert result.exit_code == 0, result.output
    assert read_format_version(destination) == FORMAT_VERSION
    with LocalStore(destination, read_only=True) as target:
        j = cj.Journal(target)
        assert [e.message.content for e in j.path("new-thread")] == ["synced"]  # type: ignore[union-attr]
        assert set(EXPECTED["threads"]) < {m.id for m in j.list_threads(include_archived=True)}
        assert fsck(target).ok


def test_format_2_code_syncing_into_a_format_3_store_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    old, new = tmp_path / "old", tmp_path / "new"
    with cj.Journal.open(new, durable=False) as j:
        j.create_thread(cj.ThreadMeta(id="t"))
    monkeypatch.setattr(local_store, "FORMAT_VERSION", 2)
    local_store.create_store(old)
    assert read_format_version(old) == 2
    for args in (["sync", str(old), str(new)], ["sync", str(new), str(old)]):
        result = CliRunner().invoke(cli, args)
        assert result.exit_code == 1, result.output
        lines = result.stderr.strip().splitlines()
        assert lines == [
            f"Error: store {new} has format 3; this cas-journal reads up to 2. "
            "Upgrade cas-journal to open it."
        ]
    assert read_format_version(old) == 2 and read_format_version(new) == 3


# -- a kill during the upgrade ---------------------------------------------------------------


@pytest.mark.slow
def test_an_upgrade_killed_at_any_point_leaves_a_store_that_opens(tmp_path: Path) -> None:
    events = events_of_an_open(_copy(tmp_path / "count"), tmp_path / "count.txt")
    versions = {2: 0, 3: 0}
    for kill_at in range(1, events + 1):
        root = _copy(tmp_path / f"k{kill_at}")
        assert open_killed_at(root, kill_at), kill_at
        version = read_format_version(root)
        assert version in (2, 3), (kill_at, version)
        versions[version] += 1
        with LocalStore(root, read_only=True) as store:  # as it was left
            assert store.format_version == version
            assert fsck(store).ok
        with LocalStore(root, durable=False) as store:  # then upgraded
            assert store.format_version == 3
            _check_everything(store)
        shutil.rmtree(root)
    assert versions[2] > 0 and versions[3] > 0  # kills landed before and after the switch


# -- S3: format 1 -> 2 ---------------------------------------------------------------------


@pytest.fixture
def s3(s3_server: S3Server) -> Iterator[S3Server]:
    s3_server.faults()
    yield s3_server
    s3_server.faults()


def _format_1_bucket(s3: S3Server) -> str:
    """A bucket store as format-1 code left it (the same keys; FORMAT says 1)."""
    bucket = s3.new_bucket()
    with s3.open(bucket) as store:
        j = cj.Journal(store)
        j.create_thread(cj.ThreadMeta(id="t"))
        cj.append_message(j, "t", "turn", cj.Message(role="user", content="before"))
    s3.raw().put_object(Bucket=bucket, Key=f"{PREFIX}/FORMAT", Body=b"cas-journal 1\n")
    return bucket


def _bucket_format(s3: S3Server, bucket: str) -> bytes:
    body: bytes = s3.raw().get_object(Bucket=bucket, Key=f"{PREFIX}/FORMAT")["Body"].read()
    return body


def _contents(store: S3Store) -> list[str]:
    j = cj.Journal(store)
    return [e.message.content for e in j.path("t")]  # type: ignore[union-attr,misc]


@pytest.mark.usefixtures("hermetic_aws")
def test_an_s3_format_1_store_is_upgraded_on_open(s3: S3Server) -> None:
    bucket = _format_1_bucket(s3)
    with s3.open(bucket, create=False) as store:
        assert store.format_version == s3_store.FORMAT_VERSION == 2
        assert _contents(store) == ["before"]
        assert fsck(store).ok
    assert _bucket_format(s3, bucket) == b"cas-journal 2\n"


@pytest.mark.usefixtures("hermetic_aws")
def test_read_only_credentials_read_an_s3_format_1_store_as_it_is(s3: S3Server) -> None:
    bucket = _format_1_bucket(s3)
    s3.faults(
        {"method": "PUT", "path": "/FORMAT", "status": "403 Forbidden", "code": "AccessDenied"}
    )
    with s3.open(bucket, create=False) as store:
        assert store.format_version == 1
        assert _contents(store) == ["before"]
    assert s3.rule_states()[0]["injected"] >= 1  # the upgrade was tried, and refused
    s3.faults()
    assert _bucket_format(s3, bucket) == b"cas-journal 1\n"


@pytest.mark.usefixtures("hermetic_aws")
def test_losing_the_s3_upgrade_race_is_fine(s3: S3Server) -> None:
    bucket = _format_1_bucket(s3)
    # the upgrade's PUT is delivered twice: the first lands, the second (whose answer the
    # client sees) finds the ETag changed, as when another upgrader got there first
    s3.faults({"method": "PUT", "path": "/FORMAT", "duplicate": "now", "count": 1})
    with s3.open(bucket, create=False) as store:
        assert store.format_version == 2
        assert _contents(store) == ["before"]
    assert s3.rule_states()[0]["injected"] == 1
    assert _bucket_format(s3, bucket) == b"cas-journal 2\n"


@pytest.mark.usefixtures("hermetic_aws")
def test_format_1_code_refuses_an_s3_format_2_store_with_a_clear_message(
    s3: S3Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    bucket = s3.new_bucket()
    s3.open(bucket).close()
    monkeypatch.setattr(s3_store, "FORMAT_VERSION", 1)
    with pytest.raises(cj.StoreFormatError) as info:
        s3.open(bucket)
    assert str(info.value) == (
        f"store s3://{bucket}/{PREFIX} has format 2; this cas-journal reads up to 1. "
        "Upgrade cas-journal to open it."
    )
    assert _bucket_format(s3, bucket) == b"cas-journal 2\n"
