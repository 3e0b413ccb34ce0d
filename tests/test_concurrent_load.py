"""Concurrent load: four writer processes and a pack/gc loop on one store at once.

Writers append (single entries and batches) to two shared threads and one private
thread each, acknowledging every committed entry in a log; a fifth process packs and
collects garbage with a shortened grace period in a loop. At the end every acknowledged
entry is in its thread, no process raised, and fsck is clean. Throughput is printed.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from support import harness

import cas_journal as cj
from cas_journal.backends import LocalStore
from cas_journal.maintenance import fsck, gc


@pytest.mark.slow
def test_writers_and_maintenance_lose_nothing(tmp_path: Path) -> None:
    result = harness.concurrent_load(
        tmp_path / "load", seconds=12, seed=7, grace=0.5, prune_rate=0.0
    )
    print("\n" + result.summary())
    assert result.problems == []
    assert result.maintenance_cycles >= 2  # pack and gc really ran during the load
    assert result.appends > 100 and result.batch_entries > 100
    assert result.reads > 0


@pytest.mark.slow
def test_the_load_check_sees_a_lost_entry(tmp_path: Path) -> None:
    """The end-of-run check can fail: an acknowledged entry that is not there is reported."""
    result = harness.concurrent_load(
        tmp_path / "load", seconds=1, seed=1, workers=1, prune_rate=0.0
    )
    assert result.problems == []
    acks = harness.AckLog(tmp_path / "load" / "acks-0")
    acks.write({"thread": "shared0", "ids": ["0" * 64], "texts": ["never written"]})
    acks.close()
    again = harness.LoadResult(workers=1)
    harness.check_load(tmp_path / "load", again)
    assert any("lost 1 acknowledged" in p for p in again.problems), again.problems


def test_prune_now_while_a_writer_commits_loses_nothing(tmp_path: Path) -> None:
    path = tmp_path / "s"
    with cj.Journal.open(path, durable=False) as j:
        j.create_thread(cj.ThreadMeta(id="t"))
        first = j.append(
            cj.Entry(
                thread_id="t",
                type=cj.EntryType.USER_MESSAGE,
                message=cj.Message(role="user", content="kept"),
            )
        )
        other = LocalStore(path, durable=False)  # another process's maintenance
        committer = j.store.committer
        real_submit = committer.submit
        ran: list[bool] = []
        pruner = threading.Thread(target=lambda: gc(other, prune_now=True))

        def submit_after_a_gc(change: object) -> bool:
            if not ran:
                ran.append(True)  # the writer's commit is on its way; a pruning gc starts now
                pruner.start()
                time.sleep(0.5)  # ample time to prune what the commit links, if it could
            return real_submit(change)  # type: ignore[arg-type]

        committer.submit = submit_after_a_gc  # type: ignore[method-assign]
        second = j.append(
            cj.Entry(
                thread_id="t",
                type=cj.EntryType.USER_MESSAGE,
                message=cj.Message(role="user", content="acknowledged"),
            )
        )
        committer.submit = real_submit  # type: ignore[method-assign]
        pruner.join(timeout=60)
        assert ran and not pruner.is_alive()
    with cj.Journal.open(path, durable=False) as j:
        assert fsck(j.store).ok
        assert [e.id for e in j.path("t")] == [first.id, second.id]


def test_gc_grace_counts_packed_objects_written_within_it_as_young(tmp_path: Path) -> None:
    """Regression (fixed in maintenance/collector.py): pack indexes record write times in
    whole seconds, truncated, and gc compared them with the exact cutoff, so a batch pack
    written 0.3 s ago looked up to a second older; with a grace period under a second gc
    deleted a batch a writer had just stored (found by the load test: 40-entry batches
    vanished from their threads)."""
    import math
    import time
    from datetime import UTC, datetime, timedelta

    from cas_journal.objects import Kind

    with cj.Journal.open(tmp_path / "s", durable=False) as j:
        while not 0.5 <= math.modf(time.time())[0] <= 0.6:
            time.sleep(0.01)
        written_at = time.time()
        oids = j.store.objects.put_many([(Kind.BLOB, b"just written %d" % i) for i in range(100)])
        assert j.store.objects.packs()  # a batch this size is written as a pack
        gc(j.store, grace=timedelta(seconds=0.5), now=datetime.fromtimestamp(written_at + 0.2, UTC))
        assert all(j.store.objects.has(oid) for oid in oids)
