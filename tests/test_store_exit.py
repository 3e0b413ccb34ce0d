"""A local store left open at interpreter exit is closed then: its WAL is copied into
``store.db`` and deleted when the process was the store's last user, kept (and loses
nothing) when another process still has the store open."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import cas_journal as cj
from cas_journal import maintenance

ROOT = Path(__file__).resolve().parent.parent

WRITER = """
    import os, sys
    import cas_journal as cj
    root, durable = sys.argv[1], sys.argv[2] == "durable"
    j = cj.Journal.open(root, durable=durable)
    j.create_thread(cj.ThreadMeta(id="t"))
    for i in range(200):
        j.append(cj.Entry(thread_id="t", type=cj.EntryType.USER_MESSAGE,
                          message=cj.Message(role="user", content=f"message {i}")))
    print(os.path.getsize(os.path.join(root, "store.db-wal")))
    # no close: the process ends with the store open
"""


def run_writer(root: Path, durable: bool) -> int:
    """Run WRITER in a new process; the size of its WAL just before it exits."""
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(WRITER), str(root), "durable" if durable else "nd"],
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return int(done.stdout.split()[-1])


def contents(root: Path) -> list[str]:
    """The thread's messages, read by a new Journal (closed afterwards)."""
    with cj.Journal.open(str(root), create=False) as j:
        return [str(entry.message.content) for entry in j.path("t") if entry.message]


@pytest.mark.slow
def test_a_process_that_exits_without_closing_leaves_no_wal(tmp_path: Path) -> None:
    for durable in (False, True):
        root = tmp_path / f"store-{durable}"
        wal_before_exit = run_writer(root, durable)
        assert wal_before_exit > 0  # the writes went through the WAL
        assert not (root / "store.db-wal").exists()
        assert not (root / "store.db-shm").exists()
        assert contents(root) == [f"message {i}" for i in range(200)]
        with cj.Journal.open(str(root), create=False) as j:
            assert maintenance.fsck(j.store).ok


def test_a_store_another_process_has_open_keeps_its_wal_and_every_write(tmp_path: Path) -> None:
    root = tmp_path / "store"
    cj.Journal.open(str(root)).close()
    with cj.Journal.open(str(root), create=False) as holder:
        assert holder.list_threads() == []  # this process now has the store open
        run_writer(root, durable=False)
        # the writer was not the last user: its exit copied what it could, deleted nothing
        assert (root / "store.db-wal").exists()
        assert len(holder.path("t")) == 200
    assert contents(root) == [f"message {i}" for i in range(200)]
