"""Entry payloads: the short way ``payload_dict`` builds them equals pydantic's generic dump."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import cas_journal as cj
from cas_journal.journal.payload import payload_bytes, payload_dict, reference_payload_dict
from cas_journal.objects import canonical_json

text = st.text(max_size=8)
small_ints = st.integers(-3, 3)
# ints beyond 64 bits too: orjson refuses them, the reference encoder decides
ints = small_ints | st.integers(2**63 - 2, 2**64 + 2) | st.booleans()
messages = st.builds(
    cj.Message,
    role=st.sampled_from(["", "user", "assistant", "tool"]) | text,
    content=text | st.lists(st.builds(lambda t: {"type": "text", "text": t}, text), max_size=2),
    reasoning=text,
    tool_call_id=text,
    tool_name=text,
    tool_args=text,
    kind=text,
    tool_result=st.none() | st.builds(cj.ToolResultView, truncated=st.booleans(), strategy=text),
    compaction_generation=ints,
)
usages = st.builds(cj.ContextUsage, input_tokens=small_ints, context_window=small_ints)
# every payload field, each present or not; values include the field's own default
# (set explicitly: the dump leaves it out all the same), booleans where ints go, enums
optional_fields = st.fixed_dictionaries(
    {},
    optional={
        "type": st.sampled_from(list(cj.EntryType)),
        "message": st.none() | messages,
        "turn_status": st.none() | st.sampled_from(list(cj.TurnMarkerStatus)),
        "provider": text,
        "model": text,
        "summary": text,
        "compaction_generation": small_ints | st.booleans(),
        "tokens_before": ints,
        "context_usage_before": st.none() | usages,
        "kept_user_entry_ids": st.lists(text, max_size=2),
        "metadata": st.dictionaries(text, text, max_size=2),
        "error": text,
        "turn_id": text,
        "thread_id": st.just("t"),
        "created_at": st.just(datetime(2026, 1, 2, tzinfo=UTC)),
    },
)


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(fields=optional_fields)
def test_the_short_way_equals_the_generic_dump(fields):
    entry = cj.Entry(**fields)
    assert payload_dict(entry) == reference_payload_dict(entry)
    copied = entry.model_copy(update={"id": "x", "raw": "y"})  # node fields set later
    assert canonical_json(payload_dict(copied)) == canonical_json(reference_payload_dict(entry))
    # the encoding skips the walk for floats when the short way knows there are none
    assert payload_bytes(entry) == canonical_json(reference_payload_dict(entry))
    assert payload_bytes(copied) == payload_bytes(entry)


@settings(max_examples=100, deadline=None)
@given(fields=optional_fields)
def test_entries_read_back_from_a_store_encode_to_their_stored_payload(fields):
    fields.pop("thread_id", None)
    j = cj.Journal.memory()
    j.create_thread(cj.ThreadMeta(id="t"))
    stored = j.append(cj.Entry(thread_id="t", **fields))
    back = cj.Journal(j.store).entry("t", stored.id)  # built from the stored bytes
    assert canonical_json(payload_dict(back)).decode() == stored.raw
    assert payload_dict(back) == reference_payload_dict(back)
