"""The pack manifest: which packs of a bucket are live and which are condemned.

One key, ``<prefix>/MANIFEST``, holding JSON::

    {"format": 1,
     "live": [{"name": "pack-<40 hex>", "data": <bytes>, "index": <bytes>,
               "index_hash": "<64 hex>", "objects": <n>, "added": <unix seconds>}, ...],
     "condemned": [{... the same fields ..., "condemned": <unix seconds, 0: pending>}, ...]}

A pack is two keys, ``packs/<name>.pack`` (its data) and ``packs/<name>.idx`` (its
index), in the same format as the local store's packs. Names are random (a pack's data is
streamed to the bucket before its index, which names the pack in the local store, is
known); ``index_hash`` (the index's trailing BLAKE3) binds the index to its entry, and
the sizes bound every read.

Every change is a read-modify-write with a conditional PUT (``If-Match`` the ETag read,
``If-None-Match: *`` for the first), retried when another writer got there first: a
writer *registers* a pack it uploaded (appends it to ``live``); maintenance replaces the
packs it rewrote and condemns or removes others (see ``maintenance``). Objects are
readable from live and condemned packs alike; a writer relies only on live copies (the
rule that makes gc safe while others write, documented in ``maintenance``).

A manifest that does not parse is *damaged*: readers fall back to listing ``packs/``
(every pack found counts as live, which keeps everything), and the next writer rewrites
it from that listing. Every field is checked (names, sizes, times), so a hostile
manifest can only hide packs, never point a read outside a pack or at another key.
"""

from __future__ import annotations

import json
import random
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from ...errors import ConflictError
from .client import OversizedBody, PreconditionLost, S3Bucket
from .keys import Layout

MANIFEST_FORMAT = 1
MAX_MANIFEST_BYTES = 64 * 1024 * 1024
MAX_UPDATE_ATTEMPTS = 30
PACK_NAME = re.compile(r"pack-[0-9a-f]{40}")
INDEX_HASH = re.compile(r"(?:[0-9a-f]{64})?")
_MAX_SIZE = 1 << 50


@dataclass(frozen=True)
class PackEntry:
    """One pack of the manifest: its name, its two keys' sizes, its object count, when it
    was added (unix seconds) and, for a condemned pack, when it was condemned (0 while
    the condemning gc has not finished)."""

    name: str
    data: int
    index: int
    objects: int
    added: float = 0.0
    condemned: float = 0.0
    index_hash: str = ""
    """Hex BLAKE3 trailer of the index ("" only for packs found by a listing)."""

    def record(self, condemned: bool) -> dict[str, object]:
        """The JSON form."""
        fields: dict[str, object] = {
            "name": self.name,
            "data": self.data,
            "index": self.index,
            "index_hash": self.index_hash,
            "objects": self.objects,
            "added": round(self.added, 3),
        }
        if condemned:
            fields["condemned"] = round(self.condemned, 3)
        return fields


@dataclass(frozen=True)
class Manifest:
    """A manifest as read: its packs and the ETag of the key (None: no key yet)."""

    live: tuple[PackEntry, ...] = ()
    condemned: tuple[PackEntry, ...] = ()
    etag: str | None = None
    damaged: bool = False
    """The key did not parse; ``live`` then comes from a listing of ``packs/``."""
    read_at: float = field(default=0.0, compare=False)
    """The server's clock when it was read (unix seconds)."""

    def names(self) -> set[str]:
        """Every pack it names."""
        return {entry.name for entry in (*self.live, *self.condemned)}

    def encode(self) -> bytes:
        """The JSON body."""
        return json.dumps(
            {
                "format": MANIFEST_FORMAT,
                "live": [entry.record(False) for entry in self.live],
                "condemned": [entry.record(True) for entry in self.condemned],
            },
            separators=(",", ":"),
        ).encode("ascii")


class ManifestError(ValueError):
    """The manifest's body is malformed."""


def _number(record: dict[str, object], name: str, kind: type, required: bool = True) -> float:
    value = record.get(name, None if required else 0)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ManifestError(f"field {name!r} is not a number")
    if kind is int and not isinstance(value, int):
        raise ManifestError(f"field {name!r} is not an integer")
    if not 0 <= value <= _MAX_SIZE:
        raise ManifestError(f"field {name!r} is out of range")
    return value


def _entry(record: object, condemned: bool) -> PackEntry:
    if not isinstance(record, dict):
        raise ManifestError("a pack entry is not an object")
    name = record.get("name")
    if not isinstance(name, str) or not PACK_NAME.fullmatch(name):
        raise ManifestError("a pack entry has a malformed name")
    index_hash = record.get("index_hash")
    if not isinstance(index_hash, str) or not INDEX_HASH.fullmatch(index_hash):
        raise ManifestError("a pack entry has a malformed index hash")
    return PackEntry(
        name=name,
        data=int(_number(record, "data", int)),
        index=int(_number(record, "index", int)),
        objects=int(_number(record, "objects", int)),
        added=float(_number(record, "added", float, required=False)),
        condemned=float(_number(record, "condemned", float)) if condemned else 0.0,
        index_hash=index_hash,
    )


def decode_manifest(body: bytes, etag: str | None, read_at: float) -> Manifest:
    """Parse a manifest body; ManifestError if anything is malformed."""
    try:
        value = json.loads(body)
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        raise ManifestError("not JSON") from exc
    if not isinstance(value, dict) or value.get("format") != MANIFEST_FORMAT:
        raise ManifestError("not a manifest of a known format")
    live, condemned = value.get("live", []), value.get("condemned", [])
    if not isinstance(live, list) or not isinstance(condemned, list):
        raise ManifestError("pack lists are not lists")
    manifest = Manifest(
        tuple(_entry(record, False) for record in live),
        tuple(_entry(record, True) for record in condemned),
        etag,
        read_at=read_at,
    )
    names = [entry.name for entry in (*manifest.live, *manifest.condemned)]
    if len(names) != len(set(names)):
        raise ManifestError("a pack is named twice")
    return manifest


class ManifestStore:
    """Reads and updates the manifest of one store (safe to share between threads)."""

    def __init__(self, bucket: S3Bucket, layout: Layout) -> None:
        self.bucket = bucket
        self.layout = layout

    def read(self) -> Manifest:
        """The current manifest (an empty one if there is none)."""
        try:
            found = self.bucket.fetch(
                self.layout.manifest_key, "reading the pack manifest", MAX_MANIFEST_BYTES
            )
        except OversizedBody:
            return self._from_listing(None, time.time())
        if found is None:
            return Manifest(read_at=time.time())
        try:
            return decode_manifest(found.body, found.etag, found.server_time)
        except ManifestError:
            return self._from_listing(found.etag, found.server_time)

    def _from_listing(self, etag: str | None, read_at: float) -> Manifest:
        """Every complete pack under ``packs/`` counts as live (a damaged manifest)."""
        sizes: dict[str, dict[str, int]] = {}
        times: dict[str, float] = {}
        for item in self.bucket.list_keys(self.layout.packs, "listing packs"):
            name, dot, suffix = item.key[len(self.layout.packs) :].partition(".")
            if dot and suffix in ("pack", "idx") and PACK_NAME.fullmatch(name):
                sizes.setdefault(name, {})[suffix] = item.size
                times[name] = max(times.get(name, 0.0), item.modified)
        live = tuple(
            PackEntry(name, parts["pack"], parts["idx"], 0, times[name])
            for name, parts in sorted(sizes.items())
            if "pack" in parts and "idx" in parts
        )
        return Manifest(live, (), etag, damaged=True, read_at=read_at)

    def update(self, change: Callable[[Manifest], Manifest | None]) -> Manifest:
        """Apply ``change`` to the current manifest and write the result conditionally,
        retrying on a lost race (``change`` is called again on the newer manifest; it
        returns None to give up, raising nothing). Returns the manifest written (or the
        one ``change`` declined)."""
        for attempt in range(MAX_UPDATE_ATTEMPTS):
            current = self.read()
            updated = change(current)
            if updated is None:
                return current
            try:
                etag = self.bucket.put(
                    self.layout.manifest_key,
                    updated.encode(),
                    "updating the pack manifest",
                    if_match=current.etag,
                    if_none_match=current.etag is None,
                )
            except PreconditionLost as lost:
                if lost.retried and self._landed(updated):
                    return replace(updated, etag=None)
                time.sleep(random.uniform(0, min(0.005 * 2**attempt, 0.5)))
                continue
            return replace(updated, etag=etag)
        raise ConflictError("the pack manifest kept changing; try again")

    def _landed(self, written: Manifest) -> bool:
        """After a refused retry: did our own first attempt land? (same content)"""
        again = self.read()
        return not again.damaged and again.encode() == written.encode()
