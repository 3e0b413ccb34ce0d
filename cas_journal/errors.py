"""One error tree for the whole library: everything raised on purpose is a JournalError.

Not-found errors are also ``KeyError``; invalid-input errors are also ``ValueError``, so
callers that already catch the built-in types keep working.
"""

from __future__ import annotations


class JournalError(Exception):
    """Base class of every error cas-journal raises on purpose."""


class NotFoundError(JournalError, KeyError):
    """Something named does not exist (also a ``KeyError``)."""

    def __str__(self) -> str:
        # KeyError.__str__ would print the repr of the message; keep it readable.
        return str(self.args[0]) if self.args else self.__class__.__name__


class ThreadNotFound(NotFoundError):
    """No thread has this id."""


class EntryNotFound(NotFoundError):
    """No entry with this id is reachable from the thread."""


class CheckpointNotFound(NotFoundError):
    """No checkpoint is saved for this run id."""


class ObjectNotFound(NotFoundError):
    """The store holds no object with this id."""


class LinkedObjectsMissing(ObjectNotFound):
    """A commit was to link stored objects that are stored nowhere (``oids``, sorted);
    nothing of the commit was applied."""

    def __init__(self, oids: list[str]) -> None:
        self.oids = sorted(oids)
        super().__init__(f"object {self.oids[0]} is no longer stored")


class InvalidInputError(JournalError, ValueError):
    """The caller passed something malformed (also a ``ValueError``)."""


class InvalidParent(InvalidInputError):
    """An append named a parent entry that is not part of the thread."""


class AmbiguousPrefix(InvalidInputError):
    """A short object-id prefix matches more than one object."""

    def __init__(self, prefix: str, candidates: list[str]) -> None:
        self.prefix = prefix
        self.candidates = candidates
        shown = ", ".join(candidates[:10]) + (" ..." if len(candidates) > 10 else "")
        super().__init__(f"prefix {prefix!r} is ambiguous: {shown}")


class ConflictError(JournalError):
    """A concurrent change won a race; nothing of this call was applied."""


class ThreadExists(ConflictError):
    """A thread with this id already exists."""


class ActiveTurn(ConflictError):
    """The thread already has an active turn lease."""


class CorruptObject(JournalError):
    """Stored bytes are damaged, truncated, oversized or do not match their name."""

    def __init__(self, message: str, oid: str | None = None) -> None:
        self.oid = oid
        super().__init__(f"{message} (object {oid})" if oid else message)


class CorruptRef(JournalError):
    """A ref, reflog or lease file holds something that is not a valid value."""


class StoreFormatError(JournalError):
    """The store was written by an unknown (usually newer) format version."""


class StoreUpgradeRequired(StoreFormatError):
    """The store has an older format that this code reads only once it is upgraded, and
    the store was opened read-only; opening it writable upgrades it."""


class StorageError(JournalError):
    """The underlying storage failed (disk full, read-only, network); nothing was lost."""


class AppendCommittedError(JournalError):
    """The append is durable and visible, but a step after the commit failed.

    Do not retry the append: it happened. ``entry`` is the committed entry.
    """

    def __init__(self, message: str, entry: object = None) -> None:
        self.entry = entry
        super().__init__(message)
