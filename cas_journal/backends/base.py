"""Layer 2, the two storage protocols every backend implements, and the commit that joins them.

* ObjectStore: immutable, content-addressed objects. ``put`` is idempotent and returns the
  oid; ``get`` verifies the hash of what it decoded; ``delete`` exists for gc only.
* RefStore: small mutable values under names like ``threads/<id>``. The only update is
  compare-and-swap (``set_if_equals``), which also creates (old=None) and deletes
  (new=None). Updates made with ``log=True`` append a reflog line (old, new, time, reason).

A Store bundles one of each with the settings both share, and offers ``commit``: new
objects plus one compare-and-swap (and the listing-index updates derived from it) as one
change. A backend that can (``capabilities.atomic_commit``) applies a commit as one
transaction. The default writes the objects, sets the new index refs, swaps the ref and
then removes the old index refs: objects are immutable and unlinked ones are only
garbage, and readers check an index ref against the ref it was derived from, so a crash
or a lost swap at any step leaves at worst a stale index ref, never an unlisted ref.

What a backend can do is said by its ``capabilities`` flags, never by its class: callers
test a flag, not ``isinstance``.
"""

from __future__ import annotations

import abc
import contextlib
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from datetime import datetime
from types import TracebackType
from typing import TYPE_CHECKING, NamedTuple

from ..errors import AmbiguousPrefix, InvalidInputError, LinkedObjectsMissing, ObjectNotFound
from ..objects import Kind, ObjectCodec, is_oid, object_id

if TYPE_CHECKING:
    from .copies import StoredCopies  # backends that keep copies import it themselves

MAX_REF_VALUE_BYTES = 64 * 1024


class NewObject(NamedTuple):
    """An object on its way into a store, its oid already computed by the caller.

    Backends trust ``oid`` (the journal hashed the body once when it built the object;
    hashing again on the hot path is waste). Every read verifies the hash, so a wrong
    oid cannot go unnoticed. Use ``new_object`` to build one from a kind and a body.
    """

    oid: str
    kind: Kind
    body: bytes


def new_object(kind: Kind, body: bytes) -> NewObject:
    """A NewObject with its oid computed from ``kind`` and ``body``."""
    return NewObject(object_id(kind, body), kind, body)


class RefUpdate(NamedTuple):
    """A compare-and-swap of one ref: ``old`` -> ``new`` (None: absent), logged unless
    ``log`` is False (leases and index refs keep no reflog)."""

    name: str
    old: str | None
    new: str | None
    reason: str = ""
    log: bool = True


class IndexUpdate(NamedTuple):
    """An unconditional set (``value``) or removal (None) of a derived ref, such as a
    thread's listing-index ref. Never logged. Readers check an index ref against the
    ref it was derived from, so a stale one is skipped, never believed."""

    name: str
    value: str | None


class RefCheck(NamedTuple):
    """A condition of a commit: ref ``name`` holds ``value`` (None: absent) when the
    commit's swap is applied, else the commit applies nothing (a fork checks that its
    source thread still is where the fork read it)."""

    name: str
    value: str | None


class Capabilities(NamedTuple):
    """What a backend can do; callers test these flags, never the backend's class."""

    atomic_commit: bool = False
    """``commit`` applies objects, the swap and the index updates in one transaction:
    either all of it is visible or none."""
    object_times: bool = False
    """The backend records when each object was last written or freshened, so gc can
    keep young unreachable objects (its grace period)."""
    stored_copies: bool = False
    """The backend keeps copies it can scan, verify, repack and sweep itself (loose
    copies and packs): pack, gc and fsck use ``Store.stored_copies`` for them."""
    condemns_packs: bool = False
    """gc deletes in two phases (``backends.condemned``): garbage is first copied into a
    condemned pack and deleted one grace period later; ``Store.stored_copies`` is then
    also a ``CondemnedPacks``. For stores shared by processes gc cannot pause (S3)."""


class ReflogEntry(NamedTuple):
    """One update of a ref: the value before and after (None = absent), when and why."""

    old: str | None
    new: str | None
    time: datetime
    reason: str


def check_ref_value(value: str | None) -> None:
    """Refuse ref values that cannot be stored as one line."""
    if value is None:
        return
    if not isinstance(value, str) or not value or "\n" in value or "\r" in value or "\0" in value:
        raise InvalidInputError(f"ref value must be a non-empty single line, got {value!r:.80}")
    if len(value.encode("utf-8")) > MAX_REF_VALUE_BYTES:
        raise InvalidInputError("ref value is too large")


class ObjectStore(abc.ABC):
    """Where immutable objects live."""

    codec: ObjectCodec

    def put(self, kind: Kind, body: bytes) -> str:
        """Store one object (a no-op if present) and return its oid."""
        return self.put_many([(kind, body)])[0]

    @abc.abstractmethod
    def put_many(self, items: Sequence[tuple[Kind, bytes]]) -> list[str]:
        """Store objects, in order, and return their oids.

        On a durable store every object is on stable storage when this returns. Callers
        keep the closure invariant by listing referenced objects before referencing ones.
        """

    @abc.abstractmethod
    def get(self, oid: str) -> tuple[Kind, bytes]:
        """Return ``(kind, body)``; ObjectNotFound if absent, CorruptObject if damaged."""

    def get_many(self, oids: Iterable[str]) -> Iterator[tuple[str, Kind, bytes]]:
        """Read several objects, each verified like ``get``: ``(oid, kind, body)`` in
        whatever order the backend reads fastest (a backend with packs reads each block
        once). ObjectNotFound for an absent one. The default reads them one by one."""
        for oid in oids:
            kind, body = self.get(oid)
            yield oid, kind, body

    def get_with_neighbours(self, oid: str) -> list[tuple[str, Kind, bytes]]:
        """The object ``oid`` as ``(oid, kind, body)`` together with the objects stored
        beside it that come at no extra cost (the rest of its pack block), each verified
        like ``get``: a chain packed in chain order is then read block by block. The
        default returns the object alone. ObjectNotFound if absent."""
        kind, body = self.get(oid)
        return [(oid, kind, body)]

    def get_if_read(self, oid: str) -> tuple[Kind, bytes] | None:
        """``(kind, body)`` of ``oid`` if an earlier read already brought its stored bytes
        into memory (the local store's row window), verified like ``get``; else None. It
        never reads storage: a chain reader picks up what a neighbouring read fetched
        before asking for the rest in one batch. The default has nothing in memory."""
        return None

    @abc.abstractmethod
    def has(self, oid: str) -> bool:
        """True if the object is stored here."""

    def missing(self, oids: Iterable[str]) -> set[str]:
        """The subset of oids this store does not hold."""
        return {oid for oid in oids if not self.has(oid)}

    def store_new(self, objects: Sequence[NewObject]) -> None:
        """Store objects whose oids the caller computed (each a no-op if present, but
        then freshened: see ``freshen``). The default re-hashes through ``put_many``."""
        if objects:
            self.put_many([(obj.kind, obj.body) for obj in objects])

    def replace(self, objects: Sequence[NewObject]) -> None:
        """Store good copies of objects whose stored copy is damaged (a repair from a
        replica), so that reads find them. The default removes what ``delete`` can and
        stores the objects again; backends whose ``delete`` cannot reach every copy
        override it (reads must then prefer a copy that verifies)."""
        for obj in objects:
            self.delete(obj.oid)
        self.store_new(objects)

    def freshen(self, oids: Iterable[str]) -> set[str]:
        """Mark stored objects as just written, so a concurrent gc keeps them and
        everything they reference (a writer about to link objects it did not write calls
        this first); returns the oids this store does not hold. The default only checks
        existence: a backend without ``object_times`` has no grace period to restart."""
        return self.missing(oids)

    @abc.abstractmethod
    def iter_oids(self) -> Iterator[str]:
        """Every stored oid, each once, in no particular order."""

    @abc.abstractmethod
    def delete(self, oid: str) -> None:
        """Remove an object if present (gc only; other callers never delete)."""

    def oids_with_prefix(self, prefix: str) -> list[str]:
        """Sorted oids starting with a (lowercase hex) prefix."""
        return sorted(oid for oid in self.iter_oids() if oid.startswith(prefix))

    def write_guard(self) -> contextlib.AbstractContextManager[None]:
        """Held by a writer from its first object write until the ref swap that links
        them; a backend whose gc can prune without a grace period makes it exclude that
        (the local store does). A no-op by default."""
        return contextlib.nullcontext()

    def object_time(self, oid: str) -> int | None:
        """When an object was last written or freshened (unix seconds); None if the backend
        does not record it (gc then has no grace period to apply) or the object is absent."""
        return None

    def usage(self) -> dict[str, int]:
        """Objects and bytes as stored: ``loose_objects``, ``loose_bytes``, ``packs``,
        ``packed_bytes`` (backends without packs count every object as loose)."""
        return {"loose_objects": 0, "loose_bytes": 0, "packs": 0, "packed_bytes": 0}

    def resolve(self, prefix: str) -> str:
        """The one stored oid starting with ``prefix``; ObjectNotFound or AmbiguousPrefix."""
        prefix = prefix.lower()
        if is_oid(prefix):
            if not self.has(prefix):
                raise ObjectNotFound(f"object {prefix} not found")
            return prefix
        found = self.oids_with_prefix(prefix)
        if not found:
            raise ObjectNotFound(f"no object id starts with {prefix!r}")
        if len(found) > 1:
            raise AmbiguousPrefix(prefix, found)
        return found[0]


class RefStore(abc.ABC):
    """Where mutable names live, updated only by compare-and-swap."""

    @abc.abstractmethod
    def read_ref(self, name: str) -> str | None:
        """The current value of a ref, or None if it does not exist."""

    def read_refs(self, names: Iterable[str]) -> dict[str, str | None]:
        """The current values of several refs (None: absent). One ``read_ref`` each by
        default; a backend may answer many at once (an S3 store lists them)."""
        return {name: self.read_ref(name) for name in names}

    @abc.abstractmethod
    def set_if_equals(
        self, name: str, old: str | None, new: str | None, reason: str = "", log: bool = True
    ) -> bool:
        """Atomically set ``name`` to ``new`` if it currently holds ``old``.

        ``old=None`` means the ref must not exist (create); ``new=None`` deletes it.
        Returns False, changing nothing, if the current value differs.
        """

    @abc.abstractmethod
    def list_refs(self, prefix: str, start_after: str | None = None, limit: int = 0) -> list[str]:
        """Names starting with ``prefix``, sorted by code point, after ``start_after``."""

    @abc.abstractmethod
    def reflog(self, name: str) -> list[ReflogEntry]:
        """Every logged update of ``name``, oldest first (kept after the ref is deleted)."""

    @abc.abstractmethod
    def reflog_names(self, prefix: str) -> list[str]:
        """Names under ``prefix`` that have a reflog (including deleted refs), sorted."""

    @abc.abstractmethod
    def rewrite_reflog(self, name: str, keep: Callable[[ReflogEntry], bool]) -> int:
        """Drop reflog lines for which ``keep`` is False; return how many were dropped."""

    def expire_tombstones(self, older_than: float) -> int:
        """Remove markers of refs deleted before ``older_than`` (unix seconds), for
        backends that keep such markers (S3); return how many went. The default: none."""
        return 0


def apply_index_update(refs: RefStore, update: IndexUpdate) -> None:
    """Set or remove one derived ref, whatever it holds (a few compare-and-swap tries:
    another writer may be changing the same index ref, and either value is fine)."""
    for _ in range(8):
        current = refs.read_ref(update.name)
        if current == update.value or refs.set_if_equals(
            update.name, current, update.value, log=False
        ):
            return


class Store(abc.ABC):
    """A backend: one object store and one ref store with shared settings."""

    objects: ObjectStore
    refs: RefStore
    durable: bool
    url: str
    capabilities: Capabilities = Capabilities()
    stored_copies: StoredCopies | None = None
    """The backend's own copies, for pack, gc and fsck (set when
    ``capabilities.stored_copies``; see ``backends.copies``)."""

    def commit(
        self,
        objects: Sequence[NewObject],
        swap: RefUpdate,
        index: Sequence[IndexUpdate] = (),
        linked: Sequence[str] = (),
        expect: Sequence[RefCheck] = (),
    ) -> bool:
        """Store ``objects`` and apply ``swap`` if its ref holds ``swap.old`` and every
        ``expect`` holds; then apply the ``index`` updates. Returns False, with no ref
        changed, if the swap lost or a check failed.

        ``objects`` are everything the new ref value links that the caller wrote (or
        reuses and must protect from a concurrent gc), referenced before referencing.
        ``linked`` are stored objects the new value links that the caller did not write
        (a fork's entry): they are protected from a concurrent gc as ``freshen``
        protects them; if one is stored nowhere, LinkedObjectsMissing is raised and no
        ref changes. This default freshens them first, writes the objects, sets the
        index refs that get a value, swaps, and after a won swap removes the index refs
        that get None; a backend with ``capabilities.atomic_commit`` does all of it in
        one transaction (the local store marks the linked objects in the transaction
        of the swap, which both protects them and proves they are there). This default
        reads the ``expect`` refs first, before anything is written: a check that held
        then and a swap that won after are what a separate read of them gave (a backend
        with ``atomic_commit`` checks them inside the transaction of the swap).
        """
        for check in expect:
            if self.refs.read_ref(check.name) != check.value:
                return False
        if linked:
            missing = self.objects.freshen(linked)
            if missing:
                raise LinkedObjectsMissing(list(missing))
        with self.objects.write_guard():
            self.objects.store_new(objects)
            for update in index:
                if update.value is not None:
                    apply_index_update(self.refs, update)
            swapped = self.refs.set_if_equals(swap.name, swap.old, swap.new, swap.reason, swap.log)
        if swapped:
            for update in index:
                if update.value is None:
                    apply_index_update(self.refs, update)
        return swapped

    def close(self) -> None:  # noqa: B027 - most backends hold nothing to release
        """Release files and connections; the store must not be used afterwards."""

    def __enter__(self) -> Store:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


_FORMAT_RECORD = re.compile(rb"cas-journal ([1-9][0-9]{0,8})\n?")


def parse_format_record(data: bytes) -> int | None:
    """The version in a store's FORMAT record (``cas-journal N``, N an ASCII number from
    1, one optional newline), or None if ``data`` is anything else."""
    found = _FORMAT_RECORD.fullmatch(data)
    return None if found is None else int(found.group(1))
