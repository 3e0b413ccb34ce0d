"""Reading a transcript file: bytes to records, with the file's layout kept for export.

A transcript is JSON Lines: one JSON object per line. ``read_source`` reads a file
line by line within size limits and returns every record with its line number, plus
what is needed to write the same bytes back: a UTF-8 byte order mark at the start, the
end-of-line style, whether the last line ends with one, and where blank lines sit.

A record whose compact re-encoding (``json.dumps`` with ``ensure_ascii=False`` and no
spaces, the way JavaScript's ``JSON.stringify`` writes) equals its line is *exact*:
export can rebuild the line from the record with some values replaced. Any other line
(extra spaces, escapes, duplicate keys, numbers written unusually) is only ever written
back verbatim.

Every problem raises ``TranscriptError`` naming the file and the line: not UTF-8, not
JSON, not an object, a line or file over the limit, a truncated last line.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

from ..errors import InvalidInputError

BOM = b"\xef\xbb\xbf"
"""The UTF-8 byte order mark some editors put at the start of a file."""
MAX_LINE_BYTES = 16 * 1024 * 1024
"""The longest line read (the record is stored twice over in an entry: as the record
and as its message, within the store's 64 MiB object limit)."""
MAX_FILE_BYTES = 4 * 1024 * 1024 * 1024
"""The largest transcript file read."""
MAX_RECORDS = 5_000_000
"""The most records one file may hold."""


class TranscriptError(InvalidInputError):
    """A transcript file cannot be imported; the message names the file and the line."""

    def __init__(self, path: str, line: int | None, message: str) -> None:
        self.path = path
        self.line = line
        self.detail = message
        where = f"{path}:{line}" if line else path
        super().__init__(f"{where}: {message}")


def compact_json(value: Any) -> str:
    """JSON the way ``JSON.stringify`` writes it: no spaces, keys in their given order."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


@dataclass
class SourceLine:
    """One record of a transcript file."""

    number: int
    """1-based line number in the file."""
    record: dict[str, Any]
    """The parsed JSON object (key order as in the file)."""
    text: str
    """The line as written, without its end of line."""
    _exact: bool | None = field(default=None, repr=False)

    @property
    def exact(self) -> bool:
        """True if ``compact_json(record) == text``: export can rebuild the line from the
        record (needed only where a stored value is replaced; computed on first use)."""
        if self._exact is None:
            try:
                self._exact = compact_json(self.record) == self.text
            except (ValueError, RecursionError):
                self._exact = False
        return self._exact


@dataclass
class SourceFile:
    """A transcript file read and checked: its records and its byte layout."""

    path: Path
    relative: str
    """Where the file sits under the directory it was found in (POSIX separators);
    export writes it back to the same place under its output directory."""
    size: int
    lines: list[SourceLine] = field(default_factory=list)
    bom: bool = False
    eol: str = "\n"
    final_newline: bool = True
    blank: list[tuple[int, str]] = field(default_factory=list)
    """Blank (whitespace-only) lines: (1-based line number, text)."""

    def error(self, line: int | None, message: str) -> TranscriptError:
        """A TranscriptError naming this file (as the user gave it) and a line."""
        return TranscriptError(str(self.path), line, message)


def _read_lines(stream: BinaryIO, source: SourceFile) -> list[bytes]:
    raw: list[bytes] = []
    total = 0
    while True:
        chunk = stream.readline(MAX_LINE_BYTES + 3)
        if not chunk:
            return raw
        total += len(chunk)
        if total > MAX_FILE_BYTES:
            raise source.error(None, f"file is larger than {MAX_FILE_BYTES} bytes")
        if len(chunk) > MAX_LINE_BYTES + 2 and not chunk.endswith(b"\n"):
            raise source.error(len(raw) + 1, f"line is longer than {MAX_LINE_BYTES} bytes")
        raw.append(chunk)


def parse_source(data: BinaryIO, path: Path, relative: str, size: int) -> SourceFile:
    """Parse JSON Lines from a binary stream; TranscriptError on the first bad line."""
    source = SourceFile(path=path, relative=relative, size=size)
    raw = _read_lines(data, source)
    if raw and raw[0].startswith(BOM):
        source.bom = True
        raw[0] = raw[0][len(BOM) :]
    if raw and not raw[-1].endswith(b"\n"):
        source.final_newline = False
    terminated = [line for line in raw if line.endswith(b"\n")]
    if terminated and all(line.endswith(b"\r\n") for line in terminated):
        source.eol = "\r\n"
    records = 0
    for number, chunk in enumerate(raw, start=1):
        body = chunk
        if body.endswith(source.eol.encode()):
            body = body[: -len(source.eol)]
        elif body.endswith(b"\n"):  # mixed endings: keep the odd "\r" in the text
            body = body[:-1]
        try:
            text = body.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise source.error(number, f"not valid UTF-8 (byte {exc.start})") from None
        if not text.strip():
            source.blank.append((number, text))
            continue
        records += 1
        if records > MAX_RECORDS:
            raise source.error(number, f"more than {MAX_RECORDS} records")
        truncated = number == len(raw) and not source.final_newline
        try:
            record = json.loads(text)
        except RecursionError:
            raise source.error(number, "JSON nested too deeply") from None
        except ValueError as exc:
            hint = " (truncated file?)" if truncated else ""
            reason = str(exc).split(":")[0]
            raise source.error(number, f"not valid JSON: {reason}{hint}") from None
        if not isinstance(record, dict):
            raise source.error(number, f"not a JSON object (a {type(record).__name__})")
        source.lines.append(SourceLine(number, record, text))
    return source


def read_source(path: Path, relative: str) -> SourceFile:
    """Read and parse a transcript file (see ``parse_source``)."""
    try:
        with open(path, "rb") as stream:
            size = stream.seek(0, 2)
            stream.seek(0)
            if size > MAX_FILE_BYTES:
                raise TranscriptError(
                    str(path), None, f"file is larger than {MAX_FILE_BYTES} bytes"
                )
            return parse_source(stream, path, relative, size)
    except IsADirectoryError:
        raise TranscriptError(str(path), None, "is a directory") from None
    except OSError as exc:
        raise TranscriptError(str(path), None, exc.strerror or str(exc)) from None
