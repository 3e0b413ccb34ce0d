"""The one way a thread changes: build a new state, then one ``Store.commit``.

``commit`` reads the thread's head once, asks ``build`` for the new state and the objects
it links, and hands the objects, the new state and the compare-and-swap of the thread ref
(from the state it read to the new one) to ``Store.commit`` as one change. Objects carry
the oids the journal computed when it built them: nothing is hashed twice, nothing is
probed for existence (the backend freshens what it already holds). If another writer got
there first, the swap loses, ``commit`` reads the new head and calls ``build`` again;
``build`` decides whether the change still applies (an append to the default leaf
re-parents) or raises ConflictError. A no-op ``build`` returns None and nothing is written.

The first head ``commit`` tries is the newest this journal has read or written of the
thread (``ThreadStates.last``), so a writer appending to its own thread reads no ref at
all. That head may be stale; the compare-and-swap is what makes it safe: a stale head
loses the swap and the change is rebuilt on the head read then. A decision that would
end without a swap (``build`` raising, or finding nothing to do) is never taken on a
remembered head: the thread is read and ``build`` asked again.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

from ..backends import IndexUpdate, NewObject, RefCheck, RefUpdate, Store
from ..errors import AppendCommittedError, ConflictError, JournalError, StorageError
from ..objects import Kind, ThreadStateNode
from ..objects.nodes import new_tuple
from .state import ThreadHead, ThreadStates, thread_ref

MAX_ATTEMPTS = 200
_THREAD = Kind.THREAD
"""(An enum member looked up on its class costs several times a global on Python 3.11.)"""


@dataclass
class Update:
    """A proposed change: the new state and the objects it links (referenced first)."""

    state: ThreadStateNode
    objects: list[NewObject] = field(default_factory=list)
    result: object = None


def pause(attempt: int) -> None:
    """Back off a little after the second lost race in a row (random, capped at 50 ms)."""
    if attempt >= 2:
        time.sleep(random.uniform(0, min(0.05, 0.0005 * 2**attempt)))


def retries(gave_up: str, attempts: int = MAX_ATTEMPTS) -> Iterator[int]:
    """The one retry loop of optimistic commits: ``for attempt in retries(...)``, each
    round reading what it changes, building the change and trying its compare-and-swap,
    and leaving the loop when it won. Yields 0, 1, ... with a short random pause before
    each round after a few lost ones, and raises ConflictError(``gave_up``) when the
    rounds run out."""
    for attempt in range(attempts):
        if attempt:
            pause(attempt - 1)
        yield attempt
    raise ConflictError(f"{gave_up}; gave up after {attempts} tries")


def commit_or_report(
    store: Store,
    objects: Sequence[NewObject],
    swap: RefUpdate,
    index: Sequence[IndexUpdate] = (),
    result: object = None,
    linked: Sequence[str] = (),
    expect: Sequence[RefCheck] = (),
) -> bool:
    """``Store.commit``, turning a storage failure after a won swap into
    AppendCommittedError (carrying ``result``): the change happened, do not retry it."""
    try:
        return store.commit(objects, swap, index, linked, expect)
    except StorageError as exc:
        # the swap may have happened before the failure (e.g. syncing the directory)
        if _reads_back(store, swap):
            raise AppendCommittedError(
                f"{swap.reason or 'update'} of {swap.name!r} is committed, but: {exc}", result
            ) from exc
        raise


def commit(
    states: ThreadStates,
    thread_id: str,
    build: Callable[[ThreadHead], Update | None],
    reason: str,
    head: ThreadHead | None = None,
) -> tuple[Update | None, ThreadHead]:
    """Apply ``build`` to the thread atomically; return the update and the head it made
    (the head that was read, when ``build`` found nothing to do).

    ``head`` is the thread as the caller already read it (saves one ref read); a lost
    compare-and-swap reads the thread again.
    """
    name = thread_ref(thread_id)
    remembered = False
    if head is None:
        head = states.last(thread_id)
        remembered = head is not None
    for _ in retries(f"thread {thread_id!r} kept changing under {reason}"):
        if head is None:
            head = states.read(thread_id)
            remembered = False
        try:
            update = build(head)
        except JournalError:
            if not remembered:
                raise
            head = None  # decide again on the thread as it is now
            continue
        if update is None:
            if remembered:
                head = None
                continue
            return None, head
        state_oid, state_body = states.write(update.state)
        # (the tuples are made without their Python-level __new__, every field given)
        objects = [*update.objects, new_tuple(NewObject, (state_oid, _THREAD, state_body))]
        swap = new_tuple(RefUpdate, (name, head.state_oid, state_oid, reason, True))
        if commit_or_report(states.store, objects, swap, result=update.result):
            made = new_tuple(ThreadHead, (thread_id, state_oid, update.state))
            return update, states.remember(made)
        head = None
    raise AssertionError("unreachable: retries raises when the rounds run out")


def _reads_back(store: Store, swap: RefUpdate) -> bool:
    try:
        return store.refs.read_ref(swap.name) == swap.new
    except StorageError:
        return False
