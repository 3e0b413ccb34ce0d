"""PNG plots (matplotlib, Agg backend) from a results document."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .report import Runs

STYLE = {
    "cas": ("tab:red", "-", "o"),
    "cas-nd": ("tab:red", "--", "o"),
    "jsonl": ("tab:blue", "-", "s"),
    "jsonl-fsync": ("tab:blue", "--", "s"),
    "seedfs": ("tab:green", "-", "^"),
    "sqlite": ("tab:purple", "-", "D"),
    "sqlite-nd": ("tab:purple", "--", "D"),
    "git": ("tab:orange", "-", "v"),
    "langgraph": ("tab:brown", "-", "x"),
    "langgraph-delta": ("tab:brown", "--", "+"),
}


def _style(system: str) -> dict[str, Any]:
    color, line, marker = STYLE.get(system, ("gray", ":", "."))
    return {"color": color, "linestyle": line, "marker": marker, "label": system}


def _machine(results: dict[str, Any]) -> str:
    m = results.get("machine", {})
    return f"{m.get('cpu', '?')}, {m.get('cores', '?')} cores, {m.get('bench_fs', '?')}"


def make_all(results: dict[str, Any], runs: Runs, out: Path) -> list[Path]:
    """Draw every plot the data allows; return the files written."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return []
    out.mkdir(parents=True, exist_ok=True)
    made: list[Path] = []
    scale = results.get("scale", "")
    machine = _machine(results)

    def save(fig: Any, name: str, title: str) -> None:
        fig.suptitle(f"{title} ({scale} scale)\n{machine}", fontsize=9)
        fig.tight_layout()
        path = out / f"{name}.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        made.append(path)

    # stored bytes vs number of forks
    systems = [s for s in runs.systems("forks") if runs.ok("forks", s)]
    if systems:
        fig, ax = plt.subplots(figsize=(7.5, 4.8))
        logical = None
        for s in systems:
            m = runs.ok("forks", s)
            assert m is not None
            xs = sorted(int(k) for k in m["snapshots"])
            ax.plot(xs, [max(m["snapshots"][str(x)]["bytes"], 1) for x in xs], **_style(s))
            if "compacted" in m:
                ax.scatter(
                    [xs[-1] * 1.04],
                    [max(m["compacted"]["bytes"], 1)],
                    color=_style(s)["color"],
                    marker="*",
                    s=70,
                )
            logical = logical or m.get("logical_at")
        if logical:
            xs = sorted(int(k) for k in logical)
            ax.plot(
                xs,
                [logical[str(x)] for x in xs],
                color="black",
                linestyle=":",
                label="logical payload bytes",
            )
        ax.set_yscale("log")
        ax.set_xlabel("forks")
        ax.set_ylabel("stored bytes (log); * = after the system's own compaction")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
        save(fig, "forks_stored_bytes", "Stored bytes vs number of forks")

    # checkpoint bytes vs iterations, and save latency vs iterations
    systems = [s for s in runs.systems("checkpoints") if runs.ok("checkpoints", s)]
    if systems:
        fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.6))
        for s in systems:
            m = runs.ok("checkpoints", s)
            assert m is not None
            series = m["bytes_by_iteration"]
            xs = list(range(1, len(series) + 1))
            style = _style(s) | {"marker": None}
            ax1.plot(xs, [max(v, 1) for v in series], **style)
            ax2.plot(xs, [v * 1e3 for v in m.get("save_by_iteration", [])], **style)
        ax1.set_yscale("log")
        ax1.set_xlabel("iteration")
        ax1.set_ylabel("total stored bytes (log)")
        ax2.set_yscale("log")
        ax2.set_xlabel("iteration")
        ax2.set_ylabel("save latency, ms (log)")
        for ax in (ax1, ax2):
            ax.grid(True, which="both", alpha=0.3)
        ax1.legend(fontsize=7)
        save(fig, "checkpoint_bytes", "Checkpoints: stored bytes and save latency vs iterations")

    # fork latency vs history length
    systems = [s for s in runs.systems("deep") if runs.ok("deep", s)]
    if systems:
        fig, ax = plt.subplots(figsize=(7, 4.6))
        for s in systems:
            m = runs.ok("deep", s)
            assert m is not None
            hist = sorted(int(h) for h in m.get("fork_by_history", {}))
            if hist:
                ax.plot(
                    hist, [m["fork_by_history"][str(h)]["median"] * 1e3 for h in hist], **_style(s)
                )
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("history length (entries before the fork point)")
        ax.set_ylabel("fork latency, ms (median, log)")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
        save(fig, "fork_latency", "Fork latency vs history length")

        fig, ax = plt.subplots(figsize=(8, 4.4))
        names = [s for s in systems if s != "baseline"]
        single = [runs.ok("deep", s)["appends_per_s"] for s in names]  # type: ignore[index]
        batched = [runs.ok("deep", s).get("batched_appends_per_s") or 0 for s in names]  # type: ignore[union-attr]
        pos = range(len(names))
        ax.bar([x - 0.2 for x in pos], single, width=0.4, label="single appends")
        ax.bar([x + 0.2 for x in pos], batched, width=0.4, label="batched (0 = no batching)")
        ax.set_xticks(list(pos), names, rotation=30, fontsize=8)
        ax.set_yscale("log")
        ax.set_ylabel("entries appended per second (log)")
        ax.grid(True, axis="y", which="both", alpha=0.3)
        ax.legend(fontsize=8)
        save(fig, "appends_per_s", "Append throughput, deep thread")

    systems = [s for s in runs.systems("many") if runs.ok("many", s)]
    if systems:
        fig, ax = plt.subplots(figsize=(8, 4.4))
        pos = range(len(systems))
        for offset, key, label in ((-0.2, "list_warm", "warm"), (0.2, "list_cold", "cold")):
            values = [
                (runs.ok("many", s) or {}).get(key, {}).get("median", 0) * 1e3 for s in systems
            ]
            ax.bar([x + offset for x in pos], values, width=0.4, label=label)
        ax.set_xticks(list(pos), systems, rotation=30, fontsize=8)
        ax.set_yscale("log")
        ax.set_ylabel("first page of 50 threads, ms (log)")
        ax.grid(True, axis="y", which="both", alpha=0.3)
        ax.legend(fontsize=8)
        save(fig, "list_threads", "List threads: first page")
    return made
