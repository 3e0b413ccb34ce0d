"""sync: copy what the destination lacks, then move its refs forward or merge them.

Objects: a walk from each source ref tip that stops at objects the destination already
has (the closure invariant says everything below them is there too), so a sync costs
what is new, not what is stored. Each fetched object is hash-verified by the source's
``get``; the destination recomputes the id when it stores it, and a mismatch (a remote
that lies) stops the sync. Objects are stored referenced-before-referencing, in batches
whose every object's references precede it, so a sync killed at any point leaves a
destination that fsck passes, and a rerun finishes the job.

Refs: a missing destination ref is created; a destination ref that is an ancestor of
the source's (through the thread-state or checkpoint history) fast-forwards; one that
is ahead stays; two diverged histories are merged into a new state with both parents —
the union of branch heads, the newer leaf, the newer metadata; for checkpoints, a node
keeping both histories — unless ``merge=False``, which only reports the divergence.
Tree refs (LangGraph namespaces) are created and fast-forwarded through each tree's
``previous`` reference; diverged ones are only reported (trees have no merge).
Deletions are not propagated: sync copies, it never removes.
"""

from __future__ import annotations

import time
from collections.abc import Iterable

from pydantic import BaseModel, Field

from ..backends import Store
from ..errors import ConflictError, CorruptObject, InvalidInputError, ObjectNotFound
from ..journal.checkpoints import merge_checkpoints
from ..journal.state import (
    THREAD_PREFIX,
    ensure_index,
    merge_thread_states,
    meta_from_state,
)
from ..objects import (
    CheckpointNode,
    EntryNode,
    Kind,
    ThreadStateNode,
    TreeNode,
    is_oid,
    object_id,
    parse_node,
    typed_references,
)
from .reports import Progress
from .walk import LANGGRAPH_PREFIX, ROOT_PREFIXES

TREE_HISTORY = "previous"
"""The reference a tree names its predecessor with (how a tree ref fast-forwards)."""
WRITE_BATCH = 256
MAX_REF_ATTEMPTS = 50


class SyncReport(BaseModel):
    """What a sync did (``diverged`` lists refs left alone because merging was off)."""

    objects_copied: int = 0
    bytes_copied: int = 0
    refs_created: int = 0
    refs_fast_forwarded: int = 0
    refs_merged: int = 0
    refs_up_to_date: int = 0
    refs_ahead: int = 0
    """Destination refs that already contain the source's history."""
    diverged: list[str] = Field(default_factory=list)
    seconds: float = 0.0


def copy_objects(
    src: Store,
    dst: Store,
    tips: Iterable[tuple[str, Kind]],
    report: SyncReport,
    progress: Progress | None = None,
) -> None:
    """Copy everything reachable from ``tips`` that ``dst`` lacks, referenced first."""
    found: dict[str, tuple[Kind, bytes, list[str]]] = {}
    frontier = {oid: kind for oid, kind in tips if is_oid(oid)}
    checked: set[str] = set()
    while frontier:
        checked.update(frontier)
        missing = dst.objects.missing(frontier)
        following: dict[str, Kind] = {}
        for oid in missing:
            kind, body = src.objects.get(oid)
            if kind is not frontier[oid]:
                raise CorruptObject(
                    f"source holds a {kind.value} where a {frontier[oid].value} is referenced", oid
                )
            references = typed_references(kind, body, oid)
            found[oid] = (kind, body, [ref for ref, _ in references])
            for ref, ref_kind in references:
                if ref not in checked and ref not in following:
                    following[ref] = ref_kind
        frontier = following
    order = _referenced_first(found)
    for start in range(0, len(order), WRITE_BATCH):
        chunk = order[start : start + WRITE_BATCH]
        items = [(found[oid][0], found[oid][1]) for oid in chunk]
        stored = dst.objects.put_many(items)
        if stored != chunk:
            raise CorruptObject("destination computed other ids than the source named", chunk[0])
        report.objects_copied += len(chunk)
        report.bytes_copied += sum(len(body) for _, body in items)
        if progress is not None:
            progress("objects", report.objects_copied, len(order))


def _referenced_first(found: dict[str, tuple[Kind, bytes, list[str]]]) -> list[str]:
    """Post-order over the objects to copy: every object after all it references."""
    order: list[str] = []
    done: set[str] = set()
    for root in found:
        if root in done:
            continue
        stack: list[tuple[str, int]] = [(root, 0)]
        while stack:
            oid, index = stack.pop()
            refs = found[oid][2]
            while index < len(refs) and (refs[index] in done or refs[index] not in found):
                index += 1
            if index < len(refs):
                # ids are hashes of content, so the graph cannot have a cycle
                stack.append((oid, index + 1))
                stack.append((refs[index], 0))
                continue
            if oid not in done:
                done.add(oid)
                order.append(oid)
    return order


def _contains(store: Store, descendant: str, ancestor: str) -> bool:
    """True if ``ancestor`` is in the history of ``descendant`` (stops when found)."""
    seen: set[str] = set()
    pending = [descendant]
    while pending:
        oid = pending.pop()
        if oid == ancestor:
            return True
        if oid in seen:
            continue
        seen.add(oid)
        found, body = store.objects.get(oid)
        node = parse_node(found, body, oid)
        if isinstance(node, ThreadStateNode):
            pending.extend(node.parents)
        elif isinstance(node, CheckpointNode):
            pending.extend(node.previous)
        elif isinstance(node, TreeNode) and node.refs.get(TREE_HISTORY, (None,))[0] is Kind.TREE:
            pending.append(node.refs[TREE_HISTORY][1])
    return False


def _merge(dst: Store, name: str, ours: str, theirs: str) -> tuple[Kind, bytes]:
    kind, our_body = dst.objects.get(ours)
    _, their_body = dst.objects.get(theirs)
    our_node = parse_node(kind, our_body, ours)
    their_node = parse_node(kind, their_body, theirs)
    if isinstance(our_node, ThreadStateNode) and isinstance(their_node, ThreadStateNode):

        def leaf_time(oid: str) -> str:
            entry_kind, body = dst.objects.get(oid)
            return EntryNode.parse(body, oid).created_at if entry_kind is Kind.ENTRY else ""

        merged = merge_thread_states(leaf_time, ours, our_node, theirs, their_node)
        return Kind.THREAD, merged.body()
    if isinstance(our_node, CheckpointNode) and isinstance(their_node, CheckpointNode):
        return Kind.CHECKPOINT, merge_checkpoints(ours, our_node, theirs, their_node).body()
    raise CorruptObject(f"ref {name!r} holds objects of different kinds on each side", ours)


def _update_ref(dst: Store, name: str, value: str, merge: bool, report: SyncReport) -> None:
    is_thread = name.startswith(THREAD_PREFIX)
    for _ in range(MAX_REF_ATTEMPTS):
        current = dst.refs.read_ref(name)
        if current == value:
            report.refs_up_to_date += 1
            return
        new, reason = value, "sync"
        if current is None:
            counter = "refs_created"
        elif not is_oid(current):
            raise CorruptObject(f"destination ref {name!r} holds {current[:80]!r}")
        elif _contains(dst, value, current):
            counter = "refs_fast_forwarded"
        elif _contains(dst, current, value):
            report.refs_ahead += 1
            return
        elif not merge or name.startswith(LANGGRAPH_PREFIX):
            report.diverged.append(name)
            return
        else:
            kind, body = _merge(dst, name, current, value)
            new, reason, counter = object_id(kind, body), "sync merge", "refs_merged"
            dst.objects.put(kind, body)
        if dst.refs.set_if_equals(name, current, new, reason):
            setattr(report, counter, getattr(report, counter) + 1)
            if is_thread:
                _index(dst, new, current)
            return
    raise ConflictError(f"destination ref {name!r} kept changing; sync it again")


def _index(dst: Store, new: str, old: str | None) -> None:
    """Keep the destination's thread listing in step with the synced thread."""
    _, body = dst.objects.get(new)
    meta = meta_from_state(new, ThreadStateNode.parse(body, new))
    previous = None
    if old is not None:
        _, old_body = dst.objects.get(old)
        previous = meta_from_state(old, ThreadStateNode.parse(old_body, old))
    ensure_index(dst.refs, meta, previous)


def sync(
    src: Store,
    dst: Store,
    refs: Iterable[str] | None = None,
    *,
    merge: bool = True,
    progress: Progress | None = None,
) -> SyncReport:
    """Bring ``dst`` up to date with ``src`` for the given refs (default: every thread and run)."""
    started = time.monotonic()
    report = SyncReport()
    names = (
        list(refs)
        if refs is not None
        else [name for prefix in ROOT_PREFIXES for name in src.refs.list_refs(prefix)]
    )
    tips: list[tuple[str, str, Kind]] = []
    for name in names:
        kinds = [kind for prefix, kind in ROOT_PREFIXES.items() if name.startswith(prefix)]
        if not kinds:
            raise InvalidInputError(
                f"only thread and checkpoint refs (and langgraph/ refs) sync, not {name!r}"
            )
        kind = kinds[0]
        value = src.refs.read_ref(name)
        if value is None:
            raise ObjectNotFound(f"source has no ref {name!r}")
        if not is_oid(value):
            raise CorruptObject(f"source ref {name!r} holds {value[:80]!r}")
        tips.append((name, value, kind))
    with dst.objects.write_guard():  # objects found present stay until the refs link them
        copy_objects(src, dst, [(value, kind) for _, value, kind in tips], report, progress)
        for name, value, _ in tips:
            _update_ref(dst, name, value, merge, report)
    report.seconds = round(time.monotonic() - started, 3)
    return report
