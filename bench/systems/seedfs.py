"""The seed's file layout (Go sessiontree FileRepo / session.Store), re-created in Python.

``threads/<id>/thread.json`` holds the ThreadMeta (rewritten, temp file + rename, on every
append because leaf_id and updated_at change) and ``threads/<id>/entries.jsonl`` holds one
seed ``Entry`` JSON per line, with ``raw`` (the canonical payload JSON) and ``raw_hash``
filled in as the seed's PrepareEntry does. A fork reads the source path and writes it
again under new entry ids. Listing reads every thread.json and sorts by created_at.
Checkpoints follow session.Store: one JSON file per run, overwritten every iteration (so
no history is kept). No fsync.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..workloads import CheckpointStep, Msg
from .base import BATCH, CHECKPOINTS, JOURNAL, IdMaker, System, entry_type, iso, message_dict


def _dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


class SeedFsSystem(System):
    """Directory per thread: entries.jsonl + thread.json; fork rewrites the path."""

    name = "seedfs"
    label = "seed layout: dir per thread, entries.jsonl + thread.json (no fsync)"
    durable = False
    features = frozenset({JOURNAL, BATCH, CHECKPOINTS})
    compaction = "none (no maintenance step)"

    def open(self) -> None:
        self.threads = self.root / "threads"
        self.checkpoints = self.root / "checkpoints"
        self.threads.mkdir(parents=True, exist_ok=True)
        self.checkpoints.mkdir(parents=True, exist_ok=True)
        self.ids = IdMaker(f"{self.name}:{self.root}")
        self.metas: dict[str, dict[str, Any]] = {}

    def _dir(self, thread_id: str) -> Path:
        return self.threads / thread_id

    def _replace(self, path: Path, data: bytes) -> None:
        tmp = path.with_name(f".{path.name}.tmp")
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, path)

    def _meta(self, thread_id: str) -> dict[str, Any]:
        if thread_id not in self.metas:
            self.metas[thread_id] = json.loads((self._dir(thread_id) / "thread.json").read_bytes())
        return self.metas[thread_id]

    def _save_meta(self, meta: dict[str, Any]) -> None:
        self.metas[meta["id"]] = meta
        self._replace(self._dir(meta["id"]) / "thread.json", _dumps(meta).encode())

    def create_thread(self, thread_id: str, created_at: float, title: str = "") -> None:
        self._dir(thread_id).mkdir()
        stamp = iso(created_at)
        meta = {"id": thread_id, "created_at": stamp, "updated_at": stamp}
        if title:
            meta["title"] = title
        self._save_meta(meta)
        (self._dir(thread_id) / "entries.jsonl").touch()

    def _entry(self, thread_id: str, parent: str | None, msg: Msg) -> dict[str, Any]:
        message = message_dict(msg)
        raw = _dumps(message)
        entry: dict[str, Any] = {"id": self.ids(), "thread_id": thread_id}
        if parent:
            entry["parent_id"] = parent
        entry.update(
            {
                "type": entry_type(msg),
                "turn_id": msg.turn_id,
                "created_at": iso(msg.created_at),
                "message": message,
                "raw": raw,
                "raw_hash": hashlib.sha256(raw.encode()).hexdigest(),
            }
        )
        return entry

    def append_batch(self, thread_id: str, msgs: Sequence[Msg]) -> list[str]:
        meta = dict(self._meta(thread_id))
        lines, ids = [], []
        for msg in msgs:
            entry = self._entry(thread_id, meta.get("leaf_id"), msg)
            meta["leaf_id"] = entry["id"]
            meta["updated_at"] = entry["created_at"]
            ids.append(entry["id"])
            lines.append(_dumps(entry) + "\n")
        with open(self._dir(thread_id) / "entries.jsonl", "a", encoding="utf-8") as f:
            f.write("".join(lines))
        self._save_meta(meta)
        return ids

    def append(self, thread_id: str, msg: Msg) -> str:
        return self.append_batch(thread_id, [msg])[0]

    def _path(self, thread_id: str, leaf: str | None) -> list[dict[str, Any]]:
        by_id = {}
        with open(self._dir(thread_id) / "entries.jsonl", "rb") as f:
            for line in f:
                entry = json.loads(line)
                by_id[entry["id"]] = entry
        path = []
        while leaf:
            entry = by_id[leaf]
            path.append(entry)
            leaf = entry.get("parent_id")
        path.reverse()
        return path

    def fork(
        self, source: str, prefix_ids: list[str], thread_id: str, created_at: float
    ) -> list[str]:
        path = self._path(source, prefix_ids[-1])
        self._dir(thread_id).mkdir()
        new_ids: list[str] = []
        lines = []
        for entry in path:
            copy = dict(entry, id=self.ids(), thread_id=thread_id)
            if new_ids:
                copy["parent_id"] = new_ids[-1]
            new_ids.append(copy["id"])
            lines.append(_dumps(copy) + "\n")
        with open(self._dir(thread_id) / "entries.jsonl", "w", encoding="utf-8") as f:
            f.write("".join(lines))
        stamp = iso(created_at)
        self._save_meta(
            {
                "id": thread_id,
                "leaf_id": new_ids[-1],
                "parent_thread_id": source,
                "forked_from_thread_id": source,
                "forked_from_entry_id": prefix_ids[-1],
                "created_at": stamp,
                "updated_at": stamp,
            }
        )
        return new_ids

    def read_path(self, thread_id: str) -> int:
        meta = json.loads((self._dir(thread_id) / "thread.json").read_bytes())
        return sum(len(e["message"]["content"]) for e in self._path(thread_id, meta.get("leaf_id")))

    def list_page(self, limit: int = 50) -> list[str]:
        metas = []
        with os.scandir(self.threads) as it:
            for entry in it:
                with open(os.path.join(entry.path, "thread.json"), "rb") as f:
                    metas.append(json.loads(f.read()))
        metas.sort(key=lambda m: m["id"])
        metas.sort(key=lambda m: m["created_at"], reverse=True)
        return [m["id"] for m in metas[:limit]]

    def save_checkpoint(
        self, run_id: str, step: CheckpointStep, messages: list[dict[str, Any]], system_prompt: str
    ) -> None:
        record = {
            "run_id": run_id,
            "task_name": "bench",
            "iteration": step.iteration,
            "messages": messages,
            "system_prompt": system_prompt,
            "input_tokens": step.input_tokens,
            "output_tokens": step.output_tokens,
            "created_at": iso(step.created_at),
        }
        self._replace(self.checkpoints / f"{run_id}.json", json.dumps(record).encode())

    def load_checkpoint(self, run_id: str) -> int:
        return len(json.loads((self.checkpoints / f"{run_id}.json").read_bytes())["messages"])
