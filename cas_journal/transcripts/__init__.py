"""Import and export coding-agent transcripts: Claude Code, Codex CLI and pi sessions.

``import_transcripts(journal, paths, "claude-code" | "codex" | "pi")`` reads session
files (or every session under directories) into threads, one per session: branches in
a file become branches of the thread, sessions forked or resumed from others share
their entries, compactions become compaction entries, and every record is kept whole
so that ``export_transcripts(journal, format, out_dir)`` writes the same files back.
The mapping of each format is described in its module and in docs/transcripts.md.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from ..errors import InvalidInputError
from ..journal import Journal
from .claude_code import FORMAT as CLAUDE_CODE
from .codex import FORMAT as CODEX
from .exporter import SessionFile, TranscriptExportReport, export_transcripts, session_file
from .importer import Progress, TranscriptImportReport
from .importer import import_transcripts as _import
from .pi import FORMAT as PI
from .plan import TranscriptFormat
from .source import TranscriptError

FORMATS: dict[str, TranscriptFormat] = {fmt.name: fmt for fmt in (CLAUDE_CODE, CODEX, PI)}
"""The formats by their ``--format`` name."""


def transcript_format(name: str) -> TranscriptFormat:
    """The format called ``name``; InvalidInputError naming the known ones otherwise."""
    try:
        return FORMATS[name]
    except KeyError:
        known = ", ".join(sorted(FORMATS))
        raise InvalidInputError(f"unknown transcript format {name!r} (known: {known})") from None


def import_transcripts(
    journal: Journal,
    paths: Sequence[str | Path],
    format_name: str,
    progress: Progress | None = None,
) -> TranscriptImportReport:
    """Import session files, or every session file under directories, of one format.

    All-or-nothing: a bad file raises TranscriptError (naming the file and line) before
    anything is written. Importing the same sessions again changes nothing.
    """
    return _import(journal, paths, transcript_format(format_name), progress)


__all__ = [
    "FORMATS",
    "SessionFile",
    "TranscriptError",
    "TranscriptExportReport",
    "TranscriptImportReport",
    "export_transcripts",
    "import_transcripts",
    "session_file",
    "transcript_format",
]
