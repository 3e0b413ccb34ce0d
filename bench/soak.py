"""Soak: kill a writer thousands of times and prove the store never loses a thing.

    python -m bench.soak --kills 5000            # crash soak (about 20 minutes)
    python -m bench.soak --kills 0 --load 120    # 2 minutes of concurrent load only
    python -m bench.soak --replay 1234 --durable 1 --mode syscall --cycles 15

Each store gets a seed; a child process runs random journal and maintenance operations
on it and is SIGKILLed at a random moment (a random delay, or exactly at its Nth
file-system call), then the store is reopened, fsck'd and checked against the child's
acknowledgement log (see tests/support/harness.py). A failure prints the store's seed and the
cycle, so ``--replay SEED`` reruns that store (syscall-mode kills replay exactly).
Exit status 1 if any check failed.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from support import harness

MODES = ("delay", "syscall", "mixed")


def crash_soak(args: argparse.Namespace) -> harness.CycleStats:
    """Kill cycles on fresh stores until ``args.kills`` kills were verified."""
    stats = harness.CycleStats()
    started = time.monotonic()
    store = 0
    last_print = started
    while stats.kills < args.kills:
        seed = args.seed * 100_003 + store
        durable = store % 2 == 0
        mode = MODES[store % 3]
        failures_before = len(stats.failures)
        harness.run_store(
            Path(args.workdir) / f"store{store % 4}",
            seed,
            args.cycles,
            durable,
            mode,
            stats=stats,
        )
        for failure in stats.failures[failures_before:]:
            print(
                f"FAILURE (replay: --replay {seed} --durable {int(durable)} "
                f"--mode {mode} --cycles {args.cycles})\n  {failure}",
                flush=True,
            )
        store += 1
        now = time.monotonic()
        if now - last_print >= 10:
            last_print = now
            print(f"  {stats.kills} kills, {store} stores, {now - started:.0f} s", flush=True)
        if stats.failures and args.stop_on_failure:
            break
    return stats


def main(argv: list[str] | None = None) -> int:
    """Run the soak; return the process exit status."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kills", type=int, default=5000, help="kill points to verify")
    parser.add_argument("--seed", type=int, default=int(time.time()) % 100_000)
    parser.add_argument("--cycles", type=int, default=15, help="kill cycles per store")
    parser.add_argument("--workdir", default="/work/harness-scratch/soak")
    parser.add_argument("--load", type=float, default=0.0, help="seconds of concurrent load")
    parser.add_argument("--stop-on-failure", action="store_true")
    parser.add_argument("--replay", type=int, help="rerun one store with this seed")
    parser.add_argument("--durable", type=int, default=1)
    parser.add_argument("--mode", choices=MODES, default="mixed")
    args = parser.parse_args(argv)

    failed = False
    if args.replay is not None:
        stats = harness.run_store(
            Path(args.workdir) / "replay", args.replay, args.cycles, bool(args.durable), args.mode
        )
        print(f"replay: {stats.kills} kills, {len(stats.failures)} failures")
        for failure in stats.failures:
            print(" ", failure)
        return 1 if stats.failures else 0

    if args.kills > 0:
        print(f"crash soak: seed {args.seed}, target {args.kills} kills", flush=True)
        started = time.monotonic()
        stats = crash_soak(args)
        elapsed = time.monotonic() - started
        print(
            f"kill points survived: {stats.kills} in {elapsed:.0f} s "
            f"({stats.finished} children finished before their kill)"
        )
        print("kills by operation in flight:", dict(sorted(stats.interrupted.items())))
        print(f"failures: {len(stats.failures)}")
        failed = bool(stats.failures)

    if args.load > 0:
        result = harness.concurrent_load(
            Path(args.workdir) / "load", seconds=args.load, seed=args.seed
        )
        print(result.summary())
        for problem in result.problems:
            print("  PROBLEM", problem)
        failed = failed or bool(result.problems)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
