"""gc: delete what no ref, and no recent reflog entry, can reach.

1. Expire reflog entries older than ``reflog_expiry`` (default 30 days). Until then a
   deleted thread or run stays restorable, and everything it reaches stays.
2. Mark every object reachable from the refs and the remaining reflog entries (a typed
   walk: blobs are never read, so marking costs one read per structured object).
3. Find the garbage: unreachable objects whose newest copy is older than ``grace``
   (default 1 hour). A writer about to link an object has just written or freshened it,
   so it is young and kept, and so is everything a young object references: a writer
   reusing an existing object freshens only that object and trusts the closure invariant
   for the rest. Pack times are whole seconds, so a packed copy counts as written at the
   end of its second.
4. Delete it without ever breaking the closure invariant, even if killed midway: packed
   garbage is first written out loose (with its old time), the packs are rewritten
   without it and the old ones removed (every object they held now exists elsewhere);
   then the garbage goes referencing-before-referenced, level by level (each level's
   directories synced when durable), every loose file re-checked for age first. An
   object freshened meanwhile is spared, with everything it references.

``dry_run`` reports what would go and its bytes. ``prune_now`` removes the grace period
(tests and deliberate cleanups); on a local store it then holds the writers' lock
exclusively for its whole run, pausing commits, so no object stored but not yet linked
can be taken. On other backends ``prune_now`` must not race with writers.
"""

from __future__ import annotations

import contextlib
import math
import os
import time
from collections import Counter
from collections.abc import Callable, Iterable
from datetime import UTC, datetime, timedelta
from pathlib import Path

from ..backends import Store
from ..backends.local.fsutil import fsync_dir, storage_errors
from ..backends.local.objects import LocalObjectStore
from ..backends.local.packs import LocalPack
from ..errors import JournalError
from ..objects import Kind, typed_references
from .packer import repack
from .reports import GcReport, Progress
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
    objects = store.objects
    if isinstance(objects, LocalObjectStore):
        pause = (
            objects.writers.exclusive() if prune_now and not dry_run else contextlib.nullcontext()
        )
        with storage_errors("collecting garbage"), objects.maintenance_lock(), pause:
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
    report = GcReport(dry_run=dry_run)
    report.reflog_entries_expired = expire_reflogs(store, now - reflog_expiry, dry_run)
    reachable = mark(store, now - reflog_expiry, progress)
    report.reachable_objects = len(reachable)
    objects = store.objects
    packs: list[LocalPack] = []
    if isinstance(objects, LocalObjectStore):
        packs = objects.packs()
        ages, sizes = _ages_local(objects, packs, reachable)
    else:
        ages, sizes = _ages(store, reachable)
    protected = protect_young(store, (o for o, t in ages.items() if t >= young_after), reachable)
    garbage = [oid for oid in ages if bytes.fromhex(oid) not in protected]
    report.unreachable_objects = len(ages)
    report.kept_young_objects = len(ages) - len(garbage)
    report.deleted_objects = len(garbage)
    report.deleted_bytes = sum(sizes.get(oid, 0) for oid in garbage)
    if dry_run:
        return report
    if isinstance(objects, LocalObjectStore):
        report.temp_files_removed = _remove_stale_temp_files(objects, young_after)
        if garbage:
            _sweep_local(store, objects, packs, set(garbage), young_after, report, progress)
    elif garbage:
        spared = delete_referencing_first(
            store, garbage, lambda oid: _delete_if_old(store, oid, young_after)
        )
        report.deleted_objects -= len(spared)
        report.kept_young_objects += len(spared)
    return report


def _ages(store: Store, reachable: set[bytes]) -> tuple[dict[str, float], dict[str, int]]:
    """Backends without packs: each unreachable object's write time (-inf if unknown:
    the grace period applies only where the backend records when objects were written)."""
    ages: dict[str, float] = {}
    for oid in store.objects.iter_oids():
        if bytes.fromhex(oid) not in reachable:
            written = store.objects.object_time(oid)
            ages[oid] = -math.inf if written is None else written + _END_OF_SECOND
    return ages, {}


def _ages_local(
    objects: LocalObjectStore, packs: list[LocalPack], reachable: set[bytes]
) -> tuple[dict[str, float], dict[str, int]]:
    """Newest write time and stored bytes of every unreachable object, over all copies."""
    ages: dict[str, float] = {}
    sizes: Counter[str] = Counter()
    for oid, path in objects.iter_loose():
        if bytes.fromhex(oid) in reachable:
            continue
        with contextlib.suppress(FileNotFoundError):
            stat = os.stat(path)
            ages[oid] = max(ages.get(oid, -math.inf), stat.st_mtime)
            sizes[oid] += stat.st_size
    dictionaries = {p.dictionary_oid for p in packs if p.dictionary_oid}
    for pack in packs:
        pack_time = pack.file_time()
        for position in range(pack.count):
            oid = pack.oid_at(position)
            if oid in dictionaries or bytes.fromhex(oid) in reachable:
                continue
            written = max(pack.time_at(position), pack_time) + _END_OF_SECOND
            ages[oid] = max(ages.get(oid, -math.inf), written)
            sizes[oid] += pack.stored_size_at(position)
    return ages, dict(sizes)


def _delete_if_old(store: Store, oid: str, young_after: float) -> bool:
    written = store.objects.object_time(oid)
    if written is not None and written + _END_OF_SECOND >= young_after:
        return False  # freshened since it was judged garbage
    store.objects.delete(oid)
    return True


def delete_referencing_first(
    store: Store,
    garbage: Iterable[str],
    delete: Callable[[str], bool],
    after_level: Callable[[], None] = lambda: None,
) -> set[str]:
    """Delete objects so that none left references one gone: an object goes before the
    objects it references, level by level. ``delete`` returns False to spare an object
    (it was freshened), which spares everything it references too. Returns the spared."""
    doomed = set(garbage)
    references: dict[str, list[str]] = {}
    waiting: Counter[str] = Counter()
    for oid in doomed:
        try:
            kind, body = store.objects.get(oid)
            inside = [ref for ref, _ in typed_references(kind, body, oid) if ref in doomed]
        except JournalError:
            inside = []  # unreadable: it references nothing we could check
        references[oid] = inside
        waiting.update(inside)
    spared: set[str] = set()
    level = [oid for oid in doomed if waiting[oid] == 0]
    while level:
        following: list[str] = []
        for oid in level:
            if oid in spared or not delete(oid):
                spared.add(oid)
                spared.update(references[oid])
            for ref in references[oid]:
                waiting[ref] -= 1
                if waiting[ref] == 0:
                    following.append(ref)
        after_level()
        level = following
    return spared


def _sweep_local(
    store: Store,
    objects: LocalObjectStore,
    packs: list[LocalPack],
    garbage: set[str],
    young_after: float,
    report: GcReport,
    progress: Progress | None,
) -> None:
    in_packs = {oid for pack in packs for oid in pack.iter_oids()}
    packed_garbage = garbage & in_packs
    pack_spared: set[str] = set()
    if packed_garbage:
        seen = {pack.name: pack.file_time() for pack in packs}
        for oid in sorted(packed_garbage):  # every object a removed pack held stays somewhere
            objects.loosen(oid)
        dictionaries = {p.dictionary_oid for p in packs if p.dictionary_oid}
        repack(store, in_packs - garbage - dictionaries, progress)
        report.packs_rewritten = len(packs)
        for pack in packs:
            if pack.file_time() != seen[pack.name]:  # a writer reused one of its objects
                pack_spared |= garbage & set(pack.iter_oids())
            objects.remove_pack(pack)
    touched: set[str] = set()

    def delete(oid: str) -> bool:
        if oid in pack_spared:
            return False
        path = objects.loose_path(oid)
        try:
            if os.stat(path).st_mtime >= young_after:
                return False
            os.unlink(path)
        except FileNotFoundError:
            return True
        touched.add(os.path.dirname(path))
        return True

    def sync_level() -> None:
        if objects.durable:
            for directory in touched:
                fsync_dir(directory)
        touched.clear()

    spared = delete_referencing_first(store, garbage, delete, sync_level)
    report.deleted_objects -= len(spared)
    report.kept_young_objects += len(spared)


def _remove_stale_temp_files(objects: LocalObjectStore, young_after: float) -> int:
    """Temp files left by killed writers (hidden ``.tmp-*``), once older than the grace."""
    root = Path(objects.loose_dir).parent
    removed = 0
    for top in ("objects", "packs", "refs", "logs"):
        for directory, _dirs, files in os.walk(root / top):
            for name in files:
                if not name.startswith(".tmp-"):
                    continue
                path = os.path.join(directory, name)
                with contextlib.suppress(FileNotFoundError):
                    if os.stat(path).st_mtime < young_after:
                        os.unlink(path)
                        removed += 1
    return removed
