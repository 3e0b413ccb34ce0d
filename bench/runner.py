"""Runs every (workload, system) pair in its own worker process and collects the results.

A system that fails (import error, exception, timeout) becomes an error row; the others
still run. Data directories are created under ``data_dir`` and removed after each run.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from . import objects_bench
from .measure import machine_info

WORKLOAD_ORDER = ("forks", "deep", "checkpoints", "many")
WORKLOAD_SYSTEMS: dict[str, tuple[str, ...]] = {
    "forks": ("baseline", "cas", "cas-nd", "jsonl", "seedfs", "sqlite", "git"),
    "deep": (
        "baseline",
        "cas",
        "cas-nd",
        "jsonl",
        "jsonl-fsync",
        "seedfs",
        "sqlite",
        "sqlite-nd",
        "git",
    ),
    "checkpoints": (
        "baseline",
        "cas",
        "cas-nd",
        "jsonl",
        "seedfs",
        "sqlite",
        "git",
        "langgraph",
        "langgraph-delta",
    ),
    "many": ("baseline", "cas-nd", "jsonl", "seedfs", "sqlite-nd", "git"),
}
"""Which systems run each workload. Durability only matters where time is measured per
write, so the bulk-loaded many-threads workload uses the no-fsync variants."""
TIMEOUT = {"small": 300, "full": 3600}
REPO = Path(__file__).resolve().parent.parent


def log(message: str) -> None:
    """Progress on stderr."""
    print(message, file=sys.stderr, flush=True)


def run_worker(system: str, workload: str, scale: str, data_dir: Path) -> dict[str, Any]:
    """One worker process; always returns a result dict (with ``error`` on failure)."""
    root = data_dir / workload / system
    result_file = data_dir / f"{workload}-{system}.json"
    for path in (root, root.parent / (root.name + "-batch")):
        shutil.rmtree(path, ignore_errors=True)
    root.parent.mkdir(parents=True, exist_ok=True)
    cmd = [
        sys.executable,
        "-m",
        "bench.worker",
        "run",
        "--system",
        system,
        "--workload",
        workload,
        "--scale",
        scale,
        "--root",
        str(root),
        "--result",
        str(result_file),
    ]
    start = time.perf_counter()
    try:
        done = subprocess.run(
            cmd, cwd=REPO, capture_output=True, text=True, timeout=TIMEOUT[scale], check=False
        )
        if result_file.exists():
            result: dict[str, Any] = json.loads(result_file.read_text())
        else:
            result = {
                "system": system,
                "workload": workload,
                "error": f"worker exited {done.returncode}: {done.stderr.strip()[-1500:]}",
            }
    except subprocess.TimeoutExpired:
        result = {
            "system": system,
            "workload": workload,
            "error": f"timed out after {TIMEOUT[scale]} s",
        }
    result["wall_seconds"] = time.perf_counter() - start
    for path in (root, root.parent / (root.name + "-batch"), result_file):
        if path.is_dir():
            shutil.rmtree(path, ignore_errors=True)
        elif path.exists():
            path.unlink()
    return result


def run_all(
    scale: str,
    data_dir: Path,
    workloads: list[str],
    systems: list[str] | None,
    objects: bool,
    partial_file: Path | None = None,
) -> dict[str, Any]:
    """Everything selected, in one run; returns the results document.

    With ``partial_file``, the document so far is saved after every worker, so a run that
    is interrupted still leaves its finished measurements behind.
    """
    data_dir.mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = {"scale": scale, "machine": machine_info(data_dir), "runs": []}
    started = time.perf_counter()
    if objects:
        log("[objects] object layer vs raw limits")
        shm = Path("/dev/shm") / f"cas-bench-{os.getpid()}" if Path("/dev/shm").is_dir() else None
        try:
            results["objects"] = objects_bench.run(scale, data_dir / "objects", shm)
        except Exception as exc:  # reported, never fatal
            results["objects"] = {"error": f"{type(exc).__name__}: {exc}"}
    for workload in workloads:
        for system in WORKLOAD_SYSTEMS[workload]:
            if systems and system not in systems and system != "baseline":
                continue
            log(f"[{workload}] {system} ...")
            result = run_worker(system, workload, scale, data_dir)
            status = f"ERROR {result['error'][:200]}" if "error" in result else "ok"
            log(f"[{workload}] {system}: {result['wall_seconds']:.1f} s {status}")
            results["runs"].append(result)
            if partial_file is not None:
                partial_file.write_text(json.dumps(results))
    results["machine"]["loadavg_end"] = os.getloadavg()
    results["total_seconds"] = time.perf_counter() - started
    shutil.rmtree(data_dir, ignore_errors=True)
    return results
