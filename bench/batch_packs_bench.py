"""Many batch commits: what geometric pack merging buys (same run, merging on and off).

    python -m bench.batch_packs_bench [--batches 300] [--size 100] [--data-dir DIR]

Every batch commit of 64+ new objects publishes a pack, and a lookup that misses must
search every pack. This commits ``--batches`` batches of ``--size`` entries to one thread
twice, once with merging disabled (``MERGE_LIMIT = 0``, the behaviour before merging
existed) and once as shipped, and reports at checkpoints: packs on disk, the time spent
committing so far, the time of one more batch commit (which may include a merge), and
the time a new process takes to open the store and read the whole path.
"""

from __future__ import annotations

import argparse
import platform
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import cas_journal as cj
from cas_journal.packs import merging

from . import textgen as tg

Row = tuple[int, int, float, float, float]


COLD_READ = """
import sys, time
import cas_journal as cj
started = time.perf_counter()
with cj.Journal.open(sys.argv[1], durable=False) as j:
    length = len(j.path("t"))
print(length, time.perf_counter() - started)
"""


def cold_path(root: Path) -> tuple[int, float]:
    """Entries on the path and seconds to read it, in a new process opening the store."""
    done = subprocess.run(
        [sys.executable, "-c", COLD_READ, str(root)], capture_output=True, text=True, check=True
    )
    length, seconds = done.stdout.split()
    return int(length), float(seconds)


def run(root: Path, batches: int, size: int, merge: bool) -> list[Row]:
    """Rows of (batches committed, packs, seconds committing them all, one more batch's
    seconds, cold path seconds)."""
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

        committing = 0.0
        for done in range(1, batches + 1):
            committing += commit(f"batch {done}")
            if done in marks:
                one = commit(f"probe {done}")
                length, cold = cold_path(root)
                packs = len(list((root / "packs").glob("*.idx")))
                rows.append((done, packs, committing, one, cold))
                print(
                    f"  merge={'on ' if merge else 'off'} batches={done:5d} packs={packs:4d} "
                    f"all batches={committing:6.1f} s  one more={one * 1e3:7.1f} ms  "
                    f"cold path ({length} entries)={cold:6.2f} s",
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
        "| batches | packs off / on | all batches off / on (s) | ratio "
        "| one more batch off / on (ms) | cold path off / on (s) | ratio |"
    )
    print("|---|---|---|---|---|---|---|")
    for (done, p0, t0, b0, c0), (_, p1, t1, b1, c1) in zip(off, on, strict=True):
        print(
            f"| {done} | {p0} / {p1} | {t0:.1f} / {t1:.1f} | {t1 / t0:.2f} "
            f"| {b0 * 1e3:.1f} / {b1 * 1e3:.1f} | {c0:.2f} / {c1:.2f} | {c1 / c0:.2f} |"
        )


if __name__ == "__main__":
    main()
