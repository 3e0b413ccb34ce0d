"""Packs: many objects in one data stream, found through a sorted index.

This package knows the pack format and nothing about where packs live: it sits between
the object model (``objects``) and the backends, which store a pack's two parts (its
data and its index) as files, keys or anything else.

* ``index``: the index layout; ``PackIndex`` decodes one with every bound checked and
  looks objects up; ``encode_index`` builds one.
* ``reader``: ``PackReader`` reads and verifies objects through a ``ByteSource``
  (``read(offset, length)`` and ``size``: an mmap, ranged GETs, ...), fetching runs of
  adjacent blocks in one read, and walks a whole pack reading each block once.
* ``writer``: ``PackWriter`` streams pack data to a ``PackSink`` and returns the index.
* ``merging``: which batch packs to merge so that their number stays logarithmic.

The byte layout of both parts is specified in ``index`` and ``reader`` (and in
docs/format.md); golden packs in fixtures/ pin it.
"""

from .index import (
    INDEX_MAGIC,
    MAX_SHARED_BLOCK,
    PACK_MAGIC,
    BlockEntry,
    IndexEntry,
    PackIndex,
    encode_index,
    pack_name,
)
from .reader import BlockCache, BlockRead, BufferSource, ByteSource, PackReader, WalkedObject
from .writer import DEFAULT_BLOCK_SIZE, PackedObject, PackSink, PackWriter, WrittenPack

__all__ = [
    "DEFAULT_BLOCK_SIZE",
    "INDEX_MAGIC",
    "MAX_SHARED_BLOCK",
    "PACK_MAGIC",
    "BlockCache",
    "BlockEntry",
    "BlockRead",
    "BufferSource",
    "ByteSource",
    "IndexEntry",
    "PackIndex",
    "PackReader",
    "PackSink",
    "PackWriter",
    "PackedObject",
    "WalkedObject",
    "WrittenPack",
    "encode_index",
    "pack_name",
]
