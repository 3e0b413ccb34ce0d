"""Transcript import figures: a generated project of coding-agent sessions with forks.

    python -m bench.transcripts_bench [--sessions 200] [--turns 4] [--formats claude-code,codex,pi]
                                      [--data-dir DIR] [--json FILE]

For each format: generate ``--sessions`` session files (tests/support/transcript_samples.py:
branches, compactions, subagent files, and every other session resumed or forked from
the one before, repeating its records), then in the same run:

* *parse only*: read and ``json.loads`` every line (the floor any importer pays);
* *import*: ``import_transcripts`` into a fresh local store (durable, the default);
* *export*: write every session back and check the bytes are identical;
* *pack*: pack the store, and measure it on disk.

Sizes are compared with the source files and with the source files concatenated and
compressed by zstd at levels 3 and 19 (what an archive of the project would take).
Throughput is records per second of wall-clock time; the ratios (import / parse) are
what carries over to another machine.
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import zstandard

import cas_journal as cj
from cas_journal.maintenance import pack
from cas_journal.transcripts import export_transcripts, import_transcripts

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from support.transcript_samples import GENERATORS

MACHINE = "2-core VM"


def store_bytes(j: cj.Journal) -> int:
    usage = j.store.objects.usage()
    return usage["loose_bytes"] + usage["packed_bytes"]


def tree_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def run_format(fmt: str, sessions: int, turns: int, work: Path) -> dict[str, Any]:
    source = work / f"{fmt}-source"
    GENERATORS[fmt](source, random.Random(2026), sessions, turns)
    files = sorted(p for p in source.rglob("*.jsonl"))
    raw = b"".join(p.read_bytes() for p in files)

    start = time.perf_counter()
    records = 0
    for path in files:
        with open(path, "rb") as stream:
            for line in stream:
                if line.strip():
                    json.loads(line)
                    records += 1
    parse_s = time.perf_counter() - start

    store = work / f"{fmt}-store"
    with cj.Journal.open(store) as j:
        start = time.perf_counter()
        report = import_transcripts(j, [source], fmt)
        import_s = time.perf_counter() - start
        after_import = store_bytes(j)
        forks = sum(1 for meta in j.list_threads() if meta.forked_from_thread_id)
        out = work / f"{fmt}-out"
        start = time.perf_counter()
        exported = export_transcripts(j, fmt, out)
        export_s = time.perf_counter() - start
        identical = all((out / p.relative_to(source)).read_bytes() == p.read_bytes() for p in files)
        start = time.perf_counter()
        pack(j.store)
        pack_s = time.perf_counter() - start
        after_pack = store_bytes(j)
    on_disk = tree_bytes(store)
    zstd3 = len(zstandard.ZstdCompressor(level=3).compress(raw))
    zstd19 = len(zstandard.ZstdCompressor(level=19).compress(raw))
    return {
        "format": fmt,
        "sessions": sessions,
        "files": len(files),
        "forks": forks,
        "records": records,
        "records_shared": report.records_shared,
        "source_bytes": len(raw),
        "parse_seconds": parse_s,
        "import_seconds": import_s,
        "export_seconds": export_s,
        "pack_seconds": pack_s,
        "parse_records_per_s": records / parse_s,
        "import_records_per_s": records / import_s,
        "export_records_per_s": exported.records / export_s,
        "import_vs_parse_time": import_s / parse_s,
        "report_stored_bytes": report.stored_bytes,
        "store_bytes_after_import": after_import,
        "store_bytes_after_pack": after_pack,
        "store_dir_bytes_after_pack": on_disk,
        "zstd3_of_sources": zstd3,
        "zstd19_of_sources": zstd19,
        "export_identical": identical,
    }


def show(row: dict[str, Any]) -> str:
    mib = 1024 * 1024
    return "\n".join(
        [
            f"{row['format']}: {row['files']} files ({row['forks']} forked or resumed), "
            f"{row['records']:,} records "
            f"({row['records_shared']:,} shared with another session), "
            f"{row['source_bytes'] / mib:.1f} MiB",
            f"  parse only  {row['parse_records_per_s']:>10,.0f} records/s",
            f"  import      {row['import_records_per_s']:>10,.0f} records/s "
            f"({row['import_vs_parse_time']:.1f}x the parse time, {row['import_seconds']:.1f} s)",
            f"  export      {row['export_records_per_s']:>10,.0f} records/s "
            f"(byte-identical: {row['export_identical']})",
            f"  stored after import {row['store_bytes_after_import'] / mib:7.2f} MiB "
            f"({row['store_bytes_after_import'] / row['source_bytes']:.1%} of the sources)",
            f"  stored after pack   {row['store_bytes_after_pack'] / mib:7.2f} MiB "
            f"({row['store_bytes_after_pack'] / row['source_bytes']:.1%}); store directory "
            f"{row['store_dir_bytes_after_pack'] / mib:.2f} MiB",
            f"  sources zstd-3      {row['zstd3_of_sources'] / mib:7.2f} MiB, zstd-19 "
            f"{row['zstd19_of_sources'] / mib:.2f} MiB",
        ]
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=200)
    parser.add_argument("--turns", type=int, default=4)
    parser.add_argument("--formats", default="claude-code,codex,pi")
    parser.add_argument("--data-dir", type=Path, default=None)
    parser.add_argument("--json", type=Path, default=None, help="also write the rows here")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="transcripts-bench-", dir=args.data_dir))
    print(f"machine: {MACHINE} ({platform.machine()}, Python {platform.python_version()})")
    rows = []
    try:
        for fmt in args.formats.split(","):
            row = run_format(fmt, args.sessions, args.turns, work)
            rows.append(row)
            print(show(row), flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if args.json is not None:
        args.json.write_text(json.dumps({"machine": MACHINE, "rows": rows}, indent=2))


if __name__ == "__main__":
    main()
