"""Layer 3, the journal: threads, entries, forks, leases, context building, checkpoints."""

from .batch import Batch
from .checkpoints import CheckpointStore
from .context import build_context, build_context_projection, estimate_tokens
from .helpers import (
    append_active_tools,
    append_compaction,
    append_failure,
    append_message,
    append_turn_marker,
    entry_type_for_message,
)
from .journal import Journal
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
from .payload import prepare_entry, raw_for_entry, stable_hash

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
    "Role",
    "ThreadMeta",
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
