"""repair: restore damaged or missing objects from another store (a replica).

fsck finds damage; repair fixes what a replica can fix (``fsck --repair-from REPLICA``):

1. Verify every stored copy, as fsck does, and check every reference. The objects to
   restore are those with no intact copy and those that a ref, a reflog entry or a
   stored object references but that are absent.
2. Fetch each from the replica (its read verifies the hash; the id is checked again
   here) together with whatever it references that is absent here too, and store them
   as fresh loose copies, referenced before referencing.
3. If damaged copies remain in packs, repack: every object now has an intact copy, so
   the damaged packs go. Packs that cannot be read at all are set aside (kept beside
   the store for inspection) once nothing reachable is missing any more.

Objects the replica lacks, or holds damaged too, are reported as still lost; nothing
else changes for them. Repair never removes an intact copy.
"""

from __future__ import annotations

from collections.abc import Iterable

from ..backends import Store
from ..errors import JournalError
from ..objects import Kind, canonical_form, is_oid, object_id, typed_references
from ..packs import PackedObject
from .packer import pack, stored_copies
from .reports import Progress, RepairReport
from .walk import roots

WRITE_BATCH = 256


def repair(store: Store, source: Store, progress: Progress | None = None) -> RepairReport:
    """Restore what is damaged or missing in ``store`` from ``source``; see the module."""
    copies = stored_copies(store)
    report = RepairReport()
    intact: dict[str, Kind] = {}
    damaged: set[str] = set()
    damaged_packs: set[str] = set()
    unreadable_packs: set[str] = set()
    for check in copies.verify():
        if check.oid is None:
            if check.problem is not None:
                damaged_packs.add(check.where)
                if not any(p.name == check.where for p in copies.packs()):
                    unreadable_packs.add(check.where)
            continue
        if check.kind is None:
            damaged.add(check.oid)
            if check.where != "loose":
                damaged_packs.add(check.where)
        else:
            intact[check.oid] = check.kind
    lost = damaged - set(intact)
    missing = _missing_references(store, intact) - lost
    report.damaged = sorted(lost)
    report.missing = sorted(missing)
    fetched, report.still_lost = _fetch(source, lost | missing, intact)
    order = _referenced_first(fetched)
    for start in range(0, len(order), WRITE_BATCH):
        chunk = order[start : start + WRITE_BATCH]
        copies.write_loose([PackedObject(oid, fetched[oid][0]) for oid in chunk])
        if progress is not None:
            progress("restoring", min(start + WRITE_BATCH, len(order)), len(order))
    report.restored = order
    if damaged_packs - unreadable_packs or (damaged - lost):
        pack(store, progress=progress)
        report.repacked = True
    if unreadable_packs and not report.still_lost:
        copies.set_aside(unreadable_packs)
        report.packs_set_aside = sorted(unreadable_packs)
    return report


def _missing_references(store: Store, intact: dict[str, Kind]) -> set[str]:
    """Oids that a ref, a reflog entry or an intact stored object references, absent here."""
    missing = {oid for oid, _, _ in roots(store, on_problem=lambda _s, _m: None)}
    missing = {oid for oid in missing if oid not in intact and is_oid(oid)}
    for oid, kind in intact.items():
        if kind is Kind.BLOB:
            continue
        try:
            found, body = store.objects.get(oid)
            references = typed_references(found, body, oid)
        except JournalError:
            continue
        missing.update(ref for ref, _ in references if ref not in intact)
    return missing


def _fetch(
    source: Store, wanted: Iterable[str], intact: dict[str, Kind]
) -> tuple[dict[str, tuple[bytes, list[str]]], list[str]]:
    """Fetch ``wanted`` and what they reference that is not intact here: canonical forms
    with their references, and the wanted oids the source could not provide."""
    fetched: dict[str, tuple[bytes, list[str]]] = {}
    lost: list[str] = []
    pending = sorted(set(wanted))
    requested = set(pending)
    while pending:
        oid = pending.pop()
        try:
            kind, body = source.objects.get(oid)
            if object_id(kind, body) != oid:
                raise JournalError("the replica returned other content")
            references = [ref for ref, _ in typed_references(kind, body, oid)]
        except JournalError:
            if oid in requested:
                lost.append(oid)
            continue
        fetched[oid] = (canonical_form(kind, body), references)
        for ref in references:
            if ref not in intact and ref not in fetched and ref not in requested:
                requested.add(ref)
                pending.append(ref)
    return fetched, sorted(lost)


def _referenced_first(fetched: dict[str, tuple[bytes, list[str]]]) -> list[str]:
    """Post-order: every fetched object after the fetched objects it references."""
    order: list[str] = []
    done: set[str] = set()
    for root in sorted(fetched):
        stack: list[tuple[str, int]] = [(root, 0)]
        while stack:
            oid, index = stack.pop()
            if oid in done:
                continue
            refs = fetched[oid][1]
            while index < len(refs) and (refs[index] in done or refs[index] not in fetched):
                index += 1
            if index < len(refs):
                stack.append((oid, index + 1))
                stack.append((refs[index], 0))
                continue
            done.add(oid)
            order.append(oid)
    return order
