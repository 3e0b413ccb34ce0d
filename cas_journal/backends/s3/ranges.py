"""Reading pack data from a bucket: ranged GETs with readahead, and a shared range cache.

A pack reader asks its byte source for a block (or a run of adjacent blocks) at a time.
Over S3 each miss is a request that costs 20-50 ms whatever its size up to a few MiB, so
``PackData`` fetches more than it was asked for, in the direction reads are going:

* a miss far from recent ones fetches ``FIRST_WINDOW`` bytes from the offset asked for;
* a miss near a recent one (within a few windows of it) continues that *stream*: the
  window doubles, up to ``MAX_WINDOW``, and extends forward or backward as the stream
  moves (a thread's path is read leaf to root through its entries, then root to leaf
  through their payloads: two streams, one going down, one going up);
* several streams are tracked at once, so interleaved walks each keep their window.

Reading a thread of 10,000 entries from a maintained pack (entries side by side, their
payloads side by side) therefore costs a logarithmic number of requests per stream plus
one per ``MAX_WINDOW`` of data, instead of one per object.

Fetched ranges go to a ``RangeCache`` shared by the packs of a store (an LRU bounded by
bytes). A pack removed meanwhile (maintenance replaced it) raises ``PackGone`` so the
caller can re-read the manifest and look again.
"""

from __future__ import annotations

import bisect
import threading
from collections import OrderedDict
from dataclasses import dataclass

from .client import S3Bucket

FIRST_WINDOW = 256 * 1024
MAX_WINDOW = 8 * 1024 * 1024
STREAMS = 4
"""Read streams remembered per pack."""
NEAR = 4
"""A miss within this many windows of a stream's last read continues that stream."""
DEFAULT_CACHE_BYTES = 96 * 1024 * 1024


class PackGone(Exception):
    """The pack's data key no longer exists (maintenance replaced the pack)."""

    def __init__(self, key: str) -> None:
        self.key = key
        super().__init__(key)


class RangeCache:
    """Byte ranges of S3 keys, least recently used evicted past ``max_bytes``."""

    def __init__(self, max_bytes: int = DEFAULT_CACHE_BYTES) -> None:
        self.max_bytes = max_bytes
        self._ranges: OrderedDict[tuple[str, int], bytes] = OrderedDict()
        self._starts: dict[str, list[int]] = {}
        self._size = 0
        self._lock = threading.Lock()

    def lookup(self, key: str, offset: int, length: int) -> bytes | None:
        """``length`` bytes at ``offset`` if one cached range holds them all."""
        with self._lock:
            starts = self._starts.get(key)
            if not starts:
                return None
            at = bisect.bisect_right(starts, offset) - 1
            while at >= 0:
                start = starts[at]
                data = self._ranges[(key, start)]
                if start + len(data) >= offset + length:
                    self._ranges.move_to_end((key, start))
                    return data[offset - start : offset - start + length]
                if start + MAX_WINDOW * 2 < offset:
                    return None
                at -= 1
            return None

    def store(self, key: str, start: int, data: bytes) -> None:
        """Remember ``data`` as the bytes of ``key`` from ``start``."""
        if len(data) > self.max_bytes // 2:
            return
        with self._lock:
            slot = (key, start)
            old = self._ranges.pop(slot, None)
            if old is not None:
                self._size -= len(old)
            else:
                bisect.insort(self._starts.setdefault(key, []), start)
            self._ranges[slot] = data
            self._size += len(data)
            while self._size > self.max_bytes:
                (old_key, old_start), dropped = self._ranges.popitem(last=False)
                self._size -= len(dropped)
                starts = self._starts[old_key]
                starts.pop(bisect.bisect_left(starts, old_start))
                if not starts:
                    del self._starts[old_key]

    def forget(self, key: str) -> None:
        """Drop every range of a key."""
        with self._lock:
            for start in self._starts.pop(key, []):
                self._size -= len(self._ranges.pop((key, start)))


@dataclass
class _Stream:
    position: int
    window: int
    direction: int


class PackData:
    """A pack's data as a byte source (``size``, ``read``) over ranged GETs."""

    def __init__(self, bucket: S3Bucket, key: str, size: int, cache: RangeCache) -> None:
        self.bucket = bucket
        self.key = key
        self._size = size
        self.cache = cache
        self._streams: list[_Stream] = []
        self._lock = threading.Lock()

    @property
    def size(self) -> int:
        """The data's length (from the manifest; the pack index must agree)."""
        return self._size

    def read(self, offset: int, length: int) -> bytes:
        """``length`` bytes at ``offset`` (fewer only past the end)."""
        length = max(0, min(length, self._size - offset))
        if length == 0 or offset < 0:
            return b""
        cached = self.cache.lookup(self.key, offset, length)
        if cached is not None:
            return cached
        start, end = self._window(offset, length)
        data = self.bucket.get_range(self.key, start, end - start, "reading a pack")
        if data is None:
            raise PackGone(self.key)
        self.cache.store(self.key, start, data)
        return data[offset - start : offset - start + length]

    def _window(self, offset: int, length: int) -> tuple[int, int]:
        """The range to fetch for a miss, following (or starting) a read stream."""
        with self._lock:
            stream = None
            for candidate in self._streams:
                if abs(offset - candidate.position) <= NEAR * candidate.window:
                    stream = candidate
                    break
            if stream is None:
                stream = _Stream(offset, FIRST_WINDOW // 2, 1)
                self._streams.insert(0, stream)
                del self._streams[STREAMS:]
            else:
                self._streams.remove(stream)
                self._streams.insert(0, stream)
                if offset < stream.position:
                    stream.direction = -1
                elif offset > stream.position:
                    stream.direction = 1
            stream.window = min(stream.window * 2, MAX_WINDOW)
            size = max(length, stream.window)
            if stream.direction >= 0:
                start, end = offset, offset + size
            else:
                start, end = offset + length - size, offset + length
            start, end = max(0, start), min(self._size, end)
            stream.position = offset
            return start, end
