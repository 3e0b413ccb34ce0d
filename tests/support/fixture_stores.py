"""Checking a store written by older code against what that code read back from it.

Each ``fixtures/format<N>/`` holds a store written by the last code of format N and an
``expected.json`` made by that code: threads (metadata, path, entries), deleted threads,
reflog lines, checkpoint runs (every iteration's messages), deleted runs, the turn lease
and every object id. ``check_journal_holds`` compares a journal opened on it with today's
code against that record. ``open_killed_at`` and ``events_of_an_open`` kill an open (which
upgrades an older store) at each step, as the crash harness does.
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import Any

import pytest

import cas_journal as cj
from cas_journal.backends import LocalStore
from cas_journal.maintenance import fsck
from support import harness


def check_journal_holds(j: cj.Journal, expected: dict[str, Any]) -> None:
    """``j`` holds exactly what ``expected`` lists, and fsck passes on its store."""
    listed = {meta.id for meta in j.list_threads(include_archived=True)}
    assert listed == set(expected["threads"])
    for thread_id, want in expected["threads"].items():
        meta = j.thread(thread_id)
        assert json.loads(meta.model_dump_json()) == want["meta"]
        assert [e.id for e in j.path(thread_id)] == want["path"]
        entries = {
            e.id: {"parent": e.parent_id, "content": e.message.content if e.message else ""}
            for e in j.entries(thread_id)
        }
        assert entries == want["entries"]
    for thread_id in expected["deleted_threads"]:
        with pytest.raises(cj.ThreadNotFound):
            j.thread(thread_id)
    refs = j.store.refs
    names = [n for prefix in ("threads/", "checkpoints/") for n in refs.reflog_names(prefix)]
    assert sorted(names) == sorted(expected["reflogs"])
    for name, lines in expected["reflogs"].items():
        found = [
            {"old": e.old, "new": e.new, "reason": e.reason, "time": e.time.isoformat()}
            for e in refs.reflog(name)
        ]
        assert found == lines, name
    assert {c.run_id for c in j.checkpoints.list()} == set(expected["runs"])
    for run_id, saves in expected["runs"].items():
        history = j.checkpoints.history(run_id)
        assert [c.iteration for c in history] == [s["iteration"] for s in saves]
        for saved in saves:
            loaded = j.checkpoints.load(run_id, saved["iteration"])
            assert loaded.messages == saved["messages"]
            assert loaded.system_prompt == saved["system_prompt"]
            assert loaded.input_tokens == saved["input_tokens"]
    for run_id in expected.get("deleted_runs", ()):  # (format 1's record has none)
        assert not j.checkpoints.has_checkpoint(run_id)
    lease = j.active_turn_lease("main")
    assert lease is not None and json.loads(lease.model_dump_json()) == expected["lease"]
    assert sorted(j.store.objects.iter_oids()) == expected["objects"]
    report = fsck(j.store)
    assert report.ok, report.problems


def open_killed_at(root: Path, kill_at: int) -> bool:
    """Open (and so upgrade) ``root`` in a child that SIGKILLs itself at event ``kill_at``
    (``tests/support/harness.py``); True if the kill happened before the open finished."""
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        trap = harness.SyscallTrap(kill_at, seed=kill_at)
        trap.install()
        with trap.operation():
            LocalStore(root, durable=True).close()
        os._exit(0)
    _, status = os.waitpid(pid, 0)
    return os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL


def events_of_an_open(root: Path, count_file: Path) -> int:
    """How many events (file-system calls, SQL statements) opening ``root`` takes, counted
    in a child (which upgrades ``root``) and passed back through ``count_file``."""
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        trap = harness.SyscallTrap(0)
        trap.install()
        with trap.operation():
            LocalStore(root, durable=True).close()
        count_file.write_text(str(trap.calls))
        os._exit(0)
    os.waitpid(pid, 0)
    return int(count_file.read_text())
