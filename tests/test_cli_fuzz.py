"""Hostile command lines: random commands, options and arguments never give a traceback.

Every run must end with exit status 0, 1 or 2; a failure is exactly one ``Error:`` line on
stderr, and never the ``internal error`` line that marks a bug (an exception that is not a
JournalError, an OSError, a usage error or running out of memory).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.journal_helpers import at, user

import cas_journal as cj
from cas_journal.cli import cli

COMMANDS = [
    ["threads"],
    ["append"],
    ["show"],
    ["log"],
    ["diff"],
    ["tree"],
    ["fork"],
    ["rm"],
    ["restore"],
    ["reflog"],
    ["cat"],
    ["stats"],
    ["pack"],
    ["gc"],
    ["fsck"],
    ["checkpoints"],
    ["checkpoints", "list"],
    ["checkpoints", "show"],
    ["checkpoints", "history"],
    ["checkpoints", "rm"],
    ["checkpoints", "restore"],
    ["checkpoints", "reflog"],
    ["export"],
    ["import"],
    ["pull"],
    ["push"],
    ["init"],
]
OPTIONS = [
    "--json",
    "--full",
    "-n",
    "--max-count",
    "--leaf",
    "--at",
    "--before",
    "--id",
    "--role",
    "--turn",
    "--parent",
    "--all",
    "--limit",
    "--iteration",
    "--purge",
    "--yes",
    "--dry-run",
    "--expire-reflog",
    "--raw",
    "--quick",
    "--ref",
    "--no-merge",
    "-o",
    "--help",
    "--",
]
WORDS = [
    "main",
    "side",
    "run1",
    "-",
    "",
    " ",
    "0",
    "-1",
    "99999999999999999999",
    "now",
    "abcd",
    "ABCDEF0123",
    "0" * 64,
    "f" * 65,
    "x" * 2000,
    "\x00",
    "\x1b[2J",
    "é",
    "threads/main",
    "../..",
    "/",
    "memory://",
    "s3://",
    "ftp://x",
    "nul\x00l",
    "{}",
    "[]",
    "user",
    "assistant",
    "robot",
    "2w",
    "never",
]

argument = st.one_of(
    st.sampled_from(WORDS),
    st.sampled_from(OPTIONS),
    st.text(min_size=0, max_size=12),
    st.text(alphabet="0123456789abcdef", min_size=1, max_size=70),
    st.integers(min_value=-(2**70), max_value=2**70).map(str),
)
stdin = st.one_of(
    st.none(),
    st.sampled_from(
        [
            "",
            "{}",
            "[]",
            "null",
            '{"role": 5}',
            '{"content": "x"}',
            "\ufeff{}",
            '{"record": "thread"}\n',
            '{"a": ' * 200,
            "y\n",
            "n\n",
        ]
    ),
    st.text(max_size=40),
)


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("fuzz")
    path = root / "store"
    with cj.Journal.open(path, durable=False) as j:
        j.create_thread(cj.ThreadMeta(id="main", created_at=at(0)))
        first = user(j, "main", "hello", now=at(1))
        user(j, "main", "again", now=at(2))
        j.fork("main", first.id, new_thread_id="side", now=at(3))
        j.checkpoints.save(cj.Checkpoint(run_id="run1", messages=[{"role": "user"}]))
    return path


@settings(
    max_examples=int(os.environ.get("CLI_FUZZ_EXAMPLES", "150")),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    command=st.sampled_from(COMMANDS),
    arguments=st.lists(argument, max_size=5),
    text=stdin,
)
def test_random_command_lines_never_give_a_traceback(store, command, arguments, text):
    here = os.getcwd()
    os.chdir(store.parent)  # relative paths an argument names land beside the store
    try:
        result = CliRunner().invoke(cli, ["--store", str(store), *command, *arguments], input=text)
    finally:
        os.chdir(here)
    assert result.exit_code in (0, 1, 2), (command, arguments, result.output)
    assert result.exception is None or isinstance(result.exception, SystemExit), (
        command,
        arguments,
        repr(result.exception),
    )
    if result.exit_code != 0 and "--help" not in arguments:
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("Error: "), (
            command,
            arguments,
            result.stderr,
        )
        assert "internal error" not in lines[0], (command, arguments, lines[0])


@pytest.mark.parametrize("command", [["import"], ["pull"], ["show"], ["threads", "--after"]])
@pytest.mark.parametrize("argument", ["\x00", "nul\x00l"])
def test_an_argument_with_a_nul_character_is_a_usage_error(store, command, argument):
    result = CliRunner().invoke(cli, ["--store", str(store), *command, argument])
    assert result.exit_code == 2, result.output
    assert (
        result.stderr.strip().splitlines() == [result.stderr.strip()]
        and "NUL character" in result.stderr
    )
