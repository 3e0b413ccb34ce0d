"""``export`` and ``import``: threads as cas-journal JSONL (see
cas_journal.maintenance.transfer), or coding-agent transcripts with ``--format``
claude-code, codex or pi (see cas_journal.transcripts)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import click

from .app import Env, json_option, pass_env

NATIVE = "cas-journal"
FORMATS = (NATIVE, "claude-code", "codex", "pi")

format_option = click.option(
    "--format",
    "format_name",
    type=click.Choice(FORMATS),
    default=NATIVE,
    show_default=True,
    help="cas-journal export JSONL, or a coding agent's session files.",
)


@click.command("export")
@click.argument("threads", nargs=-1)
@format_option
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False, allow_dash=True),
    default="-",
    help="cas-journal format: write to this file (default: stdout), whole or not at all.",
)
@click.option(
    "--out",
    "out_dir",
    type=click.Path(file_okay=False),
    help="Transcript formats: the directory to write one file per session into.",
)
@json_option
@pass_env
def export_command(
    env: Env,
    threads: tuple[str, ...],
    format_name: str,
    output: str,
    out_dir: str | None,
    as_json: bool,
) -> None:
    """Write THREAD as cas-journal JSONL, or with --format sessions as transcript files.

    A transcript export writes every THREAD given (default: every thread imported from
    that format) back to the file it was imported from, under --out.
    """
    if format_name != NATIVE:
        if out_dir is None:
            raise click.UsageError(f"--format {format_name} needs --out DIR")
        from ..transcripts import export_transcripts

        report = export_transcripts(env.journal(read_only=True), format_name, out_dir, threads)
        if as_json:
            from .output import echo_json, model_json

            echo_json(model_json(report))
            return
        for name in report.files:
            click.echo(f"wrote {os.path.join(out_dir, name)}")
        click.echo(f"{len(report.files)} files, {report.records} records, {report.bytes} bytes")
        return
    if len(threads) != 1 or out_dir is not None:
        raise click.UsageError("the cas-journal format exports exactly one THREAD (with -o)")
    _export_native(env, threads[0], output)


def _export_native(env: Env, thread: str, output: str) -> None:
    from ..maintenance.transfer import export_thread
    from .output import binary_stdout

    lines = export_thread(env.journal(read_only=True), thread)
    if output == "-":
        stream = binary_stdout()
        for line in lines:
            stream.write(line.encode("ascii"))
        stream.flush()
        return
    target = Path(output)
    temp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    try:
        with open(temp, "wb") as file:
            for line in lines:
                file.write(line.encode("ascii"))
        os.replace(temp, target)
    finally:
        temp.unlink(missing_ok=True)


@click.command("import")
@click.argument("paths", nargs=-1, required=True, type=click.Path(exists=True, allow_dash=True))
@format_option
@json_option
@pass_env
def import_command(env: Env, paths: tuple[str, ...], format_name: str, as_json: bool) -> None:
    """Import threads from export files ('-' for stdin), or with --format session files
    and directories of them (a whole project); all or nothing, idempotent."""
    from .output import ProgressBars, echo_json, model_json

    journal = env.journal()
    if format_name != NATIVE:
        from ..transcripts import import_transcripts

        if "-" in paths:
            raise click.UsageError(f"--format {format_name} reads files and directories, not stdin")
        with ProgressBars() as progress:
            report = import_transcripts(journal, paths, format_name, progress=progress)
        if as_json:
            echo_json(model_json(report))
            return
        for thread_id in report.threads_created:
            click.echo(f"imported thread {thread_id}")
        for thread_id in report.threads_updated:
            click.echo(f"updated thread {thread_id} (records added since the last import)")
        for thread_id in report.threads_unchanged:
            click.echo(f"unchanged thread {thread_id} (already holds every record)")
        saved = report.saved_bytes / report.source_bytes if report.source_bytes else 0.0
        click.echo(
            f"{report.files} files, {report.records} records ({report.records_shared} shared); "
            f"{report.source_bytes} source bytes stored in {report.stored_bytes} "
            f"({saved:.0%} saved)"
        )
        return
    from ..maintenance.transfer import import_jsonl

    if len(paths) != 1:
        raise click.UsageError("the cas-journal format imports one FILE ('-' for stdin)")
    with ProgressBars() as progress:
        if paths[0] == "-":
            native = import_jsonl(journal, sys.stdin.buffer, progress=progress)
        else:
            with open(paths[0], "rb") as file:
                native = import_jsonl(journal, file, progress=progress)
    if as_json:
        echo_json(model_json(native))
        return
    for thread_id in native.threads_created:
        click.echo(f"imported thread {thread_id}")
    for thread_id in native.threads_unchanged:
        click.echo(f"unchanged thread {thread_id} (already holds every entry)")
    click.echo(f"{native.entries} entries read, {native.objects_written} new objects written")


COMMANDS = [export_command, import_command]
"""The commands this module adds to the root group."""
