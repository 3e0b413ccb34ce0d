"""Layer 1, the object model: kinds, canonical encoding, hashing, frames. Pure, no I/O."""

from .canonical import canonical_json, ensure_utc, format_time, parse_time, utc_now
from .codec import (
    DEFAULT_MAX_OBJECT_SIZE,
    ObjectCodec,
    bounded_decompress,
    canonical_form,
    hash_hex,
    is_oid,
    object_id,
    parse_canonical,
    require_oid,
)
from .kinds import Kind
from .nodes import (
    CheckpointNode,
    EntryNode,
    MessageNode,
    Node,
    ThreadStateNode,
    TreeNode,
    ancestor_at,
    meeting_point,
    parse_node,
    references,
    skip_depth,
    typed_references,
)

__all__ = [
    "DEFAULT_MAX_OBJECT_SIZE",
    "CheckpointNode",
    "EntryNode",
    "Kind",
    "MessageNode",
    "Node",
    "ObjectCodec",
    "ThreadStateNode",
    "TreeNode",
    "ancestor_at",
    "bounded_decompress",
    "canonical_form",
    "canonical_json",
    "ensure_utc",
    "format_time",
    "hash_hex",
    "is_oid",
    "meeting_point",
    "object_id",
    "parse_canonical",
    "parse_node",
    "parse_time",
    "references",
    "require_oid",
    "skip_depth",
    "typed_references",
    "utc_now",
]
