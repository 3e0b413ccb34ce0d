"""LangGraph checkpointers on one conversation: SqliteSaver, SqliteSaver with DeltaChannel,
and cas-journal's CasJournalSaver, in the same run.

    python -m bench.langgraph_bench [--turns 250] [--long-turns 2000] [--data-dir DIR]
                                    [--json FILE] [--publish]

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
same reducer, so checkpoints store writes and a snapshot every 100 updates. The cold
get_tuple is timed in a new process (imports and opening the store not counted; the median
of three such processes): it reads the finished thread's newest checkpoint. (A
DeltaChannel get_tuple returns the checkpoint without the channel's value: LangGraph then
asks ``get_delta_channel_history`` for the writes to replay, which a turn's time includes.)

A second run drives ``--long-turns`` turns on SqliteSaver with DeltaChannel and the durable
CasJournalSaver and compares the put and get_tuple medians of the 20 turns around turn
100 with those of the last 20 turns: a saver whose costs grow with the thread's history
shows it there. ``--publish`` writes the tables into bench/RESULTS.md (section
``langgraph``).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sqlite3
import statistics
import subprocess
import sys
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
from .sections import publish

LONG_SYSTEMS = ("sqlite-delta", "cas")
"""The savers of the long run (SqliteSaver without DeltaChannel stores the whole history at
every checkpoint: 2,000 turns would take tens of GB)."""
WINDOW = 20
"""Turns per window of the long run (around turn 100, and the last)."""
COLD_PROBES = 3


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
    marks: list[tuple[int, int]] | None = None,
) -> tuple[Timed, list[float]]:
    """Drive the chatbot for every turn; returns the timers and each invoke's seconds.
    ``marks`` gets, per turn, how many puts and get_tuples were timed before it."""
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
        if marks is not None:
            marks.append((len(timed.puts), len(timed.gets)))
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


def cold_get(kind: str, path: Path) -> float:
    """Seconds of the first get_tuple of the bench thread in a new process (the median of
    ``COLD_PROBES`` processes); the store stays open here."""
    seconds = []
    for _ in range(COLD_PROBES):
        done = subprocess.run(
            [sys.executable, "-m", "bench.langgraph_bench", "--cold-probe", kind, str(path)],
            capture_output=True,
            text=True,
            check=True,
            cwd=Path(__file__).resolve().parent.parent,
        )
        seconds.append(float(done.stdout.strip().splitlines()[-1]))
    return statistics.median(seconds)


def cold_probe(kind: str, path: Path) -> None:
    """(In the new process.) Open the store, then time one get_tuple; print the seconds."""
    config: RunnableConfig = {"configurable": {"thread_id": "bench"}}
    if kind == "sqlite":
        conn = sqlite3.connect(path, check_same_thread=False)
        saver: BaseCheckpointSaver[Any] = SqliteSaver(conn)
        started = time.perf_counter()
        found = saver.get_tuple(config)
        seconds = time.perf_counter() - started
        conn.close()
    else:
        with cj.Journal.open(path) as journal:
            saver = CasJournalSaver(journal)
            started = time.perf_counter()
            found = saver.get_tuple(config)
            seconds = time.perf_counter() - started
    if found is None:
        raise RuntimeError(f"{kind}: no checkpoint in {path}")
    print(seconds)


def sqlite_system(root: Path, delta: bool) -> Generator[dict[str, Any], None, None]:
    path = root / "checkpoints.sqlite"
    conn = sqlite3.connect(path, check_same_thread=False)
    saver = SqliteSaver(conn)
    yield {"saver": saver, "state": DeltaState if delta else ListState}
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    before = du(root)
    cold = cold_get("sqlite", path)
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
        "cold_get": cold,
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
    cold = cold_get("cas", root / "store")
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
        "cold_get": cold,
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
    marks: list[tuple[int, int]] = []
    timed, turns = run_graph(setup["saver"], setup["state"], users, answers, marks)
    after = next(steps)
    steps.close()
    return {
        "windows": windows(timed, turns, marks),
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


def windows(timed: Timed, turns: list[float], marks: list[tuple[int, int]]) -> dict[str, Any]:
    """Put, get_tuple and turn medians of the ``WINDOW`` turns around turn 100 and of the
    last ``WINDOW`` turns (when the run has both)."""
    count = len(turns)
    if count < 100 + WINDOW:
        return {}
    found: dict[str, Any] = {}
    for name, first in (("early", 100 - WINDOW // 2), ("late", count - WINDOW)):
        last = first + WINDOW
        puts_from, gets_from = marks[first]
        puts_to, gets_to = marks[last] if last < count else (len(timed.puts), len(timed.gets))
        found[name] = {
            "turns": [first + 1, last],
            "put": statistics.median(timed.puts[puts_from:puts_to]),
            "get": statistics.median(timed.gets[gets_from:gets_to]),
            "turn": statistics.median(turns[first:last]),
        }
    return found


def human_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.2f} {unit}"
        n /= 1024
    return f"{n:.2f} GiB"


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.2f} ms" if seconds >= 0.001 else f"{seconds * 1e6:.0f} µs"


def report(
    results: list[dict[str, Any]],
    long: list[dict[str, Any]],
    turns: int,
    long_turns: int,
    machine: dict[str, Any],
) -> str:
    """The results as markdown: the table, the goals of the saver's speed issue, the long
    run (ratios: cas-journal ÷ peer)."""
    load = ", ".join(f"{x:.1f}" for x in machine["loadavg_start"])
    end = ", ".join(f"{x:.1f}" for x in machine.get("loadavg_end", ()))
    lines = [
        f"`python -m bench.langgraph_bench --turns {turns} --long-turns {long_turns}`, one run: "
        f"{turns} turns, ~0.5 KB user + ~2 KB assistant text each; machine: {machine['cpu']}, "
        f"{machine['cores']} cores, {machine['bench_fs']}; one-minute load average "
        f"{load} at the start, {end} at the end.",
        "",
        "| saver | checkpoints | bytes after compaction | cas ÷ this | put median | put p90 |"
        " get_tuple median | get_tuple p90 | turn median | cold get_tuple | copy_thread |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    by_name = {r["system"]: r for r in results}
    cas = by_name.get("cas")
    for r in results:
        ratio = f"{cas['bytes_after'] / r['bytes_after']:.4f}" if cas else "-"
        lines.append(
            f"| {r['label']} | {r['checkpoints']} | {human_bytes(r['bytes_after'])} | {ratio} | "
            f"{ms(r['put_median'])} | {ms(r['put_p90'])} | {ms(r['get_median'])} | "
            f"{ms(r['get_p90'])} | {ms(r['turn_median'])} | {ms(r['cold_get'])} | "
            f"{ms(r['copy_median'])} |"
        )
    lines.append("")
    lines.append(
        "copy_thread: CasJournalSaver.copy_thread (a ref copy per namespace); SqliteSaver has "
        "none, so the SQL `INSERT ... SELECT` of the thread's rows is timed instead."
    )
    if cas and cas.get("reserve_bytes"):
        lines.append(
            f"Not counted above: the local store's reserve file "
            f"({human_bytes(cas['reserve_bytes'])}, space set aside so that gc can run on a "
            "full disk; no data)."
        )
    long_by = {r["system"]: r for r in long}
    delta = by_name.get("sqlite-delta")
    goals = []
    if cas and delta:
        goals += [
            ("put median ≤ DeltaChannel's", cas["put_median"], delta["put_median"], 1.0),
            (
                "get_tuple median ≤ 2 x DeltaChannel's",
                cas["get_median"],
                delta["get_median"],
                2.0,
            ),
            ("turn median ≤ DeltaChannel's", cas["turn_median"], delta["turn_median"], 1.0),
            ("cold get_tuple ≤ 20 ms", cas["cold_get"], 0.020, 1.0),
            ("bytes ≤ 0.1 x DeltaChannel's", cas["bytes_after"], delta["bytes_after"], 0.1),
        ]
    long_cas = long_by.get("cas", {}).get("windows", {})
    if long_cas:
        early, late = long_cas["early"], long_cas["late"]
        goals += [
            (f"put at turn {long_turns} ≤ 1.5 x turn 100", late["put"], early["put"], 1.5),
            (f"get_tuple at turn {long_turns} ≤ 1.5 x turn 100", late["get"], early["get"], 1.5),
        ]
    if goals:
        lines += [
            "",
            "CasJournalSaver (durable) against the goals:",
            "",
            "| goal | measured | limit | ratio to the reference | met |",
            "|---|---|---|---|---|",
        ]
        for goal, value, reference, factor in goals:
            limit = reference * factor
            shown = human_bytes if "bytes" in goal else ms
            lines.append(
                f"| {goal} | {shown(value)} | {shown(limit)} | {value / reference:.3f} | "
                f"{'yes' if value <= limit else 'no'} |"
            )
    if long:
        lines += [
            "",
            f"{long_turns} turns (medians of turns {long[0]['windows']['early']['turns'][0]}-"
            f"{long[0]['windows']['early']['turns'][1]} and of the last {WINDOW}):",
            "",
            "| saver | put, turn ~100 | put, last turns | ratio | get_tuple, turn ~100 |"
            " get_tuple, last turns | ratio | turn, turn ~100 | turn, last turns |"
            " bytes after compaction |",
            "|---|---|---|---|---|---|---|---|---|---|",
        ]
        for r in long:
            early, late = r["windows"]["early"], r["windows"]["late"]
            lines.append(
                f"| {r['label']} | {ms(early['put'])} | {ms(late['put'])} | "
                f"{late['put'] / early['put']:.2f} | {ms(early['get'])} | {ms(late['get'])} | "
                f"{late['get'] / early['get']:.2f} | {ms(early['turn'])} | {ms(late['turn'])} | "
                f"{human_bytes(r['bytes_after'])} |"
            )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=250)
    parser.add_argument("--long-turns", type=int, default=2000, help="0: no long run")
    parser.add_argument("--data-dir", type=Path, default=None)
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--systems", default=",".join(SYSTEMS))
    parser.add_argument("--publish", action="store_true", help="write into bench/RESULTS.md")
    parser.add_argument("--cold-probe", nargs=2, metavar=("KIND", "PATH"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.cold_probe:
        cold_probe(args.cold_probe[0], Path(args.cold_probe[1]))
        return
    users, answers = conversation(args.turns)
    work = Path(tempfile.mkdtemp(prefix="lg-bench-", dir=args.data_dir or Path.cwd()))
    machine = machine_info(work)
    print(f"load average at the start: {machine['loadavg_start']}", flush=True)
    try:
        results = []
        for name in args.systems.split(","):
            print(f"{name} ...", flush=True)
            results.append(measure(name, work / name, users, answers))
        long = []
        if args.long_turns:
            long_users, long_answers = conversation(args.long_turns)
            for name in LONG_SYSTEMS:
                print(f"{name}, {args.long_turns} turns ...", flush=True)
                long.append(measure(name, work / f"long-{name}", long_users, long_answers))
        machine["loadavg_end"] = os.getloadavg()
        text = report(results, long, args.turns, args.long_turns, machine)
        print(text)
        if args.publish:
            publish("langgraph", "## LangGraph savers\n\n" + text)
        if args.json:
            payload = {"machine": machine, "turns": args.turns, "results": results, "long": long}
            args.json.write_text(json.dumps(payload, indent=2))
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
