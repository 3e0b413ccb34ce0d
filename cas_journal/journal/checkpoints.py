"""Run checkpoints, deduplicated: a run's message list saved every iteration.

Each message is a blob; a chain of message nodes (message blob + previous node) spells
the list, so two lists with a common prefix share every node of it. A checkpoint object
holds the run metadata, the last node of its chain and the previous checkpoint of the
run, and ``checkpoints/<run>`` points at the newest: saving iteration k+1 costs only the
messages that are new or changed since iteration k, and no iteration is overwritten.
"""

from __future__ import annotations

import builtins
import heapq
import json
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

from ..backends import NewObject, RefUpdate, Store
from ..errors import CheckpointNotFound, ConflictError, CorruptObject, CorruptRef, InvalidInputError
from ..names import validate_id
from ..objects import (
    CheckpointNode,
    Kind,
    MessageNode,
    canonical_json,
    ensure_utc,
    format_time,
    is_oid,
    object_id,
    parse_time,
    utc_now,
)
from .cache import BoundedCache
from .commit import MAX_ATTEMPTS, commit_or_report, pause
from .models import Checkpoint
from .state import CHECKPOINT_PREFIX


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
    return replace(content, previous=(newer, older))


def checkpoint_ref(run_id: str) -> str:
    """The ref name of a run (validating the id)."""
    return CHECKPOINT_PREFIX + validate_id(run_id, "run id")


class CheckpointStore:
    """save / load / has_checkpoint / delete / list / history for run checkpoints."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._nodes: BoundedCache[str, CheckpointNode] = BoundedCache(4096)
        self._links: BoundedCache[str, MessageNode] = BoundedCache(1 << 16)

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

    def _link(self, oid: str) -> MessageNode:
        link = self._links.get(oid)
        if link is None:
            link = self._links.put(oid, MessageNode.parse(self._get(oid, Kind.MESSAGE), oid))
        return link

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
        try:
            return self._get(oid, Kind.BLOB).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise CorruptObject("system prompt is not UTF-8", oid) from exc

    def _messages(self, last: str | None, count: int) -> list[dict[str, Any]]:
        blobs: list[str] = []
        current = last
        while current is not None:
            link = self._link(current)
            blobs.append(link.message)
            current = link.parent
        if len(blobs) != count:
            raise CorruptObject(f"message chain has {len(blobs)} links, expected {count}", last)
        blobs.reverse()
        messages = []
        for oid in blobs:
            try:
                value = json.loads(self._get(oid, Kind.BLOB))
            except ValueError as exc:
                raise CorruptObject("checkpoint message is not JSON", oid) from exc
            if not isinstance(value, dict):
                raise CorruptObject("checkpoint message is not a JSON object", oid)
            messages.append(value)
        return messages

    # -- the API -------------------------------------------------------------------------

    def save(self, checkpoint: Checkpoint) -> Checkpoint:
        """Save one iteration; returns it with created_at and message_count filled in."""
        with self.store.objects.write_guard():  # from the reuse check to the ref swap
            return self._save(checkpoint)

    def _save(self, checkpoint: Checkpoint) -> Checkpoint:
        name = checkpoint_ref(checkpoint.run_id)
        created = ensure_utc(checkpoint.created_at) if checkpoint.created_at else utc_now()
        links: list[tuple[str, bytes, str, bytes]] = []  # node oid and body, message oid and body
        parent: str | None = None
        for index, message in enumerate(checkpoint.messages):
            if not isinstance(message, dict):
                raise InvalidInputError(f"message {index} is not a JSON object")
            body = canonical_json(message)
            message_oid = object_id(Kind.BLOB, body)
            link = MessageNode(message_oid, parent).body()
            parent = object_id(Kind.MESSAGE, link)
            links.append((parent, link, message_oid, body))
        first_new = self._first_missing([link[0] for link in links])
        objects: list[NewObject] = []
        if first_new > 0:  # re-put the last shared link: it freshens it for gc's grace period
            oid, link, _, _ = links[first_new - 1]
            objects.append(NewObject(oid, Kind.MESSAGE, link))
        for oid, link, message_oid, body in links[first_new:]:
            objects += [
                NewObject(message_oid, Kind.BLOB, body),
                NewObject(oid, Kind.MESSAGE, link),
            ]
        prompt_oid = None
        if checkpoint.system_prompt:
            prompt = checkpoint.system_prompt.encode("utf-8")
            prompt_oid = object_id(Kind.BLOB, prompt)
            objects.append(NewObject(prompt_oid, Kind.BLOB, prompt))
        previous = self._head(checkpoint.run_id)
        for attempt in range(MAX_ATTEMPTS):
            node = CheckpointNode(
                run_id=checkpoint.run_id,
                created_at=format_time(created),
                iteration=checkpoint.iteration,
                task_name=checkpoint.task_name,
                input_tokens=checkpoint.input_tokens,
                output_tokens=checkpoint.output_tokens,
                message_count=len(links),
                messages=parent,
                system_prompt=prompt_oid,
                previous=(previous,) if previous else (),
            )
            body = node.body()
            oid = object_id(Kind.CHECKPOINT, body)
            saved = checkpoint.model_copy(
                update={"created_at": parse_time(node.created_at), "message_count": len(links)}
            )
            swap = RefUpdate(name, previous, oid, f"save {checkpoint.iteration}")
            objects.append(NewObject(oid, Kind.CHECKPOINT, body))
            if commit_or_report(self.store, objects, swap, result=saved):
                self._nodes.put(oid, node)
                return saved
            objects = []
            previous = self._head(checkpoint.run_id)
            pause(attempt)
        raise ConflictError(f"run {checkpoint.run_id!r} kept changing; checkpoint not saved")

    def _first_missing(self, chain: list[str]) -> int:
        """Index of the first link not stored (links before it are, by the closure rule)."""
        lo, hi = 0, len(chain)
        while lo < hi:
            mid = (lo + hi) // 2
            if self.store.objects.has(chain[mid]):
                lo = mid + 1
            else:
                hi = mid
        return lo

    def load(self, run_id: str, iteration: int | None = None) -> Checkpoint:
        """The newest checkpoint of a run (or the newest at ``iteration``), with its messages."""
        for oid, node in self._walk(run_id):
            if iteration is None or node.iteration == iteration:
                checkpoint = self._metadata(oid, node)
                checkpoint.messages = self._messages(node.messages, node.message_count)
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

    def delete(self, run_id: str) -> None:
        """Remove the run's ref (idempotent; restorable from the reflog until gc expires it)."""
        name = checkpoint_ref(run_id)
        while True:
            current = self.store.refs.read_ref(name)
            if current is None or commit_or_report(
                self.store, [], RefUpdate(name, current, None, "delete")
            ):
                return

    def list(self) -> list[Checkpoint]:
        """Every run's newest checkpoint, newest first; metadata only (messages not read)."""
        found = []
        for name in self.store.refs.list_refs(CHECKPOINT_PREFIX):
            value = self.store.refs.read_ref(name)
            if value is None:
                continue
            if not is_oid(value):
                raise CorruptRef(f"ref {name!r} does not hold an object id")
            found.append(self._metadata(value, self.node(value)))
        found.sort(key=lambda c: (-(c.created_at or utc_now()).timestamp(), c.run_id))
        return found

    def history(self, run_id: str) -> builtins.list[Checkpoint]:
        """Every saved iteration of a run, newest first; metadata only (use ``load`` for one)."""
        return [self._metadata(oid, node) for oid, node in self._walk(run_id)]
