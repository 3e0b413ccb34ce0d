"""RESULTS.md tables and PNG plots from a results document (see runner.run_all)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from . import plots
from .sections import published
from .systems import CAS_FOR

ORDER = (
    "cas",
    "cas-nd",
    "jsonl",
    "jsonl-fsync",
    "seedfs",
    "sqlite",
    "sqlite-nd",
    "git",
    "langgraph",
    "langgraph-delta",
    "baseline",
)
KEEPS_HISTORY = {"seedfs": "no (overwrites one file)"}


def fmt_bytes(n: float | None) -> str:
    """Bytes in binary units."""
    if n is None:
        return "n/a"
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(n) >= size:
            return f"{n / size:.2f} {unit}"
    return f"{n:.0f} B"


def fmt_time(s: float | None) -> str:
    """Seconds in a readable unit."""
    if s is None:
        return "n/a"
    if s >= 1:
        return f"{s:.2f} s"
    if s >= 1e-3:
        return f"{s * 1e3:.2f} ms"
    return f"{s * 1e6:.1f} \u00b5s"


def fmt_rate(r: float | None) -> str:
    """Operations per second."""
    return "n/a" if r is None else f"{r:,.0f}/s"


def spread(summ: dict[str, float] | None) -> str:
    """``median [p10\u2013p90]`` of a timing summary."""
    if not summ or not summ.get("n"):
        return "n/a"
    return f"{fmt_time(summ['median'])} [{fmt_time(summ['p10'])}\u2013{fmt_time(summ['p90'])}]"


def ratio(ours: float | None, theirs: float | None) -> str:
    """``\u00d7r`` with r = cas-journal \u00f7 peer."""
    if ours is None or theirs is None or theirs == 0:
        return ""
    r = ours / theirs
    return f" (\u00d7{r:.3g})"


def get(d: Any, *keys: str) -> Any:
    """Nested lookup that returns None on any missing key."""
    for key in keys:
        if not isinstance(d, dict) or key not in d:
            return None
        d = d[key]
    return d


class Runs:
    """Index of worker results by (workload, system)."""

    def __init__(self, results: dict[str, Any]) -> None:
        self.by: dict[tuple[str, str], dict[str, Any]] = {
            (r["workload"], r["system"]): r for r in results.get("runs", [])
        }

    def systems(self, workload: str, baseline: bool = False) -> list[str]:
        names = [s for (w, s) in self.by if w == workload and (baseline or s != "baseline")]
        return sorted(names, key=lambda s: ORDER.index(s) if s in ORDER else 99)

    def ok(self, workload: str, system: str) -> dict[str, Any] | None:
        run = self.by.get((workload, system))
        return run.get("metrics") if run and "error" not in run else None

    def cas_peer(self, workload: str, system: str) -> dict[str, Any] | None:
        """The metrics of the cas-journal run a peer is compared with (same durability)."""
        run = self.by.get((workload, system))
        if run is None or system.startswith("cas"):
            return None
        cas = CAS_FOR[bool(run.get("durable"))]
        found = self.ok(workload, cas) or self.ok(workload, CAS_FOR[not run.get("durable")])
        return found


Cell = Callable[[dict[str, Any]], float | None]


def table(
    runs: Runs,
    workload: str,
    columns: list[tuple[str, Cell, Callable[[Any], str]]],
    extra: Callable[[str, dict[str, Any]], list[str]] | None = None,
    extra_heads: list[str] | None = None,
    durable_text: str | None = None,
) -> list[str]:
    """Rows = systems; each numeric cell shows the value and (\u00d7cas\u00f7peer)."""
    heads = ["system", "durable", *[c[0] for c in columns], *(extra_heads or [])]
    lines = ["| " + " | ".join(heads) + " |", "|" + "---|" * len(heads)]
    for system in runs.systems(workload):
        run = runs.by[(workload, system)]
        if "error" in run:
            lines.append(f"| {system} | | error: {run['error'][:120]} |")
            continue
        m = run["metrics"]
        cas = runs.cas_peer(workload, system)
        cells = []
        for _, getter, fmt in columns:
            value = getter(m)
            cell = fmt(value)
            if cas is not None and value is not None:
                cell += ratio(getter(cas), value)
            cells.append(cell)
        durable = durable_text or ("yes" if run.get("durable") else "no")
        more = extra(system, m) if extra else []
        lines.append(f"| {system} | {durable} | " + " | ".join(cells + more) + " |")
    return lines


def machine_section(results: dict[str, Any]) -> list[str]:
    """Where and how the figures were measured."""
    m = results.get("machine", {})
    pk = m.get("packages", {})
    return [
        "## Machine",
        "",
        "| | |",
        "|---|---|",
        f"| CPU | {m.get('cpu')} ({m.get('cores')} cores), {m.get('memory_gib')} GiB RAM |",
        f"| Python | {m.get('python')} on {m.get('platform')} |",
        f"| bench directory file system | {m.get('bench_fs')} |",
        f"| /dev/shm | {m.get('shm_fs')} |",
        f"| SQLite / git | {m.get('sqlite')} / {m.get('git')} |",
        "| packages | " + ", ".join(f"{k} {v}" for k, v in pk.items()) + " |",
        f"| load average at start / end | {m.get('loadavg_start')} / {m.get('loadavg_end')} |",
        f"| date | {m.get('time')} |",
        "",
    ]


def write_report(results: dict[str, Any], out: Path, name: str = "RESULTS.md") -> Path:
    """Render RESULTS.md and the plots into ``out``; return the markdown path."""
    from .report_sections import sections

    runs = Runs(results)
    plot_dir = out / "plots"
    made = plots.make_all(results, runs, plot_dir)
    lines = [
        f"# cas-journal benchmarks ({results.get('scale')} scale)",
        "",
        f"Generated by `python -m bench --scale {results.get('scale')}` in "
        f"{results.get('total_seconds', 0):.0f} s. Every system ran the same deterministic, "
        "seeded workloads (generated text: prose and code, not random bytes), each system "
        "in its own process. Times are medians with the [10th\u201390th percentile] spread "
        "where there were repeats. **(\u00d7r)** after a peer's figure is r = cas-journal's figure "
        "\u00f7 the peer's, against the cas-journal run with the same durability (`cas` = "
        "durable, `cas-nd` = not): for bytes and latencies r < 1 means cas-journal is "
        'smaller/faster, for throughputs r > 1 means cas-journal is faster. "Cold" means a '
        'new process opening the store (the OS page cache is not dropped); "warm" means '
        "repeated calls on an open store. This VM's disk metadata operations are slow and "
        "noisy (see the raw limits), and other work may have shared the 2 cores.",
        "",
        *(
            [f"Runs re-run and merged in after the main run: {'; '.join(results['reruns'])}.", ""]
            if results.get("reruns")
            else []
        ),
        *machine_section(results),
        *sections(results, runs),
    ]
    if made:
        lines += ["## Plots", ""] + [f"![{p.stem}](plots/{p.name})" for p in made] + [""]
    path = out / name
    kept = published(path.read_text()) if path.exists() else []
    path.write_text("\n".join(lines) + "\n" + "".join("\n" + block for block in kept))
    return path
