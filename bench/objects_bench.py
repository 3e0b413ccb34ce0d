"""Object-layer benchmark (issue 2): LocalStore put/get beside this machine's raw limits.

For 1 KB and 64 KB bodies of realistic text, durable and not, it measures
``LocalStore.objects.put(Kind.BLOB, body)`` and ``.get(oid)``, and in the same run the raw
limits for the same bytes: BLAKE3 + zstd (level 3, the store's) in memory, write + rename
of the compressed frame into a fan-out directory with and without fsync (file, then
directory), reading the file back, and appending to an open file. The raw write+rename
and read that the ratios use run interleaved with the store's puts and gets, op by op.
The raw file tests also run on /dev/shm (tmpfs) to show how much of the cost is this
VM's disk metadata.
Every figure is a per-operation median with its 10th-90th percentile spread.
"""

from __future__ import annotations

import os
import random
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import blake3
import zstandard

from . import textgen as tg
from .measure import stopwatch, summary

SIZES = {"1 KB": 1024, "64 KB": 64 * 1024}
COUNTS = {"small": {"1 KB": 300, "64 KB": 120}, "full": {"1 KB": 3000, "64 KB": 600}}
DURABLE_SHARE = {"small": 0.5, "full": 0.25}
"""Durable runs use fewer operations (each costs fsyncs)."""


def make_bodies(size: int, count: int, seed: int) -> list[bytes]:
    """``count`` distinct text bodies of exactly ``size`` bytes (prose and code mixed)."""
    rng = random.Random(seed)
    out = []
    for i in range(count):
        text = tg.code_file(rng, size + 64) if i % 2 else tg.prose(rng, size + 64)
        body = (f"#{i}\n" + text).encode()[:size]
        out.append(body.ljust(size, b" "))
    return out


def _per_op(fn: Callable[[bytes], Any], items: list[bytes]) -> dict[str, float]:
    samples: list[float] = []
    for item in items:
        with stopwatch(samples):
            fn(item)
    return summary(samples)


def _canonical(body: bytes) -> bytes:
    return b"blob %d\0" % len(body) + body


def raw_hash_compress(bodies: list[bytes]) -> dict[str, float]:
    """BLAKE3 of the canonical form plus one zstd frame, in memory (what put computes)."""
    comp = zstandard.ZstdCompressor(level=3, write_content_size=True)

    def op(body: bytes) -> None:
        data = _canonical(body)
        blake3.blake3(data).hexdigest()
        comp.compress(data)

    return _per_op(op, bodies)


def raw_decompress_verify(frames: list[bytes]) -> dict[str, float]:
    """zstd decompress plus BLAKE3 verify, in memory (what get computes)."""
    dec = zstandard.ZstdDecompressor()

    def op(frame: bytes) -> None:
        blake3.blake3(dec.decompress(frame)).hexdigest()

    return _per_op(op, frames)


def _fanout(root: Path) -> None:
    shutil.rmtree(root, ignore_errors=True)
    for i in range(256):
        (root / f"{i:02x}").mkdir(parents=True, exist_ok=True)


def _write_rename(root: Path, name: str, frame: bytes, fsync: bool, fsync_dir: bool) -> None:
    """Create a temp file, write, (fsync), rename into a fan-out dir, (fsync the dir)."""
    directory = root / name[:2]
    tmp = directory / f".tmp-{name[2:18]}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o444)
    os.write(fd, frame)
    if fsync:
        os.fsync(fd)
    os.close(fd)
    os.replace(tmp, directory / name[2:])
    if fsync_dir:
        dfd = os.open(directory, os.O_RDONLY)
        os.fsync(dfd)
        os.close(dfd)


def _read(root: Path, name: str) -> None:
    with open(root / name[:2] / name[2:], "rb") as f:
        f.read()


def raw_write_rename(
    root: Path, frames: list[bytes], fsync: bool, fsync_dir: bool
) -> dict[str, float]:
    """write(+fsync)+rename(+dir fsync) of every frame on its own (the /dev/shm rows)."""
    _fanout(root)
    samples: list[float] = []
    for frame in frames:
        name = blake3.blake3(frame).hexdigest()
        with stopwatch(samples):
            _write_rename(root, name, frame, fsync, fsync_dir)
    return summary(samples)


def raw_append(root: Path, frames: list[bytes]) -> dict[str, float]:
    """Append each frame to one already-open file (no fsync)."""
    root.mkdir(parents=True, exist_ok=True)
    samples: list[float] = []
    with open(root / "append.log", "ab", buffering=0) as f:
        for frame in frames:
            with stopwatch(samples):
                f.write(frame)
    return summary(samples)


Summary = dict[str, float]


def store_put_get(
    root: Path, bodies: list[bytes], frames: list[bytes], durable: bool
) -> tuple[Summary, Summary, Summary, Summary]:
    """Put every body into a fresh LocalStore, then get them back in random order.

    Each put is followed by the raw write+rename of the same frame (with file and
    directory fsyncs when durable) and each get by a raw read of that file, so ours and
    the raw limit are measured op by op under the same disk conditions: this VM's disk
    swings several-fold between runs. Returns put, get, raw put, raw read summaries.
    """
    from cas_journal.backends import LocalStore
    from cas_journal.objects import Kind

    shutil.rmtree(root, ignore_errors=True)
    raw_root = root.with_name(root.name + "-raw")
    _fanout(raw_root)
    names = [blake3.blake3(frame).hexdigest() for frame in frames]
    store = LocalStore(root, durable=durable)
    put_samples: list[float] = []
    raw_put_samples: list[float] = []
    get_samples: list[float] = []
    raw_read_samples: list[float] = []
    try:
        oids: list[str] = []
        for body, frame, name in zip(bodies, frames, names, strict=True):
            with stopwatch(put_samples):
                oids.append(store.objects.put(Kind.BLOB, body))
            with stopwatch(raw_put_samples):
                _write_rename(raw_root, name, frame, durable, durable)
        order = list(range(len(oids)))
        random.Random(9).shuffle(order)
        for at in order:
            with stopwatch(get_samples):
                store.objects.get(oids[at])
            with stopwatch(raw_read_samples):
                _read(raw_root, names[at])
    finally:
        store.close()
    return (
        summary(put_samples),
        summary(get_samples),
        summary(raw_put_samples),
        summary(raw_read_samples),
    )


def run(scale: str, work: Path, shm: Path | None) -> dict[str, Any]:
    """The whole object-layer benchmark; returns a JSON-able dict of summaries."""
    comp = zstandard.ZstdCompressor(level=3, write_content_size=True)
    out: dict[str, Any] = {"sizes": {}}
    for label, size in SIZES.items():
        count = COUNTS[scale][label]
        bodies = make_bodies(size, count, seed=size)
        frames = [comp.compress(_canonical(b)) for b in bodies]
        few = bodies[: max(20, int(count * DURABLE_SHARE[scale]))]
        few_frames = frames[: len(few)]
        row: dict[str, Any] = {
            "count": count,
            "durable_count": len(few),
            "frame_ratio": sum(map(len, bodies)) / sum(map(len, frames)),
            "hash_zstd": raw_hash_compress(bodies),
            "unzstd_verify": raw_decompress_verify(frames),
        }
        row["put_nd"], row["get_nd"], row["write_rename"], row["read_file"] = store_put_get(
            work / "store-nd", bodies, frames, durable=False
        )
        row["put_d"], row["get_d"], row["write_fsync_rename_dirsync"], _ = store_put_get(
            work / "store-d", few, few_frames, durable=True
        )
        row["write_fsync_rename"] = raw_write_rename(work / "raw", few_frames, True, False)
        row["append_open_file"] = raw_append(work / "append", frames)
        if shm is not None:
            row["shm_write_rename"] = raw_write_rename(shm / "raw", frames, False, False)
            row["shm_write_fsync_rename_dirsync"] = raw_write_rename(
                shm / "raw", few_frames, True, True
            )
            shutil.rmtree(shm, ignore_errors=True)
        out["sizes"][label] = row
        shutil.rmtree(work, ignore_errors=True)
    return out
