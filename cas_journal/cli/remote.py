"""Moving history between stores: sync, push, pull, clone (thin wrappers over ``sync``)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import click

from ..errors import JournalError
from .app import Env, json_option, open_journal, pass_env
from .output import ProgressBars, echo_json, human_size, model_json

if TYPE_CHECKING:
    from ..journal import Journal
    from ..maintenance.sync import SyncReport

_refs_option = click.option(
    "--ref",
    "refs",
    multiple=True,
    metavar="NAME",
    help="Only this ref (threads/ID or checkpoints/RUN); repeatable. Default: all.",
)
_merge_option = click.option(
    "--no-merge",
    is_flag=True,
    help="Leave diverged refs alone and report them (exit status 1).",
)
_unrelated_option = click.option(
    "--allow-unrelated",
    is_flag=True,
    help="Merge threads or runs that share an id but no history (refused by default).",
)
_repair_option = click.option(
    "--repair",
    is_flag=True,
    help="Read back what the destination holds and replace damaged copies from the source.",
)


def open_location(location: str, create: bool = False, read_only: bool = False) -> Journal:
    """A journal on a store path or URL; a missing store is an error unless ``create``.
    ``read_only`` for a store the command only reads (a source): a local one is then
    left exactly as it is, its format included (see ``app.open_location``)."""
    return open_journal(location, create=create, read_only=read_only)


def summary(report: SyncReport) -> str:
    """The one-line outcome of a sync."""
    parts = [
        f"{report.objects_copied} object{'' if report.objects_copied == 1 else 's'} "
        f"({human_size(report.bytes_copied)}) copied",
        f"refs: {report.refs_created} created, {report.refs_fast_forwarded} fast-forwarded, "
        f"{report.refs_merged} merged, {report.refs_up_to_date} up to date, "
        f"{report.refs_ahead} ahead",
    ]
    if report.diverged:
        parts.append(f"diverged (not merged): {', '.join(report.diverged)}")
    if report.unrelated:
        parts.append(f"unrelated (not merged): {', '.join(report.unrelated)}")
    if report.objects_repaired:
        parts.append(f"{report.objects_repaired} damaged copies repaired")
    return "; ".join(parts)


@dataclass(frozen=True)
class _Options:
    refs: tuple[str, ...] = ()
    no_merge: bool = False
    allow_unrelated: bool = False
    repair: bool = False
    as_json: bool = False


def _sync_options(command: Callable[..., None]) -> Callable[..., None]:
    """Give ``command`` the options of every sync command (--ref, --no-merge,
    --allow-unrelated, --repair, --json), handed to it as one ``options`` argument."""

    @functools.wraps(command)
    def run(
        *args: Any,
        refs: tuple[str, ...],
        no_merge: bool,
        allow_unrelated: bool,
        repair: bool,
        as_json: bool,
        **kwargs: Any,
    ) -> None:
        options = _Options(refs, no_merge, allow_unrelated, repair, as_json)
        command(*args, options=options, **kwargs)

    decorated: Callable[..., None] = run
    for option in (json_option, _repair_option, _unrelated_option, _merge_option, _refs_option):
        decorated = option(decorated)
    return decorated


def _run(ctx: click.Context, src: Journal, dst: Journal, options: _Options) -> None:
    from ..maintenance.sync import sync

    try:
        with ProgressBars() as progress:
            report = sync(
                src.store,
                dst.store,
                list(options.refs) or None,
                merge=not options.no_merge,
                allow_unrelated=options.allow_unrelated,
                repair=options.repair,
                progress=progress,
            )
    finally:
        src.close()
        dst.close()
    if options.as_json:
        echo_json(model_json(report))
    else:
        click.echo(summary(report))
    if report.diverged or report.unrelated:
        ctx.exit(1)


@click.command("sync")
@click.argument("source")
@click.argument("destination")
@_sync_options
@click.pass_context
def sync_command(ctx: click.Context, source: str, destination: str, options: _Options) -> None:
    """Copy what DESTINATION lacks from SOURCE and update its refs (paths or s3:// URLs)."""
    _run(ctx, open_location(source, read_only=True), open_location(destination), options)


@click.command()
@click.argument("remote")
@_sync_options
@pass_env
@click.pass_context
def push(ctx: click.Context, env: Env, remote: str, options: _Options) -> None:
    """Sync this store into REMOTE."""
    _run(ctx, env.journal(read_only=True), open_location(remote), options)


@click.command()
@click.argument("remote")
@_sync_options
@pass_env
@click.pass_context
def pull(ctx: click.Context, env: Env, remote: str, options: _Options) -> None:
    """Sync REMOTE into this store."""
    _run(ctx, open_location(remote, read_only=True), env.journal(), options)


@click.command()
@click.argument("source")
@click.argument("destination")
@json_option
@click.pass_context
def clone(ctx: click.Context, source: str, destination: str, as_json: bool) -> None:
    """Create DESTINATION (a new store) holding everything in SOURCE."""
    src = open_location(source, read_only=True)
    try:
        existing = open_location(destination, read_only=True)
    except JournalError:
        existing = None  # no store there yet: the usual case
    if existing is not None:
        existing.close()
        src.close()
        raise click.ClickException(f"{destination} already holds a store; use sync instead")
    _run(ctx, src, open_location(destination, create=True), _Options(as_json=as_json))


COMMANDS = [sync_command, push, pull, clone]
"""The commands this module adds to the root group."""
