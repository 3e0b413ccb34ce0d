"""The RESULTS.md sections, one function per workload."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .report import (
    KEEPS_HISTORY,
    Cell,
    Runs,
    fmt_bytes,
    fmt_rate,
    fmt_time,
    get,
    ratio,
    spread,
    table,
)


def _cell(*keys: str) -> Cell:
    """The column getter reading ``m[keys[0]][keys[1]]...`` (None where absent)."""
    return lambda m: get(m, *keys)


def _median(*keys: str) -> Cell:
    return lambda m: get(m, *keys, "median")


def objects_section(results: dict[str, Any]) -> list[str]:
    """Object layer (issue 2): LocalStore put/get beside the raw limits of the same run."""
    obj = results.get("objects")
    if not obj:
        return []
    lines = ["## Object layer: LocalStore put/get vs raw limits", ""]
    if "error" in obj:
        return [*lines, f"error: {obj['error']}", ""]
    lines += [
        "Bodies are distinct generated text of exactly the given size. *Raw* is the lower "
        "bound for the same bytes measured in the same run: BLAKE3 + zstd level 3 of the "
        "canonical form in memory, plus create + write + rename of the compressed frame into "
        "a fan-out directory (with fsync of the file and of the directory for the durable "
        "row), or open + read + zstd decompress + BLAKE3 verify for get. The raw file "
        "operations run interleaved with the store's, op by op (this disk's speed swings "
        "several-fold between runs). "
        "**ours \u00f7 raw** compares throughputs (1.0 = at the raw limit).",
        "",
        "| body | operation | cas-journal per op | cas-journal ops/s | raw per op | raw ops/s "
        "| ours \u00f7 raw |",
        "|---|---|---|---|---|---|---|",
    ]
    for label, row in obj["sizes"].items():
        hz = row["hash_zstd"]["median"]
        uv = row["unzstd_verify"]["median"]
        specs = [
            ("put, durable=False", "put_nd", hz + row["write_rename"]["median"]),
            ("put, durable=True", "put_d", hz + row["write_fsync_rename_dirsync"]["median"]),
            ("get, durable=False", "get_nd", uv + row["read_file"]["median"]),
            ("get, durable=True", "get_d", uv + row["read_file"]["median"]),
        ]
        for name, key, raw in specs:
            ours = row[key]["median"]
            lines.append(
                f"| {label} | {name} | {spread(row[key])} | {fmt_rate(1 / ours)} | "
                f"{fmt_time(raw)} | {fmt_rate(1 / raw)} | {raw / ours:.2f} |"
            )
    lines += [
        "",
        "Raw limits measured in the same run (median [p10\u2013p90] per operation; frames are the "
        "zstd-compressed bodies):",
        "",
        "| body | hash+zstd in memory | unzstd+verify | write+rename | write+fsync+rename "
        "| write+fsync+rename+dir fsync | read file | append to open file "
        "| /dev/shm write+rename | /dev/shm with fsyncs |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for label, row in obj["sizes"].items():
        cells = [
            spread(row.get(k))
            for k in (
                "hash_zstd",
                "unzstd_verify",
                "write_rename",
                "write_fsync_rename",
                "write_fsync_rename_dirsync",
                "read_file",
                "append_open_file",
                "shm_write_rename",
                "shm_write_fsync_rename_dirsync",
            )
        ]
        head = f"{label} (zstd \u00d7{row['frame_ratio']:.2f})"
        lines.append(f"| {head} | " + " | ".join(cells) + " |")
    return [*lines, ""]


def forks_section(runs: Runs) -> list[str]:
    """Workload 1: stored bytes vs forks, fork and append latency."""
    systems = runs.systems("forks")
    if not systems:
        return []
    first = next((runs.ok("forks", s) for s in systems if runs.ok("forks", s)), None)
    points = sorted(int(k) for k in (first or {}).get("snapshots", {}))
    lines = [
        "## Workload 1: forks",
        "",
        "A base thread (shared ~4 KB system prompt first), then forks at random points of the "
        "base or of earlier forks, each fork adding entries; about half the tool results are "
        "verbatim reads of the same repository files. Stored bytes = sum of file sizes "
        "(apparent); `du` = allocated blocks (4 KiB per small file on ext4).",
        "",
    ]
    cols: list[tuple[str, Cell, Callable[[Any], str]]] = [
        (f"after {p} forks", _cell("snapshots", str(p), "bytes"), fmt_bytes) for p in points
    ]
    cols += [
        ("du at end", lambda m: get(m, "stored", "du"), fmt_bytes),
        ("after own compaction", lambda m: get(m, "compacted", "bytes"), fmt_bytes),
        ("compaction time", lambda m: get(m, "compact_seconds"), fmt_time),
    ]
    lines += table(
        runs,
        "forks",
        cols,
        lambda s, m: [runs.by[("forks", s)].get("compaction", "")],
        ["compaction step"],
    )
    if first:
        lines.append(
            "| logical (every thread's path, payload bytes only) | | "
            + " | ".join(fmt_bytes(first["logical_at"].get(str(p))) for p in points)
            + " | | | | |"
        )
    lines += ["", "Latencies in the same run:", ""]
    lines += table(
        runs,
        "forks",
        [
            ("append", _median("append"), fmt_time),
            ("fork", _median("fork"), fmt_time),
            ("read last fork's path (warm)", _median("read_path_warm"), fmt_time),
            ("read every path (warm)", _median("read_all_paths_warm"), fmt_time),
            ("read every path (cold)", _median("read_all_paths_cold"), fmt_time),
            ("every path after compaction (warm)", _median("read_all_paths_warm_packed"), fmt_time),
            ("every path after compaction (cold)", _median("read_all_paths_cold_packed"), fmt_time),
        ],
    )
    errors = [
        f"- {s}: compaction failed: {m['compact_error']}"
        for s in systems
        if (m := runs.ok("forks", s)) and "compact_error" in m
    ]
    return [*lines, "", *errors, ""]


def deep_section(runs: Runs) -> list[str]:
    """Workload 2: one long thread."""
    if not runs.systems("deep"):
        return []
    lines = [
        "## Workload 2: one deep thread",
        "",
        "Single appends one at a time; batched = a second store, the same number of "
        "different entries in batches (cas-journal `Journal.batch`, SQLite one transaction, "
        "JSONL one write + one fsync, seed layout one write); systems without batching show "
        "n/a. A path read is the system's read of the whole path *plus* summing the length "
        "of every entry's content, the same work for every system. 'Read alone' times "
        "the read without that loop (cas-journal: `Journal.path`; SQLite: fetching the "
        "rows; JSONL: parsing every line), after compaction, warm.",
        "",
    ]
    lines += table(
        runs,
        "deep",
        [
            ("append (single)", _median("append"), fmt_time),
            ("appends/s", lambda m: get(m, "appends_per_s"), fmt_rate),
            ("batched appends/s", lambda m: get(m, "batched_appends_per_s"), fmt_rate),
            ("path read warm", _median("read_path_warm"), fmt_time),
            ("path read cold", _median("read_path_cold"), fmt_time),
            ("path read after compaction (warm)", _median("read_path_warm_packed"), fmt_time),
            ("path read after compaction (cold)", _median("read_path_cold_packed"), fmt_time),
            ("read alone after compaction (warm)", _median("fetch_path_warm_packed"), fmt_time),
            ("stored", lambda m: get(m, "stored", "bytes"), fmt_bytes),
            ("du", lambda m: get(m, "stored", "du"), fmt_bytes),
            ("after compaction", lambda m: get(m, "compacted", "bytes"), fmt_bytes),
        ],
    )
    first = next((runs.ok("deep", s) for s in runs.systems("deep") if runs.ok("deep", s)), {})
    hist = sorted(int(h) for h in (first or {}).get("fork_by_history", {}))
    lines += ["", "Fork latency vs history length (fork at entry H of the deep thread):", ""]
    lines += table(
        runs,
        "deep",
        [(f"H={h:,}", _median("fork_by_history", str(h)), fmt_time) for h in hist],
    )
    return [*lines, ""]


def checkpoints_section(runs: Runs) -> list[str]:
    """Workload 3: a run saved every iteration."""
    if not runs.systems("checkpoints"):
        return []
    lines = [
        "## Workload 3: checkpoints",
        "",
        "One run; every iteration adds 3 Anthropic-style messages (~2 KB each) to the "
        "cumulative list and saves. Save latency for LangGraph is one `graph.invoke` with "
        '`durability="sync"` (graph overhead included).',
        "",
    ]
    lines += table(
        runs,
        "checkpoints",
        [
            ("save", _median("save"), fmt_time),
            ("save, first 10", _median("save_first10"), fmt_time),
            ("save, last 10", _median("save_last10"), fmt_time),
            ("save, iterations 1-50", _median("save_1_50"), fmt_time),
            ("save, iterations 150-200", _median("save_150_200"), fmt_time),
            ("load newest (warm)", _median("load_warm"), fmt_time),
            ("load newest (cold)", _median("load_cold"), fmt_time),
            ("load after compaction (warm)", _median("load_warm_packed"), fmt_time),
            ("load after compaction (cold)", _median("load_cold_packed"), fmt_time),
            ("total bytes", lambda m: get(m, "stored", "bytes"), fmt_bytes),
            ("after compaction", lambda m: get(m, "compacted", "bytes"), fmt_bytes),
        ],
        lambda s, m: [KEEPS_HISTORY.get(s, "yes"), str(m.get("checkpoint_rows", ""))],
        ["keeps every iteration", "checkpoint rows"],
    )
    return [*lines, ""]


def many_section(runs: Runs) -> list[str]:
    """Workload 4: many small threads."""
    if not runs.systems("many"):
        return []
    lines = [
        "## Workload 4: many threads",
        "",
        "Many small threads (question + answer each), created oldest first, no fsync (bulk "
        "load). First page = 50 threads, newest first (JSONL: by file mtime; git: by head "
        "commit time). Open = thread metadata + its path.",
        "",
    ]
    lines += table(
        runs,
        "many",
        [
            ("first page warm", _median("list_warm"), fmt_time),
            ("first page cold", _median("list_cold"), fmt_time),
            ("open thread warm", _median("open_warm"), fmt_time),
            ("open thread cold", _median("open_cold"), fmt_time),
            ("build", lambda m: get(m, "build_seconds"), fmt_time),
            ("stored", lambda m: get(m, "stored", "bytes"), fmt_bytes),
            ("du", lambda m: get(m, "stored", "du"), fmt_bytes),
            (
                "files",
                lambda m: get(m, "stored", "files"),
                lambda v: "n/a" if v is None else f"{v:,}",
            ),
        ],
        lambda s, m: [str(m.get("threads", ""))],
        ["threads"],
        durable_text="no (bulk load)",
    )
    return [*lines, ""]


def rss_section(runs: Runs) -> list[str]:
    """Peak RSS of each worker process (interpreter + workload + system)."""
    workloads = ["forks", "deep", "checkpoints", "many"]
    if not runs.by:
        return []
    names = sorted({s for (_, s) in runs.by}, key=lambda s: (s == "baseline", s))
    lines = [
        "## Peak RSS",
        "",
        "Peak resident memory of each worker process (VmHWM of /proc/self/status): Python, the "
        "workload generator and the system. `baseline` runs the workload with no storage.",
        "",
        "| system | " + " | ".join(workloads) + " |",
        "|---|" + "---|" * len(workloads),
    ]
    for s in names:
        cells = []
        for w in workloads:
            run = runs.by.get((w, s))
            cas = runs.by.get((w, "cas" if (w, "cas") in runs.by else "cas-nd"))
            if run is None or "peak_rss" not in run:
                cells.append("")
                continue
            cell = fmt_bytes(run["peak_rss"])
            if cas and not s.startswith("cas") and s != "baseline" and "peak_rss" in cas:
                cell += ratio(cas["peak_rss"], run["peak_rss"])
            cells.append(cell)
        lines.append(f"| {s} | " + " | ".join(cells) + " |")
    return [*lines, ""]


COLD_READS = (
    ("forks", "read_all_paths_cold", "every path of the forks workload"),
    ("forks", "read_all_paths_cold_packed", "the same, packed"),
    ("deep", "read_path_cold", "path of the deep thread"),
    ("deep", "read_path_cold_packed", "the same, packed"),
    ("checkpoints", "load_cold", "load newest checkpoint"),
    ("checkpoints", "load_cold_packed", "the same, packed"),
)
"""The new-process reads whose page faults ``faults_section`` shows."""


def faults_section(runs: Runs) -> list[str]:
    """Minor page faults of the new-process reads: the first touches of the memory a read
    builds (on this VM each costs several microseconds, beside the work that fills it)."""
    workloads = {workload for workload, _, _ in COLD_READS}
    names = sorted({s for (w, s) in runs.by if w in workloads})
    names = [s for s in names if s != "baseline"]
    rows = []
    for workload, key, what in COLD_READS:
        cells = [get(runs.ok(workload, s), key, "faults") for s in names]
        if any(cell is not None for cell in cells):
            rows.append(
                f"| {workload}: {what} | "
                + " | ".join("" if cell is None else f"{cell:,.0f}" for cell in cells)
                + " |"
            )
    if not rows:
        return []
    return [
        "## Page faults of the new-process reads",
        "",
        "Minor page faults a new process took to open the store and do the read (median of "
        "the cold runs above): each is a first touch of a page of memory, so they count what "
        "the read builds and keeps, whatever the code that fills it.",
        "",
        "| read | " + " | ".join(names) + " |",
        "|---|" + "---|" * len(names),
        *rows,
        "",
    ]


def errors_section(runs: Runs) -> list[str]:
    """Runs that failed, with the first line of their error."""
    bad = [r for r in runs.by.values() if "error" in r]
    if not bad:
        return []
    return (
        ["## Errors", ""]
        + [f"- {r['workload']} / {r['system']}: {r['error'][:300]}" for r in bad]
        + [""]
    )


SYSTEM_NOTES = {
    "cas": "entries/payloads/thread states as BLAKE3-named zstd objects; fork = ref copy; "
    "checkpoints: one segment per save (its new messages inline, the rest kept by reference)",
    "cas-nd": "as cas, no fsync",
    "jsonl": "one .jsonl per thread, fork copies prefix lines; checkpoints: one line per "
    "iteration with the full list",
    "jsonl-fsync": "as jsonl, fsync after every append",
    "seedfs": "the Go seed's layout: dir per thread, entries.jsonl (entry JSON with raw + "
    "raw_hash) + thread.json rewritten per append; fork rewrites the path under new "
    "ids; checkpoints: one JSON file per run, overwritten",
    "sqlite": "threads + entries tables, fork copies rows; checkpoints: one row per iteration "
    "with the full list",
    "sqlite-nd": "as sqlite, synchronous=OFF",
    "git": "dulwich: commit per entry with a one-blob tree, branch per thread, fork = new "
    "ref; checkpoints: commit per iteration, one blob per message",
    "langgraph": "StateGraph, messages channel (list + operator.add), SqliteSaver",
    "langgraph-delta": "the same graph, messages as DeltaChannel (beta)",
    "baseline": "stores nothing (memory and time of the workload itself)",
}


def systems_section(runs: Runs) -> list[str]:
    """What each system stores and how it is maintained."""
    seen: dict[str, dict[str, Any]] = {}
    for (_, system), run in runs.by.items():
        if "label" in run:
            seen.setdefault(system, run)
    if not seen:
        return []
    lines = [
        "## Systems",
        "",
        "| system | what | durable | compaction step | layout |",
        "|---|---|---|---|---|",
    ]
    order = {name: i for i, name in enumerate(SYSTEM_NOTES)}
    for system in sorted(seen, key=lambda s: order.get(s, 99)):
        run = seen[system]
        lines.append(
            f"| {system} | {run['label']} | {'yes' if run.get('durable') else 'no'} "
            f"| {run.get('compaction', '')} | {SYSTEM_NOTES.get(system, '')} |"
        )
    return [*lines, ""]


def journal_goals_section(runs: Runs) -> list[str]:
    """The journal's read and checkpoint goals, each measured figure beside its target."""
    rows: list[tuple[str, str, str]] = []

    def med(workload: str, system: str, key: str) -> float | None:
        m = runs.ok(workload, system)
        value = get(m, key, "median") if m else None
        return value if isinstance(value, int | float) else None

    def add(goal: str, value: str, verdict: bool | None) -> None:
        rows.append((goal, value, "n/a" if verdict is None else ("met" if verdict else "MISSED")))

    def check(
        goal: str,
        value: float | None,
        target: float,
        fmt: Callable[[Any], str] = fmt_time,
        at_most: bool = True,
    ) -> None:
        verdict = None if value is None else (value <= target if at_most else value >= target)
        add(goal, fmt(value), verdict)

    for system, target, label in (("cas-nd", 2e-3, "durable=False"), ("cas", 3e-3, "durable")):
        check(
            f"checkpoint save, iterations 150-200, {label} (<= {fmt_time(target)})",
            med("checkpoints", system, "save_150_200"),
            target,
        )
        early, late = (med("checkpoints", system, k) for k in ("save_1_50", "save_150_200"))
        flat = late / early if early and late else None
        check(
            f"save cost flat, {label}: median 150-200 / median 1-50 (<= 1.5)",
            flat,
            1.5,
            lambda r: "n/a" if r is None else f"{r:.2f}",
        )
    saver, ours = med("checkpoints", "langgraph", "save"), med("checkpoints", "cas", "save")
    check(
        "save vs LangGraph SqliteSaver, same run, durable (>= 4x faster)",
        saver / ours if saver and ours else None,
        4.0,
        lambda r: "n/a" if r is None else f"{r:.1f}x",
        at_most=False,
    )
    for system in ("cas", "cas-nd"):
        check(
            f"load newest, new process, {system} (<= 5 ms)",
            med("checkpoints", system, "load_cold"),
            5e-3,
        )
        check(
            f"load newest, warm, {system} (<= 1 ms)", med("checkpoints", system, "load_warm"), 1e-3
        )
        check(
            f"path of the 10,000-entry thread, new process, packed, {system} (<= 100 ms)",
            med("deep", system, "read_path_cold_packed"),
            0.1,
        )
        check(
            f"path of the 10,000-entry thread, warm, {system} (<= 5 ms)",
            med("deep", system, "read_path_warm"),
            5e-3,
        )
        check(
            f"the same, the read alone (no loop over the entries), packed, {system} (<= 5 ms)",
            med("deep", system, "fetch_path_warm_packed"),
            5e-3,
        )
        jsonl = med("forks", "jsonl", "read_all_paths_cold")
        for key, what in (("read_all_paths_cold", "new process"), ("read_all_paths_warm", "warm")):
            mine = med("forks", system, key)
            peer = med("forks", "jsonl", key) if key.endswith("warm") else jsonl
            check(
                f"every path of the forks workload, {what}, {system} / JSONL (<= 1)",
                mine / peer if mine and peer else None,
                1.0,
                lambda r: "n/a" if r is None else f"{r:.2f}",
            )
    m = runs.ok("checkpoints", "cas")
    packed, final = get(m, "compacted", "bytes"), get(m, "final_list_bytes")
    check(
        "checkpoint bytes after pack / final message list (<= 0.41)",
        packed / final if packed and final else None,
        0.41,
        lambda r: "n/a" if r is None else f"{r:.2f}",
    )
    if not any(verdict != "n/a" for _, _, verdict in rows):
        return []
    lines = [
        "## Journal goals (checkpoints and cold reads)",
        "",
        "| goal | measured | |",
        "|---|---|---|",
    ]
    lines += [f"| {goal} | {value} | {verdict} |" for goal, value, verdict in rows]
    return [*lines, ""]


def sections(results: dict[str, Any], runs: Runs) -> list[str]:
    """Every section, in reading order."""
    return [
        *systems_section(runs),
        *journal_goals_section(runs),
        *objects_section(results),
        *forks_section(runs),
        *deep_section(runs),
        *checkpoints_section(runs),
        *many_section(runs),
        *rss_section(runs),
        *faults_section(runs),
        *errors_section(runs),
    ]
