"""fsck: prove the store is whole, or say exactly what is wrong.

Full mode reads and hash-verifies every stored object (every loose file and every
packed copy), checks that every object a stored object references exists with the
right kind, that every ref and reflog entry points at an existing object of the right
kind, that every lease parses, and that every pack index is intact; and that message
lists add up: a segment keeps no more messages than its base's list holds, and a
checkpoint naming a segment counts as many messages as the segment's list holds. Quick mode checks
reachability only: it walks from the refs and reflogs, reading every structured object
on the way and checking that every referenced blob exists. Both check that every ref
agrees with what it points at: ``threads/<id>`` with a state of thread ``<id>`` whose
metadata parses, ``checkpoints/<run>`` with a checkpoint of run ``<run>``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from ..backends import Store
from ..errors import CorruptObject, CorruptRef, JournalError
from ..journal.leases import decode_lease
from ..journal.state import CHECKPOINT_PREFIX, LEASE_PREFIX, THREAD_PREFIX, meta_from_state
from ..objects import (
    CheckpointNode,
    Kind,
    MessageNode,
    SegmentNode,
    ThreadStateNode,
    is_oid,
    parse_node,
    typed_references,
)
from .repair import repair
from .reports import FsckReport, Problem, Progress
from .walk import ROOT_PREFIXES, walk

Report = Callable[[str, str], None]


def fsck(
    store: Store,
    *,
    quick: bool = False,
    progress: Progress | None = None,
    repair_from: Store | None = None,
) -> FsckReport:
    """Check the store; ``report.ok`` is False and ``report.problems`` says why.

    With ``repair_from`` (another store holding the same objects, such as a replica
    kept in sync), damaged and missing objects are first restored from it (see
    ``repair``); the check then reports what is still wrong."""
    report = FsckReport(quick=quick)
    if repair_from is not None:
        report.repair = repair(store, repair_from, progress)

    def problem(subject: str, message: str) -> None:
        report.problems.append(Problem(subject=subject, message=message))

    start = _roots(store, problem)
    report.refs_checked = sum(1 for _, _, where in start if where.startswith("ref "))
    report.reflog_entries_checked = len(start) - report.refs_checked
    _check_leases(store, problem)
    _check_ref_owners(store, start, problem)
    if quick:
        report.objects_checked = len(walk(store, start, on_problem=problem, check_blobs=True))
    else:
        kinds = _verify_stored_copies(store, problem, report, progress)
        report.objects_checked = len(kinds)
        _check_references(store, kinds, problem)
        _check_message_lists(store, kinds, problem)
        for oid, kind, where in start:
            found = kinds.get(oid)
            if found is None:
                problem(where, f"points at missing object {oid}")
            elif found is not kind:
                problem(where, f"points at {oid}, a {found.value}, not a {kind.value}")
    report.ok = not report.problems
    return report


def _roots(store: Store, problem: Report) -> list[tuple[str, Kind, str]]:
    """Every ref and reflog value (as ``walk.roots``), reporting unreadable ones."""
    found: list[tuple[str, Kind, str]] = []
    for prefix, kind in ROOT_PREFIXES.items():
        for name in store.refs.list_refs(prefix):
            try:
                value = store.refs.read_ref(name)
            except CorruptRef as exc:
                problem(f"ref {name}", str(exc))
                continue
            if value is not None:
                found.append((value, kind, f"ref {name}"))
        for name in store.refs.reflog_names(prefix):
            try:
                entries = store.refs.reflog(name)
            except CorruptRef as exc:
                problem(f"reflog {name}", str(exc))
                continue
            for entry in entries:
                found += [(v, kind, f"reflog {name}") for v in (entry.old, entry.new) if v]
    return found


def _check_ref_owners(store: Store, start: list[tuple[str, Kind, str]], problem: Report) -> None:
    """Every thread and checkpoint ref points at an object that says it belongs there."""
    for oid, _, where in start:
        if not where.startswith("ref ") or not is_oid(oid):
            continue
        name = where[len("ref ") :]
        try:
            found, body = store.objects.get(oid)
            node = parse_node(found, body, oid)
        except JournalError:
            continue  # missing, damaged or unparsable: reported with the objects
        if isinstance(node, ThreadStateNode) and name.startswith(THREAD_PREFIX):
            expected = name[len(THREAD_PREFIX) :]
            try:
                owner = meta_from_state(oid, node).id
            except CorruptObject as exc:
                problem(where, str(exc))
                continue
        elif isinstance(node, CheckpointNode) and name.startswith(CHECKPOINT_PREFIX):
            owner, expected = node.run_id, name[len(CHECKPOINT_PREFIX) :]
        else:
            continue  # a wrong kind: reported with the objects
        if owner != expected:
            problem(where, f"points at {oid}, which belongs to {owner!r}, not {expected!r}")


def _check_leases(store: Store, problem: Report) -> None:
    for name in store.refs.list_refs(LEASE_PREFIX):
        value = store.refs.read_ref(name)
        if value is not None:
            try:
                decode_lease(name, value)
            except JournalError as exc:
                problem(name, str(exc))


def _copies(store: Store, report: FsckReport, problem: Report) -> Iterator[tuple[str, Kind | None]]:
    """Every stored copy of every object, verified: ``(oid, kind or None if damaged)``."""
    if store.capabilities.stored_copies and store.stored_copies is not None:
        for check in store.stored_copies.verify():
            if check.oid is None:  # the pack as a whole
                report.packs_checked += 1
                if check.problem is not None:
                    problem(check.where, check.problem)
                continue
            if check.problem is not None:
                where = "" if check.where == "loose" else f"in {check.where}: "
                problem(check.oid, where + check.problem)
            yield check.oid, check.kind
        return
    for oid in store.objects.iter_oids():
        try:
            yield oid, store.objects.get(oid)[0]
        except JournalError as exc:
            problem(oid, str(exc))
            yield oid, None


def _verify_stored_copies(
    store: Store, problem: Report, report: FsckReport, progress: Progress | None
) -> dict[str, Kind]:
    kinds: dict[str, Kind] = {}
    damaged: set[str] = set()
    for done, (oid, kind) in enumerate(_copies(store, report, problem), 1):
        if kind is None:
            damaged.add(oid)
        else:
            kinds[oid] = kind
        if progress is not None and done % 1000 == 0:
            progress("verifying", done, None)
    for oid in damaged - set(kinds):
        kinds.pop(oid, None)
    return kinds


def _check_references(store: Store, kinds: dict[str, Kind], problem: Report) -> None:
    for oid, kind in kinds.items():
        if kind is Kind.BLOB:
            continue
        try:
            found, body = store.objects.get(oid)
            references = typed_references(found, body, oid)
        except JournalError as exc:
            problem(oid, str(exc))
            continue
        for ref, expected in references:
            actual = kinds.get(ref)
            if actual is None:
                problem(oid, f"references missing {expected.value} {ref}")
            elif actual is not expected:
                problem(oid, f"references {ref} as a {expected.value}, but it is a {actual.value}")


def _check_message_lists(store: Store, kinds: dict[str, Kind], problem: Report) -> None:
    """Segments keep no more than their bases hold; checkpoints count their segments'
    lists right. (Objects that do not parse, or are missing, are reported elsewhere.)"""
    lengths: dict[str, int] = {}

    def chain_length(last: str) -> int | None:
        pending: list[str] = []
        current: str | None = last
        while current is not None and current not in lengths:
            if kinds.get(current) is not Kind.MESSAGE:
                return None
            node = _parsed(store, current)
            if not isinstance(node, MessageNode):
                return None
            pending.append(current)
            current = node.parent
        length = 0 if current is None else lengths[current]
        for oid in reversed(pending):
            length += 1
            lengths[oid] = length
        return lengths[last]

    def list_length(oid: str, kind: Kind) -> int | None:
        if kind is Kind.MESSAGE:
            return chain_length(oid)
        if oid not in lengths:
            node = _parsed(store, oid) if kinds.get(oid) is Kind.SEGMENT else None
            if not isinstance(node, SegmentNode):
                return None
            lengths[oid] = node.length
        return lengths[oid]

    for oid, kind in kinds.items():
        if kind is Kind.SEGMENT:
            segment = _parsed(store, oid)
            if not isinstance(segment, SegmentNode) or segment.below is None:
                continue
            held = list_length(*segment.below)
            if held is not None and segment.keep > held:
                problem(oid, f"segment keeps {segment.keep} messages of a list of {held}")
        elif kind is Kind.CHECKPOINT:
            node = _parsed(store, oid)
            if isinstance(node, CheckpointNode) and node.segment is not None:
                held = list_length(node.segment, Kind.SEGMENT)
                if held is not None and held != node.message_count:
                    problem(
                        oid,
                        f"checkpoint claims {node.message_count} messages, its segment holds "
                        f"{held}",
                    )


def _parsed(store: Store, oid: str) -> object | None:
    try:
        found, body = store.objects.get(oid)
        return parse_node(found, body, oid)
    except JournalError:
        return None
