"""LangGraph's SqliteSaver, used the way a LangGraph app stores a growing message list.

A ``StateGraph`` whose state has a ``messages`` channel (a list with an ``operator.add``
reducer, holding the same Anthropic-style dicts every system gets) is compiled with
``SqliteSaver`` and invoked once per iteration with ``{"configurable": {"thread_id":
run}}``: the input carries the iteration's first new message (the tool result or user
text) and the graph's one node, ``agent``, returns the other two (as a model call would).
``durability="sync"`` makes ``invoke`` return after its checkpoints are written, so the
measured latency includes the save. ``langgraph-delta`` is the same graph with the
channel declared as LangGraph's (beta) ``DeltaChannel``, which stores writes instead of
the full list. Checkpoints only: LangGraph has no journal API.
"""

# no "from __future__ import annotations": LangGraph reads the State annotations at runtime
import operator
import sqlite3
from typing import Annotated, Any, TypedDict

from langchain_core.runnables import RunnableConfig
from langgraph.channels.delta import DeltaChannel
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import END, START, StateGraph

from ..workloads import CheckpointStep
from .base import CHECKPOINTS, System


def _concat(state: list[Any], writes: list[list[Any]]) -> list[Any]:
    out = list(state or [])
    for write in writes:
        out.extend(write)
    return out


class ListState(TypedDict):
    """The usual reducer channel: the full list is serialized into every checkpoint."""

    messages: Annotated[list[dict[str, Any]], operator.add]


class DeltaState(TypedDict):
    """LangGraph's beta DeltaChannel: checkpoints store writes, snapshots now and then."""

    messages: Annotated[list[dict[str, Any]], DeltaChannel(_concat)]


class LangGraphSystem(System):
    """LangGraph StateGraph + SqliteSaver."""

    name = "langgraph"
    label = "LangGraph StateGraph + SqliteSaver (messages: list, operator.add)"
    durable = True
    features = frozenset({CHECKPOINTS})
    compaction = "VACUUM of the checkpoint database"

    state_type: Any = ListState

    def open(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        self.db_path = self.root / "checkpoints.sqlite"
        self.conn = sqlite3.connect(self.db_path, check_same_thread=False)
        self.saver = SqliteSaver(self.conn)
        self.pending: list[dict[str, Any]] = []

        def agent(state: Any) -> dict[str, Any]:
            return {"messages": self.pending}

        graph = StateGraph(self.state_type)
        graph.add_node("agent", agent)
        graph.add_edge(START, "agent")
        graph.add_edge("agent", END)
        self.graph = graph.compile(checkpointer=self.saver)

    def close(self) -> None:
        self.conn.close()

    def save_checkpoint(
        self, run_id: str, step: CheckpointStep, messages: list[dict[str, Any]], system_prompt: str
    ) -> None:
        first, *rest = step.new_messages
        self.pending = rest
        config: RunnableConfig = {"configurable": {"thread_id": run_id}}
        self.graph.invoke({"messages": [first]}, config, durability="sync")

    def load_checkpoint(self, run_id: str) -> int:
        state = self.graph.get_state({"configurable": {"thread_id": run_id}})
        return len(state.values["messages"])

    def checkpoint_rows(self) -> int:
        """How many checkpoint rows LangGraph wrote (reported beside the bytes)."""
        return int(self.conn.execute("SELECT count(*) FROM checkpoints").fetchone()[0])

    def settle(self) -> None:
        self.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")

    def compact(self) -> None:
        self.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        self.conn.execute("VACUUM")
        self.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")


class LangGraphDeltaSystem(LangGraphSystem):
    """The same graph with ``messages`` as a DeltaChannel (LangGraph beta)."""

    name = "langgraph-delta"
    label = "LangGraph StateGraph + SqliteSaver (messages: DeltaChannel, beta)"

    state_type = DeltaState
