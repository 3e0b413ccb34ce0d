"""CasJournalSaver at length: what a put, a get_tuple and a list cost does not grow with
the thread's history; a new process reads a checkpoint without walking the chain; lists
round-trip whatever happens to them; a reader and a writer in two processes.

Costs are asserted by what the saver does (objects written, objects read, values
serialized and decoded: exact), and by time only generously (medians of 20 turns; the
benchmark, bench/langgraph_bench.py, measures them exactly).
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any, TypedDict

import pytest
from hypothesis import given
from hypothesis import strategies as st
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
from langgraph.channels.delta import DeltaChannel
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from support.langgraph_app import user_texts

import cas_journal as cj
from cas_journal.langgraph import CasJournalSaver
from cas_journal.langgraph.values import LEAF_SIZE
from cas_journal.maintenance import fsck
from cas_journal.objects import Kind

HERE = Path(__file__).parent


def config(thread: str, checkpoint_id: str | None = None) -> Any:
    configurable = {"thread_id": thread, "checkpoint_ns": ""}
    if checkpoint_id is not None:
        configurable["checkpoint_id"] = checkpoint_id
    return {"configurable": configurable}


class Counted:
    """Counts what a journal's store is asked: object reads (by kind) and objects written."""

    def __init__(self, journal: cj.Journal) -> None:
        self.reads: Counter[str] = Counter()
        self.written: list[Kind] = []
        objects, store = journal.store.objects, journal.store
        get, get_many, commit = objects.get, objects.get_many, store.commit

        def counted_get(oid: str) -> tuple[Kind, bytes]:
            kind, body = get(oid)
            self.reads[kind.value] += 1
            return kind, body

        def counted_get_many(oids: Any) -> Iterator[tuple[str, Kind, bytes]]:
            for oid, kind, body in get_many(oids):
                self.reads[kind.value] += 1
                yield oid, kind, body

        def counted_commit(new: Any, *args: Any, **kwargs: Any) -> bool:
            self.written += [obj.kind for obj in new]
            return commit(new, *args, **kwargs)

        objects.get = counted_get  # type: ignore[method-assign]
        objects.get_many = counted_get_many  # type: ignore[method-assign]
        store.commit = counted_commit  # type: ignore[method-assign]

    @contextmanager
    def measuring(self) -> Iterator[None]:
        self.reads.clear()
        self.written.clear()
        yield


class CountingSerde(JsonPlusSerializer):
    """The default serializer, counting what it serializes and decodes."""

    def __init__(self) -> None:
        super().__init__()
        self.dumps = 0
        self.loads = 0

    def dumps_typed(self, obj: Any) -> tuple[str, bytes]:
        self.dumps += 1
        return super().dumps_typed(obj)

    def loads_typed(self, data: tuple[str, bytes]) -> Any:
        self.loads += 1
        return super().loads_typed(data)


def _checkpoint(checkpoint_id: int, messages: list[Any], version: int) -> dict[str, Any]:
    return {
        "v": 4,
        "id": f"1f100000-0000-6000-8000-{checkpoint_id:012d}",
        "ts": "2026-11-30T00:00:00+00:00",
        "channel_values": {"messages": messages, "branch:to:chatbot": None},
        "channel_versions": {"messages": version, "branch:to:chatbot": version},
        "versions_seen": {"chatbot": {"branch:to:chatbot": version - 1}},
        "updated_channels": ["messages"],
    }


class Chat:
    """A chatbot's saver calls without LangGraph (as its loop makes them, message objects
    handed on as ``add_messages`` hands them on): per turn a get_tuple, a put of the user's
    message, the model's answer as a write, and a put of the answer."""

    def __init__(self, saver: CasJournalSaver, thread: str = "t") -> None:
        self.saver = saver
        self.thread = thread
        self.parent = config(thread)
        self.messages: list[Any] = []
        self.ids = iter(range(1, 10**9))
        self.version = 0

    def turn(self, n: int, timings: list[tuple[float, float]] | None = None) -> None:
        started = time.perf_counter()
        found = self.saver.get_tuple(config(self.thread))
        got = time.perf_counter() - started
        if found is not None:
            self.messages = found.checkpoint["channel_values"]["messages"]
        question = HumanMessage(content=f"question {n} " + "words " * 80, id=f"h{n}")
        answer = AIMessage(content=f"answer {n} " + "more words " * 150, id=f"a{n}")
        started = time.perf_counter()
        self.version += 1
        self.messages = [*self.messages, question]
        self.parent = self.saver.put(
            self.parent,
            _checkpoint(next(self.ids), self.messages, self.version),
            {"source": "loop", "step": 2 * n},
            {"messages": self.version},
        )
        put = time.perf_counter() - started
        self.saver.put_writes(self.parent, [("messages", [answer])], f"task-{n}")
        self.version += 1
        self.messages = [*self.messages, answer]
        self.parent = self.saver.put(
            self.parent,
            _checkpoint(next(self.ids), self.messages, self.version),
            {"source": "loop", "step": 2 * n + 1},
            {"messages": self.version},
        )
        if timings is not None:
            timings.append((put, got))


def test_a_turn_costs_the_same_at_turn_20_and_turn_300() -> None:
    journal = cj.Journal.memory()
    serde = CountingSerde()
    chat = Chat(CasJournalSaver(journal, serde=serde))
    counted = Counted(journal)
    costs = {}
    for n in range(301):
        if n in (20, 300):
            serde.dumps = serde.loads = 0
            with counted.measuring():
                chat.turn(n)
            costs[n] = (serde.dumps, serde.loads, dict(counted.reads), Counter(counted.written))
        else:
            chat.turn(n)
    # serialized: the two messages (the answer once, as its write) and the small branch
    # value of each put; decoded: that small inline value only; read: nothing (the saver
    # wrote everything it reads)
    assert costs[20][:3] == costs[300][:3] == (4, 1, {})
    written_20, written_300 = costs[20][3], costs[300][3]
    assert written_20[Kind.BLOB] == written_300[Kind.BLOB] == 2  # the two messages
    # three records, and a leaf whenever the list fills one
    assert written_20[Kind.TREE] - (42 // LEAF_SIZE - 40 // LEAF_SIZE) == 3
    assert written_300[Kind.TREE] - (602 // LEAF_SIZE - 600 // LEAF_SIZE) == 3


def test_a_new_process_reads_the_checkpoint_leaves_and_values_once(tmp_path: Path) -> None:
    with cj.Journal.open(tmp_path / "s", durable=False) as journal:
        chat = Chat(CasJournalSaver(journal))
        for n in range(150):
            chat.turn(n)
    with cj.Journal.open(tmp_path / "s") as journal:
        counted = Counted(journal)
        serde = CountingSerde()
        found = CasJournalSaver(journal, serde=serde).get_tuple(config("t"))
    assert found is not None and len(found.checkpoint["channel_values"]["messages"]) == 300
    leaves = 300 // LEAF_SIZE
    # the record, its leaves, each message once; no other record of the chain
    assert dict(counted.reads) == {"tree": 1 + leaves, "blob": 300}
    assert serde.loads == 300 + 1  # each message, and the inline branch value


def test_get_tuple_of_a_checkpoint_seen_before_decodes_nothing() -> None:
    journal = cj.Journal.memory()
    serde = CountingSerde()
    saver = CasJournalSaver(journal, serde=serde)
    chat = Chat(saver)
    for n in range(40):
        chat.turn(n)
    old = [t.config for t in saver.list(config("t"), limit=30)][-1]
    first = saver.get_tuple(old)
    serde.loads = 0
    again = saver.get_tuple(old)
    assert first is not None and again is not None
    assert again.checkpoint["channel_values"] == first.checkpoint["channel_values"]
    assert serde.loads == 1  # the inline branch value; the list is remembered
    # a new list each time, of the same (read-only) message objects
    messages, before = (f.checkpoint["channel_values"]["messages"] for f in (again, first))
    assert messages is not before and all(map(lambda a, b: a is b, messages, before))


def test_list_reads_only_as_far_back_as_it_is_taken(tmp_path: Path) -> None:
    with cj.Journal.open(tmp_path / "s", durable=False) as journal:
        chat = Chat(CasJournalSaver(journal))
        for n in range(200):
            chat.turn(n)
    with cj.Journal.open(tmp_path / "s") as journal:
        counted = Counted(journal)
        history = CasJournalSaver(journal).list(config("t"))
        first = next(history)
        records_for_first = counted.reads["tree"] - 400 // LEAF_SIZE
        assert first.metadata["step"] == 399
        assert records_for_first <= 3  # the head and the record before it, not 400
        counted.reads.clear()
        steps = [next(history).metadata["step"] for _ in range(5)]
        assert steps == [398, 397, 396, 395, 394]
        assert counted.reads["tree"] <= 5 + 2 * (400 // LEAF_SIZE)


@pytest.mark.slow
def test_put_and_get_tuple_at_turn_2000_cost_what_they_cost_at_turn_100() -> None:
    journal = cj.Journal.memory()
    chat = Chat(CasJournalSaver(journal))
    timings: list[tuple[float, float]] = []
    for n in range(2000):
        chat.turn(n, timings)
    early, late = timings[90:110], timings[-20:]
    for part in (0, 1):  # put, get_tuple: generously (the benchmark measures 1.5x)
        at_100 = statistics.median(t[part] for t in early)
        at_2000 = statistics.median(t[part] for t in late)
        assert at_2000 <= 3 * at_100 + 0.0005, (part, at_100, at_2000)
    found = CasJournalSaver(cj.Journal(journal.store)).get_tuple(config("t"))
    assert found is not None and len(found.checkpoint["channel_values"]["messages"]) == 4000


# -- lists, whatever happens to them ---------------------------------------------------------

edits = st.lists(
    st.one_of(
        st.tuples(st.just("append"), st.integers(1, 40)),
        st.tuples(st.just("replace"), st.integers(0, 100)),
        st.tuples(st.just("truncate"), st.integers(0, 100)),
        st.tuples(st.just("same"), st.just(0)),
    ),
    min_size=1,
    max_size=12,
)


@given(edits)
def test_lists_round_trip_through_every_edit(steps: list[tuple[str, int]]) -> None:
    journal = cj.Journal.memory()
    saver = CasJournalSaver(journal)
    parent = config("t")
    items: list[dict[str, Any]] = []
    made = iter(range(10**6))
    written = []
    for version, (edit, n) in enumerate(steps, start=1):
        if edit == "append":
            items = items + [{"n": next(made), "text": "x" * 60} for _ in range(n)]
        elif edit == "replace" and items:
            items = list(items)
            items[n % len(items)] = {"n": next(made), "text": "y" * 60}
        elif edit == "truncate":
            items = items[: n % (len(items) + 1)]
        checkpoint = _checkpoint(version, items, version)
        checkpoint["channel_values"] = {"items": items}
        checkpoint["channel_versions"] = {"items": version}
        parent = saver.put(parent, checkpoint, {"step": version}, {"items": version})
        written.append((parent, [dict(item) for item in items]))
    for reader in (saver, CasJournalSaver(cj.Journal(journal.store))):
        for where, expected in written:
            found = reader.get_tuple(where)
            assert found is not None
            assert found.checkpoint["channel_values"].get("items", []) == expected
    assert fsck(journal.store).ok


# -- DeltaChannel ---------------------------------------------------------------------------


def _fold(state: list[AnyMessage], writes: Any) -> list[AnyMessage]:
    for write in writes:
        state = add_messages(state, write)
    return state


class DeltaState(TypedDict):
    messages: Annotated[list[AnyMessage], DeltaChannel(_fold, snapshot_frequency=4)]


def test_a_delta_channel_snapshot_is_stored_by_its_elements() -> None:
    journal = cj.Journal.memory()
    saver = CasJournalSaver(journal)

    def chatbot(state: dict[str, Any]) -> dict[str, Any]:
        return {"messages": [AIMessage(content="an answer " * 40 + str(len(state["messages"])))]}

    builder = StateGraph(DeltaState)
    builder.add_node("chatbot", chatbot)
    builder.add_edge(START, "chatbot")
    builder.add_edge("chatbot", END)
    graph = builder.compile(checkpointer=saver)
    for text in user_texts(8):
        graph.invoke({"messages": [{"role": "user", "content": text}]}, config("d"))
    snapshots = [
        (oid, value)
        for oid, record in saver.chains.chain(journal.records.head("langgraph/d/"))
        for name, value in record.values.items()
        if name == "messages"
    ]
    assert snapshots and all(v.form == "leaves" and v.wrapper for _, v in snapshots)
    # each message is one blob, shared by the writes and every snapshot holding it
    messages = graph.get_state(config("d")).values["messages"]
    assert len(messages) == 16
    fresh = StateGraph(DeltaState)
    fresh.add_node("chatbot", chatbot)
    fresh.add_edge(START, "chatbot")
    fresh.add_edge("chatbot", END)
    again = fresh.compile(checkpointer=CasJournalSaver(cj.Journal(journal.store)))
    assert again.get_state(config("d")).values["messages"] == messages


# -- processes and threads --------------------------------------------------------------------

WRITER = r"""
import sys
sys.path.insert(0, sys.argv[1])
from support.langgraph_app import build, user_texts
import cas_journal as cj
from cas_journal.langgraph import CasJournalSaver
with cj.Journal.open(sys.argv[2]) as journal:
    graph = build(CasJournalSaver(journal))
    for text in user_texts(int(sys.argv[3])):
        graph.invoke({"messages": [{"role": "user", "content": text}]},
                     {"configurable": {"thread_id": "chat"}})
"""


@pytest.mark.slow
def test_one_process_reads_while_another_writes(tmp_path: Path) -> None:
    store = tmp_path / "store"
    turns = 25
    cj.Journal.open(store).close()
    writer = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(HERE), str(store), str(turns)],
        stderr=subprocess.PIPE,
        text=True,
    )
    texts = user_texts(turns)
    seen: list[int] = []
    with cj.Journal.open(store) as journal:
        saver = CasJournalSaver(journal)
        while writer.poll() is None or not seen or seen[-1] < 2 * turns:
            found = saver.get_tuple(config("chat"))
            if found is not None:
                messages = found.checkpoint["channel_values"].get("messages", [])
                asked = [m.content for m in messages if m.type == "human"]
                assert asked == texts[: len(asked)]  # always a whole, consistent checkpoint
                seen.append(len(messages))
                history = [t.metadata["step"] for t in saver.list(config("chat"), limit=3)]
                assert history == sorted(history, reverse=True)
            if writer.poll() is not None and writer.returncode != 0:
                break
        _, errors = writer.communicate(timeout=300)
        assert writer.returncode == 0, errors[-3000:]
        assert seen == sorted(seen) and seen[-1] == 2 * turns
        assert len(set(seen)) > 2  # it read while the conversation grew
        assert fsck(journal.store).ok


def test_threads_that_end_leave_no_connection_open(tmp_path: Path) -> None:
    with cj.Journal.open(tmp_path / "s") as journal:
        saver = CasJournalSaver(journal)
        calls: list[Callable[[], Any]] = [
            lambda n=n: saver.put(config(f"t{n}"), _checkpoint(n + 1, [], 1), {}, {})
            for n in range(40)
        ]
        for call in calls:  # each in a new thread, as LangGraph's executors run them
            worker = threading.Thread(target=call)
            worker.start()
            worker.join()
        assert len(journal.store.db._connections) <= 3  # type: ignore[attr-defined]
        assert len(list(saver.list(None))) == 40
