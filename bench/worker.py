"""One system on one workload, in a process of its own (so its peak RSS is its own).

    python -m bench.worker run  --system S --workload W --scale X --root DIR --result FILE
    python -m bench.worker cold --system S --root DIR --op path|paths|load|list|open [--thread T]

``run`` writes a JSON result; ``cold`` prints the seconds a fresh process needs to open
the store and do one operation (interpreter start-up and imports excluded; the OS page
cache is not dropped, so "cold" means a new process, not a cold disk), and the minor page
faults it took meanwhile (each first touch of a page of memory: the memory a read builds
costs that much on top of the work that fills it).
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from .measure import peak_rss_bytes


def cold_op(system_name: str, root: Path, op: str, thread: str) -> tuple[float, int]:
    """Run ``op`` in a new Python process and return what it measured: seconds and minor
    page faults."""
    cmd = [
        sys.executable,
        "-m",
        "bench.worker",
        "cold",
        "--system",
        system_name,
        "--root",
        str(root),
        "--op",
        op,
        "--thread",
        thread,
    ]
    done = subprocess.run(
        cmd, capture_output=True, text=True, check=False, cwd=Path(__file__).resolve().parent.parent
    )
    if done.returncode != 0:
        raise RuntimeError(f"cold {op} failed: {done.stderr.strip()[-2000:]}")
    measured = json.loads(done.stdout.strip().splitlines()[-1])
    return float(measured["seconds"]), int(measured["faults"])


def _cold(args: argparse.Namespace) -> int:
    from .systems import make_system

    system = make_system(args.system, Path(args.root))  # imports happen before the clock
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    start = time.perf_counter()
    system.open()
    if args.op == "path":
        system.read_path(args.thread)
    elif args.op == "paths":  # every listed thread's path (comma-separated ids)
        for thread in args.thread.split(","):
            system.read_path(thread)
    elif args.op == "load":  # the newest checkpoint of a run
        system.load_checkpoint(args.thread)
    elif args.op == "list":
        system.list_page(50)
    else:
        system.open_thread(args.thread)
    seconds = time.perf_counter() - start
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults
    system.close()
    print(json.dumps({"seconds": seconds, "faults": faults}))
    return 0


def _run(args: argparse.Namespace) -> int:
    from .drivers import DRIVERS
    from .systems import make_system
    from .workloads import SCALES

    result: dict[str, Any] = {"system": args.system, "workload": args.workload}
    start = time.perf_counter()
    try:
        root = Path(args.root)
        system = make_system(args.system, root)
        result.update(
            label=system.label,
            durable=system.durable,
            compaction=system.compaction,
            features=sorted(system.features),
        )
        scale = SCALES[args.scale]

        def cold(op: str, thread: str) -> tuple[float, int]:
            return cold_op(args.system, root, op, thread)

        system.open()
        if args.workload == "deep":
            batch_system = make_system(args.system, root.parent / (root.name + "-batch"))
            result["metrics"] = DRIVERS["deep"](system, scale, cold, batch_system)  # type: ignore[operator]
        else:
            result["metrics"] = DRIVERS[args.workload](system, scale, cold)  # type: ignore[operator]
        system.close()
    except Exception as exc:  # reported as an error row; the other systems still run
        result["error"] = f"{type(exc).__name__}: {exc}"
        result["traceback"] = traceback.format_exc()[-4000:]
    result["seconds"] = time.perf_counter() - start
    result["peak_rss"] = peak_rss_bytes()
    Path(args.result).write_text(json.dumps(result, indent=1))
    return 0


def main(argv: list[str] | None = None) -> int:
    """Entry point of the worker process."""
    parser = argparse.ArgumentParser(prog="python -m bench.worker")
    sub = parser.add_subparsers(dest="mode", required=True)
    run = sub.add_parser("run")
    run.add_argument("--system", required=True)
    run.add_argument("--workload", required=True)
    run.add_argument("--scale", required=True)
    run.add_argument("--root", required=True)
    run.add_argument("--result", required=True)
    cold = sub.add_parser("cold")
    cold.add_argument("--system", required=True)
    cold.add_argument("--root", required=True)
    cold.add_argument("--op", choices=("path", "paths", "load", "list", "open"), required=True)
    cold.add_argument("--thread", default="")
    args = parser.parse_args(argv)
    return _run(args) if args.mode == "run" else _cold(args)


if __name__ == "__main__":
    sys.exit(main())
