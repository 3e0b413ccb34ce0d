"""The journal's own CPU cost per operation, on the memory store (no disk, no fsync).

    python -m bench.journal_cpu                 # the table
    python -m bench.journal_cpu --profile save  # plus cProfile's top functions for one op

What the issue goals for appends and checkpoint saves and loads leave to the journal:
whatever a store costs comes on top of these figures. CPU time (``time.process_time``)
is reported beside wall time, so a busy machine shows in the gap. Operations use the
benchmark workloads (bench/workloads.py): deep-thread entries, 100-entry batches, the
checkpoint run (saved every iteration; its newest checkpoint loaded again and again).
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, Protocol, cast

import cas_journal as cj

from . import workloads as wl
from .systems.cas import CasSystem


class _CallTotals(Protocol):
    """The call count pstats.Stats sets when it loads a profile (absent from its stub)."""

    total_calls: int


def _entries(count: int) -> list[cj.Entry]:
    msgs = list(wl.deep_entries(wl.SCALES["full"]))[:count]
    return [CasSystem._entry("t", msg) for msg in msgs]


def single_appends(count: int) -> Callable[[], int]:
    """``count`` appends, one commit each."""
    entries = _entries(count)

    def run() -> int:
        j = cj.Journal.memory()
        j.create_thread(cj.ThreadMeta(id="t"))
        for entry in entries:
            j.append(entry)
        return len(entries)

    return run


def batched_appends(count: int, size: int = 100) -> Callable[[], int]:
    """``count`` appends in batches of ``size``."""
    entries = [e.model_copy(update={"thread_id": ""}) for e in _entries(count)]

    def run() -> int:
        j = cj.Journal.memory()
        j.create_thread(cj.ThreadMeta(id="t"))
        for start in range(0, len(entries), size):
            with j.batch("t") as b:
                for entry in entries[start : start + size]:
                    b.append(entry)
        return len(entries)

    return run


def checkpoint_saves(iterations: int = 200) -> Callable[[], int]:
    """The checkpoint run: ``iterations`` saves of the growing message list."""
    steps = list(wl.checkpoint_steps(wl.SCALES["full"]))[:iterations]
    prompt = wl.checkpoint_system_prompt()

    def run() -> int:
        j = cj.Journal.memory()
        messages: list[dict[str, Any]] = []
        for step in steps:
            messages.extend(step.new_messages)
            j.checkpoints.save(
                cj.Checkpoint(
                    run_id="run-1",
                    iteration=step.iteration,
                    messages=list(messages),
                    system_prompt=prompt,
                    created_at=datetime.fromtimestamp(step.created_at, UTC),
                )
            )
        return len(steps)

    return run


def checkpoint_loads(iterations: int = 200, loads: int = 50) -> Callable[[], int]:
    """``loads`` loads of the newest checkpoint of the run (the first one parses it)."""
    journal = cj.Journal.memory()
    steps = list(wl.checkpoint_steps(wl.SCALES["full"]))[:iterations]
    messages: list[dict[str, Any]] = []
    for step in steps:
        messages.extend(step.new_messages)
    journal.checkpoints.save(cj.Checkpoint(run_id="run-1", messages=messages))
    journal.checkpoints.load("run-1")

    def run() -> int:
        for _ in range(loads):
            journal.checkpoints.load("run-1")
        return loads

    return run


def _measure(run: Callable[[], int], repeats: int) -> tuple[float, float, int]:
    """Best (least disturbed) wall and CPU seconds per operation over ``repeats`` runs."""
    walls, cpus = [], []
    count = 0
    for _ in range(repeats):
        wall, cpu = time.perf_counter(), time.process_time()
        count = run()
        walls.append(time.perf_counter() - wall)
        cpus.append(time.process_time() - cpu)
    return min(walls) / count, min(cpus) / count, count


def main(argv: list[str] | None = None) -> int:
    """Print the table (and a profile of one operation with ``--profile``)."""
    parser = argparse.ArgumentParser(prog="python -m bench.journal_cpu", description=__doc__)
    parser.add_argument("--count", type=int, default=2000, help="entries appended")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--profile", choices=("single", "batch", "save", "load"), default=None)
    args = parser.parse_args(argv)
    ops = {
        "single": ("single append", single_appends(args.count)),
        "batch": ("batched append (100 per batch)", batched_appends(args.count)),
        "save": ("checkpoint save (200 iterations, 600 messages)", checkpoint_saves()),
        "load": ("checkpoint load, warm (600 messages)", checkpoint_loads()),
    }
    print(f"load average {tuple(round(x, 1) for x in os.getloadavg())} (best of {args.repeats})")
    print("| operation | wall per op | CPU per op | ops/s (CPU) |")
    print("|---|---|---|---|")
    for label, run in ops.values():
        wall, cpu, _ = _measure(run, args.repeats)
        print(f"| {label} | {wall * 1e6:,.1f} µs | {cpu * 1e6:,.1f} µs | {1 / cpu:,.0f} |")
    if args.profile:
        label, run = ops[args.profile]
        profile = cProfile.Profile()
        profile.enable()
        count = run()
        profile.disable()
        stats = pstats.Stats(profile, stream=sys.stdout)
        calls = cast(_CallTotals, stats).total_calls
        print(f"\n{label}: {calls / count:.0f} function calls per operation")
        stats.sort_stats("tottime").print_stats(20)
    return 0


if __name__ == "__main__":
    sys.exit(main())
