"""Deleting garbage without ever breaking the closure invariant.

Garbage objects may reference one another. At every instant, even if gc is killed,
every object still stored must find everything it references, so an object may lose
its *last* copy only once every garbage object referencing it is gone: referencing
objects go before referenced ones. ``delete_referencing_first`` does that for backends
that store each object once; ``sweep`` does it over stored copies (``backends.copies``),
where an object may have a loose copy and packed copies, and a packed copy goes only
with its whole pack (all of a pack's objects vanish at the same instant, so a pack may
take an object together with its referencers). Packs retired in one call go one after
another, in an order the backend chooses, so an object whose copies are all in those
packs goes with them only if every copy of each of its referencers is in its own packs
too: whichever of them goes last, its referencers are gone by then.

``sweep`` frees space before it writes anything, because a full disk is when gc is
needed most:

1. Delete loose copies whose turn has come, level by level (each level durable before
   the next), and retire the packs whose objects are all garbage whose turn has come
   (as above) or objects that keep a copy outside the packs retired with them. Repeat
   while anything moves. Nothing is written.
2. Write one new pack holding the live objects of the packs that still hold garbage,
   then retire those packs as their turn comes (step 1 again).
3. Should garbage stay blocked in a cycle through packs (an object of pack P
   references a loose object that references another object of P), give the blocked
   packed garbage loose copies that keep their old times, and go on.

An object freshened since gc judged it (a writer is about to link it) is spared, with
everything it references; a pack freshened meanwhile is kept whole, and so is its
garbage with everything that references. Damaged objects are never a reason to stop:
a pack whose live object cannot be copied (no intact copy) is kept whole.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from ..backends import Store
from ..backends.copies import StoredCopies
from ..errors import JournalError
from ..objects import typed_references
from .reports import Progress


def garbage_references(store: Store, garbage: Iterable[str]) -> dict[str, list[str]]:
    """For each garbage object, the garbage objects it references (an unreadable one
    references nothing that could be checked)."""
    doomed = set(garbage)
    references: dict[str, list[str]] = {}
    for oid in doomed:
        try:
            kind, body = store.objects.get(oid)
            inside = (ref for ref, _ in typed_references(kind, body, oid) if ref in doomed)
            references[oid] = list(dict.fromkeys(inside))  # once each, however often named
        except JournalError:
            references[oid] = []
    return references


def delete_referencing_first(
    store: Store,
    garbage: Iterable[str],
    delete: Callable[[str], bool],
    after_level: Callable[[], None] = lambda: None,
) -> set[str]:
    """Delete objects so that none left references one gone: an object goes before the
    objects it references, level by level. ``delete`` returns False to spare an object
    (it was freshened), which spares everything it references too. Returns the spared."""
    references = garbage_references(store, garbage)
    waiting: Counter[str] = Counter()
    for inside in references.values():
        waiting.update(inside)
    spared: set[str] = set()
    level = [oid for oid in references if waiting[oid] == 0]
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


@dataclass
class SweepResult:
    """What ``sweep`` did."""

    deleted: set[str] = field(default_factory=set)
    """Garbage objects that no longer have any copy."""
    spared: set[str] = field(default_factory=set)
    """Garbage kept after all: freshened meanwhile, or held by a pack that had to stay."""
    packs_retired: int = 0
    packs_rewritten: int = 0
    """Retired packs whose live objects went to the new pack first."""
    loosened: int = 0


class _Sweep:
    def __init__(
        self,
        store: Store,
        copies: StoredCopies,
        holders: dict[str, set[str | None]],
        live: dict[str, set[str]],
        young_after: float,
        progress: Progress | None,
    ) -> None:
        self.store = store
        self.copies = copies
        self.holders = holders
        self.live = live
        self.young_after = young_after
        self.progress = progress
        self.references = garbage_references(store, holders)
        self.referencers: dict[str, list[str]] = {oid: [] for oid in holders}
        for oid, inside in self.references.items():
            for ref in inside:
                self.referencers[ref].append(oid)
        self.waiting = Counter({oid: len(refs) for oid, refs in self.referencers.items()})
        self.members: dict[str, set[str]] = {}  # pack -> its garbage
        for oid, where in holders.items():
            for pack in where:
                if pack is not None:
                    self.members.setdefault(pack, set()).add(oid)
        self.result = SweepResult()
        self.kept_packs: set[str] = set()
        self.retired: set[str] = set()
        self.homed = False
        self.loosened: set[str] = set()

    # -- bookkeeping -------------------------------------------------------------------

    def active(self, oid: str) -> bool:
        return oid not in self.result.deleted and oid not in self.result.spared

    def gone(self, oid: str) -> None:
        """``oid`` lost its last copy: what it references may now go."""
        self.result.deleted.add(oid)
        for ref in self.references[oid]:
            self.waiting[ref] -= 1

    def spare(self, oids: Iterable[str]) -> None:
        """Keep ``oids`` and everything they reference; their packs must keep them."""
        pending = [oid for oid in oids if self.active(oid)]
        while pending:
            oid = pending.pop()
            if not self.active(oid):
                continue
            self.result.spared.add(oid)
            for pack in self.holders[oid]:
                if pack is not None and pack not in self.retired:
                    if self.homed:
                        self.kept_packs.add(pack)  # the new pack was written without it
                    else:
                        self.live.setdefault(pack, set()).add(oid)
            pending.extend(ref for ref in self.references[oid] if self.active(ref))

    def keep_pack(self, pack: str) -> None:
        self.kept_packs.add(pack)
        self.spare(self.members.get(pack, ()))

    # -- the three steps -----------------------------------------------------------------

    def delete_loose_at_once(self) -> bool:
        """On a backend whose ``delete_loose`` is one transaction: delete, in one call,
        the largest set of loose-only garbage whose active referencers are all in the set
        (they vanish together). True if any went."""
        chosen = {
            oid for oid, where in self.holders.items() if where == {None} and self.active(oid)
        }
        pending = list(chosen)
        while pending:
            oid = pending.pop()
            if oid in chosen and any(
                self.active(ref) and ref not in chosen for ref in self.referencers[oid]
            ):
                chosen.discard(oid)
                pending.extend(ref for ref in self.references[oid] if ref in chosen)
        if not chosen:
            return False
        kept = self.copies.delete_loose(chosen, self.young_after)
        self.spare(kept)
        for oid in chosen - self.result.spared:
            self.holders[oid].discard(None)
            self.gone(oid)
        return len(kept) < len(chosen)

    def delete_loose_levels(self) -> bool:
        """Delete loose copies whose turn has come, level by level; True if any went."""
        moved = self.copies.atomic_delete and self.delete_loose_at_once()
        level = [
            oid
            for oid, where in self.holders.items()
            if None in where and self.active(oid) and self.waiting[oid] == 0
        ]
        while level:
            kept = self.copies.delete_loose(level, self.young_after)
            following: list[str] = []
            for oid in level:
                if oid in kept:
                    self.spare([oid])
                    continue
                moved = True
                where = self.holders[oid]
                where.discard(None)
                if not where:
                    self.gone(oid)
                    following += [
                        ref
                        for ref in self.references[oid]
                        if self.waiting[ref] == 0 and self.active(ref) and None in self.holders[ref]
                    ]
            level = following
        return moved

    def retirable(self, pack: str, leaving: set[str]) -> bool:
        """True if ``pack`` may go now, together with the packs of ``leaving`` (retired
        in the same call, in whatever order the backend removes them): its live objects
        have a new home, and every garbage object that loses its last copy with them is
        referenced only by objects gone or going no later than it."""
        if pack in self.retired or pack in self.kept_packs:
            return False
        if self.live.get(pack) and not self.homed:
            return False
        going = leaving | {pack}
        for oid in self.members.get(pack, ()):
            where = self.holders[oid]
            if not self.active(oid) or not where <= going:
                continue  # it keeps a copy elsewhere (or has already gone, or stays)
            # it goes when the last of its packs goes: a referencer goes no later only
            # if every copy of it is in those same packs (a copy in a pack of this call
            # that is not one of them may go after them)
            if any(
                self.active(ref) and not self.holders[ref] <= where for ref in self.referencers[oid]
            ):
                return False
        return True

    def vanishing(self, pack: str) -> set[str]:
        """The active garbage whose only copy is in ``pack``."""
        return {
            oid
            for oid in self.members.get(pack, ())
            if self.active(oid) and self.holders[oid] == {pack}
        }

    def retire_packs(self) -> bool:
        """Retire every pack whose turn has come; True if any went."""
        ready: list[str] = []
        for pack in sorted(self.members):
            if self.retirable(pack, set(ready)):
                ready.append(pack)
        if not ready:
            return False
        kept = self.copies.retire_packs(ready, self.young_after)
        for pack in ready:
            if pack in kept:
                self.keep_pack(pack)
                continue
            self.retired.add(pack)
            self.result.packs_retired += 1
            if self.live.get(pack):
                self.result.packs_rewritten += 1
            for oid in self.members.get(pack, ()):
                where = self.holders[oid]
                where.discard(pack)
                if not where and self.active(oid):
                    self.gone(oid)
        return True

    def write_new_home(self) -> bool:
        """Write the live objects of the packs still to retire into one new pack."""
        from .packer import write_ordered_pack

        if self.homed:
            return False
        waiting = [p for p in self.members if p not in self.retired and p not in self.kept_packs]
        wanted = {oid for pack in waiting for oid in self.live.get(pack, ())}
        self.homed = True
        if not wanted:
            return False
        written = write_ordered_pack(self.store, self.copies, wanted, self.progress)
        for pack in waiting:
            if self.live.get(pack, set()) & written.skipped:
                self.keep_pack(pack)  # a live object with no intact copy stays where it is
        return True

    def loosen_blocked(self) -> bool:
        """Give loose copies to the garbage that keeps a pack from going: objects of the
        pack referenced from outside it, and what they reference inside it (their loose
        copies must still find it once the pack is gone)."""
        blocked: set[str] = set()
        for pack in self.members:
            if pack in self.retired or pack in self.kept_packs:
                continue
            inside = self.vanishing(pack)
            pending = [
                oid
                for oid in inside
                if any(self.active(r) and r not in inside for r in self.referencers[oid])
            ]
            while pending:
                oid = pending.pop()
                if oid in blocked or oid in self.loosened:
                    continue
                blocked.add(oid)
                pending.extend(ref for ref in self.references[oid] if ref in inside)
        if not blocked:
            return False
        self.copies.loosen(blocked)
        self.loosened |= blocked
        for oid in blocked:
            self.holders[oid].add(None)
        self.result.loosened += len(blocked)
        return True

    def run(self) -> SweepResult:
        while True:
            moved = self.delete_loose_levels()
            moved = self.retire_packs() or moved
            if moved:
                continue
            if self.write_new_home() or self.loosen_blocked():
                continue
            break
        for oid, where in self.holders.items():  # anything left is kept, never lost
            if self.active(oid) and where:
                self.result.spared.add(oid)
        return self.result


def sweep(
    store: Store,
    copies: StoredCopies,
    holders: dict[str, set[str | None]],
    live: dict[str, set[str]],
    young_after: float,
    progress: Progress | None = None,
) -> SweepResult:
    """Delete every copy of the garbage objects in ``holders`` (oid -> where its copies
    are: None for a loose copy, else a pack name), in the order the module describes.
    ``live`` maps each pack holding garbage to its objects that are not garbage (its
    dictionary excluded); they are rewritten before that pack goes. Copies written or
    freshened at or after ``young_after`` are spared."""
    return _Sweep(store, copies, holders, live, young_after, progress).run()
