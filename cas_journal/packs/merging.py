"""Geometric merging of batch packs, so many batch commits never mean many packs.

Every batch commit publishes a small pack, and a lookup that misses must search every
pack, so a store that only ever commits in batches would get slower with each one.
Once more than ``MERGE_MIN_PACKS`` batch packs exist, the writer that publishes one
merges the smallest batch packs whenever one of them holds fewer than twice as many
objects as all smaller ones together. What remains keeps that ratio, so merged packs
grow at least threefold from one to the next and their number stays logarithmic in
the objects they hold. An object is rewritten only when its pack at least grows by
half, so merging costs O(log n) rewrites per object, and a rewrite copies compressed
blocks as they are (``PackWriter.copy_blocks``: checked, not recompressed).
Maintained packs (written by pack or gc) and batch packs of ``MERGE_LIMIT`` objects or
more are left to ``pack``, which bounds the pause a merge can add to a commit.

This module only chooses; a backend writes the merged pack and retires the old ones.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, TypeVar

MERGE_FACTOR = 2
"""A pack is kept as it is if it holds at least this many times all smaller ones."""
MERGE_MIN_PACKS = 8
"""Batch packs tolerated before any merge: merging every other commit costs more than a
few extra index searches."""
MERGE_LIMIT = 1 << 18
"""Batch packs holding at least this many objects are not merged automatically."""


class MergeCandidate(Protocol):
    """What the policy needs to know of a pack (a PackReader has it)."""

    @property
    def name(self) -> str: ...

    @property
    def count(self) -> int: ...

    @property
    def maintained(self) -> bool: ...


P = TypeVar("P", bound=MergeCandidate)


def packs_to_merge(packs: Sequence[P]) -> list[P]:
    """The batch packs to merge now (none, or at least two of the smallest)."""
    candidates = sorted(
        (p for p in packs if not p.maintained and p.count < MERGE_LIMIT),
        key=lambda p: (p.count, p.name),
    )
    return candidates[: merge_prefix([p.count for p in candidates])]


def merge_prefix(counts: Sequence[int]) -> int:
    """How many of the smallest packs (``counts`` ascending) to merge into one: the
    shortest prefix after which every pack holds ``MERGE_FACTOR`` times all smaller
    ones together; 0 when that already holds or there are few packs."""
    if len(counts) <= MERGE_MIN_PACKS:
        return 0
    total = 0
    prefix = 0
    for index, count in enumerate(counts):
        if count < MERGE_FACTOR * total:
            prefix = index + 1
        total += count
    return prefix if prefix >= 2 else 0
