"""Several processes on one local store: appends, batches, leases and checkpoints race."""

from __future__ import annotations

import itertools
import threading

import pytest
from support.processes import run_children

import cas_journal as cj


def test_processes_appending_to_one_thread_lose_nothing(tmp_path):
    path = tmp_path / "s"
    with cj.Journal.open(path, durable=False) as j:
        j.create_thread(cj.ThreadMeta(id="shared"))
    script = """
        import sys
        import cas_journal as cj
        j = cj.Journal.open(sys.argv[1], durable=False)
        me = sys.argv[2]
        for i in range(60):
            j.append(cj.Entry(thread_id="shared", type=cj.EntryType.USER_MESSAGE,
                              message=cj.Message(role="user", content=f"{me}:{i}")))
        with j.batch("shared") as b:
            pass
    """
    results = run_children(script, 4, str(path))
    assert all(r.returncode == 0 for r in results), [r.stderr.decode()[-2000:] for r in results]
    with cj.Journal.open(path) as j:
        path_entries = j.path("shared")
        texts = [e.message.content for e in path_entries if e.message]
        assert sorted(texts) == sorted(f"{w}:{i}" for w in range(4) for i in range(60))
        # one linear chain: every append re-parented onto the newest leaf
        assert all(e.parent_id == p.id for p, e in itertools.pairwise(path_entries))
        assert len(j.entries("shared")) == 240
        for worker in range(4):  # each worker's own order is preserved
            mine = [t for t in texts if t.startswith(f"{worker}:")]
            assert mine == [f"{worker}:{i}" for i in range(60)]


@pytest.mark.slow
def test_processes_racing_for_one_lease(tmp_path):
    path = tmp_path / "s"
    with cj.Journal.open(path, durable=False) as j:
        j.create_thread(cj.ThreadMeta(id="t"))
    script = """
        import sys
        import cas_journal as cj
        j = cj.Journal.open(sys.argv[1], durable=False)
        wins = 0
        for turn in range(30):
            try:
                j.acquire_turn_lease(cj.TurnLease(thread_id="t", turn_id=f"turn{turn}", owner_id=sys.argv[2]))
                wins += 1
            except cj.ActiveTurn:
                pass
        print(wins)
    """
    results = run_children(script, 4, str(path))
    assert all(r.returncode == 0 for r in results), [r.stderr.decode()[-2000:] for r in results]
    assert sum(int(r.stdout) for r in results) == 1  # nobody released: exactly one claim won
    with cj.Journal.open(path) as j:
        lease = j.active_turn_lease("t")
        assert lease is not None and lease.turn_id == "turn0"


def test_batches_racing_either_commit_whole_or_conflict(tmp_path):
    path = tmp_path / "s"
    with cj.Journal.open(path, durable=False) as j:
        j.create_thread(cj.ThreadMeta(id="t"))
    script = """
        import sys
        import cas_journal as cj
        j = cj.Journal.open(sys.argv[1], durable=False)
        me = sys.argv[2]
        committed = 0
        for attempt in range(15):
            try:
                with j.batch("t") as b:
                    for i in range(20):
                        b.append(cj.Entry(type=cj.EntryType.USER_MESSAGE,
                                          message=cj.Message(role="user", content=f"{me}:{attempt}:{i}")))
                committed += 1
            except cj.ConflictError:
                pass
        print(committed)
    """
    results = run_children(script, 3, str(path))
    assert all(r.returncode == 0 for r in results), [r.stderr.decode()[-2000:] for r in results]
    committed = sum(int(r.stdout) for r in results)
    with cj.Journal.open(path) as j:
        texts = [e.message.content for e in j.path("t") if e.message]
    assert committed >= 1 and len(texts) == committed * 20
    for start in range(0, len(texts), 20):  # whole batches, never interleaved
        block = texts[start : start + 20]
        prefix = block[0].rsplit(":", 1)[0]
        assert block == [f"{prefix}:{i}" for i in range(20)]


def test_threads_saving_checkpoints_keep_every_iteration():
    j = cj.Journal.memory()

    def work(worker: int) -> None:
        for i in range(25):
            j.checkpoints.save(
                cj.Checkpoint(
                    run_id="r",
                    iteration=worker * 100 + i,
                    messages=[{"role": "user", "content": str(i)}],
                )
            )

    workers = [threading.Thread(target=work, args=(w,)) for w in range(4)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    iterations = sorted(c.iteration for c in j.checkpoints.history("r"))
    assert iterations == sorted(w * 100 + i for w in range(4) for i in range(25))
