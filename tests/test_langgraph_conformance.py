"""LangGraph's published checkpointer conformance suite against CasJournalSaver.

``langgraph-checkpoint-conformance`` runs one suite per capability (put, put_writes,
get_tuple, list, delete_thread, and the extended delete_for_runs, copy_thread, prune),
each on a fresh saver from the registered factory. It detects a capability by whether the
saver overrides the async method, and reports an undetected one as skipped: here every
capability must be detected and every one of its tests must pass, on each backend.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable

import pytest
from langgraph.checkpoint.conformance import checkpointer_test, validate
from langgraph.checkpoint.conformance.capabilities import ALL_CAPABILITIES

import cas_journal as cj
from cas_journal.langgraph import CasJournalSaver
from cas_journal.maintenance import fsck


def run_suite(open_journal: Callable[[], cj.Journal]) -> list[cj.Journal]:
    """Run the whole suite; returns the journals it used (for checks afterwards)."""
    journals: list[cj.Journal] = []

    @checkpointer_test(name="CasJournalSaver")
    async def factory() -> AsyncIterator[CasJournalSaver]:
        journal = open_journal()
        journals.append(journal)
        yield CasJournalSaver(journal)

    report = asyncio.run(validate(factory))
    failures = [f for result in report.results.values() for f in result.failures]
    assert not failures, "\n".join(failures)
    assert set(report.results) == {cap.value for cap in ALL_CAPABILITIES}
    for name, result in report.results.items():
        assert result.detected, f"{name} not detected"
        assert result.passed is True, f"{name}: {result}"
        assert result.tests_skipped == 0 and result.tests_failed == 0, f"{name}: {result}"
        assert result.tests_passed > 0, name
    assert report.conformance_level() == "FULL"
    return journals


def test_conformance_memory() -> None:
    run_suite(cj.Journal.memory)


def test_conformance_local(tmp_path) -> None:
    count = iter(range(100))
    journals = run_suite(lambda: cj.Journal.open(tmp_path / f"store-{next(count)}"))
    assert len(journals) == len(ALL_CAPABILITIES)
    for journal in journals:
        assert fsck(journal.store).ok  # what the suite left behind is a sound store
        journal.close()


@pytest.mark.slow
def test_conformance_s3(s3_server) -> None:
    journals = run_suite(lambda: cj.Journal(s3_server.open(s3_server.new_bucket())))
    for journal in journals:
        journal.close()
