"""The root command group: where the store is, opening it, and the one place errors end.

Every library error (``JournalError``) and operating-system error (``OSError``) that a
command lets through becomes one line on stderr and exit status 1; usage errors (bad
options, malformed ids) become one line and exit status 2. No traceback for bad input.
"""

from __future__ import annotations

import os
import shlex
import sys
from typing import Any

import click

from .. import __version__
from ..backends.local import LocalStore
from ..backends.local.store import is_store
from ..errors import JournalError
from ..journal import Journal

DEFAULT_STORE = ".cas-journal"
"""The store used when neither ``--store`` nor ``$CAS_JOURNAL_STORE`` names one."""
STORE_ENV = "CAS_JOURNAL_STORE"
"""The environment variable naming the store."""
PROG_NAME = "cas-journal"


def one_line(text: str) -> str:
    """Text flattened to a single line (messages may embed newlines)."""
    return " ".join(part.strip() for part in text.strip().splitlines() if part.strip())


class OneLineUsageError(click.UsageError):
    """A usage error shown as one line with a pointer to ``--help``."""

    def show(self, file: Any = None) -> None:
        """Print ``Error: <message> (see '<command> --help')`` on stderr."""
        hint = f" (see '{self.ctx.command_path} --help')" if self.ctx is not None else ""
        click.echo(f"Error: {one_line(self.format_message())}{hint}", err=True, file=file)


def _usage(exc: click.UsageError) -> click.UsageError:
    if isinstance(exc, (click.exceptions.NoArgsIsHelpError, OneLineUsageError)):
        return exc
    return OneLineUsageError(exc.format_message(), ctx=exc.ctx)


def _silence_stdout() -> None:
    """After a broken pipe: point stdout at /dev/null so the exit flush cannot fail."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass  # not a real file (a test runner's buffer): nothing to flush
    finally:
        os.close(devnull)


class RootGroup(click.Group):
    """The ``cas-journal`` group: converts every expected error into one line."""

    def make_context(
        self,
        info_name: str | None,
        args: list[str],
        parent: click.Context | None = None,
        **extra: Any,
    ) -> click.Context:
        """Parse the group's own options; usage errors become one line."""
        try:
            return super().make_context(info_name, args, parent, **extra)
        except click.UsageError as exc:
            raise _usage(exc) from exc

    def invoke(self, ctx: click.Context) -> Any:
        """Run the subcommand; library and OS errors exit 1 with one line on stderr."""
        try:
            return super().invoke(ctx)
        except click.UsageError as exc:
            raise _usage(exc) from exc
        except BrokenPipeError:
            _silence_stdout()
            raise click.exceptions.Exit(1) from None
        except (JournalError, OSError) as exc:
            raise click.ClickException(one_line(str(exc)) or type(exc).__name__) from exc


class Env:
    """What every command gets: the store location and a journal opened on first use."""

    def __init__(self, location: str) -> None:
        self.location = location
        self._journal: Journal | None = None

    @property
    def is_remote(self) -> bool:
        """True for locations with a scheme (``s3://``, ``memory://``)."""
        return "://" in self.location

    def exists(self) -> bool:
        """True if a local store exists at the location (remote ones are assumed to)."""
        return self.is_remote or is_store(self.location)

    def journal(self, create: bool = False) -> Journal:
        """The journal on the store; a missing local store is an error unless ``create``."""
        if self._journal is None:
            if self.is_remote:
                journal = Journal.open(self.location)
            else:
                if not create and not is_store(self.location):
                    raise click.ClickException(
                        f"no cas-journal store at {self.location}; create one with "
                        f"'{self.init_command()}'"
                    )
                journal = Journal(LocalStore(self.location, create=create))
            self._journal = journal
            click.get_current_context().call_on_close(self.close)
        return self._journal

    def init_command(self) -> str:
        """The command line that creates this store."""
        if self.location == DEFAULT_STORE:
            return f"{PROG_NAME} init"
        return f"{PROG_NAME} --store {shlex.quote(self.location)} init"

    def close(self) -> None:
        """Close the journal if it was opened."""
        if self._journal is not None:
            journal, self._journal = self._journal, None
            journal.close()


pass_env = click.make_pass_decorator(Env)
"""Decorator passing the command's Env as the first argument."""

json_option = click.option(
    "--json", "as_json", is_flag=True, help="Print JSON (schema in docs/cli.md)."
)
"""The ``--json`` flag of listing and reporting commands."""


@click.group(cls=RootGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--store",
    "location",
    envvar=STORE_ENV,
    default=DEFAULT_STORE,
    show_default=True,
    metavar="PATH",
    help=f"Store directory or s3://bucket/prefix (else ${STORE_ENV}).",
)
@click.version_option(version=__version__, prog_name=PROG_NAME)
@click.pass_context
def cli(ctx: click.Context, location: str) -> None:
    """Content-addressed, deduplicated agent journals and run checkpoints."""
    ctx.obj = Env(location)


@cli.command()
@pass_env
def init(env: Env) -> None:
    """Create the store (a no-op if it exists)."""
    if env.is_remote:
        env.journal(create=True)
        click.echo(f"store ready at {env.location}")
        return
    existed = env.exists()
    env.journal(create=True)
    verb = "store already exists at" if existed else "created store at"
    click.echo(f"{verb} {env.location}")
