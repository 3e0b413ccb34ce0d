"""cas-journal adapter, written against the Python API contract in DESIGN.md.

``cas`` is the local store with ``durable=True`` (the default: fsync before the ref that
makes data reachable); ``cas-nd`` is ``durable=False``. Batched appends use
``Journal.batch`` (one ref update, one sync). The maintenance step is
``maintenance.pack`` followed by ``maintenance.gc(prune_now=True)``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import cas_journal as cj

# ``import cas_journal`` defers the journal and its pydantic models, the local backend
# (with sqlite3), the pack reader (imported when a store first has a pack) and orjson to
# first use (the command line starts faster); import them here, so that a "cold"
# measurement, which starts its clock after the imports (as the peers' own imports of
# sqlite3 or json are), does not time them (nor, without bytecode files, compile them).
from cas_journal.backends import local as _local_backend  # noqa: F401
from cas_journal.backends.local import packs as _local_packs  # noqa: F401
from cas_journal.journal import journal as _journal_models  # noqa: F401
from cas_journal.objects.canonical import parse_json as _parse_json

from ..workloads import CheckpointStep, Msg
from .base import BATCH, CHECKPOINTS, JOURNAL, System, entry_type, utc

_parse_json(b"{}")  # imports orjson when it is installed


class CasSystem(System):
    """cas-journal on a local directory."""

    name = "cas"
    label = "cas-journal local store, durable=True"
    durable = True
    features = frozenset({JOURNAL, BATCH, CHECKPOINTS})
    compaction = "maintenance.pack + maintenance.gc(prune_now=True)"

    def open(self) -> None:
        self.j = cj.Journal.open(str(self.root), durable=self.durable)

    def close(self) -> None:
        self.j.close()

    @staticmethod
    def _entry(thread_id: str, msg: Msg) -> cj.Entry:
        message = cj.Message(
            role=msg.role,
            content=msg.content,
            tool_name=msg.tool_name,
            tool_call_id=msg.tool_call_id,
            tool_args=msg.tool_args,
        )
        return cj.Entry(
            thread_id=thread_id,
            type=cj.EntryType(entry_type(msg)),
            turn_id=msg.turn_id,
            message=message,
            created_at=utc(msg.created_at),
        )

    def create_thread(self, thread_id: str, created_at: float, title: str = "") -> None:
        stamp = utc(created_at)
        self.j.create_thread(
            cj.ThreadMeta(id=thread_id, title=title, created_at=stamp, updated_at=stamp)
        )

    def append(self, thread_id: str, msg: Msg) -> str:
        return self.j.append(self._entry(thread_id, msg), now=utc(msg.created_at)).id

    def append_batch(self, thread_id: str, msgs: Sequence[Msg]) -> list[str]:
        with self.j.batch(thread_id) as b:
            return [b.append(self._entry(thread_id, msg)).id for msg in msgs]

    def fork(
        self, source: str, prefix_ids: list[str], thread_id: str, created_at: float
    ) -> list[str]:
        self.j.fork(source, entry_id=prefix_ids[-1], new_thread_id=thread_id, now=utc(created_at))
        return list(prefix_ids)

    def read_path(self, thread_id: str) -> int:
        return sum(len(e.message.content) for e in self.j.path(thread_id) if e.message)

    def fetch_path(self, thread_id: str) -> int | None:
        return len(self.j.path(thread_id))

    def list_page(self, limit: int = 50) -> list[str]:
        return [meta.id for meta in self.j.list_threads(limit=limit)]

    def open_thread(self, thread_id: str) -> int:
        self.j.thread(thread_id)
        return self.read_path(thread_id)

    def save_checkpoint(
        self, run_id: str, step: CheckpointStep, messages: list[dict[str, Any]], system_prompt: str
    ) -> None:
        self.j.checkpoints.save(
            cj.Checkpoint(
                run_id=run_id,
                task_name="bench",
                iteration=step.iteration,
                messages=messages,
                system_prompt=system_prompt,
                input_tokens=step.input_tokens,
                output_tokens=step.output_tokens,
                created_at=utc(step.created_at),
            )
        )

    def load_checkpoint(self, run_id: str) -> int:
        return len(self.j.checkpoints.load(run_id).messages)

    def compact(self) -> None:
        from cas_journal import maintenance

        maintenance.pack(self.j.store)
        maintenance.gc(self.j.store, prune_now=True)


class CasNonDurableSystem(CasSystem):
    """cas-journal with durable=False (no fsync)."""

    name = "cas-nd"
    label = "cas-journal local store, durable=False"
    durable = False
