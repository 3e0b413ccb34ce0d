"""gc on a backend that deletes in two phases (``backends.condemned``): S3 and its kin.

After gc's mark (what refs and recent reflog entries reach) and its young-object rule
(unreachable objects written within the grace period, and everything they reference,
are kept), one run:

1. scans the live copies: every loose object and every live pack;
2. writes one new live pack (in pack order) holding everything kept from the loose
   objects, from live packs that hold garbage, and from *ripe* condemned packs (stamped
   more than the grace period ago) that something kept needs again;
3. writes one condemned pack holding the garbage, plus every condemned object that
   garbage references and nothing keeps (so the new condemned pack never references an
   older one that goes first);
4. changes the manifest once: the live packs that held garbage and the ripe condemned
   packs leave it (if another maintenance run changed them meanwhile, this run stops
   here, having only added copies);
5. deletes the loose keys it scanned and the stored parts of the packs that left;
6. stamps the new condemned pack (and any a killed run left unstamped) with the time
   now, after the deletions: its grace period starts when nothing else holds its
   objects any more.

Live packs without garbage are left as they are. Objects with no intact copy are not
packed: their copies stay where they are (their pack stays whole) and fsck reports them.
A run killed at any point leaves copies in more places, never fewer: the manifest
change is the only step that makes anything unreachable to readers, and everything it
drops exists elsewhere (new pack, condemned pack) or is garbage no live or condemned
object references.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from ..backends import Store
from ..backends.condemned import CondemnedPacks
from ..backends.copies import StoredCopies
from ..errors import JournalError
from ..objects import typed_references
from .packer import write_ordered_pack
from .reports import Progress


@dataclass
class CondemnResult:
    """What a condemning gc run did."""

    condemned_objects: int = 0
    """Garbage copied into the new condemned pack (collected one grace period later)."""
    deleted_objects: int = 0
    """Objects of ripe condemned packs deleted for good."""
    deleted_bytes: int = 0
    rescued_objects: int = 0
    """Objects of ripe condemned packs that were needed again (now live)."""
    packs_rewritten: int = 0
    packs_removed: int = 0
    loose_folded: int = 0
    kept_for_damage: int = 0
    """Objects with no intact copy, left where they are."""
    stopped: bool = False
    """Another maintenance run changed the packs meanwhile; nothing was removed."""
    garbage: set[str] = field(default_factory=set)


def _references(store: Store, oid: str) -> list[str]:
    try:
        kind, body = store.objects.get(oid)
        return [ref for ref, _ in typed_references(kind, body, oid)]
    except JournalError:
        return []


def sweep(
    store: Store,
    copies: StoredCopies,
    condemned: CondemnedPacks,
    keep: set[bytes],
    young_after: float,
    dry_run: bool,
    progress: Progress | None = None,
    immediate: bool = False,
) -> CondemnResult:
    """One condemning gc run over everything ``keep`` (reachable or young, as raw oids)
    does not hold; see the module docstring. ``immediate`` (gc --prune-now, which must
    not run while others write) deletes the garbage at once instead of condemning it,
    and every condemned pack counts as ripe."""
    result = CondemnResult()
    loose: set[str] = set()
    members: dict[str, set[str]] = {}
    sizes: dict[str, int] = {}
    dictionaries = {pack.name: pack.dictionary_oid for pack in copies.packs()}
    for copy in copies.scan():
        if copy.pack is None:
            loose.add(copy.oid)
        elif dictionaries.get(copy.pack) != copy.oid:
            members.setdefault(copy.pack, set()).add(copy.oid)
        sizes[copy.oid] = sizes.get(copy.oid, 0) + copy.size
    live = loose.union(*members.values()) if members else set(loose)
    garbage = {oid for oid in live if bytes.fromhex(oid) not in keep}
    dirty = {name for name, oids in members.items() if oids & garbage}
    ripe = [pack for pack in condemned.condemned() if immediate or 0 < pack.condemned < young_after]
    ripe_oids: dict[str, set[str]] = {
        pack.name: set(condemned.condemned_oids(pack.name)) for pack in ripe
    }
    in_ripe = set().union(*ripe_oids.values()) if ripe_oids else set()
    rescue = {oid for oid in in_ripe - live if bytes.fromhex(oid) in keep}
    home = (loose | {oid for name in dirty for oid in members[name]} | rescue) - garbage
    pulled = set() if immediate else _pulled_in(store, garbage, live, keep, condemned)
    result.condemned_objects = 0 if immediate else len(garbage)
    result.rescued_objects = len(rescue)
    result.loose_folded = len(loose)
    doomed = in_ripe - live - rescue - pulled
    if immediate:
        doomed |= garbage
    result.deleted_objects = len(doomed)
    result.deleted_bytes = sum(sizes.get(oid, 0) for oid in doomed)
    result.garbage = garbage
    if dry_run:
        return result
    skipped: set[str] = set()
    if home:
        skipped |= write_ordered_pack(store, copies, home, progress).skipped
    if not immediate and (garbage or pulled):
        skipped |= condemned.write_condemned(sorted(garbage | pulled), progress).skipped
    result.kept_for_damage = len(skipped)
    # a pack holding an object that could not be copied stays whole, and so do ripe
    # packs holding one; loose copies that could not be copied stay too
    retire = {name for name in dirty if not members[name] & skipped}
    drop = {name for name, oids in ripe_oids.items() if not oids & skipped}
    if not condemned.settle(retire, drop):
        result.stopped = True
        return result
    copies.delete_loose(loose - skipped, None)
    condemned.delete_packs(retire | drop)
    condemned.stamp()
    result.packs_rewritten = len(retire)
    result.packs_removed = len(retire) + len(drop)
    return result


def _pulled_in(
    store: Store,
    garbage: Iterable[str],
    live: set[str],
    keep: set[bytes],
    condemned: CondemnedPacks,
) -> set[str]:
    """Objects held only by condemned packs (not live, not kept) that the garbage
    references, transitively: they join the new condemned pack."""
    held: set[str] = set()
    for pack in condemned.condemned():
        held.update(condemned.condemned_oids(pack.name))
    pulled: set[str] = set()
    pending = list(garbage)
    seen = set(pending)
    while pending:
        oid = pending.pop()
        for ref in _references(store, oid):
            if ref in seen:
                continue
            seen.add(ref)
            if ref in held and ref not in live and bytes.fromhex(ref) not in keep:
                pulled.add(ref)
                pending.append(ref)
    return pulled
