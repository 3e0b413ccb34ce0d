"""Context building: provider visibility, control signals, compaction variants, projections."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.journal_helpers import at

import cas_journal as cj


@pytest.fixture
def j():
    journal = cj.Journal.memory()
    journal.create_thread(cj.ThreadMeta(id="t"))
    return journal


def say(j, role, text="", **fields):
    return cj.append_message(j, "t", "turn", cj.Message(role=role, content=text, **fields))


def test_only_provider_visible_entries_reach_the_model(j):
    u = say(j, "user", "question")
    cj.append_turn_marker(j, "t", "turn", cj.TurnMarkerStatus.STARTED, {"k": "v"})
    call = say(j, "assistant", "", tool_call_id="c1", tool_name="read", tool_args='{"path": "a"}')
    result = say(j, "tool", "file body", tool_call_id="c1", tool_name="read")
    cj.append_failure(j, "t", "turn", "boom")
    cj.append_active_tools(j, "t", {"tools": "read"})
    summary = j.append(cj.Entry(thread_id="t", type=cj.EntryType.BRANCH_SUMMARY, summary="tried X"))
    answer = say(j, "assistant", "done")
    messages = cj.build_context(j.path("t"))
    assert [(m.role, m.content) for m in messages] == [
        ("user", "question"),
        ("assistant", ""),
        ("tool", "file body"),
        ("assistant", "tried X"),
        ("assistant", "done"),
    ]
    assert [m.entry_id for m in messages] == [u.id, call.id, result.id, summary.id, answer.id]
    assert all(m.parent_entry_id == j.entry("t", m.entry_id).parent_id for m in messages)
    assert messages[1].tool_call_id == "c1" and messages[1].tool_args == '{"path": "a"}'
    assert j.entry("t", call.id).type is cj.EntryType.TOOL_CALL
    assert j.entry("t", result.id).type is cj.EntryType.TOOL_RESULT


@pytest.mark.parametrize(
    ("tool", "args", "text"),
    [
        ("ask_user", {"question": "Which file?"}, "Which file?"),
        ("task_complete", {"output": "All tests pass."}, "All tests pass."),
    ],
)
def test_control_signals_become_plain_assistant_text(j, tool, args, text):
    say(j, "user", "go")
    say(j, "assistant", "", tool_call_id="c9", tool_name=tool, tool_args=json.dumps(args))
    last = cj.build_context(j.path("t"))[-1]
    assert last.role == "assistant" and last.content == text and last.kind == "control_signal"
    assert last.tool_call_id == "" and last.tool_name == "" and last.tool_args == ""


def test_malformed_control_signal_args_stay_a_tool_call(j):
    say(j, "assistant", "", tool_call_id="c", tool_name="ask_user", tool_args="not json")
    last = cj.build_context(j.path("t"))[-1]
    assert last.tool_name == "ask_user" and last.kind == ""


def _compact(j, **fields):
    result = cj.CompactionResult(compaction_id=fields.pop("compaction_id", "c1"), **fields)
    return cj.append_compaction(j, "t", "turn", result)


def test_last_compaction_with_first_kept_entry(j):
    say(j, "user", "old 1")
    say(j, "assistant", "old 2")
    kept = say(j, "user", "kept 3")
    say(j, "assistant", "kept 4")
    _compact(j, summary="first summary", first_kept_entry_id=kept.id, compaction_id="c1")
    say(j, "user", "after first")
    kept2 = say(j, "assistant", "kept 6")
    comp = _compact(
        j,
        summary="second summary",
        first_kept_entry_id=kept2.id,
        compaction_id="c2",
        previous_compaction_id="c1",
    )
    tail = say(j, "user", "newest")
    messages = cj.build_context(j.path("t"))
    assert messages[0].kind == "compaction_summary" and messages[0].role == "user"
    assert "second summary" in messages[0].content and "first summary" not in messages[0].content
    assert messages[0].entry_id == comp.id and messages[0].parent_entry_id == comp.parent_id
    assert messages[0].compaction_id == "c2" and messages[0].compaction_generation == 2
    assert messages[0].compaction_window_id == "c2"
    assert [m.content for m in messages[1:]] == ["kept 6", "newest"]
    assert messages[-1].entry_id == tail.id


def test_kept_user_inputs_outside_the_tail_are_carried(j):
    early = say(j, "user", "requirement: use tabs")
    say(j, "assistant", "ok")
    late = say(j, "user", "also add tests")
    say(j, "assistant", "sure")
    _compact(
        j,
        summary="S",
        first_kept_entry_id=late.id,
        kept_user_entry_ids=[early.id, late.id, early.id],
    )
    messages = cj.build_context(j.path("t"))
    head = messages[0].content
    assert "requirement: use tabs" in head and head.count("requirement: use tabs") == 1
    assert "also add tests" not in head  # already in the retained tail
    assert [m.content for m in messages[1:]] == ["also add tests", "sure"]


def test_kept_users_without_first_kept_means_no_earlier_tail(j):
    keep = say(j, "user", "remember this")
    say(j, "assistant", "noted")
    _compact(j, summary="S", kept_user_entry_ids=[keep.id])
    after = say(j, "user", "next")
    messages = cj.build_context(j.path("t"))
    assert "remember this" in messages[0].content
    assert [m.entry_id for m in messages[1:]] == [after.id]


def test_default_tail_steps_back_over_tool_results_to_their_call(j):
    say(j, "user", "u1")
    call = say(j, "assistant", "", tool_call_id="c1", tool_name="run", tool_args="{}")
    say(j, "tool", "r1", tool_call_id="c1")
    say(j, "tool", "r2", tool_call_id="c1")
    cj.append_turn_marker(j, "t", "turn", cj.TurnMarkerStatus.SAVE_POINT)
    _compact(j, summary="S")
    messages = cj.build_context(j.path("t"))
    assert messages[0].kind == "compaction_summary"
    assert [m.entry_id for m in messages[1:2]] == [call.id]
    assert [m.content for m in messages[1:]] == ["", "r1", "r2"]


def test_compaction_without_summary_keeps_only_the_tail(j):
    say(j, "user", "a")
    b = say(j, "user", "b")
    _compact(j, first_kept_entry_id=b.id)
    messages = cj.build_context(j.path("t"))
    assert [m.content for m in messages] == ["b"]


def test_compaction_generation_and_window_rules(j):
    assert _compact(j, compaction_id="x", compaction_generation=7).compaction_generation == 7
    assert (
        _compact(j, compaction_id="x", details={"compaction_generation": "5"}).compaction_generation
        == 5
    )
    assert _compact(j, compaction_id="x", previous_compaction_id="w").compaction_generation == 2
    assert _compact(j, compaction_id="x").compaction_generation == 1
    assert _compact(j, compaction_id="x", compaction_window_id="win").compaction_window_id == "win"
    assert _compact(j, compaction_id="cid").compaction_window_id == "cid"
    assert _compact(j, compaction_id="", first_kept_entry_id="e").compaction_window_id == "e"
    entry = _compact(
        j,
        compaction_id="x",
        details={"a": "", "b": "2"},
        trigger="auto",
        reason="full",
        phase="done",
    )
    assert entry.metadata == {"a": "", "b": "2"}
    assert (entry.compaction_trigger, entry.compaction_reason, entry.compaction_phase) == (
        "auto",
        "full",
        "done",
    )


def test_projection_segments(j):
    ref = cj.ArtifactRef(
        id="art1", label="full", url="file://x", kind="tool_output", mime="text/plain", size=9000
    )
    say(j, "user", "q" * 500)
    say(j, "assistant", "", tool_call_id="c", tool_name="read", tool_args="{}")
    say(
        j,
        "tool",
        "short",
        tool_call_id="c",
        tool_name="read",
        tool_result=cj.ToolResultView(
            truncated=True, original_bytes=9000, visible_bytes=5, full_output=ref
        ),
    )
    path = j.path("t")
    plain = cj.build_context_projection(path)
    assert plain.messages == cj.build_context(path)
    assert [s.message_index for s in plain.segments] == [0, 1, 2]
    assert [s.entry_type for s in plain.segments] == [
        cj.EntryType.USER_MESSAGE,
        cj.EntryType.TOOL_CALL,
        cj.EntryType.TOOL_RESULT,
    ]
    assert plain.segments[0].token_estimate > plain.segments[2].token_estimate > 0
    assert plain.segments[1].tool_call_id == "c" and plain.segments[1].tool_name == "read"
    assert all(s.artifact_refs == [] and s.ui_preview == "" for s in plain.segments)
    ui = cj.build_context_projection(path, cj.ProjectionPurpose.TEST_UI)
    assert ui.segments[2].artifact_refs == [ref]
    assert ui.segments[0].ui_preview == "q" * 240 + "..." and ui.segments[2].ui_preview == "short"


def test_compaction_summary_segment_type(j):
    say(j, "user", "a")
    _compact(j, summary="S")
    projection = cj.build_context_projection(j.path("t"))
    assert projection.segments[0].entry_type is cj.EntryType.COMPACTION


def test_message_fields_round_trip_through_the_store(tmp_path):
    with cj.Journal.open(tmp_path / "s") as j:
        j.create_thread(cj.ThreadMeta(id="t"))
        message = cj.Message(
            role="tool",
            content="",
            reasoning="why",
            tool_call_id="c",
            tool_name="n",
            tool_args='{"a":1}',
            kind="",
            compaction_id="x",
            compaction_generation=3,
            tool_result=cj.ToolResultView(
                strategy="tail",
                original_lines=3,
                visible_lines=1,
                content_hash="h",
                full_output=cj.ArtifactRef(id="a"),
            ),
        )
        original = cj.Entry(
            thread_id="t",
            type=cj.EntryType.TOOL_RESULT,
            message=message,
            provider="p",
            model="m",
            turn_status=cj.TurnMarkerStatus.COMPLETED,
            tokens_before=5,
            context_usage_before=cj.ContextUsage(input_tokens=10, context_window=100),
            kept_user_entry_ids=["x", "y"],
            metadata={"empty": "", "k": "v"},
        )
        entry = j.append(original, now=at(1))
    with cj.Journal.open(tmp_path / "s") as again:
        back = again.entry("t", entry.id)
    assert back == entry and back.message == message and back.metadata == {"empty": "", "k": "v"}


# -- system messages, content blocks, control signals with results, tool pairing ---------


def test_a_system_message_in_a_thread_is_part_of_the_context(j):
    system = say(j, "system", "You are terse.")
    assert system.type is cj.EntryType.CUSTOM
    say(j, "user", "hi")
    late = say(j, "system", [{"type": "text", "text": "Now answer in French."}])
    messages = cj.build_context(j.path("t"))
    assert [(m.role, m.text()) for m in messages] == [
        ("system", "You are terse."),
        ("user", "hi"),
        ("system", "Now answer in French."),
    ]
    assert messages[2].entry_id == late.id


def test_system_messages_survive_compaction_first(j):
    system = say(j, "system", "rules")
    say(j, "user", "old")
    kept = say(j, "user", "kept")
    _compact(j, summary="S", first_kept_entry_id=kept.id)
    messages = cj.build_context(j.path("t"))
    assert [m.kind or m.role for m in messages] == ["system", "compaction_summary", "user"]
    assert messages[0].entry_id == system.id and messages[2].entry_id == kept.id


def test_several_tool_calls_and_results_as_blocks(j):
    say(j, "user", "read a and b")
    calls = say(
        j,
        "assistant",
        [
            {"type": "text", "text": "Reading."},
            {"type": "tool_use", "id": "a", "name": "read", "input": {"p": "a"}},
            {"type": "tool_use", "id": "b", "name": "read", "input": {"p": "b"}},
        ],
    )
    say(
        j,
        "user",
        [
            {"type": "tool_result", "tool_use_id": "a", "content": "A"},
            {"type": "tool_result", "tool_use_id": "b", "content": "B"},
        ],
    )
    messages = cj.build_context(j.path("t"))
    assert calls.type is cj.EntryType.TOOL_CALL
    assert [c.id for c in messages[1].tool_calls()] == ["a", "b"]
    assert messages[2].content[1]["content"] == "B"
    segment = cj.build_context_projection(j.path("t")).segments[1]
    assert (segment.tool_call_id, segment.tool_name) == ("a", "read")


def test_a_control_signal_result_becomes_user_text(j):
    say(j, "user", "go")
    say(
        j,
        "assistant",
        "Need input.",
        tool_call_id="q",
        tool_name="ask_user",
        tool_args='{"question": "Which file?"}',
    )
    answer = say(j, "tool", "main.py", tool_call_id="q", tool_name="ask_user")
    messages = cj.build_context(j.path("t"))
    assert [(m.role, m.text(), m.kind) for m in messages[1:]] == [
        ("assistant", "Need input.\n\nWhich file?", "control_signal"),
        ("user", "main.py", "control_signal"),
    ]
    assert messages[2].entry_id == answer.id and messages[2].tool_call_id == ""


def test_a_control_signal_block_among_other_calls(j):
    say(
        j,
        "assistant",
        [
            {"type": "tool_use", "id": "r", "name": "read", "input": {}},
            {"type": "tool_use", "id": "done", "name": "task_complete", "input": {"output": "OK"}},
        ],
    )
    say(
        j,
        "user",
        [
            {"type": "tool_result", "tool_use_id": "r", "content": "file"},
            {
                "type": "tool_result",
                "tool_use_id": "done",
                "content": [{"type": "text", "text": "ack"}],
            },
        ],
    )
    call, result = cj.build_context(j.path("t"))
    assert call.kind == "" and [c.id for c in call.tool_calls()] == ["r"]
    assert call.content[1] == {"type": "text", "text": "OK"}
    assert result.content == [
        {"type": "tool_result", "tool_use_id": "r", "content": "file"},
        {"type": "text", "text": "ack"},
    ]
    say(
        j,
        "assistant",
        [{"type": "tool_use", "id": "d2", "name": "task_complete", "input": {"output": "fin"}}],
    )
    last = cj.build_context(j.path("t"))[-1]
    assert last.kind == "control_signal" and last.content == [{"type": "text", "text": "fin"}]


def test_compaction_tail_starting_at_a_result_keeps_its_call(j):
    say(j, "user", "u")
    call = say(j, "assistant", "", tool_call_id="c", tool_name="run", tool_args="{}")
    result = say(j, "tool", "out", tool_call_id="c")
    _compact(j, summary="S", first_kept_entry_id=result.id)
    messages = cj.build_context(j.path("t"))
    assert [m.entry_id for m in messages[1:]] == [call.id, result.id]


def test_a_result_after_the_compaction_keeps_its_call(j):
    keep = say(j, "user", "u")
    call = say(
        j, "assistant", "", tool_call_id="c", tool_name="ask_user", tool_args='{"question": "ok?"}'
    )
    _compact(j, summary="S", kept_user_entry_ids=[keep.id])
    result = say(j, "tool", "yes", tool_call_id="c")
    messages = cj.build_context(j.path("t"))
    assert [m.entry_id for m in messages[1:]] == [call.id, result.id]
    assert [m.role for m in messages[1:]] == ["assistant", "user"]


def test_images_count_in_the_token_estimate(j):
    image = {"type": "image", "source": {"type": "url", "url": "https://x/y.png"}}
    say(j, "user", [{"type": "text", "text": "look"}, image])
    segment = cj.build_context_projection(j.path("t"), cj.ProjectionPurpose.TEST_UI).segments[0]
    assert segment.token_estimate >= 1600 and segment.ui_preview == "look"


def _answered(message):
    if message.role == "tool":
        return [message.tool_call_id]
    if isinstance(message.content, str):
        return []
    return [b["tool_use_id"] for b in message.content if b["type"] == "tool_result"]


operations = st.lists(
    st.sampled_from(["user", "assistant", "system", "call", "signal", "blocks", "compact"]),
    max_size=14,
)


@settings(max_examples=120, deadline=None)
@given(ops=operations, choices=st.lists(st.integers(0, 50), min_size=14, max_size=14))
def test_every_tool_result_in_a_context_follows_its_call(ops, choices):
    j = cj.Journal.memory()
    j.create_thread(cj.ThreadMeta(id="t"))
    appended = []
    for n, (op, pick) in enumerate(zip(ops, choices, strict=False)):
        if op in ("user", "assistant", "system"):
            appended.append(say(j, op, f"{op} {n}"))
        elif op in ("call", "signal"):
            name = "ask_user" if op == "signal" else "read"
            appended.append(
                say(
                    j,
                    "assistant",
                    "",
                    tool_call_id=f"c{n}",
                    tool_name=name,
                    tool_args='{"question": "q"}',
                )
            )
            appended.append(say(j, "tool", "r", tool_call_id=f"c{n}", tool_name=name))
        elif op == "blocks":
            names = ["read", "task_complete", "ask_user"][: 1 + pick % 3]
            uses = [
                {
                    "type": "tool_use",
                    "id": f"b{n}{i}",
                    "name": name,
                    "input": {"output": "o", "question": "q"},
                }
                for i, name in enumerate(names)
            ]
            appended.append(say(j, "assistant", uses))
            results = [
                {"type": "tool_result", "tool_use_id": u["id"], "content": "r"} for u in uses
            ]
            appended.append(say(j, "user", results))
        elif appended:
            target = appended[pick % len(appended)]
            if pick % 3 == 0:
                _compact(j, summary="S", kept_user_entry_ids=[target.id])
            elif pick % 3 == 1:
                _compact(j, summary="S", first_kept_entry_id=target.id)
            else:
                _compact(j, summary="S")
    messages = cj.build_context(j.path("t"))
    called: set[str] = set()
    for message in messages:
        for call_id in _answered(message):
            assert call_id in called, (call_id, [m.model_dump() for m in messages])
        called.update(call.id for call in message.tool_calls())
        assert not any(c.name in ("ask_user", "task_complete") for c in message.tool_calls())
    systems = [e.id for e in j.path("t") if e.message is not None and e.message.role == "system"]
    assert systems == [m.entry_id for m in messages if m.role == "system"]
