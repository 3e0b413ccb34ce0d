"""Stored copies: what pack, gc and fsck need from a backend that keeps copies itself.

A backend with ``capabilities.stored_copies`` exposes a ``StoredCopies`` as
``Store.stored_copies``. It keeps every object as one or more *copies*:

* a **loose** copy, stored on its own (a file, a database row, a key), which can be
  deleted alone;
* a **packed** copy, inside a pack (see ``cas_journal.packs``), which goes only when its
  whole pack is *retired*.

Every copy has a write time: when it was last written or *freshened* (a writer that
reuses an existing object freshens it, so a concurrent gc keeps it for a grace period).
A packed copy's time is the newest of its own time in the pack index and its pack's
freshen time.

The algorithms stay in ``cas_journal.maintenance`` (mark, protect young objects, the
delete-referencing-first order, pack order, dictionary training); a backend provides
only these primitives, each of which leaves the store valid when it returns and, if
killed midway, leaves at worst extra copies:

* ``scan``: every copy with its write time and stored size, and ``packs``;
* ``read_canonical``: one object's verified canonical form, from any intact copy;
* ``write_pack``: one new pack holding given objects in a given order, read from
  intact copies (those without one are skipped and reported);
* ``delete_loose`` and ``retire_packs``: remove copies, sparing (and reporting) any
  freshened at or after a cutoff; the caller orders calls so that no object's last copy
  goes while a remaining object references it;
* ``loosen``: give packed objects loose copies that keep their write times (so their
  pack can go before them); ``write_loose``: store given objects as fresh loose copies,
  replacing damaged ones (repair); ``set_aside``: move unreadable packs out of the way;
* ``verify``: every copy decoded and hash-checked, and every pack's own integrity;
* ``maintenance_lock`` (one pack or gc at a time) and ``writers_paused`` (no writer is
  between storing objects and linking them: what a gc without grace period needs);
* ``remove_leftovers``: debris of killed writers (temp files), once old.
"""

from __future__ import annotations

import abc
import contextlib
from collections.abc import Callable, Collection, Iterator, Sequence
from dataclasses import dataclass, field

from ..objects import Kind, parse_canonical
from ..packs import PackedObject, PackReader

Progress = Callable[[str, int, int | None], None]
"""Called as ``progress(label, done, total)`` during long work."""


@dataclass(frozen=True, slots=True)
class StoredCopy:
    """One stored copy of an object."""

    oid: str
    written: float
    """Unix seconds when this copy was last written or freshened."""
    size: int
    """Bytes it takes (a packed copy: its share of its compressed block)."""
    pack: str | None = None
    """The pack holding it; None for a loose copy."""


@dataclass(frozen=True, slots=True)
class PackSummary:
    """One pack as the backend keeps it."""

    name: str
    objects: int
    stored_bytes: int
    """Bytes the pack takes, its index included."""
    maintained: bool
    """Written by pack or gc (False: a batch pack)."""
    dictionary_oid: str | None
    written: float
    """When the pack was written or last freshened (unix seconds)."""


@dataclass(frozen=True)
class PackOptions:
    """How ``write_pack`` compresses."""

    level: int = 19
    block_size: int = 256 * 1024
    dictionary: PackedObject | None = None
    """A zstd dictionary blob to store first and compress every other block with."""


@dataclass
class WrittenPack:
    """The outcome of ``write_pack``."""

    pack: PackSummary | None
    """The new pack (None if no object could be written)."""
    skipped: set[str] = field(default_factory=set)
    """Requested objects with no intact copy (damaged or gone): not in the new pack."""


@dataclass(frozen=True, slots=True)
class CopyCheck:
    """What ``verify`` found about one copy, or about a pack as a whole (``oid`` None)."""

    where: str
    """``"loose"`` or a pack name."""
    oid: str | None
    kind: Kind | None
    """The verified kind; None when the copy (or the pack) is damaged."""
    problem: str | None = None


def check_pack(name: str, pack: PackReader) -> Iterator[CopyCheck]:
    """What ``verify`` reports of one pack: the pack as a whole (its index checksum and
    order), then every object it holds, walked block by block and checked against its
    oid. Errors of the walk itself (e.g. a pack replaced meanwhile) propagate."""
    problem = None
    if not pack.verify_trailer():
        problem = "pack index checksum does not match its content"
    else:
        unsorted = pack.index.unsorted_at()
        if unsorted >= 0:
            problem = f"index is not sorted at position {unsorted}"
    yield CopyCheck(name, None, None, problem)
    for walked in pack.walk():
        if walked.data is None:
            yield CopyCheck(name, walked.oid, None, str(walked.error))
        else:
            kind, _ = parse_canonical(walked.oid, walked.data)
            yield CopyCheck(name, walked.oid, kind)


class StoredCopies(abc.ABC):
    """The primitives a backend that keeps its own copies offers to maintenance."""

    atomic_delete: bool = False
    """True if ``delete_loose`` removes all the copies it removes in one transaction, and
    keeps, with any copy it keeps, the given ones that copy references. gc may then
    delete garbage together with the garbage referencing it in one call, instead of one
    call per level of references."""

    def begin_collection(self) -> None:  # noqa: B027 - most backends need nothing here
        """Called by gc, holding the maintenance lock, before it reads anything. A
        backend may note the moment, to keep in ``delete_loose`` copies that anything
        written since references. The default does nothing."""

    @abc.abstractmethod
    def maintenance_lock(self, wait: bool = True) -> contextlib.AbstractContextManager[bool]:
        """Exclusive across processes: one pack or gc (or merge) at a time; released if
        the holder dies. Yields True once held; with ``wait=False`` yields False at once
        if another holds it."""

    @abc.abstractmethod
    def writers_paused(self) -> contextlib.AbstractContextManager[None]:
        """While held, no writer is between storing objects and the ref swap that links
        them, and none starts (``ObjectStore.write_guard`` waits)."""

    @abc.abstractmethod
    def packs(self) -> list[PackSummary]:
        """Every readable pack. Packs that cannot be opened are not listed (``verify``
        reports them)."""

    @abc.abstractmethod
    def scan(self) -> Iterator[StoredCopy]:
        """Every copy: loose ones and every object of every pack (a pack's dictionary
        included)."""

    @abc.abstractmethod
    def read_canonical(self, oid: str) -> bytes:
        """The verified canonical form of ``oid`` from any intact copy; ObjectNotFound
        if it has none, CorruptObject if every copy is damaged."""

    @abc.abstractmethod
    def write_pack(
        self, order: Sequence[str], options: PackOptions, progress: Progress | None = None
    ) -> WrittenPack:
        """Write one maintained pack holding ``order`` (in that order, each object read
        from an intact copy and keeping its newest write time) and publish it. Objects
        with no intact copy are skipped and reported. Nothing is removed."""

    @abc.abstractmethod
    def delete_loose(self, oids: Collection[str], older_than: float | None) -> set[str]:
        """Delete the loose copies of ``oids`` (absent ones are ignored), durably before
        returning; a copy written or freshened at or after ``older_than`` (unix seconds;
        None: no check) is kept, and so may be any the backend knows to be needed (see
        ``begin_collection``). Returns the oids kept."""

    @abc.abstractmethod
    def retire_packs(self, names: Collection[str], older_than: float | None) -> set[str]:
        """Remove whole packs, durably before returning; a pack freshened at or after
        ``older_than`` (None: no check) is kept. Returns the names kept that way."""

    @abc.abstractmethod
    def loosen(self, oids: Collection[str]) -> None:
        """Give each object a loose copy (if it has none) holding its canonical form and
        keeping its newest write time, durably before returning."""

    @abc.abstractmethod
    def write_loose(self, objects: Sequence[PackedObject]) -> None:
        """Store fresh loose copies of objects given as canonical forms (each checked
        against its oid first: CorruptObject), replacing any loose copy already there
        (a damaged one), durably before returning. Repair uses it."""

    @abc.abstractmethod
    def set_aside(self, names: Collection[str]) -> None:
        """Move packs that cannot be read out of the store's way (kept for inspection,
        no longer read or reported). Repair uses it once nothing reachable needs them."""

    @abc.abstractmethod
    def verify(self) -> Iterator[CopyCheck]:
        """Every copy decoded and hash-checked, and every pack's own integrity (index
        checksum, order, packs that cannot be opened)."""

    def remove_leftovers(self, older_than: float) -> int:
        """Remove debris of killed writers (temp files) older than ``older_than``;
        return how many. A backend that leaves none returns 0."""
        return 0
