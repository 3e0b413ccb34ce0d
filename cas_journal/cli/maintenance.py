"""Store maintenance: pack, gc, fsck, stats (thin wrappers over cas_journal.maintenance)."""

from __future__ import annotations

import click

from .app import Env, json_option, pass_env
from .output import ProgressBars, echo_json, model_json, show_report


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
@json_option
@pass_env
def gc(env: Env, dry_run: bool, prune_now: bool, as_json: bool) -> None:
    """Delete objects no thread, run or live reflog entry reaches."""
    from ..maintenance import gc as run_gc

    with ProgressBars() as progress:
        report = run_gc(
            env.journal().store, dry_run=dry_run, prune_now=prune_now, progress=progress
        )
    show_report(report, as_json)


@click.command()
@click.option("--quick", is_flag=True, help="Check refs and reachability, not every hash.")
@json_option
@pass_env
@click.pass_context
def fsck(ctx: click.Context, env: Env, quick: bool, as_json: bool) -> None:
    """Check the store; exit status 1 if anything is wrong."""
    from ..maintenance import fsck as run_fsck

    with ProgressBars() as progress:
        report = run_fsck(env.journal().store, quick=quick, progress=progress)
    if as_json:
        echo_json(model_json(report))
    else:
        show_report(report, as_json=False)
        click.echo("fsck: ok" if report.ok else f"fsck: {len(report.problems)} problem(s)")
    if not report.ok:
        ctx.exit(1)


@click.command()
@json_option
@pass_env
def stats(env: Env, as_json: bool) -> None:
    """Objects, bytes stored vs logical bytes, dedup and compression ratios."""
    from ..maintenance import stats as run_stats

    show_report(run_stats(env.journal().store), as_json)


COMMANDS = [pack, gc, fsck, stats]
"""The commands this module adds to the root group."""
