"""Geometric merging of batch packs, so many batch commits never mean many packs.

Every batch commit publishes a small pack, and a lookup that misses must search every
pack, so a store that only ever commits in batches would get slower with each one.
After publishing a batch pack, the writer merges the smallest batch packs whenever one
of them holds fewer than twice as many objects as all smaller ones together. What
remains keeps that ratio, so batch packs grow at least threefold from one to the next
and their number stays logarithmic in the objects they hold; an object is rewritten
only when its pack at least grows by half, so merging costs O(log n) rewrites per
object. Packs written by ``pack`` or gc (maintained) and batch packs of
``MERGE_LIMIT`` objects or more are left to ``pack``, which bounds the pause a merge
can add to a commit.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path

from ...objects import parse_canonical
from .packs import PackedObject, PackReader, write_pack

MERGE_FACTOR = 2
"""A pack is kept as it is if it holds at least this many times all smaller ones."""
MERGE_LIMIT = 1 << 18
"""Batch packs holding at least this many objects are not merged automatically."""


def packs_to_merge(packs: Sequence[PackReader]) -> list[PackReader]:
    """The batch packs to merge now (none, or at least two of the smallest)."""
    candidates = sorted(
        (p for p in packs if not p.maintained and p.count < MERGE_LIMIT),
        key=lambda p: (p.count, p.name),
    )
    return candidates[: merge_prefix([p.count for p in candidates])]


def merge_prefix(counts: Sequence[int]) -> int:
    """How many of the smallest packs (``counts`` ascending) to merge into one: the
    shortest prefix after which every pack holds ``MERGE_FACTOR`` times all smaller
    ones together; 0 when that already holds."""
    total = 0
    prefix = 0
    for index, count in enumerate(counts):
        if count < MERGE_FACTOR * total:
            prefix = index + 1
        total += count
    return prefix if prefix >= 2 else 0


def merged_objects(packs: Sequence[PackReader]) -> Iterator[PackedObject]:
    """Every object of ``packs``, verified, oldest pack first and each in its stored
    order (so a thread's chain stays together), with the write time gc sees for it."""
    for pack in sorted(packs, key=lambda p: (p.file_time(), p.name)):
        freshened = pack.file_time()
        positions = sorted(range(pack.count), key=pack.location)
        for position in positions:
            oid = pack.oid_at(position)
            data = pack.canonical_at(position, oid)
            parse_canonical(oid, data)
            yield PackedObject(oid, data, max(pack.time_at(position), freshened))


def write_merged_pack(directory: Path, packs: Sequence[PackReader], durable: bool) -> Path | None:
    """Write the objects of ``packs`` as one new batch pack; return its index path."""
    return write_pack(directory, merged_objects(packs), durable)
