"""LangGraph checkpointers on one conversation: SqliteSaver, SqliteSaver with DeltaChannel,
and cas-journal's CasJournalSaver, in the same run.

    python -m bench.langgraph_bench [--turns 250] [--data-dir DIR] [--json FILE]

The graph is the usual chatbot: a ``StateGraph`` whose ``messages`` channel uses
``add_messages``, one node calling LangChain's fake chat model (no network), invoked once
per turn with ~0.5 KB of user text; the model answers with ~2 KB (the same seeded text for
every saver). ``durability="sync"``: each invoke returns after its checkpoints are saved.
Every ``put`` and every ``get_tuple`` LangGraph makes is timed inside the saver. Stored
bytes are measured after each store's own compaction: ``VACUUM`` for SQLite, ``pack`` +
``gc(prune_now=True)`` for cas-journal (a local store's fixed reserve file, space set aside
for gc on a full disk, is reported apart). ``copy_thread`` copies the finished thread
(SqliteSaver has none: the equivalent ``INSERT ... SELECT`` of its rows is timed instead).
The DeltaChannel row declares ``messages`` as LangGraph's (beta) ``DeltaChannel`` with the
same reducer, so checkpoints store writes and a snapshot every 100 updates.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sqlite3
import statistics
import tempfile
import time
from collections.abc import Callable, Generator, Sequence
from datetime import timedelta
from pathlib import Path
from typing import Annotated, Any, TypedDict

from langchain_core.language_models.fake_chat_models import FakeListChatModel
from langchain_core.messages import AnyMessage
from langchain_core.runnables import RunnableConfig
from langgraph.channels.delta import DeltaChannel
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import Messages, add_messages

import cas_journal as cj
from cas_journal.langgraph import CasJournalSaver
from cas_journal.maintenance import gc, pack

from . import textgen as tg
from .measure import machine_info


def fold_messages(state: Messages, writes: Sequence[Any]) -> Messages:
    """add_messages over a batch of writes (DeltaChannel's reducer signature)."""
    for write in writes:
        state = add_messages(state, write)
    return state


class ListState(TypedDict):
    """messages as a plain reducer channel: the whole list in every checkpoint."""

    messages: Annotated[list[AnyMessage], add_messages]


class DeltaState(TypedDict):
    """messages as LangGraph's beta DeltaChannel."""

    messages: Annotated[list[AnyMessage], DeltaChannel(fold_messages)]


def conversation(turns: int, seed: int = 7) -> tuple[list[str], list[str]]:
    """The user texts (~0.5 KB) and the model's answers (~2 KB), seeded."""
    rng = random.Random(seed)
    users = [tg.prose(rng, 500) for _ in range(turns)]
    answers = [tg.prose(rng, 2000) for _ in range(turns)]
    return users, answers


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


RESERVE_FILE = "reserve"
"""A local store's space set aside for gc on a full disk (no data; same size at any load)."""


def du(path: Path) -> int:
    """Bytes of every file under ``path``, except a local store's reserve file."""
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file() and f.name != RESERVE_FILE)


def reserve_bytes(path: Path) -> int:
    """Bytes of the reserve files under ``path`` (reported apart)."""
    return sum(f.stat().st_size for f in path.rglob(RESERVE_FILE) if f.is_file())


class Timed:
    """Wraps a saver's put and get_tuple with timers (LangGraph calls them itself)."""

    def __init__(self, saver: BaseCheckpointSaver[Any]) -> None:
        self.puts: list[float] = []
        self.gets: list[float] = []
        put, get_tuple = saver.put, saver.get_tuple

        def timed_put(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return put(*args, **kwargs)
            finally:
                self.puts.append(time.perf_counter() - started)

        def timed_get(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return get_tuple(*args, **kwargs)
            finally:
                self.gets.append(time.perf_counter() - started)

        saver.put = timed_put  # type: ignore[method-assign]
        saver.get_tuple = timed_get  # type: ignore[method-assign]


def run_graph(
    saver: BaseCheckpointSaver[Any],
    schema: type[ListState | DeltaState],
    users: list[str],
    answers: list[str],
) -> tuple[Timed, list[float]]:
    """Drive the chatbot for every turn; returns the timers and each invoke's seconds."""
    timed = Timed(saver)
    model = FakeListChatModel(responses=answers)

    # a union, not a class: LangGraph infers no input schema from it (nor from a dict)
    def chatbot(state: ListState | DeltaState) -> dict[str, Any]:
        return {"messages": [model.invoke(state["messages"])]}

    # Any: the input below is message dicts, which LangGraph coerces into the schema's
    # messages (the schemas declare the coerced type)
    builder: StateGraph[Any] = StateGraph(schema)
    builder.add_node("chatbot", chatbot)
    builder.add_edge(START, "chatbot")
    builder.add_edge("chatbot", END)
    graph = builder.compile(checkpointer=saver)
    config: RunnableConfig = {"configurable": {"thread_id": "bench"}}
    turns = []
    for text in users:
        started = time.perf_counter()
        graph.invoke({"messages": [{"role": "user", "content": text}]}, config, durability="sync")
        turns.append(time.perf_counter() - started)
    final = graph.get_state(config).values["messages"]
    if len(final) != 2 * len(users) or final[-1].content != answers[-1]:
        raise RuntimeError(f"{type(saver).__name__}: the conversation did not come back whole")
    return timed, turns


def timed_once(action: Callable[[], Any], repeat: int = 20) -> list[float]:
    seconds = []
    for _ in range(repeat):
        started = time.perf_counter()
        action()
        seconds.append(time.perf_counter() - started)
    return seconds


def sqlite_system(root: Path, delta: bool) -> Generator[dict[str, Any], None, None]:
    path = root / "checkpoints.sqlite"
    conn = sqlite3.connect(path, check_same_thread=False)
    saver = SqliteSaver(conn)
    yield {"saver": saver, "state": DeltaState if delta else ListState}
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    before = du(root)
    copies = iter(range(10**6))

    def sql_copy() -> None:
        target = f"copy-{next(copies)}"
        with conn:
            conn.execute(
                "INSERT INTO checkpoints SELECT ?, checkpoint_ns, checkpoint_id, "
                "parent_checkpoint_id, type, checkpoint, metadata FROM checkpoints "
                "WHERE thread_id = 'bench'",
                (target,),
            )
            conn.execute(
                "INSERT INTO writes SELECT ?, checkpoint_ns, checkpoint_id, task_id, idx, "
                "channel, type, value, task_path FROM writes WHERE thread_id = 'bench'",
                (target,),
            )

    copy_seconds = timed_once(sql_copy, repeat=3)
    conn.execute("DELETE FROM checkpoints WHERE thread_id != 'bench'")
    conn.execute("DELETE FROM writes WHERE thread_id != 'bench'")
    conn.commit()
    conn.execute("VACUUM")
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    rows = conn.execute("SELECT count(*) FROM checkpoints").fetchone()[0]
    yield {
        "bytes_before": before,
        "bytes_after": du(root),
        "copy": copy_seconds,
        "copy_how": "SQL INSERT ... SELECT of the thread's rows (SqliteSaver has no copy_thread)",
        "checkpoints": rows,
    }
    conn.close()


def cas_system(root: Path, durable: bool) -> Generator[dict[str, Any], None, None]:
    journal = cj.Journal.open(root / "store", durable=durable)
    saver = CasJournalSaver(journal)
    yield {"saver": saver, "state": ListState}
    before = du(root)
    config: RunnableConfig = {"configurable": {"thread_id": "bench"}}
    copies = iter(range(10**6))
    copy_seconds = timed_once(lambda: saver.copy_thread("bench", f"copy-{next(copies)}"))
    copied = saver.get_tuple({"configurable": {"thread_id": "copy-0"}})
    original = saver.get_tuple(config)
    assert copied is not None and original is not None
    assert copied.checkpoint["id"] == original.checkpoint["id"]
    for n in range(len(copy_seconds)):
        saver.delete_thread(f"copy-{n}")
    with cj.Journal.open(root / "store", durable=durable) as reopened:
        cold = CasJournalSaver(reopened)
        started = time.perf_counter()
        cold.get_tuple(config)
        cold_get = time.perf_counter() - started
    pack(journal.store)
    gc(journal.store, prune_now=True, reflog_expiry=timedelta(0))
    checkpoints = sum(1 for _ in saver.list(config))
    journal.close()  # at rest: no connection keeps the write-ahead log or shared memory
    yield {
        "bytes_before": before,
        "bytes_after": du(root),
        "copy": copy_seconds,
        "copy_how": "CasJournalSaver.copy_thread (a ref copy per namespace)",
        "checkpoints": checkpoints,
        "cold_get": cold_get,
        "reserve_bytes": reserve_bytes(root),
    }


SYSTEMS: dict[str, tuple[str, Callable[[Path], Generator[dict[str, Any], None, None]]]] = {
    "sqlite": ("SqliteSaver (messages: add_messages)", lambda r: sqlite_system(r, False)),
    "sqlite-delta": (
        "SqliteSaver, messages as DeltaChannel (beta)",
        lambda r: sqlite_system(r, True),
    ),
    "cas": ("CasJournalSaver, local store (durable)", lambda r: cas_system(r, True)),
    "cas-nd": ("CasJournalSaver, local store (durable=False)", lambda r: cas_system(r, False)),
}


def measure(name: str, root: Path, users: list[str], answers: list[str]) -> dict[str, Any]:
    label, factory = SYSTEMS[name]
    root.mkdir(parents=True)
    steps = factory(root)
    setup = next(steps)
    timed, turns = run_graph(setup["saver"], setup["state"], users, answers)
    after = next(steps)
    steps.close()
    return {
        "system": name,
        "label": label,
        "put_median": statistics.median(timed.puts),
        "put_p90": percentile(timed.puts, 0.9),
        "get_median": statistics.median(timed.gets),
        "get_p90": percentile(timed.gets, 0.9),
        "turn_median": statistics.median(turns),
        "puts": len(timed.puts),
        **{k: v for k, v in after.items() if k != "copy"},
        "copy_median": statistics.median(after["copy"]),
    }


def human_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.2f} {unit}"
        n /= 1024
    return f"{n:.2f} GiB"


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.2f} ms" if seconds >= 0.001 else f"{seconds * 1e6:.0f} µs"


def report(results: list[dict[str, Any]], turns: int, machine: dict[str, Any]) -> str:
    """The results as a markdown table (ratios: cas-journal ÷ peer)."""
    cas = next(r for r in results if r["system"] == "cas")
    lines = [
        f"{turns} turns, ~0.5 KB user + ~2 KB assistant text each; machine: {machine['cpu']}, "
        f"{machine['cores']} cores, {machine['bench_fs']}, load {machine['loadavg_start']}",
        "",
        "| saver | checkpoints | bytes (before) | bytes after compaction | cas ÷ this |"
        " put median | put p90 | get_tuple median | get_tuple p90 | turn median |"
        " copy_thread | copy how |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        ratio = cas["bytes_after"] / r["bytes_after"]
        lines.append(
            f"| {r['label']} | {r['checkpoints']} | {human_bytes(r['bytes_before'])} | "
            f"{human_bytes(r['bytes_after'])} | {ratio:.4f} (1/{1 / ratio:.0f}) | "
            f"{ms(r['put_median'])} | {ms(r['put_p90'])} | {ms(r['get_median'])} | "
            f"{ms(r['get_p90'])} | {ms(r['turn_median'])} | {ms(r['copy_median'])} | "
            f"{r['copy_how']} |"
        )
    lines.append("")
    lines.append(
        f"cas-journal cold get_tuple (new saver, first read of the {turns}-turn thread): "
        f"{ms(cas['cold_get'])}"
    )
    if cas.get("reserve_bytes"):
        reserve = human_bytes(cas["reserve_bytes"])
        lines.append(
            f"Not counted above: the local store's reserve file ({reserve}, space set aside"
            " so that gc can run on a full disk; no data)."
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=250)
    parser.add_argument("--data-dir", type=Path, default=None)
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--systems", default=",".join(SYSTEMS))
    args = parser.parse_args()
    users, answers = conversation(args.turns)
    work = Path(tempfile.mkdtemp(prefix="lg-bench-", dir=args.data_dir or Path.cwd()))
    machine = machine_info(work)
    try:
        results = []
        for name in args.systems.split(","):
            print(f"{name} ...", flush=True)
            results.append(measure(name, work / name, users, answers))
        machine["loadavg_end"] = os.getloadavg()
        text = report(results, args.turns, machine)
        print(text)
        if args.json:
            args.json.write_text(
                json.dumps({"machine": machine, "turns": args.turns, "results": results}, indent=2)
            )
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
