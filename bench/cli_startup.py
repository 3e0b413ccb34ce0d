"""Command-line start-up: whole-process wall and CPU time of ``cas-journal --help`` and of
``cas-journal threads`` on a small store, beside the floors every Python CLI pays.

    python -m bench.cli_startup [--runs 20] [--json FILE]

Each run starts a fresh interpreter, as a user's shell does. The commands run in turn
(A B C A B C ...), so a machine whose speed drifts during the run slows them alike, and
the report gives each median with its ratio to ``python -c pass`` (the interpreter's own
start) and to ``python -c "import click"`` (the floor of any click CLI). CPU seconds are
the kernel's accounting of the finished child (``os.wait4``), which other load on the
machine disturbs less than wall time. The goal is 150 ms for both commands.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from .measure import machine_info


def run_process(argv: list[str], env: dict[str, str]) -> tuple[float, float, int]:
    """(wall seconds, cpu seconds, peak RSS in KiB) of one whole process."""
    start = time.perf_counter()
    process = subprocess.Popen(
        argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, env=env
    )
    assert process.stderr is not None
    error = process.stderr.read()
    _, status, usage = os.wait4(process.pid, 0)
    wall = time.perf_counter() - start
    process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode != 0:
        raise RuntimeError(f"{argv} failed: {error.decode(errors='replace')}")
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss


def _run_once(argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    """(wall seconds, cpu seconds) of one whole process."""
    wall, cpu, _ = run_process(argv, env)
    return wall, cpu


def small_store(path: Path) -> None:
    """Ten threads of five entries each (what a newcomer's store looks like)."""
    import cas_journal as cj

    with cj.Journal.open(path) as journal:
        for number in range(10):
            thread = f"thread-{number}"
            journal.create_thread(cj.ThreadMeta(id=thread, title=f"conversation {number}"))
            for turn in range(5):
                role = "user" if turn % 2 == 0 else "assistant"
                cj.append_message(
                    journal, thread, f"turn-{turn}", cj.Message(role=role, content=f"m{turn}")
                )


def measure(runs: int) -> dict[str, Any]:
    """Run every command ``runs`` times, interleaved; medians and ratios."""
    script = shutil.which("cas-journal") or str(Path(sys.executable).parent / "cas-journal")
    workdir = Path(tempfile.mkdtemp(prefix="cli-startup-"))
    try:
        store = workdir / "store"
        small_store(store)
        env = dict(os.environ, CAS_JOURNAL_STORE=str(store))
        commands = {
            "python -c pass": [sys.executable, "-c", "pass"],
            "python -c 'import click'": [sys.executable, "-c", "import click"],
            "cas-journal --help": [script, "--help"],
            "cas-journal threads": [script, "threads"],
            "cas-journal log thread-0": [script, "log", "thread-0"],
        }
        samples: dict[str, list[tuple[float, float]]] = {name: [] for name in commands}
        for argv in commands.values():  # warm the page cache
            _run_once(argv, env)
        for _ in range(runs):
            for name, argv in commands.items():
                samples[name].append(_run_once(argv, env))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    floor = statistics.median(cpu for _, cpu in samples["python -c pass"])
    click_floor = statistics.median(cpu for _, cpu in samples["python -c 'import click'"])
    results = {}
    for name, pairs in samples.items():
        wall = statistics.median(w for w, _ in pairs)
        cpu = statistics.median(c for _, c in pairs)
        results[name] = {
            "wall_ms": round(wall * 1000, 1),
            "cpu_ms": round(cpu * 1000, 1),
            "cpu_vs_python": round(cpu / floor, 2) if floor else None,
            "cpu_vs_click": round(cpu / click_floor, 2) if click_floor else None,
            "wall_min_ms": round(min(w for w, _ in pairs) * 1000, 1),
            "wall_max_ms": round(max(w for w, _ in pairs) * 1000, 1),
        }
    return {"runs": runs, "results": results, "machine": machine_info(tempfile.gettempdir())}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--json", type=Path, help="Also write the figures to this file.")
    args = parser.parse_args()
    report = measure(args.runs)
    machine = report["machine"]
    print(
        f"{machine['cpu']}, {machine['cores']} cores, Python {machine['python']}, "
        f"load {', '.join(f'{x:.2f}' for x in machine['loadavg_start'])} at start; "
        f"median of {args.runs} runs each, interleaved"
    )
    print(f"{'command':<28} {'wall ms':>8} {'cpu ms':>8} {'cpu/python':>11} {'cpu/click':>10}")
    for name, row in report["results"].items():
        print(
            f"{name:<28} {row['wall_ms']:>8.1f} {row['cpu_ms']:>8.1f} "
            f"{row['cpu_vs_python']:>11.2f} {row['cpu_vs_click']:>10.2f}"
        )
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
