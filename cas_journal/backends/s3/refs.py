"""S3 refs: one key per ref, compare-and-swap by conditional ``PutObject``.

Ref body: a 54-byte header ``"ref <nonce> <micros>\\n"`` then the value, a newline and the
ref's full name. ``<nonce>`` (32 hex digits) is new for every write, so every write has
its own ETag; ``<micros>`` (16 digits) orders the reflog. A deleted ref is a *tombstone*:
exactly the header, with ``del`` for ``ref``; it reads as absent and is exactly 54 bytes,
so listings skip tombstones by size without reading them.

Compare-and-swap: take the ref's state (value and ETag) from this process's cache or read
it; if the value equals ``old``, write the new body with ``If-Match: <that ETag>`` (or
``If-None-Match: *`` when no key exists). S3 refuses the write (412, or 409 for a
concurrent conditional write) if anything replaced the key since, and the ref is re-read.
False is returned only on a state observed *during* the call (a read made by the call, or
a write another thread of this process committed meanwhile), never on a stale cache, so
the answer is linearizable. When botocore had to retry the write, a refusal may hide our
own earlier success: the ref is re-read and the write counts as done if it carries our
nonce, or, if another writer has moved the ref on since, if the reflog shows an update
from our value after ours (unlogged refs cannot tell: their write counts as lost).
Threads of one process updating one ref take turns (a striped lock held around writes,
never around reads), and a thread that keeps losing backs off (it waits for the
write in flight, then sleeps a jittered exponential time), as AWS advises for 412/409
contention. Processes rely on S3's conditions alone. A process-local lock and a boto3
client do not survive ``fork``: open stores after forking.

Deletion writes a tombstone with ``If-Match`` instead of a conditional ``DeleteObject``:
conditional deletes reached AWS general-purpose buckets only in September 2025 and
several S3-compatible servers accept the ``If-Match`` header on DELETE but ignore it,
which would turn a stale delete into a silent loss. Tombstones need nothing beyond
conditional PUTs, which compare-and-swap needs anyway, and keep the ref's reflog clock.
Recreating a deleted ref compares against the tombstone's ETag. gc removes tombstones
older than the reflog expiry (``expire_tombstones``) with a DELETE conditional on the
tombstone's ETag, so a ref recreated meanwhile survives; on a server that ignores
conditions on DELETE (checked once, on a scratch key) they stay, one small key each.

``read_refs`` answers many names with one listing: a ref whose listed ETag equals the
one this handle last saw is not read again (a push of one new entry reads its refs with
one request, however many threads the bucket holds).
"""

from __future__ import annotations

import heapq
import itertools
import random
import re
import secrets
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

from ...errors import CorruptRef
from ...names import MAX_REF_NAME_BYTES
from ..base import MAX_REF_VALUE_BYTES, ReflogEntry, RefStore, check_ref_value
from .client import Listed, OversizedBody, PreconditionLost, S3Bucket
from .keys import MAX_KEY_BYTES, Layout, RefKeys
from .reflog import S3Reflog, micros_to_time

HEADER_LENGTH = 54
MAX_BODY = HEADER_LENGTH + MAX_REF_VALUE_BYTES + 1 + MAX_REF_NAME_BYTES
TOMBSTONE_SIZE = HEADER_LENGTH
MAX_CAS_ATTEMPTS = 8
"""Writes tried by one set_if_equals while the value still equals ``old`` (ABA, 409)."""
LOCK_STRIPES = 64
BACKOFF_BASE = 0.005
BACKOFF_CAP = 0.1
"""A thread that lost k races in a row sleeps up to min(BASE * 2**k, CAP) seconds."""
CACHE_LIMIT = 4096

_HEADER = re.compile(rb"(ref|del) ([0-9a-f]{32}) ([0-9]{16})\n")
_CONFLICT_CODES = ("ConditionalRequestConflict", "409")


@dataclass(frozen=True)
class RefState:
    """What one ref key held when last seen: ETag (None: no key), value (None: absent)."""

    etag: str | None
    value: str | None
    nonce: str | None = None
    micros: int = 0
    seq: int = 0


ABSENT = RefState(None, None)


def encode_ref(nonce: str, micros: int, value: str | None, name: str) -> bytes:
    """The stored body of a ref holding ``value`` (None writes a tombstone)."""
    if value is None:
        return f"del {nonce} {micros:016d}\n".encode("ascii")
    return f"ref {nonce} {micros:016d}\n{value}\n{name}".encode()


def decode_ref(data: bytes, etag: str, name: str) -> RefState:
    """Parse a stored ref body; CorruptRef if it is malformed or names another ref."""
    match = _HEADER.match(data)
    if match is None:
        raise CorruptRef(f"ref {name!r} holds a malformed body ({len(data)} bytes)")
    kind, nonce, micros = match.group(1), match.group(2).decode(), int(match.group(3))
    if kind == b"del":
        if len(data) != TOMBSTONE_SIZE:
            raise CorruptRef(f"ref {name!r} holds a malformed tombstone")
        return RefState(etag, None, nonce, micros)
    value_bytes, newline, stored_name = data[HEADER_LENGTH:].partition(b"\n")
    try:
        value = value_bytes.decode("utf-8")
        if not newline or not value or stored_name.decode("utf-8") != name:
            raise ValueError("value missing or name mismatch")
    except (UnicodeDecodeError, ValueError) as exc:
        raise CorruptRef(f"ref {name!r} holds a malformed or misplaced value") from exc
    return RefState(etag, value, nonce, micros)


def _now_micros() -> int:
    return time.time_ns() // 1000


class S3RefStore(RefStore):
    """Refs and reflogs in a bucket."""

    def __init__(self, bucket: S3Bucket, layout: Layout) -> None:
        self.bucket = bucket
        self.layout = layout
        self.log = S3Reflog(bucket, layout, self._hashed_log_name)
        self._stripes = [threading.Lock() for _ in range(LOCK_STRIPES)]
        self._cache: dict[str, RefState] = {}
        self._cache_lock = threading.Lock()
        self._seq = itertools.count(1)
        self._hashed_names: dict[str, str] = {}
        self._conditional_deletes: bool | None = None
        self._local = threading.local()

    # -- state cache ------------------------------------------------------------------

    def _cached(self, name: str) -> RefState | None:
        with self._cache_lock:
            return self._cache.get(name)

    def _tick(self) -> int:
        """A new sequence number; taken before the request whose answer is remembered."""
        with self._cache_lock:
            return next(self._seq)

    def _remember(self, name: str, state: RefState, seq: int) -> None:
        """Cache a state that was current at some instant after ``seq`` was taken.

        Versions of one ref carry strictly increasing ``micros``, so an answer that
        arrives late (a read served before a write whose result is already cached)
        never replaces a newer version. A vanished key is always believed.
        """
        with self._cache_lock:
            current = self._cache.get(name)
            if current is not None and state.etag is not None:
                if state.micros < current.micros:
                    return
                if state.micros == current.micros and state.nonce == current.nonce:
                    seq = max(seq, current.seq)
            if len(self._cache) >= CACHE_LIMIT and name not in self._cache:
                self._cache.pop(next(iter(self._cache)))
            self._cache[name] = RefState(state.etag, state.value, state.nonce, state.micros, seq)

    def _forget(self, name: str) -> None:
        with self._cache_lock:
            self._cache.pop(name, None)

    def _fetch(self, keys: RefKeys) -> RefState:
        seq = self._tick()
        try:
            found = self.bucket.get(keys.ref, f"reading ref {keys.name!r}", MAX_BODY)
        except OversizedBody as big:
            raise CorruptRef(f"ref {keys.name!r} holds {big.size} bytes, too many") from None
        state = ABSENT if found is None else decode_ref(found[0], found[1], keys.name)
        self._remember(keys.name, state, seq)
        return state

    # -- protocol -----------------------------------------------------------------------

    def read_ref(self, name: str) -> str | None:
        keys = self.layout.ref_keys(name)
        return self._fetch(keys).value

    def read_refs(self, names: Iterable[str]) -> dict[str, str | None]:
        """Many refs at once: one listing of their namespaces (``refs/`` when several),
        then a GET only for refs whose ETag differs from this handle's cached state
        (and for names too long for a key, which listings do not show)."""
        wanted = list(dict.fromkeys(names))
        if len(wanted) <= 2:
            return {name: self.read_ref(name) for name in wanted}
        keys = {name: self.layout.ref_keys(name) for name in wanted}
        namespaces = {name.partition("/")[0] for name, k in keys.items() if not k.hashed}
        if len(namespaces) == 1:
            prefix = f"{self.layout.refs}{next(iter(namespaces))}/"
        else:
            prefix = self.layout.refs
        listed: dict[str, Listed] = {}
        began = self._tick()
        if namespaces:
            for entry in self.bucket.list_keys(prefix, "listing refs"):
                listed[entry.key] = entry
        values: dict[str, str | None] = {}
        fetch: list[RefKeys] = []
        for name in wanted:
            ref_keys = keys[name]
            item = listed.get(ref_keys.ref)
            if ref_keys.hashed:
                fetch.append(ref_keys)
            elif item is None:
                values[name] = None  # no key: never written
                self._remember(name, ABSENT, began)
            else:
                cached = self._cached(name)
                if cached is not None and cached.etag == item.etag and item.etag:
                    values[name] = cached.value
                else:
                    fetch.append(ref_keys)
        for ref_keys, state in zip(fetch, self.bucket.map(self._fetch, fetch), strict=True):
            values[ref_keys.name] = state.value
        return {name: values[name] for name in wanted}

    def expire_tombstones(self, older_than: float) -> int:
        """Delete tombstones (deleted refs) last written before ``older_than`` (unix
        seconds), each with a DELETE conditional on the tombstone's ETag, so a ref
        recreated meanwhile is never deleted. Servers that ignore conditions on DELETE
        are not asked (``conditional_deletes``). Returns how many went."""
        if not self.conditional_deletes():
            return 0
        removed = 0
        for base in (self.layout.refs, self.layout.hashed_refs):
            for item in self.bucket.list_keys(base, "listing refs"):
                if item.size != TOMBSTONE_SIZE or item.modified >= older_than or not item.etag:
                    continue
                try:
                    self.bucket.delete(item.key, "removing a tombstone", if_match=item.etag)
                except PreconditionLost:
                    continue  # recreated meanwhile
                removed += 1
        with self._cache_lock:
            self._cache.clear()
        return removed

    def conditional_deletes(self) -> bool:
        """True if the server honours ``If-Match`` on DELETE (checked once per handle on a
        scratch key: a wrong ETag must be refused)."""
        if self._conditional_deletes is None:
            key = f"{self.layout.base}PROBE-{secrets.token_hex(8)}"
            self.bucket.put(key, b"probe", "checking conditional deletes")
            try:
                self.bucket.delete(key, "checking conditional deletes", if_match='"0"')
                honoured = False
            except PreconditionLost:
                honoured = True
            finally:
                self.bucket.delete(key, "checking conditional deletes")
            self._conditional_deletes = honoured
        return self._conditional_deletes

    def set_if_equals(
        self, name: str, old: str | None, new: str | None, reason: str = "", log: bool = True
    ) -> bool:
        keys = self.layout.ref_keys(name)
        check_ref_value(new)
        try:
            done = self._compare_and_swap(keys, old, new, reason, log)
        except BaseException:
            self._forget(name)  # the outcome of a failed request is unknown
            raise
        self._pace(keys.name, done)
        return done

    def _compare_and_swap(
        self, keys: RefKeys, old: str | None, new: str | None, reason: str, log: bool
    ) -> bool:
        """Write if the ref holds ``old``. Cached states carry the sequence number taken
        before the request that saw them: one newer than the call's start was current
        during the call, so if it differs from ``old``, False is a correct answer; an
        older cached state is only used to try the write."""
        began = self._tick()
        stripe = self._stripes[hash(keys.name) % LOCK_STRIPES]
        for _ in range(MAX_CAS_ATTEMPTS):
            with stripe:
                state = self._cached(keys.name)
                if state is None and old is None and new is not None:
                    state = ABSENT  # optimistic create: If-None-Match decides, no read first
                seen_now = state is not None and state.seq > began
                if state is not None and seen_now and state.value != old:
                    return False
                if state is not None and state.value == old:
                    if new is not None or old is not None:
                        if self._write(keys, state, new, reason, log):
                            return True
                        continue  # the failed write re-read the ref
                    if seen_now:  # "delete if absent" and it is absent: nothing to write
                        if log:
                            micros = _now_micros()
                            entry = ReflogEntry(None, None, micros_to_time(micros), reason)
                            self.log.append(keys, entry, micros, secrets.token_hex(16))
                        return True
            self._fetch(keys)  # reads never hold the lock
        return False

    def _write(
        self, keys: RefKeys, state: RefState, new: str | None, reason: str, log: bool
    ) -> bool:
        """Try one conditional write; on refusal re-read the ref (into the cache)."""
        nonce = secrets.token_hex(16)
        micros = max(_now_micros(), state.micros + 1)
        log_key = None
        if log:
            entry = ReflogEntry(state.value, new, micros_to_time(micros), reason)
            log_key = self.log.append(keys, entry, micros, nonce)
        body = encode_ref(nonce, micros, new, keys.name)
        sent = self._tick()
        try:
            etag = self.bucket.put(
                keys.ref,
                body,
                f"updating ref {keys.name!r}",
                if_match=state.etag,
                if_none_match=state.etag is None,
            )
        except PreconditionLost as lost:
            if self._fetch(keys).nonce == nonce:
                return True  # our write landed; only its answer was lost and retried
            if lost.retried and log_key is not None and self._moved_on_from(keys, new, micros):
                return True  # it landed, then another writer moved the ref on from it
            if log_key is not None and not lost.retried:
                self.log.discard(log_key)
            if lost.code in _CONFLICT_CODES:
                time.sleep(random.uniform(0.005, 0.05))  # S3 asks to back off and retry
            return False
        self._remember(keys.name, RefState(etag, new, nonce, micros), sent)
        return True

    def _moved_on_from(self, keys: RefKeys, value: str | None, micros: int) -> bool:
        """True if a logged update replaced ``value`` written at ``micros``: a writer that
        read our version logs it as its ``old``, with a later time (times of one ref
        increase from the version read), before writing. How a retried write that was
        refused tells "landed, then overtaken" from "never landed"."""
        written = micros_to_time(micros)
        return any(e.old == value and e.time > written for e in self.log.read(keys))

    def _pace(self, name: str, won: bool) -> None:
        """Back off a thread that keeps losing races: wait for a write of this ref that
        another thread of this process has in flight (so the caller's next read sees it),
        then sleep a jittered, exponential, capped time (for writers in other processes)."""
        if won:
            self._local.losses = 0
            return
        with self._stripes[hash(name) % LOCK_STRIPES]:
            pass
        losses = min(getattr(self._local, "losses", 0) + 1, 16)
        self._local.losses = losses
        time.sleep(random.uniform(0, min(BACKOFF_BASE * 2**losses, BACKOFF_CAP)))

    def list_refs(self, prefix: str, start_after: str | None = None, limit: int = 0) -> list[str]:
        merged = heapq.merge(
            self._ordered_names(prefix, start_after, limit),
            self._long_names(prefix, start_after),
        )
        return list(itertools.islice(merged, limit)) if limit > 0 else list(merged)

    def _ordered_names(self, prefix: str, start_after: str | None, limit: int) -> Iterator[str]:
        layout = self.layout
        key_prefix = layout.ordered_prefix(layout.refs, prefix)
        if key_prefix is None:
            return
        cursor = None
        if start_after is not None:
            cursor = layout.ordered_prefix(layout.refs, start_after)
            if cursor is not None and len(cursor.encode("utf-8")) > MAX_KEY_BYTES:
                cursor = None
        page = min(1000, limit + 10) if limit > 0 else 1000
        for item in self.bucket.list_keys(key_prefix, "listing refs", cursor, page):
            if item.size == TOMBSTONE_SIZE:
                continue
            name = layout.name_from_key(layout.refs, item.key)
            if name is None or not name.startswith(prefix):
                continue
            if start_after is None or name > start_after:
                yield name

    def _long_names(self, prefix: str, start_after: str | None) -> list[str]:
        listed = [
            item
            for item in self.bucket.list_keys(self.layout.hashed_refs, "listing refs")
            if item.size != TOMBSTONE_SIZE
        ]
        names = self.bucket.map(self._hashed_ref_name, [item.key for item in listed])
        return sorted(
            name
            for name in names
            if name and name.startswith(prefix) and (start_after is None or name > start_after)
        )

    def _hashed_ref_name(self, key: str) -> str:
        digest = key[len(self.layout.hashed_refs) :]
        known = self._hashed_names.get(digest)
        if known is not None:
            return known
        try:
            found = self.bucket.get(key, "reading a long ref name", MAX_BODY)
        except OversizedBody as big:
            raise CorruptRef(f"long ref {digest} holds {big.size} bytes, too many") from None
        if found is None or found[0].startswith(b"del "):
            return ""  # deleted meanwhile
        _, _, rest = found[0][HEADER_LENGTH:].partition(b"\n")
        name = rest.decode("utf-8", errors="replace")
        return self._checked_long_name(digest, name)

    def _hashed_log_name(self, directory: str) -> str:
        digest = directory[len(self.layout.hashed_logs) :].rstrip("/")
        known = self._hashed_names.get(digest)
        if known is not None:
            return known
        return self._checked_long_name(digest, self.log.first_entry_name(directory))

    def _checked_long_name(self, digest: str, name: str) -> str:
        if not name:
            return ""
        try:
            keys = self.layout.ref_keys(name)
        except ValueError:
            keys = None
        if keys is None or keys.ref != self.layout.hashed_refs + digest:
            raise CorruptRef(f"long ref {digest} records a name that does not hash to it")
        self._hashed_names[digest] = name
        return name

    def reflog(self, name: str) -> list[ReflogEntry]:
        return self.log.read(self.layout.ref_keys(name))

    def reflog_names(self, prefix: str) -> list[str]:
        return self.log.names(prefix)

    def rewrite_reflog(self, name: str, keep: Callable[[ReflogEntry], bool]) -> int:
        return self.log.rewrite(self.layout.ref_keys(name), keep)
