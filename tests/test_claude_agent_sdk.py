"""The Claude Agent SDK SessionStore on journal threads: the SDK's own conformance suite,
forks that share entries, idempotent appends, hostile keys."""

from __future__ import annotations

import asyncio
import itertools
import uuid
from collections import Counter

import pytest
from claude_agent_sdk import fork_session_via_store, list_sessions_from_store
from claude_agent_sdk import project_key_for_directory as project_key
from claude_agent_sdk.testing import run_session_store_conformance

import cas_journal as cj
from cas_journal.integrations.claude_agent_sdk import (
    ENTRY_KEY,
    CasJournalSessionStore,
    thread_id_for,
)
from cas_journal.objects import Kind


def run(coroutine):
    return asyncio.run(coroutine)


def test_conformance_in_memory():
    run(run_session_store_conformance(lambda: CasJournalSessionStore(cj.Journal.memory())))


def test_conformance_on_a_local_store(tmp_path):
    journals = []
    counter = itertools.count()

    def make():
        journal = cj.Journal.open(tmp_path / f"store{next(counter)}")
        journals.append(journal)
        return CasJournalSessionStore(journal)

    try:
        run(run_session_store_conformance(make))
    finally:
        for journal in journals:
            journal.close()
    assert len(journals) >= 14  # one store per contract, so every contract ran


def transcript(session_id, turns=3):
    """Lines shaped like Claude Code's: a uuid/parentUuid chain of user and assistant."""
    lines, parent = [], None
    for n in range(turns):
        for role in ("user", "assistant"):
            line_id = str(uuid.UUID(int=len(lines) + 1000 * turns))
            lines.append(
                {
                    "type": role,
                    "uuid": line_id,
                    "parentUuid": parent,
                    "sessionId": session_id,
                    "timestamp": f"2026-01-01T00:00:{len(lines):02d}.000Z",
                    "message": {"role": role, "content": [{"type": "text", "text": f"{role} {n}"}]},
                }
            )
            parent = line_id
    return lines


KEY = {"project_key": "-home-ada-app", "session_id": "11111111-1111-4111-8111-111111111111"}


def _kinds(journal):
    return Counter(journal.store.objects.get(oid)[0] for oid in journal.store.objects.iter_oids())


def test_a_fork_shares_its_source_entries():
    journal = cj.Journal.memory()
    store = CasJournalSessionStore(journal)
    lines = transcript(KEY["session_id"], turns=20)
    run(store.append(KEY, lines))
    before = _kinds(journal)
    fork_id = run(store.fork(KEY, up_to_uuid=lines[9]["uuid"]))
    added = _kinds(journal) - before
    assert added[Kind.ENTRY] == 1  # the fork's summary sidecar; no transcript line is copied
    fork_key = {"project_key": KEY["project_key"], "session_id": fork_id}
    loaded = run(store.load(fork_key))
    assert [line["uuid"] for line in loaded] == [line["uuid"] for line in lines[:10]]
    assert {line["sessionId"] for line in loaded} == {fork_id}
    assert run(store.load(KEY)) == lines  # the source is unchanged
    fork_entries = journal.path(thread_id_for(fork_key))
    assert [e.id for e in fork_entries] == [e.id for e in journal.path(thread_id_for(KEY))][:10]

    more = transcript(fork_id, turns=1)
    run(store.append(fork_key, more))
    assert run(store.load(fork_key))[10:] == more
    assert run(store.load(KEY)) == lines
    sessions = {s["session_id"] for s in run(store.list_sessions(KEY["project_key"]))}
    assert sessions == {KEY["session_id"], fork_id}
    summaries = {s["session_id"] for s in run(store.list_session_summaries(KEY["project_key"]))}
    assert summaries == sessions
    with pytest.raises(cj.EntryNotFound):
        run(store.fork(KEY, up_to_uuid="no-such-uuid"))
    with pytest.raises(cj.ThreadNotFound):
        run(store.fork({"project_key": "p", "session_id": "never"}))


def test_the_sdk_reads_and_forks_through_the_store(tmp_path):
    store = CasJournalSessionStore(cj.Journal.memory())
    directory = str(tmp_path)
    key = {"project_key": project_key(directory), "session_id": KEY["session_id"]}
    lines = transcript(key["session_id"])
    run(store.append(key, lines))
    listed = run(list_sessions_from_store(store, directory=directory))
    assert [info.session_id for info in listed] == [key["session_id"]]
    result = run(fork_session_via_store(store, key["session_id"], directory=directory))
    copied = run(store.load({"project_key": key["project_key"], "session_id": result.session_id}))
    assert [line["message"] for line in copied if "message" in line] == [
        line["message"] for line in lines
    ]


def test_a_retried_batch_is_not_stored_twice():
    store = CasJournalSessionStore(cj.Journal.memory())
    lines = transcript(KEY["session_id"])
    title = {"type": "custom-title", "customTitle": "t"}  # no uuid: appended every time
    run(store.append(KEY, [*lines[:4], title]))
    run(store.append(KEY, [*lines, title]))
    assert run(store.load(KEY)) == [*lines[:4], title, *lines[4:], title]
    run(store.append(KEY, [lines[0], lines[0]]))
    assert len(run(store.load(KEY))) == len(lines) + 2


def test_idempotency_holds_across_store_objects():
    journal = cj.Journal.memory()
    one, two = CasJournalSessionStore(journal), CasJournalSessionStore(journal)
    lines = transcript(KEY["session_id"], turns=4)
    run(one.append(KEY, lines[:3]))
    run(two.append(KEY, lines[3:5]))  # one's cached uuids are now stale
    run(one.append(KEY, lines[3:6]))
    run(two.append(KEY, lines))
    assert run(one.load(KEY)) == lines


@pytest.mark.parametrize(
    ("one", "two"),
    [
        ({"project_key": "a/b", "session_id": "c"}, {"project_key": "a", "session_id": "b/c"}),
        ({"project_key": "a%2Fb", "session_id": "c"}, {"project_key": "a/b", "session_id": "c"}),
        (
            {"project_key": "p", "session_id": "s", "subpath": "subagents/x"},
            {"project_key": "p", "session_id": "s/subagents", "subpath": "x"},
        ),
    ],
)
def test_keys_never_share_a_thread(one, two):
    store = CasJournalSessionStore(cj.Journal.memory())
    run(store.append(one, [{"type": "x", "n": 1}]))
    run(store.append(two, [{"type": "x", "n": 2}]))
    assert run(store.load(one)) == [{"type": "x", "n": 1}]
    assert run(store.load(two)) == [{"type": "x", "n": 2}]
    assert thread_id_for(one) != thread_id_for(two)
    if "subpath" not in one:
        listed = run(store.list_sessions(one["project_key"]))
        assert [s["session_id"] for s in listed] == [one["session_id"]]


def test_bad_input_gets_a_clear_error():
    store = CasJournalSessionStore(cj.Journal.memory())
    with pytest.raises(cj.InvalidInputError, match="subpath"):
        run(store.append({"project_key": "p", "session_id": "s", "subpath": ""}, [{"type": "x"}]))
    with pytest.raises(cj.InvalidInputError, match="JSON"):
        run(store.append(KEY, [{"type": "x", "v": float("nan")}]))
    assert run(store.load(KEY)) is None  # nothing was written


def test_lines_are_custom_entries_holding_the_json():
    journal = cj.Journal.memory()
    store = CasJournalSessionStore(journal)
    run(store.append(KEY, transcript(KEY["session_id"], turns=1)))
    entries = journal.path(thread_id_for(KEY))
    assert [e.type for e in entries] == [cj.EntryType.CUSTOM] * 2
    assert all(ENTRY_KEY in e.metadata for e in entries)
