"""A system that stores nothing: its peak RSS is the cost of the workload itself."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..workloads import CheckpointStep, Msg
from .base import BATCH, CHECKPOINTS, JOURNAL, IdMaker, System


class NullSystem(System):
    """Accepts every operation and keeps only entry ids in memory."""

    name = "baseline"
    label = "no storage (workload generation only)"
    durable = False
    features = frozenset({JOURNAL, BATCH, CHECKPOINTS})

    def open(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        self.ids = IdMaker("null")
        self.threads: dict[str, int] = {}

    def create_thread(self, thread_id: str, created_at: float, title: str = "") -> None:
        self.threads[thread_id] = 0

    def append(self, thread_id: str, msg: Msg) -> str:
        return self.ids()

    def append_batch(self, thread_id: str, msgs: Sequence[Msg]) -> list[str]:
        return [self.ids() for _ in msgs]

    def fork(
        self, source: str, prefix_ids: list[str], thread_id: str, created_at: float
    ) -> list[str]:
        self.threads[thread_id] = 0
        return list(prefix_ids)

    def read_path(self, thread_id: str) -> int:
        return 0

    def list_page(self, limit: int = 50) -> list[str]:
        return sorted(self.threads)[:limit]

    def save_checkpoint(
        self, run_id: str, step: CheckpointStep, messages: list[dict[str, Any]], system_prompt: str
    ) -> None:
        return None

    def load_checkpoint(self, run_id: str) -> int:
        return 0
