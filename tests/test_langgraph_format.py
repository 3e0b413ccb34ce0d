"""LangGraph namespaces written by the first saver's records, read and extended by today's.

``fixtures/langgraph1/store`` was written by the saver of commit daad9fc (record format
1: lists extending their parent's record, message-node chains, items; see
``fixtures/langgraph1/make_store.py``) and ``expected.json`` is what that saver read
back. Today's saver must read exactly the same checkpoints, writes and DeltaChannel
history, and go on writing on top of the old chains.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from langgraph.types import Command

import cas_journal as cj
from cas_journal.langgraph import CasJournalSaver
from cas_journal.maintenance import fsck, gc, pack

FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "langgraph1"
EXPECTED: dict[str, Any] = json.loads((FIXTURE / "expected.json").read_text())


def _maker() -> ModuleType:
    spec = importlib.util.spec_from_file_location("make_langgraph1", FIXTURE / "make_store.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # (its TypedDicts' annotations resolve through it)
    spec.loader.exec_module(module)
    return module


MAKER = _maker()


@pytest.fixture
def journal(tmp_path: Path) -> Any:
    shutil.copytree(FIXTURE / "store", tmp_path / "store")
    with cj.Journal.open(tmp_path / "store", durable=False) as opened:
        yield opened


def _everything(saver: CasJournalSaver) -> dict[str, Any]:
    history = saver.get_delta_channel_history(config=MAKER.config("delta"), channels=["messages"])
    return {
        "checkpoints": [MAKER.describe(found) for found in saver.list(None)],
        "latest": {
            thread: MAKER.describe(saver.get_tuple(MAKER.config(thread)))
            for thread in ("chat", "chat-copy", "delta", "direct")
        },
        "delta_history": MAKER.describe_value(
            {ch: {"writes": h["writes"], "seed": h.get("seed")} for ch, h in history.items()}
        ),
        "deleted_threads": ["doomed"],
    }


def _renamed(described: dict[str, Any], thread_id: str) -> dict[str, Any]:
    """A described checkpoint as its copy in another thread reads."""
    parent = described["parent"]
    return {
        **described,
        "config": {**described["config"], "thread_id": thread_id},
        "parent": None if parent is None else {**parent, "thread_id": thread_id},
    }


def test_the_fixture_holds_every_record_form() -> None:
    threads = {c["config"]["thread_id"] for c in EXPECTED["checkpoints"]}
    assert threads == {"chat", "chat-copy", "delta", "direct"}
    namespaces = {c["config"]["checkpoint_ns"] for c in EXPECTED["checkpoints"]}
    assert namespaces == {"", "inner|step:1"}
    assert EXPECTED["delta_history"]["messages"]["writes"]
    assert any(c["writes"] for c in EXPECTED["checkpoints"])
    size = sum(p.stat().st_size for p in FIXTURE.rglob("*") if p.is_file())
    assert size < 300 * 1024


def test_an_old_store_reads_as_the_old_saver_read_it(journal: cj.Journal) -> None:
    saver = CasJournalSaver(journal)
    assert _everything(saver) == EXPECTED
    for found in EXPECTED["checkpoints"]:  # each checkpoint by id, as time travel asks
        again = saver.get_tuple({"configurable": found["config"]})
        assert again is not None and MAKER.describe(again) == found
    assert saver.get_tuple(MAKER.config("doomed")) is None
    assert sorted(saver.restore_thread("doomed")) == ["", "inner|step:1"]
    assert [MAKER.describe(t) for t in saver.list(MAKER.config("doomed"))] == [
        _renamed(c, "doomed")
        for c in EXPECTED["checkpoints"]
        if c["config"]["thread_id"] == "direct" and c["config"]["checkpoint_ns"] == ""
    ]
    assert fsck(journal.store).ok


def test_old_chains_grow_under_todays_saver(journal: cj.Journal) -> None:
    saver = CasJournalSaver(journal)
    chat = MAKER.chat_graph(saver, MAKER.ChatState, 40)
    waiting = chat.get_state(MAKER.config("chat"))
    assert waiting.next == ("review",)
    resumed = chat.invoke(Command(resume="yes"), MAKER.config("chat"))
    assert resumed["messages"][-1].content == "approved: yes"
    before = len(resumed["messages"])
    after = chat.invoke(MAKER.say("one more"), MAKER.config("chat"))["messages"]
    assert len(after) == before + 2 and after[-2].content == "one more"
    delta = MAKER.chat_graph(saver, MAKER.DeltaState, 45)
    grown = delta.invoke(MAKER.say("and on"), MAKER.config("delta"))["messages"]
    assert grown[-2].content == "and on" and len(grown) == 12
    pack(journal.store)
    gc(journal.store, prune_now=True)
    assert fsck(journal.store).ok
    fresh = CasJournalSaver(journal)
    assert [
        m.content
        for m in fresh.get_tuple(MAKER.config("chat")).checkpoint["channel_values"]["messages"]
    ][-2:] == [m.content for m in after[-2:]]
    # the checkpoints the old saver wrote read the same after the new ones (but the
    # interrupted one, which the resume gave a write)
    old = {c["config"]["checkpoint_id"]: c for c in EXPECTED["checkpoints"]}
    resumed_at = waiting.config["configurable"]["checkpoint_id"]
    for found in fresh.list(None):
        described = MAKER.describe(found)
        want = old.get(described["config"]["checkpoint_id"])
        if want is not None and described["config"]["thread_id"] == want["config"]["thread_id"]:
            if want["config"]["checkpoint_id"] == resumed_at:
                assert len(described["writes"]) > len(want["writes"])
                described["writes"] = want["writes"]
            assert described == want
