"""Thread commands that list and change threads: threads, append, fork, rm, restore, reflog."""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING, Any

import click

from ..errors import InvalidInputError, ThreadExists, ThreadNotFound
from .app import Env, json_option, pass_env
from .output import (
    echo_json,
    echo_lines,
    entry_json,
    first_line,
    human_time,
    model_json,
    printable,
    short,
    table,
)
from .resolve import OID

if TYPE_CHECKING:
    from ..journal import Journal, Message
    from ..journal.listing import ListedThread

ROLES = ("user", "assistant", "system", "tool")


@click.command("threads")
@click.option("--all", "include_archived", is_flag=True, help="Include archived threads.")
@click.option("--limit", type=click.IntRange(min=0), default=0, help="At most N (0: all).")
@json_option
@pass_env
def threads_command(env: Env, include_archived: bool, limit: int, as_json: bool) -> None:
    """List threads, newest first."""
    if as_json:
        found = env.journal(read_only=True).list_threads(
            include_archived=include_archived, limit=limit
        )
        echo_json({"threads": [model_json(meta) for meta in found]})
        return
    from ..journal.listing import list_thread_states

    rows = [
        thread_row(listed)
        for listed in list_thread_states(env.store(read_only=True), include_archived, limit)
    ]
    if not rows:
        click.echo("no threads")
        return
    echo_lines(table(rows, ["THREAD", "CREATED", "UPDATED", "LEAF", "TITLE"]))


def thread_row(listed: ListedThread) -> list[str]:
    """One row of ``threads``, read from the stored state (no models are built)."""
    from ..objects import parse_time

    state = listed.state
    if state is None:
        return [listed.thread_id, "-", "-", "-", f"[damaged: run fsck] {listed.problem}"]
    meta = state.meta

    def when(name: str) -> str:
        try:
            return human_time(parse_time(str(meta[name])))
        except (KeyError, ValueError):
            return "-"

    title = str(meta.get("title", ""))
    return [
        listed.thread_id,
        when("created_at"),
        when("updated_at"),
        short(state.leaf),
        ("[archived] " if listed.archived else "") + first_line(title, 50),
    ]


def message_from_stdin(role: str | None) -> Message:
    """A Message from a JSON object on stdin (``role`` fills a missing role)."""
    from pydantic import ValidationError

    from ..journal import Message

    if sys.stdin.isatty():
        raise click.UsageError("give the message text as arguments, or a JSON message on stdin")
    text = sys.stdin.read()
    if not text.strip():
        raise click.UsageError("no message: stdin is empty and no text was given")
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise InvalidInputError(f"stdin is not a JSON message: {exc}") from exc
    if not isinstance(data, dict):
        raise InvalidInputError("stdin must hold one JSON object (a message)")
    if role and not data.get("role"):
        data["role"] = role
    try:
        return Message.model_validate(data)
    except ValidationError as exc:
        problem = exc.errors()[0]
        where = ".".join(str(part) for part in problem["loc"]) or "message"
        raise InvalidInputError(f"invalid message: {where}: {problem['msg']}") from None


def ensure_thread(journal: Journal, thread_id: str) -> bool:
    """Create the thread unless it exists; True if this call created it."""
    from ..journal import ThreadMeta

    try:
        journal.thread(thread_id)
        return False
    except ThreadNotFound:
        pass
    try:
        journal.create_thread(ThreadMeta(id=thread_id))
    except ThreadExists:
        return False  # created meanwhile by someone else
    return True


@click.command()
@click.argument("thread")
@click.argument("text", nargs=-1)
@click.option(
    "--role",
    type=click.Choice(ROLES),
    help="Who speaks (default: user; a JSON message's own role wins).",
)
@click.option("--turn", "turn_id", default="", help="The turn id the entry belongs to.")
@click.option("--parent", type=OID, help="Append under this entry (default: the leaf).")
@json_option
@pass_env
def append(
    env: Env,
    thread: str,
    text: tuple[str, ...],
    role: str | None,
    turn_id: str,
    parent: str | None,
    as_json: bool,
) -> None:
    """Add a message to THREAD, creating the thread if it does not exist.

    The text is the arguments joined by spaces ('cas-journal append t1 --role user
    hello there'); without text, a JSON message is read from stdin
    ('{"role": "assistant", "content": "...", "tool_name": "..."}', the fields of
    cas_journal.Message). The new entry becomes the leaf.
    """
    from ..journal import Entry, Message, entry_type_for_message

    if text:
        message = Message(role=role or "user", content=" ".join(text))
    else:
        message = message_from_stdin(role)
    journal = env.journal()
    created = ensure_thread(journal, thread)
    parent_id = journal.resolve_entry(thread, parent) if parent else None
    entry = journal.append(
        Entry(
            thread_id=thread,
            turn_id=turn_id,
            type=entry_type_for_message(message),
            message=message,
        ),
        parent_id=parent_id,
    )
    if as_json:
        echo_json({"created_thread": created, "entry": entry_json(entry)})
        return
    if created:
        click.echo(printable(f"created thread {thread}"))
    click.echo(printable(f"appended {short(entry.id)} ({entry.type.value}) to {thread}"))


@click.command()
@click.argument("thread")
@click.option("--at", "at", type=OID, help="The new leaf is this entry (default: the leaf).")
@click.option("--before", "before", type=OID, help="The new leaf is this entry's parent.")
@click.option("--id", "new_id", help="Id of the new thread (default: generated).")
@pass_env
def fork(env: Env, thread: str, at: str | None, before: str | None, new_id: str | None) -> None:
    """Start a new thread sharing THREAD's history up to an entry (nothing is copied)."""
    from ..journal import ForkPosition

    if at and before:
        raise click.UsageError("--at and --before cannot be used together")
    journal = env.journal()
    position = ForkPosition.BEFORE if before else ForkPosition.AT
    chosen = at or before
    entry_id = journal.resolve_entry(thread, chosen) if chosen else None
    meta = journal.fork(thread, entry_id, position, new_thread_id=new_id or None)
    click.echo(printable(f"forked {thread} at {short(meta.leaf_id)} into {meta.id}"))


def can_ask() -> bool:
    """True if a person can answer a question (stdin is a terminal)."""
    return sys.stdin.isatty()


def confirm(question: str, yes: bool) -> None:
    """Ask before something that cannot be undone; ``--yes`` answers for scripts.

    Without a terminal to ask on and without ``--yes``, refuse (exit status 1).
    """
    if yes:
        return
    if not can_ask():
        raise click.ClickException(f"{question} Refused: no terminal to confirm on (add --yes)")
    if not click.confirm(question, default=False):
        raise click.ClickException("aborted; nothing was changed")


@click.command()
@click.argument("thread")
@click.option(
    "--purge",
    is_flag=True,
    help="Also erase its reflog and every object only it reached (not restorable).",
)
@click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation (with --purge).")
@json_option
@pass_env
def rm(env: Env, thread: str, purge: bool, yes: bool, as_json: bool) -> None:
    """Delete a thread (restorable with 'restore' until gc expires its reflog).

    With --purge (for content that must go, such as a leaked key) the thread's reflog is
    erased and gc runs at once without a grace period: every object that no other thread,
    run or reflog reaches is deleted from the store. Entries that other threads (forks)
    share stay. A deleted thread can be purged too.
    """
    journal = env.journal()
    if not purge:
        journal.delete_thread(thread)
        if as_json:
            echo_json({"thread": thread, "deleted": True, "purged": False})
            return
        click.echo(printable(f"deleted thread {thread} (undo with 'cas-journal restore {thread}')"))
        return
    report = purge_thread(journal, thread, yes)
    if as_json:
        echo_json({"thread": thread, "deleted": True, "purged": True, "gc": model_json(report)})
        return
    click.echo(
        printable(
            f"purged thread {thread}: {report.deleted_objects} objects "
            f"({report.deleted_bytes} bytes) deleted; it cannot be restored"
        )
    )


def purge_thread(journal: Journal, thread: str, yes: bool) -> Any:
    """Delete ``thread`` if it exists, erase its reflog, then gc without a grace period."""
    from ..journal.refnames import thread_ref
    from ..maintenance import gc

    name = thread_ref(thread)
    refs = journal.store.refs
    exists = refs.read_ref(name) is not None
    if not exists and not refs.reflog(name):
        raise ThreadNotFound(f"thread {thread!r} not found and has no reflog")
    confirm(
        f"Purge thread {thread!r}: erase its reflog and delete, now, every object nothing "
        "else reaches (no undo; on S3, nobody may write meanwhile)?",
        yes,
    )
    if exists:
        journal.delete_thread(thread)
    refs.rewrite_reflog(name, lambda _entry: False)
    return gc(journal.store, prune_now=True)


@click.command()
@click.argument("thread")
@pass_env
def restore(env: Env, thread: str) -> None:
    """Bring back a deleted thread at its last state."""
    meta = env.journal().restore_thread(thread)
    click.echo(printable(f"restored thread {meta.id} (leaf {short(meta.leaf_id)})"))


def reflog_rows(updates: list[Any]) -> list[str]:
    """Reflog entries (newest first) as aligned rows: time, reason, old -> new."""
    return table(
        [
            [human_time(u.time), u.reason or "-", f"{short(u.old)} -> {short(u.new)}"]
            for u in updates
        ]
    )


def reflog_json(updates: list[Any]) -> list[dict[str, Any]]:
    """Reflog entries for --json output."""
    from ..objects import format_time

    return [
        {"time": format_time(u.time), "reason": u.reason or None, "old": u.old, "new": u.new}
        for u in updates
    ]


@click.command()
@click.argument("thread")
@json_option
@pass_env
def reflog(env: Env, thread: str, as_json: bool) -> None:
    """Every update of a thread's ref, newest first (deleted threads too)."""
    from ..journal.refnames import thread_ref

    name = thread_ref(thread)
    updates = list(reversed(env.journal(read_only=True).store.refs.reflog(name)))
    if not updates:
        raise ThreadNotFound(f"thread {thread!r} has no reflog")
    if as_json:
        echo_json({"thread": thread, "ref": name, "entries": reflog_json(updates)})
        return
    echo_lines(reflog_rows(updates))


COMMANDS = [threads_command, append, fork, rm, restore, reflog]
"""The commands this module defines."""
