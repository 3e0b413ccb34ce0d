"""``export`` and ``import``: a thread as JSONL, and back (see cas_journal.maintenance.transfer)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import BinaryIO

import click

from ..maintenance.transfer import export_thread, import_jsonl
from .app import Env, json_option, pass_env
from .output import ProgressBars, binary_stdout, echo_json, model_json


@click.command("export")
@click.argument("thread")
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False, allow_dash=True),
    default="-",
    help="Write to this file (default: stdout); written whole or not at all.",
)
@pass_env
def export_command(env: Env, thread: str, output: str) -> None:
    """Write THREAD as JSONL: every entry (branches included) and its metadata."""
    lines = export_thread(env.journal(), thread)
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
@click.argument("file", type=click.File("rb"))
@json_option
@pass_env
def import_command(env: Env, file: BinaryIO, as_json: bool) -> None:
    """Import threads from an export file ('-' for stdin); same ids, idempotent."""
    journal = env.journal()
    with ProgressBars() as progress:
        report = import_jsonl(journal, file, progress=progress)
    if as_json:
        echo_json(model_json(report))
        return
    for thread_id in report.threads_created:
        click.echo(f"imported thread {thread_id}")
    for thread_id in report.threads_unchanged:
        click.echo(f"unchanged thread {thread_id} (already holds every entry)")
    click.echo(f"{report.entries} entries read, {report.objects_written} new objects written")


COMMANDS = [export_command, import_command]
"""The commands this module adds to the root group."""
