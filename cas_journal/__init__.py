"""cas-journal: content-addressed, deduplicated storage for agent journals and checkpoints.

import cas_journal as cj
with cj.Journal.open("path/to/store") as j:
    j.create_thread(cj.ThreadMeta(id="t1"))
    j.append(cj.Entry(thread_id="t1", type=cj.EntryType.USER_MESSAGE,
                      message=cj.Message(role="user", content="hi")))
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .errors import (
    ActiveTurn,
    AmbiguousPrefix,
    AppendCommittedError,
    CheckpointNotFound,
    ConflictError,
    CorruptObject,
    CorruptRef,
    EntryNotFound,
    InvalidInputError,
    InvalidParent,
    JournalError,
    NotFoundError,
    ObjectNotFound,
    StorageError,
    StoreFormatError,
    StoreUpgradeRequired,
    ThreadExists,
    ThreadNotFound,
)
from .journal import __all__ as _journal_names
from .lazy import lazy_exports

if TYPE_CHECKING:
    from .backends.open import StoreOptions
    from .journal import (
        ArtifactRef,
        Batch,
        Checkpoint,
        CheckpointStore,
        CompactionResult,
        ContextProjection,
        ContextUsage,
        Entry,
        EntryType,
        ForkPosition,
        Journal,
        Message,
        ProjectedSegment,
        ProjectionPurpose,
        Role,
        ThreadMeta,
        ThreadSnapshot,
        ThreadTitleSource,
        ThreadTitleStatus,
        ToolResultView,
        TurnLease,
        TurnMarkerStatus,
        append_active_tools,
        append_compaction,
        append_failure,
        append_message,
        append_turn_marker,
        build_context,
        build_context_projection,
        entry_type_for_message,
        estimate_tokens,
        prepare_entry,
        raw_for_entry,
        stable_hash,
    )

__version__ = "0.1.0"

# Names of ``cas_journal.journal`` are imported on first use (PEP 562): importing the
# package, the command line or the object layer does not build the pydantic models until
# something needs them.


__getattr__, __dir__ = lazy_exports(__name__, dict.fromkeys(_journal_names, ".journal"))


__all__ = [
    "ActiveTurn",
    "AmbiguousPrefix",
    "AppendCommittedError",
    "ArtifactRef",
    "Batch",
    "Checkpoint",
    "CheckpointNotFound",
    "CheckpointStore",
    "CompactionResult",
    "ConflictError",
    "ContextProjection",
    "ContextUsage",
    "CorruptObject",
    "CorruptRef",
    "Entry",
    "EntryNotFound",
    "EntryType",
    "ForkPosition",
    "InvalidInputError",
    "InvalidParent",
    "Journal",
    "JournalError",
    "Message",
    "NotFoundError",
    "ObjectNotFound",
    "ProjectedSegment",
    "ProjectionPurpose",
    "Role",
    "StorageError",
    "StoreFormatError",
    "StoreOptions",
    "StoreUpgradeRequired",
    "ThreadExists",
    "ThreadMeta",
    "ThreadNotFound",
    "ThreadSnapshot",
    "ThreadTitleSource",
    "ThreadTitleStatus",
    "ToolResultView",
    "TurnLease",
    "TurnMarkerStatus",
    "__version__",
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
