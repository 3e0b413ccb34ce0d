"""gc: delete what no ref, and no recent reflog entry, can reach.

1. Expire reflog entries older than ``reflog_expiry`` (default 30 days). Until then a
   deleted thread or run stays restorable, and everything it reaches stays.
2. Mark every object reachable from the refs and the remaining reflog entries (a typed
   walk: blobs are never read, so marking costs one read per structured object).
3. Find the garbage: unreachable objects whose newest copy is older than ``grace``
   (default 1 hour). A writer about to link an object has just written or freshened it,
   so it is young and kept, and so is everything a young object references: a writer
   reusing an existing object freshens only that object and trusts the closure invariant
   for the rest.
4. Delete it without ever breaking the closure invariant, even if killed midway:
   referencing objects before referenced ones. On a backend that keeps its own copies
   (loose copies and packs) this is ``sweep.sweep``: it frees space before writing
   anything (loose copies and wholly-garbage packs first), then rewrites the live part
   of packs that hold garbage; elsewhere ``sweep.delete_referencing_first``. An object
   freshened meanwhile is spared, with everything it references.

``dry_run`` reports what would go and its bytes. ``prune_now`` removes the grace period
(tests and deliberate cleanups); on a backend that keeps its own copies it then pauses
writers for its whole run (``StoredCopies.writers_paused``), so no object stored but not
yet linked can be taken. On other backends ``prune_now`` must not race with writers.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta

from ..backends import Store
from ..backends.condemned import CondemnedPacks
from ..backends.copies import StoredCopies
from ..errors import JournalError
from ..objects import Kind
from .condemning import sweep as condemning_sweep
from .reports import GcReport, Progress
from .sweep import delete_referencing_first, sweep
from .walk import ROOT_PREFIXES, roots, walk

DEFAULT_GRACE = timedelta(hours=1)
DEFAULT_REFLOG_EXPIRY = timedelta(days=30)
_END_OF_SECOND = 1 - 1e-6


def expire_reflogs(store: Store, cutoff: datetime, dry_run: bool) -> int:
    """Drop reflog entries older than ``cutoff``; return how many (would) go."""
    expired = 0
    for prefix in ROOT_PREFIXES:
        for name in store.refs.reflog_names(prefix):
            if dry_run:
                expired += sum(1 for e in store.refs.reflog(name) if e.time < cutoff)
            else:
                expired += store.refs.rewrite_reflog(name, lambda e: e.time >= cutoff)
    return expired


def mark(
    store: Store,
    reflog_cutoff: datetime | None,
    progress: Progress | None = None,
    unreadable: dict[str, Kind] | None = None,
) -> set[bytes]:
    """Everything reachable from refs and from reflog entries newer than the cutoff.

    Without ``unreadable``, a missing or damaged reachable object raises; with it, such
    objects (and refs that cannot be read) are collected there and the walk goes on."""
    count = 0

    def visit(_oid: str, _kind: Kind) -> None:
        nonlocal count
        count += 1
        if progress is not None and count % 1000 == 0:
            progress("marking", count, None)

    if unreadable is None:
        return walk(store, roots(store, reflog_cutoff), visit=visit)

    def note(subject: str, _message: str) -> None:
        if subject.startswith(("ref ", "reflog ")):
            unreadable.setdefault(subject, Kind.THREAD)  # its whole history is unknown

    start = roots(store, reflog_cutoff, on_problem=note)
    return walk(store, start, on_problem=note, visit=visit, unreadable=unreadable)


def protect_young(store: Store, young: Iterable[str], reachable: set[bytes]) -> set[bytes]:
    """Young unreachable objects and everything they reach (kept with them)."""
    start: list[tuple[str, Kind, str]] = []
    kept: set[bytes] = set()
    for oid in young:
        kept.add(bytes.fromhex(oid))
        try:
            kind, _ = store.objects.get(oid)
        except JournalError:
            continue  # damaged or gone: fsck reports it; nothing below it to protect
        if kind is not Kind.BLOB:
            start.append((oid, kind, "young unreachable object"))
    if start:
        kept |= walk(store, start, on_problem=lambda _subject, _message: None)
    return kept - reachable


def gc(
    store: Store,
    *,
    dry_run: bool = False,
    prune_now: bool = False,
    grace: timedelta = DEFAULT_GRACE,
    reflog_expiry: timedelta = DEFAULT_REFLOG_EXPIRY,
    now: datetime | None = None,
    progress: Progress | None = None,
) -> GcReport:
    """Collect garbage; see the module docstring."""
    started = time.monotonic()
    now = now or datetime.now(UTC)
    young_after = (now - (timedelta(0) if prune_now else grace)).timestamp()
    if prune_now:  # nothing written before this call counts as young
        young_after = math.floor(young_after) + 1.0
    copies = store.stored_copies if store.capabilities.stored_copies else None
    if copies is not None:
        pause = copies.writers_paused() if prune_now and not dry_run else contextlib.nullcontext()
        with copies.maintenance_lock(), pause:
            if not dry_run:
                copies.begin_collection()  # before anything is read
            if isinstance(copies, CondemnedPacks) and store.capabilities.condemns_packs:
                report = _condemn(
                    store,
                    copies,
                    copies,
                    now,
                    reflog_expiry,
                    young_after,
                    dry_run,
                    prune_now,
                    progress,
                )
            else:
                report = _collect(store, copies, now, reflog_expiry, young_after, dry_run, progress)
    else:
        report = _collect(store, None, now, reflog_expiry, young_after, dry_run, progress)
    report.seconds = round(time.monotonic() - started, 3)
    return report


def _collect(
    store: Store,
    copies: StoredCopies | None,
    now: datetime,
    reflog_expiry: timedelta,
    young_after: float,
    dry_run: bool,
    progress: Progress | None,
) -> GcReport:
    report = GcReport(dry_run=dry_run)
    report.reflog_entries_expired = expire_reflogs(store, now - reflog_expiry, dry_run)
    unreadable: dict[str, Kind] = {}
    reachable = mark(store, now - reflog_expiry, progress, unreadable)
    report.reachable_objects = len(reachable)
    report.unreadable_reachable_objects = len(unreadable)
    # What a structured object (or a ref) that cannot be read references is unknown: any
    # garbage could be it, so none is deleted until fsck --repair-from (or a deliberate
    # removal of what is damaged) makes the reachable objects readable again. Missing or
    # damaged blobs reference nothing: they change nothing here.
    uncertain = any(kind is not Kind.BLOB for kind in unreadable.values())
    if copies is not None:
        scanned = _scan(copies, reachable)
        ages, sizes = scanned.ages, scanned.sizes
    else:
        ages, sizes = _ages(store, reachable), {}
    protected = protect_young(store, (o for o, t in ages.items() if t >= young_after), reachable)
    garbage = [oid for oid in ages if bytes.fromhex(oid) not in protected]
    report.unreachable_objects = len(ages)
    report.kept_young_objects = len(ages) - len(garbage)
    if uncertain and garbage:
        garbage = []
        report.kept_for_damage = True
    report.deleted_objects = len(garbage)
    report.deleted_bytes = sum(sizes.get(oid, 0) for oid in garbage)
    if dry_run:
        return report
    if copies is not None:
        report.temp_files_removed = copies.remove_leftovers(young_after)
        if garbage:
            doomed = set(garbage)
            holders = {oid: scanned.holders[oid] for oid in garbage}
            live: dict[str, set[str]] = {}
            for pack in {name for where in holders.values() for name in where if name}:
                members = scanned.members.get(pack, set())
                live[pack] = {oid for oid in members if oid not in doomed}
            result = sweep(store, copies, holders, live, young_after, progress)
            report.deleted_objects = len(result.deleted)
            report.deleted_bytes = sum(sizes.get(oid, 0) for oid in result.deleted)
            report.kept_young_objects += len(result.spared)
            report.packs_rewritten = result.packs_rewritten
            report.packs_removed = result.packs_retired
    elif garbage:
        spared = delete_referencing_first(
            store, garbage, lambda oid: _delete_if_old(store, oid, young_after)
        )
        report.deleted_objects -= len(spared)
        report.kept_young_objects += len(spared)
    return report


def _condemn(
    store: Store,
    copies: StoredCopies,
    condemned: CondemnedPacks,
    now: datetime,
    reflog_expiry: timedelta,
    young_after: float,
    dry_run: bool,
    prune_now: bool,
    progress: Progress | None,
) -> GcReport:
    """gc on a store that deletes in two phases (``condemning``): garbage is condemned,
    condemned packs older than the grace period go (with ``prune_now``, at once)."""
    report = GcReport(dry_run=dry_run)
    report.reflog_entries_expired = expire_reflogs(store, now - reflog_expiry, dry_run)
    unreadable: dict[str, Kind] = {}
    reachable = mark(store, now - reflog_expiry, progress, unreadable)
    report.reachable_objects = len(reachable)
    report.unreadable_reachable_objects = len(unreadable)
    scanned = _scan(copies, reachable)
    young = (oid for oid, written in scanned.ages.items() if written >= young_after)
    protected = protect_young(store, young, reachable)
    report.unreachable_objects = len(scanned.ages)
    report.kept_young_objects = sum(1 for oid in scanned.ages if bytes.fromhex(oid) in protected)
    if any(kind is not Kind.BLOB for kind in unreadable.values()):
        report.kept_for_damage = True  # what the unreadable objects reference is unknown
        return report
    result = condemning_sweep(
        store, copies, condemned, reachable | protected, young_after, dry_run, progress, prune_now
    )
    report.condemned_objects = result.condemned_objects
    report.deleted_objects = result.deleted_objects
    report.deleted_bytes = result.deleted_bytes
    report.packs_rewritten = result.packs_rewritten
    report.packs_removed = result.packs_removed
    if not dry_run:
        report.temp_files_removed = copies.remove_leftovers(young_after)
        report.tombstones_removed = store.refs.expire_tombstones((now - reflog_expiry).timestamp())
    return report


def _ages(store: Store, reachable: set[bytes]) -> dict[str, float]:
    """Backends without stored copies: each unreachable object's write time (-inf if
    unknown: the grace period applies only where the backend records write times)."""
    ages: dict[str, float] = {}
    for oid in store.objects.iter_oids():
        if bytes.fromhex(oid) not in reachable:
            written = store.objects.object_time(oid)
            ages[oid] = -math.inf if written is None else written + _END_OF_SECOND
    return ages


class _Scanned:
    """What gc needs from one scan of every stored copy."""

    def __init__(self) -> None:
        self.ages: dict[str, float] = {}
        """Newest write time of every unreachable object, over all its copies."""
        self.sizes: dict[str, int] = {}
        """Stored bytes of every unreachable object, over all its copies."""
        self.holders: dict[str, set[str | None]] = {}
        """Where every unreachable object's copies are (None: loose)."""
        self.members: dict[str, set[str]] = {}
        """Every pack's objects other than its dictionary, by pack name."""


def _scan(copies: StoredCopies, reachable: set[bytes]) -> _Scanned:
    scanned = _Scanned()
    dictionaries = {p.name: p.dictionary_oid for p in copies.packs()}
    for copy in copies.scan():
        if copy.pack is not None:
            if dictionaries.get(copy.pack) == copy.oid:
                continue  # part of its pack, not an object of the store
            scanned.members.setdefault(copy.pack, set()).add(copy.oid)
        if bytes.fromhex(copy.oid) in reachable:
            continue
        scanned.ages[copy.oid] = max(scanned.ages.get(copy.oid, -math.inf), copy.written)
        scanned.sizes[copy.oid] = scanned.sizes.get(copy.oid, 0) + copy.size
        scanned.holders.setdefault(copy.oid, set()).add(copy.pack)
    return scanned


def _delete_if_old(store: Store, oid: str, young_after: float) -> bool:
    written = store.objects.object_time(oid)
    if written is not None and written + _END_OF_SECOND >= young_after:
        return False  # freshened since it was judged garbage
    store.objects.delete(oid)
    return True
