"""Pack order: each thread's chain near itself, similar objects side by side.

States first (each thread's state chain), then entry nodes in root-to-head order per
thread (a fork's shared prefix is written once, then each branch's own tail), then the
small payloads in that same order, then checkpoints, then each run's segments by the
middle of the messages they add (so a segment that merged small ones, see
``journal.chains``, sits amid them, in one compressed block however the blocks are cut
around it, and costs little), then message nodes and message blobs in
the same fashion as entries, then each tree root's objects (LangGraph records:
referenced before referencing, so a record sits right after the values and message
nodes it added), then the large blobs sorted by their first bytes, then everything else.
Reading a path touches a few consecutive blocks of entry nodes and payloads instead of
the whole pack, and large blobs that share most of their text (the same file read by
tool calls in many forks, under different call ids) land in the same compressed block,
much as git sorts blobs before it looks for deltas. On the forks benchmark this took a
pack from 3.9 MB (chain order throughout) to 2.9 MB.
"""

from __future__ import annotations

from collections.abc import Iterable

from ..backends import Store
from ..errors import JournalError
from ..objects import (
    CheckpointNode,
    EntryNode,
    Kind,
    MessageNode,
    SegmentNode,
    ThreadStateNode,
    is_oid,
    typed_references,
)
from ..objects.nodes import parse_node
from .walk import ROOT_PREFIXES

LARGE_BLOB = 4096
SORT_PREFIX = 256


class _Ordered:
    """An insertion-ordered set of oids restricted to the ones being packed."""

    def __init__(self, wanted: set[str]) -> None:
        self.wanted = wanted
        self.order: list[str] = []
        self.seen: set[str] = set()

    def add(self, oid: str | None) -> None:
        if oid and oid in self.wanted and oid not in self.seen:
            self.seen.add(oid)
            self.order.append(oid)


def _node(store: Store, oid: str, kind: Kind) -> object | None:
    try:
        found, body = store.objects.get(oid)
        return parse_node(found, body, oid) if found is kind else None
    except JournalError:
        return None  # damaged or missing: it still gets packed (or reported by fsck)


def pack_order(store: Store, oids: Iterable[str]) -> list[str]:
    """Every oid in ``oids``, ordered for locality and compression."""
    wanted = set(oids)
    states, entries, payloads = _Ordered(wanted), _Ordered(wanted), _Ordered(wanted)
    checkpoints, links, messages = _Ordered(wanted), _Ordered(wanted), _Ordered(wanted)
    trees, segments = _Ordered(wanted), _Ordered(wanted)
    walked: set[str] = set()
    entry_parent: dict[str, str | None] = {}
    link_parent: dict[str, str | None] = {}

    def chain(head: str, parents: dict[str, str | None], kind: Kind) -> list[str]:
        """Oids from the first not-yet-seen ancestor down to ``head``."""
        out: list[str] = []
        current: str | None = head
        while current is not None and current not in parents:
            node = _node(store, current, kind)
            parent = None
            if isinstance(node, EntryNode):
                parent = node.parent
                payloads_of[current] = node.payload
            elif isinstance(node, MessageNode):
                parent = node.parent
                payloads_of[current] = node.message
            parents[current] = parent
            out.append(current)
            current = parent
        out.reverse()
        return out

    payloads_of: dict[str, str] = {}
    for prefix, kind in ROOT_PREFIXES.items():
        for name in store.refs.list_refs(prefix):
            value = store.refs.read_ref(name)
            if value is None or not is_oid(value):
                continue
            if kind is Kind.TREE:
                _post_order(store, value, kind, trees)
            elif kind is Kind.THREAD:
                pending = [value]
                while pending:
                    oid = pending.pop()
                    if oid in states.seen or not is_oid(oid):
                        continue
                    states.add(oid)
                    state = _node(store, oid, Kind.THREAD)
                    if not isinstance(state, ThreadStateNode):
                        continue
                    pending.extend(state.parents)
                    for head in sorted(state.heads):
                        for entry in chain(head, entry_parent, Kind.ENTRY):
                            entries.add(entry)
                            payloads.add(payloads_of.get(entry))
            else:
                run_segments: list[tuple[int, int, int, str]] = []
                pending = [value]
                while pending:
                    current = pending.pop()
                    if current in checkpoints.seen:
                        continue
                    checkpoints.add(current)
                    node = _node(store, current, Kind.CHECKPOINT)
                    if not isinstance(node, CheckpointNode):
                        continue
                    below = node.message_list
                    while below is not None and below[1] is Kind.SEGMENT:
                        if below[0] in walked:
                            below = None
                            break
                        walked.add(below[0])
                        segment = _node(store, below[0], Kind.SEGMENT)
                        first, last = (
                            (segment.keep, segment.length)
                            if isinstance(segment, SegmentNode)
                            else (0, 0)
                        )
                        run_segments.append((first + last, -last, len(run_segments), below[0]))
                        below = segment.below if isinstance(segment, SegmentNode) else None
                    if below is not None:
                        for link in chain(below[0], link_parent, Kind.MESSAGE):
                            links.add(link)
                            messages.add(payloads_of.get(link))
                    messages.add(node.system_prompt)
                    pending.extend(reversed(node.previous))
                for _, _, _, oid in sorted(run_segments):
                    segments.add(oid)
    small_payloads, large = _split_large(store, payloads.order)
    small_messages, large_messages = _split_large(store, messages.order)
    small_trees, large_trees = _split_large(store, trees.order)
    ordered = [
        *states.order,
        *entries.order,
        *small_payloads,
        *checkpoints.order,
        *segments.order,
        *links.order,
        *small_messages,
        *small_trees,
    ]
    placed = set(ordered) | set(large) | set(large_messages) | set(large_trees)
    rest, large_rest = _split_large(store, sorted(wanted - placed))
    large_all = large + large_messages + large_trees + large_rest
    large_all.sort(key=lambda item: item[1])
    return ordered + rest + [oid for oid, _ in large_all]


def _post_order(store: Store, root: str, kind: Kind, out: _Ordered) -> None:
    """Everything reachable from ``root``, each object after the objects it references
    (an explicit stack: record chains are thousands deep)."""
    stack: list[tuple[str, Kind, bool]] = [(root, kind, False)]
    visited: set[str] = set()
    while stack:
        oid, node_kind, expanded = stack.pop()
        if expanded:
            out.add(oid)
            continue
        if oid in visited or not is_oid(oid):
            continue
        visited.add(oid)
        if node_kind is Kind.BLOB:
            out.add(oid)
            continue
        stack.append((oid, node_kind, True))
        try:
            found, body = store.objects.get(oid)
            refs = typed_references(found, body, oid) if found is node_kind else []
        except JournalError:
            refs = []  # damaged or missing: packed (or reported by fsck) as it is
        stack.extend((ref, ref_kind, False) for ref, ref_kind in reversed(refs))


def _split_large(store: Store, oids: list[str]) -> tuple[list[str], list[tuple[str, bytes]]]:
    """Small objects (in order) and large blobs with their first bytes (the sort key)."""
    small: list[str] = []
    large: list[tuple[str, bytes]] = []
    for oid in oids:
        try:
            kind, body = store.objects.get(oid)
        except JournalError:
            small.append(oid)
            continue
        if kind is Kind.BLOB and len(body) >= LARGE_BLOB:
            large.append((oid, body[:SORT_PREFIX]))
        else:
            small.append(oid)
    return small, large
