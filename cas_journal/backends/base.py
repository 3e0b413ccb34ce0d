"""Layer 2, the two storage protocols every backend implements.

* ObjectStore: immutable, content-addressed objects. ``put`` is idempotent and returns the
  oid; ``get`` verifies the hash of what it decoded; ``delete`` exists for gc only.
* RefStore: small mutable values under names like ``threads/<id>``. The only update is
  compare-and-swap (``set_if_equals``), which also creates (old=None) and deletes
  (new=None). Updates made with ``log=True`` append a reflog line (old, new, time, reason).

A Store bundles one of each with the settings both share.
"""

from __future__ import annotations

import abc
import contextlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from types import TracebackType

from ..errors import AmbiguousPrefix, InvalidInputError, ObjectNotFound
from ..objects import Kind, ObjectCodec, is_oid

MAX_REF_VALUE_BYTES = 64 * 1024


@dataclass(frozen=True)
class ReflogEntry:
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

    @abc.abstractmethod
    def has(self, oid: str) -> bool:
        """True if the object is stored here."""

    def missing(self, oids: Iterable[str]) -> set[str]:
        """The subset of oids this store does not hold."""
        return {oid for oid in oids if not self.has(oid)}

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


class Store(abc.ABC):
    """A backend: one object store and one ref store with shared settings."""

    objects: ObjectStore
    refs: RefStore
    durable: bool
    url: str

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
