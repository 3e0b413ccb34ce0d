"""The journal driven side by side with a plain in-memory model (hypothesis state machine)."""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass, field

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule
from support.journal_helpers import at

import cas_journal as cj

THREAD_IDS = st.sampled_from(["a", "b", "c", "d/e", "\u00e9"])


@dataclass
class ModelThread:
    """What the model knows of a thread."""

    leaf: str | None = None
    members: set[str] = field(default_factory=set)


class JournalMachine(RuleBasedStateMachine):
    """Random create/append/move_leaf/fork/delete/reopen against a model."""

    local = False

    def __init__(self) -> None:
        super().__init__()
        self.directory = tempfile.mkdtemp(prefix="cas-model-") if self.local else None
        self.journal = self._open()
        self.threads: dict[str, ModelThread] = {}
        self.parents: dict[str, str | None] = {}
        self.counter = 0

    def _open(self) -> cj.Journal:
        if self.directory is None:
            return cj.Journal.memory()
        return cj.Journal.open(self.directory, durable=False)

    def teardown(self) -> None:
        self.journal.close()
        if self.directory:
            shutil.rmtree(self.directory, ignore_errors=True)

    def _path(self, leaf: str | None) -> list[str]:
        out = []
        while leaf is not None:
            out.append(leaf)
            leaf = self.parents[leaf]
        return out[::-1]

    @rule(tid=THREAD_IDS)
    def create(self, tid: str) -> None:
        if tid in self.threads:
            try:
                self.journal.create_thread(cj.ThreadMeta(id=tid))
            except cj.ThreadExists:
                return
            raise AssertionError("duplicate create succeeded")
        self.journal.create_thread(cj.ThreadMeta(id=tid))
        self.threads[tid] = ModelThread()

    @precondition(lambda self: self.threads)
    @rule(data=st.data(), explicit=st.booleans())
    def append(self, data: st.DataObject, explicit: bool) -> None:
        tid = data.draw(st.sampled_from(sorted(self.threads)))
        thread = self.threads[tid]
        parent = None
        if explicit and thread.members:
            parent = data.draw(st.sampled_from(sorted(thread.members)))
        self.counter += 1
        entry = self.journal.append(
            cj.Entry(
                thread_id=tid,
                type=cj.EntryType.USER_MESSAGE,
                message=cj.Message(role="user", content=f"m{self.counter}"),
            ),
            parent_id=parent,
            now=at(self.counter),  # ids are hashes: a fixed time keeps every replay identical
        )
        expected_parent = parent if parent is not None else thread.leaf
        assert (entry.parent_id or None) == expected_parent
        self.parents[entry.id] = expected_parent
        thread.leaf = entry.id
        thread.members.add(entry.id)

    @precondition(lambda self: self.threads)
    @rule(data=st.data())
    def move_leaf(self, data: st.DataObject) -> None:
        tid = data.draw(st.sampled_from(sorted(self.threads)))
        thread = self.threads[tid]
        target = data.draw(st.sampled_from([None, *sorted(thread.members)]))
        self.journal.move_leaf(tid, target)
        thread.leaf = target

    @precondition(lambda self: self.threads)
    @rule(data=st.data(), new=THREAD_IDS, before=st.booleans())
    def fork(self, data: st.DataObject, new: str, before: bool) -> None:
        src = data.draw(st.sampled_from(sorted(self.threads)))
        thread = self.threads[src]
        target = data.draw(st.sampled_from([None, *sorted(thread.members)]))
        effective = target if target is not None else thread.leaf
        position = cj.ForkPosition.BEFORE if before else cj.ForkPosition.AT
        try:
            meta = self.journal.fork(src, target, position, new_thread_id=new)
        except cj.ThreadExists:
            assert new in self.threads
            return
        except cj.EntryNotFound:
            assert before and effective is None
            return
        assert new not in self.threads
        leaf = self.parents[effective] if before and effective else effective
        assert (meta.leaf_id or None) == leaf
        self.threads[new] = ModelThread(leaf=leaf, members=set(self._path(leaf)))

    @precondition(lambda self: self.threads)
    @rule(data=st.data())
    def delete(self, data: st.DataObject) -> None:
        tid = data.draw(st.sampled_from(sorted(self.threads)))
        self.journal.delete_thread(tid)
        del self.threads[tid]

    @precondition(lambda self: self.local)
    @rule()
    def reopen(self) -> None:
        self.journal.close()
        self.journal = self._open()

    @invariant()
    def matches_the_model(self) -> None:
        assert {t.id for t in self.journal.list_threads()} == set(self.threads)
        for tid, thread in self.threads.items():
            assert (self.journal.thread(tid).leaf_id or None) == thread.leaf
            assert [e.id for e in self.journal.path(tid)] == self._path(thread.leaf)
            assert {e.id for e in self.journal.entries(tid)} == thread.members


class LocalJournalMachine(JournalMachine):
    """The same machine on a local store, with reopening."""

    local = True


# the number of runs is the profile's (tests/conftest.py): 25 in the default run, 100 in CI
TestJournalModel = JournalMachine.TestCase
TestJournalModel.settings = settings(stateful_step_count=30, deadline=None)
TestLocalJournalModel = LocalJournalMachine.TestCase
TestLocalJournalModel.settings = settings(stateful_step_count=25, deadline=None)
pytest.mark.slow(TestLocalJournalModel)  # reopens a local store at every step: seconds
