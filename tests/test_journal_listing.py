"""Listing threads through the journal's caches: a repeated listing decodes only the
thread states that changed since, always follows the refs, and hands out copies."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import pytest
from support.journal_helpers import at

import cas_journal as cj
from cas_journal.backends import LocalStore, MemoryStore, Store
from cas_journal.objects import Kind


@pytest.fixture(params=["memory", "local"])
def store(request, tmp_path):
    if request.param == "memory":
        opened: Store = MemoryStore()
    else:
        opened = LocalStore(tmp_path / "store", durable=False)
    yield opened
    opened.close()


class StateReads:
    """Counts thread states read from a store, through ``get`` and ``get_many``."""

    def __init__(self, journal: cj.Journal) -> None:
        self.count = 0
        objects = journal.store.objects
        original_get, original_get_many = objects.get, objects.get_many

        inside_get_many = False

        def get(oid: str) -> tuple[Kind, bytes]:
            kind, body = original_get(oid)
            self.count += kind is Kind.THREAD and not inside_get_many
            return kind, body

        def get_many(oids: Iterable[str]) -> Iterator[tuple[str, Kind, bytes]]:
            nonlocal inside_get_many
            inside_get_many = True  # a backend's get_many may read through get
            try:
                found = list(original_get_many(oids))
            finally:
                inside_get_many = False
            self.count += sum(kind is Kind.THREAD for _, kind, _ in found)
            return iter(found)

        objects.get = get  # type: ignore[method-assign]
        objects.get_many = get_many  # type: ignore[method-assign]

    def since(self) -> int:
        """Reads since the last call."""
        count, self.count = self.count, 0
        return count


def _make_threads(journal: cj.Journal, count: int) -> None:
    for i in range(count):
        journal.create_thread(cj.ThreadMeta(id=f"t{i:03d}", title=f"title {i}", created_at=at(i)))


def test_a_repeated_listing_reads_only_the_states_that_changed(store):
    writer = cj.Journal(store)
    _make_threads(writer, 120)
    reader = cj.Journal(store)
    reads = StateReads(reader)
    first = reader.list_threads(limit=50)
    assert [t.id for t in first] == [f"t{i:03d}" for i in range(119, 69, -1)]
    assert 50 <= reads.since() <= 60
    assert reader.list_threads(limit=50) == first
    assert reads.since() == 0  # every state on the page is cached by its oid
    # another journal on the store changes one listed thread and deletes another: the
    # reader's caches do not know, the refs it reads every time do
    changed = writer.thread("t100")
    changed.title = "renamed"
    writer.update_thread(changed)
    writer.delete_thread("t110")
    again = reader.list_threads(limit=50)
    assert reads.since() <= 2  # the changed state, and one more thread to fill the page
    assert "t110" not in [t.id for t in again]
    assert next(t for t in again if t.id == "t100").title == "renamed"
    assert [t.id for t in again] == [f"t{i:03d}" for i in range(119, 68, -1) if i != 110]


def test_listed_metadata_are_copies_a_caller_may_change(store):
    journal = cj.Journal(store)
    _make_threads(journal, 3)
    page = journal.list_threads()
    page[0].title = "changed by the caller"
    page[1].archived = True
    again = journal.list_threads()
    assert [t.title for t in again] == ["title 2", "title 1", "title 0"]
    assert not any(t.archived for t in again)
    assert again[0] is not page[0]
