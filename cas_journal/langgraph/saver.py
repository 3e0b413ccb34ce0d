"""CasJournalSaver: LangGraph's checkpointer interface on a cas-journal store.

``put`` writes one checkpoint record (and whatever values are new) and swaps the
namespace ref; ``put_writes`` merges pending writes into the newest record (or appends a
writes record when they are for an older checkpoint); reads follow the ref to the newest
record and, when they need an older checkpoint, an index of the chain. Channel values
whose version did not change since the parent checkpoint are not serialized again: the
new record refers to the parent's stored value. ``copy_thread`` copies refs (O(1) per
namespace), ``prune`` and ``delete_for_runs`` write a shorter chain and swap to it, and
``delete_thread`` removes the refs; all three are reflogged, so until gc expires the
reflog nothing is lost (``restore_thread`` brings a deleted thread back).

Every method has an ``a``-prefixed async twin that runs it in a worker thread.
"""

from __future__ import annotations

import asyncio
import builtins
import heapq
import random
import uuid
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from dataclasses import replace
from typing import Any, cast

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    DeltaChannelHistory,
    PendingWrite,
    get_checkpoint_id,
    get_checkpoint_metadata,
)
from langgraph.checkpoint.serde.base import SerializerProtocol

from ..errors import InvalidInputError, JournalError, ThreadExists
from ..journal import Journal
from ..journal.records import UNCHANGED, RecordChange
from .history import (
    REF_PREFIX,
    ChainIndex,
    Chains,
    Found,
    namespace_ref,
    parse_namespace_ref,
    thread_prefix,
)
from .records import (
    CHAIN,
    EXTENDS,
    ITEMS,
    LEAVES,
    Record,
    StoredValue,
    StoredWrite,
    merge_writes,
)
from .values import LEAF_SIZE, EncodedValue, ListMemo, ValueCodec

RecordList = list[tuple[str | None, Record]]
"""Records to write, oldest first, each with the oid of the record it replaces (if any)."""
Written = list[tuple[Any, str, int]]
"""List items of a record's writes: (the object, its blob id, its serialized bytes)."""

WRITTEN_TAG = "langgraph written "
LATE_WRITE_WINDOW = 8
"""Writes for one of the newest this-many records rewrite the records after it rather
than add a writes record."""
DELTA_COUNTERS = "counters_since_delta_snapshot"


def _text(value: object, what: str) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, int | uuid.UUID) and not isinstance(value, bool):
        return str(value)
    raise InvalidInputError(f"{what} must be a string, got {type(value).__name__}")


def _target(config: RunnableConfig | None) -> tuple[str, str, str | None]:
    """(thread id, namespace, checkpoint id or None) from a config."""
    configurable = (config or {}).get("configurable") or {}
    if "thread_id" not in configurable:
        raise InvalidInputError("config['configurable'] has no thread_id")
    thread_id = _text(configurable["thread_id"], "thread_id")
    namespace = _text(configurable.get("checkpoint_ns") or "", "checkpoint_ns")
    checkpoint_id = configurable.get("checkpoint_id") or None
    if checkpoint_id is not None:
        checkpoint_id = _text(checkpoint_id, "checkpoint_id")
    return thread_id, namespace, checkpoint_id


def _config(thread_id: str, namespace: str, checkpoint_id: str) -> RunnableConfig:
    return {
        "configurable": {
            "thread_id": thread_id,
            "checkpoint_ns": namespace,
            "checkpoint_id": checkpoint_id,
        }
    }


def _deleted(head: str | None, change: RecordChange) -> str | None:
    """``delete_thread``'s change of one namespace: no head."""
    return None if head is not None else UNCHANGED


def _next_string_version(current: str) -> str:
    """The version after a string version (``"<int>.<anything>"``, as other savers write)."""
    number = int(current.split(".")[0])
    return f"{number + 1:032}.{random.random():016}"


class CasJournalSaver(BaseCheckpointSaver[int]):
    """A LangGraph checkpointer storing every checkpoint in a cas-journal store.

    ``CasJournalSaver(cj.Journal.open(path_or_s3_url))``; pass ``serde=`` for another
    serializer (any object with ``dumps_typed`` / ``loads_typed``). Channel versions are
    integers. Threads are refs under ``langgraph/`` in the store, so ``pack``, ``gc``,
    ``fsck`` and ``sync`` cover them like journal threads.
    """

    def __init__(self, journal: Journal, *, serde: SerializerProtocol | None = None) -> None:
        super().__init__(serde=serde)
        self.journal = journal
        self.chains = Chains(journal.records)
        tag = uuid.uuid4().hex[:12]  # this saver's own entries in the journal's cache
        self.codec = ValueCodec(self.chains, self.serde, tag)
        self._written_tag = WRITTEN_TAG + tag

    # -- reading ----------------------------------------------------------------------------

    def _versions(self, record: Record) -> Mapping[str, Any]:
        part = record.checkpoint
        checkpoint = self.codec.decode(part) if isinstance(part, StoredValue) else part
        versions = checkpoint.get("channel_versions") if isinstance(checkpoint, dict) else None
        return versions if isinstance(versions, dict) else {}

    def _metadata(self, record: Record) -> dict[str, Any]:
        assert record.metadata is not None
        metadata = self.codec.decode_part(record.metadata)
        return metadata if isinstance(metadata, dict) else {}

    def _tuple(
        self,
        thread_id: str,
        namespace: str,
        found: Found,
        metadata: dict[str, Any] | None = None,
    ) -> CheckpointTuple:
        record = found.record
        assert record.checkpoint is not None
        checkpoint = self.codec.decode_part(record.checkpoint)
        checkpoint["id"] = record.checkpoint_id
        checkpoint["channel_values"] = {
            channel: self.codec.decode(value, channel, found.oid)
            for channel, value in record.values.items()
        }
        parent = (
            _config(thread_id, namespace, record.parent_id)
            if record.parent_id is not None
            else None
        )
        pending: builtins.list[PendingWrite] = [
            (write.task_id, write.channel, self.codec.decode(write.value, write.channel))
            for write in found.writes
        ]
        return CheckpointTuple(
            config=_config(thread_id, namespace, record.checkpoint_id),
            checkpoint=cast(Checkpoint, checkpoint),
            metadata=cast(CheckpointMetadata, metadata or self._metadata(record)),
            parent_config=parent,
            pending_writes=pending,
        )

    def _index(self, ref: str, head: str | None) -> ChainIndex:
        return self.chains.index(ref, head)

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """The checkpoint named by ``config`` (the namespace's newest without an id): the
        head record, or the records back to the one asked for."""
        thread_id, namespace, checkpoint_id = _target(config)
        head = self.chains.head(namespace_ref(thread_id, namespace))
        if head is None:
            return None
        record = self.chains.record(head)
        if record.is_checkpoint and (
            checkpoint_id == record.checkpoint_id
            or (checkpoint_id is None and record.newest_id == record.checkpoint_id)
        ):
            found: Found | None = Found(record.checkpoint_id, head, record, record.writes)
        else:
            found = self.chains.find(head, checkpoint_id)
        return None if found is None else self._tuple(thread_id, namespace, found)

    def _namespaces(
        self, config: RunnableConfig | None
    ) -> builtins.list[tuple[str, builtins.list[str]]]:
        """(thread id, namespace refs) to list, threads in ref order."""
        if config is None:
            grouped: dict[str, builtins.list[str]] = {}
            for name in self.chains.refs_under(REF_PREFIX):
                thread_id, _ = parse_namespace_ref(name)
                grouped.setdefault(thread_id, []).append(name)
            return list(grouped.items())
        thread_id, _, _ = _target(config)
        namespace = config["configurable"].get("checkpoint_ns")
        if namespace is not None:
            return [(thread_id, [namespace_ref(thread_id, _text(namespace, "checkpoint_ns"))])]
        return [(thread_id, self.chains.refs_under(thread_prefix(thread_id)))]

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        """Checkpoints matching ``config`` (a thread, optionally one namespace or one
        checkpoint; None: every thread), newest first per thread, optionally only those
        before ``before``'s checkpoint and whose metadata has every ``filter`` item."""
        wanted_id = get_checkpoint_id(config) if config else None
        before_id = get_checkpoint_id(before) if before else None
        remaining = limit
        for thread_id, refs in self._namespaces(config):
            streams = [self._stream(ref) for ref in refs]
            merged = streams[0] if len(streams) == 1 else heapq.merge(*streams, reverse=True)
            for checkpoint_id, ref, found in merged:
                if wanted_id and checkpoint_id != wanted_id:
                    if checkpoint_id < wanted_id and len(streams) == 1:
                        break
                    continue
                if before_id and checkpoint_id >= before_id:
                    continue
                metadata = self._metadata(found.record)
                if filter and not all(metadata.get(k) == v for k, v in filter.items()):
                    continue
                if remaining is not None:
                    if remaining <= 0:
                        return
                    remaining -= 1
                _, namespace = parse_namespace_ref(ref)
                yield self._tuple(thread_id, namespace, found, metadata)

    def _stream(self, ref: str) -> Iterator[tuple[str, str, Found]]:
        """A namespace's checkpoints, greatest id first, read as they are taken."""
        head = self.chains.head(ref)
        for found in self.chains.checkpoints(head):
            yield found.checkpoint_id, ref, found

    # -- writing ----------------------------------------------------------------------------

    def _parent(
        self, ref: str, head: str | None, head_record: Record | None, parent_id: str
    ) -> tuple[str, Record] | None:
        """The parent checkpoint's record and its oid, if it is in the chain."""
        if (
            head is not None
            and head_record is not None
            and head_record.is_checkpoint
            and head_record.checkpoint_id == parent_id
        ):
            return head, head_record
        index = self._index(ref, head)
        found = index.checkpoints.get(parent_id)
        return (index.order[found[0]], found[1]) if found else None

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """Store a checkpoint (its parent is ``config``'s checkpoint id) and return its
        config: one commit of the record, the new values and list elements, and the swap."""
        thread_id, namespace, parent_id = _target(config)
        ref = namespace_ref(thread_id, namespace)
        checkpoint_id = _text(checkpoint["id"], "checkpoint id")
        fields = {k: v for k, v in checkpoint.items() if k not in ("id", "channel_values")}
        parts: builtins.list[EncodedValue] = []
        stored_checkpoint = self._part(fields, parts)
        stored_metadata = self._part(dict(get_checkpoint_metadata(config, metadata)), parts)
        memo: dict[tuple[str, str | None, str | None], EncodedValue] = {}
        lists: dict[str, ListMemo] = {}

        def build(head: str | None, change: RecordChange) -> str | None:
            head_record = self.chains.record(head) if head is not None else None
            parent = None
            if parent_id is not None:
                parent = self._parent(ref, head, head_record, parent_id)
            values = self._channel_values(checkpoint, new_versions, parent, head, memo)
            for encoded in [*parts, *values.values()]:
                encoded.write(change)
            record = Record(
                checkpoint_id=checkpoint_id,
                checkpoint=stored_checkpoint,
                metadata=stored_metadata,
                parent_id=parent_id,
                values={channel: encoded.value for channel, encoded in values.items()},
            )
            lists.clear()
            for channel, encoded in values.items():
                if encoded.memo is not None:
                    lists[channel] = encoded.memo
            placed, previous = self._placed(ref, head, head_record, record)
            return self._relink(placed, previous, change, flatten=False)

        new_head = self.journal.records.update(ref, build, "put")
        assert new_head is not None
        for channel, remembered in lists.items():
            self.codec.remember_list(new_head, channel, remembered)
        return _config(thread_id, namespace, checkpoint_id)

    def _placed(
        self, ref: str, head: str | None, head_record: Record | None, record: Record
    ) -> tuple[RecordList, str | None]:
        """Where a new checkpoint record goes: after the head, with every write already
        stored for its id. Writes records for it among the last few records (LangGraph's
        background executor can deliver a checkpoint's writes, even the next one's, before
        the checkpoint) are folded into it: the records after them are rewritten and the
        new record ends the chain. Returns the records to write and the one before them."""
        if head_record is None or record.checkpoint_id > head_record.newest_id:
            return [(None, record)], head  # a new id: nothing stored for it yet
        index = self._index(ref, head)
        record = record.with_writes(index.writes_of(record.checkpoint_id))
        late = [position for position, _ in index.late_writes.get(record.checkpoint_id, ())]
        if not late or len(index.order) - late[0] > LATE_WRITE_WINDOW:
            return [(None, record)], head
        start = late[0]
        suffix: RecordList = [
            (oid, self.chains.record(oid))
            for position, oid in enumerate(index.order)
            if position >= start and position not in late
        ]
        return [*suffix, (None, record)], self.chains.record(index.order[start]).previous

    def _part(
        self, value: dict[str, Any], parts: builtins.list[EncodedValue]
    ) -> dict[str, Any] | StoredValue:
        """A checkpoint's fields or metadata as stored (a blob added to ``parts`` if the
        value is not plain JSON)."""
        encoded = self.codec.encode_part(value)
        if isinstance(encoded, EncodedValue):
            parts.append(encoded)
            return encoded.value
        return encoded

    def _channel_values(
        self,
        checkpoint: Checkpoint,
        new_versions: ChannelVersions,
        parent: tuple[str, Record] | None,
        head: str | None,
        memo: dict[tuple[str, str | None, str | None], EncodedValue],
    ) -> dict[str, EncodedValue]:
        """Each versioned channel value as stored.

        A channel whose version is the parent's keeps the parent's stored value (nothing
        serialized); a changed list reuses what the parent's list holds (see
        ``ValueCodec.encode_channel``). ``memo`` keeps encodings across compare-and-swap
        retries (keyed by channel, parent record and head)."""
        versions = checkpoint.get("channel_versions") or {}
        parent_oid, parent_record = parent if parent is not None else (None, None)
        parent_versions = self._versions(parent_record) if parent_record is not None else {}
        values: dict[str, EncodedValue] = {}
        written: Written | None = None
        for channel, value in (checkpoint.get("channel_values") or {}).items():
            if channel not in versions:
                continue
            previous = parent_record.values.get(channel) if parent_record is not None else None
            if (
                previous is not None
                and channel not in new_versions
                and parent_versions.get(channel) == versions[channel]
            ):
                assert parent_oid is not None
                kept = self.codec.list_memo(parent_oid, channel)
                values[channel] = EncodedValue(previous, memo=kept)  # the parent's value
                continue
            encoded = memo.get((channel, parent_oid, head))
            if encoded is None:
                base = None
                if parent_oid is not None and previous is not None:
                    base = self._parent_list(parent_oid, previous, channel)
                if written is None:
                    written = self._written(head)
                encoded = self.codec.encode_channel(value, base, written)
                memo[(channel, parent_oid, head)] = encoded
            values[channel] = encoded
        return values

    def _parent_list(self, record: str, value: StoredValue, channel: str) -> ListMemo | None:
        """The parent checkpoint's list of a channel, as remembered (else as stored,
        without its elements' values: a put then serializes its whole list once)."""
        if value.form not in (LEAVES, EXTENDS, CHAIN):
            return None
        found = self.codec.list_memo(record, channel)
        if found is not None:
            return found
        oids, leaves = self.chains.list_elements(value, channel)
        if value.form != LEAVES or value.leaf_size != LEAF_SIZE:
            leaves = ()
        return ListMemo((), oids, 0, leaves)

    def _written(self, head: str | None) -> Written:
        """The list items of writes this saver stored in record ``head``."""
        if head is None:
            return []
        found: Written | None = self.journal.records.recall(self._written_tag, head)
        return found or []

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """Store pending writes of a task for ``config``'s checkpoint (a regular write
        already stored under its task id and index is kept; special ones replace)."""
        thread_id, namespace, checkpoint_id = _target(config)
        if checkpoint_id is None:
            raise InvalidInputError("put_writes needs a config with a checkpoint_id")
        ref = namespace_ref(thread_id, namespace)
        task_id = _text(task_id, "task_id")
        task_path = _text(task_path, "task_path")
        added: builtins.list[StoredWrite] = []
        encodings: builtins.list[EncodedValue] = []
        items: Written = []
        for position, (channel, value) in enumerate(writes):
            encoded = self.codec.encode_write(value)
            idx = WRITES_IDX_MAP.get(channel, position)
            added.append(
                StoredWrite(task_id, idx, _text(channel, "channel"), task_path, encoded.value)
            )
            encodings.append(encoded)
            if encoded.value.form == ITEMS:
                for item, (oid, body) in zip(value, encoded.blobs, strict=True):
                    items.append((item, oid, len(body)))
        if not added:
            return
        based_on: builtins.list[str | None] = []

        def build(head: str | None, change: RecordChange) -> str | None:
            replaced = self._with_writes(ref, head, checkpoint_id, added)
            if replaced is None:
                return UNCHANGED  # nothing new: every write is stored already
            records, previous = replaced
            for encoded in encodings:
                encoded.write(change)
            based_on[:] = [head]
            return self._relink(records, previous, change, flatten=False)

        new_head = self.journal.records.update(ref, build, "writes")
        if new_head is not None and based_on and items:
            earlier = self._written(based_on[0])
            weight = 64 * (len(earlier) + len(items)) + 64
            self.journal.records.remember(self._written_tag, new_head, earlier + items, weight)

    def _with_writes(
        self, ref: str, head: str | None, checkpoint_id: str, added: builtins.list[StoredWrite]
    ) -> tuple[RecordList, str | None] | None:
        """The records to write for new writes, oldest first (each with the oid it
        replaces, if any) and the record before them; None if nothing is new.

        Writes for the newest record replace it. Writes for a record a few places back (a
        put and a write racing in LangGraph's background executor) rewrite it and the
        records after it, so each checkpoint keeps one record; writes for anything older
        are appended as a writes record."""
        head_record = self.chains.record(head) if head is not None else None
        if (
            head_record is not None
            and head_record.is_checkpoint
            and head_record.checkpoint_id == checkpoint_id
        ):
            merged = merge_writes(head_record.writes, added)
            if merged == head_record.writes:
                return None
            return [(head, head_record.with_writes(merged))], head_record.previous
        index = self._index(ref, head)
        existing = index.writes_of(checkpoint_id)
        merged = merge_writes(existing, added)
        new = tuple(write for write in merged if write not in existing)
        if not new:
            return None
        found = index.checkpoints.get(checkpoint_id)
        if (
            found is not None
            and checkpoint_id not in index.late_writes
            and len(index.order) - found[0] <= LATE_WRITE_WINDOW
        ):
            position, record = found
            records: RecordList = [(index.order[position], record.with_writes(merged))]
            records += [(oid, self.chains.record(oid)) for oid in index.order[position + 1 :]]
            return records, record.previous
        if head_record is not None and head_record.checkpoint_id == checkpoint_id:
            folded = merge_writes(head_record.writes, list(new))  # its writes record
            return [(head, head_record.with_writes(folded))], head_record.previous
        late = Record(checkpoint_id=checkpoint_id, writes=new)
        return [(None, late)], head

    def _relink(
        self, records: RecordList, previous: str | None, change: RecordChange, flatten: bool
    ) -> str | None:
        """Write ``records`` as a chain after ``previous``: each links to the one before,
        and a list extending a record rewritten here extends the new copy. A list
        extending any other record (record format 1) keeps it, or with ``flatten`` is
        stored in leaves (so records left out of a rewritten chain are garbage). Returns
        the new head."""
        renamed: dict[str, str] = {}
        newest = self.chains.record(previous).newest_id if previous is not None else ""
        for old, record in records:
            newest = max(newest, record.checkpoint_id)
            values = dict(record.values)
            for channel, value in record.values.items():
                if value.form != EXTENDS or value.base is None:
                    continue
                if value.base in renamed:
                    values[channel] = replace(value, base=renamed[value.base])
                elif flatten:
                    flat = self.codec.flattened(value, channel)
                    flat.write(change)
                    values[channel] = flat.value
            own = "" if newest == record.checkpoint_id else newest
            relinked = replace(record, values=values, previous=previous, newest=own)
            data, refs = relinked.parts()
            previous, _ = change.record(data, refs, previous)
            self.chains.remember(previous, relinked)
            if old is not None:
                renamed[old] = previous
                for channel, value in values.items():  # the same lists, in a new record
                    remembered = self.codec.list_memo(old, channel)
                    if remembered is not None and value.count == len(remembered.oids):
                        self.codec.remember_list(previous, channel, remembered)
        return previous

    def get_next_version(self, current: int | None, channel: None) -> int:
        """The version after ``current``: integers from 1 (a string version, as other
        savers write, gets the next string version)."""
        value: object = current
        if value is None:
            return 1
        if isinstance(value, str):
            return cast(int, _next_string_version(value))
        if isinstance(value, float):
            return int(value) + 1
        return cast(int, value) + 1

    # -- threads ----------------------------------------------------------------------------

    def delete_thread(self, thread_id: str) -> None:
        """Remove every namespace of a thread (restorable with ``restore_thread`` until gc
        expires the reflog)."""
        for ref in self.chains.refs_under(thread_prefix(_text(thread_id, "thread_id"))):
            self.journal.records.update(ref, _deleted, "delete", log=True)

    def restore_thread(self, thread_id: str) -> builtins.list[str]:
        """Bring back the namespaces of a deleted thread from the reflog (each to its value
        before its last deletion, if that is still stored); returns the namespaces
        restored."""
        prefix = thread_prefix(_text(thread_id, "thread_id"))
        records = self.journal.records
        restored = []
        for ref in records.deleted_names(prefix):
            if records.head(ref) is not None:
                continue
            for entry in reversed(records.reflog(ref)):
                if entry.new is None and entry.old is not None:
                    try:
                        if records.set(ref, None, entry.old, "restore", link=True):
                            restored.append(parse_namespace_ref(ref)[1])
                    except JournalError:
                        pass  # collected since: nothing to bring back
                    break
        return restored

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Make the target thread a copy of the source: every namespace ref copied, no value
        or record copied (O(1) per namespace). ThreadExists if the target has checkpoints."""
        source = _text(source_thread_id, "source_thread_id")
        target = _text(target_thread_id, "target_thread_id")
        heads = {}
        for ref in self.chains.refs_under(thread_prefix(source)):
            head = self.chains.head(ref)
            if head is not None:
                heads[namespace_ref(target, parse_namespace_ref(ref)[1])] = head
        for ref in heads:
            if self.chains.head(ref) is not None:
                raise ThreadExists(f"thread {target!r} already has checkpoints; not copied")
        for ref, head in heads.items():
            # the head is linked by the commit of the swap: a running gc keeps it
            if not self.journal.records.set(ref, None, head, f"copy of {source}", link=True):
                raise ThreadExists(f"thread {target!r} got checkpoints meanwhile; copy stopped")

    def _rewrite(self, ref: str, keep: Callable[[ChainIndex], Sequence[str]], reason: str) -> None:
        """Swap a namespace to a chain of only the checkpoints ``keep`` picks (oldest first),
        each with all of its writes; lists of record format 1 extending a dropped record
        are stored in leaves, so the dropped records are left to gc. Values are never
        copied."""

        def build(head: str | None, change: RecordChange) -> str | None:
            if head is None:
                return UNCHANGED
            index = self._index(ref, head)
            kept = keep(index)
            if len(kept) == len(index.order) and all(
                index.checkpoints[cid][0] == position for position, cid in enumerate(kept)
            ):
                return UNCHANGED  # already exactly that chain
            records: RecordList = []
            for cid in kept:
                position, source = index.checkpoints[cid]
                records.append((index.order[position], source.with_writes(index.writes_of(cid))))
            return self._relink(records, None, change, flatten=True)

        self.journal.records.update(ref, build, reason, log=True)

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """``keep_latest``: keep each namespace's newest checkpoint (and, for DeltaChannel
        state, the ancestors its reconstruction reads); ``delete``: delete the threads.
        Pruned records stay restorable from the reflog until gc expires it."""
        if strategy == "delete":
            for thread_id in thread_ids:
                self.delete_thread(thread_id)
            return
        if strategy != "keep_latest":
            raise InvalidInputError(f"unknown prune strategy {strategy!r} (keep_latest or delete)")
        for thread_id in thread_ids:
            for ref in self.chains.refs_under(thread_prefix(_text(thread_id, "thread_id"))):
                self._rewrite(ref, self._latest_with_delta_ancestors, "prune keep_latest")

    def _latest_with_delta_ancestors(self, index: ChainIndex) -> builtins.list[str]:
        """The newest checkpoint, plus the ancestors DeltaChannel replays to rebuild it:
        for each delta channel without a value at the newest checkpoint, every ancestor up
        to the nearest one holding a value (snapshot) for it."""
        if not index.checkpoints:
            return []
        latest = max(index.checkpoints)
        record = index.checkpoints[latest][1]
        counters = self._metadata(record).get(DELTA_COUNTERS)
        pending = (
            {ch for ch in counters if ch not in record.values}
            if isinstance(counters, dict)
            else set()
        )
        kept = [latest]
        current = record.parent_id
        while (
            pending and current is not None and current in index.checkpoints and current not in kept
        ):
            ancestor = index.checkpoints[current][1]
            kept.append(current)
            pending -= set(ancestor.values)
            current = ancestor.parent_id
        return sorted(kept, key=lambda cid: index.checkpoints[cid][0])

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Remove every checkpoint (with its writes) whose metadata ``run_id`` is one of
        ``run_ids``, in every thread; restorable from the reflog until gc expires it."""
        doomed = {str(run_id) for run_id in run_ids}
        if not doomed:
            return

        def survivors(index: ChainIndex) -> builtins.list[str]:
            order = sorted(index.checkpoints, key=lambda cid: index.checkpoints[cid][0])
            return [
                cid
                for cid in order
                if str(self._metadata(index.checkpoints[cid][1]).get("run_id")) not in doomed
            ]

        for ref in self.chains.refs_under(REF_PREFIX):
            self._rewrite(ref, survivors, "delete_for_runs")

    # -- DeltaChannel ---------------------------------------------------------------------

    def get_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> Mapping[str, DeltaChannelHistory]:
        """For each channel, the writes on the parent chain of ``config``'s checkpoint back
        to the nearest ancestor holding a value for it (the seed), oldest first; one walk
        of the chain's index for all channels."""
        if not channels:
            return {}
        thread_id, namespace, checkpoint_id = _target(config)
        empty: dict[str, DeltaChannelHistory] = {ch: {"writes": []} for ch in channels}
        head = self.chains.head(namespace_ref(thread_id, namespace))
        stream = self.chains.checkpoints(head)
        seen: dict[str, Found] = {}

        def checkpoint(wanted: str | None) -> Found | None:
            """A checkpoint of the chain, reading it only as far back as needed."""
            if wanted is not None and wanted in seen:
                return seen[wanted]
            for found in stream:
                seen[found.checkpoint_id] = found
                if wanted is None or found.checkpoint_id == wanted:
                    return found
                if found.checkpoint_id < wanted:
                    return None
            return None

        target = checkpoint(checkpoint_id)
        if target is None:
            return empty
        collected: dict[str, builtins.list[PendingWrite]] = {ch: [] for ch in channels}
        seeds: dict[str, Any] = {}
        remaining = set(channels)
        visited: set[str] = set()
        current = target.record.parent_id
        while current is not None and remaining and current not in visited:
            visited.add(current)
            found = checkpoint(current)
            if found is None:
                break
            for write in reversed(found.writes):
                if write.channel in remaining:
                    value = self.codec.decode(write.value, write.channel)
                    collected[write.channel].append((write.task_id, write.channel, value))
            for ch in [ch for ch in remaining if ch in found.record.values]:
                seeds[ch] = self.codec.decode(found.record.values[ch], ch, found.oid)
                remaining.discard(ch)
            current = found.record.parent_id
        result: dict[str, DeltaChannelHistory] = {}
        for ch in channels:
            entry: DeltaChannelHistory = {"writes": list(reversed(collected[ch]))}
            if ch in seeds:
                entry["seed"] = seeds[ch]
            result[ch] = entry
        return result

    # -- async twins --------------------------------------------------------------------------

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """Async ``get_tuple``."""
        return await asyncio.to_thread(self.get_tuple, config)

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        """Async ``list`` (each item read in a worker thread)."""
        items = self.list(config, filter=filter, before=before, limit=limit)
        while True:
            item = await asyncio.to_thread(next, items, None)
            if item is None:
                return
            yield item

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """Async ``put``."""
        return await asyncio.to_thread(self.put, config, checkpoint, metadata, new_versions)

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """Async ``put_writes``."""
        await asyncio.to_thread(self.put_writes, config, writes, task_id, task_path)

    async def adelete_thread(self, thread_id: str) -> None:
        """Async ``delete_thread``."""
        await asyncio.to_thread(self.delete_thread, thread_id)

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Async ``delete_for_runs``."""
        await asyncio.to_thread(self.delete_for_runs, run_ids)

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Async ``copy_thread``."""
        await asyncio.to_thread(self.copy_thread, source_thread_id, target_thread_id)

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """Async ``prune``."""
        await asyncio.to_thread(self.prune, thread_ids, strategy=strategy)

    async def arestore_thread(self, thread_id: str) -> builtins.list[str]:
        """Async ``restore_thread``."""
        return await asyncio.to_thread(self.restore_thread, thread_id)

    async def aget_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> Mapping[str, DeltaChannelHistory]:
        """Async ``get_delta_channel_history``."""
        return await asyncio.to_thread(
            lambda: self.get_delta_channel_history(config=config, channels=channels)
        )
