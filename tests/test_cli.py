"""The command line: every command, its --json schema, its errors, and both entry points."""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import click
import pytest
from click.testing import CliRunner, Result
from support.journal_helpers import assistant, at, user
from support.store_helpers import set_frame

import cas_journal as cj
from cas_journal.cli import cli
from cas_journal.cli.output import ProgressBars, human_size, report_lines
from cas_journal.cli.tree import ForkMark, draw_tree
from cas_journal.objects import Kind

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs" / "cli.md"


class Cli:
    """Runs commands against one store with CliRunner."""

    def __init__(self, store: Path) -> None:
        self.store = store
        self.runner = CliRunner()

    def __call__(self, *args: str, input: str | bytes | None = None) -> Result:
        return self.runner.invoke(cli, ["--store", str(self.store), *args], input=input)

    def ok(self, *args: str, input: str | bytes | None = None) -> Result:
        result = self(*args, input=input)
        assert result.exit_code == 0, (result.output, result.exception)
        return result

    def json(self, *args: str) -> object:
        return json.loads(self.ok(*args, "--json").stdout)

    def fails(self, code: int, *args: str, input: str | bytes | None = None) -> str:
        """Run a command that must fail: exit code, one stderr line, no traceback."""
        result = self(*args, input=input)
        assert result.exit_code == code, (result.output, result.exception)
        # an exception other than SystemExit would be a traceback in a real terminal
        assert result.exception is None or isinstance(result.exception, SystemExit), (
            result.exception
        )
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1, result.stderr
        assert lines[0].startswith("Error: ")
        assert "Traceback" not in result.output
        return lines[0]


def make_workload(path: Path) -> dict[str, str]:
    """A store with a branching thread, a fork, an archived thread and a checkpoint run."""
    ids: dict[str, str] = {}
    with cj.Journal.open(path, durable=False) as j:
        j.create_thread(cj.ThreadMeta(id="main", title="Main thread", created_at=at(0)))
        ids["a"] = user(j, "main", "first question\nwith a second line", now=at(1)).id
        ids["b"] = assistant(j, "main", "first answer", now=at(2)).id
        ids["c"] = user(j, "main", "abandoned follow-up", now=at(3)).id
        j.move_leaf("main", ids["b"], now=at(4))
        ids["d"] = user(j, "main", "better follow-up", now=at(5)).id
        ids["e"] = assistant(j, "main", "final answer", now=at(6)).id
        fork = j.fork("main", ids["b"], new_thread_id="side", now=at(7))
        ids["f"] = user(j, "side", "side question", now=at(8)).id
        assert fork.leaf_id == ids["b"]
        j.create_thread(cj.ThreadMeta(id="old", archived=True, created_at=at(-50)))
        for iteration in (1, 2, 3):
            j.checkpoints.save(
                cj.Checkpoint(
                    run_id="run1",
                    task_name="task",
                    iteration=iteration,
                    messages=[{"role": "user", "content": f"step {i}"} for i in range(iteration)],
                    system_prompt="be brief",
                    created_at=at(100 + iteration),
                )
            )
    return ids


@pytest.fixture
def run(tmp_path) -> Cli:
    return Cli(tmp_path / "store")


@pytest.fixture
def loaded(tmp_path) -> tuple[Cli, dict[str, str]]:
    ids = make_workload(tmp_path / "store")
    return Cli(tmp_path / "store"), ids


# -- store location and init ----------------------------------------------------------------


def test_init_creates_once_and_refuses_a_non_store_directory(run, tmp_path):
    assert "created store" in run.ok("init").stdout
    assert (run.store / "FORMAT").is_file()
    assert "already exists" in run.ok("init").stdout
    other = tmp_path / "busy"
    other.mkdir()
    (other / "file.txt").write_text("x")
    line = Cli(other).fails(1, "init")
    assert "not empty" in line


@pytest.mark.parametrize(
    "args",
    [
        ["threads"],
        ["show", "x"],
        ["log", "x"],
        ["tree", "x"],
        ["cat", "abcd"],
        ["reflog", "x"],
        ["checkpoints"],
        ["stats"],
        ["import", "-"],
    ],
)
def test_missing_store_is_one_line_pointing_at_init(run, args):
    line = run.fails(1, *args, input="")
    assert f"no cas-journal store at {run.store}" in line
    assert "init" in line
    assert not run.store.exists()  # nothing was created


def test_store_from_environment_and_default_location(tmp_path, monkeypatch):
    runner = CliRunner()
    env_store = tmp_path / "from-env"
    result = runner.invoke(cli, ["init"], env={"CAS_JOURNAL_STORE": str(env_store)})
    assert result.exit_code == 0 and (env_store / "FORMAT").is_file()
    here = tmp_path / "cwd"
    here.mkdir()
    monkeypatch.chdir(here)
    result = runner.invoke(cli, ["threads"], env={"CAS_JOURNAL_STORE": None})
    assert result.exit_code == 1
    assert (
        result.stderr
        == "Error: no cas-journal store at .cas-journal; create one with 'cas-journal init'\n"
    )
    result = runner.invoke(cli, ["init"], env={"CAS_JOURNAL_STORE": None})
    assert result.exit_code == 0
    assert (here / ".cas-journal" / "FORMAT").is_file()
    result = runner.invoke(cli, ["threads"], env={"CAS_JOURNAL_STORE": None})
    assert result.exit_code == 0 and result.stdout.strip() == "no threads"


def test_newer_store_format_is_refused(loaded):
    run, _ = loaded
    (run.store / "FORMAT").write_text("cas-journal 99\n")
    line = run.fails(1, "threads")
    assert "format 99" in line and "Upgrade" in line


# -- threads, show, log, tree ------------------------------------------------------------


def test_threads_lists_newest_first_with_archived_on_request(loaded):
    run, ids = loaded
    out = run.ok("threads").stdout.splitlines()
    assert out[0].split() == ["THREAD", "CREATED", "UPDATED", "LEAF", "TITLE"]
    assert [line.split()[0] for line in out[1:]] == ["side", "main"]
    assert "Main thread" in out[2] and ids["e"][:10] in out[2]
    assert [line.split()[0] for line in run.ok("threads", "--all").stdout.splitlines()[1:]] == [
        "side",
        "main",
        "old",
    ]
    assert "[archived]" in run.ok("threads", "--all").stdout
    assert len(run.ok("threads", "--limit", "1").stdout.splitlines()) == 2
    data = run.json("threads", "--all", "--limit", "2")
    assert [t["id"] for t in data["threads"]] == ["side", "main"]
    run.fails(2, "threads", "--limit", "-1")


def test_control_characters_in_ids_and_text_are_escaped(run):
    run.ok("init")
    evil = "evil\x1b[2J\nid"
    with cj.Journal.open(run.store, durable=False) as j:
        j.create_thread(cj.ThreadMeta(id=evil, title="t\x07itle"))
        user(j, evil, "\x1b[31mred")
    for args in (["threads"], ["tree", evil], ["log", evil]):
        out = run.ok(*args).stdout
        assert "\x1b" not in out and "\x07" not in out, args
    assert "evil\\x1b[2J\\nid" in run.ok("threads").stdout
    assert run.json("threads")["threads"][0]["id"] == evil  # JSON keeps the exact id


def test_show_thread_reports_metadata_path_length_and_the_leaf_in_full(loaded):
    run, ids = loaded
    out = run.ok("show", "main").stdout
    assert re.search(r"^path:\s+4 entries from the root to the leaf$", out, re.M)
    assert re.search(r"^assistant  " + ids["e"][:10], out, re.M)
    assert "    final answer" in out
    data = run.json("show", "side")
    assert data["thread"]["forked_from_thread_id"] == "main"
    assert data["thread"]["title"] is None  # absent values are null, never ""
    assert data["leaf"]["id"] == ids["f"] and "raw" not in data["leaf"]
    assert data["path_length"] == 3
    assert run.json("show", "old") == {
        "thread": run.json("show", "old")["thread"],
        "leaf": None,
        "path_length": 0,
    }
    assert (
        run.fails(1, "show", "nope") == "Error: thread 'nope' not found (and it is not an entry id)"
    )


def test_show_entry_renders_the_whole_message_as_a_transcript(loaded):
    run, ids = loaded
    out = run.ok("show", ids["a"][:8]).stdout.splitlines()
    assert out[0].split()[:2] == ["user", ids["a"][:10]]
    assert out[1:3] == ["    first question", "    with a second line"]
    assert out[-1].startswith(f"entry {ids['a']}  (user_message, depth 0, parent -)")
    data = run.json("show", ids["b"])
    assert data["id"] == ids["b"] and data["parent_id"] == ids["a"] and data["depth"] == 1
    assert data["thread_id"] is None and data["message"]["content"] == "first answer"
    assert data["message"]["tool_name"] is None
    with cj.Journal.open(run.store, durable=False) as j:
        payload = j.entry("main", ids["b"]).raw_hash
    assert "is a blob, not an entry" in run.fails(1, "show", payload[:10])
    assert "no object id starts with" in run.fails(1, "show", "0000000")


def test_show_of_a_one_entry_thread_says_entry_not_entries(run):
    run.ok("init")
    run.ok("append", "solo", "hello")
    assert "path:         1 entry from the root to the leaf" in run.ok("show", "solo").stdout


def test_log_prints_the_path_and_accepts_a_leaf_prefix(loaded):
    run, ids = loaded
    lines = run.ok("log", "main").stdout.splitlines()
    assert [line.split()[0] for line in lines] == [ids[k][:10] for k in "abde"]
    assert lines[0].split()[1] == "user_message"
    assert lines[0].endswith("first question")  # the first line only
    lines = run.ok("log", "main", "--leaf", ids["c"][:6].upper()).stdout.splitlines()
    assert [line.split()[0] for line in lines] == [ids[k][:10] for k in "abc"]
    data = run.json("log", "main", "--leaf", ids["c"][:8])
    assert data["leaf_id"] == ids["c"] and [e["id"] for e in data["entries"]] == [
        ids[k] for k in "abc"
    ]
    assert data["entries"][0]["message"]["content"].startswith("first question")
    # an entry of another thread is not part of this one
    assert "no entry of thread 'main'" in run.fails(1, "log", "main", "--leaf", ids["f"][:8])
    assert "Invalid value" in run.fails(2, "log", "main", "--leaf", "xyz!")
    assert "Invalid value" in run.fails(2, "log", "main", "--leaf", "abc")


def test_tree_draws_branches_and_forks(loaded):
    run, ids = loaded
    out = run.ok("tree", "main").stdout.splitlines()
    assert out[0] == "thread main - Main thread"
    body = out[1:]
    assert body[0].startswith(f"* {ids['a'][:10]} user_message")
    assert body[1].startswith(f"* {ids['b'][:10]}")
    assert body[2] == "|\\"
    assert body[3].startswith(f"| * {ids['c'][:10]}")  # the abandoned branch
    assert body[4] == "|\\"
    assert body[5].startswith("| o fork side (+1 entry, leaf ")
    assert body[6].startswith(f"* {ids['d'][:10]}")
    assert body[7].startswith(f"* {ids['e'][:10]}") and "(leaf)" in body[7]
    assert len(body) == 8
    assert "(no entries)" in run.ok("tree", "old").stdout
    run.fails(1, "tree", "nope")


def _entry(oid: str, parent: str = "") -> cj.Entry:
    return cj.Entry(
        id=oid * 64,
        parent_id=parent * 64 if parent else "",
        type=cj.EntryType.CUSTOM,
        created_at=at(0),
    )


def test_draw_tree_layout_nested_branches_roots_and_forks():
    entries = [
        _entry("a"),
        _entry("b", "a"),
        _entry("c", "b"),
        _entry("d", "b"),
        _entry("e", "a"),
        _entry("f", "e"),
        _entry("9"),
    ]
    forks = [ForkMark("fk", "d" * 64, "d" * 64, 0), ForkMark("empty", "", "", 0)]
    lines = draw_tree(entries, "f" * 64, forks, label=lambda e: e.id[0])
    assert lines == [
        "o fork empty (+0 entries, leaf -)",
        "* 9",
        "",
        "* a",
        "|\\",
        "| * b",
        "| |\\",
        "| | * d",
        "| | o fork fk (+0 entries, leaf dddddddddd)",
        "| * c",
        "* e",
        "* f",
    ]


# -- cat -------------------------------------------------------------------------------------


def test_cat_shows_kinds_and_raw_bytes(loaded):
    run, ids = loaded
    out = run.ok("cat", ids["b"][:5]).stdout
    assert out.startswith(f"object {ids['b']}\nkind   entry\n")
    assert f'"parent": "{ids["a"]}"' in out
    with cj.Journal.open(run.store, durable=False) as j:
        _kind, body = j.store.objects.get(ids["b"])
        payload = j.entry("main", ids["b"]).raw_hash
        binary = j.store.objects.put(Kind.BLOB, b"\x00\xffbinary\x01")
        state = j.store.refs.read_ref("threads/main")
    assert run.ok("cat", ids["b"], "--raw").stdout_bytes == body
    blob = run.ok("cat", payload[:12]).stdout
    assert "kind   blob" in blob and '"content":"first answer"' in blob
    hexed = run.ok("cat", binary).stdout
    assert "00000000  00 ff 62 69 6e 61 72 79 01" in hexed
    assert run.ok("cat", binary[:4], "--raw").stdout_bytes == b"\x00\xffbinary\x01"
    assert "kind   thread" in run.ok("cat", state).stdout
    assert "no object id starts with '0000000000'" in run.fails(1, "cat", "0" * 10)
    assert f"object {'f' * 64} not found" in run.fails(1, "cat", "F" * 64)
    run.fails(2, "cat", "abc")
    run.fails(2, "cat", "g" * 8)


def test_ambiguous_prefix_lists_candidates(run):
    run.ok("init")
    by_prefix: dict[str, str] = {}
    with cj.Journal.open(run.store, durable=False) as j:
        for i in range(5000):
            oid = j.store.objects.put(Kind.BLOB, b"blob %d" % i)
            if oid[:4] in by_prefix:
                pair = (by_prefix[oid[:4]], oid)
                break
            by_prefix[oid[:4]] = oid
        else:
            pytest.fail("no shared prefix found")
    line = run.fails(1, "cat", pair[0][:4])
    assert "ambiguous" in line and pair[0] in line and pair[1] in line
    assert run.ok("cat", pair[1][:12]).stdout.startswith(f"object {pair[1]}")


def test_corrupt_object_is_one_line(loaded):
    run, ids = loaded
    set_frame(run.store, ids["a"], b"garbage")
    line = run.fails(1, "cat", ids["a"])
    assert ids["a"] in line
    line = run.fails(1, "log", "main")
    assert ids["a"] in line


# -- fork, rm, restore, reflog ------------------------------------------------------------


def test_fork_at_before_and_ids(loaded):
    run, ids = loaded
    out = run.ok("fork", "main", "--at", ids["d"][:7], "--id", "f-at").stdout
    assert out.strip() == f"forked main at {ids['d'][:10]} into f-at"
    run.ok("fork", "main", "--before", ids["d"][:7], "--id", "f-before")
    with cj.Journal.open(run.store, durable=False) as j:
        assert j.thread("f-at").leaf_id == ids["d"]
        assert j.thread("f-before").leaf_id == ids["b"]
        assert j.thread("f-before").forked_from_thread_id == "main"
    generated = run.ok("fork", "main").stdout.split()[-1]
    assert generated.startswith("thread-")
    assert "cannot be used together" in run.fails(
        2, "fork", "main", "--at", ids["a"][:6], "--before", ids["a"][:6]
    )
    assert "already exists" in run.fails(1, "fork", "main", "--id", "f-at")
    run.fails(1, "fork", "nope")
    run.fails(1, "fork", "main", "--at", ids["f"][:8])


def test_rm_restore_and_reflog(loaded):
    run, ids = loaded
    assert "restore side" in run.ok("rm", "side").stdout
    assert "side" not in run.ok("threads").stdout
    assert run.fails(1, "rm", "side") == "Error: thread 'side' not found"
    lines = run.ok("reflog", "side").stdout.splitlines()
    assert lines[0].split()[2] == "delete" and lines[0].endswith("-> -")
    assert lines[-1].split()[2] == "fork"
    assert "restored thread side" in run.ok("restore", "side").stdout
    assert run.json("show", "side")["leaf"]["id"] == ids["f"]
    assert "nothing to restore" in run.fails(1, "restore", "side")
    assert "no restorable state" in run.fails(1, "restore", "never")
    data = run.json("reflog", "side")
    assert data["thread"] == "side" and data["ref"] == "threads/side"
    reasons = [item["reason"] for item in data["entries"]]
    assert reasons == ["restore", "delete", "append", "fork"]
    assert data["entries"][1]["new"] is None and data["entries"][-1]["old"] is None
    assert "has no reflog" in run.fails(1, "reflog", "never")


# -- checkpoints ---------------------------------------------------------------------------


def test_checkpoints_commands(loaded):
    run, _ = loaded
    default = run.ok("checkpoints").stdout
    assert default == run.ok("checkpoints", "list").stdout
    assert default.splitlines()[1].split()[:2] == ["run1", "3"]
    shown = run.ok("checkpoints", "show", "run1", "--iteration", "2").stdout
    assert (
        re.search(r"^iteration:\s+2$", shown, re.M) and "step 1" in shown and "step 2" not in shown
    )
    data = run.json("checkpoints", "show", "run1")
    assert (
        data["iteration"] == 3
        and len(data["messages"]) == 3
        and data["system_prompt"] == "be brief"
    )
    history = run.json("checkpoints", "history", "run1")
    assert [c["iteration"] for c in history["checkpoints"]] == [3, 2, 1]
    assert "messages" not in history["checkpoints"][0]
    assert len(run.ok("checkpoints", "history", "run1").stdout.splitlines()) == 4
    run.fails(1, "checkpoints", "show", "run1", "--iteration", "9")
    run.fails(1, "checkpoints", "show", "nope")
    assert "deleted" in run.ok("checkpoints", "rm", "run1").stdout
    assert run.json("checkpoints", "list") == {"checkpoints": []}
    assert run.ok("checkpoints").stdout.strip() == "no checkpoints"
    run.fails(1, "checkpoints", "rm", "run1")
    run.fails(2, "checkpoints", "frob")


# -- maintenance ---------------------------------------------------------------------------


def test_pack_gc_fsck_stats(loaded):
    run, _ = loaded
    for args in (
        ["pack"],
        ["gc", "--dry-run"],
        ["gc", "--prune-now"],
        ["fsck"],
        ["fsck", "--quick"],
        ["stats"],
    ):
        result = run.ok(*args)
        assert result.stderr == ""  # no progress bars when stderr is not a terminal
        assert re.search(r"^\S+:", result.stdout, re.M)
    stats = run.json("stats")
    assert stats["threads"] == 3 and stats["runs"] == 1  # archived threads count
    assert "fsck: ok" in run.ok("fsck").stdout
    assert run.json("fsck")["ok"] is True


def test_fsck_exits_1_on_a_damaged_store(loaded):
    run, ids = loaded
    set_frame(run.store, ids["e"], b"garbage")
    result = run("fsck")
    assert result.exit_code == 1 and "problem" in result.stdout
    result = run("fsck", "--json")
    assert result.exit_code == 1
    data = json.loads(result.stdout)
    assert data["ok"] is False and data["problems"]
    assert {"subject", "message"} <= set(data["problems"][0])


# -- export / import -----------------------------------------------------------------------


def test_export_import_round_trip_is_exact_and_idempotent(loaded, tmp_path):
    run, _ = loaded
    exported = run.ok("export", "main").stdout_bytes
    path = tmp_path / "main.jsonl"
    run.ok("export", "side", "-o", str(path))
    assert path.read_bytes().count(b"\n") == 4
    target = Cli(tmp_path / "target")
    target.ok("init")
    out = target.ok("import", "-", input=exported).stdout
    assert "imported thread main" in out
    report = target.json("import", str(path))
    assert report == {
        "lines": 4,
        "entries": 3,
        "threads_created": ["side"],
        "threads_unchanged": [],
        "objects_written": 2,
    }
    for thread in ("main", "side"):
        assert target.json("log", thread) == run.json("log", thread)
        assert target.json("show", thread) == run.json("show", thread)
        assert target.ok("tree", thread).stdout == run.ok("tree", thread).stdout
    again = target.json("import", str(path))
    assert again["threads_unchanged"] == ["side"] and again["objects_written"] == 0
    assert "unchanged thread main" in target.ok("import", "-", input=exported).stdout
    run.fails(1, "export", "nope")
    assert not (tmp_path / "nope.jsonl").exists()
    run.fails(1, "export", "nope", "-o", str(tmp_path / "nope.jsonl"))
    assert not (tmp_path / "nope.jsonl").exists()


def test_import_malformed_line_names_it_and_changes_nothing(loaded, tmp_path):
    run, _ = loaded
    lines = run.ok("export", "main").stdout.splitlines()
    lines[3] = lines[3].replace('"record":"entry"', '"record":"entry","extra":1')
    target = Cli(tmp_path / "target")
    target.ok("init")
    before = sorted(p.relative_to(target.store) for p in target.store.rglob("*"))
    line = target.fails(1, "import", "-", input="\n".join(lines))
    assert line.startswith("Error: line 4: ") and "unknown fields" in line
    assert sorted(p.relative_to(target.store) for p in target.store.rglob("*")) == before
    assert target.ok("threads").stdout.strip() == "no threads"
    assert "line 1" in target.fails(1, "import", "-", input="not json\n")
    target.fails(2, "import", str(tmp_path / "missing.jsonl"))


# -- demo ------------------------------------------------------------------------------------


def test_demo_is_deterministic_and_rerunnable(tmp_path):
    run = Cli(tmp_path / "demo")
    out = run.ok("demo").stdout
    assert "fsck: ok" in out and "dedup " in out
    last = out.splitlines()[-1]
    assert re.fullmatch(
        r"logical [\d.]+ KiB \(68 entries, 12 checkpoints\); stored [\d.]+ KiB on disk "
        r"\(38 distinct entries, 12 checkpoints\); [\d.]+x smaller",
        last,
    ), last
    assert "thread demo-main" in out and "o fork demo-zoneinfo" in out and "|\\" in out
    threads = ("demo-main", "demo-explain", "demo-zoneinfo", "demo-retry", "demo-review")
    logs = {thread: run.json("log", thread) for thread in threads}
    again = run.ok("demo").stdout  # a rerun rebuilds the same ids: fixed content and times
    assert "fsck: ok" in again
    assert {thread: run.json("log", thread) for thread in threads} == logs
    assert logs["demo-main"]["entries"][0]["id"] == DEMO_ROOT
    history = run.json("checkpoints", "history", "demo-run")["checkpoints"]
    assert [c["iteration"] for c in history] == list(range(12, 0, -1))
    stats = run.json("stats")
    assert stats["threads"] == 5 and stats["dedup_ratio"] > 1.5
    assert stats["logical_entries"] == 68 and stats["entries"] == 38
    tree = run.json("tree", "demo-main")
    assert len(tree["forks"]) == 4 and sum(e["on_path"] for e in tree["entries"]) == 17


DEMO_ROOT = "7e7b18aa3cdb289e24349bcb5a39a10743508e3c22456199ffa88768d6e9b35a"
"""The id of the demo's first entry: pinned so that a change of demo content is noticed."""


# -- JSON schemas (documented in docs/cli.md) ----------------------------------------------

THREAD_FIELDS = set(cj.ThreadMeta.model_fields)
ENTRY_FIELDS = set(cj.Entry.model_fields) - {"raw"}
CHECKPOINT_FIELDS = set(cj.Checkpoint.model_fields) - {"messages"}


def _doc_sections() -> dict[str, str]:
    text = DOCS.read_text("utf-8")
    parts = re.split(r"^## ", text, flags=re.M)
    return {part.split("\n", 1)[0].strip(): part for part in parts[1:]}


def _documented(section: str, fields: set[str]) -> None:
    sections = _doc_sections()
    assert section in sections, f"docs/cli.md has no section {section!r}"
    text = sections[section] + sections["Conventions"]
    missing = {name for name in fields if f"`{name}`" not in text and f'"{name}"' not in text}
    assert not missing, f"{section}: fields not documented: {sorted(missing)}"


def test_every_json_output_parses_and_carries_the_documented_fields(loaded, tmp_path):
    run, _ids = loaded
    data = run.json("threads")
    assert set(data) == {"threads"} and set(data["threads"][0]) == THREAD_FIELDS
    _documented("threads", {"threads"} | THREAD_FIELDS)

    data = run.json("show", "main")
    assert set(data) == {"thread", "leaf", "path_length"}
    assert set(data["thread"]) == THREAD_FIELDS and set(data["leaf"]) == ENTRY_FIELDS
    entry = run.json("show", data["leaf"]["id"][:10])
    assert set(entry) == ENTRY_FIELDS | {"depth"}
    _documented("show", set(data) | {"depth"} | ENTRY_FIELDS)

    data = run.json("diff", "main", "side")
    assert set(data) == {
        "left",
        "right",
        "ancestor",
        "ancestor_depth",
        "left_entries",
        "right_entries",
    }
    _documented("diff", set(data))

    data = run.json("tree", "main")
    assert set(data) == {"thread", "entries", "forks"}
    assert all(set(e) == ENTRY_FIELDS | {"on_path"} for e in data["entries"])
    assert set(data["forks"][0]) == {"thread_id", "entry_id", "leaf_id", "added"}
    _documented("tree", set(data) | {"on_path", "thread_id", "entry_id", "leaf_id", "added"})

    data = json.loads(run.ok("append", "main", "more", "--json").stdout)
    assert set(data) == {"created_thread", "entry"} and set(data["entry"]) == ENTRY_FIELDS
    _documented("append", set(data))

    data = run.json("log", "main")
    assert set(data) == {"thread", "leaf_id", "entries"}
    assert all(set(entry) == ENTRY_FIELDS for entry in data["entries"])
    _documented("log", set(data))

    data = run.json("reflog", "main")
    assert set(data) == {"thread", "ref", "entries"}
    assert all(set(item) == {"time", "reason", "old", "new"} for item in data["entries"])
    _documented("reflog", set(data) | {"time", "reason", "old", "new"})

    data = run.json("checkpoints", "list")
    assert set(data) == {"checkpoints"} and set(data["checkpoints"][0]) == CHECKPOINT_FIELDS
    data = run.json("checkpoints", "show", "run1")
    assert set(data) == CHECKPOINT_FIELDS | {"messages"}
    data = run.json("checkpoints", "history", "run1")
    assert set(data) == {"run_id", "checkpoints"}
    assert set(data["checkpoints"][0]) == CHECKPOINT_FIELDS
    _documented("checkpoints", {"checkpoints", "run_id", "messages"} | CHECKPOINT_FIELDS)

    export = run.ok("export", "side").stdout
    target = Cli(tmp_path / "target")
    target.ok("init")
    result = target.ok("import", "-", "--json", input=export)
    data = json.loads(result.stdout)
    assert set(data) == {
        "lines",
        "entries",
        "threads_created",
        "threads_unchanged",
        "objects_written",
    }
    _documented("import", set(data))

    from cas_journal.maintenance import FsckReport, GcReport, PackReport, StatsReport, SyncReport

    for args, model, section in (
        (["pack"], PackReport, "pack"),
        (["gc", "--dry-run"], GcReport, "gc"),
        (["fsck"], FsckReport, "fsck"),
        (["stats"], StatsReport, "stats"),
        (["push", str(run.store)], SyncReport, "sync"),
    ):
        data = run.json(*args)
        assert set(data) == set(model.model_fields), args
        _documented(section, set(data))


# -- errors, output helpers ------------------------------------------------------------------


def test_usage_errors_are_one_line_with_exit_2(loaded):
    run, _ = loaded
    assert "No such command" in run.fails(2, "frob")
    assert "Missing argument" in run.fails(2, "log")
    assert "No such option" in run.fails(2, "threads", "--bogus")
    line = run.fails(2, "checkpoints", "show")
    assert "checkpoints show --help" in line
    result = CliRunner().invoke(cli, ["--store"])
    assert result.exit_code == 2 and len(result.stderr.strip().splitlines()) == 1


def test_help_lists_every_command_and_every_listed_command_loads():
    from cas_journal.cli.app import COMMANDS

    out = CliRunner().invoke(cli, ["--help"]).stdout
    for name in (
        "init",
        "threads",
        "append",
        "show",
        "log",
        "diff",
        "tree",
        "cat",
        "fork",
        "rm",
        "restore",
        "reflog",
        "checkpoints",
        "pack",
        "gc",
        "fsck",
        "stats",
        "export",
        "import",
        "demo",
        "sync",
        "push",
        "pull",
        "clone",
    ):
        assert re.search(rf"^\s+{name}\s", out, re.M), name
        assert name in COMMANDS
    for name in COMMANDS:
        command = cli.get_command(click.Context(cli), name)
        assert command is not None and command.name == name, name
        help_text = CliRunner().invoke(cli, [name, "--help"]).stdout
        assert "docs/" not in help_text and ".md" not in help_text, name  # pip users lack docs/


def test_progress_bars_only_on_a_terminal():
    quiet = io.StringIO()
    with ProgressBars(quiet) as progress:
        progress("packing", 5, 10)
        progress("scanning", 7, None)
    assert quiet.getvalue() == ""

    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    loud = Tty()
    with ProgressBars(loud) as progress:
        progress("scanning", 7, None)
        progress("packing", 5, 10)
        progress("packing", 10, 10)
    text = loud.getvalue()
    assert "scanning: 7" in text and "packing" in text


def test_report_rendering_is_generic():
    from pydantic import BaseModel

    class Inner(BaseModel):
        subject: str = "x"
        message: str = "broken"

    class Report(BaseModel):
        stored_bytes: int = 3 * 1024 * 1024
        bytes_before: int = 2048
        dedup_ratio: float = 2.0 / 3
        ok: bool = False
        problems: list[Inner] = [Inner()]
        by_kind: dict[str, int] = {"blob": 2}

    lines = report_lines(Report())
    assert "stored_bytes: 3.0 MiB" in lines and "bytes_before: 2.0 KiB" in lines
    assert "dedup_ratio:  0.67" in lines and "ok:           no" in lines
    assert "  - subject: x; message: broken" in lines and "  blob: 2" in lines
    assert human_size(512) == "512 B"


# -- entry points in subprocesses -------------------------------------------------------------


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("CAS_JOURNAL_STORE", None)
    return env


def test_console_script_runs_and_errors_without_traceback(loaded):
    run, ids = loaded
    script = Path(sys.executable).parent / "cas-journal"
    assert script.exists(), script
    done = subprocess.run(
        [str(script), "--store", str(run.store), "log", "main", "--json"],
        capture_output=True,
        text=True,
        env=_env(),
        check=True,
    )
    assert [e["id"] for e in json.loads(done.stdout)["entries"]] == [ids[k] for k in "abde"]
    failed = subprocess.run(
        [str(script), "--store", str(run.store), "show", "nope"],
        capture_output=True,
        text=True,
        env=_env(),
    )
    assert failed.returncode == 1 and failed.stdout == ""
    assert failed.stderr == "Error: thread 'nope' not found (and it is not an entry id)\n"


def test_python_cli_py_behaves_like_the_console_script(loaded):
    run, _ = loaded
    script = Path(sys.executable).parent / "cas-journal"
    for args in (["tree", "main"], ["cat", "zz"]):
        via_checkout = subprocess.run(
            [sys.executable, "cli.py", "--store", str(run.store), *args],
            capture_output=True,
            text=True,
            env=_env(),
            cwd=ROOT,
        )
        via_script = subprocess.run(
            [str(script), "--store", str(run.store), *args],
            capture_output=True,
            text=True,
            env=_env(),
            cwd=ROOT,
        )
        assert (via_checkout.returncode, via_checkout.stdout, via_checkout.stderr) == (
            via_script.returncode,
            via_script.stdout,
            via_script.stderr,
        ), args
        assert "Traceback" not in via_checkout.stderr


# -- append, log -n/--full, diff ------------------------------------------------------------


def test_append_creates_the_thread_says_so_and_takes_json_on_stdin(run):
    run.ok("init")
    out = run.ok("append", "t1", "hello", "there").stdout.splitlines()
    assert out[0] == "created thread t1" and out[1].endswith("(user_message) to t1")
    out = run.ok("append", "t1", "--role", "assistant", "hi").stdout.splitlines()
    assert len(out) == 1 and "(assistant_message)" in out[0]
    message = {"role": "assistant", "tool_name": "bash", "tool_args": '{"command": "ls"}'}
    data = json.loads(run.ok("append", "t1", "--json", input=json.dumps(message)).stdout)
    assert data["created_thread"] is False and data["entry"]["type"] == "tool_call"
    data = json.loads(
        run.ok("append", "t1", "--role", "tool", "--json", input='{"content": "a b"}').stdout
    )
    assert data["entry"]["message"]["role"] == "tool" and data["entry"]["type"] == "tool_result"
    path = run.json("log", "t1")["entries"]
    assert [e["message"]["content"] for e in path][:2] == ["hello there", "hi"]
    first = path[0]["id"]
    run.ok("append", "t1", "--parent", first[:8], "branch")
    assert run.json("log", "t1")["entries"][-2]["id"] == first
    assert "not a JSON message" in run.fails(1, "append", "t1", input="not json")
    assert "one JSON object" in run.fails(1, "append", "t1", input="[1, 2]")
    assert "invalid message: bogus" in run.fails(1, "append", "t1", input='{"bogus": 1}')
    assert "stdin is empty" in run.fails(2, "append", "t1", input="")
    assert "invalid value" in run.fails(2, "append", "t1", "--role", "robot", "x").lower()
    assert "thread id" in run.fails(1, "append", "", "x")


def test_log_type_column_fits_every_entry_type():
    from cas_journal.cli.reading import ENTRY_TYPES

    assert set(ENTRY_TYPES) == {kind.value for kind in cj.EntryType}


def test_log_last_n_and_full_transcript(loaded):
    run, ids = loaded
    lines = run.ok("log", "main", "-n", "2").stdout.splitlines()
    assert [line.split()[0] for line in lines] == [ids["d"][:10], ids["e"][:10]]
    assert [e["id"] for e in run.json("log", "main", "-n", "1")["entries"]] == [ids["e"]]
    assert len(run.json("log", "main", "-n", "99")["entries"]) == 4
    full = run.ok("log", "main", "--full").stdout
    assert "    first question\n    with a second line\n" in full
    assert full.count("\n\n") == 3  # four entries, blank lines between them
    assert run.json("log", "old") == {"thread": "old", "leaf_id": None, "entries": []}
    assert run.ok("log", "old").stdout == ""


def test_diff_shows_the_common_ancestor_and_each_side(loaded):
    run, ids = loaded
    out = run.ok("diff", "main", "side").stdout.splitlines()
    assert out[0].startswith("common ancestor (entry 2 of both paths): " + ids["b"][:10])
    assert "--- main: 2 entries after it" in out and "+++ side: 1 entry after it" in out
    assert any(line.startswith(f"- {ids['d'][:10]}") for line in out)
    assert any(line.startswith(f"+ {ids['f'][:10]}") for line in out)
    data = run.json("diff", "main", "side")
    assert data["ancestor"]["id"] == ids["b"] and data["ancestor_depth"] == 1
    assert [e["id"] for e in data["left_entries"]] == [ids["d"], ids["e"]]
    assert [e["id"] for e in data["right_entries"]] == [ids["f"]]
    same = run.json("diff", "main", "main")
    assert same["left_entries"] == same["right_entries"] == []
    apart = run.json("diff", "main", "old")
    assert apart["ancestor"] is None and len(apart["left_entries"]) == 4
    assert "no common ancestor" in run.ok("diff", "main", "old").stdout
    assert "+ " in run.ok("diff", "main", "side", "--full").stdout
    run.fails(1, "diff", "main", "nope")


# -- checkpoints restore and reflog; purge ----------------------------------------------------


def test_checkpoints_rm_restore_and_reflog_of_runs(loaded):
    run, _ = loaded
    assert "checkpoints restore run1" in run.ok("checkpoints", "rm", "run1").stdout
    listing = run.json("checkpoints", "reflog")["runs"]
    assert listing == [
        {"run_id": "run1", "deleted": True, "last_change": listing[0]["last_change"]}
    ]
    assert listing[0]["last_change"]["reason"] == "delete"
    assert "deleted" in run.ok("checkpoints", "reflog").stdout
    out = run.ok("checkpoints", "restore", "run1").stdout
    assert out.strip() == "restored run run1 (iteration 3, 3 messages)"
    assert run.json("checkpoints", "show", "run1")["iteration"] == 3
    assert "nothing to restore" in run.fails(1, "checkpoints", "restore", "run1")
    assert "no restorable checkpoint" in run.fails(1, "checkpoints", "restore", "never")
    reasons = [e["reason"] for e in run.json("checkpoints", "reflog", "run1")["entries"]]
    assert reasons[:2] == ["restore", "delete"]
    assert "has no reflog" in run.fails(1, "checkpoints", "reflog", "never")


def _secret_store(run: Cli) -> tuple[str, str]:
    """A thread holding a leaked key, and a fork that shares only its first entry."""
    run.ok("init")
    run.ok("append", "leak", "first, shared")
    first = run.json("log", "leak")["entries"][0]["id"]
    run.ok("fork", "leak", "--id", "keep")
    secret = json.loads(run.ok("append", "leak", "AKIA-SECRET-KEY", "--json").stdout)["entry"]
    return first, secret["raw_hash"]


def _has_object(run: Cli, oid: str) -> bool:
    with cj.Journal.open(run.store, durable=False) as j:
        return j.store.objects.has(oid)


def test_rm_purge_really_removes_what_only_the_thread_reached(run):
    first, secret_blob = _secret_store(run)
    line = run.fails(1, "rm", "leak", "--purge")  # no terminal to confirm on
    assert "--yes" in line and _has_object(run, secret_blob)
    run.ok("rm", "leak")  # deleted first: a purge still finds it through the reflog
    assert _has_object(run, secret_blob)
    out = run.ok("rm", "leak", "--purge", "--yes").stdout
    assert "purged thread leak" in out and "cannot be restored" in out
    assert not _has_object(run, secret_blob)
    assert _has_object(run, first)  # the fork still reaches it
    assert run.json("log", "keep")["entries"][0]["id"] == first
    assert "no restorable state" in run.fails(1, "restore", "leak")
    assert "has no reflog" in run.fails(1, "reflog", "leak")
    run.ok("fsck")
    run.fails(1, "rm", "leak", "--purge", "--yes")


def test_rm_purge_asks_on_a_terminal(run, monkeypatch):
    _, secret_blob = _secret_store(run)
    from cas_journal.cli import threads

    monkeypatch.setattr(threads, "can_ask", lambda: True)
    result = run("rm", "leak", "--purge", input="n\n")
    assert result.exit_code == 1 and "aborted; nothing was changed" in result.stderr
    assert "Purge thread 'leak'" in result.stdout and _has_object(run, secret_blob)
    assert run.json("log", "leak")["entries"]
    result = run("rm", "leak", "--purge", input="y\n")
    assert result.exit_code == 0 and not _has_object(run, secret_blob)


def test_gc_expire_reflog_now_purges_deleted_threads(run):
    _, secret_blob = _secret_store(run)
    run.ok("rm", "leak")
    dry = json.loads(run.ok("gc", "--expire-reflog=now", "--dry-run", "--json").stdout)
    assert dry["dry_run"] is True and _has_object(run, secret_blob)
    assert "--yes" in run.fails(1, "gc", "--expire-reflog=now")
    report = json.loads(run.ok("gc", "--expire-reflog=now", "--yes", "--json").stdout)
    assert report["reflog_entries_expired"] > 0 and report["deleted_objects"] > 0
    assert not _has_object(run, secret_blob)
    assert "no restorable state" in run.fails(1, "restore", "leak")
    run.ok("gc", "--expire-reflog", "2w")
    run.ok("gc", "--expire-reflog", "never")
    assert "use now, never or a duration" in run.fails(2, "gc", "--expire-reflog", "soon")


# -- stats --------------------------------------------------------------------------------


def test_stats_of_an_unforked_thread_has_dedup_of_at_least_one(run):
    run.ok("init")
    for word in ("alpha", "beta", "gamma"):
        run.ok("append", "t", word * 20)
    data = run.json("stats")
    assert data["threads"] == 1 and data["entries"] == 3 and data["logical_entries"] == 3
    assert data["dedup_ratio"] == 1.0 and data["logical_bytes"] == data["content_bytes"]
    run.ok("fork", "t", "--id", "u")
    run.ok("append", "u", "delta")
    forked = run.json("stats")
    assert forked["logical_entries"] == 7 and forked["entries"] == 4
    assert forked["dedup_ratio"] > 1.0
    assert forked["disk_bytes"] >= forked["stored_bytes"] > 0
    out = run.ok("stats").stdout
    for label in ("threads:", "logical:", "content:", "stored:", "disk:", "overall:"):
        assert re.search(rf"^{label}", out, re.M), label


# -- locations ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "args",
    [
        ["--store", "memory://", "threads"],
        ["--store", "memory://x", "init"],
        ["pull", "memory://"],
        ["push", "memory://"],
        ["sync", "memory://", "memory://"],
        ["clone", "memory://", "elsewhere"],
        ["--store", " ", "threads"],
        ["--store", "ftp://host/x", "threads"],
    ],
)
def test_locations_the_command_line_cannot_use_fail_in_one_line(loaded, args):
    run, _ = loaded
    result = CliRunner().invoke(
        cli, args if args[0] == "--store" else ["--store", str(run.store), *args]
    )
    assert result.exit_code == 1, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.stderr
    assert "Traceback" not in result.output


def test_python_dash_m_cas_journal_runs_the_command_line(loaded):
    run, ids = loaded
    done = subprocess.run(
        [sys.executable, "-m", "cas_journal", "--store", str(run.store), "log", "main", "--json"],
        capture_output=True,
        text=True,
        env=_env(),
        check=True,
    )
    assert [e["id"] for e in json.loads(done.stdout)["entries"]] == [ids[k] for k in "abde"]


_IMPORTED = (
    "import runpy, sys\n"
    "sys.argv = ['cas-journal', *sys.argv[1:]]\n"
    "try:\n"
    "    runpy.run_module('cas_journal', run_name='__main__', alter_sys=True)\n"
    "except SystemExit as exc:\n"
    "    assert not exc.code, exc.code\n"
    "print(' '.join(sorted(sys.modules)), file=sys.stderr)\n"
)
"""Runs the command line as ``python -m cas_journal ARGS`` would, then prints on stderr
every module the process imported."""

_NEVER_FOR_THREADS = (
    "pydantic",  # the journal's models: the listing reads stored states directly
    "boto3",
    "cas_journal.journal.models",
    "cas_journal.journal.journal",
    "cas_journal.packs",  # a store without packs needs no pack reader, writer or merging
    "cas_journal.backends.copies",  # pack, gc and fsck only
    "cas_journal.backends.local.copies",
    "cas_journal.backends.local.packs",
    "cas_journal.backends.local.migration",  # only when a store needs migrating
    "cas_journal.backends.memory",
    "cas_journal.backends.s3",
    "cas_journal.maintenance",
)


def _imported_by(store: Path, *args: str) -> set[str]:
    done = subprocess.run(
        [sys.executable, "-c", _IMPORTED, "--store", str(store), *args],
        capture_output=True,
        text=True,
        env=_env(),
        check=True,
    )
    return set(done.stderr.split())


def _under(modules: set[str], package: str) -> list[str]:
    return sorted(m for m in modules if m == package or m.startswith(package + "."))


def test_help_imports_neither_the_store_nor_the_models(run):
    """``--help`` imports the command table only: no command module, no backend, no
    object codec, no pydantic."""
    modules = _imported_by(run.store, "--help")
    assert "cas_journal.cli.app" in modules  # the probe does see the CLI's imports
    for heavy in (
        "pydantic",
        "cas_journal.backends",
        "cas_journal.objects",
        "cas_journal.journal.models",
    ):
        assert _under(modules, heavy) == [], heavy
    assert _under(modules, "cas_journal.cli") == ["cas_journal.cli", "cas_journal.cli.app"]


def test_threads_imports_only_what_listing_a_small_store_needs(run):
    """``threads`` on a store of rows (no packs, nothing to migrate) imports the local
    backend and the listing, and none of the modules in ``_NEVER_FOR_THREADS``."""
    run.ok("init")
    run.ok("append", "t1", "hello")
    run.ok("append", "t2", "hi")
    modules = _imported_by(run.store, "threads")
    for needed in (
        "cas_journal.journal.listing",
        "cas_journal.backends.local.store",
        "cas_journal.objects.nodes",
    ):
        assert needed in modules  # the probe does see what listing uses
    for heavy in _NEVER_FOR_THREADS:
        assert _under(modules, heavy) == [], heavy
    journal_modules = _under(modules, "cas_journal.journal")
    assert journal_modules == [
        "cas_journal.journal",
        "cas_journal.journal.cache",
        "cas_journal.journal.listing",
        "cas_journal.journal.refnames",
    ]


_COLLECTOR_PROBE = (
    "import gc, sys\n"
    "import cas_journal.cli\n"
    "print('after import', gc.isenabled())\n"
    "from cas_journal.journal import listing\n"
    "real = listing.list_thread_states\n"
    "def spy(*args, **kwargs):\n"
    "    print('listing', gc.isenabled())\n"
    "    return real(*args, **kwargs)\n"
    "listing.list_thread_states = spy\n"
    "sys.argv = ['cas-journal', *sys.argv[1:]]\n"
    "try:\n"
    "    cas_journal.cli.main()\n"
    "except SystemExit as exc:\n"
    "    print('exit', exc.code, gc.isenabled(), gc.get_freeze_count() > 0)\n"
)


def test_start_up_pauses_the_collector_only_until_the_store_is_open(run):
    """Importing the CLI leaves the collector as it was; ``main`` pauses it while the
    command starts, resumes it once the store is open (so a long command collects as
    usual) and freezes what exists when the command ends."""
    run.ok("init")
    run.ok("append", "t1", "hello")
    done = subprocess.run(
        [sys.executable, "-c", _COLLECTOR_PROBE, "--store", str(run.store), "threads"],
        capture_output=True,
        text=True,
        env=_env(),
        check=True,
    )
    lines = [line for line in done.stdout.splitlines() if not line.startswith(("THREAD", "t1"))]
    assert lines == ["after import True", "listing True", "exit 0 True True"]


def test_unexpected_errors_are_one_line_and_debug_shows_the_traceback(loaded, monkeypatch):
    run, _ = loaded
    from cas_journal.journal import Journal

    def boom(self, *args, **kwargs):
        raise StopIteration

    monkeypatch.setattr(Journal, "list_threads", boom)
    line = run.fails(1, "threads", "--json")
    assert "internal error StopIteration" in line and "CAS_JOURNAL_DEBUG" in line

    def oom(self, *args, **kwargs):
        raise MemoryError

    monkeypatch.setattr(Journal, "list_threads", oom)
    assert run.fails(1, "threads", "--json") == "Error: out of memory"
    monkeypatch.setenv("CAS_JOURNAL_DEBUG", "1")
    monkeypatch.setattr(Journal, "list_threads", boom)
    result = run("threads", "--json")
    assert isinstance(result.exception, StopIteration)


def test_file_not_found_is_one_line_naming_the_file(loaded):
    run, _ = loaded
    line = run.fails(2, "import", str(run.store / "no-such-file.jsonl"))
    assert "no-such-file.jsonl" in line


# -- the documentation stands alone and stays true --------------------------------------------


def test_readme_python_example_runs_as_written_twice(tmp_path):
    text = (ROOT / "README.md").read_text("utf-8")
    block = re.search(r"```python\n(.*?)```", text, re.S)
    assert block is not None
    for _ in range(2):  # a second run must not raise ThreadExists
        done = subprocess.run(
            [sys.executable, "-c", block.group(1)],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            env=_env(),
        )
        assert done.returncode == 0, done.stderr
        assert "'content': 'go'" in done.stdout and done.stdout.endswith(" 5 entries\n")


def test_docs_stand_alone_and_describe_every_command():
    from cas_journal.cli.app import COMMANDS

    for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        text = path.read_text("utf-8")
        assert "../shared" not in text and "DESIGN.md" not in text, path
        for target in re.findall(r"\]\(((?:docs/)?[\w./-]+\.md)\)", text):
            base = ROOT if path.name == "README.md" else path.parent
            assert (
                (base / target).is_file() or target == "docs/format.md" or (target == "format.md")
            ), (path, target)
    text = DOCS.read_text("utf-8")
    for name in COMMANDS:
        assert f"`cas-journal {name}" in text, f"docs/cli.md does not describe {name}"
