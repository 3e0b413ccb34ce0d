"""Turn leases: one exclusive, durable claim per thread, shared by every process.

A lease is the ref ``leases/<thread>`` holding the lease as canonical JSON. Acquiring is
creating the ref (compare-and-swap from absent), so exactly one claimant wins across
processes and machines; releasing and clearing are compare-and-swap deletes of the exact
lease that was read, so a lease re-acquired in between is never removed by mistake.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime

from pydantic import ValidationError

from ..backends import RefUpdate, Store
from ..errors import ActiveTurn, CorruptRef
from ..names import validate_id
from ..objects import canonical_json, ensure_utc, format_time, parse_time, utc_now
from .models import TurnLease
from .state import LEASE_PREFIX, ThreadHead


def _encode(lease: TurnLease) -> str:
    assert lease.created_at is not None
    return canonical_json(
        {
            "thread_id": lease.thread_id,
            "turn_id": lease.turn_id,
            "owner_id": lease.owner_id,
            "created_at": format_time(lease.created_at),
        }
    ).decode("utf-8")


def decode_lease(name: str, value: str) -> TurnLease:
    """Parse a lease ref's value; CorruptRef if it is not a lease."""
    try:
        fields = json.loads(value)
        fields["created_at"] = parse_time(fields["created_at"])
        return TurnLease.model_validate(fields)
    except (ValueError, KeyError, TypeError, ValidationError) as exc:
        raise CorruptRef(f"lease {name!r} holds a malformed value") from exc


class LeaseTable:
    """Acquire, release, inspect and expire turn leases."""

    def __init__(self, store: Store, require_thread: Callable[[str], ThreadHead]) -> None:
        self.store = store
        self.refs = store.refs
        self.require_thread = require_thread

    def _swap(self, thread_id: str, old: str | None, new: str | None) -> bool:
        """One compare-and-swap of the lease ref: a commit with no objects, not logged."""
        return self.store.commit([], RefUpdate(self._name(thread_id), old, new, log=False))

    def _name(self, thread_id: str) -> str:
        return LEASE_PREFIX + validate_id(thread_id, "thread id")

    def _read(self, thread_id: str) -> tuple[str | None, TurnLease | None]:
        name = self._name(thread_id)
        value = self.refs.read_ref(name)
        return value, (None if value is None else decode_lease(name, value))

    def acquire(self, lease: TurnLease) -> TurnLease:
        """Claim the turn; ActiveTurn if the thread already has an active lease."""
        self.require_thread(lease.thread_id)
        created = ensure_utc(lease.created_at) if lease.created_at else utc_now()
        claimed = lease.model_copy(update={"created_at": created})
        if not self._swap(lease.thread_id, None, _encode(claimed)):
            _, active = self._read(lease.thread_id)
            holder = f" held by {active.owner_id!r} for turn {active.turn_id!r}" if active else ""
            raise ActiveTurn(f"thread {lease.thread_id!r} already has an active turn{holder}")
        return claimed

    def release(self, lease: TurnLease) -> None:
        """Remove the lease if owner and turn match; otherwise do nothing."""
        while True:
            value, active = self._read(lease.thread_id)
            if (
                active is None
                or active.owner_id != lease.owner_id
                or active.turn_id != lease.turn_id
            ):
                return
            if self._swap(lease.thread_id, value, None):
                return

    def active(self, thread_id: str) -> TurnLease | None:
        """The active lease of a thread (ThreadNotFound if the thread does not exist)."""
        self.require_thread(thread_id)
        return self._read(thread_id)[1]

    def clear_expired(self, thread_id: str, cutoff: datetime) -> TurnLease | None:
        """Remove the lease if it was created before ``cutoff``; return it."""
        self.require_thread(thread_id)
        cutoff = ensure_utc(cutoff)
        while True:
            value, active = self._read(thread_id)
            if active is None or active.created_at is None or not active.created_at < cutoff:
                return None
            if self._swap(thread_id, value, None):
                return active

    def drop(self, thread_id: str) -> None:
        """Remove any lease of a deleted thread."""
        while True:
            value, _ = self._read(thread_id)
            if value is None or self._swap(thread_id, value, None):
                return
