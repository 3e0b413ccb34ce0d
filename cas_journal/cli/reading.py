"""Reading threads: ``show`` (a thread or one entry), ``log`` (a path) and ``diff``.

None of them lists other threads or walks a thread's whole tree: ``show`` reads one
state and one entry, ``log -n N`` the last N entries of a path, ``diff`` the entries after
the common ancestor. Memory stays bounded by what is printed.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import click

from ..errors import NotFoundError, ThreadNotFound
from . import access
from .app import Env, json_option, pass_env
from .output import (
    echo_json,
    entry_json,
    entry_line,
    human_time,
    model_json,
    page,
    paint,
    printable,
    short,
    table,
)
from .resolve import OID, is_prefix, resolve_object
from .transcript import render, transcript

if TYPE_CHECKING:
    from ..journal import Entry, Journal, ThreadMeta

ENTRY_TYPES = (
    "thread_info",
    "turn_marker",
    "user_message",
    "assistant_message",
    "tool_call",
    "tool_result",
    "model_change",
    "active_tools_change",
    "compaction",
    "branch_summary",
    "run_failure",
    "custom",
)
"""Every entry type (``cas_journal.EntryType`` values; a test keeps them equal)."""


def plural(count: int, word: str, words: str | None = None) -> str:
    """``1 entry``, ``2 entries``, ``0 entries``."""
    return f"{count} {word if count == 1 else (words or word + 's')}"


def _find_thread(journal: Journal, name: str) -> ThreadMeta | None:
    try:
        return journal.thread(name)
    except (ThreadNotFound, ValueError):
        return None


def _thread_summary(journal: Journal, meta: ThreadMeta) -> dict[str, Any]:
    leaf = access.entry_by_id(journal, meta.leaf_id) if meta.leaf_id else None
    path = access.depth(journal, meta.leaf_id) + 1 if meta.leaf_id else 0
    return {"leaf": leaf, "path_length": path}


@click.command()
@click.argument("name", metavar="THREAD|ENTRY")
@json_option
@pass_env
def show(env: Env, name: str, as_json: bool) -> None:
    """A thread's summary and its leaf, or one entry, as a transcript.

    A thread id is looked up first; otherwise NAME is an entry id or a unique prefix of
    at least 4 hex digits. The text is shown in full (through a pager on a terminal).
    """
    journal = env.journal(read_only=True)
    meta = _find_thread(journal, name)
    if meta is not None:
        _show_thread(journal, meta, as_json)
        return
    if not is_prefix(name):
        raise ThreadNotFound(f"thread {name!r} not found (and it is not an entry id)")
    try:
        oid = resolve_object(journal.store.objects, name.lower())
        entry = access.entry_by_id(journal, oid)
    except NotFoundError as exc:
        raise NotFoundError(f"no thread {name!r}, and {exc}") from exc
    if as_json:
        data = entry_json(entry)
        data["depth"] = access.depth(journal, entry.id)
        data["thread_id"] = None
        echo_json(data)
        return
    page(_entry_lines(journal, entry))


def _entry_lines(journal: Journal, entry: Entry) -> Iterator[str]:
    yield from render(entry)
    yield ""
    yield paint(
        f"entry {entry.id}  ({entry.type.value}, depth {access.depth(journal, entry.id)}, "
        f"parent {short(entry.parent_id)})",
        dim=True,
    )


def _show_thread(journal: Journal, meta: ThreadMeta, as_json: bool) -> None:
    summary = _thread_summary(journal, meta)
    leaf: Entry | None = summary["leaf"]
    if as_json:
        echo_json(
            {
                "thread": model_json(meta),
                "leaf": entry_json(leaf) if leaf is not None else None,
                "path_length": summary["path_length"],
            }
        )
        return
    forked = "-"
    if meta.forked_from_thread_id:
        forked = f"{meta.forked_from_thread_id} at {short(meta.forked_from_entry_id)}"
    rows = [
        ["thread:", meta.id],
        ["title:", meta.title or "-"],
        ["status:", meta.status or "-"],
        ["archived:", "yes" if meta.archived else "no"],
        ["created:", human_time(meta.created_at)],
        ["updated:", human_time(meta.updated_at)],
        ["forked from:", forked],
        [
            "path:",
            f"{plural(summary['path_length'], 'entry', 'entries')} from the root to the leaf",
        ],
    ]
    lines = table(rows)
    if leaf is not None:
        lines += ["", *render(leaf)]
    else:
        lines += ["", "(no entries)"]
    page(lines)


@click.command()
@click.argument("thread")
@click.option("--leaf", "leaf", type=OID, help="Show the path to this entry instead.")
@click.option(
    "-n",
    "--max-count",
    "limit",
    type=click.IntRange(min=0),
    default=0,
    help="Only the last N entries of the path (0: all).",
)
@click.option("--full", is_flag=True, help="Every entry in full, as a transcript.")
@json_option
@pass_env
def log(env: Env, thread: str, leaf: str | None, limit: int, full: bool, as_json: bool) -> None:
    """The path of a thread, root first: one line per entry (--full: everything)."""
    journal = env.journal(read_only=True)
    leaf_id = access.leaf_of(journal, thread, leaf)
    entries = _path(journal, thread, leaf_id, limit)
    if as_json:
        echo_json(
            {"thread": thread, "leaf_id": leaf_id, "entries": [entry_json(e) for e in entries]}
        )
    elif full:
        page(transcript(entries))
    else:
        page(log_line(entry) for entry in entries)


TYPE_WIDTH = max(len(kind) for kind in ENTRY_TYPES)
"""The width of the type column of ``log`` (the longest entry type)."""


def log_line(entry: Entry) -> str:
    """One ``log`` line with fixed-width columns, so lines print as they are read."""
    short_id, kind, when, text = entry_line(entry)
    return printable(f"{short_id}  {kind.ljust(TYPE_WIDTH)}  {when}  {text}".rstrip())


def _path(journal: Journal, thread: str, leaf: str | None, limit: int) -> Iterator[Entry]:
    """The path root first: the last ``limit`` entries (read from the leaf backwards), or
    all of it, one entry at a time."""
    if limit > 0:
        found = list(access.walk_back(journal, thread, leaf, limit))
        found.reverse()
        return iter(found)
    return access.iter_path(journal, thread, leaf)


@click.command()
@click.argument("left", metavar="THREAD")
@click.argument("right", metavar="OTHER")
@click.option("--full", is_flag=True, help="Every entry of each side in full.")
@json_option
@pass_env
def diff(env: Env, left: str, right: str, full: bool, as_json: bool) -> None:
    """Where two threads part: their common ancestor, then each side's entries after it."""
    journal = env.journal(read_only=True)
    left_leaf = journal.thread(left).leaf_id or None
    right_leaf = journal.thread(right).leaf_id or None
    parted = access.diverge(journal, left_leaf, right_leaf)
    ancestor = access.entry_by_id(journal, parted.ancestor) if parted.ancestor else None
    left_entries = [journal.entry_by_id(oid, left) for oid in parted.left]
    right_entries = [journal.entry_by_id(oid, right) for oid in parted.right]
    if as_json:
        echo_json(
            {
                "left": left,
                "right": right,
                "ancestor": entry_json(ancestor) if ancestor is not None else None,
                "ancestor_depth": access.depth(journal, ancestor.id) if ancestor else None,
                "left_entries": [entry_json(e) for e in left_entries],
                "right_entries": [entry_json(e) for e in right_entries],
            }
        )
        return
    page(_diff_lines(journal, left, right, ancestor, left_entries, right_entries, full))


def _diff_lines(
    journal: Journal,
    left: str,
    right: str,
    ancestor: Entry | None,
    left_entries: list[Entry],
    right_entries: list[Entry],
    full: bool,
) -> Iterator[str]:
    if ancestor is None:
        yield "no common ancestor: the threads share no entry"
    else:
        position = access.depth(journal, ancestor.id) + 1
        yield (f"common ancestor (entry {position} of both paths): " + log_line(ancestor))
    for name, sign, colour, entries in (
        (left, "-", "red", left_entries),
        (right, "+", "green", right_entries),
    ):
        yield ""
        yield paint(
            printable(
                f"{sign}{sign}{sign} {name}: {plural(len(entries), 'entry', 'entries')} after it"
            ),
            bold=True,
        )
        for entry in entries:
            if full:
                for line in render(entry):
                    yield paint(f"{sign} {line}", fg=colour)
            else:
                yield paint(f"{sign} {log_line(entry)}", fg=colour)


COMMANDS = [show, log, diff]
"""The commands this module defines."""
