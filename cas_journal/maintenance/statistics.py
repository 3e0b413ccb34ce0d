"""stats: what the store holds, and what it saves against keeping copies.

Logical bytes are what a store without sharing would hold: every thread's entry
payloads (each thread counted in full, the way a JSONL file per thread would hold them)
plus every saved checkpoint's full message list and system prompt (the way a
checkpointer that saves whole states would). Stored bytes are what is on disk.
"""

from __future__ import annotations

from collections import Counter

from ..backends import Store
from ..errors import JournalError
from ..journal.state import CHECKPOINT_PREFIX, THREAD_PREFIX
from ..objects import (
    CheckpointNode,
    EntryNode,
    MessageNode,
    ThreadStateNode,
    is_oid,
    parse_node,
)
from .reports import StatsReport


class _Sizes:
    """Body sizes and parsed nodes, read once each."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.sizes: dict[str, int] = {}
        self.nodes: dict[str, object] = {}

    def load(self, oid: str) -> object:
        if oid not in self.nodes:
            kind, body = self.store.objects.get(oid)
            self.sizes[oid] = len(body)
            self.nodes[oid] = parse_node(kind, body, oid)
        return self.nodes[oid]

    def size(self, oid: str | None) -> int:
        if not oid:
            return 0
        if oid not in self.sizes:
            self.load(oid)
        return self.sizes[oid]


def _thread_bytes(sizes: _Sizes, state_oid: str) -> int:
    state = sizes.load(state_oid)
    if not isinstance(state, ThreadStateNode):
        return 0
    total = 0
    seen: set[str] = set()
    for head in state.heads:
        current: str | None = head
        while current is not None and current not in seen:
            seen.add(current)
            node = sizes.load(current)
            if not isinstance(node, EntryNode):
                break
            total += sizes.size(node.payload)
            current = node.parent
    return total


def _run_bytes(sizes: _Sizes, checkpoint_oid: str) -> int:
    total = 0
    chain_bytes: dict[str, int] = {}
    pending = [checkpoint_oid]
    seen: set[str] = set()
    while pending:
        current = pending.pop()
        if current in seen:
            continue
        seen.add(current)
        node = sizes.load(current)
        if not isinstance(node, CheckpointNode):
            continue
        if not node.is_merge:  # a merge repeats the content of its newer parent
            total += sizes.size(node.system_prompt)
            total += _chain_bytes(sizes, node.messages, chain_bytes)
        pending.extend(node.previous)
    return total


def _chain_bytes(sizes: _Sizes, last: str | None, memo: dict[str, int]) -> int:
    pending: list[str] = []
    current = last
    while current is not None and current not in memo:
        pending.append(current)
        node = sizes.load(current)
        current = node.parent if isinstance(node, MessageNode) else None
    running = memo.get(current, 0) if current is not None else 0
    for oid in reversed(pending):
        node = sizes.load(oid)
        running += sizes.size(node.message) if isinstance(node, MessageNode) else 0
        memo[oid] = running
    return memo.get(last, 0) if last is not None else 0


def stats(store: Store) -> StatsReport:
    """Count objects by kind and compute stored, unique and logical bytes."""
    report = StatsReport()
    kinds: Counter[str] = Counter()
    sizes = _Sizes(store)
    for oid in store.objects.iter_oids():
        try:
            kind, body = store.objects.get(oid)
        except JournalError:
            kinds["damaged"] += 1
            continue
        kinds[kind.value] += 1
        report.unique_bytes += len(body)
        sizes.sizes[oid] = len(body)
    report.objects_by_kind = dict(sorted(kinds.items()))
    report.objects = sum(kinds.values())
    usage = store.objects.usage()
    report.loose_objects = usage["loose_objects"]
    report.loose_bytes = usage["loose_bytes"]
    report.packs = usage["packs"]
    report.packed_bytes = usage["packed_bytes"]
    report.stored_bytes = report.loose_bytes + report.packed_bytes
    for name in store.refs.list_refs(THREAD_PREFIX):
        value = store.refs.read_ref(name)
        if value and is_oid(value):
            report.threads += 1
            report.logical_bytes += _thread_bytes(sizes, value)
    for name in store.refs.list_refs(CHECKPOINT_PREFIX):
        value = store.refs.read_ref(name)
        if value and is_oid(value):
            report.runs += 1
            report.logical_bytes += _run_bytes(sizes, value)
    if report.unique_bytes:
        report.dedup_ratio = round(report.logical_bytes / report.unique_bytes, 3)
    if report.stored_bytes:
        report.compression_ratio = round(report.unique_bytes / report.stored_bytes, 3)
        report.total_ratio = round(report.logical_bytes / report.stored_bytes, 3)
    return report
