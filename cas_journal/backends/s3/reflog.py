"""S3 reflogs: S3 has no append, so each logged update is one small object.

Entry key: ``<log dir of the ref>/<16-digit microseconds>-<32-hex nonce>``, where the
nonce is the one written into the ref by the same update, followed (when the key stays
within 1,024 bytes, as it does for oid values and short reasons) by
``(<old>(<new>(<reason>`` in the order-preserving key encoding, so reading a reflog is
a listing, not one GET per entry. Microseconds are taken from
the ref's previous value (``max(now, previous + 1)``), so one ref's entries sort in update
order even when writers' clocks disagree; listing the directory therefore returns the
log oldest first. Body, always: one JSON object ``{"name", "old", "new", "time", "reason"}``
(the name lets hashed long names be listed). Entries are written *before* the ref update
they describe and removed again if the compare-and-swap loses, like the local store's
reflog line; a writer that dies in between leaves one entry for an update that never
happened (harmless: it only keeps objects alive until reflog expiry).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from ...errors import CorruptRef
from ...objects import format_time, parse_time
from ..base import ReflogEntry
from .client import Listed, S3Bucket
from .keys import ENTRY_NAME_LENGTH, MAX_KEY_BYTES, Layout, RefKeys, decode_ordered, encode_ordered

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_ENTRY_CHARS = frozenset("0123456789abcdef-")
INLINE = "("
"""Separates the inline fields of an entry key (never produced by the key encoding)."""


def micros_to_time(micros: int) -> datetime:
    """An aware UTC datetime for microseconds since the epoch (exact, no float)."""
    return _EPOCH + timedelta(microseconds=micros)


def encode_entry(name: str, entry: ReflogEntry) -> bytes:
    """The stored body of one reflog entry."""
    record = {
        "name": name,
        "old": entry.old or "",
        "new": entry.new or "",
        "time": format_time(entry.time),
        "reason": entry.reason,
    }
    return json.dumps(record, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def decode_entry(data: bytes, key: str) -> tuple[str, ReflogEntry]:
    """``(name, entry)`` from a stored body; CorruptRef if it is malformed."""
    try:
        record = json.loads(data)
        return str(record["name"]), ReflogEntry(
            old=record["old"] or None,
            new=record["new"] or None,
            time=parse_time(record["time"]),
            reason=str(record["reason"]),
        )
    except (ValueError, KeyError, TypeError) as exc:
        raise CorruptRef(f"reflog entry {key!r} is malformed: {data[:80]!r}") from exc


def entry_key(keys: RefKeys, micros: int, nonce: str, entry: ReflogEntry) -> str:
    """The key of an entry: its time and nonce, plus the entry itself if that fits."""
    key = keys.log_entry(micros, nonce)
    fields = (entry.old or "", entry.new or "", entry.reason)
    inline = key + "".join(INLINE + encode_ordered(text) for text in fields)
    return inline if len(inline.encode("utf-8")) <= MAX_KEY_BYTES else key


def is_entry_key(key: str, log_dir: str) -> bool:
    """True if ``key`` is an entry right inside ``log_dir`` (not a stray object)."""
    tail = key[len(log_dir) :]
    head = tail[:ENTRY_NAME_LENGTH]
    return (
        key.startswith(log_dir)
        and len(head) == ENTRY_NAME_LENGTH
        and head[16] == "-"
        and _ENTRY_CHARS.issuperset(head)
        and head[:16].isdigit()
        and (len(tail) == ENTRY_NAME_LENGTH or tail[ENTRY_NAME_LENGTH] == INLINE)
    )


def inline_entry(key: str, log_dir: str) -> ReflogEntry | None:
    """The entry recorded in an entry key, or None if the key does not carry it."""
    tail = key[len(log_dir) :]
    if len(tail) == ENTRY_NAME_LENGTH:
        return None
    fields = tail[ENTRY_NAME_LENGTH + 1 :].split(INLINE)
    try:
        old, new, reason = (decode_ordered(field) for field in fields)
    except ValueError as exc:
        raise CorruptRef(f"reflog entry key {key[:120]!r} is malformed") from exc
    return ReflogEntry(old or None, new or None, micros_to_time(int(tail[:16])), reason)


class S3Reflog:
    """Reading and writing reflog entries of one store."""

    def __init__(self, bucket: S3Bucket, layout: Layout, resolve: Callable[[str], str]) -> None:
        self.bucket = bucket
        self.layout = layout
        self._resolve = resolve  # name of a hashed log directory (cached by the ref store)

    def append(self, keys: RefKeys, entry: ReflogEntry, micros: int, nonce: str) -> str:
        """Store one entry; return its key."""
        key = entry_key(keys, micros, nonce, entry)
        self.bucket.put(key, encode_entry(keys.name, entry), f"logging ref {keys.name!r}")
        return key

    def discard(self, key: str) -> None:
        """Remove the entry of an update that did not happen."""
        self.bucket.delete(key, "discarding a reflog entry")

    def _listing(self, keys: RefKeys) -> list[Listed]:
        listed = self.bucket.list_keys(keys.log_dir, f"listing the reflog of {keys.name!r}")
        return [item for item in listed if is_entry_key(item.key, keys.log_dir)]

    def read_entry(self, key: str) -> tuple[str, ReflogEntry] | None:
        """``(name, entry)`` stored at ``key``, or None if it vanished meanwhile."""
        found = self.bucket.get(key, "reading a reflog entry")
        return None if found is None else decode_entry(found[0], key)

    def _read(self, keys: RefKeys) -> list[tuple[str, ReflogEntry]]:
        listed = self._listing(keys)
        inline = [inline_entry(item.key, keys.log_dir) for item in listed]
        to_fetch = [item.key for item, entry in zip(listed, inline, strict=True) if entry is None]
        fetched = dict(zip(to_fetch, self.bucket.map(self.read_entry, to_fetch), strict=True))
        result: list[tuple[str, ReflogEntry]] = []
        for item, entry in zip(listed, inline, strict=True):
            if entry is None:
                found = fetched[item.key]
                if found is None:
                    continue  # removed by a concurrent rewrite or a lost race
                name, entry = found
                if name != keys.name:
                    raise CorruptRef(f"reflog entry {item.key!r} belongs to {name[:80]!r}")
            result.append((item.key, entry))
        return result

    def read(self, keys: RefKeys) -> list[ReflogEntry]:
        """Every entry of one ref, oldest first."""
        return [entry for _, entry in self._read(keys)]

    def rewrite(self, keys: RefKeys, keep: Callable[[ReflogEntry], bool]) -> int:
        """Delete the entries ``keep`` rejects; return how many."""
        dropped = [key for key, entry in self._read(keys) if not keep(entry)]
        self.bucket.delete_many(dropped, f"rewriting the reflog of {keys.name!r}")
        return len(dropped)

    def names(self, prefix: str) -> list[str]:
        """Names under ``prefix`` with at least one entry, sorted."""
        names: list[str] = []
        layout = self.layout
        start = layout.ordered_prefix(layout.logs, prefix)
        if start is not None:
            what = "listing reflogs"
            directories = list(self.bucket.list_dirs(start, what))
            if "/" not in prefix:  # namespace level first, then the names inside each
                directories = [d for ns in directories for d in self.bucket.list_dirs(ns, what)]
            for directory in directories:
                name = layout.name_from_key(layout.logs, directory[:-1])
                if name is not None and name.startswith(prefix):
                    names.append(name)
        hashed = list(self.bucket.list_dirs(layout.hashed_logs, "listing reflogs"))
        for name in self.bucket.map(self._resolve, hashed):
            if name and name.startswith(prefix):
                names.append(name)
        return sorted(names)

    def first_entry_name(self, directory: str) -> str:
        """The name recorded in the first entry of a hashed log directory ("" if none)."""
        for item in self.bucket.list_keys(directory, "listing reflogs", page_size=5):
            if is_entry_key(item.key, directory):
                found = self.read_entry(item.key)
                if found is not None:
                    return found[0]
        return ""
