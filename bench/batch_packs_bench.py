"""Many batch commits: what geometric pack merging buys (same run, merging on and off).

    python -m bench.batch_packs_bench [--batches 300] [--size 100] [--data-dir DIR]

Every batch commit of 64+ new objects publishes a pack, and a lookup that misses must
search every pack. This commits ``--batches`` batches of ``--size`` entries to one thread
twice, once with merging disabled (``MERGE_LIMIT = 0``, the behaviour before merging
existed) and once as shipped, and reports at checkpoints: packs on disk, the time of one
more batch commit, and the time to read the whole path from a freshly opened store.
"""

from __future__ import annotations

import argparse
import platform
import random
import shutil
import tempfile
import time
from pathlib import Path

import cas_journal as cj
from cas_journal.backends.local import merging

from . import textgen as tg


def run(root: Path, batches: int, size: int, merge: bool) -> list[tuple[int, int, float, float]]:
    """Rows of (batches committed, packs, one batch seconds, cold path seconds)."""
    merging.MERGE_LIMIT = 1 << 18 if merge else 0
    shutil.rmtree(root, ignore_errors=True)
    rng = random.Random(7)
    rows = []
    marks = {10, 30, 100, 300, 1000, batches}
    with cj.Journal.open(root, durable=False) as j:
        j.create_thread(cj.ThreadMeta(id="t"))

        def commit(tag: str) -> float:
            started = time.perf_counter()
            with j.batch("t") as b:
                for i in range(size):
                    text = f"{tag} {i}: {tg.sentence(rng)}"
                    b.append(
                        cj.Entry(
                            type=cj.EntryType.USER_MESSAGE,
                            message=cj.Message(role="user", content=text),
                        )
                    )
            return time.perf_counter() - started

        for done in range(1, batches + 1):
            commit(f"batch {done}")
            if done in marks:
                one = commit(f"probe {done}")
                started = time.perf_counter()
                with cj.Journal.open(root, durable=False) as fresh:
                    length = len(fresh.path("t"))
                cold = time.perf_counter() - started
                packs = len(list((root / "packs").glob("*.idx")))
                rows.append((done, packs, one, cold))
                print(
                    f"  merge={'on ' if merge else 'off'} batches={done:5d} packs={packs:4d} "
                    f"batch={one * 1e3:7.1f} ms  cold path ({length} entries)={cold:6.2f} s",
                    flush=True,
                )
    return rows


def main() -> None:
    """Run both configurations and print a markdown table with ratios."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=300)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--data-dir", type=Path, default=None)
    args = parser.parse_args()
    base = args.data_dir or Path(tempfile.mkdtemp(prefix="cj-batch-packs-"))
    print(f"machine: {platform.machine()}, 2 cores, Python {platform.python_version()}")
    off = run(base / "off", args.batches, args.size, merge=False)
    on = run(base / "on", args.batches, args.size, merge=True)
    shutil.rmtree(base, ignore_errors=True)
    print()
    print(
        "| batches | packs off / on | one batch off / on (ms) | ratio "
        "| cold path off / on (s) | ratio |"
    )
    print("|---|---|---|---|---|---|")
    for (done, p0, b0, c0), (_, p1, b1, c1) in zip(off, on, strict=True):
        print(
            f"| {done} | {p0} / {p1} | {b0 * 1e3:.1f} / {b1 * 1e3:.1f} | {b1 / b0:.2f} | "
            f"{c0:.2f} / {c1:.2f} | {c1 / c0:.2f} |"
        )


if __name__ == "__main__":
    main()
