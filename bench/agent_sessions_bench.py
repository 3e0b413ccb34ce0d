"""Agent SDK sessions on cas-journal: the bytes of a session and 10 forks, beside the SDKs'
own stores, all measured in the same run.

Claude Agent SDK (``[claude-agent-sdk]``): one Claude Code-shaped transcript (user
prompts, assistant text with tool_use blocks, tool_result lines with the tool's output,
uuid/parentUuid chain) mirrored in batches of 10 lines, then forked 10 times at random
uuids, each fork continued by 20 lines. Peers:

- ``InMemorySessionStore`` + ``fork_session_via_store`` (the SDK's fork: every line
  copied with fresh uuids), counted as the JSONL files the CLI writes, raw and zstd -3;
- ``CasJournalSessionStore`` on a local store, forks by ``store.fork`` (shared lines);
- ``CasJournalSessionStore`` with the SDK's ``fork_session_via_store`` (copies).

OpenAI Agents SDK (``[openai-agents]``): one session of items, 10 forks, each continued
by 20 items. Peer: ``SQLiteSession`` in a file, where a fork is a new session the items
are copied into (the SDK has no fork).

Store bytes are the files on disk (after closing, and after ``pack``). Figures depend on
the machine and its load: the header says which; ratios are cas-journal / peer.

    python -m bench.agent_sessions_bench [--lines 400] [--forks 10]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import random
import shutil
import tempfile
import time
import uuid
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import zstandard

import cas_journal as cj
from bench.workloads import Conversation, FilePool
from cas_journal.maintenance import pack

if TYPE_CHECKING:  # the SDKs are optional extras, imported where a scenario runs
    from agents import TResponseInputItem
    from claude_agent_sdk import SessionKey

CONTINUATION = 20
BATCH = 10


def _uuid(rng: random.Random) -> str:
    return str(uuid.UUID(int=rng.getrandbits(128), version=4))


def claude_lines(count: int, session_id: str, seed: int = 7) -> list[dict[str, Any]]:
    """Claude Code transcript lines built from the bench's deterministic conversation."""
    rng = random.Random(seed)
    conversation = Conversation(seed, FilePool(seed), 1_767_225_600.0, "claude")
    common = {
        "cwd": "/home/ada/src/app",
        "gitBranch": "main",
        "isSidechain": False,
        "sessionId": session_id,
        "userType": "external",
        "version": "2.0.14",
    }
    lines: list[dict[str, Any]] = []
    parent = None
    for message in conversation.stream():
        if len(lines) >= count:
            break
        line_id = _uuid(rng)
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime(message.created_at))
        line: dict[str, Any] = {
            **common,
            "parentUuid": parent,
            "timestamp": stamp,
            "uuid": line_id,
        }
        if message.role == "user":
            line.update(type="user", message={"role": "user", "content": message.content})
        elif message.role == "tool":
            block = {
                "type": "tool_result",
                "tool_use_id": message.tool_call_id,
                "content": message.content,
            }
            line.update(
                type="user",
                message={"role": "user", "content": [block]},
                toolUseResult={"stdout": message.content, "stderr": "", "interrupted": False},
            )
        else:
            content: list[dict[str, Any]] = [{"type": "text", "text": message.content}]
            if message.tool_name:
                content.append(
                    {
                        "type": "tool_use",
                        "id": message.tool_call_id,
                        "name": message.tool_name,
                        "input": json.loads(message.tool_args),
                    }
                )
            line.update(
                type="assistant",
                requestId=f"req_{line_id[:12]}",
                message={
                    "id": f"msg_{line_id[:20]}",
                    "type": "message",
                    "role": "assistant",
                    "model": "claude-sonnet-4-5",
                    "content": content,
                    "stop_reason": "tool_use" if message.tool_name else "end_turn",
                    "usage": {"input_tokens": 1200 + len(lines), "output_tokens": 300},
                },
            )
        lines.append(line)
        parent = line_id
    return lines


def continuation(after: dict[str, Any], session_id: str, seed: int) -> list[dict[str, Any]]:
    """Lines that continue a transcript after ``after`` (a fork's divergent turns)."""
    lines = claude_lines(CONTINUATION, session_id, seed)
    lines[0]["parentUuid"] = after["uuid"]
    return lines


def jsonl_bytes(lines: Iterable[Mapping[str, Any]]) -> tuple[int, int]:
    """Bytes of a transcript as the CLI's JSONL file, raw and zstd -3."""
    data = "".join(
        json.dumps(line, separators=(",", ":"), ensure_ascii=False) + "\n" for line in lines
    ).encode()
    return len(data), len(zstandard.ZstdCompressor(level=3).compress(data))


def dir_bytes(path: Path) -> int:
    """Bytes of every file under a directory."""
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def batches(lines: list[dict[str, Any]]) -> Iterator[list[dict[str, Any]]]:
    for start in range(0, len(lines), BATCH):
        yield lines[start : start + BATCH]


async def claude_peers(work: Path, count: int, forks: int) -> list[tuple[str, int, float, float]]:
    """Rows (system, bytes, seconds appending, seconds forking) for the Claude scenario."""
    from claude_agent_sdk import (
        InMemorySessionStore,
        fork_session_via_store,
        project_key_for_directory,
    )

    from cas_journal.integrations.claude_agent_sdk import CasJournalSessionStore

    source_id = str(uuid.UUID(int=1, version=4))
    # the SDK's fork derives the project key from the current directory
    key: SessionKey = {"project_key": project_key_for_directory(None), "session_id": source_id}
    lines = claude_lines(count, source_id)
    rng = random.Random(3)
    cuts = sorted(rng.randrange(count * 3 // 10, count) for _ in range(forks))
    rows = []

    async def run(store: Any, native: bool) -> tuple[float, float]:
        start = time.perf_counter()
        for batch in batches(lines):
            await store.append(key, batch)
        appended = time.perf_counter() - start
        fork_seconds = 0.0
        for n, cut in enumerate(cuts):
            start = time.perf_counter()
            if native:
                new_id = await store.fork(key, up_to_uuid=lines[cut]["uuid"])
            else:
                result = await fork_session_via_store(
                    store, source_id, up_to_message_id=lines[cut]["uuid"]
                )
                new_id = result.session_id
            fork_seconds += time.perf_counter() - start
            new_key = {"project_key": key["project_key"], "session_id": new_id}
            loaded = await store.load(new_key)
            for batch in batches(continuation(loaded[-1], new_id, 100 + n)):
                await store.append(new_key, batch)
        return appended, fork_seconds

    memory = InMemorySessionStore()
    appended, forked = await run(memory, native=False)
    sessions = await memory.list_sessions(key["project_key"])
    raw = packed = 0
    for session in sessions:
        sizes = jsonl_bytes(memory.get_entries({**key, "session_id": session["session_id"]}))
        raw, packed = raw + sizes[0], packed + sizes[1]
    rows.append(("InMemorySessionStore + SDK fork, JSONL files", raw, appended, forked))
    rows.append(("InMemorySessionStore + SDK fork, JSONL files zstd -3", packed, appended, forked))

    for label, native in (("store.fork (shared)", True), ("SDK fork (copies)", False)):
        path = work / f"claude-{native}"
        journal = cj.Journal.open(path)
        appended, forked = await run(CasJournalSessionStore(journal), native)
        journal.close()
        rows.append((f"cas-journal, {label}", dir_bytes(path), appended, forked))
        with cj.Journal.open(path) as journal:
            pack(journal.store)
        rows.append((f"cas-journal, {label}, after pack", dir_bytes(path), appended, forked))
    return rows


def openai_items(count: int, seed: int = 9) -> list[TResponseInputItem]:
    """Responses items built from the bench's conversation (messages, calls, outputs)."""
    items: list[TResponseInputItem] = []
    conversation = Conversation(seed, FilePool(seed), 1_767_225_600.0, "openai")
    for message in conversation.stream():
        if len(items) >= count:
            break
        if message.role == "user":
            items.append({"role": "user", "content": message.content})
        elif message.role == "tool":
            items.append(
                {
                    "type": "function_call_output",
                    "call_id": message.tool_call_id,
                    "output": message.content,
                }
            )
        else:
            items.append(
                {
                    "type": "message",
                    "id": f"msg_{len(items)}",
                    "role": "assistant",
                    "status": "completed",
                    "content": [
                        {"type": "output_text", "text": message.content, "annotations": []}
                    ],
                }
            )
            if message.tool_name:
                items.append(
                    {
                        "type": "function_call",
                        "call_id": message.tool_call_id,
                        "name": message.tool_name,
                        "arguments": message.tool_args,
                        "id": f"fc_{len(items)}",
                        "status": "completed",
                    }
                )
    return items


async def openai_peers(work: Path, count: int, forks: int) -> list[tuple[str, int, float, float]]:
    """Rows for the OpenAI Agents scenario."""
    from agents import SQLiteSession

    from cas_journal.integrations.openai_agents import CasJournalSession

    items = openai_items(count)
    rng = random.Random(5)
    cuts = sorted(rng.randrange(count * 3 // 10, count) for _ in range(forks))
    more = openai_items(CONTINUATION, seed=99)
    rows = []

    sqlite_path = work / "sessions.db"
    session = SQLiteSession("main", sqlite_path)
    start = time.perf_counter()
    for step in range(0, len(items), BATCH):
        await session.add_items(items[step : step + BATCH])
    appended = time.perf_counter() - start
    forked = 0.0
    for n, cut in enumerate(cuts):
        start = time.perf_counter()
        copy = SQLiteSession(f"fork-{n}", sqlite_path)
        await copy.add_items(await session.get_items(limit=cut + 1) if cut else [])
        forked += time.perf_counter() - start
        await copy.add_items(more)
        copy.close()
    session.close()
    rows.append(("SQLiteSession, forks copied", dir_bytes(work), appended, forked))

    path = work / "openai-store"
    journal = cj.Journal.open(path)
    ours = CasJournalSession("main", journal)
    start = time.perf_counter()
    for step in range(0, len(items), BATCH):
        await ours.add_items(items[step : step + BATCH])
    appended = time.perf_counter() - start
    forked = 0.0
    for n, cut in enumerate(cuts):
        start = time.perf_counter()
        branch = await ours.fork(f"fork-{n}", at=cut)
        forked += time.perf_counter() - start
        await branch.add_items(more)
    journal.close()
    rows.append(("cas-journal CasJournalSession, fork", dir_bytes(path), appended, forked))
    with cj.Journal.open(path) as journal:
        pack(journal.store)
    rows.append(
        ("cas-journal CasJournalSession, fork, after pack", dir_bytes(path), appended, forked)
    )
    return rows


def table(title: str, rows: list[tuple[str, int, float, float]], peer: int, forks: int) -> None:
    print(f"\n### {title}\n")
    print(f"| system | bytes | / peer | append s | {forks} forks s |")
    print("|---|---:|---:|---:|---:|")
    for label, size, appended, forked in rows:
        print(
            f"| {label} | {size:,} | {size / rows[peer][1]:.3f} | {appended:.3f} | {forked:.3f} |"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=400, help="lines (items) of the source")
    parser.add_argument("--forks", type=int, default=10)
    args = parser.parse_args()
    load = os.getloadavg()
    print(
        f"machine: {platform.node()} ({os.cpu_count()} CPUs, load {load[0]:.1f} {load[1]:.1f}),"
        f" Python {platform.python_version()}; source {args.lines} lines, {args.forks} forks"
        f" each continued by {CONTINUATION}"
    )
    work = Path(tempfile.mkdtemp(prefix="agent-sessions-bench-", dir="."))
    try:
        (work / "openai").mkdir()
        claude = asyncio.run(claude_peers(work, args.lines, args.forks))
        table(
            "Claude Agent SDK SessionStore (peer: the SDK's JSONL, zstd -3)", claude, 1, args.forks
        )
        openai = asyncio.run(openai_peers(work / "openai", args.lines, args.forks))
        table("OpenAI Agents SDK Session (peer: SQLiteSession)", openai, 0, args.forks)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
