"""Run checkpoints: round trips, history, listing without messages, prefix sharing."""

from __future__ import annotations

import pytest
from backend_contract import HOSTILE_NAMES
from hypothesis import given
from hypothesis import strategies as st
from journal_helpers import ReadCounter, at, stored

import cas_journal as cj
from cas_journal.objects import Kind


@pytest.fixture(params=["memory", "local", "s3"])
def j(request, tmp_path):
    if request.param == "s3":
        server = request.getfixturevalue("s3_server")
        journal = cj.Journal(server.open(server.new_bucket()))
    elif request.param == "memory":
        journal = cj.Journal.memory()
    else:
        journal = cj.Journal.open(tmp_path / "s")
    yield journal
    journal.close()


ANTHROPIC = [
    {"role": "user", "content": "Fix the bug in parser.py"},
    {
        "role": "assistant",
        "content": [
            {"type": "text", "text": "Reading the file."},
            {"type": "tool_use", "id": "toolu_1", "name": "read", "input": {"path": "parser.py"}},
        ],
    },
    {
        "role": "user",
        "content": [
            {
                "type": "tool_result",
                "tool_use_id": "toolu_1",
                "content": "def parse(x):\n    return x\n",
            },
        ],
    },
]
OPENAI = [
    {"role": "system", "content": "You are terse."},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "f", "arguments": '{"a": 1.5}'},
            }
        ],
    },
    {"role": "tool", "tool_call_id": "call_1", "content": ""},
]


def test_save_load_round_trip(j):
    saved = j.checkpoints.save(
        cj.Checkpoint(
            run_id="r1",
            task_name="fix",
            iteration=1,
            messages=ANTHROPIC + OPENAI,
            system_prompt="be careful",
            input_tokens=100,
            output_tokens=7,
            created_at=at(5),
        )
    )
    assert saved.created_at == at(5) and saved.message_count == 6
    loaded = j.checkpoints.load("r1")
    assert loaded.messages == ANTHROPIC + OPENAI
    assert (loaded.run_id, loaded.task_name, loaded.iteration) == ("r1", "fix", 1)
    assert (loaded.system_prompt, loaded.input_tokens, loaded.output_tokens) == (
        "be careful",
        100,
        7,
    )
    assert loaded.created_at == at(5) and loaded.message_count == 6
    assert j.checkpoints.has_checkpoint("r1") and not j.checkpoints.has_checkpoint("r2")
    with pytest.raises(cj.CheckpointNotFound):
        j.checkpoints.load("r2")


def test_history_keeps_every_iteration_newest_first(j):
    messages: list[dict] = []
    for i in range(1, 6):
        messages = [*messages, {"role": "user", "content": f"step {i}"}]
        j.checkpoints.save(
            cj.Checkpoint(run_id="r", iteration=i, messages=messages, created_at=at(i))
        )
    history = j.checkpoints.history("r")
    assert [c.iteration for c in history] == [5, 4, 3, 2, 1]
    assert [c.message_count for c in history] == [5, 4, 3, 2, 1]
    assert all(c.messages == [] for c in history)
    assert j.checkpoints.load("r", iteration=3).messages == messages[:3]
    assert j.checkpoints.load("r").iteration == 5
    with pytest.raises(cj.CheckpointNotFound):
        j.checkpoints.load("r", iteration=99)


def test_delete_is_idempotent(j):
    j.checkpoints.save(cj.Checkpoint(run_id="r", messages=[{"role": "user", "content": "x"}]))
    j.checkpoints.delete("r")
    j.checkpoints.delete("r")
    j.checkpoints.delete("never")
    assert not j.checkpoints.has_checkpoint("r")
    assert j.checkpoints.list() == []


def test_list_is_newest_first_and_reads_no_messages(j):
    for i, run in enumerate(["b", "a", "c"]):
        j.checkpoints.save(
            cj.Checkpoint(
                run_id=run,
                iteration=i,
                created_at=at(10 if run != "c" else 20),
                messages=[{"role": "user", "content": f"{run} {n}"} for n in range(50)],
            )
        )
    fresh = cj.Journal(j.store)
    counter = ReadCounter(fresh)
    listed = fresh.checkpoints.list()
    assert [c.run_id for c in listed] == ["c", "a", "b"]
    assert all(c.messages == [] and c.message_count == 50 for c in listed)
    assert counter.reads[Kind.MESSAGE] == 0
    assert counter.reads[Kind.CHECKPOINT] == 3


def test_next_iteration_stores_only_new_messages(j):
    messages = [{"role": "user", "content": f"message number {i} " * 20} for i in range(100)]
    j.checkpoints.save(cj.Checkpoint(run_id="r", iteration=1, messages=messages, system_prompt="S"))
    before = stored(j)
    grown = [
        *messages,
        {"role": "assistant", "content": "new 1"},
        {"role": "user", "content": "new 2"},
    ]
    j.checkpoints.save(cj.Checkpoint(run_id="r", iteration=2, messages=grown, system_prompt="S"))
    added = [j.store.objects.get(oid)[0] for oid in stored(j) - before]
    assert sorted(added) == sorted(
        [Kind.BLOB, Kind.BLOB, Kind.MESSAGE, Kind.MESSAGE, Kind.CHECKPOINT]
    )
    # an edited message in the middle re-stores only the chain after it
    edited = list(grown)
    edited[98] = {"role": "user", "content": "changed"}
    before = stored(j)
    j.checkpoints.save(cj.Checkpoint(run_id="r", iteration=3, messages=edited, system_prompt="S"))
    added = [j.store.objects.get(oid)[0] for oid in stored(j) - before]
    assert added.count(Kind.MESSAGE) == 4 and added.count(Kind.BLOB) == 1
    assert j.checkpoints.load("r").messages == edited


def test_runs_share_common_messages(j):
    common = [{"role": "system", "content": "shared prompt " * 100}]
    j.checkpoints.save(cj.Checkpoint(run_id="a", messages=common))
    before = stored(j)
    j.checkpoints.save(cj.Checkpoint(run_id="b", messages=common))
    added = [j.store.objects.get(oid)[0] for oid in stored(j) - before]
    assert added == [Kind.CHECKPOINT]


@pytest.mark.parametrize("run_id", HOSTILE_NAMES)
def test_hostile_run_ids(j, run_id):
    j.checkpoints.save(cj.Checkpoint(run_id=run_id, messages=[{"role": "user", "content": run_id}]))
    assert j.checkpoints.load(run_id).messages == [{"role": "user", "content": run_id}]
    assert [c.run_id for c in j.checkpoints.list()] == [run_id]


def test_non_json_messages_are_refused(j):
    with pytest.raises(ValueError):
        j.checkpoints.save(cj.Checkpoint(run_id="r", messages=[{"x": float("nan")}]))
    with pytest.raises(ValueError):
        j.checkpoints.save(cj.Checkpoint(run_id="r", messages=[{"x": object()}]))
    assert not j.checkpoints.has_checkpoint("r")


json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(2**53), 2**53)
    | st.text(max_size=20)
    | st.floats(allow_nan=False, allow_infinity=False)
)
json_values = st.recursive(
    json_scalars,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=12,
)


@given(st.lists(st.dictionaries(st.text(max_size=10), json_values, max_size=4), max_size=6))
def test_arbitrary_json_messages_load_back_equal(messages):
    j = cj.Journal.memory()
    j.checkpoints.save(cj.Checkpoint(run_id="r", messages=messages))
    assert j.checkpoints.load("r").messages == messages
