"""End to end: a LangGraph chatbot checkpointed by CasJournalSaver.

50 turns with LangChain's fake chat model, then a turn that stops at an ``interrupt``; a
new process reopens the store and resumes it; time travel forks the thread from an
earlier checkpoint; ``copy_thread`` forks it without copying anything. Runs on a local
store and on S3 (moto; 15 turns there, each S3 request being a loopback HTTP call).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from support.langgraph_app import answers, build, open_journal, user_texts

from cas_journal.langgraph import CasJournalSaver
from cas_journal.maintenance import fsck, stats

TURNS = 50
S3_TURNS = 15
HERE = Path(__file__).parent


def say(text: str) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": text}]}


def resume_in_new_process(location: str, options: dict[str, Any], thread_id: str) -> dict[str, Any]:
    done = subprocess.run(
        [
            sys.executable,
            str(HERE / "support" / "langgraph_app.py"),
            location,
            json.dumps(options),
            thread_id,
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def conversation_round_trip(location: str, options: dict[str, Any], turns: int) -> None:
    thread = {"configurable": {"thread_id": "chat"}}
    texts = user_texts(turns + 3)
    with open_journal(location, options) as journal:
        saver = CasJournalSaver(journal)
        graph = build(saver)
        for text in texts[:turns]:
            graph.invoke(say(text), thread)
        messages = graph.get_state(thread).values["messages"]
        assert len(messages) == 2 * turns
        assert [m.content for m in messages[::2]] == texts[:turns]
        assert [m.content for m in messages[1::2]] == answers()[:turns]

        # a turn that stops for a human: the process ends with the interrupt pending
        stopped = graph.invoke(say("please approve " + texts[turns]), thread)
        assert "__interrupt__" in stopped
    resumed = resume_in_new_process(location, options, "chat")
    assert resumed["next"] == ["review"]
    assert resumed["interrupts"] == [{"question": "send this answer?"}]
    assert resumed["messages"] == 2 * turns + 3
    assert resumed["last"] == "approved: yes"

    with open_journal(location, options) as journal:
        saver = CasJournalSaver(journal)
        graph = build(saver, offset=turns + 1)
        latest = graph.get_state(thread)
        assert latest.next == () and len(latest.values["messages"]) == 2 * turns + 3

        # time travel: back to the end of turn 10, and on from there with a new question
        history = list(graph.get_state_history(thread))
        assert [h.config["configurable"]["checkpoint_id"] for h in history] == sorted(
            (h.config["configurable"]["checkpoint_id"] for h in history), reverse=True
        )
        turn_10 = next(h for h in history if len(h.values["messages"]) == 20 and h.next == ())
        forked = graph.invoke(say(texts[turns + 1]), turn_10.config)
        assert len(forked["messages"]) == 22
        assert forked["messages"][-1].content == answers()[turns + 1]
        assert len(graph.get_state(thread).values["messages"]) == 22  # the thread moved on
        before = graph.get_state(latest.config)  # the abandoned branch is still there
        assert len(before.values["messages"]) == 2 * turns + 3

        # fork the thread: a ref copy, then each side goes its own way
        objects_before = stats(journal.store).objects
        saver.copy_thread("chat", "chat-fork")
        assert stats(journal.store).objects == objects_before
        fork = {"configurable": {"thread_id": "chat-fork"}}
        assert graph.get_state(fork).values == graph.get_state(thread).values
        graph.invoke(say(texts[turns + 2]), fork)
        assert len(graph.get_state(fork).values["messages"]) == 24
        assert len(graph.get_state(thread).values["messages"]) == 22
        copied_history = list(graph.get_state_history(fork))
        assert len(copied_history) == len(list(graph.get_state_history(thread))) + 4
        assert fsck(journal.store).ok


@pytest.mark.slow
def test_chatbot_on_a_local_store(tmp_path) -> None:
    conversation_round_trip(str(tmp_path / "store"), {}, TURNS)


@pytest.mark.slow
def test_chatbot_on_s3(s3_server) -> None:
    bucket = s3_server.new_bucket()
    conversation_round_trip(f"s3://{bucket}/journal", s3_server.options, S3_TURNS)
