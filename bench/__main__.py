"""Benchmark suite for cas-journal and its peers.

    python -m bench --scale small|full           # everything; writes RESULTS.md + plots
    python -m bench objects --scale small        # only the object-layer benchmark
    python -m bench journal --only forks,deep --systems cas,jsonl
    python -m bench report --results FILE        # re-render RESULTS.md from saved JSON
    python -m bench store --scale small|full     # the local store's hot paths (issue 12)

Run from the repository root. By default ``full`` writes bench/RESULTS.md and
bench/plots/; ``small`` (a smoke test, < 3 min) writes under bench/out/small/ so it never
overwrites the figures the README quotes. Benchmarks measure; they never assert timings.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from .runner import WORKLOAD_ORDER, log, run_all

BENCH_DIR = Path(__file__).resolve().parent


def merge(documents: list[dict[str, Any]]) -> dict[str, Any]:
    """Combine results documents (e.g. a full run plus a re-run of one system)."""
    merged = dict(documents[0])
    runs = {(r["workload"], r["system"]): r for r in merged.get("runs", [])}
    for doc in documents[1:]:
        for run in doc.get("runs", []):
            runs[(run["workload"], run["system"])] = run
        parts = [f"{r['workload']}/{r['system']}" for r in doc.get("runs", [])]
        if doc.get("objects") and "error" not in doc["objects"]:
            merged["objects"] = doc["objects"]
            parts.append("the object layer")
        replaced = ", ".join(parts)
        merged.setdefault("reruns", []).append(f"{doc.get('machine', {}).get('time')}: {replaced}")
    order = {w: i for i, w in enumerate(WORKLOAD_ORDER)}
    merged["runs"] = sorted(runs.values(), key=lambda r: order.get(r["workload"], 9))
    return merged


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(
        prog="python -m bench",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "command",
        nargs="?",
        default="all",
        choices=("all", "objects", "journal", "report", "store"),
        help="all (default), objects only, journal workloads only, report, or "
        "store (the local store's hot paths beside same-run peers)",
    )
    parser.add_argument("--scale", choices=("small", "full"), default="small")
    parser.add_argument(
        "--only",
        default="",
        help=f"comma-separated workloads from {','.join(WORKLOAD_ORDER)} (store: sections "
        "from raw,single,threaded,batched,forks,first_page,compacted)",
    )
    parser.add_argument("--systems", default="", help="comma-separated system names")
    parser.add_argument(
        "--out",
        type=Path,
        default=None,
        help="output directory (default: bench/ for full, bench/out/small/)",
    )
    parser.add_argument(
        "--data-dir",
        type=Path,
        default=None,
        help="scratch directory for stores (default: bench/out/data-<time>, "
        "on the repository's disk; removed afterwards)",
    )
    parser.add_argument(
        "--results",
        default="",
        help="report: comma-separated results JSON files; later files replace "
        "the same (workload, system) runs of earlier ones",
    )
    parser.add_argument(
        "--format1",
        default=None,
        help="store: also measure bytes after pack+gc with the cas-journal of "
        "this checkout (e.g. a worktree of commit c8186ee, format 1)",
    )
    args = parser.parse_args(argv)

    out = args.out or (BENCH_DIR if args.scale == "full" else BENCH_DIR / "out" / args.scale)
    out.mkdir(parents=True, exist_ok=True)
    from .report import write_report

    if args.command == "store":
        from .store_bench import SECTIONS, report, run

        sections = [w for w in args.only.split(",") if w] or list(SECTIONS)
        if set(sections) - set(SECTIONS):
            parser.error(f"store sections are {','.join(SECTIONS)}")
        chosen = [s for s in args.systems.split(",") if s] or None
        data_dir = args.data_dir or BENCH_DIR / "out" / f"store-data-{time.strftime('%H%M%S')}"
        doc = run(args.scale, data_dir, args.format1, sections, chosen)
        # a partial run never overwrites the full report
        stem = f"{args.scale}-partial" if (args.only or args.systems) else args.scale
        (out / f"results-store-{stem}.json").write_text(json.dumps(doc, indent=1))
        (out / f"STORE-{stem}.md").write_text(report(doc))
        log(f"wrote {out / f'STORE-{stem}.md'}")
        return 0
    if args.command == "report":
        sources = args.results.split(",") if args.results else [f"{out}/results-{args.scale}.json"]
        merged = merge([json.loads(Path(p).read_text()) for p in sources])
        if len(sources) > 1:
            (out / f"results-{args.scale}.json").write_text(json.dumps(merged, indent=1))
        log(f"wrote {write_report(merged, out)}")
        return 0
    workloads = [w for w in args.only.split(",") if w] or list(WORKLOAD_ORDER)
    unknown = set(workloads) - set(WORKLOAD_ORDER)
    if unknown:
        parser.error(f"unknown workloads: {sorted(unknown)}")
    if args.command == "objects":
        workloads = []
    systems = [s for s in args.systems.split(",") if s] or None
    data_dir = args.data_dir or BENCH_DIR / "out" / f"data-{time.strftime('%Y%m%d-%H%M%S')}"
    # a partial run (objects only, --only, --systems) never overwrites the full report
    partial = args.command != "all" or args.only or args.systems
    stem = f"{args.command}-{args.scale}" if partial else args.scale
    results = run_all(
        args.scale,
        data_dir,
        workloads,
        systems,
        objects=args.command in ("all", "objects"),
        partial_file=out / f"results-{stem}.partial.json",
    )
    (out / f"results-{stem}.partial.json").unlink(missing_ok=True)
    results_file = out / f"results-{stem}.json"
    results_file.write_text(json.dumps(results, indent=1))
    md = write_report(results, out, "RESULTS.md" if not partial else f"RESULTS-{stem}.md")
    log(f"done in {results['total_seconds']:.0f} s: {md}, {results_file}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
