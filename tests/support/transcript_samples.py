"""Realistic Claude Code, Codex and pi session files, generated deterministically.

The records follow the shapes each agent writes (field names, key order, nesting,
compact JSON), including the parts an importer must not lose: branches (rewinds,
``/tree`` navigation), compactions, subagent files, resumed and forked sessions that
copy their source's records, records of unknown types and unknown fields. Used by the
transcript tests and by ``bench/transcripts_bench.py``.
"""

from __future__ import annotations

import json
import random
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

WORDS = [
    "parser",
    "token",
    "stream",
    "buffer",
    "cache",
    "index",
    "journal",
    "thread",
    "entry",
    "branch",
    "fork",
    "compaction",
    "summary",
    "test",
    "failure",
    "fix",
    "refactor",
    "module",
    "import",
    "function",
    "class",
    "return",
    "value",
    "error",
    "handler",
    "retry",
    "timeout",
    "config",
    "path",
    "file",
    "line",
    "column",
    "offset",
    "width",
    "height",
    "render",
]
FILES = [f"src/pkg/{name}.py" for name in ("parser", "lexer", "cache", "cli", "store", "util")]


def dump(record: dict[str, Any]) -> str:
    """One line as the agents write it (JSON.stringify: compact, keys in order)."""
    return json.dumps(record, ensure_ascii=False, separators=(",", ":"))


def write_jsonl(path: Path, records: list[dict[str, Any]]) -> Path:
    """Write records as a JSONL file (creating directories)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(dump(r) + "\n" for r in records), encoding="utf-8")
    return path


@dataclass
class Clock:
    """Millisecond timestamps moving forward."""

    now: datetime = field(default_factory=lambda: datetime(2025, 10, 14, 9, 0, tzinfo=UTC))

    def tick(self, rng: random.Random, low: float = 0.2, high: float = 20.0) -> str:
        self.now += timedelta(seconds=rng.uniform(low, high))
        return self.iso()

    def iso(self) -> str:
        return self.now.strftime("%Y-%m-%dT%H:%M:%S.") + f"{self.now.microsecond // 1000:03d}Z"


def sentence(rng: random.Random, n: int = 12) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n)).capitalize() + "."


def file_body(name: str, lines: int = 60) -> str:
    """The same file reads the same way every time (tool results repeat across sessions)."""
    local = random.Random(name)
    return "\n".join(
        f"{i:4d}\tdef {local.choice(WORDS)}_{i}(self, {local.choice(WORDS)}): return {i}"
        for i in range(1, lines + 1)
    )


def uid(rng: random.Random) -> str:
    return str(uuid.UUID(int=rng.getrandbits(128), version=4))


# -- Claude Code ------------------------------------------------------------------------------


class ClaudeSession:
    """Builds one Claude Code session file, record by record."""

    def __init__(self, rng: random.Random, session_id: str, cwd: str, clock: Clock) -> None:
        self.rng, self.session_id, self.cwd, self.clock = rng, session_id, cwd, clock
        self.records: list[dict[str, Any]] = []
        self.leaf: str | None = None

    def _base(self, parent: str | None, sidechain: bool = False) -> dict[str, Any]:
        return {
            "parentUuid": parent,
            "isSidechain": sidechain,
            "userType": "external",
            "cwd": self.cwd,
            "sessionId": self.session_id,
            "version": "2.0.14",
            "gitBranch": "main",
        }

    def _add(self, record: dict[str, Any]) -> str:
        self.records.append(record)
        self.leaf = record["uuid"]
        return self.leaf

    def user(self, text: str, parent: str | None = "leaf") -> str:
        parent = self.leaf if parent == "leaf" else parent
        self.records.append(
            {
                "type": "file-history-snapshot",
                "messageId": uid(self.rng),
                "snapshot": {
                    "messageId": uid(self.rng),
                    "trackedFileBackups": {},
                    "timestamp": self.clock.iso(),
                },
                "isSnapshotUpdate": False,
            }
        )
        return self._add(
            {
                **self._base(parent),
                "type": "user",
                "message": {"role": "user", "content": text},
                "uuid": uid(self.rng),
                "timestamp": self.clock.tick(self.rng),
                "thinkingMetadata": {"level": "high", "disabled": False, "triggers": []},
            }
        )

    def _assistant(self, content: list[dict[str, Any]]) -> str:
        return self._add(
            {
                **self._base(self.leaf),
                "message": {
                    "id": "msg_01" + uid(self.rng).replace("-", "")[:22],
                    "type": "message",
                    "role": "assistant",
                    "model": "claude-sonnet-4-5-20250929",
                    "content": content,
                    "stop_reason": None,
                    "stop_sequence": None,
                    "usage": {
                        "input_tokens": self.rng.randint(3, 9),
                        "cache_creation_input_tokens": self.rng.randint(0, 3000),
                        "cache_read_input_tokens": self.rng.randint(10000, 90000),
                        "cache_creation": {
                            "ephemeral_5m_input_tokens": 0,
                            "ephemeral_1h_input_tokens": 0,
                        },
                        "output_tokens": self.rng.randint(20, 900),
                        "service_tier": "standard",
                    },
                },
                "requestId": "req_011" + uid(self.rng).replace("-", "")[:21],
                "type": "assistant",
                "uuid": uid(self.rng),
                "timestamp": self.clock.tick(self.rng, 1, 8),
            }
        )

    def think(self) -> str:
        return self._assistant(
            [{"type": "thinking", "thinking": sentence(self.rng, 30), "signature": "Eq" + "A" * 40}]
        )

    def say(self, text: str) -> str:
        return self._assistant([{"type": "text", "text": text}])

    def read_file(self, path: str) -> str:
        call = "toolu_01" + uid(self.rng).replace("-", "")[:24]
        self._assistant(
            [
                {
                    "type": "tool_use",
                    "id": call,
                    "name": "Read",
                    "input": {"file_path": f"{self.cwd}/{path}"},
                }
            ]
        )
        body = file_body(path)
        return self._add(
            {
                **self._base(self.leaf),
                "type": "user",
                "message": {
                    "role": "user",
                    "content": [{"tool_use_id": call, "type": "tool_result", "content": body}],
                },
                "uuid": uid(self.rng),
                "timestamp": self.clock.tick(self.rng, 0.1, 1),
                "toolUseResult": {
                    "type": "text",
                    "file": {
                        "filePath": f"{self.cwd}/{path}",
                        "content": body,
                        "numLines": body.count("\n") + 1,
                        "startLine": 1,
                        "totalLines": body.count("\n") + 1,
                    },
                },
            }
        )

    def turn(self, reads: int = 2) -> None:
        self.user(sentence(self.rng))
        self.think()
        for _ in range(reads):
            self.read_file(self.rng.choice(FILES))
        self.say(sentence(self.rng, 40))

    def compact(self, trigger: str = "auto") -> None:
        boundary = uid(self.rng)
        self.records.append(
            {
                **self._base(None),
                "logicalParentUuid": self.leaf,
                "type": "system",
                "subtype": "compact_boundary",
                "content": "Conversation compacted",
                "isMeta": False,
                "timestamp": self.clock.tick(self.rng),
                "uuid": boundary,
                "level": "info",
                "compactMetadata": {
                    "trigger": trigger,
                    "preTokens": self.rng.randint(90000, 160000),
                },
            }
        )
        self.leaf = boundary
        self._add(
            {
                **self._base(boundary),
                "type": "user",
                "message": {
                    "role": "user",
                    "content": "This session is being continued from a previous conversation "
                    "that ran out of context. Summary: " + sentence(self.rng, 60),
                },
                "isVisibleInTranscriptOnly": True,
                "isCompactSummary": True,
                "uuid": uid(self.rng),
                "timestamp": self.clock.tick(self.rng, 0.01, 0.1),
            }
        )

    def summary(self, text: str) -> None:
        self.records.append({"type": "summary", "summary": text, "leafUuid": self.leaf})

    def future_record(self) -> None:
        """A record type and a field no importer knows yet."""
        self.records.append(
            {
                "type": "x-telemetry",
                "sessionId": self.session_id,
                "spans": [1, 2.5, None],
                "ok": True,
            }
        )
        self.records[-2]["futureField"] = {"nested": ["kept", 1e-7, "🙂"]}


def claude_project(root: Path, rng: random.Random, sessions: int = 3, turns: int = 4) -> list[Path]:
    """A Claude Code project directory: sessions with a rewind branch, a compaction, a
    subagent file, unknown records, and a resumed session that copies its source."""
    project = root / "-home-dev-src-app"
    clock = Clock()
    paths: list[Path] = []
    previous: ClaudeSession | None = None
    for number in range(sessions):
        sid = uid(rng)
        session = ClaudeSession(rng, sid, "/home/dev/src/app", clock)
        if previous is not None and number % 2 == 1:
            # `claude --resume`: the new file repeats the old records under the new id
            for record in previous.records:
                copied = dict(record)
                if "sessionId" in copied:
                    copied["sessionId"] = sid
                session.records.append(copied)
            session.leaf = previous.leaf
        for turn in range(turns):
            session.turn(reads=1 + turn % 3)
            if turn == 1:
                rewind_to = session.records[-1]["uuid"]
                session.turn()
                session.leaf = rewind_to  # edit the prompt: a new branch from here
        session.summary("Fix the " + rng.choice(WORDS) + " " + rng.choice(WORDS))
        session.compact()
        session.turn()
        session.future_record()
        paths.append(write_jsonl(project / f"{sid}.jsonl", session.records))
        if number == 0:
            agent = ClaudeSession(rng, sid, "/home/dev/src/app", clock)
            agent_id = uid(rng).split("-")[0]
            agent.user("Search the code base for " + rng.choice(WORDS))
            agent.read_file(FILES[0])
            agent.say(sentence(rng))
            for record in agent.records:
                if "uuid" in record:
                    record["isSidechain"] = True
                    record["agentId"] = agent_id
            paths.append(
                write_jsonl(project / sid / "subagents" / f"agent-{agent_id}.jsonl", agent.records)
            )
        previous = session
    return paths


# -- Codex ----------------------------------------------------------------------------------


class CodexRollout:
    """Builds one Codex rollout file."""

    def __init__(
        self, rng: random.Random, session_id: str, clock: Clock, forked_from: str | None = None
    ) -> None:
        self.rng, self.clock = rng, clock
        self.records: list[dict[str, Any]] = []
        payload: dict[str, Any] = {"id": session_id}
        if forked_from:
            payload["forked_from_id"] = forked_from
        payload.update(
            timestamp=clock.iso(),
            cwd="/home/dev/src/app",
            originator="codex_cli_rs",
            cli_version="0.58.0",
            instructions=None,
            source="cli",
            model_provider="openai",
            git={
                "commit_hash": "9f2c1e0",
                "branch": "main",
                "repository_url": "git@example.com:app.git",
            },
        )
        self.add("session_meta", payload)

    def add(self, kind: str, payload: dict[str, Any]) -> None:
        self.records.append(
            {"timestamp": self.clock.tick(self.rng, 0.01, 3), "type": kind, "payload": payload}
        )

    def message(self, role: str, text: str) -> None:
        block = "output_text" if role == "assistant" else "input_text"
        self.add(
            "response_item",
            {"type": "message", "role": role, "content": [{"type": block, "text": text}]},
        )

    def turn(self) -> None:
        prompt = sentence(self.rng)
        self.message("user", prompt)
        self.add("event_msg", {"type": "user_message", "message": prompt, "images": []})
        self.add(
            "turn_context",
            {
                "cwd": "/home/dev/src/app",
                "approval_policy": "on-request",
                "sandbox_policy": {"mode": "workspace-write", "network_access": False},
                "model": "gpt-5-codex",
                "effort": "medium",
                "summary": "auto",
            },
        )
        self.add(
            "response_item",
            {
                "type": "reasoning",
                "summary": [{"type": "summary_text", "text": "**" + sentence(self.rng, 5) + "**"}],
                "content": None,
                "encrypted_content": "gAAAAAB" + uid(self.rng).replace("-", "") * 4,
            },
        )
        path = self.rng.choice(FILES)
        call = "call_" + uid(self.rng).replace("-", "")[:24]
        self.add(
            "response_item",
            {
                "type": "function_call",
                "name": "shell",
                "arguments": json.dumps(
                    {"command": ["bash", "-lc", f"cat {path}"], "workdir": "/home/dev/src/app"}
                ),
                "call_id": call,
            },
        )
        output = {"output": file_body(path), "metadata": {"exit_code": 0, "duration_seconds": 0.1}}
        self.add(
            "response_item",
            {"type": "function_call_output", "call_id": call, "output": json.dumps(output)},
        )
        answer = sentence(self.rng, 30)
        self.message("assistant", answer)
        self.add("event_msg", {"type": "agent_message", "message": answer})
        self.add(
            "event_msg",
            {
                "type": "token_count",
                "info": {
                    "total_token_usage": {
                        "input_tokens": self.rng.randint(1000, 90000),
                        "output_tokens": 300,
                    }
                },
                "rate_limits": None,
            },
        )

    def compact(self) -> None:
        summary = "Summary of the work so far: " + sentence(self.rng, 50)
        self.add(
            "compacted",
            {
                "message": summary,
                "replacement_history": [
                    {
                        "type": "message",
                        "role": "user",
                        "content": [{"type": "input_text", "text": summary}],
                    }
                ],
            },
        )
        self.add("event_msg", {"type": "context_compacted"})

    def fork_from(self, source: CodexRollout, records: int) -> None:
        """Copy the first records of the source (as `codex fork` does: new timestamps)."""
        for record in source.records[:records]:
            self.records.append({**record, "timestamp": self.clock.tick(self.rng, 0, 0.002)})


def codex_sessions(root: Path, rng: random.Random, sessions: int = 3, turns: int = 3) -> list[Path]:
    """Rollouts under YYYY/MM/DD: a compaction, forks copying a source's history, an
    unknown record type and an unknown payload field."""
    clock = Clock()
    paths: list[Path] = []
    rollouts: list[CodexRollout] = []
    for number in range(sessions):
        sid = uid(rng)
        source = rollouts[-1] if rollouts and number % 2 == 1 else None
        rollout = CodexRollout(
            rng, sid, clock, forked_from=source.records[0]["payload"]["id"] if source else None
        )
        if source is not None:
            cut = max(2, len(source.records) // 2)
            rollout.fork_from(source, cut)
        for turn in range(turns):
            rollout.turn()
            if turn == 1:
                rollout.compact()
        rollout.add("x_future_item", {"type": "mystery", "value": [1, 2, 3]})
        rollout.records[-2]["payload"]["future_field"] = {"kept": True}
        name = f"rollout-{clock.now:%Y-%m-%dT%H-%M-%S}-{sid}.jsonl"
        paths.append(write_jsonl(root / f"{clock.now:%Y/%m/%d}" / name, rollout.records))
        rollouts.append(rollout)
    return paths


# -- pi ------------------------------------------------------------------------------------


class PiSession:
    """Builds one pi session file (version 3)."""

    def __init__(
        self, rng: random.Random, session_id: str, clock: Clock, parent: str | None = None
    ):
        self.rng, self.clock = rng, clock
        header: dict[str, Any] = {
            "type": "session",
            "version": 3,
            "id": session_id,
            "timestamp": clock.iso(),
            "cwd": "/home/dev/src/app",
        }
        if parent:
            header["parentSession"] = parent
        self.records: list[dict[str, Any]] = [header]
        self.leaf: str | None = None
        self.by_id: dict[str, dict[str, Any]] = {}

    def add(self, kind: str, **fields: Any) -> str:
        entry_id = f"{self.rng.getrandbits(32):08x}"
        record = {
            "type": kind,
            "id": entry_id,
            "parentId": self.leaf,
            "timestamp": self.clock.tick(self.rng),
            **fields,
        }
        self.records.append(record)
        self.by_id[entry_id] = record
        self.leaf = entry_id
        return entry_id

    def _ms(self) -> int:
        return int(self.clock.now.timestamp() * 1000)

    def turn(self) -> None:
        self.add(
            "message",
            message={
                "role": "user",
                "content": [{"type": "text", "text": sentence(self.rng)}],
                "timestamp": self._ms(),
            },
        )
        call = "toolu_" + uid(self.rng).replace("-", "")[:20]
        path = self.rng.choice(FILES)
        usage = {
            "input": self.rng.randint(100, 5000),
            "output": self.rng.randint(10, 900),
            "cacheRead": 0,
            "cacheWrite": 0,
            "totalTokens": 0,
            "cost": {
                "input": 0.001,
                "output": 0.002,
                "cacheRead": 0,
                "cacheWrite": 0,
                "total": 0.003,
            },
        }
        self.add(
            "message",
            message={
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": sentence(self.rng, 20)},
                    {"type": "text", "text": "Reading the file."},
                    {"type": "toolCall", "id": call, "name": "read", "arguments": {"path": path}},
                ],
                "api": "anthropic-messages",
                "provider": "anthropic",
                "model": "claude-sonnet-4-5",
                "usage": usage,
                "stopReason": "toolUse",
                "timestamp": self._ms(),
            },
        )
        self.add(
            "message",
            message={
                "role": "toolResult",
                "toolCallId": call,
                "toolName": "read",
                "content": [{"type": "text", "text": file_body(path)}],
                "isError": False,
                "timestamp": self._ms(),
            },
        )
        self.add(
            "message",
            message={
                "role": "assistant",
                "content": [{"type": "text", "text": sentence(self.rng, 30)}],
                "api": "anthropic-messages",
                "provider": "anthropic",
                "model": "claude-sonnet-4-5",
                "usage": usage,
                "stopReason": "stop",
                "timestamp": self._ms(),
            },
        )


def pi_sessions(root: Path, rng: random.Random, sessions: int = 3, turns: int = 3) -> list[Path]:
    """pi sessions: a /tree branch with a branch summary, a compaction with
    firstKeptEntryId, labels, a session name, model changes, and /fork copies."""
    clock = Clock()
    folder = root / "--home-dev-src-app--"
    paths: list[Path] = []
    previous: tuple[PiSession, Path] | None = None
    for number in range(sessions):
        sid = uid(rng)
        name = f"{clock.now:%Y-%m-%dT%H-%M-%S-000Z}_{sid}.jsonl"
        path = folder / name
        if previous is not None and number % 2 == 1:
            source, source_path = previous
            session = PiSession(rng, sid, clock, parent=str(source_path))
            # /fork: the path from the root to a chosen entry, copied with its ids
            chain: list[dict[str, Any]] = []
            current = source.leaf
            while current is not None:
                chain.append(source.by_id[current])
                current = source.by_id[current]["parentId"]
            cut = chain[len(chain) // 2 :]
            for record in reversed(cut):
                session.records.append(dict(record))
                session.by_id[record["id"]] = record
            session.leaf = cut[0]["id"]
        else:
            session = PiSession(rng, sid, clock)
            session.add("model_change", provider="anthropic", modelId="claude-sonnet-4-5")
            session.add("thinking_level_change", thinkingLevel="medium")
        for turn in range(turns):
            session.turn()
            if turn == 0:
                branch_point = session.leaf
                session.add("label", targetId=branch_point, label="before-experiment")
                session.turn()
                abandoned = session.leaf
                session.leaf = branch_point  # /tree back, with a summary of the branch left
                session.add("branch_summary", fromId=abandoned, summary="Tried: " + sentence(rng))
            if turn == 1:
                kept = session.leaf
                session.turn()
                session.add(
                    "compaction",
                    summary="## Goal\n" + sentence(rng, 40),
                    firstKeptEntryId=kept,
                    tokensBefore=rng.randint(50000, 150000),
                    details={"readFiles": FILES[:3], "modifiedFiles": FILES[3:4]},
                )
        session.add("session_info", name="Refactor " + rng.choice(WORDS))
        session.add("x-future-entry", payload={"unknown": [True, None]})
        paths.append(write_jsonl(path, session.records))
        previous = (session, path)
    return paths


GENERATORS = {"claude-code": claude_project, "codex": codex_sessions, "pi": pi_sessions}
"""Format name -> generator(root, rng, sessions, turns) writing files under root."""
