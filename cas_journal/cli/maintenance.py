"""Store maintenance: pack, gc, fsck, stats (thin wrappers over cas_journal.maintenance)."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import click

from .app import Env, json_option, pass_env
from .output import ProgressBars, echo_json, echo_lines, human_size, model_json, show_report

if TYPE_CHECKING:
    from ..maintenance import StatsReport

_DURATION = re.compile(r"^(\d{1,6})([smhdw])$")
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days", "w": "weeks"}


def parse_expiry(text: str) -> timedelta | None:
    """``now`` (0), ``never`` (None) or a duration such as ``12h``, ``30d``, ``2w``."""
    value = text.strip().lower()
    if value == "now":
        return timedelta(0)
    if value == "never":
        return None
    match = _DURATION.match(value)
    if match is None:
        raise click.BadParameter(f"{text!r}: use now, never or a duration such as 12h, 30d, 2w")
    return timedelta(**{_UNITS[match.group(2)]: int(match.group(1))})


@click.command()
@json_option
@pass_env
def pack(env: Env, as_json: bool) -> None:
    """Pack loose objects (and small packs) into one pack."""
    from ..maintenance import pack as run_pack

    with ProgressBars() as progress:
        report = run_pack(env.journal().store, progress=progress)
    show_report(report, as_json)


@click.command()
@click.option("--dry-run", is_flag=True, help="Report what would be deleted; delete nothing.")
@click.option("--prune-now", is_flag=True, help="No grace period: delete unreachable objects now.")
@click.option(
    "--expire-reflog",
    "expire",
    metavar="WHEN",
    help="Forget reflog entries older than WHEN (default 30d; 'now' forgets every one, "
    "purging deleted threads and runs for good, and implies --prune-now).",
)
@click.option("--yes", "-y", is_flag=True, help="Do not ask before --expire-reflog=now.")
@json_option
@pass_env
def gc(
    env: Env, dry_run: bool, prune_now: bool, expire: str | None, yes: bool, as_json: bool
) -> None:
    """Delete objects no thread, run or live reflog entry reaches."""
    from ..maintenance import gc as run_gc
    from .threads import confirm

    options: dict[str, Any] = {}
    if expire is not None:
        expiry = parse_expiry(expire)
        options["reflog_expiry"] = expiry if expiry is not None else timedelta(days=365_000)
        if expiry == timedelta(0):
            prune_now = True
            if not dry_run:
                confirm(
                    "Forget every reflog entry and delete, now, every object no live thread or "
                    "run reaches (deleted threads and runs can no longer be restored)?",
                    yes,
                )
    with ProgressBars() as progress:
        report = run_gc(
            env.journal().store, dry_run=dry_run, prune_now=prune_now, progress=progress, **options
        )
    show_report(report, as_json)


@click.command()
@click.option("--quick", is_flag=True, help="Check refs and reachability, not every hash.")
@click.option(
    "--repair-from",
    "replica",
    metavar="REPLICA",
    help="First restore damaged or missing objects from another store (a path or s3://...).",
)
@json_option
@pass_env
@click.pass_context
def fsck(ctx: click.Context, env: Env, quick: bool, replica: str | None, as_json: bool) -> None:
    """Check the store; exit status 1 if anything is wrong."""
    from ..maintenance import fsck as run_fsck
    from .remote import open_location

    source = open_location(replica, read_only=True) if replica else None
    try:
        with ProgressBars() as progress:
            report = run_fsck(
                env.journal(read_only=source is None).store,
                quick=quick,
                progress=progress,
                repair_from=source.store if source else None,
            )
    finally:
        if source is not None:
            source.close()
    if as_json:
        echo_json(model_json(report))
    else:
        show_report(report, as_json=False)
        click.echo("fsck: ok" if report.ok else f"fsck: {len(report.problems)} problem(s)")
    if not report.ok:
        ctx.exit(1)


def _count(count: int, word: str, words: str) -> str:
    return f"{count:,} {word if count == 1 else words}"


def stats_lines(report: StatsReport) -> list[str]:
    """The stats report for people: one measure a line, with what it means."""
    kinds = ", ".join(f"{kind} {count:,}" for kind, count in report.objects_by_kind.items())
    rows = [
        (
            "threads",
            f"{report.threads:,} live, reaching "
            f"{_count(report.entries, 'distinct entry', 'distinct entries')} "
            f"({_count(report.logical_entries, 'entry', 'entries')} counted per thread)",
        ),
        (
            "runs",
            f"{report.runs:,} live, reaching "
            f"{_count(report.checkpoints, 'saved checkpoint', 'saved checkpoints')}",
        ),
        (
            "logical",
            f"{human_size(report.logical_bytes)}  what plain copies would hold (every "
            "thread in full, every checkpoint's whole message list)",
        ),
        (
            "content",
            f"{human_size(report.content_bytes)}  the distinct payloads and messages in it "
            f"(dedup {report.dedup_ratio:.2f}x)",
        ),
        (
            "objects",
            f"{human_size(report.object_bytes)}  every stored object uncompressed "
            f"({_count(report.objects, 'object', 'objects')}{': ' + kinds if kinds else ''})",
        ),
        (
            "stored",
            f"{human_size(report.stored_bytes)}  the objects as stored "
            f"(compression {report.compression_ratio:.2f}x; "
            f"{_count(report.loose_objects, 'loose object', 'loose objects')}, "
            f"{_count(report.packs, 'pack', 'packs')})",
        ),
        (
            "disk",
            f"{human_size(report.disk_bytes)}  everything the store takes, files and "
            "database included",
        ),
        ("overall", f"{report.overall_ratio:.2f}x  logical / disk"),
    ]
    width = max(len(name) for name, _ in rows) + 1
    return [f"{(name + ':').ljust(width)} {text}" for name, text in rows]


def summary_line(report: StatsReport) -> str:
    """One plain line: logical bytes and entries against what is stored, and the ratio."""
    return (
        f"logical {human_size(report.logical_bytes)} "
        f"({_count(report.logical_entries, 'entry', 'entries')}, "
        f"{_count(report.logical_checkpoints, 'checkpoint', 'checkpoints')}); "
        f"stored {human_size(report.disk_bytes)} on disk "
        f"({_count(report.entries, 'distinct entry', 'distinct entries')}, "
        f"{_count(report.checkpoints, 'checkpoint', 'checkpoints')}); "
        f"{report.overall_ratio:.2f}x smaller"
    )


@click.command()
@json_option
@pass_env
def stats(env: Env, as_json: bool) -> None:
    """What the store holds: logical bytes (as plain copies) against stored and disk bytes."""
    from ..maintenance import stats as run_stats

    report = run_stats(env.journal(read_only=True).store)
    if as_json:
        echo_json(model_json(report))
        return
    echo_lines(stats_lines(report))


COMMANDS = [pack, gc, fsck, stats]
"""The commands this module defines."""
