"""Layer 3, the journal: threads, entries, forks, leases, context building, checkpoints."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..lazy import lazy_exports

if TYPE_CHECKING:
    from ..backends.open import StoreOptions
    from .batch import (
        Batch,
    )
    from .checkpoints import (
        CheckpointStore,
    )
    from .context import (
        build_context,
        build_context_projection,
        estimate_tokens,
    )
    from .helpers import (
        append_active_tools,
        append_compaction,
        append_failure,
        append_message,
        append_turn_marker,
        entry_type_for_message,
    )
    from .journal import (
        Journal,
    )
    from .models import (
        ArtifactRef,
        Checkpoint,
        CompactionResult,
        ContextProjection,
        ContextUsage,
        Entry,
        EntryType,
        ForkPosition,
        Message,
        ProjectedSegment,
        ProjectionPurpose,
        Role,
        ThreadMeta,
        ThreadTitleSource,
        ThreadTitleStatus,
        ToolResultView,
        TurnLease,
        TurnMarkerStatus,
    )
    from .payload import (
        prepare_entry,
        raw_for_entry,
        stable_hash,
    )
    from .records import RecordStore
    from .snapshot import ThreadSnapshot

_LAZY: dict[str, str] = {
    "Batch": ".batch",
    "CheckpointStore": ".checkpoints",
    "build_context": ".context",
    "build_context_projection": ".context",
    "estimate_tokens": ".context",
    "append_active_tools": ".helpers",
    "append_compaction": ".helpers",
    "append_failure": ".helpers",
    "append_message": ".helpers",
    "append_turn_marker": ".helpers",
    "entry_type_for_message": ".helpers",
    "Journal": ".journal",
    "ArtifactRef": ".models",
    "Checkpoint": ".models",
    "CompactionResult": ".models",
    "ContextProjection": ".models",
    "ContextUsage": ".models",
    "Entry": ".models",
    "EntryType": ".models",
    "ForkPosition": ".models",
    "Message": ".models",
    "ProjectedSegment": ".models",
    "ProjectionPurpose": ".models",
    "Role": ".models",
    "ThreadMeta": ".models",
    "ThreadTitleSource": ".models",
    "ThreadTitleStatus": ".models",
    "ToolResultView": ".models",
    "TurnLease": ".models",
    "TurnMarkerStatus": ".models",
    "prepare_entry": ".payload",
    "raw_for_entry": ".payload",
    "stable_hash": ".payload",
    "RecordStore": ".records",
    "ThreadSnapshot": ".snapshot",
    "StoreOptions": "..backends.open",
}
"""Where each public name lives. Names are imported on first use (PEP 562), so that a
submodule that needs no models (``refnames``, ``listing``) can be imported without
building the pydantic models."""


__getattr__, __dir__ = lazy_exports(__name__, _LAZY)


__all__ = [
    "ArtifactRef",
    "Batch",
    "Checkpoint",
    "CheckpointStore",
    "CompactionResult",
    "ContextProjection",
    "ContextUsage",
    "Entry",
    "EntryType",
    "ForkPosition",
    "Journal",
    "Message",
    "ProjectedSegment",
    "ProjectionPurpose",
    "RecordStore",
    "Role",
    "StoreOptions",
    "ThreadMeta",
    "ThreadSnapshot",
    "ThreadTitleSource",
    "ThreadTitleStatus",
    "ToolResultView",
    "TurnLease",
    "TurnMarkerStatus",
    "append_active_tools",
    "append_compaction",
    "append_failure",
    "append_message",
    "append_turn_marker",
    "build_context",
    "build_context_projection",
    "entry_type_for_message",
    "estimate_tokens",
    "prepare_entry",
    "raw_for_entry",
    "stable_hash",
]
