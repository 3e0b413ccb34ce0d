"""The LangGraph app the end-to-end tests drive (also imported by their child processes).

A chatbot: ``messages`` with ``add_messages``; the ``chatbot`` node calls LangChain's fake
chat model (canned answers, no network, no key); the ``review`` node asks a human (with
``interrupt``) before answering any user message that says "approve".
"""

from __future__ import annotations

import json
import random
import sys
from typing import Annotated, Any, TypedDict

from langchain_core.language_models.fake_chat_models import FakeListChatModel
from langchain_core.messages import AIMessage, AnyMessage
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.graph.state import CompiledStateGraph
from langgraph.types import interrupt

import cas_journal as cj
from cas_journal.langgraph import CasJournalSaver

WORDS = ("the", "store", "keeps", "each", "message", "once", "and", "a", "fork", "is", "cheap")


class State(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]


def text(rng: random.Random, words: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(words))


def user_texts(turns: int, seed: int = 1) -> list[str]:
    rng = random.Random(seed)
    return [f"turn {n}: " + text(rng, 40) for n in range(turns)]


def answers(count: int = 400, seed: int = 2) -> list[str]:
    rng = random.Random(seed)
    return [f"answer {n}: " + text(rng, 150) for n in range(count)]


def build(saver: CasJournalSaver, offset: int = 0) -> CompiledStateGraph[Any, Any, Any, Any]:
    """The compiled app; the model's answers start at ``offset``."""
    model = FakeListChatModel(responses=answers()[offset:])

    def chatbot(state: State) -> dict[str, Any]:
        return {"messages": [model.invoke(state["messages"])]}

    def review(state: State) -> dict[str, Any]:
        asked = [m for m in state["messages"] if m.type == "human"][-1]
        if "approve" not in asked.content:
            return {}
        decision = interrupt({"question": "send this answer?"})
        return {"messages": [AIMessage(content=f"approved: {decision}")]}

    builder = StateGraph(State)
    builder.add_node("chatbot", chatbot)
    builder.add_node("review", review)
    builder.add_edge(START, "chatbot")
    builder.add_edge("chatbot", "review")
    builder.add_edge("review", END)
    return builder.compile(checkpointer=saver)


def open_journal(location: str, options: dict[str, Any]) -> cj.Journal:
    """A journal on a directory or an ``s3://`` URL (options: the S3 endpoint)."""
    if location.startswith("s3://"):
        from cas_journal.backends.s3 import S3Store

        return cj.Journal(S3Store.from_url(location, **options))
    return cj.Journal.open(location)


def resume_in_child() -> None:
    """Child process: reopen the store, check the pending interrupt, resume, report."""
    from langgraph.types import Command

    location, options, thread_id = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3]
    with open_journal(location, options) as journal:
        graph = build(CasJournalSaver(journal))
        config = {"configurable": {"thread_id": thread_id}}
        waiting = graph.get_state(config)
        result = graph.invoke(Command(resume="yes"), config)
        print(
            json.dumps(
                {
                    "next": list(waiting.next),
                    "interrupts": [i.value for t in waiting.tasks for i in t.interrupts],
                    "messages": len(result["messages"]),
                    "last": result["messages"][-1].content,
                }
            )
        )


if __name__ == "__main__":
    resume_in_child()
