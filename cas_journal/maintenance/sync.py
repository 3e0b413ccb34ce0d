"""sync: copy what the destination lacks, then move its refs forward or merge them.

1. Refs: the source's values of the refs to sync (default: every thread and run) and
   the destination's values of the same refs, each side read at once
   (``RefStore.read_refs``: an S3 store lists its refs instead of reading them one by
   one). The destination's values are *haves*: everything they reach is there.
2. Objects (``copying``): a walk from the source values that stops at what the
   destination holds, checking every object it copies (``adoption``), written
   referenced-first in bounded batches (one pack each on backends that pack), blobs on
   several threads. A sync killed at any instant leaves a destination whose objects are
   complete; a rerun stops at what arrived and sends the rest.
3. Freshen: the objects the destination already held that the new refs link (the
   walk's boundary, less what the haves reach directly) are freshened
   (``ObjectStore.freshen``), so a concurrent gc keeps them; any found gone meanwhile are
   copied again. Refs are swapped within ``FRESHEN_VALID_FOR`` of that, else it is
   repeated.
4. Refs, each with one compare-and-swap (``Store.commit``, with the thread listing
   index): a missing destination ref is created; one that is an ancestor of the
   source's (through the thread-state or checkpoint history) fast-forwards; one that is
   ahead stays; two diverged histories are merged into a new state with both parents
   (the union of branch heads, the newer leaf, the newer metadata; for checkpoints a
   node keeping both histories) unless ``merge=False``, which only reports them. Two
   histories with no state in common (two threads that only share an id) are refused,
   like git refuses unrelated histories, unless ``allow_unrelated=True``. Tree refs
   (LangGraph namespaces, ``langgraph/...``) are created and fast-forwarded through each
   tree's ``previous`` reference; diverged ones are only reported (trees have no merge).
   A ref's value is checked against its name (a thread's state names that thread, a
   checkpoint that run, a tree ref holds a tree) before anything moves it.

Deletions are not propagated: sync copies, it never removes. ``repair=True`` also reads
back every object the synced refs reach in the destination and replaces damaged copies
with the source's (a repair from a healthy replica).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from pydantic import BaseModel, Field

from ..backends import IndexUpdate, NewObject, RefUpdate, Store
from ..errors import ConflictError, CorruptObject, InvalidInputError, ObjectNotFound
from ..journal.checkpoints import merge_checkpoints
from ..journal.commit import retries
from ..journal.state import (
    index_key,
    merge_thread_states,
    meta_from_state,
)
from ..objects import (
    CheckpointNode,
    EntryNode,
    Kind,
    Node,
    ThreadStateNode,
    TreeNode,
    is_oid,
    object_id,
    parse_node,
)
from .copying import CopyLimits, ObjectCopier
from .reports import Progress
from .walk import LANGGRAPH_PREFIX, ROOT_PREFIXES

TREE_HISTORY = "previous"
"""The reference a tree names its predecessor with (how a tree ref fast-forwards)."""
MAX_REF_ATTEMPTS = 50
FRESHEN_VALID_FOR = 300.0
"""Seconds after a freshen within which refs may link what it freshened (well inside any
backend's gc grace period); a ref swap later than that freshens again first."""
FRESHEN_ROUNDS = 3
REF_WORKERS = 8


class SyncReport(BaseModel):
    """What a sync did. ``diverged`` lists refs left alone because merging was off,
    ``unrelated`` those whose two sides share no history (see ``allow_unrelated``)."""

    objects_copied: int = 0
    bytes_copied: int = 0
    batches_written: int = 0
    objects_repaired: int = 0
    refs_created: int = 0
    refs_fast_forwarded: int = 0
    refs_merged: int = 0
    refs_up_to_date: int = 0
    refs_ahead: int = 0
    """Destination refs that already contain the source's history."""
    diverged: list[str] = Field(default_factory=list)
    unrelated: list[str] = Field(default_factory=list)
    seconds: float = 0.0


@dataclass(frozen=True)
class _Plan:
    name: str
    kind: Kind
    value: str
    current: str | None


def _ref_kind(name: str) -> Kind:
    for prefix, kind in ROOT_PREFIXES.items():
        if name.startswith(prefix) and len(name) > len(prefix):
            return kind
    raise InvalidInputError(
        f"only thread and checkpoint refs (and langgraph/ refs) sync, not {name[:200]!r}"
    )


def _plans(src: Store, dst: Store, refs: Iterable[str] | None) -> list[_Plan]:
    if refs is None:
        names = [name for prefix in ROOT_PREFIXES for name in src.refs.list_refs(prefix)]
    else:
        names = list(dict.fromkeys(refs))
    kinds = {name: _ref_kind(name) for name in names}
    values = src.refs.read_refs(names)
    plans: list[_Plan] = []
    for name in names:
        value = values.get(name)
        if value is None:
            if refs is None:
                continue  # deleted since it was listed
            raise ObjectNotFound(f"source has no ref {name!r}")
        if not is_oid(value):
            raise CorruptObject(f"source ref {name!r} holds {value[:80]!r}")
        plans.append(_Plan(name, kinds[name], value, None))
    currents = dst.refs.read_refs([plan.name for plan in plans])
    return [_Plan(plan.name, plan.kind, plan.value, currents.get(plan.name)) for plan in plans]


class _Syncer:
    """One sync run: objects, freshening, then refs."""

    def __init__(
        self,
        src: Store,
        dst: Store,
        report: SyncReport,
        merge: bool,
        allow_unrelated: bool,
        copier: ObjectCopier,
        progress: Progress | None,
    ) -> None:
        self.src = src
        self.dst = dst
        self.report = report
        self.merge = merge
        self.allow_unrelated = allow_unrelated
        self.copier = copier
        self.progress = progress
        self.freshened_at = 0.0
        self.reachable: dict[str, Kind] = {}
        self._lock = threading.Lock()

    # -- objects ----------------------------------------------------------------------

    def copy(self, plans: list[_Plan]) -> None:
        self.reachable = self._linked_by_haves(plans)
        self.copier.assume_present(self.reachable)
        tips = [(plan.value, plan.kind, plan.name) for plan in plans]
        self.copier.copy(tips)
        self.freshen(plans)

    def _linked_by_haves(self, plans: list[_Plan]) -> dict[str, Kind]:
        """The haves and what they reference directly, with their kinds: reachable from a
        destination ref (or its reflog), so no gc can take them."""
        linked: dict[str, Kind] = {}
        for plan in plans:
            if plan.current is None or not is_oid(plan.current):
                continue
            node = self._node(plan.current)
            if node is None:
                continue
            linked[plan.current] = plan.kind
            linked.update(node.typed_references())
        return linked

    def freshen(self, plans: list[_Plan]) -> None:
        """Freshen the boundary; copy again whatever vanished from the destination."""
        reachable = self.reachable
        for _ in range(FRESHEN_ROUNDS):
            boundary = {
                oid: where
                for oid, where in self.copier.boundary.items()
                if oid not in reachable and bytes.fromhex(oid) not in self.copier.reachable
            }
            gone = self.dst.objects.freshen(sorted(boundary)) if boundary else set()
            self.freshened_at = time.monotonic()
            if not gone:
                return
            tips = [(oid, *boundary[oid]) for oid in sorted(gone)]
            self.copier.forget_present(gone)
            self.copier.copy(tips)
        raise ConflictError("objects kept vanishing from the destination; sync again")

    def _node(self, oid: str) -> Node | None:
        """A structured object from the source, else the destination (None if neither)."""
        for store in (self.src, self.dst):
            try:
                kind, body = store.objects.get(oid)
            except ObjectNotFound:
                continue
            return parse_node(kind, body, oid)
        return None

    # -- refs -------------------------------------------------------------------------

    def update(self, plans: list[_Plan]) -> None:
        for plan in plans:  # every ref's value is checked before any ref moves
            self._check_tip(plan)
        outcomes: list[tuple[str, str]]
        if len(plans) > 1:
            with ThreadPoolExecutor(min(REF_WORKERS, len(plans))) as pool:
                outcomes = list(pool.map(self._update, plans))
        else:
            outcomes = [self._update(plan) for plan in plans]
        for name, outcome in outcomes:
            if outcome == "diverged":
                self.report.diverged.append(name)
            elif outcome == "unrelated":
                self.report.unrelated.append(name)
            else:
                setattr(self.report, outcome, getattr(self.report, outcome) + 1)

    def _update(self, plan: _Plan) -> tuple[str, str]:
        current = plan.current
        gave_up = f"destination ref {plan.name!r} kept changing; sync it again"
        for attempt in retries(gave_up, MAX_REF_ATTEMPTS):
            if attempt:
                current = self.dst.refs.read_ref(plan.name)
            if current == plan.value:
                return plan.name, "refs_up_to_date"
            objects: list[NewObject] = []
            new, reason = plan.value, "sync"
            if current is None:
                outcome = "refs_created"
            elif not is_oid(current):
                raise CorruptObject(f"destination ref {plan.name!r} holds {current[:80]!r}")
            else:
                relation = self._relation(plan.value, current)
                if relation == "ahead":
                    return plan.name, "refs_ahead"
                if relation != "fast-forward" and plan.name.startswith(LANGGRAPH_PREFIX):
                    return plan.name, "diverged"  # trees have no merge
                if relation == "unrelated" and not self.allow_unrelated:
                    return plan.name, "unrelated"
                if relation == "fast-forward":
                    outcome = "refs_fast_forwarded"
                elif not self.merge:
                    return plan.name, "diverged"
                else:
                    merged = self._merge(plan.name, current, plan.value)
                    objects = [merged]
                    new, reason, outcome = merged.oid, "sync merge", "refs_merged"
            if time.monotonic() - self.freshened_at > FRESHEN_VALID_FOR:
                with self._lock:
                    if time.monotonic() - self.freshened_at > FRESHEN_VALID_FOR:
                        self.freshen([plan])
            index = self._index_updates(plan, new, current, objects)
            if self.dst.commit(objects, RefUpdate(plan.name, current, new, reason), index):
                return plan.name, outcome
        raise AssertionError("unreachable: retries raises when the rounds run out")

    def _check_tip(self, plan: _Plan) -> None:
        """The ref's value must agree with its name (whether copied now or not)."""
        node = self._node(plan.value)
        if node is None:
            raise ObjectNotFound(f"object {plan.value} of {plan.name!r} is in neither store")
        kinds = {ThreadStateNode: Kind.THREAD, CheckpointNode: Kind.CHECKPOINT, TreeNode: Kind.TREE}
        if kinds.get(type(node)) is not plan.kind:
            raise CorruptObject(f"source ref {plan.name!r} holds an object of the wrong kind")
        self.copier.checks.check(plan.value, node, plan.name)

    def _history(self, store: Store, oid: str, stop: str | None) -> tuple[bool, set[str]]:
        """Walk the state (or checkpoint) history of ``oid`` in ``store``: ``(True, seen)``
        as soon as ``stop`` is met, else ``(False, every ancestor)``."""
        seen: set[str] = set()
        pending = [oid]
        while pending:
            current = pending.pop()
            if current == stop:
                return True, seen
            if current in seen:
                continue
            seen.add(current)
            try:
                found, body = store.objects.get(current)
            except ObjectNotFound:
                continue  # the other store's history: not here
            node = parse_node(found, body, current)
            if isinstance(node, ThreadStateNode):
                pending.extend(node.parents)
            elif isinstance(node, CheckpointNode):
                pending.extend(node.previous)
            elif isinstance(node, TreeNode):
                previous = node.refs.get(TREE_HISTORY)
                if previous is not None and previous[0] is Kind.TREE:
                    pending.append(previous[1])
        return False, seen

    def _relation(self, theirs: str, ours: str) -> str:
        """How the source's value relates to the destination's: "fast-forward", "ahead",
        "diverged" (a common ancestor) or "unrelated" (none)."""
        found, their_history = self._history(self.src, theirs, ours)
        if found:
            return "fast-forward"
        found, our_history = self._history(self.dst, ours, theirs)
        if found:
            return "ahead"
        return "diverged" if their_history & our_history else "unrelated"

    def _merge(self, name: str, ours: str, theirs: str) -> NewObject:
        kind, our_body = self.dst.objects.get(ours)
        _, their_body = self.dst.objects.get(theirs)
        our_node = parse_node(kind, our_body, ours)
        their_node = parse_node(kind, their_body, theirs)
        if isinstance(our_node, ThreadStateNode) and isinstance(their_node, ThreadStateNode):

            def leaf_time(oid: str) -> str:
                entry_kind, body = self.dst.objects.get(oid)
                return EntryNode.parse(body, oid).created_at if entry_kind is Kind.ENTRY else ""

            body = merge_thread_states(leaf_time, ours, our_node, theirs, their_node).body()
            return NewObject(object_id(Kind.THREAD, body), Kind.THREAD, body)
        if isinstance(our_node, CheckpointNode) and isinstance(their_node, CheckpointNode):
            body = merge_checkpoints(ours, our_node, theirs, their_node).body()
            return NewObject(object_id(Kind.CHECKPOINT, body), Kind.CHECKPOINT, body)
        raise CorruptObject(f"ref {name!r} holds objects of different kinds on each side", ours)

    def _index_updates(
        self, plan: _Plan, new: str, current: str | None, objects: list[NewObject]
    ) -> list[IndexUpdate]:
        """The listing-index updates of a thread ref moving from ``current`` to ``new``."""
        if plan.kind is not Kind.THREAD:
            return []
        written = {obj.oid: obj for obj in objects}

        def meta_key(oid: str) -> str | None:
            if oid in written:
                node: Node | None = ThreadStateNode.parse(written[oid].body, oid)
            else:
                node = self._node(oid)
            if not isinstance(node, ThreadStateNode):
                return None
            meta = meta_from_state(oid, node)
            return None if meta.created_at is None else index_key(meta.created_at, meta.id)

        new_key = meta_key(new)
        old_key = meta_key(current) if current is not None else None
        if current is not None and new_key == old_key:
            return []
        updates = [IndexUpdate(new_key, "1")] if new_key is not None else []
        if old_key is not None and old_key != new_key:
            updates.append(IndexUpdate(old_key, None))
        return updates


def sync(
    src: Store,
    dst: Store,
    refs: Iterable[str] | None = None,
    *,
    merge: bool = True,
    allow_unrelated: bool = False,
    repair: bool = False,
    progress: Progress | None = None,
    limits: CopyLimits | None = None,
) -> SyncReport:
    """Bring ``dst`` up to date with ``src`` for the given refs (default: every thread and
    run). See the module docstring for what is checked and in which order."""
    started = time.monotonic()
    report = SyncReport()
    plans = _plans(src, dst, refs)
    todo = [plan for plan in plans if repair or plan.value != plan.current]
    report.refs_up_to_date = len(plans) - len(todo)
    copier = ObjectCopier(src, dst, limits=limits, progress=progress, repair=repair)
    syncer = _Syncer(src, dst, report, merge, allow_unrelated, copier, progress)
    with dst.objects.write_guard():  # objects found present stay until the refs link them
        if todo:
            syncer.copy(todo)
        report.objects_copied = copier.counts.objects
        report.bytes_copied = copier.counts.bytes
        report.batches_written = copier.counts.batches
        report.objects_repaired = copier.counts.repaired
        syncer.update(todo)
    report.seconds = round(time.monotonic() - started, 3)
    return report
