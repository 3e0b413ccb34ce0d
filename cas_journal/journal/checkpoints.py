"""Run checkpoints, deduplicated: a run's message list saved every iteration.

A checkpoint object holds the run metadata, the object spelling its message list and the
previous checkpoint of the run, and ``checkpoints/<run>`` points at the newest. The list
is a segment (see ``chains``): the messages the save added, inline, after the first
``keep`` messages of an older list of the run. Saving iteration k+1 writes one segment
holding only what is new or changed since iteration k (or nothing, when the list is one
a stored segment already spells; or, every few saves, one that also repeats the small
segments before it, so a load reads few segments), and no iteration is overwritten.
Runs saved before segments spell their lists as message chains (a node per message);
they load as before, and a save on such a run writes a segment on top of the chain.

Saving also costs CPU only for what is new: a memo per run (see ``chains``) knows the
messages of the run's newest list and the stored objects that spell it, so an unchanged
prefix is compared, not re-encoded and re-hashed, and the run's ref is not read: the
checkpoint the memo was made for (the last this journal saved or read of the run) is the
expected old value of the compare-and-swap; if another writer moved the run since, the
swap loses and the save is rebuilt on the ref as read then. Loads answer from the memo
when it holds the list asked for, else read the list once (one read and one JSON parse
per segment) and remember it (without the segment bodies, which the next save reads
again if it needs them). A list loaded before in this process is not parsed a third
time: the second load's messages are kept as a ``MessagesImage`` (see ``chains``) keyed
by the list's object and length (an object never changes), in bounded memory; each load
is a fresh copy the caller may change, made with the cyclic collector paused (thousands
of new containers, no cycle among them; ``entries.collector_paused`` moves them to the
oldest generation, so no young collection walks them). (The first load only notes the
key: a process that loads a run once, to restore it, does not pay for an image it never
uses.)
Every change is one ``Store.commit``; a deleted run stays restorable from its reflog
until gc expires it.
"""

from __future__ import annotations

import builtins
import contextlib
import heapq
from collections.abc import Iterator
from typing import Any

from ..backends import NewObject, RefUpdate, Store
from ..errors import (
    CheckpointNotFound,
    ConflictError,
    CorruptObject,
    CorruptRef,
    ObjectNotFound,
)
from ..names import validate_id
from ..objects import (
    CheckpointNode,
    Kind,
    ensure_utc,
    format_time,
    is_oid,
    object_id,
    parse_time,
    utc_now,
)
from .cache import BoundedCache
from .chains import ChainMemo, MessagesImage, encode_save, read_list
from .commit import commit_or_report, retries
from .entries import collector_paused
from .models import Checkpoint
from .nearby import NearbyObjects
from .state import CHECKPOINT_PREFIX

MEMO_BYTES = 64 * 1024 * 1024
"""Memory the per-run chain memos may hold, at most (least recently saved runs go first)."""
LOADED_BYTES = 64 * 1024 * 1024
"""Memory the images of loaded message lists may hold, at most (oldest go first)."""
LOADED_CHAINS = 256
"""Loaded message lists kept, at most."""
WRITE_SEGMENTS = True
"""Whether saves write segments (else message chains). Every store a journal can write to
allows them: opening an older local (format 2) or S3 (format 1) store for writing
upgrades its format first; a read-only open, which keeps the old format, cannot save."""


def _newest_first(node: CheckpointNode) -> float:
    """A heap key that pops the newest created_at first."""
    return -parse_time(node.created_at).timestamp()


def merge_checkpoints(
    ours: str, our_node: CheckpointNode, theirs: str, their_node: CheckpointNode
) -> CheckpointNode:
    """A node joining two histories of one run: the newer side's content, both as parents."""
    newer, older = (
        (ours, theirs)
        if (our_node.created_at, ours) >= (their_node.created_at, theirs)
        else (theirs, ours)
    )
    content = our_node if newer == ours else their_node
    return content._replace(previous=(newer, older))


def checkpoint_ref(run_id: str) -> str:
    """The ref name of a run (validating the id)."""
    return CHECKPOINT_PREFIX + validate_id(run_id, "run id")


class CheckpointStore:
    """save / load / has_checkpoint / delete / restore / list / history / deleted."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._nearby = NearbyObjects(store.objects)
        self._nodes: BoundedCache[str, CheckpointNode] = BoundedCache(4096)
        self._prompts: BoundedCache[str, str] = BoundedCache(
            256, weigh=len, max_weight=16 * 1024 * 1024
        )
        self._memos: BoundedCache[str, ChainMemo] = BoundedCache(
            1024, weigh=lambda memo: memo.weight, max_weight=MEMO_BYTES
        )
        self._loaded: BoundedCache[tuple[str, int], MessagesImage] = BoundedCache(
            LOADED_CHAINS, weigh=lambda image: image.weight, max_weight=LOADED_BYTES
        )
        self._loaded_once: BoundedCache[tuple[str, int], bool] = BoundedCache(LOADED_CHAINS)
        self.segments = WRITE_SEGMENTS
        """Whether saves write segments (else message chains, as before segments)."""

    # -- reading objects -----------------------------------------------------------------

    def _get(self, oid: str, kind: Kind) -> bytes:
        found, body = self.store.objects.get(oid)
        if found is not kind:
            raise CorruptObject(f"expected a {kind.value}, found a {found.value}", oid)
        return body

    def node(self, oid: str) -> CheckpointNode:
        """A checkpoint object, parsed and cached."""
        node = self._nodes.get(oid)
        if node is None:
            node = self._nodes.put(oid, CheckpointNode.parse(self._get(oid, Kind.CHECKPOINT), oid))
        return node

    def _head(self, run_id: str) -> str | None:
        name = checkpoint_ref(run_id)
        value = self.store.refs.read_ref(name)
        if value is not None and not is_oid(value):
            raise CorruptRef(f"ref {name!r} does not hold an object id")
        return value

    def _metadata(self, oid: str, node: CheckpointNode) -> Checkpoint:
        return Checkpoint(
            run_id=node.run_id,
            task_name=node.task_name,
            iteration=node.iteration,
            input_tokens=node.input_tokens,
            output_tokens=node.output_tokens,
            created_at=parse_time(node.created_at),
            message_count=node.message_count,
            system_prompt=self._text(node.system_prompt),
        )

    def _text(self, oid: str | None) -> str:
        if oid is None:
            return ""
        text = self._prompts.get(oid)
        if text is None:
            try:
                text = self._prompts.put(oid, self._get(oid, Kind.BLOB).decode("utf-8"))
            except UnicodeDecodeError as exc:
                raise CorruptObject("system prompt is not UTF-8", oid) from exc
        return text

    def _read(self, run_id: str, oid: str, node: CheckpointNode) -> builtins.list[dict[str, Any]]:
        """The messages of checkpoint ``oid``, freshly parsed: from the run's memo when it
        holds that list (a list is named by its object and length, so a prefix of the
        memo's may be it), else read from the store, once, and remembered."""
        target = node.message_list
        if target is None:
            return []
        count = node.message_count
        memo = self._memos.get(run_id)
        if memo is not None and memo.holds(target[0], target[1], count):
            return memo.messages(count)
        with collector_paused():  # thousands of new containers, no cycles among them
            messages, read = read_list(self._nearby, target[0], target[1], count)
        if memo is None or memo.checkpoint != self._head(run_id):
            read.checkpoint, read.prompt = oid, node.system_prompt
            self._memos.put(run_id, read)
        return messages

    def _messages(
        self, run_id: str, oid: str, node: CheckpointNode
    ) -> builtins.list[dict[str, Any]]:
        """The messages of checkpoint ``oid``, a fresh copy: from the image of earlier
        loads of the same list, else parsed. The image is made at the second load of a
        list: a list loaded once (a new process restoring a run) does not pay for it."""
        target = node.message_list
        if target is None:
            return []
        key = (target[0], node.message_count)
        image = self._loaded.get(key)
        if image is not None:
            with collector_paused():  # thousands of new containers, no cycles among them
                return image.copy()
        messages = self._read(run_id, oid, node)
        if self._loaded_once.get(key) is None:
            self._loaded_once.put(key, True)
        else:
            # too deep to pickle: parsed again next time
            with contextlib.suppress(RecursionError), collector_paused():
                self._loaded.put(key, MessagesImage(messages))
        return messages

    def _memo(self, run_id: str, head: str | None) -> ChainMemo:
        """The run's memo; built from the newest checkpoint's stored list if this process
        has none yet (the first save after opening the store)."""
        memo = self._memos.get(run_id)
        if memo is None:
            if head is None:
                return ChainMemo(None)
            node = self.node(head)
            target = node.message_list
            if target is None:
                return ChainMemo(head, prompt=node.system_prompt)
            with collector_paused():
                messages, memo = read_list(self._nearby, target[0], target[1], node.message_count)
            memo.stored = messages  # the save compares the caller's with them next
            memo.checkpoint, memo.prompt = head, node.system_prompt
            self._memos.put(run_id, memo)
        return memo

    # -- saving --------------------------------------------------------------------------

    def save(self, checkpoint: Checkpoint) -> Checkpoint:
        """Save one iteration; returns it with created_at and message_count filled in."""
        name = checkpoint_ref(checkpoint.run_id)
        created = format_time(ensure_utc(checkpoint.created_at or utc_now()))
        memo = self._memos.get(checkpoint.run_id)
        if memo is not None and memo.checkpoint is not None:
            head: str | None = memo.checkpoint  # remembered: a stale one loses the swap
        else:
            head = self._head(checkpoint.run_id)
            memo = self._memo(checkpoint.run_id, head)
        segments = self.segments
        try:
            chain = encode_save(checkpoint.messages, memo, segments)
        except (ObjectNotFound, CorruptObject):
            # the memo's list, left out of memory after a load, could not be read again
            # (collected since, or damaged): the list is written whole
            memo = ChainMemo(None)
            chain = encode_save(checkpoint.messages, memo, segments)
        prompt_oid = None
        prompt_object: list[NewObject] = []
        if checkpoint.system_prompt:
            prompt = checkpoint.system_prompt.encode("utf-8")
            prompt_oid = object_id(Kind.BLOB, prompt)
            prompt_object.append(NewObject(prompt_oid, Kind.BLOB, prompt))
        # what the memo's chain and prompt share with the new one is stored and reachable
        # from the memo's checkpoint; only if that is the head we swap is it safe from gc
        based_on_head = memo.checkpoint is not None and memo.checkpoint == head
        for attempt in retries(f"run {checkpoint.run_id!r} kept changing; checkpoint not saved"):
            if attempt:
                head = self._head(checkpoint.run_id)
                based_on_head = False
            reused = chain.reused
            if not based_on_head and reused is not None and self.store.objects.freshen([reused]):
                chain = encode_save(checkpoint.messages, ChainMemo(None), segments)
            node = CheckpointNode(
                run_id=checkpoint.run_id,
                created_at=created,
                iteration=checkpoint.iteration,
                task_name=checkpoint.task_name,
                input_tokens=checkpoint.input_tokens,
                output_tokens=checkpoint.output_tokens,
                message_count=chain.count,
                messages=chain.oid_of(Kind.MESSAGE),
                segment=chain.oid_of(Kind.SEGMENT),
                system_prompt=prompt_oid,
                previous=(head,) if head else (),
            )
            body = node.body()
            oid = object_id(Kind.CHECKPOINT, body)
            saved = checkpoint.model_copy(
                update={"created_at": parse_time(created), "message_count": chain.count}
            )
            unlinked = prompt_object if not based_on_head or prompt_oid != memo.prompt else []
            objects = [*chain.objects, *unlinked, NewObject(oid, Kind.CHECKPOINT, body)]
            swap = RefUpdate(name, head, oid, f"save {checkpoint.iteration}")
            if commit_or_report(self.store, objects, swap, result=saved):
                self._nodes.put(oid, node)
                chain.memo.checkpoint, chain.memo.prompt = oid, prompt_oid
                self._memos.put(checkpoint.run_id, chain.memo)
                return saved
        raise AssertionError("unreachable: retries raises when the rounds run out")

    # -- reading -------------------------------------------------------------------------

    def load(self, run_id: str, iteration: int | None = None) -> Checkpoint:
        """The newest checkpoint of a run (or the newest at ``iteration``), with its messages."""
        for oid, node in self._walk(run_id):
            if iteration is None or node.iteration == iteration:
                checkpoint = self._metadata(oid, node)
                checkpoint.messages = self._messages(run_id, oid, node)
                return checkpoint
        raise CheckpointNotFound(f"no checkpoint for run {run_id!r} at iteration {iteration}")

    def _walk(self, run_id: str) -> Iterator[tuple[str, CheckpointNode]]:
        """The run's saved iterations, newest created_at first (merge nodes skipped)."""
        head = self._head(run_id)
        if head is None:
            raise CheckpointNotFound(f"no checkpoint for run {run_id!r}")
        first = self.node(head)
        if not first.is_merge:  # the ref's own node comes first even if clocks disagree
            yield head, first
        heap = [(_newest_first(self.node(oid)), oid) for oid in first.previous]
        heapq.heapify(heap)
        seen = {head}
        while heap:
            _, oid = heapq.heappop(heap)
            if oid in seen:
                continue
            seen.add(oid)
            node = self.node(oid)
            if not node.is_merge:
                yield oid, node
            for parent in node.previous:
                if parent not in seen:
                    heapq.heappush(heap, (_newest_first(self.node(parent)), parent))

    def has_checkpoint(self, run_id: str) -> bool:
        """True if the run has a checkpoint."""
        return self._head(run_id) is not None

    def list(self) -> builtins.list[Checkpoint]:
        """Every run's newest checkpoint, newest first; metadata only (messages not read)."""
        found = []
        for name in self.store.refs.list_refs(CHECKPOINT_PREFIX):
            value = self.store.refs.read_ref(name)
            if value is None:
                continue
            if not is_oid(value):
                raise CorruptRef(f"ref {name!r} does not hold an object id")
            found.append(self._metadata(value, self.node(value)))
        return _newest_first_order(found)

    def history(self, run_id: str) -> builtins.list[Checkpoint]:
        """Every saved iteration of a run, newest first; metadata only (use ``load`` for one)."""
        return [self._metadata(oid, node) for oid, node in self._walk(run_id)]

    # -- deleting and restoring ----------------------------------------------------------

    def delete(self, run_id: str) -> None:
        """Remove the run's ref (idempotent; ``restore`` brings it back until gc expires
        its reflog)."""
        name = checkpoint_ref(run_id)
        for _ in retries(f"run {run_id!r} kept changing; not deleted"):
            current = self.store.refs.read_ref(name)
            if current is None or commit_or_report(
                self.store, [], RefUpdate(name, current, None, "delete")
            ):
                return

    def _last_logged(self, run_id: str) -> str | None:
        """The newest checkpoint the run's reflog names, if it is still stored."""
        log = self.store.refs.reflog(checkpoint_ref(run_id))
        last = next((entry.new for entry in reversed(log) if entry.new), None)
        if last is None or not is_oid(last):
            return None
        return last

    def restore(self, run_id: str) -> Checkpoint:
        """Bring back a deleted run at its newest checkpoint, from its reflog; returns that
        checkpoint's metadata. ConflictError if the run exists, CheckpointNotFound if its
        reflog names nothing that is still stored."""
        name = checkpoint_ref(run_id)
        if self.store.refs.read_ref(name) is not None:
            raise ConflictError(f"run {run_id!r} exists; nothing to restore")
        last = self._last_logged(run_id)
        if last is None or self.store.objects.freshen([last]):
            raise CheckpointNotFound(f"run {run_id!r} has no restorable checkpoint in its reflog")
        if not commit_or_report(self.store, [], RefUpdate(name, None, last, "restore")):
            raise ConflictError(f"run {run_id!r} was created meanwhile; nothing restored")
        return self._metadata(last, self.node(last))

    def deleted(self) -> builtins.list[Checkpoint]:
        """The newest checkpoint (metadata only) of every deleted run that ``restore`` can
        still bring back, newest first."""
        found = []
        for name in self.store.refs.reflog_names(CHECKPOINT_PREFIX):
            run_id = name[len(CHECKPOINT_PREFIX) :]
            if self.store.refs.read_ref(name) is not None:
                continue
            last = self._last_logged(run_id)
            if last is not None and self.store.objects.has(last):
                found.append(self._metadata(last, self.node(last)))
        return _newest_first_order(found)


def _newest_first_order(checkpoints: builtins.list[Checkpoint]) -> builtins.list[Checkpoint]:
    return sorted(checkpoints, key=lambda c: (-(c.created_at or utc_now()).timestamp(), c.run_id))
