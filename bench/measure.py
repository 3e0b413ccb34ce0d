"""Timing, size, memory and machine-description helpers. Measures; never asserts."""

from __future__ import annotations

import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")


def now() -> float:
    """A monotonic high-resolution clock in seconds."""
    return time.perf_counter()


@contextmanager
def stopwatch(out: list[float]) -> Iterator[None]:
    """Append the elapsed seconds of the ``with`` body to ``out``."""
    start = time.perf_counter()
    try:
        yield
    finally:
        out.append(time.perf_counter() - start)


def timed(fn: Callable[[], T]) -> tuple[T, float]:
    """Call ``fn`` and return its result and the seconds it took."""
    start = time.perf_counter()
    result = fn()
    return result, time.perf_counter() - start


def summary(samples: list[float]) -> dict[str, float]:
    """Median, 10th/90th percentile, min, max, mean and count of a list of samples."""
    if not samples:
        return {"n": 0}
    ordered = sorted(samples)
    n = len(ordered)

    def pct(p: float) -> float:
        return ordered[min(n - 1, max(0, round(p * (n - 1))))]

    return {
        "n": n,
        "median": statistics.median(ordered),
        "p10": pct(0.10),
        "p90": pct(0.90),
        "min": ordered[0],
        "max": ordered[-1],
        "mean": statistics.fmean(ordered),
        "total": sum(ordered),
    }


def dir_size(path: str | os.PathLike[str]) -> dict[str, int]:
    """Apparent bytes (sum of file sizes), disk usage (allocated blocks) and file count."""
    apparent = used = files = 0
    root = Path(path)
    if root.is_file():
        st = root.stat()
        return {"bytes": st.st_size, "du": st.st_blocks * 512, "files": 1}
    for dirpath, _dirs, names in os.walk(root):
        for name in names:
            try:
                st = os.lstat(os.path.join(dirpath, name))
            except FileNotFoundError:
                continue
            apparent += st.st_size
            used += st.st_blocks * 512
            files += 1
    return {"bytes": apparent, "du": used, "files": files}


def peak_rss_bytes() -> int:
    """Peak resident set size of this process so far.

    Reads VmHWM from /proc/self/status: unlike getrusage's ru_maxrss, which Linux carries
    over from the parent across fork+exec, it belongs to this process image alone.
    """
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def fs_type(path: str | os.PathLike[str]) -> str:
    """The file-system type of the mount holding ``path`` (from /proc/mounts)."""
    target = os.path.realpath(path)
    best, kind, device = "", "unknown", ""
    try:
        with open("/proc/mounts", encoding="utf-8") as f:
            for line in f:
                parts = line.split()
                if len(parts) < 3:
                    continue
                mount = parts[1].replace("\\040", " ")
                inside = target == mount or target.startswith(mount.rstrip("/") + "/")
                if inside and len(mount) > len(best):
                    best, kind, device = mount, parts[2], parts[0]
    except OSError:
        pass
    return f"{kind} ({device} on {best})" if best else kind


def cpu_model() -> str:
    """The CPU model name from /proc/cpuinfo (falls back to platform.processor)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _version(module: str) -> str:
    try:
        from importlib.metadata import version

        return version(module)
    except Exception:
        return "not installed"


def _command_version(args: list[str]) -> str:
    try:
        out = subprocess.run(args, capture_output=True, text=True, timeout=10, check=False)
        return out.stdout.strip().splitlines()[0] if out.stdout.strip() else "unknown"
    except (OSError, subprocess.TimeoutExpired):
        return "not available"


def machine_info(bench_dir: str | os.PathLike[str]) -> dict[str, Any]:
    """What the figures were measured on: CPU, cores, memory, Python, file system."""
    import sqlite3

    try:
        mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        mem = 0
    return {
        "cpu": cpu_model(),
        "cores": os.cpu_count(),
        "memory_gib": round(mem / 2**30, 1),
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "bench_dir": str(bench_dir),
        "bench_fs": fs_type(bench_dir),
        "shm_fs": fs_type("/dev/shm"),
        "loadavg_start": os.getloadavg(),
        "sqlite": sqlite3.sqlite_version,
        "git": _command_version(["git", "--version"]),
        "packages": {
            name: _version(name)
            for name in (
                "cas-journal",
                "blake3",
                "zstandard",
                "dulwich",
                "langgraph",
                "langgraph-checkpoint-sqlite",
                "matplotlib",
                "psutil",
            )
        },
        "time": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
    }
