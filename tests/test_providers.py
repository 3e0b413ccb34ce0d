"""Provider-ready context: build_context results in OpenAI Chat, OpenAI Responses and
Anthropic Messages form, checked against each SDK's own TypedDicts."""

from __future__ import annotations

import json

import pytest
from anthropic.types import MessageParam, TextBlockParam
from hypothesis import given, settings
from hypothesis import strategies as st
from openai.types.chat import ChatCompletionMessageParam
from openai.types.responses import ResponseInputItemParam
from support.typed_check import Mismatch, check

import cas_journal as cj
from cas_journal.providers import (
    ProviderFormatError,
    to_anthropic,
    to_openai_chat,
    to_openai_responses,
)

PNG = {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}


def convert_all(messages, system=""):
    """All three conversions, each checked against its SDK's types."""
    chat = to_openai_chat(messages, system=system)
    check(chat, list[ChatCompletionMessageParam], "chat")
    responses = to_openai_responses(messages, system=system)
    check(responses, list[ResponseInputItemParam], "responses")
    anthropic = to_anthropic(messages, system=system)
    check(anthropic["messages"], list[MessageParam], "anthropic.messages")
    check(anthropic.get("system", []), list[TextBlockParam], "anthropic.system")
    assert_paired(chat, responses, anthropic)
    return chat, responses, anthropic


def assert_paired(chat, responses, anthropic):
    """Each API's own rule for where tool results go."""
    for i, message in enumerate(chat):
        calls = [c["id"] for c in message.get("tool_calls", [])]
        if calls:
            following = [m["tool_call_id"] for m in chat[i + 1 : i + 1 + len(calls)]]
            assert sorted(following) == sorted(calls), chat
        if message["role"] == "tool":
            j = i - 1
            while chat[j]["role"] == "tool":
                j -= 1
            assert message["tool_call_id"] in [c["id"] for c in chat[j]["tool_calls"]]
    made = set()
    for item in responses:
        if item.get("type") == "function_call":
            made.add(item["call_id"])
        if item.get("type") == "function_call_output":
            assert item["call_id"] in made
    messages = anthropic["messages"]
    for i, message in enumerate(messages):
        blocks = message["content"] if isinstance(message["content"], list) else []
        uses = [b["id"] for b in blocks if b["type"] == "tool_use"]
        if message["role"] == "assistant" and uses:
            reply = messages[i + 1]
            assert reply["role"] == "user"
            results = [b for b in reply["content"] if b["type"] == "tool_result"]
            assert sorted(b["tool_use_id"] for b in results) == sorted(uses)
            assert reply["content"][: len(results)] == results  # results first
        if message["role"] == "user" and any(b["type"] == "tool_result" for b in blocks):
            assert i > 0 and messages[i - 1]["role"] == "assistant"


@pytest.fixture
def j():
    journal = cj.Journal.memory()
    journal.create_thread(cj.ThreadMeta(id="t"))
    return journal


def say(j, role, content="", **fields):
    return cj.append_message(j, "t", "turn", cj.Message(role=role, content=content, **fields))


def test_a_rich_context_in_all_three_formats(j):
    say(j, "system", "You are a coding agent.")
    say(
        j,
        "user",
        [{"type": "text", "text": "What is wrong here?"}, {"type": "image", "source": PNG}],
    )
    say(
        j,
        "assistant",
        [
            {"type": "thinking", "thinking": "look at both", "signature": "c2ln"},
            {"type": "text", "text": "Reading two files."},
            {"type": "tool_use", "id": "a", "name": "read", "input": {"path": "a.py"}},
            {"type": "tool_use", "id": "b", "name": "read", "input": {"path": "b.py"}},
        ],
    )
    say(
        j,
        "user",
        [
            {"type": "tool_result", "tool_use_id": "a", "content": "x = 1"},
            {
                "type": "tool_result",
                "tool_use_id": "b",
                "is_error": True,
                "content": [{"type": "text", "text": "missing"}],
            },
            {"type": "text", "text": "b.py was deleted"},
        ],
    )
    say(j, "assistant", "", tool_call_id="c", tool_name="run", tool_args='{"cmd": "pytest"}')
    say(j, "tool", "1 passed", tool_call_id="c", tool_name="run")
    say(
        j,
        "assistant",
        "",
        tool_call_id="q",
        tool_name="ask_user",
        tool_args='{"question": "Ship?"}',
    )
    say(j, "user", "yes")
    chat, responses, anthropic = convert_all(cj.build_context(j.path("t")), system="Be brief.")

    assert [m["role"] for m in chat] == [
        "system", "system", "user", "assistant", "tool", "tool", "user",
        "assistant", "tool", "assistant", "user",
    ]  # fmt: skip
    assert chat[2]["content"][1] == {
        "type": "image_url",
        "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="},
    }
    assert chat[3]["content"] == "Reading two files."
    assert [c["function"]["arguments"] for c in chat[3]["tool_calls"]] == [
        '{"path": "a.py"}',
        '{"path": "b.py"}',
    ]
    assert chat[5] == {
        "role": "tool",
        "tool_call_id": "b",
        "content": [{"type": "text", "text": "missing"}],
    }
    assert chat[7]["tool_calls"][0]["function"] == {"name": "run", "arguments": '{"cmd": "pytest"}'}
    assert chat[9] == {"role": "assistant", "content": "Ship?"}

    assert [i.get("type") for i in responses][:4] == ["message", "message", "message", "message"]
    assert responses[2]["content"][1] == {
        "type": "input_image",
        "image_url": "data:image/png;base64,iVBORw0KGgo=",
        "detail": "auto",
    }
    kinds = [(i["type"], i.get("call_id", i.get("role"))) for i in responses[3:]]
    assert kinds == [
        ("message", "assistant"),
        ("function_call", "a"),
        ("function_call", "b"),
        ("function_call_output", "a"),
        ("function_call_output", "b"),
        ("message", "user"),
        ("function_call", "c"),
        ("function_call_output", "c"),
        ("message", "assistant"),
        ("message", "user"),
    ]

    assert anthropic["system"] == [
        {"type": "text", "text": "Be brief."},
        {"type": "text", "text": "You are a coding agent."},
    ]
    roles = [m["role"] for m in anthropic["messages"]]
    assert roles == ["user", "assistant", "user", "assistant", "user", "assistant", "user"]
    first_reply = anthropic["messages"][1]["content"]
    assert first_reply[0]["type"] == "thinking" and first_reply[0]["signature"] == "c2ln"
    assert anthropic["messages"][2]["content"][1]["is_error"] is True
    assert anthropic["messages"][3]["content"] == [
        {"type": "tool_use", "id": "c", "name": "run", "input": {"cmd": "pytest"}}
    ]
    assert anthropic["messages"][5]["content"] == [{"type": "text", "text": "Ship?"}]
    assert anthropic["messages"][6] == {"role": "user", "content": "yes"}


def test_calls_made_one_per_entry_are_merged_before_their_results(j):
    say(j, "user", "go")
    say(j, "assistant", "First I look.")
    say(j, "assistant", "", tool_call_id="a", tool_name="ls", tool_args="{}")
    say(j, "assistant", "", tool_call_id="b", tool_name="pwd", tool_args="")
    say(j, "tool", "files", tool_call_id="a")
    say(j, "tool", "/", tool_call_id="b")
    chat, _, anthropic = convert_all(cj.build_context(j.path("t")))
    assert [m["role"] for m in chat] == ["user", "assistant", "assistant", "tool", "tool"]
    assert [c["id"] for c in chat[2]["tool_calls"]] == ["a", "b"]
    assert chat[2]["tool_calls"][1]["function"]["arguments"] == "{}"
    assert [m["role"] for m in anthropic["messages"]] == ["user", "assistant", "user"]
    assert [b["type"] for b in anthropic["messages"][1]["content"]] == [
        "text",
        "tool_use",
        "tool_use",
    ]


def test_string_contents_stay_strings(j):
    say(j, "user", "hi")
    say(j, "assistant", "hello")
    chat, responses, anthropic = convert_all(cj.build_context(j.path("t")))
    assert chat == [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]
    assert responses == [
        {"type": "message", "role": "user", "content": "hi"},
        {"type": "message", "role": "assistant", "content": "hello"},
    ]
    assert anthropic == {
        "messages": [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": [{"type": "text", "text": "hello"}]},
        ]
    }


def test_an_orphan_result_is_refused_by_name(j):
    say(j, "user", "go")
    result = say(j, "tool", "out", tool_call_id="ghost")
    messages = cj.build_context(j.path("t"))
    for convert in (to_openai_chat, to_openai_responses, to_anthropic):
        with pytest.raises(ProviderFormatError, match="'ghost'") as info:
            convert(messages)
        assert result.id in str(info.value)


def test_a_second_result_for_one_call_is_refused(j):
    say(j, "assistant", "", tool_call_id="c", tool_name="ls")
    say(j, "tool", "one", tool_call_id="c")
    say(j, "tool", "two", tool_call_id="c")
    with pytest.raises(ProviderFormatError, match="'c', which was answered already"):
        to_anthropic(cj.build_context(j.path("t")))


def test_an_unanswered_call_is_refused(j):
    say(j, "user", "go")
    say(j, "assistant", [{"type": "tool_use", "id": "x", "name": "ls", "input": {}}])
    say(j, "user", "never mind")
    for convert in (to_openai_chat, to_openai_responses, to_anthropic):
        with pytest.raises(ProviderFormatError, match="'x' \\(ls\\) has no result before the user"):
            convert(cj.build_context(j.path("t")))
    j.move_leaf("t", j.path("t")[-2].id)
    with pytest.raises(ProviderFormatError, match="has no result; append"):
        to_openai_chat(cj.build_context(j.path("t")))


def test_what_a_format_cannot_carry_is_refused(j):
    say(j, "user", "go")
    say(j, "assistant", "", tool_call_id="c", tool_name="shot", tool_args="not json")
    say(j, "tool", [{"type": "image", "source": PNG}], tool_call_id="c")
    messages = cj.build_context(j.path("t"))
    with pytest.raises(
        ProviderFormatError, match="OpenAI Chat Completions has no form for a 'image'"
    ):
        to_openai_chat(messages)
    check(to_openai_responses(messages), list[ResponseInputItemParam])
    with pytest.raises(ProviderFormatError, match="not a JSON object"):
        to_anthropic(messages)
    document = {
        "type": "document",
        "source": {"type": "text", "media_type": "text/plain", "data": "d"},
    }
    with pytest.raises(ProviderFormatError, match="'document'"):
        to_openai_responses([cj.Message(role="user", content=[document])])
    anthropic = to_anthropic([cj.Message(role="user", content=[document])])
    check(anthropic["messages"], list[MessageParam])
    with pytest.raises(ProviderFormatError, match="role 'developer'"):
        to_openai_chat([cj.Message(role="developer", content="x")])


def test_the_checker_catches_a_malformed_block():
    with pytest.raises(Mismatch):
        check([{"role": "user", "content": [{"type": "text", "txt": "x"}]}], list[MessageParam])


# -- any journal of answered calls converts, paired, in all three formats ---------------

operations = st.lists(
    st.sampled_from(
        ["user", "assistant", "system", "image", "call", "signal", "blocks", "split", "compact"]
    ),
    max_size=12,
)


@settings(max_examples=80, deadline=None)
@given(ops=operations, picks=st.lists(st.integers(0, 30), min_size=12, max_size=12))
def test_every_answered_journal_converts(ops, picks):
    j = cj.Journal.memory()
    j.create_thread(cj.ThreadMeta(id="t"))
    appended = []
    for n, (op, pick) in enumerate(zip(ops, picks, strict=False)):
        if op in ("user", "assistant", "system"):
            appended.append(
                say(j, op, f"{op} {n}" if pick % 2 else [{"type": "text", "text": "t"}])
            )
        elif op == "image":
            appended.append(say(j, "user", [{"type": "image", "source": PNG}]))
        elif op in ("call", "signal"):
            name = "ask_user" if op == "signal" else "read"
            args = json.dumps({"question": "q", "n": n})
            appended.append(
                say(j, "assistant", "", tool_call_id=f"c{n}", tool_name=name, tool_args=args)
            )
            appended.append(say(j, "tool", f"r{n}", tool_call_id=f"c{n}"))
        elif op == "blocks":
            names = ["read", "task_complete", "grep"][: 1 + pick % 3]
            uses = [
                {"type": "tool_use", "id": f"b{n}-{i}", "name": name, "input": {"output": "o"}}
                for i, name in enumerate(names)
            ]
            appended.append(say(j, "assistant", [{"type": "text", "text": "calling"}, *uses]))
            results = [
                {"type": "tool_result", "tool_use_id": u["id"], "content": "r"} for u in uses
            ]
            appended.append(say(j, "user", results))
        elif op == "split":
            for i in range(1 + pick % 2):
                appended.append(say(j, "assistant", "", tool_call_id=f"s{n}-{i}", tool_name="ls"))
            for i in range(1 + pick % 2):
                appended.append(say(j, "tool", "out", tool_call_id=f"s{n}-{i}"))
        elif appended:
            target = appended[pick % len(appended)]
            if pick % 3 == 0:
                cj.append_compaction(
                    j,
                    "t",
                    "turn",
                    cj.CompactionResult(summary="S", kept_user_entry_ids=[target.id]),
                )
            elif pick % 3 == 1:
                cj.append_compaction(
                    j, "t", "turn", cj.CompactionResult(summary="S", first_kept_entry_id=target.id)
                )
            else:
                cj.append_compaction(j, "t", "turn", cj.CompactionResult(summary="S"))
    messages = cj.build_context(j.path("t"))
    chat, _, anthropic = convert_all(messages, system="sys")
    systems = sum(1 for m in messages if m.role == "system")
    assert sum(1 for m in chat if m["role"] == "system") == systems + 1
    assert len(anthropic.get("system", [])) == systems + 1


def test_importing_cas_journal_imports_no_sdk():
    import subprocess
    import sys

    code = (
        "import sys, cas_journal, cas_journal.providers, cas_journal.integrations\n"
        "sdks = {'agents', 'claude_agent_sdk', 'openai', 'anthropic'}\n"
        "loaded = sorted(m for m in sys.modules if m.split('.')[0] in sdks)\n"
        "assert not loaded, loaded\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
