"""Copying objects for sync: what the destination lacks, checked, referenced-first, in
bounded batches.

The walk is depth-first from the tips (the source refs' values), through the source,
typed (each reference says what kind it must hold) and pruned at objects the
destination holds: by the closure invariant everything below those is there too, so a
sync reads what is new, not what is stored. The destination is asked about every
object's references together (one ``missing`` call), so a backend that answers from an
index (local packs, an S3 store's cached pack indexes) costs no round trip per object.
Objects the destination holds and a copied object links are the *boundary*: the caller
freshens them before a ref links them (``ObjectStore.freshen``), so a concurrent gc
cannot take them.

Order: an object goes out after everything it references (post-order), so every batch
written references only objects written before it, and a sync killed at any instant
leaves a destination whose objects are all complete; a rerun walks again, stops at what
arrived and sends the rest. Blobs reference nothing: they go out as soon as the walk
meets them, in batches written on several threads at once; a batch of structured
objects is written only after every batch before it is complete.

Bounds: a batch holds at most ``CopyLimits.batch_bytes`` of bodies (one larger object
goes alone), batches being written hold at most ``bytes_in_flight`` (plus one object),
and the walk keeps small structured bodies on its stack up to ``kept_bytes`` (others
are read again when they go out). What grows with the size of the transfer is a few
dozen bytes per object (which objects were seen, entry depths, chain lengths), never
their bodies. Every object is checked on its way (see ``adoption``); nothing is written
after the first one found wanting.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field

from ..backends import NewObject, Store
from ..errors import CorruptObject, ObjectNotFound
from ..objects import EntryNode, Kind, MessageNode, Node, SegmentNode, is_oid
from .adoption import OPAQUE, NodeChecks, blob_roles, check_blob, message_chain_length
from .reports import Progress

SMALL_BODY = 16 * 1024
ENTRY_CACHE = 1 << 16
"""Entry nodes kept for parent and skip-pointer checks (most recently met)."""
"""Structured bodies up to this size stay on the walk's stack until they go out."""


@dataclass(frozen=True)
class CopyLimits:
    """Bounds on what a copy holds in memory at once."""

    batch_bytes: int = 16 * 1024 * 1024
    """Body bytes per batch (a batch is one ``store_new`` call: one pack on most backends)."""
    batch_objects: int = 100_000
    """Objects per batch."""
    bytes_in_flight: int = 48 * 1024 * 1024
    """Body bytes in batches handed to the destination and not yet written."""
    writers: int = 3
    """Batches of blobs written at once."""
    kept_bytes: int = 32 * 1024 * 1024
    """Structured bodies kept on the walk's stack instead of being read twice."""


@dataclass
class CopyCounts:
    """What a copy wrote so far."""

    objects: int = 0
    bytes: int = 0
    batches: int = 0
    repaired: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)


class _Batches:
    """Writes objects to the destination in bounded batches, blobs in parallel, each
    batch of structured objects after everything before it."""

    def __init__(
        self,
        dst: Store,
        limits: CopyLimits,
        counts: CopyCounts,
        progress: Progress | None,
    ) -> None:
        self.dst = dst
        self.limits = limits
        self.counts = counts
        self.progress = progress
        self.blobs: list[NewObject] = []
        self.blob_bytes = 0
        self.nodes: list[NewObject] = []
        self.node_bytes = 0
        self.replaced: list[NewObject] = []
        self._pool = ThreadPoolExecutor(max(1, limits.writers), thread_name_prefix="sync-write")
        self._in_flight: list[tuple[Future[None], int]] = []

    def add(self, obj: NewObject, damaged: bool = False) -> None:
        """Queue one object (``damaged``: the destination holds a bad copy to replace)."""
        if damaged:
            self.replaced.append(obj)
            return
        if obj.kind is Kind.BLOB:
            self.blobs.append(obj)
            self.blob_bytes += len(obj.body)
            if self._full(self.blobs, self.blob_bytes):
                self.flush_blobs()
        else:
            self.nodes.append(obj)
            self.node_bytes += len(obj.body)
            if self._full(self.nodes, self.node_bytes):
                self.flush_nodes()

    def _full(self, batch: list[NewObject], size: int) -> bool:
        return size >= self.limits.batch_bytes or len(batch) >= self.limits.batch_objects

    def _submit(self, batch: list[NewObject], size: int) -> None:
        future = self._pool.submit(self._write, batch, size)
        self._in_flight.append((future, size))
        while sum(s for _, s in self._in_flight) > self.limits.bytes_in_flight:
            self._wait(everything=False)

    def _write(self, batch: list[NewObject], size: int) -> None:
        self.dst.objects.store_new(batch)
        with self.counts.lock:
            self.counts.objects += len(batch)
            self.counts.bytes += size
            self.counts.batches += 1
            done = self.counts.objects
        if self.progress is not None:
            self.progress("objects", done, None)

    def _wait(self, everything: bool) -> None:
        pending = [future for future, _ in self._in_flight]
        if not pending:
            return
        finished, _ = wait(pending, return_when="ALL_COMPLETED" if everything else FIRST_COMPLETED)
        self._in_flight = [(f, s) for f, s in self._in_flight if f not in finished]
        for future in finished:
            future.result()  # raises the first failure

    def flush_blobs(self) -> None:
        """Hand the queued blobs to a writer thread."""
        if self.blobs:
            batch, size = self.blobs, self.blob_bytes
            self.blobs, self.blob_bytes = [], 0
            self._submit(batch, size)

    def flush_nodes(self) -> None:
        """Write the queued structured objects once every earlier batch is complete."""
        self.flush_blobs()
        self._wait(everything=True)
        if self.nodes:
            batch, size = self.nodes, self.node_bytes
            self.nodes, self.node_bytes = [], 0
            self._submit(batch, size)

    def finish(self) -> None:
        """Write everything queued and wait for it; then replace damaged copies."""
        try:
            self.flush_nodes()
            self._wait(everything=True)
            if self.replaced:
                self.dst.objects.replace(self.replaced)
                self.counts.repaired += len(self.replaced)
                self.replaced = []
        finally:
            self.close()

    def close(self) -> None:
        """Stop the writer threads (waiting for batches already handed over)."""
        self._pool.shutdown(wait=True, cancel_futures=True)


@dataclass
class _Frame:
    """An object on the walk's stack: read, parsed, waiting for its references."""

    oid: str
    kind: Kind
    scope: str
    node: Node
    body: bytes | None
    pending: list[tuple[str, Kind, bool]]
    """References still to walk: ``(oid, kind, send)``."""
    send: bool


ABSENT = "absent"
DAMAGED = "damaged"
PRESENT = "present"


class ObjectCopier:
    """Copies what ``dst`` lacks of everything reachable from some tips in ``src``.

    ``repair``: also read back every object of the walk that the destination holds and
    replace the damaged ones with the source's copy (``ObjectStore.replace``); the walk
    then goes through everything reachable instead of stopping at what is present.
    """

    def __init__(
        self,
        src: Store,
        dst: Store,
        *,
        limits: CopyLimits | None = None,
        progress: Progress | None = None,
        repair: bool = False,
    ) -> None:
        self.src = src
        self.dst = dst
        self.limits = limits or CopyLimits()
        self.progress = progress
        self.repair = repair
        self.counts = CopyCounts()
        self.boundary: dict[str, tuple[Kind, str]] = {}
        """Objects the destination held that copied objects (or tips) link: their kind
        and the ref they were reached from."""
        self._present: dict[bytes, Kind] = {}
        self._done: dict[bytes, Kind] = {}
        self._damaged: set[bytes] = set()
        self._roles: dict[bytes, str] = {}
        """The role each blob met so far was checked for (see ``adoption``)."""
        self._entries: OrderedDict[bytes, EntryNode] = OrderedDict()
        """Entries met lately (checked), for parent and skip-pointer checks."""
        self.reachable: set[bytes] = set()
        """Objects known reachable from the destination's refs (see ``assume_present``)."""
        self._lengths: dict[bytes, int] = {}
        self._kept = 0
        self.checks = NodeChecks(self._entry_node, self._list_length)

    # -- what the destination holds ---------------------------------------------------

    def assume_present(self, objects: dict[str, Kind]) -> None:
        """Objects known to be in the destination with their kinds (its refs' values and
        what they reference): never asked about. Ignored when repairing (everything is
        read back then)."""
        if not self.repair:
            self._present.update(
                (bytes.fromhex(oid), kind) for oid, kind in objects.items() if is_oid(oid)
            )
            self.reachable.update(bytes.fromhex(oid) for oid in objects if is_oid(oid))

    def forget_present(self, oids: Iterable[str]) -> None:
        """Objects found gone from the destination after all: ask about them again."""
        for oid in oids:
            self._present.pop(bytes.fromhex(oid), None)
            self.boundary.pop(oid, None)

    def _status(
        self,
        refs: Sequence[tuple[str, Kind]],
        scope: str,
        roles: dict[str, str] | None = None,
    ) -> dict[str, str]:
        """ABSENT, DAMAGED or PRESENT for each reference not met before (one ``missing``
        call for all); present ones join the boundary (when not repairing, the walk
        stops at them)."""
        kinds: dict[str, Kind] = {}
        for oid, kind in refs:
            raw = bytes.fromhex(oid)
            known = self._done.get(raw) or self._present.get(raw) or kinds.get(oid)
            if known is None:
                kinds[oid] = kind
            elif known is not kind:
                raise CorruptObject(
                    f"reached from {scope}: a {known.value} where a {kind.value} is referenced",
                    oid,
                )
            elif kind is Kind.BLOB and roles and roles.get(oid, OPAQUE) != OPAQUE:
                self._check_role(oid, roles[oid], scope)
        unknown = list(kinds)
        if not unknown:
            return {}
        absent = self.dst.objects.missing(unknown)
        status: dict[str, str] = {}
        for oid in unknown:
            raw = bytes.fromhex(oid)
            if oid in absent:
                status[oid] = ABSENT
            elif self.repair and not self._intact(oid):
                status[oid] = DAMAGED
                self._damaged.add(raw)
            else:
                status[oid] = PRESENT
                self._check_kind(oid, kinds[oid], scope, (roles or {}).get(oid, OPAQUE))
                self.boundary[oid] = (kinds[oid], scope)
                if not self.repair:
                    self._present[raw] = kinds[oid]
        return status

    def _check_kind(self, oid: str, kind: Kind, scope: str, role: str) -> None:
        """A present object must be of the kind its slot expects, and a present blob fit
        its role. Its id fixes its content, so the source's copy tells (the source is
        read anyway; a destination may be remote)."""
        try:
            found, body = self.src.objects.get(oid)
        except ObjectNotFound:
            found, body = self.dst.objects.get(oid)
        if found is not kind:
            raise CorruptObject(
                f"reached from {scope}: a {found.value} where a {kind.value} is referenced", oid
            )
        if kind is Kind.BLOB:
            check_blob(oid, body, role, scope)
            self._roles[bytes.fromhex(oid)] = role

    def _check_role(self, oid: str, role: str, scope: str) -> None:
        """A blob met before in another role (or none) must fit this one too."""
        raw = bytes.fromhex(oid)
        if self._roles.get(raw) == role:
            return
        try:
            _, body = self.src.objects.get(oid)
        except ObjectNotFound:
            _, body = self.dst.objects.get(oid)
        check_blob(oid, body, role, scope)
        self._roles[raw] = role

    def _intact(self, oid: str) -> bool:
        try:
            self.dst.objects.get(oid)
        except (CorruptObject, ObjectNotFound):
            return False
        return True

    # -- the walk ---------------------------------------------------------------------

    def copy(self, tips: Iterable[tuple[str, Kind, str]]) -> None:
        """Copy everything reachable from ``(oid, kind, scope)`` tips that ``dst`` lacks;
        ``scope`` is the ref the tip is the value of (see ``adoption``)."""
        batches = _Batches(self.dst, self.limits, self.counts, self.progress)
        try:
            for oid, kind, scope in tips:
                if not is_oid(oid):
                    raise CorruptObject(f"{scope} holds {oid[:80]!r}, which is not an object id")
                self._walk(oid, kind, scope, batches)
        except BaseException:
            batches.close()
            raise
        batches.finish()

    def _walk(self, oid: str, kind: Kind, scope: str, batches: _Batches) -> None:
        raw = bytes.fromhex(oid)
        if raw in self._present:
            if self._present[raw] is not kind:
                raise CorruptObject(f"{scope} holds a {self._present[raw].value}", oid)
            self.boundary[oid] = (kind, scope)
            return
        status = self._status([(oid, kind)], scope).get(oid)
        if status is None or (status == PRESENT and not self.repair):
            return
        send = status != PRESENT
        if kind is Kind.BLOB:
            if send:
                self._send_blob(oid, OPAQUE, scope, batches)
            self._done[raw] = kind
            return
        stack = [self._open(oid, kind, scope, batches, send)]
        while stack:
            frame = stack[-1]
            if frame.pending:
                ref, ref_kind, ref_send = frame.pending.pop()
                met = self._done.get(bytes.fromhex(ref))
                if met is None:
                    stack.append(self._open(ref, ref_kind, frame.scope, batches, ref_send))
                elif met is not ref_kind:  # met meanwhile, through a slot of another kind
                    raise CorruptObject(
                        f"reached from {frame.scope}: a {met.value} where a "
                        f"{ref_kind.value} is referenced",
                        ref,
                    )
                continue
            stack.pop()
            self._close(frame, batches)

    def _read(self, oid: str, kind: Kind, scope: str, store: Store | None = None) -> bytes:
        try:
            found, body = (store or self.src).objects.get(oid)
        except ObjectNotFound as exc:
            raise CorruptObject(
                f"reached from {scope}: the source lacks a {kind.value} it references", oid
            ) from exc
        if found is not kind:
            raise CorruptObject(
                f"reached from {scope}: the source holds a {found.value} where a "
                f"{kind.value} is referenced",
                oid,
            )
        return body

    def _open(self, oid: str, kind: Kind, scope: str, batches: _Batches, send: bool) -> _Frame:
        """Read a structured object, send the blobs it needs, list the rest it needs.

        Marked done at once: any other reference to it comes from an object that is not
        below it (ids are hashes: no cycles), which the walk closes after it."""
        self._done[bytes.fromhex(oid)] = kind
        body = self._read(oid, kind, scope, None if send else self.dst)
        node = self.checks.parse(oid, kind, body, scope)
        refs = node.typed_references()
        roles = blob_roles(node)
        status = self._status(refs, scope, roles)
        pending: list[tuple[str, Kind, bool]] = []
        for ref, ref_kind in refs:
            found = status.get(ref)
            if found is None or (found == PRESENT and not self.repair):
                continue
            if ref_kind is Kind.BLOB:
                if found != PRESENT and bytes.fromhex(ref) not in self._done:
                    self._send_blob(ref, roles.get(ref, OPAQUE), scope, batches)
                self._done[bytes.fromhex(ref)] = Kind.BLOB
                continue
            pending.append((ref, ref_kind, found != PRESENT))
        pending.reverse()  # popped from the end: walked in reference order
        keep = send and len(body) <= SMALL_BODY and self._kept + len(body) <= self.limits.kept_bytes
        if keep:
            self._kept += len(body)
        return _Frame(oid, kind, scope, node, body if keep else None, pending, send)

    def _close(self, frame: _Frame, batches: _Batches) -> None:
        """Everything the object references is in place: check it and send it."""
        raw = bytes.fromhex(frame.oid)
        self.checks.check(frame.oid, frame.node, frame.scope)
        if isinstance(frame.node, EntryNode):
            self._remember_entry(raw, frame.node)
            parent = frame.node.parent
            if frame.node.skip and parent and bytes.fromhex(parent) in self.reachable:
                # the skip target is an ancestor of a reachable entry (just checked)
                self.reachable.add(bytes.fromhex(frame.node.skip))
        elif isinstance(frame.node, MessageNode):
            self._lengths[raw] = message_chain_length(frame.node, self._chain_length)
        elif isinstance(frame.node, SegmentNode):  # its keep was checked against its base
            self._lengths[raw] = frame.node.length
        if not frame.send:
            return
        body = frame.body
        if body is None:
            body = self._read(frame.oid, frame.kind, frame.scope)
        else:
            self._kept -= len(body)
        batches.add(NewObject(frame.oid, frame.kind, body), raw in self._damaged)

    def _send_blob(self, oid: str, role: str, scope: str, batches: _Batches) -> None:
        raw = bytes.fromhex(oid)
        body = self._read(oid, Kind.BLOB, scope)
        check_blob(oid, body, role, scope)
        self._roles[raw] = role
        self._done[raw] = Kind.BLOB
        batches.add(NewObject(oid, Kind.BLOB, body), raw in self._damaged)

    # -- facts about objects met before -----------------------------------------------

    def _remember_entry(self, raw: bytes, node: EntryNode) -> None:
        self._entries[raw] = node
        self._entries.move_to_end(raw)
        if len(self._entries) > ENTRY_CACHE:
            self._entries.popitem(last=False)

    def _entry_node(self, oid: str) -> EntryNode:
        """An entry met before: checked in this sync, or held by both stores."""
        raw = bytes.fromhex(oid)
        node = self._entries.get(raw)
        if node is None:
            body = self._read(oid, Kind.ENTRY, "an ancestor check")
            node = EntryNode.parse(body, oid)
            self._remember_entry(raw, node)
        return node

    def _list_length(self, oid: str, kind: Kind) -> int:
        """The length of the message list of a chain's last node or of a segment, met in
        this sync or held by the destination."""
        if kind is Kind.MESSAGE:
            return self._chain_length(oid)
        length = self._lengths.get(bytes.fromhex(oid))
        if length is None:
            node = self._dst_node(oid, Kind.SEGMENT)
            assert isinstance(node, SegmentNode)
            length = self._lengths[bytes.fromhex(oid)] = node.length
        return length

    def _chain_length(self, oid: str) -> int:
        raw = bytes.fromhex(oid)
        length = self._lengths.get(raw)
        if length is not None:
            return length
        chain: list[bytes] = []  # a chain the destination holds: count it there
        current: str | None = oid
        base = 0
        while current is not None:
            current_raw = bytes.fromhex(current)
            known = self._lengths.get(current_raw)
            if known is not None:
                base = known
                break
            node = self._dst_node(current, Kind.MESSAGE)
            assert isinstance(node, MessageNode)
            chain.append(current_raw)
            current = node.parent
        for distance, link in enumerate(reversed(chain), 1):
            self._lengths[link] = base + distance
        return self._lengths[raw]

    def _dst_node(self, oid: str, kind: Kind) -> Node:
        """A node the destination holds (checked when it was adopted there)."""
        body = self._read(oid, kind, "the destination", self.dst)
        return self.checks.parse(oid, kind, body, "the destination")
