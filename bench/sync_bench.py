"""Sync figures: a 20,000-entry store into an empty local store and an empty bucket, then
one new entry synced again (how many objects and S3 requests it costs).

    python -m bench.sync_bench [--entries 20000] [--data-dir DIR]

The bucket is served by moto's standalone S3 server on loopback (started here), reached
through the same S3Store code a user points at AWS or MinIO. Requests are counted with
botocore's event hooks on the store's own client.
"""

from __future__ import annotations

import argparse
import logging
import platform
import random
import shutil
import socket
import tempfile
import time
from collections import Counter
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


def count_requests(store: S3Store) -> Counter[str]:
    """A live count of the requests the store's client sends, by operation."""
    counts: Counter[str] = Counter()

    def hook(**kwargs: Any) -> None:
        counts[kwargs["event_name"].rsplit(".", 1)[-1]] += 1

    store.objects.bucket.client.meta.events.register("before-send.s3.*", hook)
    return counts


def timed_sync(src: cj.Journal, dst: cj.Journal) -> tuple[Any, float]:
    start = time.perf_counter()
    report = sync(src.store, dst.store)
    return report, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--entries", type=int, default=20_000)
    parser.add_argument("--data-dir", type=Path, default=Path("bench/out/sync-data"))
    args = parser.parse_args()
    args.data_dir.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="sync-", dir=args.data_dir))
    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # one line per request otherwise
    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    options = {
        "endpoint_url": f"http://127.0.0.1:{port}",
        "region_name": "us-east-1",
        "aws_access_key_id": "testing",
        "aws_secret_access_key": "testing",
    }
    try:
        boto3.client("s3", **options).create_bucket(Bucket="bench")
        print(f"machine: {platform.machine()}, 2 cores, Python {platform.python_version()}")
        started = time.perf_counter()
        src = build_source(work / "src", args.entries)
        print(f"built source: {args.entries} entries in {time.perf_counter() - started:.1f}s")
        rows = []
        local = cj.Journal.open(work / "dst", durable=True)
        bucket = S3Store.from_url("s3://bench/journal", **options)
        remote = cj.Journal(bucket)
        requests = count_requests(bucket)
        for name, dst in (("empty local store (durable)", local), ("empty bucket (moto)", remote)):
            before = sum(requests.values())
            report, seconds = timed_sync(src, dst)
            sent = sum(requests.values()) - before if dst is remote else None
            rows.append((f"initial sync into {name}", report, seconds, sent))
        text = tg.prose(random.Random(1), 300)
        src.append(
            cj.Entry(
                thread_id="main",
                type=cj.EntryType.USER_MESSAGE,
                message=cj.Message(role="user", content=text),
            )
        )
        for name, dst in (("local store", local), ("bucket", remote)):
            before = sum(requests.values())
            snapshot = Counter(requests)
            report, seconds = timed_sync(src, dst)
            sent = sum(requests.values()) - before if dst is remote else None
            detail = (
                ""
                if sent is None
                else " ("
                + ", ".join(f"{op} {n}" for op, n in sorted((requests - snapshot).items()))
                + ")"
            )
            rows.append((f"one new entry into the {name}{detail}", report, seconds, sent))
        print()
        print("| sync | objects | bytes | refs | seconds | objects/s | S3 requests |")
        print("|---|---|---|---|---|---|---|")
        for label, report, seconds, sent in rows:
            refs = report.refs_created + report.refs_fast_forwarded + report.refs_merged
            rate = report.objects_copied / seconds if seconds else 0
            print(
                f"| {label} | {report.objects_copied} | {report.bytes_copied} | {refs} | "
                f"{seconds:.2f} | {rate:.0f} | {'' if sent is None else sent} |"
            )
        print()
        print(
            "fsck local:",
            fsck(local.store).ok,
            " fsck bucket (quick):",
            fsck(remote.store, quick=True).ok,
        )
    finally:
        server.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
