"""Workload drivers: the same sequence of operations for every system, timed.

Each driver runs inside a worker process (bench/worker.py) for one system and returns a
JSON-able dict of measurements. Operations a system does not support are skipped and
reported as missing, never estimated.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Callable
from typing import Any

from . import workloads as wl
from .measure import stopwatch, summary, timed
from .systems.base import BATCH, System

ColdRunner = Callable[[str, str], tuple[float, int]]
"""cold(op, thread_id) -> (seconds, minor page faults) measured inside a fresh process
(open + operation)."""


def _stored(system: System) -> dict[str, int]:
    system.settle()
    return system.stored()


def _compact(system: System, out: dict[str, Any]) -> None:
    """Run the system's maintenance step; record its time and the bytes after it."""
    if system.compaction.startswith("none"):
        out["compacted"] = out["stored"]
        out["compact_seconds"] = 0.0
        return
    try:
        _, seconds = timed(system.compact)
    except Exception as exc:  # keep every other figure of this run
        out["compact_error"] = f"{type(exc).__name__}: {exc}"
        return
    out["compact_seconds"] = seconds
    out["compacted"] = system.stored()


BUDGET_SECONDS = 10.0
"""Repeats of one slow operation stop after this long (at least one sample is kept)."""


def _warm(fn: Callable[[], object], repeats: int) -> dict[str, float]:
    """Call ``fn`` once to warm up, then up to ``repeats`` more times; summarize those."""
    fn()
    samples: list[float] = []
    for _ in range(repeats):
        with stopwatch(samples):
            fn()
        if sum(samples) > BUDGET_SECONDS:
            break
    return summary(samples)


def _cold(cold: ColdRunner, op: str, thread: str, runs: int) -> dict[str, float]:
    """Up to ``runs`` fresh-process measurements of one operation (time-budgeted): the
    summary of the seconds, plus ``faults``, the median of the minor page faults."""
    samples: list[float] = []
    faults: list[int] = []
    for _ in range(runs):
        seconds, faulted = cold(op, thread)
        samples.append(seconds)
        faults.append(faulted)
        if sum(samples) > BUDGET_SECONDS:
            break
    return {**summary(samples), "faults": statistics.median(faults)}


def run_forks(system: System, scale: wl.Scale, cold: ColdRunner) -> dict[str, Any]:
    """Workload 1: base thread, forks at random points, entries after each fork."""
    plan = wl.fork_plan(scale)
    out: dict[str, Any] = {}
    system.create_thread("base", plan.base[0].created_at, "base thread")
    ids: dict[str, list[str]] = {"base": []}
    lengths: dict[str, int] = {"base": 0}
    append_lat: list[float] = []
    for msg in plan.base:
        with stopwatch(append_lat):
            ids["base"].append(system.append("base", msg))
    logical = {"base": sum(m.size() for m in plan.base)}
    lengths["base"] = len(plan.base)
    sizes = [m.size() for m in plan.base]
    snapshots: dict[int, dict[str, int]] = {}
    logical_at: dict[int, int] = {}
    if 0 in scale.fork_snapshots:
        snapshots[0] = _stored(system)
        logical_at[0] = logical["base"]
    fork_lat: list[float] = []
    entry_sizes: dict[str, list[int]] = {"base": sizes}
    for spec in plan.forks:
        prefix = ids[spec.source][: spec.at + 1]
        with stopwatch(fork_lat):
            new_ids = system.fork(spec.source, prefix, spec.thread, wl.EPOCH + 1e7 + spec.index)
        entries = plan.fork_entries(spec)
        for msg in entries:
            with stopwatch(append_lat):
                new_ids.append(system.append(spec.thread, msg))
        ids[spec.thread] = new_ids
        prefix_sizes = entry_sizes[spec.source][: spec.at + 1]
        entry_sizes[spec.thread] = prefix_sizes + [m.size() for m in entries]
        logical[spec.thread] = sum(entry_sizes[spec.thread])
        done = spec.index + 1
        if done in scale.fork_snapshots:
            snapshots[done] = _stored(system)
            logical_at[done] = sum(logical.values())
    out["append"] = summary(append_lat)
    out["fork"] = summary(fork_lat)
    out["snapshots"] = {str(k): v for k, v in snapshots.items()}
    out["logical_at"] = {str(k): v for k, v in logical_at.items()}
    out["threads"] = len(ids)
    last = plan.forks[-1].thread if plan.forks else "base"
    out["path_len"] = len(ids[last])
    out["read_path_warm"] = _warm(lambda: system.read_path(last), scale.path_reads)
    threads = list(ids)
    out["read_all_paths_warm"] = _warm(lambda: _read_all(system, threads), scale.path_reads)
    out["stored"] = _stored(system)
    system.close()
    out["read_all_paths_cold"] = _cold(cold, "paths", ",".join(threads), scale.cold_runs)
    system.open()
    _compact(system, out)
    system.close()
    out["read_all_paths_cold_packed"] = _cold(cold, "paths", ",".join(threads), scale.cold_runs)
    system.open()
    out["read_all_paths_warm_packed"] = _warm(lambda: _read_all(system, threads), scale.path_reads)
    return out


def _read_all(system: System, threads: list[str]) -> int:
    """Read every thread's path (what a UI listing every conversation in full does)."""
    return sum(system.read_path(thread) for thread in threads)


def run_deep(
    system: System, scale: wl.Scale, cold: ColdRunner, batch_system: System | None
) -> dict[str, Any]:
    """Workload 2: one long thread; append throughput, path reads, fork vs history."""
    out: dict[str, Any] = {}
    first = True
    ids: list[str] = []
    lat: list[float] = []
    for msg in wl.deep_entries(scale):
        if first:
            system.create_thread("deep", msg.created_at, "deep thread")
            first = False
        with stopwatch(lat):
            ids.append(system.append("deep", msg))
    out["append"] = summary(lat)
    out["appends_per_s"] = len(lat) / sum(lat)
    out["entries"] = len(ids)
    if batch_system is not None and BATCH in batch_system.features:
        batch_system.open()
        created = False
        batch_lat: list[float] = []
        count = 0
        for batch in wl.batch_entries(scale):
            if not created:
                batch_system.create_thread("batched", batch[0].created_at, "batched")
                created = True
            with stopwatch(batch_lat):
                batch_system.append_batch("batched", batch)
            count += len(batch)
        batch_system.close()
        out["batch"] = summary(batch_lat)
        out["batch_size"] = scale.batch_size
        out["batched_appends_per_s"] = count / sum(batch_lat)
    out["stored"] = _stored(system)
    out["read_path_warm"] = _warm(lambda: system.read_path("deep"), scale.path_reads)
    system.close()
    out["read_path_cold"] = _cold(cold, "path", "deep", scale.cold_runs)
    system.open()
    _compact(system, out)
    system.close()
    out["read_path_cold_packed"] = _cold(cold, "path", "deep", scale.cold_runs)
    system.open()
    out["read_path_warm_packed"] = _warm(lambda: system.read_path("deep"), scale.path_reads)
    if system.fetch_path("deep") is not None:  # the read without the caller's loop
        out["fetch_path_warm_packed"] = _warm(lambda: system.fetch_path("deep"), scale.path_reads)
    forks: dict[str, Any] = {}
    for history in scale.fork_history:
        if history > len(ids):
            continue
        samples: list[float] = []
        for k in range(scale.forks_per_history):
            with stopwatch(samples):
                system.fork("deep", ids[:history], f"deep-fork-{history}-{k}", wl.EPOCH + 2e7 + k)
        forks[str(history)] = summary(samples)
    out["fork_by_history"] = forks
    return out


def run_checkpoints(system: System, scale: wl.Scale, cold: ColdRunner) -> dict[str, Any]:
    """Workload 3: one run, 3 new messages per iteration, saved every iteration."""
    prompt = wl.checkpoint_system_prompt()
    messages: list[dict[str, Any]] = []
    lat: list[float] = []
    series: list[int] = []
    series_du: list[int] = []
    for step in wl.checkpoint_steps(scale):
        messages.extend(step.new_messages)
        with stopwatch(lat):
            system.save_checkpoint("run-1", step, list(messages), prompt)
        size = system.stored()
        series.append(size["bytes"])
        series_du.append(size["du"])
    out: dict[str, Any] = {
        "save": summary(lat),
        "save_by_iteration": lat,
        "bytes_by_iteration": series,
        "du_by_iteration": series_du,
        "iterations": len(lat),
        "messages": len(messages),
    }
    out["save_first10"] = summary(lat[:10])
    out["save_last10"] = summary(lat[-10:])
    # the cost per save must not grow with what is already saved: iterations 1-50
    # against 150-200 (or the last 50 of a shorter run)
    out["save_1_50"] = summary(lat[:50])
    out["save_150_200"] = summary(lat[149:200] if len(lat) >= 200 else lat[-50:])
    out["final_list_bytes"] = len(json.dumps(messages, separators=(",", ":")).encode())
    out["messages_at_200"] = sum(
        len(step.new_messages) for step in list(wl.checkpoint_steps(scale))[:200]
    )
    out["load_warm"] = _warm(lambda: system.load_checkpoint("run-1"), scale.path_reads * 4)
    rows = getattr(system, "checkpoint_rows", None)
    if rows is not None:
        out["checkpoint_rows"] = rows()
    out["stored"] = _stored(system)
    system.close()
    out["load_cold"] = _cold(cold, "load", "run-1", scale.cold_runs)
    system.open()
    _compact(system, out)
    system.close()
    out["load_cold_packed"] = _cold(cold, "load", "run-1", scale.cold_runs)
    system.open()
    out["load_warm_packed"] = _warm(lambda: system.load_checkpoint("run-1"), scale.path_reads * 4)
    return out


def run_many(system: System, scale: wl.Scale, cold: ColdRunner) -> dict[str, Any]:
    """Workload 4: many small threads; first page of the list and opening one thread."""
    out: dict[str, Any] = {}
    count, seconds = timed(lambda: system.bulk_threads(wl.small_threads(scale)))
    out["threads"] = count
    out["build_seconds"] = seconds
    out["stored"] = _stored(system)
    target = f"thread-{scale.many_threads // 2:06d}"
    out["list_warm"] = _warm(lambda: system.list_page(50), scale.path_reads)
    out["open_warm"] = _warm(lambda: system.open_thread(target), scale.path_reads)
    out["page_first"] = system.list_page(50)[:3]
    system.close()
    out["list_cold"] = _cold(cold, "list", "", scale.cold_runs)
    out["open_cold"] = _cold(cold, "open", target, scale.cold_runs)
    system.open()
    return out


DRIVERS = {"forks": run_forks, "deep": run_deep, "checkpoints": run_checkpoints, "many": run_many}
