"""Store benchmark (issue 12): the local store's hot paths beside same-run peers.

    python -m bench store --scale small|full [--format1 /path/to/a/checkout-of-c8186ee]
    python -m bench store --scale full --only raw,single,threaded --systems cas,cas-nd,sqlite

Everything runs in one process, one system after the other, on the repository's disk:

* raw limits: one 300-byte ``write`` + ``fsync`` (and + ``fdatasync``) on a file there,
  and the cost of a minor page fault;
* single appends (one entry per call, small chat messages and the deep workload's
  messages), for cas-journal durable and not, SQLite rows (synchronous FULL and OFF),
  JSONL (with and without fsync) and git;
* four threads of one process appending durably, each to its own thread (group commit),
  beside the same with SQLite (a connection per thread) and JSONL with fsync;
* batched appends (batches of the scale's batch size);
* fork at history 100 / 1,000 / 10,000 entries (the median of 25 forks at each, 9 at the
  small scale: a few forks right after thousands of batched entries are slower);
* the first page of 50 threads out of many (10,000 small, 100,000 full);
* bytes after the system's own maintenance on the forks and checkpoint workloads, as a
  fraction of the logical bytes (with ``--format1``, also for the format-1 code of that
  checkout, run in a subprocess in the same run);
* pages per commit (``wal``): how many pages the local store's transactions write to the
  WAL for one append, one fork (history 1,000) and one batch, from the WAL's growth over
  a few commits right after it was emptied (a count, so unlike the timings it does not
  depend on the machine's load), and the CPU time per single append;
* the store's own SQL (``floor``): single appends, forks and batches on cas-journal, each
  write transaction they ran captured and replayed alone on a copy of the store through
  ``sqlite3`` (the store's statements and connection settings, nothing else), and the
  time the caller spends building the ``Entry`` models it passes.

Absolute figures depend on the machine and its load (recorded with the results); ratios
to peers measured minutes apart in the same run are the figures to compare. Nothing is
asserted.
"""

from __future__ import annotations

import functools
import json
import mmap
import os
import resource
import shutil
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol, TypedDict

from . import drivers
from . import workloads as wl
from .measure import machine_info, stopwatch
from .systems import make_system
from .systems.base import BATCH, System

APPEND_SYSTEMS = ("cas", "cas-nd", "sqlite", "sqlite-nd", "jsonl", "jsonl-fsync", "git")
FORK_SYSTEMS = ("cas", "cas-nd", "sqlite", "sqlite-nd", "jsonl", "jsonl-fsync", "git")
LIST_SYSTEMS = ("cas-nd", "sqlite-nd", "jsonl")
THREADED_SYSTEMS = ("cas", "sqlite", "jsonl-fsync")
SECTIONS = (
    "raw",
    "single",
    "threaded",
    "batched",
    "forks",
    "first_page",
    "compacted",
    "wal",
    "floor",
)
"""What ``--only`` may select (default: all); ``--systems`` narrows the peers of each."""


class Sizes(TypedDict):
    """One scale's workload sizes (see SIZES)."""

    appends: int
    deep: int
    git: int
    threaded: int
    batches: int
    history: tuple[int, ...]
    threads: int
    forks: int
    pages: int


SIZES: dict[str, Sizes] = {
    "small": {
        "appends": 400,
        "deep": 200,
        "git": 60,
        "threaded": 200,
        "batches": 20,
        "history": (100, 1_000),
        "threads": 10_000,
        "forks": 9,
        "pages": 20,
    },
    "full": {
        "appends": 3_000,
        "deep": 1_000,
        "git": 200,
        "threaded": 1_000,
        "batches": 100,
        "history": (100, 1_000, 10_000),
        "threads": 100_000,
        "forks": 25,
        "pages": 50,
    },
}


def log(message: str) -> None:
    """Progress on stderr."""
    print(message, file=sys.stderr, flush=True)


def small_messages(count: int, prefix: str = "m") -> list[wl.Msg]:
    """Short chat messages (about 150 bytes), alternating user and assistant."""
    return [
        wl.Msg(
            "user" if i % 2 == 0 else "assistant",
            f"{prefix} {i}: a short chat message of about one hundred and fifty bytes, "
            f"the kind most turns of a conversation are made of ({i * 7919 % 10007}).",
            f"turn-{i // 2}",
            wl.EPOCH + 10.0 * i,
        )
        for i in range(count)
    ]


def _open(name: str, root: Path) -> System:
    system = make_system(name, root)
    system.open()
    return system


def _median_rate(count: int, seconds: float) -> float:
    return count / seconds if seconds > 0 else 0.0


def raw_limits(directory: Path, count: int = 400) -> dict[str, float]:
    """Seconds per 300-byte write + fsync (and + fdatasync), appending to one file."""
    path = directory / "raw-fsync"
    out: dict[str, float] = {}
    for name, sync in (("write_fsync", os.fsync), ("write_fdatasync", os.fdatasync)):
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            samples = []
            for _ in range(count):
                start = time.perf_counter()
                os.write(fd, b"x" * 300)
                sync(fd)
                samples.append(time.perf_counter() - start)
        finally:
            os.close(fd)
        out[name] = statistics.median(samples)
        out[name + "_mean"] = statistics.fmean(samples)
    path.unlink()
    out["page_fault"] = page_fault_seconds()
    return out


def page_fault_seconds(pages: int = 16_384) -> float:
    """Seconds per minor page fault: the first write to each page of a fresh anonymous
    mapping (what a process pays for every page of memory it touches first, beside the
    work that fills it)."""
    mapping = mmap.mmap(-1, pages * mmap.PAGESIZE)
    try:
        before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        start = time.perf_counter()
        for offset in range(0, pages * mmap.PAGESIZE, mmap.PAGESIZE):
            mapping[offset] = 1
        seconds = time.perf_counter() - start
        faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
    finally:
        mapping.close()
    return seconds / max(faults, 1)


def single_appends(name: str, root: Path, messages: Sequence[wl.Msg]) -> dict[str, float]:
    """Appends one at a time to one thread (after 10 warm-up appends); ``cpu`` is the
    process's CPU time per append (all its threads), less sensitive to the load of
    other processes than the wall-clock figures."""
    system = _open(name, root)
    try:
        system.create_thread("t", messages[0].created_at, "appends")
        for msg in messages[:10]:
            system.append("t", msg)
        samples = []
        cpu = time.process_time()
        for msg in messages[10:]:
            start = time.perf_counter()
            system.append("t", msg)
            samples.append(time.perf_counter() - start)
        cpu = time.process_time() - cpu
        return {
            "per_s": _median_rate(len(samples), sum(samples)),
            "median": statistics.median(samples),
            "count": len(samples),
            "cpu": cpu / len(samples),
        }
    finally:
        system.close()


def threaded_appends(name: str, root: Path, per_thread: int, writers: int = 4) -> dict[str, Any]:
    """``writers`` threads of this process, each appending to its own thread."""
    systems = [_open(name, root)]
    own = name == "sqlite"  # a connection per thread, opened in that thread
    try:
        messages = small_messages(per_thread, "w")
        for k in range(writers):
            systems[0].create_thread(f"w{k}", messages[0].created_at, f"writer {k}")
        before = _transactions(systems[0])
        barrier = threading.Barrier(writers + 1)
        errors: list[BaseException] = []

        def work(k: int) -> None:
            system = _open(name, root) if own else systems[0]
            barrier.wait()
            try:
                for msg in messages:
                    system.append(f"w{k}", msg)
            except BaseException as exc:  # reported, not raised in a thread
                errors.append(exc)
            finally:
                if own:
                    system.close()

        workers = [threading.Thread(target=work, args=(k,)) for k in range(writers)]
        for worker in workers:
            worker.start()
        barrier.wait()
        start = time.perf_counter()
        for worker in workers:
            worker.join()
        seconds = time.perf_counter() - start
        if errors:
            raise errors[0]
        out: dict[str, Any] = {
            "per_s": _median_rate(writers * per_thread, seconds),
            "writers": writers,
            "appends": writers * per_thread,
        }
        after = _transactions(systems[0])
        if before is not None and after is not None:
            out["transactions"] = after - before
        return out
    finally:
        for system in systems:
            system.close()


def _transactions(system: System) -> int | None:
    journal = getattr(system, "j", None)
    committer = getattr(getattr(journal, "store", None), "committer", None)
    return None if committer is None else int(committer.transactions)


def batched_appends(name: str, root: Path, batches: int, size: int) -> dict[str, float]:
    """``batches`` batches of ``size`` small messages to one thread."""
    system = _open(name, root)
    try:
        if BATCH not in system.features:
            return {}
        messages = small_messages(batches * size, "b")
        system.create_thread("t", messages[0].created_at, "batched")
        system.append_batch("t", messages[:size])  # warm-up
        start = time.perf_counter()
        for at in range(size, len(messages), size):
            system.append_batch("t", messages[at : at + size])
        seconds = time.perf_counter() - start
        return {"per_s": _median_rate(len(messages) - size, seconds), "batch": size}
    finally:
        system.close()


def forks_by_history(
    name: str, root: Path, histories: Sequence[int], repeats: int
) -> dict[str, float]:
    """Median seconds of a fork at entry H of a thread of H entries, for each H."""
    system = _open(name, root)
    out: dict[str, float] = {}
    try:
        messages = small_messages(max(histories), "h")
        system.create_thread("deep", messages[0].created_at, "history")
        ids: list[str] = []
        batch = BATCH in system.features
        at = 0
        while at < len(messages):  # chunks of 200 that end at every history measured
            end = min([at + 200] + [h for h in histories if h > at])
            chunk = messages[at:end]
            at = end
            if batch:
                ids += system.append_batch("deep", chunk)
            else:
                ids += [system.append("deep", msg) for msg in chunk]
            for history in histories:
                if len(ids) == history:
                    samples = []
                    prefix = ids[:history]  # sliced outside the clock: tens of us at H=10,000
                    for k in range(repeats):
                        name = f"f{history}-{k}"
                        start = time.perf_counter()
                        system.fork("deep", prefix, name, wl.EPOCH + k)
                        samples.append(time.perf_counter() - start)
                    out[str(history)] = statistics.median(samples)
        return out
    finally:
        system.close()


def wal_pages(root: Path, batch_size: int) -> dict[str, float | None]:
    """Pages the local store (durable=False) writes to its WAL per append, per fork at
    history 1,000 and per batch: the WAL is emptied, a few commits run (fewer than make
    the store checkpoint on its own), and its growth is divided by the frame size. A
    figure is None if a checkpoint ran meanwhile (it may have restarted the WAL)."""
    system = _open("cas-nd", root)
    try:
        store = system.j.store  # type: ignore[attr-defined]
        db = store.db
        frame = int(db.row("PRAGMA page_size")[0]) + 24
        wal = Path(f"{db.path}-wal")
        messages = small_messages(1_100 + 3 * batch_size, "p")
        system.create_thread("t", messages[0].created_at, "pages")
        ids: list[str] = []
        for at in range(0, 1_000, 200):
            ids += system.append_batch("t", messages[at : at + 200])
        singles = iter(messages[1_000:1_100])
        batches = iter(
            messages[at : at + batch_size] for at in range(1_100, len(messages), batch_size)
        )
        forks = iter(range(1_000))

        def fork() -> None:
            system.fork("t", ids, f"f{next(forks)}", wl.EPOCH)

        def per_commit(operation: Callable[[], object], count: int, warm: int = 3) -> float | None:
            for _ in range(warm):  # warm up: the pages just emptied are read back first
                operation()
            db.connection().execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
            db._writes, db._pages = 1, 0  # no background checkpoint asked for meanwhile
            before, checkpoints = wal.stat().st_size, db.checkpointer.checkpoints
            for _ in range(count):
                operation()
            grown = wal.stat().st_size - max(before, 32)  # 32: the WAL header
            if db.checkpointer.checkpoints != checkpoints:
                return None
            return grown / frame / count

        return {
            "append": per_commit(lambda: system.append("t", next(singles)), 40),
            "fork": per_commit(fork, 40),
            "batch": per_commit(lambda: system.append_batch("t", next(batches)), 2, warm=1),
            "batch_size": batch_size,
        }
    finally:
        system.close()


RESTART_EVERY = 100
"""Replayed transactions between two (untimed) checkpoints that start the WAL over: the
store restarts its WAL about every 1,000 frames (``RESTART_FRAMES``), so its commits
overwrite the WAL in place, which a durable commit syncs faster than a WAL that grows."""


def sql_floor(root: Path, messages: Sequence[wl.Msg], durable: bool) -> dict[str, Any]:
    """What the store's own SQL costs beside a whole operation: single appends, forks
    and batches on cas-journal (each operation timed), each write transaction they ran
    captured, then replayed alone in the same order on a copy of the store as it was
    before them, through ``sqlite3`` with the store's connection settings and its own
    statements (``apply_change``) and nothing else: no journal, no backend Python (the
    WAL is started over every ``RESTART_EVERY`` transactions, untimed).

    ``<op>`` is the median operation, ``<op>_sql`` the median replayed transaction (the
    most a leaner Python layer over this schema could reach), ``caller_entry`` the
    seconds per entry the benchmark's caller spends building the pydantic ``Entry``
    models it passes (inside every cas-journal append figure).
    """
    from bench.systems.cas import CasSystem
    from cas_journal.backends.local.commits import apply_change, now_micros
    from cas_journal.backends.local.database import connect

    name = "cas" if durable else "cas-nd"
    singles, batch_size = messages[: len(messages) // 2], 100
    batched = messages[len(messages) // 2 :]
    system = _open(name, root / "store")
    system.create_thread("t", messages[0].created_at, "floor")
    for msg in singles[:10]:
        system.append("t", msg)
    system.close()
    shutil.copytree(root / "store", root / "copy")  # the store before the timed operations
    system = _open(name, root / "store")
    captured: list[tuple[str, Any]] = []
    timings: dict[str, list[float]] = {"append": [], "fork": [], "batch": []}
    phase = ""  # the operation running (what ``capture`` files a transaction under)

    try:
        committer = system.j.store.committer  # type: ignore[attr-defined]
        submit = committer.submit

        def capture(change: Any) -> bool:
            captured.append((phase, change))
            return bool(submit(change))

        committer.submit = capture
        leaf = ""
        phase = "append"
        for msg in singles[10:]:
            with stopwatch(timings[phase]):
                leaf = system.append("t", msg)
        phase = "fork"
        for k in range(50):
            with stopwatch(timings[phase]):
                system.fork("t", [leaf], f"f{k}", wl.EPOCH + k)
        phase = "batch"
        for at in range(0, len(batched) - batch_size + 1, batch_size):
            chunk = batched[at : at + batch_size]
            with stopwatch(timings[phase]):
                system.append_batch("t", chunk)
    finally:
        system.close()
    conn = connect(root / "copy" / "store.db", durable)
    replayed: dict[str, list[float]] = {}
    try:
        cursor = conn.cursor()
        for done, (op, change) in enumerate(captured):
            if done % RESTART_EVERY == 0:  # untimed: the WAL starts over, as the store's does
                conn.execute("PRAGMA wal_checkpoint(RESTART)").fetchall()
            start = time.perf_counter()
            cursor.execute("BEGIN IMMEDIATE")
            applied = apply_change(cursor, change, now_micros())
            cursor.execute("COMMIT")
            replayed.setdefault(op, []).append(time.perf_counter() - start)
            if not applied or not change.result:
                raise RuntimeError(f"a replayed {op} did not apply as it did in the store")
    finally:
        conn.close()
    out: dict[str, Any] = {"batch_size": batch_size}
    for op, samples in timings.items():
        out[op] = statistics.median(samples)
        out[f"{op}_transactions"] = len(replayed.get(op, [])) / len(samples)
        if replayed.get(op):
            out[f"{op}_sql"] = statistics.median(replayed[op])
    start = time.perf_counter()
    for msg in batched:
        CasSystem._entry("t", msg)
    out["caller_entry"] = (time.perf_counter() - start) / len(batched)
    return out


def first_page(name: str, root: Path, threads: int, repeats: int) -> dict[str, float]:
    """Median seconds for the newest 50 of ``threads`` small threads (warm)."""
    system = _open(name, root)
    try:
        scale = wl.Scale(**{**wl.SCALES["small"].__dict__, "many_threads": threads})
        start = time.perf_counter()
        system.bulk_threads(wl.small_threads(scale))
        build = time.perf_counter() - start
        system.list_page(50)
        samples = []
        for _ in range(repeats):
            start = time.perf_counter()
            page = system.list_page(50)
            samples.append(time.perf_counter() - start)
        assert len(page) == 50
        return {"median": statistics.median(samples), "build_seconds": build}
    finally:
        system.close()


def compacted_bytes(scale: str, root: Path, pythonpath: str | None = None) -> dict[str, Any]:
    """Forks and checkpoint workloads on cas-journal (durable=False), then pack + gc:
    bytes on disk (apparent and du) against the workloads' logical bytes. With
    ``pythonpath``, the same in a subprocess importing cas-journal from there."""
    if pythonpath is not None:
        env = {**os.environ, "PYTHONPATH": f"{pythonpath}{os.pathsep}{Path.cwd()}"}
        done = subprocess.run(
            [sys.executable, "-m", "bench.store_bench", "compacted", scale, str(root)],
            env=env,
            capture_output=True,
            text=True,
            check=False,
            cwd=Path(__file__).parent.parent,
        )
        if done.returncode != 0:
            return {"error": done.stderr.strip()[-800:]}
        result: dict[str, Any] = json.loads(done.stdout)
        return result
    workload_scale = wl.SCALES[scale]
    out: dict[str, Any] = {}
    workloads = (("forks", drivers.run_forks), ("checkpoints", drivers.run_checkpoints))
    for workload, driver in workloads:
        path = root / workload
        system = _open("cas-nd", path)
        try:
            result = driver(system, workload_scale, lambda op, thread: (0.0, 0))
        finally:
            system.close()
        if workload == "forks":
            logical = sum(result["logical_at"].values()) and max(result["logical_at"].values())
        else:
            logical = _checkpoint_logical(workload_scale)
        out[workload] = {
            "logical": logical,
            "stored": result["stored"],
            "compacted": result.get("compacted"),
            "ratio": (result["compacted"]["bytes"] / logical) if result.get("compacted") else None,
            "ratio_du": (result["compacted"]["du"] / logical) if result.get("compacted") else None,
        }
        shutil.rmtree(path, ignore_errors=True)
    return out


def _checkpoint_logical(scale: wl.Scale) -> int:
    """Every saved iteration's full message list and system prompt, as canonical JSON."""
    prompt = len(wl.checkpoint_system_prompt().encode())
    total = 0
    messages: list[dict[str, Any]] = []
    for step in wl.checkpoint_steps(scale):
        messages.extend(step.new_messages)
        total += prompt + sum(
            len(json.dumps(m, sort_keys=True, separators=(",", ":")).encode()) for m in messages
        )
    return total


class _Section(Protocol):
    """One section's measurement, called with no arguments.

    A Protocol rather than ``Callable[[], Any]``: the lambdas passed bind loop variables as
    default arguments, and mypy infers such a lambda only without a Callable context.
    """

    def __call__(self) -> Any: ...


def _section(label: str, fn: _Section, errors: dict[str, str]) -> Any:
    log(f"[store] {label} ...")
    start = time.perf_counter()
    try:
        result = fn()
    except Exception as exc:  # one failing peer never stops the others
        errors[label] = f"{type(exc).__name__}: {exc}"
        log(f"[store] {label}: ERROR {errors[label][:200]}")
        return None
    log(f"[store] {label}: {time.perf_counter() - start:.1f} s")
    return result


def run(
    scale: str,
    data_dir: Path,
    format1: str | None = None,
    sections: Sequence[str] = SECTIONS,
    systems: Sequence[str] | None = None,
) -> dict[str, Any]:
    """The store benchmark (the given sections, for the given systems or all); returns
    the results document."""
    sizes = SIZES[scale]

    def chosen(names: Sequence[str]) -> tuple[str, ...]:
        return tuple(name for name in names if systems is None or name in systems)

    data_dir.mkdir(parents=True, exist_ok=True)
    errors: dict[str, str] = {}
    doc: dict[str, Any] = {
        "scale": scale,
        "machine": machine_info(data_dir),
        "errors": errors,
        "raw": {},
        "single": {},
        "single_deep": {},
        "threaded": {},
        "batched": {},
        "forks": {},
        "first_page": {},
        "compacted": {},
        "wal": {},
        "floor": {},
    }
    started = time.perf_counter()

    def scratch(name: str) -> Path:
        path = data_dir / name
        shutil.rmtree(path, ignore_errors=True)
        return path

    if "raw" in sections:
        doc["raw"] = _section("raw write+fsync", lambda: raw_limits(data_dir), errors)
    small = small_messages(sizes["appends"])
    deep = list(
        wl.deep_entries(wl.Scale(**{**wl.SCALES["small"].__dict__, "deep_entries": sizes["deep"]}))
    )
    for name in chosen(APPEND_SYSTEMS) if "single" in sections else ():
        count = sizes["git"] if name == "git" else len(small)
        doc["single"][name] = _section(
            f"single appends {name}",
            lambda name=name, count=count: single_appends(
                name, scratch(f"single-{name}"), small[:count]
            ),
            errors,
        )
        deep_count = min(sizes["git"], len(deep)) if name == "git" else len(deep)
        doc["single_deep"][name] = _section(
            f"single appends (deep messages) {name}",
            lambda name=name, deep_count=deep_count: single_appends(
                name, scratch(f"deep-{name}"), deep[:deep_count]
            ),
            errors,
        )
    # the raw limit again, right beside the durable runs it is compared with
    if "raw" in sections:
        doc["raw_after"] = _section("raw write+fsync again", lambda: raw_limits(data_dir), errors)
    for name in chosen(THREADED_SYSTEMS) if "threaded" in sections else ():
        doc["threaded"][name] = _section(
            f"4 threads {name}",
            lambda name=name: threaded_appends(name, scratch(f"threads-{name}"), sizes["threaded"]),
            errors,
        )
    for name in chosen(APPEND_SYSTEMS) if "batched" in sections else ():
        if name == "git":
            continue
        doc["batched"][name] = _section(
            f"batched {name}",
            lambda name=name: batched_appends(
                name, scratch(f"batch-{name}"), sizes["batches"], wl.SCALES[scale].batch_size
            ),
            errors,
        )
    for name in chosen(FORK_SYSTEMS) if "forks" in sections else ():
        histories = (
            sizes["history"] if name != "git" else tuple(h for h in sizes["history"] if h <= 1_000)
        )
        doc["forks"][name] = _section(
            f"forks {name}",
            lambda name=name, histories=histories: forks_by_history(
                name, scratch(f"forks-{name}"), histories, sizes["forks"]
            ),
            errors,
        )
    for name in chosen(LIST_SYSTEMS) if "first_page" in sections else ():
        doc["first_page"][name] = _section(
            f"first page {name}",
            lambda name=name: first_page(
                name, scratch(f"list-{name}"), sizes["threads"], sizes["pages"]
            ),
            errors,
        )
    if "compacted" in sections:
        from cas_journal.backends.local import FORMAT_VERSION

        doc["compacted"][f"format {FORMAT_VERSION}"] = _section(
            "bytes after pack+gc", lambda: compacted_bytes(scale, scratch("compacted")), errors
        )
    if format1 and "compacted" in sections:
        doc["compacted"]["format 1"] = _section(
            "bytes after pack+gc (format 1)",
            lambda: compacted_bytes(scale, scratch("compacted-1"), format1),
            errors,
        )
    if "wal" in sections and (systems is None or "cas-nd" in systems):
        doc["wal"] = _section(
            "pages per commit",
            lambda: wal_pages(scratch("wal"), min(100, wl.SCALES[scale].batch_size)),
            errors,
        )
    for name in chosen(("cas", "cas-nd")) if "floor" in sections else ():
        doc["floor"][name] = _section(
            f"the store's own SQL {name}",
            functools.partial(sql_floor, scratch(f"floor-{name}"), small, name == "cas"),
            errors,
        )
    doc["machine"]["loadavg_end"] = os.getloadavg()
    doc["total_seconds"] = time.perf_counter() - started
    shutil.rmtree(data_dir, ignore_errors=True)
    return doc


# -- report -------------------------------------------------------------------------------


TIMES = "\u00d7"


def _rate(value: float | None) -> str:
    return "n/a" if not value else f"{value:,.0f}/s"


def _time(seconds: float | None) -> str:
    if seconds is None:
        return "n/a"
    if seconds < 1e-3:
        return f"{seconds * 1e6:.0f} µs"
    return f"{seconds * 1e3:.2f} ms"


def _get(doc: dict[str, Any], *keys: str) -> Any:
    value: Any = doc
    for key in keys:
        if not isinstance(value, dict) or key not in value:
            return None
        value = value[key]
    return value


def report(doc: dict[str, Any]) -> str:
    """The results as Markdown tables (ratios against the same run's peers)."""
    machine = doc["machine"]
    label = f"{machine['cores']}-core VM" if machine.get("cores") else "this machine"
    lines = [
        f"# Store benchmark ({doc['scale']} scale)",
        "",
        f"Absolute figures: {label} ({machine['cpu']}), {machine['bench_fs']}, Python "
        f"{machine['python']}, SQLite {machine['sqlite']}, load average "
        f"{machine['loadavg_start'][0]:.1f} at start and {machine['loadavg_end'][0]:.1f} at "
        f"the end ({machine['time']}). Every figure comes from the same run.",
        "",
    ]
    raw = doc.get("raw") or {}
    raw_after = doc.get("raw_after") or {}
    fsync = (
        statistics.median([v for v in (raw.get("write_fsync"), raw_after.get("write_fsync")) if v])
        if (raw.get("write_fsync") or raw_after.get("write_fsync"))
        else None
    )
    lines += [
        f"Raw limit: one 300-byte write + fsync {_time(fsync)} "
        f"(+ fdatasync {_time(raw.get('write_fdatasync'))}), i.e. "
        f"{_rate(1 / fsync if fsync else None)} at most for anything that syncs per write; "
        f"a minor page fault (the first touch of a page of memory) {_time(raw.get('page_fault'))}.",
        "",
        "## Single appends (one entry per call)",
        "",
        "| system | small messages | per append | CPU per append | deep-workload messages "
        "| ratio to cas (same durability) |",
        "|---|---|---|---|---|---|",
    ]
    for name in APPEND_SYSTEMS:
        small = _get(doc, "single", name) or {}
        deep = _get(doc, "single_deep", name) or {}
        peer = "cas" if name in ("cas", "sqlite", "jsonl-fsync", "git") else "cas-nd"
        ours = _get(doc, "single", peer, "per_s")
        ratio = f"{TIMES}{ours / small['per_s']:.2f}" if ours and small.get("per_s") else ""
        lines.append(
            f"| {name} | {_rate(small.get('per_s'))} | {_time(small.get('median'))} | "
            f"{_time(small.get('cpu'))} | {_rate(deep.get('per_s'))} | {ratio} |"
        )
    durable = _get(doc, "single", "cas", "median")
    if durable and fsync:
        lines += ["", f"Durable append vs one raw write+fsync: {TIMES}{durable / fsync:.2f}."]
    lines += [
        "",
        "## Four threads of one process appending durably, each to its own thread",
        "",
        "| system | appends/s | vs one thread | commits per transaction |",
        "|---|---|---|---|",
    ]
    for name in THREADED_SYSTEMS:
        got = _get(doc, "threaded", name) or {}
        one = _get(doc, "single", name, "per_s")
        share = f"{got['appends'] / got['transactions']:.2f}" if got.get("transactions") else ""
        versus = f"{TIMES}{got['per_s'] / one:.2f}" if one and got.get("per_s") else ""
        lines.append(f"| {name} | {_rate(got.get('per_s'))} | {versus} | {share} |")
    lines += ["", "## Batched appends", "", "| system | entries/s |", "|---|---|"]
    for name, got in (doc.get("batched") or {}).items():
        lines.append(f"| {name} | {_rate((got or {}).get('per_s'))} |")
    histories = sorted({int(h) for got in (doc.get("forks") or {}).values() if got for h in got})
    lines += [
        "",
        "## Fork at history H",
        "",
        "| system | " + " | ".join(f"H={h:,}" for h in histories) + " |",
        "|---|" + "---|" * len(histories),
    ]
    for name, got in (doc.get("forks") or {}).items():
        got = got or {}
        lines.append(f"| {name} | " + " | ".join(_time(got.get(str(h))) for h in histories) + " |")
    lines += ["", "## First page of 50 threads", ""]
    lines += ["| system | threads | first page |", "|---|---|---|"]
    threads = SIZES[doc["scale"]]["threads"]
    for name, got in (doc.get("first_page") or {}).items():
        lines.append(f"| {name} | {threads:,} | {_time((got or {}).get('median'))} |")
    lines += [
        "",
        "## Bytes after pack + gc (cas-journal, durable=False)",
        "",
        "| code | workload | logical | on disk after | ratio | du after | du ratio |",
        "|---|---|---|---|---|---|---|",
    ]
    for code, got in (doc.get("compacted") or {}).items():
        for workload, row in (got or {}).items():
            if not isinstance(row, dict) or not row.get("compacted"):
                continue
            lines.append(
                f"| {code} | {workload} | {row['logical']:,} | {row['compacted']['bytes']:,} | "
                f"{row['ratio']:.3f} | {row['compacted']['du']:,} | {row['ratio_du']:.3f} |"
            )
    wal = doc.get("wal") or {}
    if wal:
        lines += [
            "",
            "## Pages per commit (cas-journal, durable=False, WAL frames)",
            "",
            f"| append | fork (H=1,000) | batch of {wal.get('batch_size')} |",
            "|---|---|---|",
            "| "
            + " | ".join(
                "n/a" if wal.get(key) is None else f"{wal[key]:.1f}"
                for key in ("append", "fork", "batch")
            )
            + " |",
        ]
    floor: dict[str, Any] = doc.get("floor") or {}
    if floor:
        first: dict[str, Any] = next(iter(floor.values())) or {}
        lines += [
            "",
            "## The store's own SQL beside each operation",
            "",
            "Each operation's write transaction replayed alone (same statements, same "
            "connection settings, same order, on a copy of the store): what SQLite and the "
            "sync cost for this schema, the most any Python layer over it could reach. The "
            "batch is per entry (batches of "
            f"{first.get('batch_size', 100)}).",
            "",
            "| system | append | its SQL | fork | its SQL | batch, per entry | its SQL "
            "| caller's Entry models, per entry |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for name, got in floor.items():
            got = got or {}
            size = got.get("batch_size") or 1
            per_entry = {
                key: got[key] / size if got.get(key) else None for key in ("batch", "batch_sql")
            }
            lines.append(
                f"| {name} | {_time(got.get('append'))} | {_time(got.get('append_sql'))} | "
                f"{_time(got.get('fork'))} | {_time(got.get('fork_sql'))} | "
                f"{_time(per_entry['batch'])} | {_time(per_entry['batch_sql'])} | "
                f"{_time(got.get('caller_entry'))} |"
            )
    if doc.get("errors"):
        lines += ["", "Errors:", ""] + [f"- {k}: {v}" for k, v in doc["errors"].items()]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":  # the format-1 subprocess of ``compacted_bytes``
    if sys.argv[1:2] == ["compacted"]:
        print(json.dumps(compacted_bytes(sys.argv[2], Path(sys.argv[3]))))
