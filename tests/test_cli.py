"""The command line: every command, its --json schema, its errors, and both entry points."""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from journal_helpers import assistant, at, user

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


def test_show_reports_metadata_leaf_and_counts(loaded):
    run, ids = loaded
    out = run.ok("show", "main").stdout
    assert re.search(r"^entries:\s+5$", out, re.M)
    assert re.search(r"^branches:\s+2$", out, re.M)
    assert re.search(r"^forks:\s+side$", out, re.M)
    assert ids["e"][:10] in out and "final answer" in out
    data = run.json("show", "side")
    assert data["thread"]["forked_from_thread_id"] == "main"
    assert data["leaf"]["id"] == ids["f"] and "raw" not in data["leaf"]
    assert data["counts"] == {"entries": 3, "path": 3, "branches": 1, "forks": 0}
    assert data["forks"] == []
    assert run.fails(1, "show", "nope") == "Error: thread 'nope' not found"


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
    path = run.store / "objects" / ids["a"][:2] / ids["a"][2:]
    path.chmod(0o644)
    path.write_bytes(b"garbage")
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
    path = run.store / "objects" / ids["e"][:2] / ids["e"][2:]
    path.chmod(0o644)
    path.write_bytes(b"garbage")
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
    assert "fsck: ok" in out and "dedup_ratio" in out
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
    main = run.json("show", "demo-main")
    assert main["counts"]["branches"] == 2 and main["counts"]["forks"] == 4


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
    assert set(data) == {"thread", "leaf", "counts", "forks"}
    assert set(data["thread"]) == THREAD_FIELDS and set(data["leaf"]) == ENTRY_FIELDS
    assert set(data["counts"]) == {"entries", "path", "branches", "forks"}
    _documented("show", set(data) | set(data["counts"]) | ENTRY_FIELDS)

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


def test_help_lists_every_command():
    out = CliRunner().invoke(cli, ["--help"]).stdout
    for name in (
        "init",
        "threads",
        "show",
        "log",
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
    assert failed.stderr == "Error: thread 'nope' not found\n"


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
