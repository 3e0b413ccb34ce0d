"""Import transcript files into a journal: one thread per session, shared entries stored once.

``import_transcripts(journal, paths, format)`` reads every session file it is given (or
finds under a directory), maps each onto entries with the format module, and writes
them. Everything is read, checked and built before anything is written, so a bad file
anywhere (a malformed line, a cycle of parent links, a line over the size limit) changes
nothing and raises a TranscriptError naming the file and the line. Objects are stored
first and each thread ref is created once, over all its entries: no thread is ever seen
half-imported.

Entries are content-addressed, so a record that several sessions carry (a resumed
session repeating its prefix, a fork copying its source's history) is stored once when
its entry is the same. Two mechanisms make it the same:

* *placeholders*: keys that a copy changes (Claude Code's ``sessionId``) are stored per
  session in the manifest, not in the entry;
* *fork matching*: a session forked from another (Codex's ``forked_from_id``) shares the
  source's entries for every copied record that matches the source's path; values the
  copy rewrote (its timestamp) are kept in the fork's manifest.

Importing the same files again changes nothing (``threads_unchanged``). A session the
agent has appended to since its import gets the new records added to its thread
(``threads_updated``); a thread that exists with other content is refused
(ThreadExists) before anything is written.
"""

from __future__ import annotations

import json
import os
import stat
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from ..errors import InvalidInputError, JournalError, ThreadExists, ThreadNotFound
from ..journal import Entry, EntryType, Journal, ThreadMeta
from ..journal.building import build_entry
from ..journal.payload import payload_bytes
from ..objects import EntryNode, Kind, format_time, object_id, parse_time
from .exporter import session_records
from .manifest import (
    MANIFEST_KEY,
    MANIFEST_VERSION,
    PLACEHOLDERS_KEY,
    RECORD_KEY,
    TEXT_KEY,
    placeholder,
    to_runs,
)
from .plan import (
    EPOCH,
    PlannedRecord,
    SessionPlan,
    TranscriptFormat,
    custom_entry,
    thread_id_for,
)
from .source import SourceFile, TranscriptError, compact_json, read_source

WRITE_CHUNK = 2048
"""Objects stored per ``put_many`` call."""

Progress = Callable[[str, int, int | None], None]
"""Called as ``progress(label, done, total)`` during long work; total may be None."""


class TranscriptImportReport(BaseModel):
    """What ``import_transcripts`` did."""

    format: str
    files: int = 0
    """Session files read."""
    records: int = 0
    """Records (non-blank lines) read."""
    threads_created: list[str] = Field(default_factory=list)
    threads_unchanged: list[str] = Field(default_factory=list)
    """Threads that already held every record of their session."""
    threads_updated: list[str] = Field(default_factory=list)
    """Threads that held an earlier copy of their session and got the records added since."""
    skipped: list[str] = Field(default_factory=list)
    """Files without a single record (empty), left out."""
    records_shared: int = 0
    """Records whose entry another session of the import, or the store, already had."""
    objects_written: int = 0
    """Objects the store did not hold before."""
    source_bytes: int = 0
    """Size of the files read."""
    stored_bytes: int = 0
    """Compressed size of the objects written (before any later ``pack``)."""
    saved_bytes: int = 0
    """``source_bytes - stored_bytes``."""


@dataclass(frozen=True)
class _Stored:
    """The record an entry stores, as fork matching needs it."""

    record: dict[str, Any]
    text: str
    """The stored text (``transcript.record``)."""
    placeholders: bool
    """True if the text has placeholder keys set to null (export always re-encodes)."""


Made = tuple[str, Entry, str | None, datetime]
"""(entry id, entry, parent id, created_at) of an entry an import built."""
PathItem = tuple[str, _Stored | None]
"""(entry id, its stored record, None if kept verbatim)."""


@dataclass
class _Built:
    """One session, turned into objects and a thread to create."""

    plan: SessionPlan
    meta: ThreadMeta
    heads: list[str]
    tips: list[str]
    lines: list[PathItem] = field(default_factory=list)
    """(entry id, stored record) of the session's records in file order (the records kept
    in the manifest left out): what a fork of this session copied."""
    made: list[Made] = field(default_factory=list)
    """(entry id, entry, parent id, created_at) of every entry this session built, parents
    first, its manifest last: what an update appends to a thread holding an older copy."""


def _is_regular(path: Path) -> bool:
    try:
        return stat.S_ISREG(os.stat(path).st_mode)
    except OSError:
        return False


def discover(fmt: TranscriptFormat, paths: Sequence[str | Path]) -> list[tuple[Path, str]]:
    """(file, relative path) of every session file named or found under a directory."""
    found: list[tuple[Path, str]] = []
    for given in paths:
        path = Path(given)
        if path.is_dir():
            for file in fmt.find_sessions(path):
                if _is_regular(file):
                    found.append((file, file.relative_to(path).as_posix()))
        elif path.exists():
            if not _is_regular(path):
                raise TranscriptError(str(path), None, "not a regular file")
            found.append((path, path.name))
        else:
            raise TranscriptError(str(path), None, "no such file or directory")
    return found


def _record_pairs(plan: SessionPlan) -> dict[str, PlannedRecord]:
    by_key: dict[str, PlannedRecord] = {}
    for record in plan.records:
        if record.key in by_key:
            first = plan.source.lines[by_key[record.key].index].number
            raise plan.error(record.index, f"id {record.key!r} already used on line {first}")
        by_key[record.key] = record
    return by_key


def _same_but(a: dict[str, Any], b: dict[str, Any], ignore: Iterable[str]) -> bool:
    """True if two records have the same keys in the same order and equal values except
    for ``ignore`` (compared as JSON text: ``1``, ``1.0`` and ``true`` differ)."""
    if list(a) != list(b):
        return False
    skip = set(ignore)
    left = {k: v for k, v in a.items() if k not in skip}
    right = {k: v for k, v in b.items() if k not in skip}
    return compact_json(left) == compact_json(right)


class _Importer:
    """Builds every session's objects in memory, then writes them."""

    def __init__(self, journal: Journal, fmt: TranscriptFormat, progress: Progress | None) -> None:
        self.journal = journal
        self.fmt = fmt
        self.progress = progress
        self.pending: dict[str, EntryNode] = {}
        self.objects: dict[str, tuple[Kind, bytes]] = {}
        self.built: dict[str, _Built] = {}
        self.records: dict[str, _Stored | None] = {}
        """Entry id -> the record it stores (None: kept verbatim), for fork matching."""
        self.owners: dict[str, str] = {}
        """Entry id -> the thread of the session that first built it (or holds it)."""
        self.report = TranscriptImportReport(format=fmt.name)
        self.max_body = journal.store.objects.codec.max_object_size

    # -- planning -------------------------------------------------------------------------

    def plan_all(self, files: list[tuple[Path, str]]) -> list[SessionPlan]:
        plans: list[SessionPlan] = []
        seen: dict[str, SourceFile] = {}
        for number, (path, relative) in enumerate(files, start=1):
            source = read_source(path, relative)
            self.report.files += 1
            self.report.source_bytes += source.size
            if not source.lines:
                self.report.skipped.append(str(path))
                continue
            self.report.records += len(source.lines)
            try:
                plan = self.fmt.plan(source)
            except RecursionError:
                raise source.error(None, "records nested too deeply") from None
            if plan.thread_id in seen:
                raise source.error(
                    None, f"session {plan.session_key!r} is also in {seen[plan.thread_id].path}"
                )
            seen[plan.thread_id] = source
            plans.append(plan)
            if self.progress is not None:
                self.progress("reading", number, len(files))
        return _dependency_order(plans)

    # -- building -------------------------------------------------------------------------

    def _source_lines(self, thread_id: str) -> list[PathItem]:
        """A source session's records in file order, from this import or from the store."""
        built = self.built.get(thread_id)
        if built is not None:
            return built.lines
        try:
            session = session_records(self.journal, thread_id)
        except JournalError:  # absent, not an imported session, or damaged: nothing shared
            return []
        return [(e.id, _stored_of(e.metadata)) for e in session.entries if e is not None]

    def _match_fork(
        self,
        plan: SessionPlan,
        resolved: dict[str, str],
        overrides: list[tuple[int, str, Any]],
    ) -> tuple[str, str] | None:
        """Share the records a fork copied from its source; return (thread, entry) forked."""
        assert plan.fork_of is not None
        source_thread = thread_id_for(plan.format, plan.fork_of)
        path = self._source_lines(source_thread)
        if not path:
            return None
        copies = [r for r in plan.records if r.index != plan.fork_header]
        matched = 0
        for record, (oid, stored) in zip(copies, path, strict=False):
            line = plan.source.lines[record.index]
            if stored is None:
                break
            changed = [
                key
                for key in plan.fork_ignore
                if key in stored.record
                and key in line.record
                and compact_json(stored.record[key]) != compact_json(line.record[key])
            ]
            if changed or stored.placeholders:  # export re-encodes: the line must be compact
                ignore = plan.fork_ignore + plan.placeholders
                if not line.exact or not _same_but(line.record, stored.record, ignore):
                    break
            elif line.text != stored.text:  # export writes the stored text as it is
                break
            resolved[record.key] = oid
            self.records.setdefault(oid, stored)
            if stored.placeholders:  # this copy's values, whatever the source's were
                changed += [key for key in plan.placeholders if key in line.record]
            overrides += [(record.index, key, line.record[key]) for key in changed]
            matched += 1
        if matched == 0:
            return None
        last_shared = copies[matched - 1].key
        if plan.fork_header is not None:
            header = next(r for r in plan.records if r.index == plan.fork_header)
            header.parent = last_shared
            if matched < len(copies) and copies[matched].parent == last_shared:
                copies[matched].parent = header.key
        return source_thread, resolved[last_shared]

    def _order(
        self, plan: SessionPlan, by_key: dict[str, PlannedRecord], resolved: set[str]
    ) -> list[PlannedRecord]:
        """Records to build, every parent before its children; TranscriptError on a cycle."""
        done: set[str] = set(resolved)
        order: list[PlannedRecord] = []
        for record in plan.records:
            chain: list[PlannedRecord] = []
            on_chain: set[str] = set()
            current: PlannedRecord | None = record
            while current is not None and current.key not in done:
                if current.key in on_chain:
                    raise plan.error(current.index, "parent links form a cycle")
                chain.append(current)
                on_chain.add(current.key)
                parent = current.parent
                current = by_key.get(parent) if parent is not None else None
            for item in reversed(chain):
                done.add(item.key)
                order.append(item)
        return order

    def _payload(
        self, plan: SessionPlan, record: PlannedRecord, stored_values: dict[int, dict[str, Any]]
    ) -> tuple[bytes, Entry]:
        """The entry's payload and the entry (with the metadata it carries)."""
        line = plan.source.lines[record.index]
        metadata = dict(record.entry.metadata)
        keys = [key for key in plan.placeholders if key in line.record]
        text = _with_placeholders(line.text, line.record, keys) if keys else line.text
        if text is None:  # the values are not written plainly: kept verbatim, not shared
            metadata[TEXT_KEY] = line.text
        else:
            metadata[RECORD_KEY] = text
            if keys:
                metadata[PLACEHOLDERS_KEY] = ",".join(keys)
                stored_values[record.index] = {key: line.record[key] for key in keys}
        update: dict[str, Any] = {"metadata": metadata}
        if record.entry.type is EntryType.CUSTOM and record.entry.message is None:
            update["summary"] = record.entry.summary or _label(line.record)
        entry = record.entry.model_copy(update=update)
        try:
            body = payload_bytes(entry)
        except InvalidInputError:  # a lone surrogate in the text taken from the record
            message = entry.message
            if message is None:
                raise plan.error(record.index, "record is not valid Unicode") from None
            clean = {
                name: value.encode("utf-8", "replace").decode("utf-8")
                for name, value in message.model_dump().items()
                if isinstance(value, str)
            }
            entry = entry.model_copy(update={"message": message.model_copy(update=clean)})
            body = payload_bytes(entry)
        if len(body) > self.max_body:
            raise plan.error(
                record.index, f"record too large to store ({len(body)} bytes with its message)"
            )
        return body, entry

    def build(self, plan: SessionPlan) -> None:
        by_key = _record_pairs(plan)
        resolved: dict[str, str] = {}
        overrides: list[tuple[int, str, Any]] = []
        forked = self._match_fork(plan, resolved, overrides) if plan.fork_of else None
        oids: dict[str, str] = dict(resolved)
        placeholder_values: dict[int, dict[str, Any]] = {}
        made: list[Made] = []
        for record in self._order(plan, by_key, set(resolved)):
            if record.refs:
                update = {name: oids.get(key, "") for name, key in record.refs.items()}
                record.entry = record.entry.model_copy(update=update)
            body, entry = self._payload(plan, record, placeholder_values)
            payload_oid = object_id(Kind.BLOB, body)
            parent = oids.get(record.parent) if record.parent is not None else None
            built_entry = build_entry(
                body,
                payload_oid,
                parent,
                format_time(record.created_at),
                record.entry.turn_id,
                self._node,
            )
            node, node_body, oid = built_entry.node, built_entry.body, built_entry.oid
            if oid in self.pending:
                self.report.records_shared += 1
            self.owners.setdefault(oid, plan.thread_id)
            line = plan.source.lines[record.index]
            if oid not in self.records:
                self.records[oid] = _stored_of(entry.metadata, line.record)
            self.pending[oid] = node
            self.objects.setdefault(payload_oid, (Kind.BLOB, body))
            self.objects.setdefault(oid, (Kind.ENTRY, node_body))
            oids[record.key] = oid
            made.append((oid, entry, parent, record.created_at))
        self.report.records_shared += len(resolved)

        line_oids = {record.index: oids[record.key] for record in plan.records}
        members = set(line_oids.values())
        nodes = {oid: self._node(oid) for oid in members}
        parents = {node.parent for node in nodes.values()}
        tips = sorted(members - parents)
        canonical = sorted(members, key=lambda oid: (nodes[oid].created_at, nodes[oid].depth, oid))
        position = {oid: i for i, oid in enumerate(canonical)}
        headers = set(plan.headers)
        manifest: dict[str, Any] = {
            "format": plan.format,
            "version": MANIFEST_VERSION,
            "session": plan.session_key,
            "path": plan.source.relative,
            "records": len(plan.source.lines),
            "tips": tips,
            "order": to_runs(
                position[line_oids[i]] for i in range(len(plan.source.lines)) if i not in headers
            ),
        }
        if headers:
            manifest["headers"] = [[i, plan.source.lines[i].text] for i in sorted(headers)]
        defaults, exceptions = _placeholder_defaults(placeholder_values)
        if defaults:
            manifest["defaults"] = defaults
        overrides += exceptions
        if overrides:
            manifest["overrides"] = _group_overrides(overrides)
        source = plan.source
        if source.bom:
            manifest["bom"] = True
        if source.eol != "\n":
            manifest["eol"] = source.eol
        if not source.final_newline:
            manifest["final_newline"] = False
        if source.blank:
            manifest["blank"] = [list(item) for item in source.blank]

        leaf = oids.get(plan.leaf) if plan.leaf is not None else None
        times = sorted(nodes[oid].created_at for oid in members)
        last = max(times) if times else None
        manifest_entry = custom_entry().model_copy(
            update={"metadata": {MANIFEST_KEY: compact_json(manifest)}}
        )
        body = payload_bytes(manifest_entry)
        payload_oid = object_id(Kind.BLOB, body)
        created = plan.created_at or (parse_time(times[0]) if times else EPOCH)
        manifest_time = parse_time(last) if last else created
        manifest_built = build_entry(
            body, payload_oid, leaf, format_time(manifest_time), "", self._node
        )
        node, node_body = manifest_built.node, manifest_built.body
        manifest_oid = manifest_built.oid
        self.pending[manifest_oid] = node
        made.append((manifest_oid, manifest_entry, leaf, manifest_time))
        self.objects.setdefault(payload_oid, (Kind.BLOB, body))
        self.objects.setdefault(manifest_oid, (Kind.ENTRY, node_body))

        meta = ThreadMeta(
            id=plan.thread_id,
            leaf_id=leaf or "",
            title=plan.title,
            created_at=created,
            updated_at=parse_time(last) if last else created,
        )
        if plan.parent_session is not None:
            meta.parent_thread_id = thread_id_for(plan.format, plan.parent_session)
        if forked is None:
            forked = self._shared_prefix(plan.thread_id, leaf)
        if forked is not None:
            meta.parent_thread_id = meta.parent_thread_id or forked[0]
            meta.forked_from_thread_id, meta.forked_from_entry_id = forked
        heads = sorted((set(tips) - {leaf}) | {manifest_oid})
        built = _Built(plan, meta, heads, tips, made=made)
        built.lines = [
            (line_oids[i], self.records.get(line_oids[i]))
            for i in range(len(plan.source.lines))
            if i not in headers
        ]
        self.built[plan.thread_id] = built

    def _shared_prefix(self, thread_id: str, leaf: str | None) -> tuple[str, str] | None:
        """(thread, entry) if the leaf's path runs into entries another session of this
        import built first: this session was resumed or forked from that one."""
        current = leaf
        while current is not None:
            owner = self.owners.get(current, thread_id)
            if owner != thread_id:
                return owner, current
            current = self._node(current).parent
        return None

    def _node(self, oid: str) -> EntryNode:
        node = self.pending.get(oid)
        return node if node is not None else self.journal.entry_node(oid)

    # -- writing --------------------------------------------------------------------------

    def _existing(self, built: _Built) -> tuple[str, list[Made]]:
        """How the session's thread stands: ``("absent", [])``, ``("same", [])`` (it holds
        every record), or ``("grown", entries to append)`` when it holds an earlier copy
        of the session (the agent has written more since). ThreadExists otherwise."""
        thread_id = built.meta.id
        try:
            held = {entry.id for entry in self.journal.entries(thread_id)}
        except ThreadNotFound:
            return "absent", []
        if all(tip in held for tip in built.tips):
            return "same", []
        made = {oid for oid, *_ in built.made}
        members = made | set(self._members(built))
        stale = held - members
        todo = [item for item in built.made if item[0] not in held]
        appendable = all(
            parent is not None and (parent in held or parent in made) for _, _, parent, _ in todo
        )
        old_manifests = all(
            MANIFEST_KEY in self.journal.entry(thread_id, oid).metadata for oid in stale
        )
        if not (appendable and old_manifests and members - held <= made):
            raise ThreadExists(
                f"thread {thread_id!r} already exists with other records "
                f"(from {built.plan.source.path}); delete it to import this file again"
            )
        return "grown", todo

    def _members(self, built: _Built) -> list[str]:
        members: list[str] = []
        stack = list(built.tips)
        seen: set[str] = set()
        while stack:
            oid = stack.pop()
            if oid in seen:
                continue
            seen.add(oid)
            members.append(oid)
            parent = self._node(oid).parent
            if parent is not None:
                stack.append(parent)
        return members

    def _update(self, built: _Built, todo: list[Made]) -> None:
        """Append what the session gained since it was imported: one commit, then the leaf
        moves to the session's leaf (a second commit; both states are complete threads)."""
        thread_id = built.meta.id
        with self.journal.batch(thread_id) as batch:
            for oid, entry, parent, created in todo:
                stored = batch.append(entry, parent_id=parent, now=created)
                if stored.id != oid:
                    raise ThreadExists(f"thread {thread_id!r} could not take the new records")
        if built.meta.leaf_id:
            self.journal.move_leaf(thread_id, built.meta.leaf_id, now=built.meta.updated_at)
        meta = self.journal.thread(thread_id)
        if built.meta.title and meta.title != built.meta.title:
            meta.title = built.meta.title
            self.journal.update_thread(meta)

    def write(self) -> None:
        created: list[_Built] = []
        updates: list[tuple[_Built, list[Made]]] = []
        for built in self.built.values():
            state, todo = self._existing(built)
            if state == "absent":
                created.append(built)
            elif state == "grown":
                updates.append((built, todo))
            else:
                self.report.threads_unchanged.append(built.meta.id)
        if not created and not updates:
            return
        store = self.journal.store.objects
        codec = store.codec
        with store.write_guard():
            missing = store.freshen(list(self.objects))
            writes = [
                (oid, kind, body) for oid, (kind, body) in self.objects.items() if oid in missing
            ]
            for start in range(0, len(writes), WRITE_CHUNK):
                chunk = writes[start : start + WRITE_CHUNK]
                store.put_many([(kind, body) for _, kind, body in chunk])
                self.report.stored_bytes += sum(
                    len(codec.compress(kind, body)) for _, kind, body in chunk
                )
                if self.progress is not None:
                    self.progress("writing", start + len(chunk), len(writes))
            self.report.objects_written = len(writes)
            for built in created:
                try:
                    self.journal.create_thread_with_heads(built.meta, built.heads)
                except ThreadExists:
                    if self._existing(built)[0] != "same":
                        raise
                    self.report.threads_unchanged.append(built.meta.id)
                    continue
                self.report.threads_created.append(built.meta.id)
        for built, todo in updates:
            self._update(built, todo)
            self.report.threads_updated.append(built.meta.id)


def _with_placeholders(text: str, record: dict[str, Any], keys: list[str]) -> str | None:
    """The line with each key's value replaced by null, by text (no re-encoding), or None
    if that cannot be undone exactly: the key and value must appear once, written as
    compact JSON, and the placeholder nowhere else."""
    for key in keys:
        null = placeholder(key)
        pair = f"{compact_json(key)}:{compact_json(record[key])}"
        if text.count(pair) != 1 or (pair != null and null in text):
            return None
        text = text.replace(pair, null, 1)
    return text


def _label(record: dict[str, Any]) -> str:
    """A short name for a record that carries no message (what ``log`` and ``tree`` show):
    its type, and its subtype or payload type (``event_msg token_count``)."""
    payload = record.get("payload")
    parts = [
        record.get("type"),
        record.get("subtype"),
        payload.get("type") if isinstance(payload, dict) else None,
    ]
    label = " ".join(part for part in parts if isinstance(part, str) and part)
    return f"[{label[:80] or 'record'}]"


def _stored_of(metadata: Any, record: dict[str, Any] | None = None) -> _Stored | None:
    """The stored record of an entry's metadata (``record``: already parsed), or None."""
    text = metadata.get(RECORD_KEY) if isinstance(metadata, dict) else None
    if not isinstance(text, str):
        return None
    if record is None:
        try:
            parsed = json.loads(text)
        except ValueError:
            return None
        if not isinstance(parsed, dict):
            return None
        record = parsed
    return _Stored(record, text, PLACEHOLDERS_KEY in metadata)


def _placeholder_defaults(
    values: dict[int, dict[str, Any]],
) -> tuple[dict[str, Any], list[tuple[int, str, Any]]]:
    """Each placeholder key's most common value, and the positions that differ from it."""
    by_key: dict[str, list[tuple[int, Any]]] = {}
    for index, items in values.items():
        for key, value in items.items():
            by_key.setdefault(key, []).append((index, value))
    defaults: dict[str, Any] = {}
    exceptions: list[tuple[int, str, Any]] = []
    for key, pairs in by_key.items():
        counts = Counter(compact_json(value) for _, value in pairs)
        common = counts.most_common(1)[0][0]
        defaults[key] = json.loads(common)
        exceptions += [(i, key, v) for i, v in pairs if compact_json(v) != common]
    return defaults, exceptions


def _group_overrides(overrides: list[tuple[int, str, Any]]) -> list[dict[str, Any]]:
    groups: dict[tuple[str, str], list[int]] = {}
    for index, key, value in overrides:
        groups.setdefault((key, compact_json(value)), []).append(index)
    return [
        {"key": key, "value": json.loads(value), "at": to_runs(sorted(indexes))}
        for (key, value), indexes in groups.items()
    ]


def _dependency_order(plans: list[SessionPlan]) -> list[SessionPlan]:
    """Sessions ordered so that a fork's source and a subagent's session come first."""
    by_key = {plan.session_key: plan for plan in plans}
    done: set[str] = set()
    order: list[SessionPlan] = []
    for plan in plans:
        chain: list[SessionPlan] = []
        current: SessionPlan | None = plan
        while current is not None and current.session_key not in done:
            if current in chain:
                raise current.source.error(None, "sessions fork from each other in a cycle")
            chain.append(current)
            nxt = current.fork_of or current.parent_session
            current = by_key.get(nxt) if nxt is not None else None
        for item in reversed(chain):
            done.add(item.session_key)
            order.append(item)
    return order


def import_transcripts(
    journal: Journal,
    paths: Sequence[str | Path],
    fmt: TranscriptFormat,
    progress: Progress | None = None,
) -> TranscriptImportReport:
    """Import session files (or directories of them) of one format; see the module doc."""
    importer = _Importer(journal, fmt, progress)
    plans = importer.plan_all(discover(fmt, paths))
    for number, plan in enumerate(plans, start=1):
        importer.build(plan)
        if progress is not None:
            progress("building", number, len(plans))
    importer.write()
    report = importer.report
    report.saved_bytes = report.source_bytes - report.stored_bytes
    return report
