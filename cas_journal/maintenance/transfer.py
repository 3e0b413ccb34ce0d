"""Export a thread as JSONL and import it back, into the same store or another one, exactly.

The format (version 1) is one JSON object per line, ASCII only. A *section* is one thread:

* a header line ``{"record": "thread", "format": "cas-journal-export", "version": 1,
  "thread": {ThreadMeta fields}, "heads": [branch head ids], "entries": N}``;
* then N entry lines ``{"record": "entry", "id": ..., "parent": ... | null,
  "created_at": "...Z", "turn_id": "...", "raw": "<payload JSON>"}``, parents before
  children: every entry of the thread, abandoned branches included.

An entry line carries the stored fields of the entry node and its payload text, so
import rebuilds the very same objects (depth and skip pointer are recomputed from the
parents) and checks that each rebuilt entry has the id the line names. A file may hold
several sections (exports concatenated). Import reads and checks the whole file before it
writes anything, then stores the objects, then creates the thread refs: a malformed file
changes nothing, and a thread becomes visible only with all its entries. A UTF-8 byte
order mark at the start of the file (some editors add one) is skipped. Importing a
thread that already exists with every exported entry changes nothing (idempotent); one
that exists without them is refused (ThreadExists). The checked objects are held in
memory until they are written, so an import needs memory in proportion to the file.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, Field, ValidationError

from ..errors import EntryNotFound, InvalidInputError, JournalError, ThreadExists, ThreadNotFound
from ..journal import Entry, Journal, ThreadMeta
from ..journal.building import build_entry
from ..journal.payload import check_payload
from ..names import validate_id
from ..objects import EntryNode, Kind, format_time, is_oid, object_id, parse_time

EXPORT_FORMAT = "cas-journal-export"
"""The ``format`` field of every section header."""
EXPORT_VERSION = 1
"""The export format version this module writes and reads."""
BOM = "\ufeff"
"""A UTF-8 byte order mark, skipped at the start of an import file."""
WRITE_CHUNK = 2048
"""Objects stored per ``put_many`` call during an import."""

Progress = Callable[[str, int, int | None], None]
"""Called as ``progress(label, done, total)`` during long work; total may be None."""

_HEADER_KEYS = frozenset({"record", "format", "version", "thread", "heads", "entries"})
_ENTRY_KEYS = frozenset({"record", "id", "parent", "created_at", "turn_id", "raw"})


class MalformedExport(InvalidInputError):
    """An import line is not valid export JSONL; ``line`` is its 1-based number."""

    def __init__(self, line: int, message: str) -> None:
        self.line = line
        self.detail = message
        super().__init__(f"line {line}: {message}")


class ImportReport(BaseModel):
    """What ``import_jsonl`` did."""

    lines: int = 0
    """Non-blank lines read."""
    entries: int = 0
    """Entry lines read (an entry shared by two sections counts twice)."""
    threads_created: list[str] = Field(default_factory=list)
    """Threads the import created, in file order."""
    threads_unchanged: list[str] = Field(default_factory=list)
    """Threads that already held every exported entry and were left as they were."""
    objects_written: int = 0
    """Objects the store did not hold before (payload blobs and entry nodes)."""


# -- export -------------------------------------------------------------------------------


def _line(record: dict[str, Any]) -> str:
    return json.dumps(record, ensure_ascii=True, sort_keys=True, separators=(",", ":")) + "\n"


def export_thread(journal: Journal, thread_id: str) -> Iterator[str]:
    """The JSONL lines (each ending in a newline) of one thread: a header, then its entries.

    Reads one consistent state of the thread; ThreadNotFound if it does not exist.
    """
    snapshot = journal.snapshot(thread_id)
    entries = {entry.id: entry for entry in snapshot.entries()}  # oldest first
    header = {
        "record": "thread",
        "format": EXPORT_FORMAT,
        "version": EXPORT_VERSION,
        "thread": snapshot.meta.model_dump(mode="json"),
        "heads": sorted(snapshot.heads),
        "entries": len(entries),
    }
    yield _line(header)
    for oid in _parents_first(list(entries), entries):
        entry = entries[oid]
        assert entry.created_at is not None
        yield _line(
            {
                "record": "entry",
                "id": oid,
                "parent": entry.parent_id or None,
                "created_at": format_time(entry.created_at),
                "turn_id": entry.turn_id,
                "raw": entry.raw,
            }
        )


def _parents_first(order: list[str], entries: dict[str, Entry]) -> Iterator[str]:
    """``order`` rearranged as little as needed so that every parent comes first."""
    done: set[str] = set()
    for oid in order:
        chain: list[str] = []
        current: str | None = oid
        while current is not None and current not in done:
            chain.append(current)
            current = entries[current].parent_id or None
        for pending in reversed(chain):
            done.add(pending)
            yield pending


# -- import -------------------------------------------------------------------------------


@dataclass
class _Section:
    """One thread of an import file, parsed and checked, nothing written yet."""

    line: int
    meta: ThreadMeta
    heads: list[str]
    expected: int
    nodes: dict[str, EntryNode] = field(default_factory=dict)
    objects: list[tuple[str, Kind, bytes]] = field(default_factory=list)


class _Parser:
    """Turns lines into checked sections; raises MalformedExport naming the line."""

    def __init__(self, journal: Journal) -> None:
        self.journal = journal
        self.sections: list[_Section] = []
        self.lines = 0
        self.entries = 0

    def feed(self, number: int, text: str) -> None:
        """Parse line ``number``; any problem becomes MalformedExport."""
        try:
            record = json.loads(text)
        except (ValueError, RecursionError) as exc:
            raise MalformedExport(number, "not valid JSON") from exc
        if not isinstance(record, dict):
            raise MalformedExport(number, "not a JSON object")
        self.lines += 1
        try:
            kind = record.get("record")
            if kind == "thread":
                self.finish()
                self.sections.append(self._header(number, record))
            elif kind == "entry":
                if not self.sections:
                    raise InvalidInputError("entry line before any thread header")
                self._entry(self.sections[-1], record)
                self.entries += 1
            else:
                raise InvalidInputError(f"unknown record type {kind!r:.40}")
        except MalformedExport:
            raise
        except (
            JournalError,
            ValueError,
            TypeError,
            KeyError,
            ArithmeticError,
            RecursionError,
        ) as exc:
            message = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise MalformedExport(number, message) from exc

    def _header(self, number: int, record: dict[str, Any]) -> _Section:
        _only(record, _HEADER_KEYS)
        if record.get("format") != EXPORT_FORMAT:
            raise InvalidInputError(f"not a {EXPORT_FORMAT} header")
        if record.get("version") != EXPORT_VERSION:
            raise InvalidInputError(
                f"export version {record.get('version')!r:.20} is not supported "
                f"(this cas-journal reads version {EXPORT_VERSION})"
            )
        fields = record.get("thread")
        if not isinstance(fields, dict):
            raise InvalidInputError("'thread' is not an object")
        try:
            meta = ThreadMeta.model_validate(fields)
        except ValidationError as exc:
            raise InvalidInputError(f"thread metadata is invalid: {_first_error(exc)}") from exc
        validate_id(meta.id, "thread id")
        if any(section.meta.id == meta.id for section in self.sections):
            raise InvalidInputError(f"thread {meta.id!r} appears twice in the file")
        heads = record.get("heads")
        if not isinstance(heads, list) or not all(is_oid(head) for head in heads):
            raise InvalidInputError("'heads' is not a list of object ids")
        expected = record.get("entries")
        if not isinstance(expected, int) or isinstance(expected, bool) or expected < 0:
            raise InvalidInputError("'entries' is not a non-negative integer")
        if meta.leaf_id and not is_oid(meta.leaf_id):
            raise InvalidInputError("the thread's leaf_id is not an object id")
        return _Section(number, meta, sorted(set(heads)), expected)

    def _entry(self, section: _Section, record: dict[str, Any]) -> None:
        _only(record, _ENTRY_KEYS)
        oid, parent, created, turn_id, raw = (
            record.get("id"),
            record.get("parent"),
            record.get("created_at"),
            record.get("turn_id", ""),
            record.get("raw"),
        )
        if not is_oid(oid):
            raise InvalidInputError("'id' is not an object id")
        assert isinstance(oid, str)
        if oid in section.nodes:
            raise InvalidInputError(f"entry {oid} appears twice in thread {section.meta.id!r}")
        if len(section.nodes) >= section.expected:
            raise InvalidInputError(
                f"thread {section.meta.id!r} has more entry lines than its header's "
                f"{section.expected}"
            )
        if parent is not None and not is_oid(parent):
            raise InvalidInputError("'parent' is not an object id or null")
        if parent is not None and parent not in section.nodes:
            raise InvalidInputError(f"parent {parent} does not come before its child")
        if not isinstance(created, str):
            raise InvalidInputError("'created_at' is not a string")
        moment = parse_time(created)
        if not isinstance(turn_id, str) or not isinstance(raw, str):
            raise InvalidInputError("'turn_id' or 'raw' is not a string")
        try:
            payload = raw.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise InvalidInputError("'raw' is not valid Unicode") from exc
        self.journal.store.objects.codec.check_size(payload)
        payload_oid = object_id(Kind.BLOB, payload)
        try:
            check_payload(payload_oid, payload)
        except JournalError as exc:
            raise InvalidInputError("'raw' is not a valid entry payload") from exc
        built = build_entry(
            payload, payload_oid, parent, format_time(moment), turn_id, section.nodes.__getitem__
        )
        if built.node.created_at != created:
            raise InvalidInputError("'created_at' is not a canonical timestamp")
        if built.oid != oid:
            raise InvalidInputError(f"entry {oid} does not match its content (id mismatch)")
        section.nodes[oid] = built.node
        section.objects += [(payload_oid, Kind.BLOB, payload), (oid, Kind.ENTRY, built.body)]

    def finish(self) -> None:
        """Check the last section is complete (all entries, heads and leaf present)."""
        if not self.sections:
            return
        section = self.sections[-1]
        number = section.line
        if len(section.nodes) != section.expected:
            raise MalformedExport(
                number,
                f"thread {section.meta.id!r} declares {section.expected} entries, "
                f"the file holds {len(section.nodes)} (truncated?)",
            )
        for head in section.heads:
            if head not in section.nodes:
                raise MalformedExport(number, f"head {head} is not among the thread's entries")
        leaf = section.meta.leaf_id
        if leaf and leaf not in section.nodes:
            raise MalformedExport(number, f"leaf {leaf} is not among the thread's entries")
        reachable: set[str] = set()
        for head in section.heads:
            current: str | None = head
            while current is not None and current not in reachable:
                reachable.add(current)
                current = section.nodes[current].parent
        if len(reachable) != len(section.nodes):
            raise MalformedExport(number, f"thread {section.meta.id!r} has entries no head reaches")


def _only(record: dict[str, Any], allowed: frozenset[str]) -> None:
    unknown = set(record) - allowed
    if unknown:
        raise InvalidInputError(f"unknown fields {sorted(unknown)!r:.80}")


def _first_error(exc: ValidationError) -> str:
    error = exc.errors()[0]
    where = ".".join(str(part) for part in error.get("loc", ()))
    return f"{where}: {error.get('msg', 'invalid')}" if where else str(error.get("msg"))


def _text(number: int, line: str | bytes) -> str:
    if isinstance(line, bytes):
        try:
            return line.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise MalformedExport(number, "not valid UTF-8") from exc
    return line


def _parse(journal: Journal, lines: Iterable[str | bytes], progress: Progress | None) -> _Parser:
    """Read and check every line; nothing is written. MalformedExport on the first problem."""
    parser = _Parser(journal)
    for number, line in enumerate(lines, start=1):
        text = _text(number, line)
        if number == 1 and text.startswith(BOM):  # written by some editors; not JSON
            text = text[len(BOM) :]
        text = text.strip()
        if text:
            parser.feed(number, text)
        if progress is not None and number % 256 == 0:
            progress("reading", number, None)
    parser.finish()
    return parser


def _holds(journal: Journal, section: _Section) -> bool:
    """True if the thread exists and reaches every exported entry; ThreadExists if it
    exists without them; False if it does not exist."""
    thread_id = section.meta.id
    try:
        journal.thread(thread_id)
    except ThreadNotFound:
        return False
    for head in section.heads:
        try:
            journal.entry(thread_id, head)
        except EntryNotFound:
            raise ThreadExists(
                f"thread {thread_id!r} already exists with other entries; "
                "delete it or import into another store"
            ) from None
    return True


def import_jsonl(
    journal: Journal, lines: Iterable[str | bytes], progress: Progress | None = None
) -> ImportReport:
    """Import export JSONL (text or bytes lines) into the journal's store.

    Raises MalformedExport (naming the line) before anything is written if any line is
    bad, and ThreadExists if a thread exists without the exported entries. Entry ids come
    out identical to the exported ones; importing the same file twice changes nothing.
    """
    parsed = _parse(journal, lines, progress)
    report = ImportReport(lines=parsed.lines, entries=parsed.entries)
    todo: list[_Section] = []
    for section in parsed.sections:
        if _holds(journal, section):
            report.threads_unchanged.append(section.meta.id)
        else:
            todo.append(section)

    with journal.store.objects.write_guard():
        _write(journal, todo, report, progress)
    return report


def _write(
    journal: Journal, todo: list[_Section], report: ImportReport, progress: Progress | None
) -> None:
    """Store the checked objects, then create the threads that link them."""
    objects = journal.store.objects
    pending: dict[str, tuple[Kind, bytes]] = {}
    for section in todo:
        for oid, kind, body in section.objects:
            pending.setdefault(oid, (kind, body))
    missing = [(oid, kind, body) for oid, (kind, body) in pending.items() if not objects.has(oid)]
    total = len(missing)
    for start in range(0, total, WRITE_CHUNK):
        chunk = missing[start : start + WRITE_CHUNK]
        objects.put_many([(kind, body) for _, kind, body in chunk])
        if progress is not None:
            progress("writing", start + len(chunk), total)
    report.objects_written = total

    for section in todo:
        try:
            journal.create_thread_with_heads(section.meta, section.heads)
        except ThreadExists:
            if not _holds(journal, section):  # raced with a creator; same content is fine
                raise
            report.threads_unchanged.append(section.meta.id)
            continue
        report.threads_created.append(section.meta.id)
