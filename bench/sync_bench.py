"""Sync figures over S3: a 20,000-entry store pushed into an empty bucket, one new entry
pushed again, the bucket cloned into an empty local store, and a cold read of 10,000
entries of a thread straight from the bucket, each with its S3 requests and bytes (the
peer: the same first sync into an empty local store, in the same run).

    python -m bench.sync_bench [--entries 20000] [--read-entries 10000] [--data-dir DIR]

The bucket is served by moto's standalone S3 server on loopback (started here), reached
through the same S3Store code a user points at AWS or MinIO. Requests and bytes are
counted by the store's own bucket handle (``S3Bucket.stats``: every HTTP request sent,
retries included). On AWS each request costs about 20-50 ms of latency: multiply.
"""

from __future__ import annotations

import argparse
import logging
import os
import platform
import random
import shutil
import socket
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import boto3
from moto.server import ThreadedMotoServer

import cas_journal as cj
from cas_journal.backends.s3 import S3Store
from cas_journal.maintenance import fsck, pack, sync

from . import textgen as tg
from .workloads import EPOCH, Conversation, FilePool


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def build_source(path: Path, entries: int) -> cj.Journal:
    """A store with ``entries`` entries: a main thread and forks, appended in batches."""
    j = cj.Journal.open(path, durable=False)
    conv = Conversation(11, FilePool(11), EPOCH, "sync")
    stream = conv.stream()
    j.create_thread(cj.ThreadMeta(id="main"))
    written = 0
    forks = 0
    while written < entries:
        thread = "main"
        if written and written % 2000 == 0:
            forks += 1
            thread = f"fork-{forks}"
            path_ids = [e.id for e in j.path("main")]
            j.fork("main", path_ids[len(path_ids) // 2], new_thread_id=thread)
        with j.batch(thread) as b:
            for _ in range(min(100, entries - written)):
                m = next(stream)
                msg = cj.Message(
                    role=m.role,
                    content=m.content,
                    tool_name=m.tool_name,
                    tool_call_id=m.tool_call_id,
                    tool_args=m.tool_args,
                )
                b.append(
                    cj.Entry(
                        type=cj.entry_type_for_message(msg),
                        turn_id=m.turn_id,
                        message=msg,
                        created_at=datetime.fromtimestamp(m.created_at, UTC),
                    )
                )
                written += 1
    pack(j.store)
    return j


def timed_sync(src: cj.Journal, dst: cj.Journal) -> tuple[Any, float]:
    start = time.perf_counter()
    report = sync(src.store, dst.store)
    return report, time.perf_counter() - start


def requests_since(store: S3Store, before: dict[str, int]) -> dict[str, int]:
    """Requests (by operation) and bytes the store's bucket handle sent since ``before``."""
    now = store.bucket.stats.snapshot()
    return {
        key: now.get(key, 0) - before.get(key, 0) for key in now if now[key] != before.get(key, 0)
    }


def request_total(counts: dict[str, int]) -> int:
    """Requests in a ``requests_since`` result (its byte counters left out)."""
    return sum(n for key, n in counts.items() if not key.startswith("bytes_"))


def describe(counts: dict[str, int]) -> str:
    """``"GetObject 3, PutObject 2"`` (byte counters left out)."""
    return ", ".join(f"{op} {n}" for op, n in sorted(counts.items()) if not op.startswith("bytes_"))


class Row:
    """One measured step."""

    def __init__(
        self,
        label: str,
        seconds: float,
        counts: dict[str, int] | None,
        objects: int,
        goal: str = "",
    ) -> None:
        self.label, self.seconds, self.counts, self.objects, self.goal = (
            label,
            seconds,
            counts,
            objects,
            goal,
        )

    def cells(self) -> list[str]:
        counts = self.counts or {}
        requests = request_total(counts) if self.counts is not None else ""
        sent = counts.get("bytes_sent", "") if self.counts is not None else ""
        received = counts.get("bytes_received", "") if self.counts is not None else ""
        return [
            self.label,
            str(self.objects),
            f"{self.seconds:.2f}",
            str(requests),
            str(sent),
            str(received),
            self.goal,
        ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--entries", type=int, default=20_000)
    parser.add_argument("--read-entries", type=int, default=10_000)
    parser.add_argument("--data-dir", type=Path, default=Path("bench/out/sync-data"))
    args = parser.parse_args()
    args.data_dir.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="sync-", dir=args.data_dir))
    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # one line per request otherwise
    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    options: dict[str, Any] = {
        "endpoint_url": f"http://127.0.0.1:{port}",
        "region_name": "us-east-1",
        "aws_access_key_id": "testing",
        "aws_secret_access_key": "testing",
    }
    url = "s3://bench/journal"
    try:
        boto3.client("s3", **options).create_bucket(Bucket="bench")
        load = os.getloadavg()[0]
        print(
            f"machine: {platform.machine()}, {os.cpu_count()} cores, Python "
            f"{platform.python_version()}, load average {load:.1f} at start"
        )
        started = time.perf_counter()
        src = build_source(work / "src", args.entries)
        objects = sum(1 for _ in src.store.objects.iter_oids())
        print(
            f"built source: {args.entries} entries, {objects} objects in "
            f"{time.perf_counter() - started:.1f}s"
        )
        rows: list[Row] = []

        # the peer: the same first sync into an empty local store
        local = cj.Journal.open(work / "local-copy", durable=True)
        report, seconds = timed_sync(src, local)
        rows.append(
            Row("first sync into an empty local store (peer)", seconds, None, report.objects_copied)
        )
        local.close()

        # first push into an empty bucket
        bucket = S3Store.from_url(url, **options)
        before = bucket.bucket.stats.snapshot()
        report, seconds = timed_sync(src, cj.Journal(bucket))
        push = requests_since(bucket, before)
        rows.append(
            Row(
                "first push into an empty bucket",
                seconds,
                push,
                report.objects_copied,
                f"<= {820 / 50:.1f} s (50x 820 s), <= 200 requests",
            )
        )
        print("first push:", describe(push), f"(bytes sent {push.get('bytes_sent', 0)})")

        # one new entry appended, then push (the same handle, as a user's session would)
        text = tg.prose(random.Random(1), 300)
        src.append(
            cj.Entry(
                thread_id="main",
                type=cj.EntryType.USER_MESSAGE,
                message=cj.Message(role="user", content=text),
            )
        )
        before = bucket.bucket.stats.snapshot()
        report, seconds = timed_sync(src, cj.Journal(bucket))
        one = requests_since(bucket, before)
        rows.append(
            Row("one new entry, then push", seconds, one, report.objects_copied, "<= 10 requests")
        )
        print("one new entry:", describe(one))
        bucket.close()

        # a push from a handle opened for it (a CLI call: open, then push)
        src.append(
            cj.Entry(
                thread_id="main",
                type=cj.EntryType.USER_MESSAGE,
                message=cj.Message(role="user", content=text + " again"),
            )
        )
        fresh = S3Store.from_url(url, create=False, **options)
        opened = fresh.bucket.stats.snapshot()
        report, seconds = timed_sync(src, cj.Journal(fresh))
        cli = requests_since(fresh, {})
        rows.append(
            Row(
                "one new entry, then push from a new handle (open included)",
                seconds,
                cli,
                report.objects_copied,
            )
        )
        print("push from a new handle:", describe(cli), f"(opening: {request_total(opened)})")
        fresh.close()

        # clone: the bucket into an empty local store
        remote = S3Store.from_url(url, create=False, **options)
        clone = cj.Journal.open(work / "clone", durable=True)
        before = remote.bucket.stats.snapshot()
        report, seconds = timed_sync(cj.Journal(remote), clone)
        cloned = requests_since(remote, before)
        rows.append(
            Row(
                "clone of the bucket into an empty local store",
                seconds,
                cloned,
                report.objects_copied,
                "<= 10 s",
            )
        )
        print("clone:", describe(cloned))
        remote.close()

        # cold read of the newest entries of the main thread, straight from the bucket
        cold = S3Store.from_url(url, create=False, **options)
        before = cold.bucket.stats.snapshot()
        start = time.perf_counter()
        read = list(cj.Journal(cold).iter_path("main", limit=args.read_entries))
        seconds = time.perf_counter() - start
        assert all(entry.message is not None for entry in read)
        counts = requests_since(cold, before)
        rows.append(
            Row(
                f"cold read of {len(read)} entries of a thread from the bucket",
                seconds,
                counts,
                len(read),
                "<= 50 requests",
            )
        )
        print("cold read:", describe(counts))
        ok = fsck(cold).ok
        cold.close()

        print()
        print("| step | objects | seconds | S3 requests | bytes sent | bytes received | goal |")
        print("|---|---|---|---|---|---|---|")
        for row in rows:
            print("| " + " | ".join(row.cells()) + " |")
        print()
        print(f"fsck of the bucket: {ok}; fsck of the clone: {fsck(clone.store).ok}")
        print(f"load average at the end: {os.getloadavg()[0]:.1f}")
        clone.close()
    finally:
        server.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
