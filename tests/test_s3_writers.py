"""Several writer processes on one bucket, with maintenance running meanwhile.

Four writer processes append, alternately, to a thread of their own and to one thread
they all share, while a fifth process runs gc (and pack, on a backend that keeps packs)
over and over. They reach the bucket through the fault proxy (tests/support/s3_fault_proxy.py),
which fails, resets, delays and duplicates a few percent of their requests, some after
the write happened: the retries must hide all of it, even when a write whose answer was
lost is overtaken by another process before its retry. Each writer logs every append it was told succeeded (entry id and text)
to its own file. Afterwards a fresh reader checks that nothing acknowledged was lost
(every logged entry is readable on its thread, in the writer's order), that the shared
thread holds exactly the appends made to it (none lost, none twice), and that fsck is
clean.

Run as a script, this file is one of those processes (``writer`` or ``maintenance``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from support.s3_fault_proxy import FaultProxy, rule
from support.s3_server import PREFIX, S3Server

import cas_journal as cj
from cas_journal.backends.s3 import S3Store
from cas_journal.errors import AppendCommittedError, JournalError
from cas_journal.maintenance import fsck, gc, pack

WRITERS = 4
APPENDS = 6
"""Appends per writer, half to its own thread, half to the shared one."""
SHARED = "shared"
PAUSE = 0.2
"""Seconds between two maintenance runs (the test server answers one request at a time:
back to back, gc would mostly measure its own reads)."""
WRITES = ("PUT", "POST", "DELETE")
FAULTS = (
    rule("error", rate=0.03, status=500, code="InternalError"),
    rule("reset", rate=0.02),
    rule("error_after", *WRITES, rate=0.03, status=500, code="InternalError"),
    rule("reset_after", *WRITES, rate=0.02),
    rule("duplicate", *WRITES, rate=0.03),
    rule("delay", rate=0.1, delay=0.005),
)


def _open_journal(settings: dict[str, Any]) -> cj.Journal:
    url = settings["url"]
    return cj.Journal(S3Store.from_url(url, create=False, **settings["options"]))


def writer(settings: dict[str, Any], number: int, log_path: Path) -> None:
    """Append to ``writer-<n>`` and to the shared thread; log what was acknowledged."""
    journal = _open_journal(settings)
    own = f"writer-{number}"
    print("ready", flush=True)
    sys.stdin.readline()  # everyone starts together
    with log_path.open("a", encoding="utf-8") as log:
        for i in range(APPENDS):
            thread = own if i % 2 == 0 else SHARED
            text = f"writer {number} append {i}"
            entry = cj.Entry(
                thread_id=thread,
                type=cj.EntryType.USER_MESSAGE,
                message=cj.Message(role="user", content=text),
            )
            record: dict[str, Any] = {"thread": thread, "text": text}
            try:
                record["id"] = journal.append(entry).id
                record["outcome"] = "acknowledged"
            except AppendCommittedError:
                record["outcome"] = "committed"
            except JournalError as exc:
                record["outcome"] = f"failed: {exc}"
            log.write(json.dumps(record) + "\n")
            log.flush()
    journal.close()


def maintenance(settings: dict[str, Any], stop: Path, log_path: Path) -> None:
    """gc (and pack where the backend keeps packs) in a loop until ``stop`` exists."""
    journal = _open_journal(settings)
    store = journal.store
    print("ready", flush=True)
    sys.stdin.readline()
    runs: dict[str, float] = {"gc": 0, "pack": 0}
    started = time.monotonic()
    while not stop.exists():
        if store.capabilities.stored_copies:
            pack(store)
            runs["pack"] += 1
        gc(store)  # default grace period: what a writer just stored is young and kept
        runs["gc"] += 1
        time.sleep(PAUSE)
    runs["seconds"] = round(time.monotonic() - started, 2)
    log_path.write_text(json.dumps(runs), encoding="utf-8")
    journal.close()


# -- the test (the processes run this file as a script) ------------------------------


def _environment(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env["AWS_CONFIG_FILE"] = str(tmp_path / "no-aws-config")
    env["AWS_SHARED_CREDENTIALS_FILE"] = str(tmp_path / "no-aws-credentials")
    env["AWS_EC2_METADATA_DISABLED"] = "true"
    return env


def _start(role: str, settings: dict[str, Any], env: dict[str, str], *args: str) -> Any:
    command = [sys.executable, __file__, role, json.dumps(settings), *args]
    return subprocess.Popen(
        command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, text=True
    )


def _ready(process: Any) -> None:
    assert process.stdout is not None
    line = process.stdout.readline()
    assert line.strip() == "ready", f"a process did not start (exit {process.wait()})"


@pytest.mark.slow
def test_writer_processes_and_maintenance_on_one_bucket(
    s3_server: S3Server, tmp_path: Path
) -> None:
    s3_server.faults()
    bucket = s3_server.new_bucket()
    url = f"s3://{bucket}/{PREFIX}"
    with cj.Journal(S3Store.from_url(url, **s3_server.options)) as setup:
        for n in range(WRITERS):
            setup.create_thread(cj.ThreadMeta(id=f"writer-{n}"))
        setup.create_thread(cj.ThreadMeta(id=SHARED))
    proxy = FaultProxy(s3_server.endpoint, seed=11).start()
    proxy.set_rules(*FAULTS)
    settings = {"url": url, "options": {**s3_server.options, "endpoint_url": proxy.endpoint}}
    env = _environment(tmp_path)
    stop = tmp_path / "stop"
    runs_log = tmp_path / "maintenance.json"
    logs = [tmp_path / f"writer-{n}.jsonl" for n in range(WRITERS)]
    processes = [_start("writer", settings, env, str(n), str(logs[n])) for n in range(WRITERS)]
    keeper = _start("maintenance", settings, env, str(stop), str(runs_log))
    try:
        for process in [keeper, *processes]:
            _ready(process)
        for process in [keeper, *processes]:
            assert process.stdin is not None
            process.stdin.write("go\n")
            process.stdin.flush()
        for process in processes:
            assert process.wait(timeout=240) == 0
        time.sleep(0.2)  # let maintenance overlap the last appends' aftermath, then stop
        stop.touch()
        assert keeper.wait(timeout=240) == 0
    finally:
        for process in [keeper, *processes]:
            if process.poll() is None:
                process.kill()
                process.wait()
        proxy.close()
    assert proxy.injected() > 0  # the faults happened
    runs = json.loads(runs_log.read_text(encoding="utf-8"))
    assert runs["gc"] >= 1

    records = [json.loads(line) for path in logs for line in path.read_text("utf-8").splitlines()]
    assert len(records) == WRITERS * APPENDS
    failed = [r for r in records if r["outcome"] not in ("acknowledged", "committed")]
    assert not failed  # a few percent of faults: the retries hide every one
    with cj.Journal(S3Store.from_url(url, create=False, **s3_server.options)) as reader:
        report = fsck(reader.store)
        assert report.ok, report.problems
        shared_path = reader.path(SHARED)
        shared_ids = {e.id for e in shared_path}
        for n in range(WRITERS):
            mine = [r for r in records if r["text"].startswith(f"writer {n} ")]
            path = reader.path(f"writer-{n}")
            own = [r for r in mine if r["thread"] != SHARED]
            assert [e.message.content for e in path if e.message] == [r["text"] for r in own]
            for record in mine:
                if "id" in record:  # acknowledged: that very entry is on its thread
                    ids = shared_ids if record["thread"] == SHARED else {e.id for e in path}
                    assert record["id"] in ids, record
            shared_mine = [
                e.message.content
                for e in shared_path
                if e.message and str(e.message.content).startswith(f"writer {n} ")
            ]
            # one writer's appends to the shared thread keep that writer's order
            assert shared_mine == [r["text"] for r in mine if r["thread"] == SHARED]
        shared = [e.message.content for e in shared_path if e.message]
        expected = sorted(r["text"] for r in records if r["thread"] == SHARED)
        assert len(shared) == WRITERS * APPENDS // 2
        assert sorted(shared) == expected  # exactly these, none lost, none twice
        assert len(reader.entries(SHARED)) == len(shared)  # no stray branch either


if __name__ == "__main__":
    role, settings_json = sys.argv[1], sys.argv[2]
    config = json.loads(settings_json)
    if role == "writer":
        writer(config, int(sys.argv[3]), Path(sys.argv[4]))
    else:
        maintenance(config, Path(sys.argv[3]), Path(sys.argv[4]))
