"""CasJournalSaver beyond the conformance suite: sharing, writes, prune, delete and restore,
delete_for_runs, hostile ids, lying stores, other serializers, several processes, sync."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from collections import Counter
from datetime import timedelta
from pathlib import Path
from typing import Annotated, Any, TypedDict

import pytest
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
from langgraph.channels.delta import DeltaChannel
from langgraph.checkpoint.base import BaseCheckpointSaver, CheckpointTuple
from langgraph.checkpoint.serde.types import ERROR, INTERRUPT
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from support.backend_contract import HOSTILE_NAMES
from support.langgraph_app import build, user_texts

import cas_journal as cj
from cas_journal.errors import CorruptObject, InvalidInputError, ThreadExists
from cas_journal.langgraph import CasJournalSaver
from cas_journal.langgraph.values import LEAF_SIZE
from cas_journal.maintenance import fsck, gc, stats, sync
from cas_journal.objects import Kind

HERE = Path(__file__).parent


def config(thread: str, checkpoint_id: str | None = None, ns: str = "") -> dict[str, Any]:
    configurable = {"thread_id": thread, "checkpoint_ns": ns}
    if checkpoint_id is not None:
        configurable["checkpoint_id"] = checkpoint_id
    return {"configurable": configurable}


def checkpoint(
    values: dict[str, Any] | None = None, versions: dict[str, int] | None = None
) -> dict[str, Any]:
    values = values or {}
    return {
        "v": 4,
        "id": _next_id(),
        "ts": "2026-11-26T00:00:00+00:00",
        "channel_values": values,
        "channel_versions": versions if versions is not None else dict.fromkeys(values, 1),
        "versions_seen": {},
        "updated_channels": None,
    }


_ids = iter(range(10**6))


def _next_id() -> str:
    return f"1f000000-0000-6000-8000-{next(_ids):012d}"


def chain(saver: CasJournalSaver, thread: str, n: int, **metadata: Any) -> list[dict[str, Any]]:
    """``n`` checkpoints on a thread, each the child of the one before."""
    configs = []
    parent = config(thread)
    for step in range(n):
        parent = saver.put(parent, checkpoint(), {"source": "loop", "step": step, **metadata}, {})
        configs.append(parent)
    return configs


def say(text: str) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": text}]}


def kinds(journal: cj.Journal) -> Counter[str]:
    return Counter(stats(journal.store).objects_by_kind)


# -- sharing -----------------------------------------------------------------------------


def test_every_message_is_stored_once_however_many_checkpoints_hold_it() -> None:
    journal = cj.Journal.memory()
    saver = CasJournalSaver(journal)
    graph = build(saver)
    thread = config("t")
    turns = 8
    for text in user_texts(turns):
        graph.invoke(say(text), thread)
    checkpoints = list(saver.list(thread))
    assert len(checkpoints) == 4 * turns  # the input, start, chatbot and review steps
    gc(journal.store, prune_now=True)  # records replaced by later writes are garbage
    # 2 messages per turn, each once; one graph-input blob per turn; nothing else
    assert kinds(journal)["blob"] == 3 * turns
    # one record per checkpoint, plus a leaf per LEAF_SIZE messages of the list
    assert kinds(journal)["tree"] == 4 * turns + (2 * turns) // LEAF_SIZE
    assert kinds(journal)["message"] == 0  # lists are in leaves
    latest = saver.get_tuple(thread)
    assert latest is not None and len(latest.checkpoint["channel_values"]["messages"]) == 2 * turns


def test_copy_thread_copies_no_object_and_the_copies_diverge() -> None:
    journal = cj.Journal.memory()
    saver = CasJournalSaver(journal)
    graph = build(saver)
    for text in user_texts(3):
        graph.invoke(say(text), config("a"))
    before = stats(journal.store).objects
    saver.copy_thread("a", "b")
    assert stats(journal.store).objects == before
    assert [t.checkpoint["id"] for t in saver.list(config("b"))] == [
        t.checkpoint["id"] for t in saver.list(config("a"))
    ]
    graph.invoke(say("only on b " * 20), config("b"))
    assert len(graph.get_state(config("b")).values["messages"]) == 8
    assert len(graph.get_state(config("a")).values["messages"]) == 6
    gc(journal.store, prune_now=True)
    assert kinds(journal)["blob"] == 3 * 3 + 3  # the copy's turn added its own three
    with pytest.raises(ThreadExists):
        saver.copy_thread("a", "b")
    saver.copy_thread("nobody", "c")  # nothing to copy: nothing happens
    assert saver.get_tuple(config("c")) is None


# -- writes ------------------------------------------------------------------------------


def test_pending_writes_come_back_in_langgraph_order() -> None:
    saver = CasJournalSaver(cj.Journal.memory())
    stored = saver.put(config("t"), checkpoint(), {}, {})
    saver.put_writes(stored, [("x", 1), ("y", 2)], "task-b", "p2")
    saver.put_writes(stored, [("x", 3)], "task-a", "p1")
    saver.put_writes(stored, [(ERROR, "first"), (INTERRUPT, {"q": 1})], "task-c", "")
    saver.put_writes(stored, [("x", "ignored")], "task-a", "p1")  # regular: kept as first
    saver.put_writes(stored, [(ERROR, "second")], "task-c", "")  # special: replaced
    found = saver.get_tuple(stored)
    assert found is not None
    assert found.pending_writes == [
        ("task-c", INTERRUPT, {"q": 1}),
        ("task-c", ERROR, "second"),
        ("task-a", "x", 3),
        ("task-b", "x", 1),
        ("task-b", "y", 2),
    ]


def records_in_chain(saver: CasJournalSaver, thread: str) -> int:
    head = saver.chains.head(f"langgraph/{thread}/")
    return len(list(saver.chains.chain(head)))


def test_late_writes_for_old_checkpoints_are_kept() -> None:
    journal = cj.Journal.memory()
    saver = CasJournalSaver(journal)
    configs = chain(saver, "t", 12)
    saver.put_writes(configs[9], [("late", "b")], "recent-task")
    assert records_in_chain(saver, "t") == 12  # within the window: records rewritten
    saver.put_writes(configs[1], [("late", "a" * 2000)], "old-task")
    assert records_in_chain(saver, "t") == 13  # far back: one writes record added
    saver.put_writes(configs[1], [("late", "again")], "old-task-2")
    assert records_in_chain(saver, "t") == 13  # ... which later writes join
    expected = [("old-task", "late", "a" * 2000), ("old-task-2", "late", "again")]
    for reader in (saver, CasJournalSaver(journal)):  # this process, and a new one
        found = reader.get_tuple(configs[1])
        assert found is not None and found.pending_writes == expected
        found = reader.get_tuple(configs[9])
        assert found is not None and found.pending_writes == [("recent-task", "late", "b")]
        listed = {t.checkpoint["id"]: t.pending_writes for t in reader.list(config("t"))}
        assert len(listed) == 12
        assert listed[configs[1]["configurable"]["checkpoint_id"]] == expected


def test_writes_that_arrive_before_their_checkpoint_join_it() -> None:
    saver = CasJournalSaver(cj.Journal.memory())
    first = saver.put(config("t"), checkpoint(), {}, {})
    second, third = checkpoint(), checkpoint()
    # LangGraph's executor can deliver writes, even the next checkpoint's, before the put
    saver.put_writes(config("t", second["id"]), [("ch", "early")], "task")
    saver.put_writes(config("t", third["id"]), [("ch", "earlier still")], "task")
    assert records_in_chain(saver, "t") == 3
    after_second = saver.put(first, second, {}, {})
    saver.put(after_second, third, {}, {})
    assert records_in_chain(saver, "t") == 3  # one record per checkpoint, writes inside
    for reader in (saver, CasJournalSaver(saver.journal)):
        found = reader.get_tuple(config("t", second["id"]))
        assert found is not None and found.pending_writes == [("task", "ch", "early")]
        found = reader.get_tuple(config("t"))
        assert found is not None and found.checkpoint["id"] == third["id"]
        assert found.pending_writes == [("task", "ch", "earlier still")]
        assert found.parent_config == after_second


# -- prune, delete, restore ---------------------------------------------------------------


def test_prune_keep_latest_leaves_old_records_to_gc(tmp_path) -> None:
    journal = cj.Journal.open(tmp_path / "store")
    saver = CasJournalSaver(journal)
    graph = build(saver)
    for text in user_texts(6):
        graph.invoke(say(text), config("t"))
    graph.invoke(say("please approve this"), config("t"))  # leaves an interrupt pending
    pending = saver.get_tuple(config("t"))
    assert pending is not None and pending.pending_writes
    values = graph.get_state(config("t")).values
    trees = kinds(journal)["tree"]
    saver.prune(["t", "nobody"], strategy="keep_latest")
    assert [t.checkpoint["id"] for t in saver.list(config("t"))] == [pending.checkpoint["id"]]
    gc(journal.store, prune_now=True, reflog_expiry=timedelta(0))
    assert kinds(journal)["tree"] == 1 < trees
    reopened = CasJournalSaver(journal)
    again = reopened.get_tuple(config("t"))
    assert again is not None and again.pending_writes == pending.pending_writes
    assert build(reopened).get_state(config("t")).values == values
    assert fsck(journal.store).ok
    with pytest.raises(InvalidInputError):
        saver.prune(["t"], strategy="sometimes")


class DeltaState(TypedDict):
    messages: Annotated[
        list[AnyMessage], DeltaChannel(lambda s, ws: _fold(s, ws), snapshot_frequency=3)
    ]


def _fold(state: list[AnyMessage], writes: list[Any]) -> list[AnyMessage]:
    for write in writes:
        state = add_messages(state, write)
    return state


def delta_graph(saver: CasJournalSaver) -> Any:
    def echo(state: Any) -> dict[str, Any]:
        return {"messages": [AIMessage(content="echo " + state["messages"][-1].content)]}

    builder = StateGraph(DeltaState)
    builder.add_node("echo", echo)
    builder.add_edge(START, "echo")
    builder.add_edge("echo", END)
    return builder.compile(checkpointer=saver)


def test_delta_channel_state_survives_prune_and_gc() -> None:
    journal = cj.Journal.memory()
    saver = CasJournalSaver(journal)
    graph = delta_graph(saver)
    for n in range(7):
        graph.invoke(say(f"message {n}"), config("t"))
    messages = graph.get_state(config("t")).values["messages"]
    assert len(messages) == 14
    history = saver.get_delta_channel_history(config=config("t"), channels=["messages"])
    assert history == BaseCheckpointSaver.get_delta_channel_history(
        saver, config=config("t"), channels=["messages"]
    )
    before = len(list(saver.list(config("t"))))
    saver.prune(["t"])
    kept = len(list(saver.list(config("t"))))
    assert 1 < kept < before  # the ancestors back to the last snapshot stay
    gc(journal.store, prune_now=True, reflog_expiry=timedelta(0))
    assert [
        m.content
        for m in delta_graph(CasJournalSaver(journal)).get_state(config("t")).values["messages"]
    ] == [m.content for m in messages]


def test_delete_thread_is_restorable_until_gc() -> None:
    journal = cj.Journal.memory()
    saver = CasJournalSaver(journal)
    configs = chain(saver, "t", 3)
    configs += [saver.put(config("t", ns="child:1"), checkpoint(), {}, {})]
    chain(saver, "other", 2)
    saver.delete_thread("t")
    saver.delete_thread("nobody")
    assert saver.get_tuple(config("t")) is None and not list(saver.list(config("t")))
    assert sorted(saver.restore_thread("t")) == ["", "child:1"]
    assert [t.config for t in saver.list(config("t"))] == list(reversed(configs[:3]))
    saver.delete_thread("t")
    gc(journal.store, prune_now=True, reflog_expiry=timedelta(0))
    assert saver.restore_thread("t") == []
    assert kinds(journal)["tree"] == 2  # only the other thread's records are left


def test_delete_for_runs_keeps_what_later_checkpoints_reference() -> None:
    journal = cj.Journal.memory()
    saver = CasJournalSaver(journal)
    graph = build(saver)
    runs = [str(uuid.uuid4()) for _ in range(3)]
    for run, text in zip(runs, user_texts(3), strict=True):
        graph.invoke(say(text), {**config("t"), "metadata": {"run_id": run}})
    values = graph.get_state(config("t")).values
    saver.delete_for_runs([runs[1], "unknown"])
    left = {t.metadata.get("run_id") for t in saver.list(config("t"))}
    assert left == {runs[0], runs[2]}
    gc(journal.store, prune_now=True, reflog_expiry=timedelta(0))
    fresh = CasJournalSaver(journal)
    assert build(fresh).get_state(config("t")).values == values  # run 3 still whole
    for found in fresh.list(config("t")):  # and every remaining checkpoint reads
        assert found.checkpoint["channel_values"] is not None
    assert fsck(journal.store).ok


# -- hostile input, lying stores, other serializers ------------------------------------------


@pytest.mark.parametrize("thread", [*HOSTILE_NAMES, 42])
def test_hostile_thread_ids_round_trip_in_isolation(thread: Any) -> None:
    saver = CasJournalSaver(cj.Journal.memory())
    for other in ("a", "a/b", "x"):
        if other != thread:
            saver.put(config(other), checkpoint({"who": other}), {}, {"who": 1})
    stored = saver.put(config(thread), checkpoint({"who": "me"}), {}, {"who": 1})
    found = saver.get_tuple(config(thread))
    assert found is not None and found.checkpoint["channel_values"] == {"who": "me"}
    assert found.config == stored
    assert [t.config["configurable"]["thread_id"] for t in saver.list(config(thread))] == [
        str(thread)
    ]
    saver.delete_thread(thread)
    assert saver.get_tuple(config(thread)) is None
    assert all(saver.get_tuple(config(other)) for other in ("a", "a/b", "x") if other != thread)


@pytest.mark.parametrize("thread", ["", "nul\0", "x" * 1025, None, 1.5])
def test_bad_thread_ids_are_refused(thread: Any) -> None:
    saver = CasJournalSaver(cj.Journal.memory())
    with pytest.raises(InvalidInputError):
        saver.put(config(thread), checkpoint(), {}, {})
    with pytest.raises(InvalidInputError):
        saver.get_tuple({"configurable": {}})


def test_a_store_that_lies_is_caught() -> None:
    journal = cj.Journal.memory()
    configs = chain(CasJournalSaver(journal), "t", 2)
    objects = journal.store.objects
    honest = objects.get

    def lying_get(oid: str) -> tuple[Kind, bytes]:
        kind, body = honest(oid)
        return (kind, b'{"data":{"id":7}}') if kind is Kind.TREE else (kind, body)

    objects.get = lying_get  # type: ignore[method-assign]
    with pytest.raises(CorruptObject):  # (a new journal: nothing cached)
        CasJournalSaver(cj.Journal(journal.store)).get_tuple(configs[0])


class JsonSerde:
    """A serializer of plain JSON values (any object with dumps_typed / loads_typed)."""

    def dumps_typed(self, value: Any) -> tuple[str, bytes]:
        return "json", json.dumps(value).encode()

    def loads_typed(self, data: tuple[str, bytes]) -> Any:
        assert data[0] == "json"
        return json.loads(data[1])


def test_any_serializer_is_accepted() -> None:
    saver = CasJournalSaver(cj.Journal.memory(), serde=JsonSerde())
    values = {"items": [{"n": n, "text": "x" * 100} for n in range(5)], "small": [1, 2]}
    first = saver.put(
        config("t"), checkpoint(values), {"source": "input"}, {"items": 1, "small": 1}
    )
    values["items"].append({"n": 5, "text": "y" * 100})
    second = saver.put(first, checkpoint(values, {"items": 2, "small": 1}), {}, {"items": 2})
    found = saver.get_tuple(second)
    assert found is not None and found.checkpoint["channel_values"] == values
    record = saver.chains.record(saver.chains.head("langgraph/t/") or "")
    assert record.values["items"].form == "leaves" and record.values["items"].count == 6


def test_versions_are_integers() -> None:
    saver = CasJournalSaver(cj.Journal.memory())
    assert saver.get_next_version(None, None) == 1
    assert saver.get_next_version(7, None) == 8
    assert str(saver.get_next_version("00000000000000000000000000000007.0.5", None)).startswith(  # type: ignore[arg-type]
        "00000000000000000000000000000008."
    )


# -- several processes, sync ---------------------------------------------------------------

WRITER = r"""
import sys
sys.path.insert(0, sys.argv[1])
from support.langgraph_app import build, user_texts
import cas_journal as cj
from cas_journal.langgraph import CasJournalSaver
store, thread, turns = sys.argv[2], sys.argv[3], int(sys.argv[4])
with cj.Journal.open(store) as journal:
    saver = CasJournalSaver(journal)
    graph = build(saver)
    for text in user_texts(turns, seed=hash(thread) % 1000):
        graph.invoke({"messages": [{"role": "user", "content": text}]}, {"configurable": {"thread_id": thread}})
    shared = {"configurable": {"thread_id": "shared", "checkpoint_ns": "", "checkpoint_id": sys.argv[5]}}
    for n in range(turns):
        saver.put_writes(shared, [("ch", f"{thread}-{n}")], f"{thread}-task-{n}")
"""


@pytest.mark.slow
def test_two_processes_write_one_store(tmp_path) -> None:
    store = tmp_path / "store"
    with cj.Journal.open(store) as journal:
        shared = CasJournalSaver(journal).put(config("shared"), checkpoint(), {}, {})
    turns = 6
    children = [
        subprocess.Popen(
            [
                sys.executable,
                "-c",
                WRITER,
                str(HERE),
                str(store),
                thread,
                str(turns),
                shared["configurable"]["checkpoint_id"],
            ],
            stderr=subprocess.PIPE,
            text=True,
        )
        for thread in ("left", "right")
    ]
    for child in children:
        _, errors = child.communicate(timeout=300)
        assert child.returncode == 0, errors[-3000:]
    with cj.Journal.open(store) as journal:
        saver = CasJournalSaver(journal)
        graph = build(saver)
        for thread in ("left", "right"):
            assert len(graph.get_state(config(thread)).values["messages"]) == 2 * turns
        found = saver.get_tuple(shared)
        assert found is not None and found.pending_writes is not None
        assert sorted(w[2] for w in found.pending_writes) == sorted(
            f"{t}-{n}" for t in ("left", "right") for n in range(turns)
        )
        assert fsck(journal.store).ok


def test_sync_copies_and_fast_forwards_langgraph_threads(tmp_path) -> None:
    source = cj.Journal.memory()
    graph = build(CasJournalSaver(source))
    for text in user_texts(2):
        graph.invoke(say(text), config("t"))
    destination = cj.Journal.open(tmp_path / "copy")
    first = sync(source.store, destination.store)
    assert first.refs_created == 1
    graph.invoke(say("one more"), config("t"))
    second = sync(source.store, destination.store)
    assert second.refs_fast_forwarded == 1 and not second.diverged
    copied = build(CasJournalSaver(destination)).get_state(config("t")).values
    assert copied == graph.get_state(config("t")).values
    assert fsck(destination.store).ok


def _materialize(found: CheckpointTuple) -> Any:
    return found.checkpoint["channel_values"], found.pending_writes


def test_gc_keeps_every_checkpoint_readable(tmp_path) -> None:
    journal = cj.Journal.open(tmp_path / "store")
    saver = CasJournalSaver(journal)
    graph = build(saver)
    for text in user_texts(4):
        graph.invoke(say(text), config("t"))
    saver.copy_thread("t", "u")
    graph.invoke(say("u only"), config("u"))
    before = {t.checkpoint["id"]: _materialize(t) for t in saver.list(None)}
    gc(journal.store, prune_now=True)
    fresh = CasJournalSaver(journal)
    after = {t.checkpoint["id"]: _materialize(t) for t in fresh.list(None)}
    assert after == before
    assert fsck(journal.store).ok
    assert isinstance(graph.get_state(config("u")).values["messages"][0], HumanMessage)
