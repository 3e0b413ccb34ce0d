"""Reading a long thread from the command line: time and peak memory of ``show``,
``log -n``, ``diff`` and a full ``log``, each in a fresh process.

    python -m bench.cli_reading [--entries 100000]

One thread of N entries (written with batches), and a fork of it a few entries before
the leaf that adds five entries. ``show THREAD``, ``show ENTRY``, ``log -n 20`` and
``diff`` must cost the same whatever N is (they read a handful of entries); a full
``log`` reads every entry but prints as it reads, so its memory holds only the path's
ids. The figures are whole-process (``os.wait4``): wall and CPU seconds and peak RSS,
beside ``cas-journal --help`` as the floor of any command.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from .cli_startup import run_process
from .measure import machine_info


def long_thread(path: Path, entries: int) -> tuple[str, str]:
    """A thread of ``entries`` entries and a fork near its leaf; (a middle entry id, leaf)."""
    import cas_journal as cj

    with cj.Journal.open(path, durable=False) as journal:
        journal.create_thread(cj.ThreadMeta(id="long", title="a long conversation"))
        done = 0
        while done < entries:
            with journal.batch("long") as batch:
                for index in range(done, min(entries, done + 5000)):
                    role = "user" if index % 2 == 0 else "assistant"
                    batch.append(
                        cj.Entry(
                            type=cj.EntryType.USER_MESSAGE
                            if role == "user"
                            else cj.EntryType.ASSISTANT_MESSAGE,
                            message=cj.Message(role=role, content=f"message {index} " * 8),
                        )
                    )
            done = min(entries, done + 5000)
        path_ids = [entry.id for entry in journal.path("long")]
        fork_point = path_ids[-5]
        journal.fork("long", fork_point, new_thread_id="side")
        for index in range(5):
            cj.append_message(
                journal, "side", "t", cj.Message(role="user", content=f"side {index}")
            )
        return path_ids[len(path_ids) // 2], path_ids[-1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--entries", type=int, default=100_000)
    parser.add_argument("--build", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.build:  # in a child process, so that this one stays small
        print(long_thread(args.build, args.entries)[0])
        return
    script = shutil.which("cas-journal") or str(Path(sys.executable).parent / "cas-journal")
    workdir = Path(tempfile.mkdtemp(prefix="cli-reading-"))
    try:
        store = workdir / "store"
        built = subprocess.run(
            [
                sys.executable,
                "-m",
                "bench.cli_reading",
                "--entries",
                str(args.entries),
                "--build",
                str(store),
            ],
            capture_output=True,
            text=True,
            check=True,
        )
        middle = built.stdout.strip()
        env = dict(os.environ, CAS_JOURNAL_STORE=str(store))
        commands = {
            "--help": [script, "--help"],
            "show long": [script, "show", "long"],
            "show ENTRY (middle)": [script, "show", middle[:12]],
            "log long -n 20": [script, "log", "long", "-n", "20"],
            "log long -n 20 --full": [script, "log", "long", "-n", "20", "--full"],
            "diff long side": [script, "diff", "long", "side"],
            "log long (all)": [script, "log", "long"],
        }
        machine = machine_info(workdir)
        print(
            f"{machine['cpu']}, {machine['cores']} cores, load "
            f"{', '.join(f'{x:.2f}' for x in machine['loadavg_start'])}; "
            f"thread of {args.entries:,} entries; one run each after a warm-up"
        )
        print(f"{'command':<24} {'wall s':>8} {'cpu s':>8} {'peak MiB':>9}")
        # a child's peak RSS includes what it had before exec (a copy of this process)
        for name, argv in commands.items():
            run_process(argv, env)
            wall, cpu, peak = run_process(argv, env)
            print(f"{name:<24} {wall:>8.2f} {cpu:>8.2f} {peak / 1024:>9.1f}")
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
