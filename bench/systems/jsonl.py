"""JSONL peer: one append-only JSON-lines file per thread, as many coding agents store it.

Each line is ``{"uuid", "parentUuid", "sessionId", "type", "timestamp", "message"}``; the
first line is a session header with the title. A fork copies the source file's header and
every line up to the fork point into a new file (the lines are copied verbatim). Listing
sorts files by modification time (what such tools do) and reads the header of each file
on the page. Checkpoints: one JSON line per saved iteration holding the full message list.
``jsonl`` does not fsync (like appendFileSync); ``jsonl-fsync`` fsyncs every append.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..workloads import CheckpointStep, Msg
from .base import BATCH, CHECKPOINTS, JOURNAL, IdMaker, System, iso, message_dict


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class JsonlSystem(System):
    """One JSONL file per thread; fork = copy the prefix lines."""

    name = "jsonl"
    label = "JSONL file per thread (no fsync)"
    durable = False
    features = frozenset({JOURNAL, BATCH, CHECKPOINTS})
    compaction = "none (no maintenance step)"

    def open(self) -> None:
        self.threads = self.root / "threads"
        self.runs = self.root / "runs"
        self.threads.mkdir(parents=True, exist_ok=True)
        self.runs.mkdir(parents=True, exist_ok=True)
        self.ids = IdMaker(f"{self.name}:{self.root}")
        self.leaf: dict[str, str | None] = {}

    def _file(self, thread_id: str) -> Path:
        return self.threads / f"{thread_id}.jsonl"

    def _write(self, path: Path, data: bytes, mode: str = "ab") -> None:
        new = not path.exists()
        with open(path, mode) as f:
            f.write(data)
            if self.durable:
                f.flush()
                os.fsync(f.fileno())
        if self.durable and new:
            _fsync_dir(path.parent)

    def create_thread(self, thread_id: str, created_at: float, title: str = "") -> None:
        header = {
            "type": "session",
            "sessionId": thread_id,
            "title": title,
            "timestamp": iso(created_at),
        }
        self._write(self._file(thread_id), (json.dumps(header) + "\n").encode(), "xb")
        self.leaf[thread_id] = None

    def _leaf(self, thread_id: str) -> str | None:
        if thread_id not in self.leaf:
            last = None
            with open(self._file(thread_id), "rb") as f:
                for line in f:
                    last = json.loads(line).get("uuid", last)
            self.leaf[thread_id] = last
        return self.leaf[thread_id]

    def _line(self, thread_id: str, msg: Msg) -> tuple[str, bytes]:
        entry_id = self.ids()
        record = {
            "uuid": entry_id,
            "parentUuid": self._leaf(thread_id),
            "sessionId": thread_id,
            "type": msg.role,
            "timestamp": iso(msg.created_at),
            "turnId": msg.turn_id,
            "message": message_dict(msg),
        }
        self.leaf[thread_id] = entry_id
        return entry_id, (json.dumps(record) + "\n").encode()

    def append(self, thread_id: str, msg: Msg) -> str:
        entry_id, line = self._line(thread_id, msg)
        self._write(self._file(thread_id), line)
        return entry_id

    def append_batch(self, thread_id: str, msgs: Sequence[Msg]) -> list[str]:
        out = [self._line(thread_id, msg) for msg in msgs]
        self._write(self._file(thread_id), b"".join(line for _, line in out))
        return [entry_id for entry_id, _ in out]

    def fork(
        self, source: str, prefix_ids: list[str], thread_id: str, created_at: float
    ) -> list[str]:
        target = prefix_ids[-1]
        header = {
            "type": "session",
            "sessionId": thread_id,
            "title": "",
            "timestamp": iso(created_at),
            "forkedFrom": source,
        }
        chunks = [(json.dumps(header) + "\n").encode()]
        with open(self._file(source), "rb") as f:
            next(f)  # the source's header
            for line in f:
                chunks.append(line)
                if json.loads(line)["uuid"] == target:
                    break
        self._write(self._file(thread_id), b"".join(chunks), "xb")
        self.leaf[thread_id] = target
        return list(prefix_ids)

    def read_path(self, thread_id: str) -> int:
        chars = 0
        with open(self._file(thread_id), "rb") as f:
            for line in f:
                record = json.loads(line)
                if "message" in record:
                    chars += len(record["message"]["content"])
        return chars

    def fetch_path(self, thread_id: str) -> int | None:
        with open(self._file(thread_id), "rb") as f:
            return len([json.loads(line) for line in f])

    def list_page(self, limit: int = 50) -> list[str]:
        stamped = []
        with os.scandir(self.threads) as it:
            for entry in it:
                if entry.name.endswith(".jsonl"):
                    stamped.append((entry.stat().st_mtime_ns, entry.name))
        stamped.sort(key=lambda item: (-item[0], item[1]))
        page = []
        for _, name in stamped[:limit]:
            with open(self.threads / name, "rb") as f:
                header = json.loads(f.readline())
            page.append(header["sessionId"])
        return page

    def save_checkpoint(
        self, run_id: str, step: CheckpointStep, messages: list[dict[str, Any]], system_prompt: str
    ) -> None:
        record = {
            "run_id": run_id,
            "iteration": step.iteration,
            "messages": messages,
            "system_prompt": system_prompt,
            "input_tokens": step.input_tokens,
            "output_tokens": step.output_tokens,
            "created_at": iso(step.created_at),
        }
        self._write(self.runs / f"{run_id}.jsonl", (json.dumps(record) + "\n").encode())

    def load_checkpoint(self, run_id: str) -> int:
        last = b""
        with open(self.runs / f"{run_id}.jsonl", "rb") as f:
            for line in f:
                last = line
        return len(json.loads(last)["messages"])


class JsonlFsyncSystem(JsonlSystem):
    """The same files, fsynced after every write (and the directory after a create)."""

    name = "jsonl-fsync"
    label = "JSONL file per thread (fsync per append)"
    durable = True
