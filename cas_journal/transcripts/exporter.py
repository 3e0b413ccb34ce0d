"""Export imported sessions back to their files: the same records, in the same order.

``session_file(journal, thread_id)`` rebuilds the bytes of the file a thread was
imported from, from the thread's entries alone: the session manifest (see ``manifest``)
gives the file order, the records kept verbatim, the values of placeholder keys and the
byte layout; each entry gives its record. A file imported from compact JSON lines (as
Claude Code, Codex and pi write them) comes back byte for byte.

``export_transcripts(journal, format, out_dir, threads)`` writes one file per session
under ``out_dir``, at the path the file had under the imported directory; without
thread ids it exports every thread whose id starts with ``<format>/``. Each file is
written to a temporary name and renamed, so a reader never sees half a file.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from pydantic import BaseModel, Field

from ..errors import CorruptObject, InvalidInputError
from ..journal import Entry, EntryType, Journal
from ..objects import format_time
from .manifest import (
    MANIFEST_KEY,
    MANIFEST_VERSION,
    PLACEHOLDERS_KEY,
    RECORD_KEY,
    TEXT_KEY,
    from_runs,
    placeholder,
)
from .plan import EPOCH
from .source import BOM, compact_json


class TranscriptExportReport(BaseModel):
    """What ``export_transcripts`` wrote."""

    format: str
    files: list[str] = Field(default_factory=list)
    """Files written, relative to the output directory."""
    records: int = 0
    bytes: int = 0


@dataclass
class SessionFile:
    """A session rebuilt from its thread."""

    format: str
    path: str
    """Where the file goes, relative to the output directory."""
    records: int
    data: bytes


def _bad(thread_id: str, message: str) -> CorruptObject:
    return CorruptObject(f"thread {thread_id!r}: session manifest {message}")


def _manifest(thread_id: str, entries: list[Entry]) -> dict[str, Any]:
    found = [e for e in entries if e.type is EntryType.CUSTOM and MANIFEST_KEY in e.metadata]
    if not found:
        raise InvalidInputError(f"thread {thread_id!r} was not imported from a transcript")
    newest = max(found, key=lambda e: (format_time(e.created_at or EPOCH), e.id))
    try:
        manifest = json.loads(newest.metadata[MANIFEST_KEY])
    except ValueError:
        raise _bad(thread_id, "is not JSON") from None
    if not isinstance(manifest, dict) or manifest.get("version") != MANIFEST_VERSION:
        raise _bad(thread_id, "has an unknown version")
    return manifest


def _safe_path(thread_id: str, value: Any) -> str:
    if not isinstance(value, str) or not value or "\0" in value or "\\" in value:
        raise _bad(thread_id, "names no usable file path")
    path = PurePosixPath(value)
    if path.is_absolute() or any(part in ("", ".", "..") for part in value.split("/")):
        raise _bad(thread_id, f"file path {value!r} leaves the output directory")
    return value


def _depths(by_id: dict[str, Entry], members: set[str]) -> dict[str, int]:
    depth: dict[str, int] = {}
    for oid in members:
        chain: list[str] = []
        current: str | None = oid
        while current and current not in depth:
            chain.append(current)
            parent = by_id[current].parent_id
            current = parent if parent in by_id else None
        base = depth[current] if current else -1
        for item in reversed(chain):
            base += 1
            depth[item] = base
    return depth


def _line(entry: Entry, filled: dict[str, Any], overrides: dict[str, Any], thread_id: str) -> str:
    """A record's line: the stored text, placeholders filled in by text, then any
    overridden value set (re-encoding the record, which was checked to be compact)."""
    text = entry.metadata.get(TEXT_KEY)
    if text is not None and not filled and not overrides:
        return text
    stored = entry.metadata.get(RECORD_KEY)
    if stored is None:
        raise _bad(thread_id, f"lists entry {entry.id}, which holds no record")
    for key, value in filled.items():
        null = placeholder(key)
        if stored.count(null) != 1:
            raise _bad(thread_id, f"lists entry {entry.id}, whose record lacks {key!r}")
        stored = stored.replace(null, f"{compact_json(key)}:{compact_json(value)}", 1)
    if not overrides:
        return stored
    try:
        record = json.loads(stored)
    except ValueError:
        raise _bad(thread_id, f"lists entry {entry.id}, whose record is not JSON") from None
    if not isinstance(record, dict):
        raise _bad(thread_id, f"lists entry {entry.id}, whose record is not an object")
    for key, value in overrides.items():
        if key in record:
            record[key] = value
    return compact_json(record)


@dataclass
class SessionRecords:
    """A session's records in file order, as its thread holds them."""

    manifest: dict[str, Any]
    entries: list[Entry | None]
    """The entry of each record, in file order (None: a record kept in the manifest)."""
    lines: list[str]
    """Each record's line as the file had it."""


def session_records(journal: Journal, thread_id: str) -> SessionRecords:
    """The records of the session a thread was imported from, in file order.

    InvalidInputError if the thread holds no session, CorruptObject if its manifest does
    not match its entries."""
    all_entries = journal.entries(thread_id)
    by_id = {entry.id: entry for entry in all_entries}
    manifest = _manifest(thread_id, all_entries)
    count = manifest.get("records")
    tips = manifest.get("tips")
    if not isinstance(count, int) or count < 0 or not isinstance(tips, list):
        raise _bad(thread_id, "is malformed")
    members: set[str] = set()
    for tip in tips:
        current = tip if isinstance(tip, str) else None
        if current not in by_id:
            raise _bad(thread_id, f"names a branch end {tip!r:.80} the thread does not hold")
        while current and current in by_id and current not in members:
            members.add(current)
            current = by_id[current].parent_id
    depth = _depths(by_id, members)
    canonical = sorted(
        members,
        key=lambda oid: (format_time(by_id[oid].created_at or EPOCH), depth[oid], oid),
    )
    entries: list[Entry | None] = []
    lines: list[str] = []
    try:
        headers = {int(pos): str(text) for pos, text in manifest.get("headers", [])}
        defaults = dict(manifest.get("defaults", {}))
        overrides: dict[int, dict[str, Any]] = {}
        for group in manifest.get("overrides", []):
            for pos in from_runs(group["at"], count):
                overrides.setdefault(pos, {})[str(group["key"])] = group["value"]
        order: Iterator[int] = from_runs(manifest.get("order", []), count)
        for pos in range(count):
            if pos in headers:
                entries.append(None)
                lines.append(headers[pos])
                continue
            entry = by_id[canonical[next(order)]]
            keys = [k for k in entry.metadata.get(PLACEHOLDERS_KEY, "").split(",") if k]
            changed = dict(overrides.get(pos, {}))
            filled = {key: changed.pop(key, defaults.get(key)) for key in keys}
            entries.append(entry)
            lines.append(_line(entry, filled, changed, thread_id))
    except (StopIteration, IndexError, KeyError, TypeError, ValueError) as exc:
        raise _bad(
            thread_id, f"does not match the thread's entries ({type(exc).__name__})"
        ) from None
    return SessionRecords(manifest, entries, lines)


def session_file(journal: Journal, thread_id: str) -> SessionFile:
    """The bytes of the file a thread was imported from (see the module doc)."""
    session = session_records(journal, thread_id)
    manifest = session.manifest
    try:
        blank = [(int(number), str(text)) for number, text in manifest.get("blank", [])]
    except (TypeError, ValueError):
        raise _bad(thread_id, "has malformed blank lines") from None
    physical: list[str] = []
    blank.sort()
    queue = iter(blank)
    pending = next(queue, None)
    for text in session.lines:
        while pending is not None and pending[0] == len(physical) + 1:
            physical.append(pending[1])
            pending = next(queue, None)
        physical.append(text)
    while pending is not None:
        physical.append(pending[1])
        pending = next(queue, None)
    eol = manifest.get("eol", "\n")
    if eol not in ("\n", "\r\n"):
        raise _bad(thread_id, "has an unknown end of line")
    data = eol.join(physical)
    if physical and manifest.get("final_newline", True):
        data += eol
    out = data.encode("utf-8")
    if manifest.get("bom"):
        out = BOM + out
    return SessionFile(
        format=str(manifest.get("format")),
        path=_safe_path(thread_id, manifest.get("path")),
        records=len(session.lines),
        data=out,
    )


def _write_atomically(target: Path, data: bytes) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    temp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    try:
        with open(temp, "wb") as file:
            file.write(data)
        os.replace(temp, target)
    finally:
        temp.unlink(missing_ok=True)


def export_transcripts(
    journal: Journal,
    format_name: str,
    out_dir: str | Path,
    thread_ids: Sequence[str] = (),
) -> TranscriptExportReport:
    """Write one file per session thread under ``out_dir`` (see the module doc)."""
    if not thread_ids:
        prefix = f"{format_name}/"
        thread_ids = sorted(
            meta.id
            for meta in journal.list_threads(include_archived=True)
            if meta.id.startswith(prefix)
        )
    report = TranscriptExportReport(format=format_name)
    files = []
    for thread_id in thread_ids:
        session = session_file(journal, thread_id)
        if session.format != format_name:
            raise InvalidInputError(
                f"thread {thread_id!r} was imported from {session.format}, not {format_name}"
            )
        files.append(session)
    seen: dict[str, str] = {}
    for thread_id, session in zip(thread_ids, files, strict=True):
        if session.path in seen:
            raise InvalidInputError(
                f"threads {seen[session.path]!r} and {thread_id!r} both go to {session.path}"
            )
        seen[session.path] = thread_id
    root = Path(out_dir)
    for session in files:
        _write_atomically(root.joinpath(*session.path.split("/")), session.data)
        report.files.append(session.path)
        report.records += session.records
        report.bytes += len(session.data)
    return report
