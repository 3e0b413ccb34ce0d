"""Run checkpoints: round trips, history, listing without messages, prefix sharing."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st
from support.backend_contract import HOSTILE_NAMES
from support.journal_helpers import ReadCounter, at, save_growing_run, stored, typed

import cas_journal as cj
from cas_journal.objects import Kind, MessageNode, canonical_json


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


def test_next_iteration_stores_only_new_messages_as_a_chain(j):
    j.checkpoints.segments = False  # runs saved before segments (see test_segments.py)
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
    with pytest.raises(ValueError, match="keys must be strings"):
        j.checkpoints.save(cj.Checkpoint(run_id="r", messages=[{"x": {1: "one"}}]))
    with pytest.raises(ValueError, match="not a JSON object"):
        j.checkpoints.save(cj.Checkpoint(run_id="r", messages=[{"ok": 1}, ["a list"]]))  # type: ignore[list-item]
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


# -- the per-run memo: O(new messages), exact, rebuilt after reopening ------------------------


def chain_of(j: cj.Journal, run_id: str) -> str | None:
    """The last message node of the run's newest checkpoint, as stored."""
    from cas_journal.objects import CheckpointNode

    oid = j.store.refs.read_ref(f"checkpoints/{run_id}")
    assert oid is not None
    return CheckpointNode.parse(j.store.objects.get(oid)[1]).messages


@pytest.fixture
def encodes(monkeypatch):
    """Counts messages encoded by checkpoint saves."""
    from cas_journal.journal import chains

    calls: list[int] = []
    for name in ("canonical_json", "canonical_json_of_plain"):
        real = getattr(chains, name)

        def counting(value, real=real):
            calls.append(1)
            return real(value)

        monkeypatch.setattr(chains, name, counting)
    return calls


def test_a_save_encodes_only_the_new_messages(tmp_path, encodes):
    messages = [{"role": "user", "content": f"m{i}", "n": i} for i in range(200)]
    with cj.Journal.open(tmp_path / "s", durable=False) as j:
        j.checkpoints.save(cj.Checkpoint(run_id="r", iteration=1, messages=messages))
        assert len(encodes) == 200
        for i in range(2, 6):
            messages = [*messages, {"role": "assistant", "content": f"new {i}"}]
            j.checkpoints.save(cj.Checkpoint(run_id="r", iteration=i, messages=messages))
        assert len(encodes) == 204
    with cj.Journal.open(tmp_path / "s", durable=False) as j:  # the memo is rebuilt lazily
        messages = [*messages, {"role": "user", "content": "after reopening"}]
        j.checkpoints.save(cj.Checkpoint(run_id="r", iteration=6, messages=messages))
        assert len(encodes) == 205
        assert j.checkpoints.load("r").messages == messages
        edited = [{"role": "user", "content": "changed first"}, *messages[1:]]
        j.checkpoints.save(cj.Checkpoint(run_id="r", iteration=7, messages=edited))
        assert len(encodes) == 205 + len(edited)  # everything after a change is new
        assert j.checkpoints.load("r").messages == edited


def test_messages_changed_in_place_between_saves_are_seen(j):
    messages = [{"role": "user", "content": "x", "meta": {"n": 1}}]
    j.checkpoints.save(cj.Checkpoint(run_id="r", iteration=1, messages=messages))
    messages[0]["meta"]["n"] = 2  # the caller mutates the very dict it saved
    j.checkpoints.save(cj.Checkpoint(run_id="r", iteration=2, messages=messages))
    assert j.checkpoints.load("r").messages == [{"role": "user", "content": "x", "meta": {"n": 2}}]
    loaded = j.checkpoints.load("r")
    loaded.messages[0]["meta"]["n"] = 99  # what load returns is the caller's own copy
    assert j.checkpoints.load("r").messages[0]["meta"]["n"] == 2


EQUAL_BUT_DIFFERENT = [
    (1, 1.0),
    (1, True),
    (0, False),
    (1.0, True),
    (0.0, -0.0),
    (0, 0.0),
    (2**70, float(2**70)),
    (None, "null"),
]


@pytest.mark.parametrize("segments", [False, True])
@pytest.mark.parametrize(("before", "after"), EQUAL_BUT_DIFFERENT)
def test_the_memo_tells_apart_values_that_compare_equal(before, after, segments):
    j = cj.Journal.memory()
    j.checkpoints.segments = segments
    first = [{"role": "user", "content": "q"}, {"v": before, "deep": [{"w": before}]}]
    second = [{"role": "user", "content": "q"}, {"v": after, "deep": [{"w": before}]}]
    third = [{"role": "user", "content": "q"}, {"v": after, "deep": [{"w": after}]}]
    for i, messages in enumerate((first, second, third, first)):
        j.checkpoints.save(cj.Checkpoint(run_id="r", iteration=i, messages=messages))
        loaded = j.checkpoints.load("r").messages
        assert typed(loaded) == typed(messages)  # 1 / 1.0 / True / -0.0 told apart
        assert typed(cj.Journal(j.store).checkpoints.load("r").messages) == typed(messages)
        if not segments:  # the same list saved with no memo: the same chain
            fresh = cj.Journal.memory()
            fresh.checkpoints.segments = False
            fresh.checkpoints.save(cj.Checkpoint(run_id="r", messages=messages))
            assert chain_of(j, "r") == chain_of(fresh, "r")


@pytest.mark.parametrize("before_saving", ["nothing", "a load"])
@pytest.mark.parametrize(("before", "after"), EQUAL_BUT_DIFFERENT)
def test_a_memo_read_from_the_store_tells_apart_values_that_compare_equal(
    before, after, before_saving
):
    """Each save in a new journal: its memo is read from the store (by the save itself,
    or by a load before it), and compared with the caller's messages one by one."""
    store = cj.Journal.memory().store
    first = [{"role": "user", "content": "q"}, {"v": before, "deep": [{"w": before}]}]
    second = [{"role": "user", "content": "q"}, {"v": after, "deep": [{"w": before}]}]
    third = [{"role": "user", "content": "q"}, {"v": after, "deep": [{"w": after}]}]
    for i, messages in enumerate((first, second, third, first, [*first, {"n": 1}])):
        j = cj.Journal(store)
        if i and before_saving == "a load":
            j.checkpoints.load("r")
        j.checkpoints.save(cj.Checkpoint(run_id="r", iteration=i, messages=messages))
        assert typed(cj.Journal(store).checkpoints.load("r").messages) == typed(messages)
        assert typed(j.checkpoints.load("r").messages) == typed(messages)


def _leaves(value: object, path: tuple = ()) -> list[tuple[tuple, object]]:
    """Every scalar of a message with its path (the model ``chains.snapshot`` follows)."""
    if isinstance(value, dict):
        return [leaf for key, item in value.items() for leaf in _leaves(item, (*path, key))]
    if isinstance(value, list | tuple):
        return [leaf for i, item in enumerate(value) for leaf in _leaves(item, (*path, i))]
    return [(path, value)]


@given(st.dictionaries(st.text(max_size=6), json_values, max_size=5))
def test_a_snapshot_copies_containers_shares_leaves_and_finds_every_number(message):
    from cas_journal.journal.chains import snapshot

    copy, numbers, long_ints = snapshot(message)
    assert typed(copy) == typed(message)
    assert not set(_containers(copy)) & set(_containers(message))  # no container shared
    ours, theirs = _leaves(copy), _leaves(message)
    assert all(a[1] is b[1] for a, b in zip(ours, theirs, strict=True))  # shared leaves
    expected = [
        (path, type(value), isinstance(value, float) and math.copysign(1.0, value) < 0)
        for path, value in theirs
        if type(value) in (int, float, bool)
    ]
    assert list(numbers) == expected
    assert long_ints == any(type(v) is int and abs(v) >= 2**63 for _, v in theirs)


def test_nan_is_refused_even_where_none_was_saved(j):
    j.checkpoints.save(cj.Checkpoint(run_id="r", messages=[{"v": None}]))
    with pytest.raises(ValueError):
        j.checkpoints.save(cj.Checkpoint(run_id="r", messages=[{"v": float("nan")}]))
    assert j.checkpoints.load("r").messages == [{"v": None}]


@given(
    st.lists(
        st.lists(st.dictionaries(st.text(max_size=3), json_values, max_size=3), max_size=5),
        min_size=1,
        max_size=5,
    )
)
def test_memo_saves_store_the_chain_a_memoless_save_stores(lists):
    j = cj.Journal.memory()
    j.checkpoints.segments = False  # a chain is one per list; segments are not (see
    grown: list[dict] = []  # test_segments.py for their round trip against a model)
    for i, extra in enumerate(lists):
        grown = grown[: len(grown) // 2] + extra if i % 2 else grown + extra
        j.checkpoints.save(cj.Checkpoint(run_id="r", iteration=i, messages=grown))
        fresh = cj.Journal.memory()
        fresh.checkpoints.segments = False
        fresh.checkpoints.save(cj.Checkpoint(run_id="r", messages=grown))
        assert chain_of(j, "r") == chain_of(fresh, "r")
        assert j.checkpoints.load("r").messages == grown


def test_load_of_any_iteration_reads_the_chain_from_the_memo(j):
    messages: list[dict] = []
    for i in range(1, 6):
        messages = [*messages, {"role": "user", "content": f"step {i}"}]
        j.checkpoints.save(cj.Checkpoint(run_id="r", iteration=i, messages=messages))
    counter = ReadCounter(j)
    assert j.checkpoints.load("r", iteration=2).messages == messages[:2]
    assert j.checkpoints.load("r").messages == messages
    assert counter.reads[Kind.MESSAGE] == 0 and counter.reads[Kind.BLOB] == 0


def test_a_third_load_is_an_exact_copy_without_reading_or_parsing(j, monkeypatch):
    from cas_journal.journal import chains, checkpoints

    tricky = {"i": 1, "f": 1.0, "b": True, "z": -0.0, "big": 2**70, "n": None, "s": "é\u2028"}
    messages = [{"role": "user", "content": "q", "v": tricky}, {"deep": [[{"x": [1, 2.5]}]]}]
    j.checkpoints.save(cj.Checkpoint(run_id="r", iteration=1, messages=messages))
    images: list[int] = []
    real_image = checkpoints.MessagesImage
    monkeypatch.setattr(checkpoints, "MessagesImage", lambda m: images.append(1) or real_image(m))
    first = j.checkpoints.load("r").messages
    assert images == []  # a chain loaded once (a new process restoring a run) is not imaged
    assert typed(j.checkpoints.load("r").messages) == typed(messages)
    assert images == [1]
    from cas_journal.objects import nodes

    parses: list[int] = []
    real = chains.parse_json_exact
    for module in (chains, nodes):  # chain messages and segments
        monkeypatch.setattr(module, "parse_json_exact", lambda b: parses.append(1) or real(b))
    counter = ReadCounter(j)
    second = j.checkpoints.load("r").messages
    assert typed(second) == typed(first) == typed(messages)
    assert list(second[0]["v"]) == list(first[0]["v"])  # key order kept
    assert parses == [] and sum(counter.reads.values()) == 0
    first[0]["v"]["i"] = 99  # every load is the caller's own copy
    second[1]["deep"][0][0]["x"].append(3)
    third = j.checkpoints.load("r").messages
    assert typed(third) == typed(messages)
    assert third[0] is not second[0] and third[1]["deep"] is not second[1]["deep"]


_JSON_SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**80), max_value=2**80)
    | st.floats(allow_nan=False)
    | st.text(max_size=40)
)
_JSON_VALUES = st.recursive(
    _JSON_SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner),
    max_leaves=30,
)


def _containers(value: object) -> list[int]:
    """The ids of every dict and list in ``value``."""
    found: list[int] = []
    pending = [value]
    while pending:
        current = pending.pop()
        if isinstance(current, dict):
            found.append(id(current))
            pending.extend(current.values())
        elif isinstance(current, list):
            found.append(id(current))
            pending.extend(current)
    return found


@given(st.lists(st.dictionaries(st.text(max_size=12), _JSON_VALUES, max_size=5), max_size=6))
def test_an_image_copy_is_exact_and_shares_no_container(messages):
    from cas_journal.journal.chains import MessagesImage

    image = MessagesImage(messages)
    first, second = image.copy(), image.copy()
    assert typed(first) == typed(second) == typed(messages)
    assert [list(m) for m in first] == [list(m) for m in messages]  # key order kept
    mine, theirs = _containers(first), _containers(second)
    assert not set(mine) & (set(theirs) | set(_containers(messages)))
    for message in first:  # a change to one copy is not seen by the next
        message["changed"] = 1
    assert typed(image.copy()) == typed(messages)


def test_image_copies_share_strings_not_containers():
    from cas_journal.journal.chains import MessagesImage

    text = "".join(["long text ", "of a message"])  # built at run time: not interned
    image = MessagesImage([{"role": "user", "content": [{"type": "text", "text": text}]}])
    first, second = image.copy(), image.copy()
    assert first == second and first[0] is not second[0]
    assert first[0]["content"] is not second[0]["content"]
    assert first[0]["content"][0]["text"] is second[0]["content"][0]["text"]


def test_loads_of_deeply_nested_and_long_messages_stay_exact():
    j = cj.Journal.memory()
    deep: dict = {"leaf": "x" * 100}
    for _ in range(200):  # deeper than orjson reads
        deep = {"d": [deep]}
    messages = [{"role": "user", "content": "y" * 5000}, {"deep": deep, "s": "z" * 64}]
    j.checkpoints.save(cj.Checkpoint(run_id="r", messages=messages))
    loads = [j.checkpoints.load("r").messages for _ in range(3)]
    assert all(loaded == messages for loaded in loads)
    loads[1][1]["deep"]["d"][0] = None  # copies share no container
    assert j.checkpoints.load("r").messages == messages


def test_a_save_on_a_stale_remembered_head_rebuilds_on_the_ref(j):
    other = cj.Journal(j.store)  # a second writer on the same store, its own memo
    messages = [{"role": "user", "content": "q"}]
    j.checkpoints.save(cj.Checkpoint(run_id="r", iteration=1, messages=messages))
    theirs = [*messages, {"role": "assistant", "content": "theirs"}]
    other.checkpoints.save(cj.Checkpoint(run_id="r", iteration=2, messages=theirs))
    ours = [*messages, {"role": "assistant", "content": "ours"}]
    j.checkpoints.save(cj.Checkpoint(run_id="r", iteration=3, messages=ours))
    assert [c.iteration for c in j.checkpoints.history("r")] == [3, 2, 1]
    assert other.checkpoints.load("r").messages == ours
    other.checkpoints.delete("r")  # gone under j's memo: a new history starts
    j.checkpoints.save(cj.Checkpoint(run_id="r", iteration=4, messages=ours))
    assert [c.iteration for c in other.checkpoints.history("r")] == [4]
    assert cj.Journal(j.store).checkpoints.load("r").messages == ours


def test_a_deleted_run_is_listed_and_restored(j):
    j.checkpoints.save(cj.Checkpoint(run_id="keep", messages=[{"a": 1}], created_at=at(1)))
    for i in (1, 2):
        j.checkpoints.save(
            cj.Checkpoint(run_id="r", iteration=i, messages=[{"i": i}], created_at=at(i))
        )
    assert j.checkpoints.deleted() == []
    with pytest.raises(cj.ConflictError):
        j.checkpoints.restore("r")
    j.checkpoints.delete("r")
    deleted = j.checkpoints.deleted()
    assert [(c.run_id, c.iteration, c.message_count) for c in deleted] == [("r", 2, 1)]
    restored = j.checkpoints.restore("r")
    assert (restored.run_id, restored.iteration) == ("r", 2)
    assert j.checkpoints.load("r").messages == [{"i": 2}]
    assert [c.iteration for c in j.checkpoints.history("r")] == [2, 1]
    assert j.checkpoints.deleted() == []
    with pytest.raises(cj.CheckpointNotFound):
        j.checkpoints.restore("never-saved")


def test_a_new_process_reads_a_run_stored_as_rows_in_few_queries(tmp_path):
    with cj.Journal.open(tmp_path / "s", durable=False) as j:
        messages = save_growing_run(j, "r", 100)
    with cj.Journal.open(tmp_path / "s", durable=False) as j:
        statements: list[str] = []
        j.store.objects.db.connection().set_trace_callback(statements.append)
        assert j.checkpoints.load("r").messages == messages
        object_reads = [s for s in statements if "FROM objects" in s]
        assert len(object_reads) <= 30, object_reads  # 600 messages: not one query each


def _rows_run(root, count: int = 40) -> list[dict]:
    """A run saved one message per iteration into a local store (rows, not packed), as
    a message chain (how runs were saved before segments)."""
    messages: list[dict] = []
    with cj.Journal.open(root, durable=False) as j:
        j.checkpoints.segments = False
        for i in range(count):
            messages = [*messages, {"role": "user", "content": f"message {i} " + "x" * 40}]
            j.checkpoints.save(cj.Checkpoint(run_id="r", iteration=i, messages=messages))
    return messages


def test_a_new_process_picks_messages_up_from_the_row_windows(tmp_path):
    messages = _rows_run(tmp_path / "s")
    with cj.Journal.open(tmp_path / "s", durable=False) as j:
        statements: list[str] = []
        j.store.objects.db.connection().set_trace_callback(statements.append)
        assert j.checkpoints.load("r").messages == messages
        object_reads = [s for s in statements if "FROM objects" in s]
        # each message was written just before its node: the windows read for the nodes
        # hold them, so only the messages of the nodes read before the first window (two
        # single-row reads) are left for a batch query
        batched = [s for s in object_reads if " IN (" in s]
        assert sum(s.count("x'") for s in batched) <= 2, object_reads


@pytest.mark.parametrize("victim", ["first", "middle", "last"])
def test_a_damaged_message_row_is_a_clear_error_naming_it(tmp_path, victim):
    from support.store_helpers import corrupt_row

    messages = _rows_run(tmp_path / "s")
    with cj.Journal.open(tmp_path / "s", durable=False) as j:
        blobs = {
            oid: body
            for oid in j.store.objects.iter_oids()
            for kind, body in [j.store.objects.get(oid)]
            if kind is Kind.BLOB
        }
    index = {"first": 0, "middle": len(messages) // 2, "last": len(messages) - 1}[victim]
    wanted = canonical_json(messages[index])
    oid = next(oid for oid, body in blobs.items() if body == wanted)
    corrupt_row(tmp_path / "s", oid)
    with (
        cj.Journal.open(tmp_path / "s", durable=False) as j,
        pytest.raises(cj.CorruptObject) as raised,
    ):
        j.checkpoints.load("r")
    assert oid in str(raised.value)


def test_local_get_if_read_answers_only_from_the_last_window(tmp_path):
    _rows_run(tmp_path / "s")
    with cj.Journal.open(tmp_path / "s", durable=False) as j:
        store = j.store.objects
        nodes = [oid for oid in store.iter_oids() if store.get(oid)[0] is Kind.MESSAGE]
    with cj.Journal.open(tmp_path / "s", durable=False) as j:
        store = j.store.objects
        assert all(store.get_if_read(oid) is None for oid in nodes)  # nothing read yet
        chain = [j.checkpoints.node(_head(j)).messages]
        for _ in range(3):  # two reads close together: the third comes with a window
            (_, _, body), *_ = store.get_with_neighbours(chain[-1])
            chain.append(MessageNode.parse(body).parent)
        message = MessageNode.parse(store.get(chain[2])[1]).message
        assert store.get_if_read(message) == store.get(message)
        assert store.get_if_read(message) is None  # handed out once


def _head(j: cj.Journal) -> str:
    head = j.store.refs.read_ref("checkpoints/r")
    assert head is not None
    return head
