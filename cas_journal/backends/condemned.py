"""Condemned packs: two-phase deletion for backends that cannot delete safely in one step.

On an object store (S3 and its kin) gc cannot delete a copy *and* check, in the same
step, that no writer freshened it meanwhile: a freshen is a write of the same bytes, and
deletes are conditional on an ETag at best. Such a backend offers ``CondemnedPacks``
(``capabilities.condemns_packs``) and gc (``maintenance.condemning``) never deletes
anything a writer may still rely on:

1. garbage is first *condemned*: copied into a pack that the manifest lists as
   condemned, stamped with the time its condemnation completed; writers never rely on a
   condemned copy (``ObjectStore.missing`` and ``freshen`` report it missing, so a
   writer stores the object again), readers still read it;
2. a later gc, once the stamp is older than the grace period, *rescues* from it every
   object that became reachable or young meanwhile and only then deletes it.

A writer links what it found live within ``WRITER_DEADLINE`` of finding it, and the grace
period is longer than that, so a writer that saw an object live before gc condemned it
has linked it (and the rescuing gc's mark sees the link) before the condemned pack goes.
A condemned pack also holds whatever older condemned objects its own objects reference,
so deleting an older condemned pack never leaves a younger one referencing nothing.
"""

from __future__ import annotations

import abc
from collections.abc import Collection, Iterator, Sequence
from dataclasses import dataclass

from .copies import Progress, WrittenPack


@dataclass(frozen=True)
class CondemnedPack:
    """One condemned pack: its name, when it was condemned (0: not stamped yet)."""

    name: str
    objects: int
    condemned: float


class CondemnedPacks(abc.ABC):
    """What gc needs beyond ``StoredCopies`` on a backend that deletes in two phases."""

    @abc.abstractmethod
    def condemned(self) -> list[CondemnedPack]:
        """Every condemned pack the manifest lists."""

    @abc.abstractmethod
    def condemned_oids(self, name: str) -> Iterator[str]:
        """The objects of one condemned pack (empty if it cannot be opened)."""

    @abc.abstractmethod
    def write_condemned(self, order: Sequence[str], progress: Progress | None) -> WrittenPack:
        """Write one pack of ``order`` (read from any intact copy, condemned ones
        included), listed as condemned but not stamped."""

    @abc.abstractmethod
    def settle(self, retire: Collection[str], drop: Collection[str]) -> bool:
        """One conditional manifest change: the live packs ``retire`` and the condemned
        packs ``drop`` leave it. False (nothing changed) if one of ``retire`` is gone
        already (another maintenance run got there first)."""

    @abc.abstractmethod
    def delete_packs(self, names: Collection[str]) -> None:
        """Delete the stored parts of packs the manifest no longer lists."""

    @abc.abstractmethod
    def stamp(self) -> float:
        """Stamp every condemned pack not stamped yet with the time now; return it."""
