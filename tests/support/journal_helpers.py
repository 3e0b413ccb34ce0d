"""Helpers shared by the journal tests."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime, timedelta

import cas_journal as cj
from cas_journal.objects import Kind

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def at(seconds: float) -> datetime:
    """A fixed instant ``seconds`` after T0."""
    return T0 + timedelta(seconds=seconds)


def user(j: cj.Journal, thread: str, text: str, **kwargs) -> cj.Entry:
    """Append a user message."""
    return j.append(
        cj.Entry(
            thread_id=thread,
            type=cj.EntryType.USER_MESSAGE,
            message=cj.Message(role="user", content=text),
        ),
        **kwargs,
    )


def save_growing_run(j: cj.Journal, run_id: str, iterations: int) -> list[dict]:
    """Save ``iterations`` checkpoints of run ``run_id``, each adding three user messages
    to the list before it; return the last list saved."""
    messages: list[dict] = []
    for i in range(iterations):
        messages = [*messages, *({"role": "user", "content": f"{i}.{k}"} for k in range(3))]
        j.checkpoints.save(cj.Checkpoint(run_id=run_id, iteration=i, messages=messages))
    return messages


def assistant(j: cj.Journal, thread: str, text: str, **kwargs) -> cj.Entry:
    """Append an assistant message."""
    return j.append(
        cj.Entry(
            thread_id=thread,
            type=cj.EntryType.ASSISTANT_MESSAGE,
            message=cj.Message(role="assistant", content=text),
        ),
        **kwargs,
    )


def contents(entries: list[cj.Entry]) -> list[str]:
    """The message contents of entries."""
    return [e.message.content if e.message else "" for e in entries]


class ReadCounter:
    """Counts object reads by kind on a journal's store (by wrapping ``get`` and
    ``get_with_neighbours``)."""

    def __init__(self, journal: cj.Journal) -> None:
        self.reads: Counter[Kind] = Counter()
        objects = journal.store.objects
        original_get = objects.get

        def get(oid: str) -> tuple[Kind, bytes]:
            kind, body = original_get(oid)
            self.reads[kind] += 1
            return kind, body

        objects.get = get  # type: ignore[method-assign]
        original_nearby = objects.get_with_neighbours

        def get_with_neighbours(oid: str) -> list[tuple[str, Kind, bytes]]:
            # one read of ``oid``, however it is served (its row, its block, or ``get``)
            before = self.reads.copy()
            found = original_nearby(oid)
            self.reads = before
            for other, kind, _ in found:
                if other == oid:
                    self.reads[kind] += 1
            return found

        objects.get_with_neighbours = get_with_neighbours  # type: ignore[method-assign]


def stored(j: cj.Journal) -> set[str]:
    """Every oid in the journal's store."""
    return set(j.store.objects.iter_oids())


def typed(value: object) -> object:
    """The value with every scalar as (type, repr): equal only if the types agree too."""
    if isinstance(value, dict):
        return {k: typed(v) for k, v in value.items()}
    if isinstance(value, list):
        return [typed(v) for v in value]
    return (type(value).__name__, repr(value))
