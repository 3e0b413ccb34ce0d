"""Message content blocks: golden vectors, validation, byte-identical string content."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, ConfigDict

import cas_journal as cj
from cas_journal.objects import canonical_json

FIXTURES = Path(__file__).parent.parent / "fixtures"


def test_golden_messages():
    sys.path.insert(0, str(FIXTURES))
    from make_golden_messages import build

    pinned = json.loads((FIXTURES / "golden_messages.json").read_text())
    assert len(pinned) >= 6
    assert build() == pinned


def test_golden_message_payloads_parse_back_to_the_same_bytes():
    for vector in json.loads((FIXTURES / "golden_messages.json").read_text()):
        entry = cj.Entry.model_validate(json.loads(vector["raw"]))
        assert cj.raw_for_entry(entry) == vector["raw"]


class LegacyMessage(BaseModel):
    """The message model as it was before content blocks (content is a string)."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    role: str = ""
    content: str = ""
    reasoning: str = ""
    tool_call_id: str = ""
    tool_name: str = ""
    tool_args: str = ""
    entry_id: str = ""
    parent_entry_id: str = ""
    kind: str = ""
    compaction_id: str = ""
    compaction_generation: int = 0
    compaction_window_id: str = ""


text = st.text(max_size=12)
legacy_messages = st.builds(
    LegacyMessage,
    role=st.sampled_from(["", "user", "assistant", "tool", "system"]),
    content=text,
    reasoning=text,
    tool_call_id=text,
    tool_name=text,
    tool_args=text,
    kind=st.sampled_from(["", "control_signal"]),
    compaction_id=text,
    compaction_generation=st.integers(0, 3),
)


@settings(max_examples=150, deadline=None)
@given(legacy=legacy_messages)
def test_string_content_encodes_exactly_as_before(legacy):
    entry = cj.Entry(type=cj.EntryType.CUSTOM, message=cj.Message(**legacy.model_dump()))
    before = {
        "message": legacy.model_dump(mode="json", exclude_defaults=True),
        "type": "custom",
    }
    assert cj.raw_for_entry(entry).encode() == canonical_json(before)


json_scalars = st.none() | st.booleans() | st.integers(-(2**53), 2**53) | text
json_values = st.recursive(
    json_scalars | st.floats(allow_nan=False, allow_infinity=False),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(text, inner, max_size=3),
    max_leaves=8,
)
extras = st.dictionaries(st.sampled_from(["cache_control", "citations", "x"]), json_values)
ids = st.text("abc123_", min_size=1, max_size=6)


def _with(extra: dict[str, Any], block: dict[str, Any]) -> dict[str, Any]:
    return {**extra, **block}


text_blocks = st.builds(_with, extras, st.builds(lambda t: {"type": "text", "text": t}, text))
image_blocks = st.builds(
    _with,
    extras,
    st.one_of(
        st.builds(
            lambda d: {
                "type": "image",
                "source": {"type": "base64", "media_type": "image/png", "data": d},
            },
            text,
        ),
        st.builds(lambda u: {"type": "image", "source": {"type": "url", "url": u}}, text),
    ),
)
blocks = st.one_of(
    text_blocks,
    image_blocks,
    st.builds(
        lambda i, n, a: {"type": "tool_use", "id": i, "name": n, "input": a},
        ids,
        ids,
        st.dictionaries(text, json_values, max_size=3),
    ),
    st.builds(
        lambda i, c, e: {"type": "tool_result", "tool_use_id": i, "content": c, "is_error": e},
        ids,
        text | st.lists(text_blocks | image_blocks, max_size=2),
        st.booleans(),
    ),
    st.builds(lambda t: {"type": "thinking", "thinking": t, "signature": "s"}, text),
    st.builds(_with, extras, st.builds(lambda k: {"type": "x-" + k, "data": k}, ids)),
)


@settings(max_examples=100, deadline=None)
@given(content=st.lists(blocks, max_size=4), role=st.sampled_from(["user", "assistant", "tool"]))
def test_block_content_round_trips_through_a_store(content, role):
    j = cj.Journal.memory()
    j.create_thread(cj.ThreadMeta(id="t"))
    stored = cj.append_message(j, "t", "turn", cj.Message(role=role, content=content))
    fresh = cj.Journal(j.store)  # no caches: decoded from the stored bytes
    back = fresh.entry("t", stored.id)
    assert back.message is not None and back.message.content == content
    assert back.raw == stored.raw and cj.raw_for_entry(back) == stored.raw
    expected = json.loads(json.dumps(content))
    assert json.loads(back.raw)["message"]["content"] == expected


@pytest.mark.parametrize(
    ("block", "complaint"),
    [
        ("text", "valid dictionary"),
        ({"text": "no type"}, "non-empty 'type'"),
        ({"type": ""}, "non-empty 'type'"),
        ({"type": "text"}, "'text' must be a string"),
        ({"type": "text", "text": 3}, "'text' must be a string"),
        ({"type": "image", "source": "x"}, "'source' must be an object"),
        ({"type": "image", "source": {"type": "base64", "data": "x"}}, "'media_type'"),
        ({"type": "image", "source": {"type": "url"}}, "'url'"),
        ({"type": "tool_use", "id": "", "name": "n", "input": {}}, "'id' must be a non-empty"),
        ({"type": "tool_use", "id": "i", "name": "n", "input": "{}"}, "'input' must be a JSON"),
        ({"type": "tool_result", "content": "x"}, "'tool_use_id'"),
        ({"type": "tool_result", "tool_use_id": "i", "content": 5}, "'content' must be"),
        ({"type": "tool_result", "tool_use_id": "i", "is_error": "yes"}, "'is_error'"),
        (
            {"type": "tool_result", "tool_use_id": "i", "content": [{"type": "tool_use"}]},
            "only contain text and image",
        ),
        ({"type": "thinking", "thinking": "t", "signature": 1}, "'signature'"),
        ({"type": "x", "v": float("nan")}, None),
    ],
)
def test_malformed_blocks_are_refused(block, complaint):
    if complaint is None:  # JSON-compatible in shape, refused when stored
        message = cj.Message(role="user", content=[block])
        j = cj.Journal.memory()
        j.create_thread(cj.ThreadMeta(id="t"))
        with pytest.raises(cj.InvalidInputError):
            cj.append_message(j, "t", "turn", message)
        return
    with pytest.raises(ValueError) as info:
        cj.Message(role="user", content=[block])
    assert complaint in str(info.value)
    assert "content block 0" in str(info.value) or not isinstance(block, dict)


def test_tool_calls_from_fields_and_blocks():
    legacy = cj.Message(role="assistant", tool_call_id="c0", tool_name="ls", tool_args="{}")
    assert legacy.tool_calls() == [("c0", "ls", "{}")]
    both = cj.Message(
        role="assistant",
        tool_call_id="c0",
        tool_name="ls",
        tool_args="{}",
        content=[
            {"type": "text", "text": "two calls"},
            {"type": "tool_use", "id": "c1", "name": "read", "input": {"p": 1}},
            {"type": "tool_use", "id": "c2", "name": "grep", "input": {}},
        ],
    )
    assert [(c.id, c.name, json.loads(c.arguments)) for c in both.tool_calls()] == [
        ("c0", "ls", {}),
        ("c1", "read", {"p": 1}),
        ("c2", "grep", {}),
    ]
    assert both.text() == "two calls"
    assert cj.entry_type_for_message(both) is cj.EntryType.TOOL_CALL
    blocks_only = cj.Message(role="assistant", content=both.content)
    assert cj.entry_type_for_message(blocks_only) is cj.EntryType.TOOL_CALL
    assert cj.Message(role="tool", tool_call_id="c1", content="r").tool_calls() == []
