"""``tree``: a thread's branches and the threads forked from it, drawn like ``git log --graph``.

The root is at the top. Each entry is a ``*`` row; the branch that leads to the thread's
leaf continues straight down its column, every other branch (and every fork, an ``o``
row) opens a column to the right with ``|\\`` and is drawn to its end before the column
on its left goes on. Nothing here reads the store: ``draw_tree`` lays out what it is given.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import click

from .app import Env, json_option, pass_env
from .output import (
    echo_json,
    echo_lines,
    entry_json,
    entry_text,
    first_line,
    human_time,
    model_json,
    printable,
    short,
)

if TYPE_CHECKING:
    from ..journal import Entry, Journal, ThreadMeta


def forks_of(journal: Journal, thread_id: str) -> list[ThreadMeta]:
    """Threads forked from ``thread_id`` (archived ones included), oldest first.

    This lists every thread: only ``tree`` pays for it.
    """
    found = [
        meta
        for meta in journal.list_threads(include_archived=True)
        if meta.forked_from_thread_id == thread_id
    ]
    found.reverse()
    return found


@dataclass(frozen=True)
class ForkMark:
    """A thread forked from the drawn one, shown at the entry it was forked at."""

    thread_id: str
    entry_id: str
    leaf_id: str
    added: int
    """Entries the fork has past the fork point (on its path)."""


def entry_label(entry: Entry, leaf_id: str) -> str:
    """``<short id> <type> <time>  <first line>`` and a leaf marker."""
    marker = "  (leaf)" if entry.id == leaf_id else ""
    text = first_line(entry_text(entry), 60)
    return printable(
        f"{short(entry.id)} {entry.type.value} {human_time(entry.created_at)}{marker}  {text}"
    )


def fork_label(fork: ForkMark) -> str:
    """``fork <thread> (+N entries, leaf <short>)``."""
    plural = "entry" if fork.added == 1 else "entries"
    return printable(f"fork {fork.thread_id} (+{fork.added} {plural}, leaf {short(fork.leaf_id)})")


if TYPE_CHECKING:
    from typing import TypeAlias

    _Item: TypeAlias = Entry | ForkMark


def draw_tree(
    entries: list[Entry],
    leaf_id: str,
    forks: list[ForkMark],
    label: Callable[[Entry], str] | None = None,
) -> list[str]:
    """The graph lines of a thread's entries (oldest first) with its forks attached."""
    show = label or (lambda entry: entry_label(entry, leaf_id))
    by_id = {entry.id: entry for entry in entries}
    children: dict[str, list[Entry]] = {}
    roots: list[Entry] = []
    for entry in entries:
        if entry.parent_id and entry.parent_id in by_id:
            children.setdefault(entry.parent_id, []).append(entry)
        else:
            roots.append(entry)
    leaf_path = on_path(entries, leaf_id)
    forks_at: dict[str, list[ForkMark]] = {}
    loose: list[ForkMark] = []
    for fork in forks:
        if fork.entry_id in by_id:
            forks_at.setdefault(fork.entry_id, []).append(fork)
        else:
            loose.append(fork)

    lines: list[str] = []
    # a task is (item or None for a "|\" opener, column)
    stack: list[tuple[_Item | None, int]] = []

    def push_children(kids: list[Entry], kid_forks: list[ForkMark], column: int) -> None:
        main: _Item | None = next((kid for kid in kids if kid.id in leaf_path), None)
        if main is None and kids:
            main = kids[0]
        sides: list[_Item] = [kid for kid in kids if kid is not main]
        sides += kid_forks
        if main is None and sides:
            main = sides.pop()  # nothing continues this column: the last branch does
        tasks: list[tuple[_Item | None, int]] = []
        for side in sides:
            tasks += [(None, column), (side, column + 1)]
        if main is not None:
            tasks.append((main, column))
        stack.extend(reversed(tasks))

    def run() -> None:
        while stack:
            item, column = stack.pop()
            rails = "| " * column
            if item is None:
                lines.append(f"{rails}|\\")
            elif isinstance(item, ForkMark):
                lines.append(f"{rails}o {fork_label(item)}")
            else:
                lines.append(f"{rails}* {show(item)}")
                push_children(children.get(item.id, []), forks_at.get(item.id, []), column)

    for fork in loose:
        lines.append(f"o {fork_label(fork)}")
    ordered = sorted(roots, key=lambda root: root.id in leaf_path)  # the leaf's tree last
    for index, root in enumerate(ordered):
        if index:
            lines.append("")
        stack.append((root, 0))
        run()
    return lines


def fork_marks(journal: Journal, thread: str) -> list[ForkMark]:
    """The forks of a thread and how many entries each added after its fork point."""
    from . import access

    marks = []
    for fork in forks_of(journal, thread):
        if fork.forked_from_entry_id and fork.leaf_id:
            start = access.depth(journal, fork.forked_from_entry_id)
            added = access.depth(journal, fork.leaf_id) - start
        else:
            added = access.depth(journal, fork.leaf_id) + 1 if fork.leaf_id else 0
        marks.append(ForkMark(fork.id, fork.forked_from_entry_id, fork.leaf_id, max(added, 0)))
    return marks


def on_path(entries: list[Entry], leaf_id: str) -> set[str]:
    """Ids of the entries on the path from the root to ``leaf_id``."""
    by_id = {entry.id: entry for entry in entries}
    found: set[str] = set()
    current = by_id.get(leaf_id)
    while current is not None and current.id not in found:
        found.add(current.id)
        current = by_id.get(current.parent_id)
    return found


def tree_json(meta: ThreadMeta, entries: list[Entry], marks: list[ForkMark]) -> dict[str, Any]:
    """The --json document of ``tree``."""
    path = on_path(entries, meta.leaf_id)
    return {
        "thread": model_json(meta),
        "entries": [dict(entry_json(entry), on_path=entry.id in path) for entry in entries],
        "forks": [
            {
                "thread_id": mark.thread_id,
                "entry_id": mark.entry_id or None,
                "leaf_id": mark.leaf_id or None,
                "added": mark.added,
            }
            for mark in marks
        ],
    }


@click.command()
@click.argument("thread")
@json_option
@pass_env
def tree(env: Env, thread: str, as_json: bool) -> None:
    """A thread's branches and the threads forked from it, as a graph."""
    journal = env.journal(read_only=True)
    meta = journal.thread(thread)
    entries = journal.entries(thread)
    marks = fork_marks(journal, thread)
    if as_json:
        echo_json(tree_json(meta, entries, marks))
        return
    title = f" - {first_line(meta.title, 60)}" if meta.title else ""
    click.echo(printable(f"thread {meta.id}{title}"))
    if not entries and not marks:
        click.echo("(no entries)")
        return
    echo_lines(draw_tree(entries, meta.leaf_id, marks))
