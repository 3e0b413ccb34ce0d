"""gc: delete what no ref, and no recent reflog entry, can reach.

1. Expire reflog entries older than ``reflog_expiry`` (default 30 days). Until then a
   deleted thread or run stays restorable, and everything it reaches stays.
2. Mark every object reachable from the refs and the remaining reflog entries (a typed
   walk: blobs are never read, so marking costs one read per structured object).
3. Sweep unreachable objects older than ``grace`` (default 1 hour): a writer that is
   about to link an object has just written or freshened it, so it is young and kept.
   Loose copies are unlinked (each re-checked for age first); packs holding garbage are
   rewritten without it, and an old pack is only removed if nobody freshened it meanwhile.

``dry_run`` reports what would go and its bytes; ``prune_now`` sets the grace period to
zero (tests and deliberate cleanups). Memory: the mark set holds 32-byte ids.
"""

from __future__ import annotations

import os
import time
from datetime import UTC, datetime, timedelta

from ..backends import Store
from ..backends.local.objects import LocalObjectStore
from ..objects import Kind
from .packer import remove_loose, repack
from .reports import GcReport, Progress
from .walk import ROOT_PREFIXES, roots, walk

DEFAULT_GRACE = timedelta(hours=1)
DEFAULT_REFLOG_EXPIRY = timedelta(days=30)


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
    store: Store, reflog_cutoff: datetime | None, progress: Progress | None = None
) -> set[bytes]:
    """Everything reachable from refs and from reflog entries newer than the cutoff."""
    count = 0

    def visit(_oid: str, _kind: Kind) -> None:
        nonlocal count
        count += 1
        if progress is not None and count % 1000 == 0:
            progress("marking", count, None)

    return walk(store, roots(store, reflog_cutoff), visit=visit)


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
    grace = timedelta(0) if prune_now else grace
    young_after = (now - grace).timestamp()
    objects = store.objects
    if isinstance(objects, LocalObjectStore):
        with objects.maintenance_lock():
            report = _collect(store, now, reflog_expiry, young_after, dry_run, progress)
    else:
        report = _collect(store, now, reflog_expiry, young_after, dry_run, progress)
    report.seconds = round(time.monotonic() - started, 3)
    return report


def _collect(
    store: Store,
    now: datetime,
    reflog_expiry: timedelta,
    young_after: float,
    dry_run: bool,
    progress: Progress | None,
) -> GcReport:
    cutoff = now - reflog_expiry
    report = GcReport(dry_run=dry_run)
    report.reflog_entries_expired = expire_reflogs(store, cutoff, dry_run)
    reachable = mark(store, cutoff, progress)
    report.reachable_objects = len(reachable)
    objects = store.objects
    if isinstance(objects, LocalObjectStore):
        _sweep_local(store, objects, reachable, young_after, dry_run, report, progress)
    else:
        _sweep_generic(store, reachable, young_after, dry_run, report)
    return report


def _sweep_generic(
    store: Store, reachable: set[bytes], young_after: float, dry_run: bool, report: GcReport
) -> None:
    """Backends without packs: delete unreachable objects one by one (no ages: the grace
    period applies only where the backend records when an object was written)."""
    age = getattr(store.objects, "object_time", None)
    for oid in list(store.objects.iter_oids()):
        if bytes.fromhex(oid) in reachable:
            continue
        report.unreachable_objects += 1
        written = age(oid) if age is not None else None
        if written is not None and written >= young_after:
            report.kept_young_objects += 1
            continue
        report.deleted_objects += 1
        if not dry_run:
            store.objects.delete(oid)


def _sweep_local(
    store: Store,
    objects: LocalObjectStore,
    reachable: set[bytes],
    young_after: float,
    dry_run: bool,
    report: GcReport,
    progress: Progress | None,
) -> None:
    packs = objects.packs()
    dictionaries = {p.dictionary_oid for p in packs if p.dictionary_oid}
    garbage_loose: list[str] = []
    for oid, path in objects.iter_loose():
        if bytes.fromhex(oid) in reachable:
            continue
        report.unreachable_objects += 1
        try:
            stat = os.stat(path)
        except FileNotFoundError:
            continue
        if stat.st_mtime >= young_after:
            report.kept_young_objects += 1
            continue
        garbage_loose.append(oid)
        report.deleted_bytes += stat.st_size
    packed_garbage: set[str] = set()
    keep: set[str] = set()
    dirty_packs = []
    for pack in packs:
        pack_time = pack.file_time()
        had_garbage = False
        for position in range(pack.count):
            oid = pack.oid_at(position)
            if oid in dictionaries:
                continue
            if bytes.fromhex(oid) in reachable:
                keep.add(oid)
                continue
            report.unreachable_objects += 1
            if max(pack.time_at(position), pack_time) >= young_after:
                report.kept_young_objects += 1
                keep.add(oid)
                continue
            if oid not in packed_garbage:
                packed_garbage.add(oid)
                report.deleted_bytes += pack.stored_size_at(position)
            had_garbage = True
        if had_garbage:
            dirty_packs.append((pack, pack_time))
    keep -= packed_garbage
    report.deleted_objects = len(garbage_loose) + len(packed_garbage - set(garbage_loose))
    if dry_run:
        return
    remove_loose(objects, garbage_loose, unless_newer_than=young_after)
    if not dirty_packs:
        return
    repack(store, keep, progress)
    report.packs_rewritten = len(dirty_packs)
    for pack, seen_time in dirty_packs:
        if pack.file_time() == seen_time:  # nobody reused one of its objects meanwhile
            objects.remove_pack(pack)
    for pack in packs:  # clean packs were merged into the new one too
        if all(p is not pack for p, _ in dirty_packs):
            objects.remove_pack(pack)
