"""What sync checks before it adopts objects and refs from another store.

A source may be damaged, buggy or hostile. Every object sync copies is hash-checked when
it is read (the source's ``get`` verifies it) and parsed strictly; on top of that sync
checks what the journal relies on when it reads the objects back:

* kinds: every reference holds an object of the kind its slot expects (an entry's
  payload a blob, its parent and skip pointer entries, a state's heads entries, ...);
* entries: the depth is the parent's depth + 1 and the skip pointer names an entry at
  the depth ``skip_depth`` gives (so ancestor checks that hop along skip pointers land
  where they should);
* thread states: every state reachable from ``threads/<id>`` (the ref's state and the
  states it follows) names thread ``<id>``, and its metadata parses as ThreadMeta;
* checkpoints: every checkpoint reachable from ``checkpoints/<run>`` names run
  ``<run>``, and its ``message_count`` is the length of its message list (a message
  chain, or a segment);
* segments: a segment keeps no more messages than its base's list holds;
* blobs, by the slot that references them: an entry payload parses as a payload, a
  checkpoint message (of a run) as a JSON object, a system prompt as UTF-8 text; blobs
  of LangGraph trees (``langgraph/`` refs) are their integration's bytes, opaque here.

An object found wanting raises CorruptObject naming it and the ref it was reached from,
before anything that references it is written, and before any ref moves.
"""

from __future__ import annotations

import json
from collections.abc import Callable

from ..errors import CorruptObject, JournalError
from ..journal.payload import parse_payload
from ..journal.state import CHECKPOINT_PREFIX, THREAD_PREFIX, meta_from_state
from ..objects import (
    CheckpointNode,
    EntryNode,
    Kind,
    MessageNode,
    Node,
    SegmentNode,
    ThreadStateNode,
    parse_node,
    skip_depth,
)

BlobRole = str
"""What a blob is used as: ``PAYLOAD``, ``MESSAGE``, ``PROMPT`` or ``OPAQUE``."""
PAYLOAD: BlobRole = "payload"
MESSAGE: BlobRole = "message"
PROMPT: BlobRole = "prompt"
OPAQUE: BlobRole = "opaque"


def blob_roles(node: Node) -> dict[str, BlobRole]:
    """The blobs a structured node references, with the role each plays."""
    if isinstance(node, EntryNode):
        return {node.payload: PAYLOAD}
    if isinstance(node, MessageNode):
        return {node.message: MESSAGE}
    if isinstance(node, CheckpointNode) and node.system_prompt:
        return {node.system_prompt: PROMPT}
    return {}


def check_blob(oid: str, body: bytes, role: BlobRole, scope: str) -> None:
    """Refuse a blob that cannot play its role (CorruptObject)."""
    if role == PAYLOAD:
        try:
            parse_payload(oid, body)
        except CorruptObject as exc:
            raise CorruptObject(f"{_from(scope)}: {exc}") from exc
    elif role == MESSAGE and scope.startswith(CHECKPOINT_PREFIX):
        # a run's messages are JSON; other trees (LangGraph) chain bytes of their own
        try:
            value = json.loads(body)
        except (ValueError, UnicodeDecodeError, RecursionError):
            value = None
        if not isinstance(value, dict):
            raise CorruptObject(f"{_from(scope)}: checkpoint message is not a JSON object", oid)
    elif role == PROMPT:
        try:
            body.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise CorruptObject(f"{_from(scope)}: system prompt is not UTF-8", oid) from exc


def _from(scope: str) -> str:
    return f"reached from {scope}"


class NodeChecks:
    """Checks structured objects on their way in.

    ``entry_node(oid)`` gives an entry met earlier in the same sync (checked then) or
    held by the destination (checked when it was adopted there); ``list_length(oid,
    kind)`` the length of the message list of a message chain's last node or of a
    segment likewise. Both raise CorruptObject if the object is not of the expected kind.
    """

    MAX_HOPS = 512
    """Hops an ancestor search may take (a valid skip list needs about 2 log2(depth))."""

    def __init__(
        self,
        entry_node: Callable[[str], EntryNode],
        list_length: Callable[[str, Kind], int],
    ) -> None:
        self.entry_node = entry_node
        self.list_length = list_length

    def parse(self, oid: str, kind: Kind, body: bytes, scope: str) -> Node:
        """Parse a structured object and check it against its scope; returns the node."""
        try:
            node = parse_node(kind, body, oid)
        except CorruptObject as exc:
            raise CorruptObject(f"{_from(scope)}: {exc}") from exc
        if node is None:
            raise CorruptObject(f"{_from(scope)}: a blob where a structure was expected", oid)
        return node

    def check(self, oid: str, node: Node, scope: str) -> None:
        """The checks that need the objects a node references (call them once those were
        checked: sync checks in referenced-first order)."""
        try:
            if isinstance(node, EntryNode):
                self._entry(oid, node)
            elif isinstance(node, ThreadStateNode):
                self._state(oid, node, scope)
            elif isinstance(node, CheckpointNode):
                self._checkpoint(oid, node, scope)
            elif isinstance(node, SegmentNode):
                self._segment(oid, node)
        except CorruptObject as exc:
            if _from(scope) in str(exc):
                raise
            raise CorruptObject(f"{_from(scope)}: {exc}") from exc

    def ancestor(self, oid: str, depth: int) -> str:
        """The ancestor of entry ``oid`` at ``depth``, hopping along skip pointers."""
        node = self.entry_node(oid)
        for _ in range(self.MAX_HOPS):
            if node.depth <= depth:
                if node.depth < depth:
                    raise CorruptObject(f"no ancestor at depth {depth}", oid)
                return oid
            if node.skip is not None and skip_depth(node.depth) >= depth:
                oid = node.skip
            elif node.parent is not None:
                oid = node.parent
            else:
                raise CorruptObject(f"no ancestor at depth {depth}", oid)
            node = self.entry_node(oid)
        raise CorruptObject(f"ancestor search from an entry took over {self.MAX_HOPS} hops", oid)

    def _entry(self, oid: str, node: EntryNode) -> None:
        if node.parent is not None and self.entry_node(node.parent).depth != node.depth - 1:
            raise CorruptObject("entry depth is not its parent's depth + 1", oid)
        if node.skip is not None:
            assert node.parent is not None  # parse checked: depth >= 2 has both
            if self.ancestor(node.parent, skip_depth(node.depth)) != node.skip:
                raise CorruptObject("entry skip pointer does not name its ancestor", oid)

    def _state(self, oid: str, node: ThreadStateNode, scope: str) -> None:
        if not scope.startswith(THREAD_PREFIX):
            raise CorruptObject("a thread state where a checkpoint was expected", oid)
        thread_id = scope[len(THREAD_PREFIX) :]
        if node.meta.get("id") != thread_id:
            raise CorruptObject(
                f"thread state names thread {str(node.meta.get('id'))[:80]!r}, "
                f"not {thread_id[:80]!r}",
                oid,
            )
        try:
            meta_from_state(oid, node)
        except JournalError as exc:
            raise CorruptObject(f"thread metadata does not parse: {exc}", oid) from exc

    def _checkpoint(self, oid: str, node: CheckpointNode, scope: str) -> None:
        if not scope.startswith(CHECKPOINT_PREFIX):
            raise CorruptObject("a checkpoint where a thread state was expected", oid)
        run_id = scope[len(CHECKPOINT_PREFIX) :]
        if node.run_id != run_id:
            raise CorruptObject(
                f"checkpoint names run {node.run_id[:80]!r}, not {run_id[:80]!r}", oid
            )
        target = node.message_list
        length = 0 if target is None else self.list_length(*target)
        if length != node.message_count:
            raise CorruptObject(
                f"checkpoint claims {node.message_count} messages, its list holds {length}", oid
            )

    def _segment(self, oid: str, node: SegmentNode) -> None:
        below = node.below
        if below is not None and node.keep > (held := self.list_length(*below)):
            raise CorruptObject(f"segment keeps {node.keep} messages of a list of {held}", oid)


def message_chain_length(node: MessageNode, parent_length: Callable[[str], int]) -> int:
    """Length of the chain ending at ``node`` given its parent's."""
    return 1 + (0 if node.parent is None else parent_length(node.parent))
