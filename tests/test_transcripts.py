"""Claude Code, Codex and pi transcripts: import, export byte for byte, sharing, bad input."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st
from support.transcript_samples import GENERATORS, dump, write_jsonl

import cas_journal as cj
from cas_journal.cli import cli
from cas_journal.journal.helpers import compaction_entry
from cas_journal.transcripts import (
    FORMATS,
    TranscriptError,
    export_transcripts,
    import_transcripts,
    session_file,
    transcript_format,
)
from cas_journal.transcripts import source as source_module
from cas_journal.transcripts.manifest import MANIFEST_KEY, RECORD_KEY
from cas_journal.transcripts.source import parse_source

ALL = sorted(GENERATORS)


def project(tmp_path: Path, fmt: str, seed: int = 7, sessions: int = 3) -> tuple[Path, list[Path]]:
    root = tmp_path / f"{fmt}-source"
    return root, GENERATORS[fmt](root, random.Random(seed), sessions)


def object_count(j: cj.Journal) -> int:
    return sum(1 for _ in j.store.objects.iter_oids())


def by_record(j: cj.Journal, thread: str, key: str) -> dict:
    """The thread's record entries by a field of their record (the manifest left out)."""
    return {
        json.loads(e.metadata[RECORD_KEY]).get(key): e
        for e in j.entries(thread)
        if RECORD_KEY in e.metadata
    }


def records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text("utf-8").splitlines() if line.strip()]


# -- round trips -----------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", ALL)
def test_export_gives_back_every_file_byte_for_byte(tmp_path, fmt):
    root, paths = project(tmp_path, fmt)
    with cj.Journal.open(tmp_path / "store", durable=False) as j:
        report = import_transcripts(j, [root], fmt)
        assert report.files == len(paths) and len(report.threads_created) == len(paths)
        assert report.records == sum(len(records(p)) for p in paths)
        out = tmp_path / "out"
        exported = export_transcripts(j, fmt, out)
    assert sorted(exported.files) == sorted(p.relative_to(root).as_posix() for p in paths)
    for path in paths:
        back = out / path.relative_to(root)
        assert records(back) == records(path)  # the parsed records ...
        assert back.read_bytes() == path.read_bytes()  # ... and the very bytes


@pytest.mark.parametrize("fmt", ALL)
def test_reimport_changes_nothing(tmp_path, fmt):
    root, _paths = project(tmp_path, fmt)
    j = cj.Journal.memory()
    first = import_transcripts(j, [root], fmt)
    objects = object_count(j)
    again = import_transcripts(j, [root], fmt)
    assert again.threads_created == [] and sorted(again.threads_unchanged) == sorted(
        first.threads_created
    )
    assert again.objects_written == 0 and object_count(j) == objects


@pytest.mark.parametrize("fmt", ALL)
def test_sessions_that_copy_records_share_entries(tmp_path, fmt):
    """A resumed (Claude Code) or forked (Codex, pi) session repeats its source's records:
    those become the source's entries, and the thread is a fork of the source's."""
    root, paths = project(tmp_path, fmt)
    j = cj.Journal.memory()
    report = import_transcripts(j, [root], fmt)
    assert report.records_shared > 0
    forks = [m for m in j.list_threads() if m.forked_from_thread_id]
    assert forks, "the copying session is recorded as a fork"
    for meta in forks:
        source_ids = {e.id for e in j.entries(meta.forked_from_thread_id)}
        fork_path = [e.id for e in j.path(meta.id)]
        assert meta.forked_from_entry_id in source_ids
        cut = fork_path.index(meta.forked_from_entry_id)
        assert set(fork_path[: cut + 1]) <= source_ids  # the whole prefix is shared
        assert cut >= 2
    # each shared record is stored once: fewer entry objects than records
    entries = sum(
        1 for oid in j.store.objects.iter_oids() if j.store.objects.get(oid)[0].value == "entry"
    )
    assert entries < report.records + len(paths)


def test_importing_sessions_one_by_one_shares_the_same_way(tmp_path):
    """A fork imported in a later run finds its source in the store."""
    root, paths = project(tmp_path, "codex")
    together = cj.Journal.memory()
    import_transcripts(together, [root], "codex")
    apart = cj.Journal.memory()
    for path in paths:
        import_transcripts(apart, [path], "codex")
    for meta in together.list_threads():
        assert [e.id for e in apart.path(meta.id)] == [e.id for e in together.path(meta.id)]
        assert apart.thread(meta.id).forked_from_entry_id == meta.forked_from_entry_id
        assert session_file(apart, meta.id).data == session_file(together, meta.id).data


# -- what the entries say --------------------------------------------------------------------


def test_claude_code_mapping(tmp_path):
    root, paths = project(tmp_path, "claude-code")
    j = cj.Journal.memory()
    import_transcripts(j, [root], "claude-code")
    main = paths[0]
    thread = f"claude-code/{main.stem}"
    lines = records(main)
    meta = j.thread(thread)
    path = j.path(thread)
    by_uuid = by_record(j, thread, "uuid")
    # the leaf is the last record with a uuid; the title the summary line's
    assert by_uuid[[r for r in lines if "uuid" in r][-1]["uuid"]].id == meta.leaf_id
    assert meta.title == next(r["summary"] for r in lines if r["type"] == "summary")
    # compact_boundary: a compaction entry on the path, under its logical parent
    boundary = next(r for r in lines if r.get("subtype") == "compact_boundary")
    compaction = by_uuid[boundary["uuid"]]
    assert compaction.type is cj.EntryType.COMPACTION and compaction in path
    assert compaction.parent_id == by_uuid[boundary["logicalParentUuid"]].id
    summary = next(r for r in lines if r.get("isCompactSummary"))
    assert compaction.summary == summary["message"]["content"]
    assert compaction.compaction_trigger == "auto" and compaction.tokens_before > 0
    assert by_uuid[summary["uuid"]].type is cj.EntryType.CUSTOM  # not sent twice
    context = cj.build_context(path)
    assert (
        context[0].kind == "compaction_summary"
        and summary["message"]["content"] in context[0].content
    )
    # the rewind left a branch: the thread reaches both ends
    parents = [r.get("parentUuid") for r in lines if "uuid" in r]
    forked = {p for p in parents if p is not None and parents.count(p) > 1}
    assert forked
    # tool use and its result
    call = next(e for e in path if e.type is cj.EntryType.TOOL_CALL)
    result = next(e for e in path if e.type is cj.EntryType.TOOL_RESULT)
    (tool_call,) = call.message.tool_calls()  # Claude's own tool_use block
    assert tool_call.name == "Read" and json.loads(tool_call.arguments)["file_path"]
    (block,) = result.message.content  # a user message holding the tool_result block
    assert result.message.role == "user" and block["type"] == "tool_result"
    assert block["tool_use_id"] == tool_call.id and "def " in block["content"]
    thinking = next(
        e
        for e in path
        if e.message and e.message.text() == "" and e.type is cj.EntryType.ASSISTANT_MESSAGE
    )
    assert thinking.message.content[0]["type"] == "thinking"
    # the subagent file: its own thread under the session's
    agent = next(p for p in paths if p.name.startswith("agent-"))
    agent_meta = j.thread(f"claude-code/{main.stem}/{agent.stem}")
    assert agent_meta.parent_thread_id == thread
    # unknown record types and fields are kept
    raw = [e.metadata.get(RECORD_KEY, "") for e in j.entries(thread)]
    assert any('"x-telemetry"' in r for r in raw) and any("futureField" in r for r in raw)


def test_codex_mapping(tmp_path):
    root, paths = project(tmp_path, "codex")
    j = cj.Journal.memory()
    import_transcripts(j, [root], "codex")
    source = records(paths[0])
    thread = f"codex/{source[0]['payload']['id']}"
    path = j.path(thread)
    assert len(path) == len(source)  # one chain, in file order
    assert [json.loads(e.metadata[RECORD_KEY]) for e in path] == source
    compaction = next(e for e in path if e.type is cj.EntryType.COMPACTION)
    assert compaction.summary.startswith("Summary of the work so far")
    call = next(e for e in path if e.type is cj.EntryType.TOOL_CALL)
    assert call.message.tool_name == "shell" and call.message.tool_call_id.startswith("call_")
    result = next(e for e in path if e.type is cj.EntryType.TOOL_RESULT)
    assert result.message.tool_call_id == call.message.tool_call_id
    fork = records(paths[1])
    fork_meta = j.thread(f"codex/{fork[0]['payload']['id']}")
    assert fork_meta.forked_from_thread_id == thread
    # the copied lines carry new timestamps, yet share the source's entries
    shared = j.path(fork_meta.id)
    cut = [e.id for e in shared].index(fork_meta.forked_from_entry_id)
    assert [e.id for e in shared[: cut + 1]] == [e.id for e in path[: cut + 1]]
    assert fork[1]["timestamp"] != source[0]["timestamp"]
    assert json.loads(shared[cut + 1].metadata[RECORD_KEY]) == fork[0]  # its own header next


def test_pi_mapping(tmp_path):
    root, paths = project(tmp_path, "pi")
    j = cj.Journal.memory()
    import_transcripts(j, [root], "pi")
    lines = records(paths[0])
    thread = f"pi/{lines[0]['id']}"
    meta = j.thread(thread)
    assert meta.title == [r for r in lines if r["type"] == "session_info"][-1]["name"]
    entries = by_record(j, thread, "id")
    assert len(entries) == len(lines) - 1  # the header lives in the manifest
    assert entries[lines[-1]["id"]].id == meta.leaf_id
    record = next(r for r in lines if r["type"] == "compaction")
    compaction = entries[record["id"]]
    assert compaction.type is cj.EntryType.COMPACTION
    assert compaction.first_kept_entry_id == entries[record["firstKeptEntryId"]].id
    assert compaction.tokens_before == record["tokensBefore"]
    branch = next(r for r in lines if r["type"] == "branch_summary")
    assert entries[branch["id"]].type is cj.EntryType.BRANCH_SUMMARY
    assert entries[branch["id"]].parent_id == entries[branch["parentId"]].id
    call = next(r for r in lines if r["type"] == "message" and r["message"]["role"] == "assistant")
    blocks = entries[call["id"]].message.content
    assert [b["type"] for b in blocks] == ["thinking", "text", "tool_use"]
    (tool_call,) = entries[call["id"]].message.tool_calls()
    assert tool_call.name == "read" and entries[call["id"]].type is cj.EntryType.TOOL_CALL
    label = next(r for r in lines if r["type"] == "label")
    assert entries[label["id"]].type is cj.EntryType.CUSTOM
    # the abandoned branch stays readable; the context starts from the compaction summary
    assert len({e.id for e in j.entries(thread)}) > len(j.path(thread))
    context = cj.build_context(j.path(thread))
    assert context[0].kind == "compaction_summary"
    assert context[0].content.startswith("## Goal") or "## Goal" in context[0].content
    fork_header = records(paths[1])[0]
    assert j.thread(f"pi/{fork_header['id']}").parent_thread_id == thread


def test_compaction_entries_are_what_append_compaction_records():
    result = cj.CompactionResult(
        compaction_id="c1", summary="s", first_kept_entry_id="e", trigger="auto", tokens_before=9
    )
    j = cj.Journal.memory()
    j.create_thread(cj.ThreadMeta(id="t"))
    appended = cj.append_compaction(j, "t", "", result)
    assert cj.raw_for_entry(compaction_entry(result)) == appended.raw


# -- layout and unusual lines --------------------------------------------------------------


def _pi_lines() -> list[dict]:
    return [
        {"type": "session", "version": 3, "id": "s1", "timestamp": "2025-01-01T00:00:00.000Z"},
        {
            "type": "message",
            "id": "a",
            "parentId": None,
            "timestamp": "2025-01-01T00:00:01.000Z",
            "message": {"role": "user", "content": "hi"},
        },
        {
            "type": "message",
            "id": "b",
            "parentId": "a",
            "timestamp": "2025-01-01T00:00:02.000Z",
            "message": {"role": "assistant", "content": [{"type": "text", "text": "hello"}]},
        },
    ]


@pytest.mark.parametrize(
    "data",
    [
        b"\xef\xbb\xbf" + "".join(dump(r) + "\n" for r in _pi_lines()).encode(),
        "".join(dump(r) + "\r\n" for r in _pi_lines()).encode(),
        "\n".join(dump(r) for r in _pi_lines()).encode(),  # no final newline
        (
            "\n"
            + dump(_pi_lines()[0])
            + "\n  \n"
            + dump(_pi_lines()[1])
            + "\n\n"
            + json.dumps(_pi_lines()[2], indent=None)
            + "\n"
        ).encode(),  # blank, spaced lines
        "".join(json.dumps(r) + "\n" for r in _pi_lines()).encode(),  # Python's spacing
    ],
    ids=["bom", "crlf", "no-final-newline", "blank-and-spaced", "not-compact"],
)
def test_unusual_layouts_come_back_byte_for_byte(tmp_path, data):
    path = tmp_path / "in" / "s.jsonl"
    path.parent.mkdir()
    path.write_bytes(data)
    j = cj.Journal.memory()
    report = import_transcripts(j, [path], "pi")
    assert report.threads_created == ["pi/s1"]
    assert session_file(j, "pi/s1").data == data
    assert [e.message.text() for e in j.path("pi/s1")] == ["hi", "hello"]


# -- bad input -------------------------------------------------------------------------------


def _claude(tmp_path: Path, lines: list[str], name: str = "s.jsonl") -> Path:
    path = tmp_path / "bad" / name
    path.parent.mkdir(exist_ok=True)
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def _msg(uuid: str, parent: str | None, text: str = "x") -> str:
    return dump(
        {
            "parentUuid": parent,
            "sessionId": "s",
            "type": "user",
            "message": {"role": "user", "content": text},
            "uuid": uuid,
            "timestamp": "2025-01-01T00:00:00.000Z",
        }
    )


@pytest.mark.parametrize(
    "lines, expected",
    [
        ([_msg("a", None), "{not json", _msg("b", "a")], ":2: not valid JSON"),
        ([_msg("a", None), "[1, 2]"], ":2: not a JSON object"),
        ([_msg("a", "b"), _msg("b", "a")], "parent links form a cycle"),
        ([_msg("a", "a")], ":1: record is its own parent"),
        ([_msg("a", None), _msg("a", None, "other")], ":2: id 'a' already used on line 1"),
        (["[" * 100_000 + "]" * 100_000], ":1: "),
    ],
    ids=["malformed", "not-object", "cycle", "self-parent", "duplicate-id", "deep"],
)
def test_bad_lines_name_file_and_line_and_import_nothing(tmp_path, lines, expected):
    good_root, _ = project(tmp_path, "claude-code", sessions=1)
    bad = _claude(good_root, lines, "zz-bad.jsonl")
    j = cj.Journal.memory()
    with pytest.raises(TranscriptError) as caught:
        import_transcripts(j, [good_root], "claude-code")
    message = str(caught.value)
    assert message.startswith(str(bad)) and expected in message and "\n" not in message
    assert j.list_threads() == [] and object_count(j) == 0


def test_truncated_file_and_bad_utf8(tmp_path):
    j = cj.Journal.memory()
    truncated = tmp_path / "t.jsonl"
    truncated.write_bytes((_msg("a", None) + "\n" + _msg("b", "a")[:40]).encode())
    with pytest.raises(TranscriptError, match=r"t\.jsonl:2: not valid JSON.*truncated"):
        import_transcripts(j, [truncated], "claude-code")
    binary = tmp_path / "b.jsonl"
    binary.write_bytes(_msg("a", None).encode() + b"\n\xff\xfe\n")
    with pytest.raises(TranscriptError, match=r"b\.jsonl:2: not valid UTF-8"):
        import_transcripts(j, [binary], "claude-code")
    assert object_count(j) == 0


def test_absurd_sizes_are_refused_without_reading_them_whole(tmp_path, monkeypatch):
    monkeypatch.setattr(source_module, "MAX_LINE_BYTES", 1000)
    path = tmp_path / "big.jsonl"
    path.write_text(_msg("a", None) + "\n" + _msg("b", "a", "x" * 5000) + "\n")
    with pytest.raises(TranscriptError, match=r"big\.jsonl:2: line is longer than 1000 bytes"):
        import_transcripts(cj.Journal.memory(), [path], "claude-code")
    monkeypatch.setattr(source_module, "MAX_RECORDS", 1)
    with pytest.raises(TranscriptError, match=r":2: more than 1 records"):
        import_transcripts(
            cj.Journal.memory(), [_claude(tmp_path, [_msg("a", None)] * 2)], "claude-code"
        )


def test_wrong_format_and_missing_files(tmp_path):
    claude = _claude(tmp_path, [_msg("a", None)])
    j = cj.Journal.memory()
    with pytest.raises(TranscriptError, match=r"s\.jsonl:1: not a Codex rollout"):
        import_transcripts(j, [claude], "codex")
    with pytest.raises(TranscriptError, match=r"s\.jsonl:1: not a pi session"):
        import_transcripts(j, [claude], "pi")
    with pytest.raises(TranscriptError, match="no such file"):
        import_transcripts(j, [tmp_path / "missing.jsonl"], "pi")
    with pytest.raises(cj.JournalError, match="unknown transcript format"):
        transcript_format("gemini")
    empty = tmp_path / "empty" / "e.jsonl"
    empty.parent.mkdir()
    empty.write_bytes(b"")
    assert import_transcripts(j, [empty.parent], "pi").skipped == [str(empty)]


def test_a_thread_with_other_content_is_refused_before_writing(tmp_path):
    path = _claude(tmp_path, [_msg("a", None)])
    j = cj.Journal.memory()
    import_transcripts(j, [path], "claude-code")
    objects = object_count(j)
    path.write_text(_msg("a", None, "edited") + "\n")
    with pytest.raises(cj.ThreadExists, match="already exists with other records"):
        import_transcripts(j, [path], "claude-code")
    assert object_count(j) == objects


def test_export_refuses_threads_it_cannot_write(tmp_path):
    j = cj.Journal.memory()
    j.create_thread(cj.ThreadMeta(id="native"))
    with pytest.raises(cj.JournalError, match="not imported from a transcript"):
        export_transcripts(j, "pi", tmp_path, ["native"])
    root, _ = project(tmp_path, "pi", sessions=1)
    import_transcripts(j, [root], "pi")
    thread = next(m.id for m in j.list_threads() if m.id.startswith("pi/"))
    with pytest.raises(cj.JournalError, match="imported from pi, not codex"):
        export_transcripts(j, "codex", tmp_path, [thread])


def test_export_never_writes_outside_its_directory(tmp_path):
    j = cj.Journal.memory()
    path = _claude(tmp_path, [_msg("a", None)])
    import_transcripts(j, [path], "claude-code")
    entry = next(e for e in j.entries("claude-code/s") if MANIFEST_KEY in e.metadata)
    manifest = json.loads(entry.metadata[MANIFEST_KEY])
    manifest["path"] = "../../escape.jsonl"
    hostile = entry.model_copy(update={"metadata": {MANIFEST_KEY: dump(manifest)}, "id": ""})
    j.append(hostile.model_copy(update={"thread_id": "claude-code/s"}))
    with pytest.raises(cj.CorruptObject, match="leaves the output directory"):
        export_transcripts(j, "claude-code", tmp_path / "out")
    assert not (tmp_path / "escape.jsonl").exists()


# -- property tests --------------------------------------------------------------------------

JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**60), 2**60)
    | st.floats(allow_nan=False)
    | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=10,
)


@settings(max_examples=150)
@given(st.binary(max_size=400))
def test_parser_accepts_or_names_the_line(data):
    import io

    try:
        parsed = parse_source(io.BytesIO(data), Path("f.jsonl"), "f.jsonl", len(data))
    except TranscriptError as exc:
        assert str(exc).startswith("f.jsonl") and "\n" not in str(exc)
        return
    assert all(isinstance(line.record, dict) for line in parsed.lines)


@pytest.mark.slow
@settings(max_examples=60)
@given(
    records=st.lists(
        st.tuples(
            st.sampled_from(["user", "assistant", "system", "summary", "x-new"]),
            st.integers(0, 6),  # uuid (0: none)
            st.integers(0, 6),  # parent uuid (0: null)
            st.dictionaries(st.text(max_size=6), JSON_VALUES, max_size=3),
            st.booleans(),  # compact JSON or spaced
        ),
        min_size=1,
        max_size=12,
    ),
    bom=st.booleans(),
)
def test_any_claude_code_file_round_trips_or_fails_cleanly(records, bom):
    import tempfile

    lines = []
    for kind, uuid, parent, extra, compact in records:
        record: dict = {"type": kind, "sessionId": "s"}
        if uuid:
            record["uuid"] = f"u{uuid}"
            record["parentUuid"] = f"u{parent}" if parent else None
        if kind in ("user", "assistant"):
            record["message"] = {"role": kind, "content": [{"type": "text", "text": str(extra)}]}
        record.update({k: v for k, v in extra.items() if k not in record})
        lines.append(dump(record) if compact else json.dumps(record))
    data = ("\ufeff" if bom else "") + "".join(line + "\n" for line in lines)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "s.jsonl"
        path.write_bytes(data.encode("utf-8", "surrogatepass"))
        j = cj.Journal.memory()
        try:
            import_transcripts(j, [path], "claude-code")
        except TranscriptError as exc:
            assert str(exc).startswith(str(path)) and "\n" not in str(exc)
            assert object_count(j) == 0
            return
        assert session_file(j, "claude-code/s").data == path.read_bytes()


# -- command line ----------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", ALL)
def test_cli_import_and_export(tmp_path, fmt):
    root, paths = project(tmp_path, fmt, sessions=2)
    store = str(tmp_path / "store")
    runner = CliRunner()
    assert runner.invoke(cli, ["--store", store, "init"]).exit_code == 0
    result = runner.invoke(cli, ["--store", store, "import", "--format", fmt, str(root), "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert len(report["threads_created"]) == len(paths) and report["source_bytes"] > 0
    again = runner.invoke(cli, ["--store", store, "import", "--format", fmt, str(root)])
    assert again.exit_code == 0 and "unchanged thread" in again.stdout
    out = tmp_path / "out"
    result = runner.invoke(cli, ["--store", store, "export", "--format", fmt, "--out", str(out)])
    assert result.exit_code == 0, result.output
    for path in paths:
        assert (out / path.relative_to(root)).read_bytes() == path.read_bytes()
    one = report["threads_created"][0]
    result = runner.invoke(
        cli, ["--store", store, "export", "--format", fmt, "--out", str(tmp_path / "one"), one]
    )
    assert result.exit_code == 0 and len(list((tmp_path / "one").rglob("*.jsonl"))) == 1


def test_cli_errors_are_one_line(tmp_path):
    store = str(tmp_path / "store")
    runner = CliRunner()
    runner.invoke(cli, ["--store", store, "init"])
    bad = _claude(tmp_path, [_msg("a", None), "{oops"])
    result = runner.invoke(cli, ["--store", store, "import", "--format", "claude-code", str(bad)])
    assert result.exit_code == 1
    assert (
        result.stderr.strip()
        == f"Error: {bad}:2: not valid JSON: Expecting property name enclosed in double quotes"
    )
    result = runner.invoke(cli, ["--store", store, "export", "--format", "pi"])
    assert result.exit_code == 2 and "--out" in result.stderr
    assert set(FORMATS) == {"claude-code", "codex", "pi"}


@settings(max_examples=40)
@given(
    entries=st.lists(
        st.tuples(
            st.sampled_from(["message", "compaction", "branch_summary", "label", "x-new"]),
            st.integers(0, 8),  # id (0: none, a version 1 entry)
            st.integers(0, 8),  # parentId (0: null)
            st.integers(0, 8),  # firstKeptEntryId / targetId
            st.dictionaries(st.text(max_size=6), JSON_VALUES, max_size=2),
        ),
        max_size=10,
    ),
    fork=st.booleans(),
)
def test_any_pi_session_round_trips_or_fails_cleanly(entries, fork):
    import tempfile

    header = {"type": "session", "version": 3, "id": "s", "timestamp": "2025-01-01T00:00:00Z"}
    if fork:
        header["parentSession"] = "/x/2025_p.jsonl"
    lines = [dump(header)]
    for kind, own, parent, ref, extra in entries:
        record: dict = {"type": kind}
        if own:
            record.update(id=f"e{own}", parentId=f"e{parent}" if parent else None)
        if kind == "message":
            record["message"] = {"role": "assistant", "content": [{"type": "toolCall", **extra}]}
        elif kind == "compaction":
            record.update(summary=str(extra), firstKeptEntryId=f"e{ref}", tokensBefore=ref)
        elif kind == "label":
            record.update(targetId=f"e{ref}", label=str(extra)[:5])
        record.update({k: v for k, v in extra.items() if k not in record})
        lines.append(dump(record))
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "s.jsonl"
        path.write_bytes("".join(line + "\n" for line in lines).encode("utf-8", "surrogatepass"))
        j = cj.Journal.memory()
        try:
            import_transcripts(j, [path], "pi")
        except TranscriptError as exc:
            assert str(exc).startswith(str(path)) and "\n" not in str(exc)
            assert object_count(j) == 0
            return
        assert session_file(j, "pi/s").data == path.read_bytes()
        for entry in j.path("pi/s"):
            if entry.first_kept_entry_id:  # always an entry of the thread
                assert j.entry("pi/s", entry.first_kept_entry_id)


@settings(max_examples=40)
@given(
    items=st.lists(st.dictionaries(st.text(max_size=5), JSON_VALUES, max_size=3), max_size=8),
    copied=st.integers(0, 9),
    retimed=st.booleans(),
    tail=st.lists(st.dictionaries(st.text(max_size=5), JSON_VALUES, max_size=2), max_size=3),
)
def test_any_codex_fork_round_trips_and_shares_what_it_copied(items, copied, retimed, tail):
    import tempfile

    def line(kind: str, payload: dict, second: int) -> dict:
        return {
            "timestamp": f"2025-01-01T00:00:{second:02d}.000Z",
            "type": kind,
            "payload": payload,
        }

    source = [line("session_meta", {"id": "src"}, 0)]
    source += [line("response_item", item, i + 1) for i, item in enumerate(items)]
    fork = [line("session_meta", {"id": "fork", "forked_from_id": "src"}, 30)]
    for record in source[:copied]:
        fork.append({**record, "timestamp": "2025-01-01T00:00:31.000Z"} if retimed else record)
    fork += [line("event_msg", item, 40) for item in tail]
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        write = root / "a-src.jsonl", root / "b-fork.jsonl"
        for path, rows in zip(write, (source, fork), strict=True):
            path.write_bytes("".join(dump(r) + "\n" for r in rows).encode("utf-8", "surrogatepass"))
        j = cj.Journal.memory()
        try:
            import_transcripts(j, [root], "codex")
        except TranscriptError as exc:
            assert "\n" not in str(exc) and object_count(j) == 0
            return
        for path, thread in zip(write, ("codex/src", "codex/fork"), strict=True):
            assert session_file(j, thread).data == path.read_bytes()
        shared = min(copied, len(source))
        meta = j.thread("codex/fork")
        if shared:
            assert meta.forked_from_entry_id == j.path("codex/src")[shared - 1].id
        else:
            assert meta.forked_from_thread_id == ""


@pytest.mark.parametrize("fork_spacing", ["same", "compact"])
def test_forks_of_lines_not_written_compactly(tmp_path, fork_spacing):
    """A copied line shares its source's entry only if export can write it back exactly."""
    meta = {"timestamp": "2025-01-01T00:00:00.000Z", "type": "session_meta", "payload": {"id": "a"}}
    item = {"timestamp": "2025-01-01T00:00:01.000Z", "type": "response_item", "payload": {"x": 1}}
    source = [json.dumps(meta), json.dumps(item)]  # Python's spacing, not the agents'
    own = {
        "timestamp": "2025-01-01T00:01:00.000Z",
        "type": "session_meta",
        "payload": {"id": "b", "forked_from_id": "a"},
    }
    copies = source if fork_spacing == "same" else [dump(meta), dump(item)]
    (tmp_path / "a.jsonl").write_text("\n".join(source) + "\n")
    (tmp_path / "b.jsonl").write_text("\n".join([dump(own), *copies]) + "\n")
    j = cj.Journal.memory()
    import_transcripts(j, [tmp_path], "codex")
    for name, thread in (("a", "codex/a"), ("b", "codex/b")):
        assert session_file(j, thread).data == (tmp_path / f"{name}.jsonl").read_bytes()
    assert bool(j.thread("codex/b").forked_from_entry_id) == (fork_spacing == "same")


@pytest.mark.parametrize("fmt", ALL)
def test_reimporting_a_grown_session_adds_what_is_new(tmp_path, fmt):
    """Agents append to their session files: importing again adds the new records."""
    _root, paths = project(tmp_path, fmt, sessions=1)
    main = paths[0]
    full = main.read_bytes()
    lines = full.splitlines(keepends=True)
    main.write_bytes(b"".join(lines[: len(lines) // 3]))
    j = cj.Journal.memory()
    (thread,) = import_transcripts(j, [main], fmt).threads_created
    old = {e.id for e in j.entries(thread)}
    main.write_bytes(full)
    report = import_transcripts(j, [main], fmt)
    assert report.threads_updated == [thread] and report.threads_created == []
    assert session_file(j, thread).data == full
    assert old <= {e.id for e in j.entries(thread)}  # nothing rewritten, only added
    fresh = cj.Journal.memory()
    import_transcripts(fresh, [main], fmt)
    assert [e.id for e in j.path(thread)] == [e.id for e in fresh.path(thread)]
    assert j.thread(thread).title == fresh.thread(thread).title
    again = import_transcripts(j, [main], fmt)
    assert again.threads_unchanged == [thread] and again.objects_written == 0


def test_records_nested_as_deep_as_json_allows(tmp_path):
    deep = {"type": "x"}
    for _ in range(900):
        deep = {"content": deep}
    meta = {"timestamp": "2025-01-01T00:00:00.000Z", "type": "session_meta", "payload": {"id": "d"}}
    item = {
        "timestamp": "2025-01-01T00:00:01.000Z",
        "type": "response_item",
        "payload": {"type": "function_call_output", "call_id": "c", "output": deep},
    }
    path = tmp_path / "d.jsonl"
    path.write_text(dump(meta) + "\n" + dump(item) + "\n")
    j = cj.Journal.memory()
    try:
        import_transcripts(j, [path], "codex")
    except TranscriptError as exc:
        assert str(exc).startswith(str(path))
        return
    assert session_file(j, "codex/d").data == path.read_bytes()


@pytest.mark.parametrize("together", [True, False], ids=["one-import", "one-by-one"])
def test_a_fork_of_a_fork_shares_with_both(tmp_path, together):
    """Codex: C forks B, which forked A; C's copy starts with B's own session_meta."""
    rng = random.Random(3)
    from support.transcript_samples import Clock, CodexRollout

    clock = Clock()
    a = CodexRollout(rng, "a", clock)
    a.turn()
    b = CodexRollout(rng, "b", clock, forked_from="a")
    b.fork_from(a, len(a.records))
    b.turn()
    c = CodexRollout(rng, "c", clock, forked_from="b")
    c.fork_from(b, len(b.records))
    c.turn()
    paths = [
        write_jsonl(tmp_path / f"{r.records[0]['payload']['id']}.jsonl", r.records)
        for r in (a, b, c)
    ]
    j = cj.Journal.memory()
    if together:
        import_transcripts(j, [tmp_path], "codex")
    else:
        for path in paths:
            import_transcripts(j, [path], "codex")
    ids = {
        name: {e.id for e in j.entries(f"codex/{name}") if MANIFEST_KEY not in e.metadata}
        for name in "abc"
    }
    assert ids["a"] < ids["c"] and len(ids["b"] & ids["c"]) > len(ids["a"])
    assert j.thread("codex/c").forked_from_thread_id == "codex/b"
    for path, name in zip(paths, "abc", strict=True):
        assert session_file(j, f"codex/{name}").data == path.read_bytes()


@pytest.mark.parametrize(
    "extra",
    [
        {"nested": {"sessionId": "s"}},  # the pair twice: kept verbatim
        {"nested": {"sessionId": None}},  # the placeholder already there: kept verbatim
        {"text": '"sessionId":"s"'},  # inside a string (escaped): placeholder by text
    ],
)
def test_session_ids_are_put_back_exactly(tmp_path, extra):
    record = {
        "parentUuid": None,
        "sessionId": "s",
        "type": "user",
        "uuid": "a",
        "message": {"role": "user", "content": "hi"},
        **extra,
    }
    for name, text in (("compact", dump(record)), ("spaced", json.dumps(record))):
        path = tmp_path / name / "s.jsonl"
        path.parent.mkdir()
        path.write_text(text + "\n")
        j = cj.Journal.memory()
        import_transcripts(j, [path], "claude-code")
        assert session_file(j, "claude-code/s").data == path.read_bytes()
