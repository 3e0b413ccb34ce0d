"""The OpenAI Agents SDK Session on a journal thread: the SDK's SQLiteSession contract,
non-destructive pops, O(1) forks, and Runner.run with a scripted model."""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from typing import ClassVar

import pytest
from agents import (
    Agent,
    Model,
    ModelResponse,
    Runner,
    SQLiteSession,
    Usage,
    function_tool,
    set_tracing_disabled,
)
from agents.memory import SessionSettings
from openai.types.responses import (
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
)

import cas_journal as cj
from cas_journal.integrations.openai_agents import ITEM_KEY, CasJournalSession
from cas_journal.objects import Kind

set_tracing_disabled(True)  # no trace export (it would need an API key and the network)

ITEMS = [
    {"role": "user", "content": "Wie spät ist es? \u23f0"},
    {
        "type": "message",
        "id": "msg_1",
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": "Let me check.", "annotations": []}],
    },
    {
        "type": "function_call",
        "call_id": "call_1",
        "name": "clock",
        "arguments": '{"tz": "Europe/Berlin"}',
        "id": "fc_1",
        "status": "completed",
    },
    {"type": "function_call_output", "call_id": "call_1", "output": "09:41"},
    {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "ok"}]},
]


def run(coroutine):
    return asyncio.run(coroutine)


def journal_session(session_id, settings=None):
    return CasJournalSession(session_id, cj.Journal.memory(), session_settings=settings)


def sqlite_session(session_id, settings=None):
    return SQLiteSession(session_id, session_settings=settings)


@pytest.mark.parametrize("make", [sqlite_session, journal_session], ids=["sqlite", "journal"])
def test_session_contract(make):
    """The same calls give the same results on the SDK's SQLiteSession and on ours."""

    async def scenario():
        session = make("s1")
        assert await session.get_items() == []
        assert await session.pop_item() is None
        await session.add_items(ITEMS[:3])
        await session.add_items([])
        await session.add_items(ITEMS[3:])
        assert await session.get_items() == ITEMS
        assert await session.get_items(limit=2) == ITEMS[-2:]
        assert await session.get_items(limit=1) == ITEMS[-1:]
        assert await session.get_items(limit=0) == []
        assert await session.get_items(limit=-1) == ITEMS
        assert await session.get_items(limit=99) == ITEMS
        assert await session.pop_item() == ITEMS[4]
        assert await session.pop_item() == ITEMS[3]
        assert await session.get_items() == ITEMS[:3]
        await session.add_items([ITEMS[0]])
        assert await session.get_items(limit=2) == [ITEMS[2], ITEMS[0]]
        await session.clear_session()
        assert await session.get_items() == []
        assert await session.pop_item() is None
        await session.clear_session()
        await session.add_items([ITEMS[1]])
        assert await session.get_items() == [ITEMS[1]]

        limited = make("s2", SessionSettings(limit=2))
        await limited.add_items(ITEMS)
        assert await limited.get_items() == ITEMS[-2:]
        assert await limited.get_items(limit=4) == ITEMS[-4:]
        assert await session.get_items() == [ITEMS[1]]  # sessions are independent

    run(scenario())


def test_items_are_stored_once_and_read_back_from_storage(tmp_path):
    with cj.Journal.open(tmp_path / "store") as j:
        run(CasJournalSession("s", j).add_items(ITEMS + ITEMS[:1]))
    with cj.Journal.open(tmp_path / "store") as j:
        assert run(CasJournalSession("s", j).get_items()) == ITEMS + ITEMS[:1]
        entries = j.path("s")
        assert all(e.type is cj.EntryType.CUSTOM and ITEM_KEY in e.metadata for e in entries)
        assert entries[0].raw_hash == entries[-1].raw_hash  # equal items, one payload
        assert json.loads(entries[2].metadata[ITEM_KEY]) == ITEMS[2]


def test_pop_is_not_destructive():
    session = journal_session("s")
    run(session.add_items(ITEMS[:3]))
    ids = run(session.get_item_ids())
    assert run(session.pop_item()) == ITEMS[2]
    assert run(session.pop_item()) == ITEMS[1]
    assert run(session.get_items()) == ITEMS[:1]
    history = [e.id for e in session.journal.entries("s")]
    assert history == ids  # both popped entries are still in the thread
    run(session.restore(ids[2]))
    assert run(session.get_items()) == ITEMS[:3]
    run(session.clear_session())
    assert run(session.get_items()) == []
    run(session.restore(ids[1]))
    assert run(session.get_items()) == ITEMS[:2]
    with pytest.raises(cj.EntryNotFound):
        run(session.restore("0" * 64))


def _kinds(journal):
    return Counter(journal.store.objects.get(oid)[0] for oid in journal.store.objects.iter_oids())


def test_fork_is_o1_and_shares_items():
    session = journal_session("s")
    run(session.add_items(ITEMS * 40))
    before = _kinds(session.journal)
    fork = run(session.fork("s-fork", at=2))
    after = _kinds(session.journal)
    assert after - before == Counter({Kind.THREAD: 1})  # one thread state, no entry
    assert run(fork.get_items()) == ITEMS[:3]
    assert run(fork.get_item_ids()) == run(session.get_item_ids())[:3]
    meta = session.journal.thread("s-fork")
    assert (
        meta.forked_from_thread_id == "s"
        and meta.forked_from_entry_id == run(fork.get_item_ids())[-1]
    )
    whole = run(session.fork())
    assert run(whole.get_items()) == ITEMS * 40 and whole.session_id.startswith("thread-")
    by_id = run(session.fork("s-by-id", at=run(session.get_item_ids())[-2]))
    assert run(by_id.get_items()) == (ITEMS * 40)[:-1]
    last = run(session.fork("s-last", at=-1))
    assert run(last.get_items(limit=1)) == ITEMS[-1:]
    with pytest.raises(cj.EntryNotFound):
        run(session.fork("nope", at=1000))
    empty = run(journal_session("e").fork("e2"))
    assert run(empty.get_items()) == []


def test_items_that_are_not_json_are_refused():
    with pytest.raises(cj.InvalidInputError, match="JSON"):
        run(journal_session("s").add_items([{"role": "user", "content": object()}]))


# -- Runner.run with a scripted model ---------------------------------------------------


def _message(text):
    return ResponseOutputMessage(
        id=f"msg_{abs(hash(text)) % 10**6}",
        type="message",
        role="assistant",
        status="completed",
        content=[ResponseOutputText(type="output_text", text=text, annotations=[])],
    )


class ScriptModel(Model):
    """Answers each call with the next canned output; records the input it was given."""

    def __init__(self, outputs):
        self.outputs = list(outputs)
        self.inputs = []

    async def get_response(self, system_instructions, input, model_settings, tools,
                           output_schema, handoffs, tracing, **_):  # fmt: skip
        self.inputs.append(json.loads(json.dumps(input, default=str)))
        return ModelResponse(output=[self.outputs.pop(0)], usage=Usage(), response_id=None)

    def stream_response(self, *args, **kwargs):
        raise NotImplementedError


@function_tool
def clock(tz: str) -> str:
    """The time in a time zone."""
    return f"09:41 in {tz}"


def _texts(items):
    """The user and assistant texts of session items, in order."""
    out = []
    for item in items:
        content = item.get("content")
        if isinstance(content, str):
            out.append(content)
        elif isinstance(content, list):
            out.extend(part["text"] for part in content if "text" in part)
        elif item.get("type") == "function_call_output":
            out.append(item["output"])
    return out


class WrapperSpy(CasJournalSession):
    """Records the run context the runner passes to add_items."""

    seen: ClassVar[list] = []

    async def add_items(self, items, wrapper=None):
        self.seen.append(wrapper)
        await super().add_items(items, wrapper=wrapper)


def test_runner_with_session_then_fork_and_diverge():
    journal = cj.Journal.memory()
    model = ScriptModel(
        [
            _message("Hello Ada."),
            ResponseFunctionToolCall(
                type="function_call",
                call_id="c1",
                name="clock",
                arguments='{"tz": "UTC"}',
                id="fc1",
                status="completed",
            ),
            _message("It is 09:41."),
            _message("You asked about the time."),
            _message("Your name is Ada."),
        ]
    )
    agent = Agent(name="helper", instructions="Be brief.", model=model, tools=[clock])
    session = WrapperSpy("chat", journal)

    async def turns():
        first = await Runner.run(agent, "Hi, I am Ada.", session=session)
        second = await Runner.run(agent, "What time is it?", session=session)
        third = await Runner.run(agent, "What did I ask?", session=session)
        return first, second, third

    first, second, third = run(turns())
    assert (first.final_output, second.final_output, third.final_output) == (
        "Hello Ada.",
        "It is 09:41.",
        "You asked about the time.",
    )
    items = run(session.get_items())
    assert _texts(items) == [
        "Hi, I am Ada.", "Hello Ada.", "What time is it?", "09:41 in UTC",
        "It is 09:41.", "What did I ask?", "You asked about the time.",
    ]  # fmt: skip
    assert [i.get("type") for i in items if i.get("type", "message") != "message"] == [
        "function_call",
        "function_call_output",
    ]
    # the model saw the whole history on the third turn
    assert _texts(model.inputs[3]) == _texts(items)[:-1]
    assert WrapperSpy.seen and all(w is not None for w in WrapperSpy.seen)  # run context given

    # fork after the first exchange, continue differently there
    branch = run(session.fork("chat-alt", at=1))
    assert _texts(run(branch.get_items())) == ["Hi, I am Ada.", "Hello Ada."]
    answer = run(Runner.run(agent, "What is my name?", session=branch))
    assert answer.final_output == "Your name is Ada."
    assert _texts(model.inputs[-1]) == ["Hi, I am Ada.", "Hello Ada.", "What is my name?"]
    assert _texts(run(branch.get_items()))[-2:] == ["What is my name?", "Your name is Ada."]
    assert run(session.get_items()) == items  # the original did not move
    shared = run(session.get_item_ids())[:2]
    assert run(branch.get_item_ids())[:2] == shared  # the same entries, not copies
