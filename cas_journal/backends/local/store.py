"""The embedded local store: a directory, no server.

Layout (git-like, inspectable)::

    FORMAT                 "cas-journal <version>"; a newer version is refused on open
    objects/ab/cdef...     loose objects, one zstd frame per file
    packs/pack-*.pack|idx  packed objects and their index
    refs/<namespace>/...   one file per ref holding its value
    logs/<namespace>/...   one append-only reflog per ref
    locks/00..ff           lock files for ref updates (flock; never stale)
"""

from __future__ import annotations

import os
from pathlib import Path

from ...errors import StoreFormatError
from ...objects import DEFAULT_MAX_OBJECT_SIZE, ObjectCodec
from ..base import Capabilities, Store
from .copies import LocalStoredCopies
from .fsutil import atomic_replace, storage_errors
from .objects import LocalObjectStore
from .refs import LocalRefStore

FORMAT_FILE = "FORMAT"
FORMAT_NAME = "cas-journal"
FORMAT_VERSION = 1


def read_format_version(root: Path) -> int | None:
    """The store format version recorded in ``root``, or None if there is no store."""
    try:
        text = (root / FORMAT_FILE).read_text("utf-8", errors="replace")
    except FileNotFoundError:
        return None
    name, _, version = text.strip().partition(" ")
    if name != FORMAT_NAME or not version.isdigit():
        raise StoreFormatError(f"{root} has an unreadable {FORMAT_FILE} file: {text[:60]!r}")
    return int(version)


def is_store(path: str | os.PathLike[str]) -> bool:
    """True if ``path`` holds a cas-journal store."""
    return (Path(path) / FORMAT_FILE).is_file()


_LAYOUT = ("objects", "packs", "refs", "logs", "locks")


def _interrupted_init(root: Path) -> bool:
    """True if ``root`` is empty or holds only what an interrupted init leaves behind:
    empty layout directories and temp files (the FORMAT file is written last)."""
    with os.scandir(root) as entries:
        for entry in entries:
            if entry.name.startswith(".tmp-") and entry.is_file(follow_symlinks=False):
                continue
            if entry.name not in _LAYOUT or not entry.is_dir(follow_symlinks=False):
                return False
            with os.scandir(entry.path) as inside:
                if next(inside, None) is not None:
                    return False
    return True


class LocalStore(Store):
    """A store in a local directory (created if missing unless ``create=False``)."""

    capabilities = Capabilities(object_times=True, stored_copies=True)

    def __init__(
        self,
        path: str | os.PathLike[str],
        durable: bool = True,
        max_object_size: int = DEFAULT_MAX_OBJECT_SIZE,
        create: bool = True,
    ) -> None:
        self.root = Path(path)
        self.durable = durable
        self.url = str(self.root)
        with storage_errors(f"opening store {self.root}"):
            version = read_format_version(self.root)
            if version is None:
                if not create:
                    raise StoreFormatError(
                        f"no cas-journal store at {self.root} (create one with 'cas-journal init')"
                    )
                if self.root.exists() and not _interrupted_init(self.root):
                    raise StoreFormatError(
                        f"{self.root} is not empty and holds no cas-journal store"
                    )
                self.root.mkdir(parents=True, exist_ok=True)
                for sub in _LAYOUT:
                    (self.root / sub).mkdir(exist_ok=True)
                atomic_replace(
                    self.root / FORMAT_FILE, f"{FORMAT_NAME} {FORMAT_VERSION}\n".encode(), durable
                )
            elif version > FORMAT_VERSION:
                raise StoreFormatError(
                    f"store {self.root} has format {version}; this cas-journal reads up to "
                    f"{FORMAT_VERSION}. Upgrade cas-journal to open it."
                )
        codec = ObjectCodec(max_object_size=max_object_size)
        self.objects: LocalObjectStore = LocalObjectStore(self.root, codec, durable)
        self.stored_copies: LocalStoredCopies = LocalStoredCopies(self.objects)
        self.refs: LocalRefStore = LocalRefStore(self.root, durable)

    def close(self) -> None:
        """Unmap packs and close lock files."""
        self.objects.close()
        self.refs.close()
