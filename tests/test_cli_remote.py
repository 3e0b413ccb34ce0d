"""sync, push, pull and clone from the command line."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from click.testing import CliRunner
from support.journal_helpers import at, user
from support.store_helpers import corrupt_row

import cas_journal as cj
from cas_journal.cli import cli


def run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, list(args))
    return result.exit_code, result.stdout, result.stderr


def make(path) -> cj.Journal:
    j = cj.Journal.open(path)
    j.create_thread(cj.ThreadMeta(id="t", created_at=at(0)))
    for i in range(5):
        user(j, "t", f"m{i}", now=at(i + 1))
    j.checkpoints.save(cj.Checkpoint(run_id="r", messages=[{"role": "user", "content": "x"}]))
    return j


def test_clone_push_pull_round_trip(tmp_path):
    make(tmp_path / "a").close()
    code, out, _ = run("clone", str(tmp_path / "a"), str(tmp_path / "b"))
    assert code == 0 and "2 created" in out
    code, out, err = run("clone", str(tmp_path / "a"), str(tmp_path / "b"))
    assert code == 1 and "already holds a store" in err
    with cj.Journal.open(tmp_path / "a") as a:
        user(a, "t", "new on a", now=at(50))
    code, out, _ = run("--store", str(tmp_path / "a"), "push", str(tmp_path / "b"), "--json")
    report = json.loads(out)
    assert code == 0 and report["refs_fast_forwarded"] == 1 and report["objects_copied"] == 3
    with cj.Journal.open(tmp_path / "b") as b:
        assert b.path("t")[-1].message.content == "new on a"
        user(b, "t", "new on b", now=at(60))
    code, out, _ = run("--store", str(tmp_path / "a"), "pull", str(tmp_path / "b"))
    assert code == 0 and "1 fast-forwarded" in out
    with cj.Journal.open(tmp_path / "a") as a:
        assert a.path("t")[-1].message.content == "new on b"


def test_diverged_refs_merge_or_are_reported(tmp_path):
    make(tmp_path / "a").close()
    assert run("clone", str(tmp_path / "a"), str(tmp_path / "b"))[0] == 0
    for name, when in (("a", 70), ("b", 80)):
        with cj.Journal.open(tmp_path / name) as j:
            user(j, "t", f"only on {name}", now=at(when))
    code, out, _ = run("sync", str(tmp_path / "a"), str(tmp_path / "b"), "--no-merge")
    assert code == 1 and "diverged (not merged): threads/t" in out
    code, out, _ = run("sync", str(tmp_path / "a"), str(tmp_path / "b"), "--ref", "threads/t")
    assert code == 0 and "1 merged" in out
    with cj.Journal.open(tmp_path / "b") as b:
        texts = {e.message.content for e in b.entries("t")}
        assert {"only on a", "only on b"} <= texts


def test_sync_errors_are_one_line(tmp_path):
    make(tmp_path / "a").close()
    code, _, err = run("sync", str(tmp_path / "a"), str(tmp_path / "missing"))
    assert code == 1 and err.strip().count("\n") == 0 and "no cas-journal store" in err
    code, _, err = run("sync", str(tmp_path / "a"), str(tmp_path / "a"), "--ref", "threads/none")
    assert code == 1 and "no ref" in err and "Traceback" not in err


def test_unrelated_threads_are_refused_unless_allowed(tmp_path):
    for name in ("a", "b"):
        with cj.Journal.open(tmp_path / name) as j:
            j.create_thread(cj.ThreadMeta(id="t", title=f"made in {name}", created_at=at(0)))
            user(j, "t", f"only on {name}", now=at(1))
    code, out, _ = run("sync", str(tmp_path / "a"), str(tmp_path / "b"))
    assert code == 1 and "unrelated (not merged): threads/t" in out
    code, out, _ = run(
        "sync", str(tmp_path / "a"), str(tmp_path / "b"), "--allow-unrelated", "--json"
    )
    assert code == 0 and json.loads(out)["refs_merged"] == 1
    with cj.Journal.open(tmp_path / "b") as b:
        assert {e.message.content for e in b.entries("t")} == {"only on a", "only on b"}


def test_repair_replaces_a_damaged_copy(tmp_path):
    make(tmp_path / "a").close()
    assert run("clone", str(tmp_path / "a"), str(tmp_path / "b"))[0] == 0
    with cj.Journal.open(tmp_path / "b") as b:
        victim = b.path("t")[2].raw_hash
    corrupt_row(tmp_path / "b", victim)
    assert run("--store", str(tmp_path / "b"), "fsck")[0] != 0
    code, out, _ = run("--store", str(tmp_path / "b"), "pull", str(tmp_path / "a"), "--repair")
    assert code == 0 and "1 damaged copies repaired" in out, out
    code, out, _ = run("--store", str(tmp_path / "b"), "fsck", "--json")
    assert code == 0 and json.loads(out)["ok"]


FORMAT_2 = Path(__file__).resolve().parent.parent / "fixtures" / "format2" / "store"


def _files(root: Path) -> dict[str, bytes]:
    """Every file of a store with its bytes, except SQLite's own -wal and -shm (a reader
    of a WAL database creates them)."""
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and not p.name.endswith(("-wal", "-shm"))
    }


def test_a_source_store_is_only_read(tmp_path):
    # a store written by older code (format 2) would be upgraded by a writable open: the
    # source of clone, push, sync and pull, and a plain fsck, leave it exactly as it is
    source = tmp_path / "old"
    shutil.copytree(FORMAT_2, source)
    before = _files(source)
    threads = {n for n in json.loads((FORMAT_2.parent / "expected.json").read_text())["threads"]}
    assert run("clone", str(source), str(tmp_path / "b"))[0] == 0
    assert run("--store", str(source), "push", str(tmp_path / "b"))[0] == 0
    assert run("sync", str(source), str(tmp_path / "b"))[0] == 0
    assert run("--store", str(tmp_path / "c"), "init")[0] == 0
    assert run("--store", str(tmp_path / "c"), "pull", str(source))[0] == 0
    code, out, _ = run("--store", str(source), "fsck")
    assert code == 0 and "fsck: ok" in out
    assert run("clone", str(tmp_path / "b"), str(source))[0] == 1  # exists: refused, as is
    assert _files(source) == before
    assert (source / "FORMAT").read_text() == "cas-journal 2\n"
    for copy in ("b", "c"):
        with cj.Journal.open(tmp_path / copy) as j:
            assert {m.id for m in j.list_threads(include_archived=True)} == threads
