"""stats: what a store holds, what that would cost as plain copies, and what it costs here.

Three measures of size, each with one name:

* **logical bytes**: what a store without sharing would hold. Every live thread counted
  in full (the payload of every entry it reaches, branches included, as a JSONL file per
  thread would hold it) plus every saved checkpoint of every live run counted in full
  (its whole message list and system prompt, as a checkpointer that saves whole states
  would). ``logical_entries`` and ``logical_checkpoints`` count the same way.
* **content bytes**: the distinct payloads, messages and system prompts that those
  logical bytes are made of, each counted once (uncompressed). ``dedup_ratio`` is
  logical / content: 1.0 when nothing is shared, more when forks, repeated tool output
  or checkpoint iterations share content. It cannot be below 1.
* **stored bytes**: what the objects take as stored (compressed frames, loose or in
  packs), and **disk bytes**: what the whole store takes on its storage, database, log
  and index files included (what ``du`` reports for a local store), as the backend's
  ``usage()`` reports it.

``object_bytes`` is the uncompressed size of every distinct object stored (content plus
the structure: entry nodes, thread states, checkpoint nodes, message-chain links,
segments, and any garbage not yet collected; a segment's inline messages count as
content, each segment's once); ``compression_ratio`` is object / stored bytes, and
``overall_ratio`` is logical / disk bytes: how many times smaller than plain copies the
store is, everything included.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

from pydantic import BaseModel, Field

from ..backends import Store
from ..errors import JournalError
from ..objects import (
    CheckpointNode,
    EntryNode,
    Kind,
    MessageNode,
    SegmentNode,
    ThreadStateNode,
    canonical_json,
    is_oid,
    parse_node,
)

THREAD_PREFIX = "threads/"
CHECKPOINT_PREFIX = "checkpoints/"


class StatsReport(BaseModel):
    """What a store holds, what plain copies would take, and what it takes here."""

    threads: int = 0
    """Live threads (thread refs)."""
    runs: int = 0
    """Live checkpoint runs (checkpoint refs)."""
    entries: int = 0
    """Distinct entries that live threads reach."""
    checkpoints: int = 0
    """Distinct saved checkpoints (iterations) that live runs reach."""
    objects: int = 0
    """Distinct objects stored, reachable or not."""
    objects_by_kind: dict[str, int] = Field(default_factory=dict)
    logical_entries: int = 0
    """Entries counted once per thread that reaches them (what copies per thread hold)."""
    logical_checkpoints: int = 0
    """Saved checkpoints, each counted with its whole message list."""
    logical_bytes: int = 0
    """Payload bytes of every thread in full plus every checkpoint's full message list
    and system prompt: what a store without sharing would hold."""
    content_bytes: int = 0
    """The distinct payloads, messages and system prompts of the logical bytes, once each
    (uncompressed)."""
    object_bytes: int = 0
    """Uncompressed size of every distinct object stored (content plus structure)."""
    stored_bytes: int = 0
    """Compressed size of the objects as stored (loose and packed)."""
    disk_bytes: int = 0
    """What the whole store takes on its storage (database, logs, packs, indexes)."""
    loose_objects: int = 0
    packs: int = 0
    dedup_ratio: float = 1.0
    """logical_bytes / content_bytes (at least 1)."""
    compression_ratio: float = 1.0
    """object_bytes / stored_bytes."""
    overall_ratio: float = 0.0
    """logical_bytes / disk_bytes: how many times smaller than plain copies the store is."""


class _Reader:
    """Objects read once each: body sizes of content, parsed nodes of structure."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.sizes: dict[str, int] = {}

    def size(self, oid: str | None) -> int:
        """The body size of a content object (0 for none)."""
        if not oid:
            return 0
        size = self.sizes.get(oid)
        if size is None:
            _, body = self.store.objects.get(oid)
            size = self.sizes[oid] = len(body)
        return size

    def node(self, oid: str) -> object:
        """A structured object, parsed."""
        kind, body = self.store.objects.get(oid)
        return parse_node(kind, body, oid)


def _live(store: Store, prefix: str) -> Iterator[str]:
    for name in store.refs.list_refs(prefix):
        value = store.refs.read_ref(name)
        if value and is_oid(value):
            yield value


class _Tally:
    """Walks live threads and runs, adding logical and distinct counts to a report."""

    def __init__(self, store: Store, report: StatsReport) -> None:
        self.reader = _Reader(store)
        self.report = report
        self.content: set[str] = set()
        self.entries: dict[str, EntryNode] = {}
        self.chains: dict[str, tuple[int, int]] = {}
        """Message-chain link -> (messages, bytes) from the chain's start to it."""
        self.segments: dict[str, list[int]] = {}
        """Segment -> the bytes of the first n messages of its list, for every n."""
        self.checkpoints: set[str] = set()

    def content_size(self, oid: str | None) -> int:
        if not oid:
            return 0
        size = self.reader.size(oid)
        if oid not in self.content:
            self.content.add(oid)
            self.report.content_bytes += size
        return size

    def entry(self, oid: str) -> EntryNode | None:
        node = self.entries.get(oid)
        if node is None:
            parsed = self.reader.node(oid)
            if not isinstance(parsed, EntryNode):
                return None
            node = self.entries[oid] = parsed
        return node

    def thread(self, state_oid: str) -> None:
        state = self.reader.node(state_oid)
        if not isinstance(state, ThreadStateNode):
            return
        self.report.threads += 1
        seen: set[str] = set()
        for head in state.heads:
            current: str | None = head
            while current is not None and current not in seen:
                seen.add(current)
                node = self.entry(current)
                if node is None:
                    break
                self.report.logical_entries += 1
                self.report.logical_bytes += self.content_size(node.payload)
                current = node.parent

    def chain(self, last: str | None) -> tuple[int, int]:
        """(messages, bytes) of the message chain ending at ``last``."""
        pending: list[tuple[str, MessageNode]] = []
        current = last
        while current is not None and current not in self.chains:
            node = self.reader.node(current)
            if not isinstance(node, MessageNode):
                break
            pending.append((current, node))
            current = node.parent
        count, size = self.chains.get(current, (0, 0)) if current is not None else (0, 0)
        for oid, node in reversed(pending):
            count += 1
            size += self.content_size(node.message)
            self.chains[oid] = (count, size)
        return self.chains.get(last, (0, 0)) if last is not None else (0, 0)

    def chain_sizes(self, last: str, keep: int) -> list[int]:
        """Bytes of the first n messages of the chain ending at ``last``, n = 0 .. keep."""
        self.chain(last)
        sizes: list[int] = []
        current: str | None = last
        while current is not None and current in self.chains:
            count, size = self.chains[current]
            if count <= keep:
                sizes.append(size)
            node = self.reader.node(current)
            current = node.parent if isinstance(node, MessageNode) else None
        sizes.append(0)
        sizes.reverse()
        return sizes

    def segment(self, oid: str) -> list[int]:
        """Bytes of the first n messages of the list of segment ``oid``, for n = 0 .. its
        length (each distinct segment's own messages counted as content once)."""
        pending: list[tuple[str, SegmentNode]] = []
        current: tuple[str, Kind] | None = (oid, Kind.SEGMENT)
        while current is not None and current[1] is Kind.SEGMENT:
            if current[0] in self.segments:
                break
            node = self.reader.node(current[0])
            if not isinstance(node, SegmentNode):
                break
            pending.append((current[0], node))
            current = node.below
        for at, node in reversed(pending):
            below = node.below
            if below is None:
                sizes = [0]
            elif below[1] is Kind.SEGMENT:
                sizes = self.segments.get(below[0], [0])[: node.keep + 1]
            else:
                sizes = self.chain_sizes(below[0], node.keep)
            own = [len(canonical_json(message)) for message in node.messages]
            if at not in self.content:
                self.content.add(at)
                self.report.content_bytes += sum(own)
            total = sizes[-1]
            for size in own:
                total += size
                sizes.append(total)
            self.segments[at] = sizes
        return self.segments.get(oid, [0])

    def run(self, checkpoint_oid: str) -> None:
        self.report.runs += 1
        pending = [checkpoint_oid]
        seen: set[str] = set()
        while pending:
            current = pending.pop()
            if current in seen:
                continue
            seen.add(current)
            node = self.reader.node(current)
            if not isinstance(node, CheckpointNode):
                continue
            pending.extend(node.previous)
            if node.is_merge:  # a merge repeats the content of its newer parent
                continue
            if current not in self.checkpoints:
                self.checkpoints.add(current)
            self.report.logical_checkpoints += 1
            self.report.logical_bytes += self.content_size(node.system_prompt)
            if node.segment is not None:
                self.report.logical_bytes += self.segment(node.segment)[-1]
            else:
                self.report.logical_bytes += self.chain(node.messages)[1]


def _ratio(numerator: int, denominator: int, empty: float) -> float:
    return round(numerator / denominator, 3) if denominator else empty


def stats(store: Store) -> StatsReport:
    """Count what the store holds and measure logical, content, object, stored and disk
    bytes (see the module docstring). Reads every object once."""
    report = StatsReport()
    kinds: Counter[str] = Counter()
    for oid in store.objects.iter_oids():
        try:
            kind, body = store.objects.get(oid)
        except JournalError:
            kinds["damaged"] += 1
            continue
        kinds[kind.value] += 1
        report.object_bytes += len(body)
    report.objects_by_kind = dict(sorted(kinds.items()))
    report.objects = sum(kinds.values())
    tally = _Tally(store, report)
    for value in _live(store, THREAD_PREFIX):
        tally.thread(value)
    for value in _live(store, CHECKPOINT_PREFIX):
        tally.run(value)
    report.entries = len(tally.entries)
    report.checkpoints = len(tally.checkpoints)
    usage = store.objects.usage()
    report.loose_objects = usage.get("loose_objects", 0)
    report.packs = usage.get("packs", 0)
    report.stored_bytes = usage.get("loose_bytes", 0) + usage.get("packed_bytes", 0)
    report.disk_bytes = usage.get("disk_bytes", report.stored_bytes)
    report.dedup_ratio = _ratio(report.logical_bytes, report.content_bytes, 1.0)
    report.compression_ratio = _ratio(report.object_bytes, report.stored_bytes, 1.0)
    report.overall_ratio = _ratio(report.logical_bytes, report.disk_bytes, 0.0)
    return report


__all__ = ["StatsReport", "stats"]
