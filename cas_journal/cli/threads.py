"""Thread commands: threads, show, log, fork, rm, restore, reflog."""

from __future__ import annotations

from typing import Any

import click

from ..errors import ThreadNotFound
from ..journal import Entry, ForkPosition, Journal, ThreadMeta
from ..journal.state import thread_ref
from ..objects import format_time
from .app import Env, json_option, pass_env
from .output import (
    echo_json,
    echo_lines,
    entry_line,
    first_line,
    human_time,
    model_json,
    printable,
    short,
    table,
)
from .resolve import OID, resolve_entry


def entry_json(entry: Entry) -> dict[str, Any]:
    """An entry for --json output: every Entry field except ``raw``."""
    data: dict[str, Any] = entry.model_dump(mode="json", exclude={"raw"})
    return data


def forks_of(journal: Journal, thread_id: str) -> list[ThreadMeta]:
    """Threads forked from ``thread_id`` (archived ones included), oldest first."""
    found = [
        meta
        for meta in journal.list_threads(include_archived=True)
        if meta.forked_from_thread_id == thread_id
    ]
    found.reverse()
    return found


def branch_heads(entries: list[Entry]) -> list[str]:
    """Ids of the entries no other entry names as its parent (the branch tips)."""
    parents = {entry.parent_id for entry in entries}
    return [entry.id for entry in entries if entry.id not in parents]


@click.command("threads")
@click.option("--all", "include_archived", is_flag=True, help="Include archived threads.")
@click.option("--limit", type=click.IntRange(min=0), default=0, help="At most N (0: all).")
@json_option
@pass_env
def threads_command(env: Env, include_archived: bool, limit: int, as_json: bool) -> None:
    """List threads, newest first."""
    found = env.journal().list_threads(include_archived=include_archived, limit=limit)
    if as_json:
        echo_json({"threads": [model_json(meta) for meta in found]})
        return
    if not found:
        click.echo("no threads")
        return
    rows = [
        [
            meta.id,
            human_time(meta.created_at),
            human_time(meta.updated_at),
            short(meta.leaf_id),
            ("[archived] " if meta.archived else "") + first_line(meta.title, 50),
        ]
        for meta in found
    ]
    echo_lines(table(rows, ["THREAD", "CREATED", "UPDATED", "LEAF", "TITLE"]))


@click.command()
@click.argument("thread")
@json_option
@pass_env
def show(env: Env, thread: str, as_json: bool) -> None:
    """A thread's metadata, leaf and counts."""
    journal = env.journal()
    meta = journal.thread(thread)
    entries = journal.entries(thread)
    path = journal.path(thread)
    leaf = path[-1] if path else None
    forks = forks_of(journal, thread)
    counts = {
        "entries": len(entries),
        "path": len(path),
        "branches": len(branch_heads(entries)),
        "forks": len(forks),
    }
    if as_json:
        echo_json(
            {
                "thread": model_json(meta),
                "leaf": entry_json(leaf) if leaf else None,
                "counts": counts,
                "forks": [fork.id for fork in forks],
            }
        )
        return
    forked = "-"
    if meta.forked_from_thread_id:
        forked = f"{meta.forked_from_thread_id} at {short(meta.forked_from_entry_id)}"
    rows = [
        ["thread", meta.id],
        ["title", meta.title or "-"],
        ["status", meta.status or "-"],
        ["archived", "yes" if meta.archived else "no"],
        ["created", human_time(meta.created_at)],
        ["updated", human_time(meta.updated_at)],
        ["forked from", forked],
        ["leaf", "  ".join(entry_line(leaf)) if leaf else "-"],
        ["entries", str(counts["entries"])],
        ["path", f"{counts['path']} entries from the root to the leaf"],
        ["branches", str(counts["branches"])],
        ["forks", ", ".join(fork.id for fork in forks) or "-"],
    ]
    echo_lines(table([[name + ":", value] for name, value in rows]))


@click.command()
@click.argument("thread")
@click.option("--leaf", "leaf", type=OID, help="Show the path to this entry instead.")
@json_option
@pass_env
def log(env: Env, thread: str, leaf: str | None, as_json: bool) -> None:
    """The path of a thread, root first: one line per entry."""
    journal = env.journal()
    leaf_id = resolve_entry(journal, thread, leaf) if leaf else None
    path = journal.path(thread, leaf_id)
    if as_json:
        echo_json(
            {
                "thread": thread,
                "leaf_id": path[-1].id if path else "",
                "entries": [entry_json(entry) for entry in path],
            }
        )
        return
    echo_lines(table([entry_line(entry) for entry in path]))


@click.command()
@click.argument("thread")
@click.option("--at", "at", type=OID, help="The new leaf is this entry (default: the leaf).")
@click.option("--before", "before", type=OID, help="The new leaf is this entry's parent.")
@click.option("--id", "new_id", help="Id of the new thread (default: generated).")
@pass_env
def fork(env: Env, thread: str, at: str | None, before: str | None, new_id: str | None) -> None:
    """Start a new thread sharing THREAD's history up to an entry (nothing is copied)."""
    if at and before:
        raise click.UsageError("--at and --before cannot be used together")
    journal = env.journal()
    position = ForkPosition.BEFORE if before else ForkPosition.AT
    chosen = at or before
    entry_id = resolve_entry(journal, thread, chosen) if chosen else None
    meta = journal.fork(thread, entry_id, position, new_thread_id=new_id or None)
    click.echo(printable(f"forked {thread} at {short(meta.leaf_id)} into {meta.id}"))


@click.command()
@click.argument("thread")
@pass_env
def rm(env: Env, thread: str) -> None:
    """Delete a thread (restorable with 'restore' until gc expires its reflog)."""
    env.journal().delete_thread(thread)
    click.echo(printable(f"deleted thread {thread} (undo with 'cas-journal restore {thread}')"))


@click.command()
@click.argument("thread")
@pass_env
def restore(env: Env, thread: str) -> None:
    """Bring back a deleted thread at its last state."""
    meta = env.journal().restore_thread(thread)
    click.echo(printable(f"restored thread {meta.id} (leaf {short(meta.leaf_id)})"))


@click.command()
@click.argument("thread")
@json_option
@pass_env
def reflog(env: Env, thread: str, as_json: bool) -> None:
    """Every update of a thread's ref, newest first (deleted threads too)."""
    name = thread_ref(thread)
    updates = list(reversed(env.journal().store.refs.reflog(name)))
    if not updates:
        raise ThreadNotFound(f"thread {thread!r} has no reflog")
    if as_json:
        echo_json(
            {
                "thread": thread,
                "ref": name,
                "entries": [
                    {
                        "time": format_time(update.time),
                        "reason": update.reason,
                        "old": update.old,
                        "new": update.new,
                    }
                    for update in updates
                ],
            }
        )
        return
    rows = [
        [human_time(u.time), u.reason or "-", f"{short(u.old)} -> {short(u.new)}"] for u in updates
    ]
    echo_lines(table(rows))


COMMANDS = [threads_command, show, log, fork, rm, restore, reflog]
"""The commands this module adds to the root group."""
