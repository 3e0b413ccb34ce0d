"""``demo``: a small forking agent workload, then pack, gc, stats, fsck and the tree.

The workload: one conversation (a user task, tool calls, tool results with repeated
output, an abandoned attempt), four forks taken at different points, each adding a few
entries, and a checkpoint run of twelve iterations. Content and times are fixed, so
every run writes the same ids; a rerun replaces the demo threads and run in place.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from datetime import datetime, timedelta

import click

from ..errors import ThreadNotFound
from ..journal import (
    Checkpoint,
    Entry,
    ForkPosition,
    Journal,
    Message,
    ThreadMeta,
    append_message,
)
from . import demo_data as data
from .app import Env, pass_env
from .maintenance import stats_lines, summary_line
from .output import echo_lines, human_size
from .tree import tree

MAIN = "demo-main"
"""The demo's base thread."""
FORKS = ("demo-explain", "demo-zoneinfo", "demo-retry", "demo-review")
"""The demo's forks of the base thread."""
RUN = "demo-run"
"""The demo's checkpoint run."""
ITERATIONS = 12


@dataclass
class Writer:
    """Appends to one thread at increasing fixed times."""

    journal: Journal
    thread: str
    step: int = 0

    def when(self) -> timedelta:
        """The offset from T0 of the next entry."""
        self.step += 1
        return timedelta(seconds=7 * self.step)

    def say(self, role: str, text: str, turn: str) -> Entry:
        """Append a user or assistant message."""
        message = Message(role=role, content=text)
        return append_message(self.journal, self.thread, turn, message, now=self._now())

    def tool(self, name: str, arguments: str, output: str, turn: str) -> Entry:
        """Append a tool call and its result; returns the result."""
        call = data.tool_call_id(name, arguments)
        request = Message(role="assistant", tool_call_id=call, tool_name=name, tool_args=arguments)
        append_message(self.journal, self.thread, turn, request, now=self._now())
        result = Message(role="tool", tool_call_id=call, tool_name=name, content=output)
        return append_message(self.journal, self.thread, turn, result, now=self._now())

    def _now(self) -> datetime:
        return data.T0 + self.when()


def _fresh(journal: Journal) -> None:
    """Remove what an earlier demo left (threads go to the reflog, restorable)."""
    for thread_id in (MAIN, *FORKS):
        with contextlib.suppress(ThreadNotFound):
            journal.delete_thread(thread_id)
    journal.checkpoints.delete(RUN)


def build_demo(journal: Journal) -> dict[str, int]:
    """Write the demo workload; returns what was written (threads, entries, iterations)."""
    _fresh(journal)
    journal.create_thread(ThreadMeta(id=MAIN, title=data.TITLE, created_at=data.T0))
    w = Writer(journal, MAIN)
    w.say("user", data.TASK, "turn-1")
    failed = w.tool("bash", data.args(command="python -m pytest -q"), data.PYTEST_FAIL, "turn-1")
    source = w.tool("read_file", data.args(path="src/calsync/dates.py"), data.SOURCE, "turn-1")
    # an attempt that goes nowhere: pin everything to UTC, tests still fail
    w.say("assistant", "Simplest fix: parse every time as UTC.", "turn-1")
    w.tool("apply_patch", data.args(patch=data.PATCH_UTC), "Applied 1 hunk", "turn-1")
    w.tool("bash", data.args(command="python -m pytest -q"), data.PYTEST_FAIL, "turn-1")
    journal.move_leaf(MAIN, source.id, now=data.T0 + w.when())
    diagnosis = w.say(
        "assistant",
        "Root cause: parse_event_time attaches the zone with replace(tzinfo=...), which "
        "keeps 02:30 on 30 March although that wall time does not exist in Berlin (the "
        "clocks jump from 02:00 to 03:00). Normalising through UTC moves it to 03:30+02:00.",
        "turn-1",
    )
    w.tool("apply_patch", data.args(patch=data.PATCH_NORMALIZE), "Applied 1 hunk", "turn-1")
    passed = w.tool("bash", data.args(command="python -m pytest -q"), data.PYTEST_PASS, "turn-1")
    done = w.say("assistant", "Fixed: times in the spring-forward gap now normalise.", "turn-1")
    w.say("user", "Thanks. Please add a regression test for the autumn change too.", "turn-2")
    w.tool(
        "write_file",
        data.args(path="tests/test_dates.py", append=data.NEW_TEST),
        "Wrote 3 lines",
        "turn-2",
    )
    w.tool("bash", data.args(command="python -m pytest -q"), data.PYTEST_PASS_MORE, "turn-2")
    w.say("assistant", "Added test_parse_dates_autumn_overlap; 43 tests pass.", "turn-2")

    forks = [
        (FORKS[0], failed.id, ForkPosition.AT),
        (FORKS[1], diagnosis.id, ForkPosition.AT),
        (FORKS[2], passed.id, ForkPosition.AT),
        (FORKS[3], done.id, ForkPosition.AT),
    ]
    for thread_id, entry_id, position in forks:
        journal.fork(MAIN, entry_id, position, thread_id, now=data.T0 + w.when())
    f = Writer(journal, FORKS[0], w.step)
    f.say("user", "Before you fix anything: what is a DST gap, in two sentences?", "turn-x")
    f.say(
        "assistant",
        "When clocks spring forward, an hour of wall time never happens. "
        "A time inside it has no instant, so libraries must choose one.",
        "turn-x",
    )
    f = Writer(journal, FORKS[1], f.step)
    f.tool("apply_patch", data.args(patch=data.PATCH_FOLD), "Applied 1 hunk", "turn-1")
    f.tool("bash", data.args(command="python -m pytest -q"), data.PYTEST_PASS, "turn-1")
    f.say("assistant", "Fixed with fold=1 and a UTC round trip.", "turn-1")
    f = Writer(journal, FORKS[2], f.step)
    for _ in range(2):  # the same run, the same output: stored once
        f.tool("bash", data.args(command="python -m pytest -q"), data.PYTEST_PASS, "turn-r")
    f.say("assistant", "Stable: the suite passed three times in a row.", "turn-r")
    f = Writer(journal, FORKS[3], f.step)
    f.say("user", "Review the patch for other zones with gaps.", "turn-v")
    f.tool("read_file", data.args(path="src/calsync/dates.py"), data.SOURCE, "turn-v")
    f.say("assistant", "The same code path serves every zone; no other change needed.", "turn-v")

    for iteration in range(1, ITERATIONS + 1):
        messages = data.run_messages(iteration)
        journal.checkpoints.save(
            Checkpoint(
                run_id=RUN,
                task_name="fix-dst-test",
                iteration=iteration,
                messages=messages,
                system_prompt=data.SYSTEM_PROMPT,
                input_tokens=1200 * iteration,
                output_tokens=150 * iteration,
                created_at=data.T0 + timedelta(minutes=iteration),
            )
        )
    entries = sum(len(journal.path(t)) for t in (MAIN, *FORKS))
    return {"threads": 1 + len(FORKS), "path_entries": entries, "iterations": ITERATIONS}


@click.command()
@pass_env
@click.pass_context
def demo(ctx: click.Context, env: Env) -> None:
    """Write a small forking workload, pack and gc it, and show what it costs.

    Prints the tree of the main thread, the store's stats and fsck's verdict, and ends
    with one line: the logical bytes and entries against what the store takes on disk.
    """
    from ..maintenance import fsck, gc, pack, stats

    journal = env.journal(create=True)
    built = build_demo(journal)
    click.echo(
        f"wrote {built['threads']} threads ({built['path_entries']} entries on their paths, "
        f"forks share history) and a {built['iterations']}-iteration checkpoint run "
        f"to {env.location}"
    )
    click.echo()
    ctx.invoke(tree, thread=MAIN, as_json=False)
    click.echo()
    packed = pack(journal.store)
    collected = gc(journal.store)
    click.echo(
        f"pack: {packed.objects} objects into one pack; gc: "
        f"{collected.deleted_objects} unreachable objects deleted "
        f"({human_size(collected.deleted_bytes)})"
    )
    checked = fsck(journal.store)
    click.echo(f"fsck: {'ok' if checked.ok else f'{len(checked.problems)} problem(s)'}")
    for problem in checked.problems:
        click.echo(f"  {problem.subject}: {problem.message}")
    report = stats(journal.store)
    click.echo()
    echo_lines(stats_lines(report))
    click.echo()
    click.echo(summary_line(report))
    if not checked.ok:
        ctx.exit(1)


COMMANDS = [demo]
"""The commands this module adds to the root group."""
