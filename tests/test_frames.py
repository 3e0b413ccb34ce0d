"""Stored frames: small objects as one raw zstd block, larger ones compressed; both are
plain zstd frames that declare their size, which any zstd reader decodes."""

from __future__ import annotations

import pytest
import zstandard
from hypothesis import given, settings
from hypothesis import strategies as st

from cas_journal.errors import CorruptObject
from cas_journal.objects import Kind, ObjectCodec, object_id
from cas_journal.objects.codec import RAW_FRAME_LIMIT, bounded_decompress, raw_frame

kinds = st.sampled_from(list(Kind))


@settings(max_examples=200, deadline=None)
@given(kind=kinds, body=st.binary(max_size=3 * RAW_FRAME_LIMIT))
def test_every_frame_is_a_zstd_frame_that_decodes_to_the_object(kind, body):
    codec = ObjectCodec()
    frame = codec.compress(kind, body)
    data = zstandard.ZstdDecompressor().decompress(frame)
    assert zstandard.frame_content_size(frame) == len(data)
    assert codec.decode(object_id(kind, body), frame) == (kind, body)
    assert codec.frames([(kind, body), (kind, body)]) == [frame, frame]
    if len(data) <= RAW_FRAME_LIMIT:
        assert frame.endswith(data)  # the raw block: the canonical form as it is


@pytest.mark.parametrize("size", [0, 1, 255, 256, 257, 65_535, 65_791])
def test_raw_frames_at_the_content_size_boundaries(size):
    data = bytes(range(256)) * (size // 256) + bytes(size % 256)
    frame = raw_frame(data)
    params = zstandard.get_frame_parameters(frame)
    assert params.content_size == size and not params.has_checksum
    assert bounded_decompress(frame, size) == data
    if size:
        with pytest.raises(CorruptObject):  # the declared size is checked against a limit
            bounded_decompress(frame, size - 1)
        with pytest.raises(CorruptObject):  # a raw block cut short
            bounded_decompress(frame[:-1], size)


def test_a_raw_frame_holds_at_most_what_its_size_field_can_say():
    with pytest.raises(ValueError):
        raw_frame(bytes(65_792))
