"""The maintenance lease: one pack or gc at a time on a bucket, never blocking forever.

One key, ``<prefix>/MAINTENANCE``, holding ``{"owner": <nonce>, "expires": <unix
seconds, server clock>}``. Taking it: create the key (``If-None-Match: *``), or replace
an expired lease (``If-Match`` its ETag). The holder renews it every ``RENEW_EVERY``
seconds from a background thread (``If-Match`` its own last ETag) and releases it by
writing an expired lease the same way, so no conditional DELETE is needed. A holder that
dies leaves a lease that expires after ``LEASE_SECONDS``; one that loses its lease (too
slow to renew, and another took it over) sees ``lost`` set and stops before its next
destructive step. The manifest's conditional writes protect the data either way: the
lease only keeps two maintenance runs from wasting each other's work.
"""

from __future__ import annotations

import json
import secrets
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress

from ...errors import ConflictError
from .client import OversizedBody, PreconditionLost, S3Bucket
from .keys import Layout

LEASE_SECONDS = 600.0
RENEW_EVERY = 60.0
POLL_EVERY = 2.0


class LeaseLost(ConflictError):
    """Another process took the maintenance lease over: this run stops."""


class MaintenanceLease:
    """Taking, renewing and releasing the lease of one store."""

    def __init__(self, bucket: S3Bucket, layout: Layout) -> None:
        self.bucket = bucket
        self.layout = layout
        self.lost = False
        self._etag: str | None = None
        self._nonce = ""
        self._lock = threading.Lock()

    def _read(self) -> tuple[str | None, float, float, str]:
        """``(etag, expires, server time, owner)`` of the current lease (etag None: no
        key; owner "" when unreadable)."""
        try:
            found = self.bucket.fetch(self.layout.lease_key, "reading the maintenance lease", 4096)
        except OversizedBody:
            return None, 0.0, time.time(), ""
        if found is None:
            return None, 0.0, time.time(), ""
        try:
            lease = json.loads(found.body)
            expires, owner = float(lease["expires"]), lease["owner"]
        except (ValueError, KeyError, TypeError):
            return found.etag, 0.0, found.server_time, ""  # unreadable: treat as expired
        return found.etag, expires, found.server_time, owner if isinstance(owner, str) else ""

    def _body(self, nonce: str, expires: float) -> bytes:
        return json.dumps({"owner": nonce, "expires": round(expires, 3)}).encode()

    def take(self, wait: bool) -> bool:
        """Take the lease (waiting for the holder's to end if ``wait``)."""
        nonce = secrets.token_hex(16)
        while True:
            etag, expires, now, owner = self._read()
            if etag is not None and owner == nonce and expires > now:
                # our write landed but its answer was lost (the retry was refused)
                with self._lock:
                    self._etag, self._nonce, self.lost = etag, nonce, False
                return True
            if etag is None or expires <= now:
                try:
                    new = self.bucket.put(
                        self.layout.lease_key,
                        self._body(nonce, now + LEASE_SECONDS),
                        "taking the maintenance lease",
                        if_match=etag,
                        if_none_match=etag is None,
                    )
                except PreconditionLost:
                    continue  # someone else moved first: look again
                with self._lock:
                    self._etag, self._nonce, self.lost = new, nonce, False
                return True
            if not wait:
                return False
            time.sleep(min(POLL_EVERY, max(0.1, expires - now)))

    def renew(self) -> None:
        """Push the expiry back (sets ``lost`` if the lease was taken over)."""
        with self._lock:
            etag = self._etag
        if etag is None:
            return
        _, _, now, _ = self._read()
        try:
            new = self.bucket.put(
                self.layout.lease_key,
                self._body(self._nonce, now + LEASE_SECONDS),
                "renewing the maintenance lease",
                if_match=etag,
            )
        except PreconditionLost:
            current, expires, now, owner = self._read()
            mine = current is not None and owner == self._nonce and expires > now
            with self._lock:  # ours still (an answer lost, the retry refused) or lost
                self.lost, self._etag = (False, current) if mine else (True, None)
            return
        with self._lock:
            self._etag = new

    def release(self) -> None:
        """Write an expired lease in place of ours (nothing if we lost it)."""
        with self._lock:
            etag, self._etag = self._etag, None
        if etag is None:
            return
        with suppress(PreconditionLost):  # taken over meanwhile: not ours to release
            self.bucket.put(
                self.layout.lease_key,
                self._body(self._nonce, 0.0),
                "releasing the maintenance lease",
                if_match=etag,
            )

    def check(self) -> None:
        """Raise LeaseLost if another process took the lease over."""
        if self.lost:
            raise LeaseLost("another process took the maintenance lease over; run it again")

    @contextmanager
    def held(self, wait: bool = True) -> Iterator[bool]:
        """Hold the lease (renewed in the background) for the body; yields False at once
        if ``wait`` is False and another holds it."""
        if not self.take(wait):
            yield False
            return
        stop = threading.Event()

        def keep() -> None:
            while not stop.wait(RENEW_EVERY):
                try:
                    self.renew()
                except Exception:  # a failed renewal: the next one may succeed
                    continue
                if self.lost:
                    return

        renewer = threading.Thread(target=keep, name="cas-journal-lease", daemon=True)
        renewer.start()
        try:
            yield True
        finally:
            stop.set()
            renewer.join()
            self.release()
