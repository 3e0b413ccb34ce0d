"""The one way a thread changes: build a new state, store it, compare-and-swap the ref.

``commit`` reads the thread's head, asks ``build`` for the new state and the objects it
needs, writes the objects (referenced before referencing, so the closure invariant
holds), and swaps the ref from the state it read to the new one. If another writer got
there first, it reads the new head and calls ``build`` again; ``build`` decides whether
the change still applies (an append to the default leaf re-parents) or raises
ConflictError. A no-op ``build`` returns None and nothing is written.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from ..errors import AppendCommittedError, ConflictError, StorageError
from ..objects import Kind, ThreadStateNode
from .state import ThreadHead, ThreadStates, thread_ref

MAX_ATTEMPTS = 200


@dataclass
class Update:
    """A proposed change: the new state and the objects it needs (in closure order)."""

    state: ThreadStateNode
    objects: list[tuple[Kind, bytes]] = field(default_factory=list)
    result: object = None


def _pause(attempt: int) -> None:
    if attempt >= 2:
        time.sleep(random.uniform(0, min(0.05, 0.0005 * 2**attempt)))


def commit(
    states: ThreadStates,
    thread_id: str,
    build: Callable[[ThreadHead], Update | None],
    reason: str,
) -> tuple[Update | None, str]:
    """Apply ``build`` to the thread atomically; return the update and the new state oid."""
    store = states.store
    name = thread_ref(thread_id)
    for attempt in range(MAX_ATTEMPTS):
        with store.objects.write_guard():
            head = states.read(thread_id)
            update = build(head)
            if update is None:
                return None, head.state_oid
            state_oid, state_body = states.write(update.state)
            store.objects.put_many([*update.objects, (Kind.THREAD, state_body)])
            try:
                swapped = store.refs.set_if_equals(name, head.state_oid, state_oid, reason)
            except StorageError as exc:
                # the swap may have happened before the failure (e.g. syncing the directory)
                if _reads_back(states, name, state_oid):
                    raise AppendCommittedError(
                        f"{reason} on thread {thread_id!r} is committed, but: {exc}",
                        update.result,
                    ) from exc
                raise
        if swapped:
            return update, state_oid
        _pause(attempt)
    raise ConflictError(
        f"thread {thread_id!r} kept changing under {reason}; gave up after {MAX_ATTEMPTS} tries"
    )


def _reads_back(states: ThreadStates, name: str, expected: str) -> bool:
    try:
        return states.store.refs.read_ref(name) == expected
    except StorageError:
        return False
