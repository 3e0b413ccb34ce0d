"""Formatting for people and scripts: short ids, sizes, times, tables, colour, reports,
progress.

JSON output follows one rule: a field of the library's models that has no value is
``null`` (empty strings become ``null``; empty lists and maps stay ``[]``/``{}``; numbers
stay numbers). Maps and message dicts that users supplied are printed exactly as stored.
Colour is used only when stdout is a terminal and ``NO_COLOR`` is not set.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from types import TracebackType
from typing import TYPE_CHECKING, Any, BinaryIO, TextIO

import click

if TYPE_CHECKING:
    from pydantic import BaseModel

    from ..journal import Entry

SHORT_ID = 10
"""Hex digits shown for an object id in human output."""
SUMMARY_WIDTH = 72
"""Characters of content shown after an entry's id, type and time."""


def short(oid: str | None) -> str:
    """The short form of an object id (``-`` for none)."""
    return oid[:SHORT_ID] if oid else "-"


def human_size(size: int) -> str:
    """``512 B``, ``1.5 KiB``, ``3.2 MiB`` ..."""
    value = float(size)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            return f"{size} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def human_time(moment: datetime | None) -> str:
    """``2026-01-02 03:04:05`` (UTC), or ``-``."""
    if moment is None:
        return "-"
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S")


def printable(text: str) -> str:
    """Text with control characters escaped, so ids and titles cannot garble a terminal."""
    if text.isprintable():
        return text
    return "".join(char if char.isprintable() or char == " " else repr(char)[1:-1] for char in text)


def first_line(text: str, width: int = SUMMARY_WIDTH) -> str:
    """The first non-blank line of text, cut to ``width`` characters."""
    line = next((part.strip() for part in text.splitlines() if part.strip()), "")
    return line if len(line) <= width else line[: width - 3] + "..."


def entry_text(entry: Entry) -> str:
    """What an entry says, in words: its message, tool call, marker, summary or error."""
    message = entry.message
    if message is not None:
        text = message.text()
        calls = message.tool_calls()
        if entry.type == "tool_call" and calls and not text:
            return "; ".join(f"{call.name} {call.arguments}".strip() for call in calls)
        if text:
            return text
        if message.tool_name:
            return f"{message.tool_name} {message.tool_args}".strip()
        if message.reasoning:
            return message.reasoning
    if entry.turn_status is not None:
        return f"turn {entry.turn_status.value}"
    for text in (entry.summary, entry.error):
        if text:
            return text
    if entry.model or entry.provider:
        return " ".join(part for part in (entry.provider, entry.model) if part)
    if entry.metadata:
        return json.dumps(entry.metadata, sort_keys=True, ensure_ascii=False)
    return ""


def entry_line(entry: Entry) -> list[str]:
    """The columns of one entry in a listing: short id, type, time, first line."""
    return [
        short(entry.id),
        entry.type.value,
        human_time(entry.created_at),
        first_line(entry_text(entry)),
    ]


def table(rows: Sequence[Sequence[str]], headers: Sequence[str] | None = None) -> list[str]:
    """Rows as aligned columns (the last column is not padded)."""
    every = ([list(headers)] if headers else []) + [[printable(c) for c in row] for row in rows]
    if not every:
        return []
    columns = max(len(row) for row in every)
    widths = [
        max((len(row[i]) for row in every if i < len(row)), default=0) for i in range(columns)
    ]
    lines = []
    for row in every:
        cells = [cell.ljust(widths[i]) if i < len(row) - 1 else cell for i, cell in enumerate(row)]
        lines.append("  ".join(cells).rstrip())
    return lines


def echo_lines(lines: Sequence[str]) -> None:
    """Print lines on stdout."""
    for line in lines:
        click.echo(line)


def binary_stdout() -> BinaryIO:
    """Stdout for bytes (text written before is flushed first)."""
    sys.stdout.flush()
    return sys.stdout.buffer


def echo_json(value: Any) -> None:
    """Print a JSON document on stdout (indented, keys in the order given)."""
    click.echo(json.dumps(value, indent=2, ensure_ascii=False))


def model_json(model: BaseModel, exclude: set[str] | None = None) -> dict[str, Any]:
    """A pydantic model as JSON-compatible data, absent values (``""``) as ``null``."""
    data: dict[str, Any] = model.model_dump(mode="json", exclude=exclude)
    return _nulls(model, data)


def _nulls(model: BaseModel, data: dict[str, Any]) -> dict[str, Any]:
    from pydantic import BaseModel

    for name in type(model).model_fields:
        if name not in data:
            continue
        value = getattr(model, name)
        if value == "":
            data[name] = None
        elif isinstance(value, BaseModel) and isinstance(data[name], dict):
            _nulls(value, data[name])
        elif isinstance(value, list) and isinstance(data[name], list):
            for item, dumped in zip(value, data[name], strict=True):
                if isinstance(item, BaseModel) and isinstance(dumped, dict):
                    _nulls(item, dumped)
    return data


def entry_json(entry: Entry) -> dict[str, Any]:
    """An entry for --json output: every Entry field except ``raw``."""
    return model_json(entry, exclude={"raw"})


# -- colour --------------------------------------------------------------------------------


def colour_enabled() -> bool:
    """True if stdout is a terminal and ``NO_COLOR`` is unset or empty."""
    return not os.environ.get("NO_COLOR") and sys.stdout.isatty()


def paint(text: str, **style: Any) -> str:
    """``click.style`` (``fg=``, ``bold=``, ``dim=``) when colour is enabled, else the text.

    click also strips styles written to a non-terminal; ``NO_COLOR`` is honoured here.
    """
    return click.style(text, **style) if colour_enabled() else text


def page(lines: Iterable[str]) -> None:
    """Print lines, through a pager (``$PAGER``, else ``less``) when stdout is a terminal.

    Lines are produced as they are shown, so a long transcript is never held whole.
    """
    if sys.stdout.isatty() and sys.stdin.isatty():
        click.echo_via_pager(line + "\n" for line in lines)
        return
    for line in lines:
        click.echo(line)


# -- reports -------------------------------------------------------------------------------


def is_size(name: str) -> bool:
    """True for report fields holding a byte count (``*_bytes``, ``bytes_*``)."""
    return name.endswith("_bytes") or name.startswith("bytes_") or name == "bytes"


def format_value(name: str, value: Any) -> str:
    """One report value for people: sizes for ``*_bytes``, two decimals for floats."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int) and is_size(name):
        return human_size(value)
    if isinstance(value, float):
        return f"{value:.2f}"
    if isinstance(value, datetime):
        return human_time(value)
    if hasattr(type(value), "model_fields"):
        return "; ".join(
            f"{key}: {format_value(key, getattr(value, key))}" for key in type(value).model_fields
        )
    return str(value)


def report_lines(report: BaseModel, indent: str = "") -> list[str]:
    """Every field of a report as ``name: value`` lines, nested values indented."""
    fields = list(type(report).model_fields)
    width = max((len(name) for name in fields), default=0) + 1
    lines: list[str] = []
    for name in fields:
        value = getattr(report, name)
        label = f"{indent}{(name + ':').ljust(width)}"
        if hasattr(type(value), "model_fields"):
            lines.append(f"{indent}{name}:")
            lines += report_lines(value, indent + "  ")
        elif isinstance(value, dict):
            if not value:
                lines.append(f"{label} -")
                continue
            lines.append(f"{indent}{name}:")
            inner = max(len(str(key)) for key in value) + 1
            for key, item in value.items():
                lines.append(
                    f"{indent}  {(str(key) + ':').ljust(inner)} {format_value(name, item)}"
                )
        elif isinstance(value, (list, tuple)):
            if not value:
                lines.append(f"{label} none")
                continue
            lines.append(f"{indent}{name}:")
            lines += [f"{indent}  - {format_value(name, item)}" for item in value]
        else:
            lines.append(f"{label} {format_value(name, value)}")
    return lines


def show_report(report: BaseModel, as_json: bool, title: str | None = None) -> None:
    """Print a report as JSON (``model_json``) or as aligned lines."""
    if as_json:
        echo_json(model_json(report))
        return
    if title:
        click.echo(title)
    echo_lines(report_lines(report, "  " if title else ""))


# -- progress ------------------------------------------------------------------------------


class ProgressBars:
    """A ``progress(label, done, total)`` callback drawing bars on stderr.

    Draws only when the stream is a terminal (or ``enabled`` says so); otherwise it
    prints nothing at all. A new label starts a new bar; an unknown total shows a count.
    """

    def __init__(self, stream: TextIO | None = None, enabled: bool | None = None) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = self.stream.isatty() if enabled is None else enabled
        self._bar: Any = None
        self._label: str | None = None
        self._total: int | None = None
        self._done = 0
        self._counting = False

    def __call__(self, label: str, done: int, total: int | None) -> None:
        if not self.enabled:
            return
        if label != self._label or total != self._total:
            self.finish()
            self._label, self._total, self._done = label, total, 0
            if total is not None:
                self._bar = click.progressbar(length=max(total, 1), label=label, file=self.stream)
                self._bar.__enter__()
        if self._bar is not None:
            step = done - self._done
            if step > 0:
                self._bar.update(step)
        else:
            self.stream.write(f"\r{label}: {done}")
            self.stream.flush()
            self._counting = True
        self._done = max(done, self._done)

    def finish(self) -> None:
        """End the current bar or counter line."""
        if self._bar is not None:
            self._bar.render_finish()
            self._bar = None
        if self._counting:
            self.stream.write("\n")
            self.stream.flush()
            self._counting = False
        self._label = None

    def __enter__(self) -> ProgressBars:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.finish()
