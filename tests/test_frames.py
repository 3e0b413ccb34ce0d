"""Stored frames: small objects as one raw zstd block, larger ones compressed; both are
plain zstd frames that declare their size, which any zstd reader decodes."""

from __future__ import annotations

import pytest
import zstandard
from hypothesis import given, settings
from hypothesis import strategies as st

from cas_journal.errors import CorruptObject
from cas_journal.objects import Kind, ObjectCodec, object_id
from cas_journal.objects.codec import (
    RAW_FRAME_LIMIT,
    bounded_decompress,
    hash_hex,
    parse_canonical,
    raw_frame,
)

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
    oid = object_id(kind, body)
    rows = codec.rows([(oid, kind, body), (oid, kind, body)])
    assert rows == [(bytes.fromhex(oid), frame)] * 2
    assert all(type(raw) is bytearray and type(got) is bytearray for raw, got in rows)
    assert rows[0][1] is not rows[1][1]  # a frame of its own for every row
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


def _zstd_reading(frame: bytes, limit: int) -> bytes | None:
    """What zstd itself reads from ``frame`` under ``bounded_decompress``'s rules (None:
    refused)."""
    try:
        declared = zstandard.frame_content_size(frame)
        if declared < 0 or declared > limit:
            return None
        data = zstandard.ZstdDecompressor().decompress(
            frame, max_output_size=max(declared, 1), allow_extra_data=False
        )
    except zstandard.ZstdError:
        return None
    return data if len(data) == declared else None


@settings(max_examples=400, deadline=None)
@given(
    data=st.binary(max_size=RAW_FRAME_LIMIT + 8),
    edit=st.sampled_from(["none", "byte", "cut", "extend"]),
    where=st.integers(min_value=0),
    value=st.integers(min_value=0, max_value=255),
    slack=st.integers(min_value=-2, max_value=2),
)
def test_raw_frames_read_without_zstd_read_as_zstd_reads_them(data, edit, where, value, slack):
    # bounded_decompress takes a frame that is exactly raw_frame(its content) apart
    # itself; any frame, damaged or not, must read as zstd reads it (or be refused)
    frame = bytearray(raw_frame(data))
    if edit == "byte":
        frame[where % len(frame)] = value
    elif edit == "cut":
        del frame[where % len(frame) :]
    elif edit == "extend":
        frame.append(value)
    frame_bytes = bytes(frame)
    limit = max(len(data) + slack, 0)
    expected = _zstd_reading(frame_bytes, limit)
    if expected is None:
        with pytest.raises(CorruptObject):
            bounded_decompress(frame_bytes, limit)
    else:
        assert bounded_decompress(frame_bytes, limit) == expected


def test_a_header_met_before_still_has_its_length_checked():
    # parse_canonical remembers headers it has checked; a later object with the same
    # header and another body length is refused all the same
    body = b"x" * 40
    good = b"blob 40\0" + body
    assert parse_canonical(hash_hex(good), good) == (Kind.BLOB, body)
    for bad in (good + b"y", good[:-1]):
        with pytest.raises(CorruptObject, match="length does not match"):
            parse_canonical(hash_hex(bad), bad)


def test_object_ids_of_every_size_from_kept_headers_and_after_they_start_over(monkeypatch):
    from cas_journal.objects import codec
    from cas_journal.objects.codec import canonical_form

    monkeypatch.setattr(codec, "HEADER_SIZES", 50)
    for kind in (Kind.BLOB, Kind.ENTRY):
        for size in [*range(120), *range(120)]:  # met first, then kept (or made again)
            body = bytes(range(256))[:size] * 2
            assert object_id(kind, body) == hash_hex(canonical_form(kind, body))
            assert codec.ObjectCodec().rows([("00" * 32, kind, body)])[0][1] == (
                ObjectCodec().compress(kind, body)
            )
        assert 0 < len(codec._HEADERS_BY_SIZE[kind]) <= 50
