"""The root command group: where the store is, opening it, lazy commands, and the one place
errors end.

Commands live in modules that are imported only when that command runs (``--help`` and
``threads`` must start fast: nothing heavy is imported here). ``COMMANDS`` names every
command, the module defining it and its one-line summary, shown by ``--help`` without
importing anything.

Every error a command lets through ends here: a library error (``JournalError``), an
operating-system error, running out of memory or of recursion depth, and any other
exception become one line on stderr and exit status 1 (set ``CAS_JOURNAL_DEBUG=1`` to see
the traceback of an unexpected one); usage errors (bad options, malformed ids) become one
line and exit status 2. Never a traceback for bad input.

Start-up: ``main`` pauses Python's cyclic garbage collector while the command line
imports what the command needs and opens the store (imports allocate many objects and
leave no garbage cycles worth collecting; the collector's passes over them were about a
tenth of the start-up time). It runs again as soon as a store is open (``open_location``)
or the command ends. When the command ends, ``main`` freezes every object it made
(``gc.freeze``), so the interpreter's final collections on exit skip them: the process
is about to end, and its memory goes with it. Exit handlers and closing still run.
"""

from __future__ import annotations

import gc
import importlib
import os
import sys
from typing import TYPE_CHECKING, Any, NamedTuple, NoReturn

import click

from .. import __version__
from ..errors import InvalidInputError, JournalError

if TYPE_CHECKING:
    from ..backends import Store
    from ..journal import Journal

DEFAULT_STORE = ".cas-journal"
"""The store used when neither ``--store`` nor ``$CAS_JOURNAL_STORE`` names one."""
STORE_ENV = "CAS_JOURNAL_STORE"
"""The environment variable naming the store."""
DEBUG_ENV = "CAS_JOURNAL_DEBUG"
"""Set (to anything but empty or 0) to get the traceback of an unexpected error."""
PROG_NAME = "cas-journal"


class LazyCommand(NamedTuple):
    """Where a command is defined and what ``--help`` says of it (a named tuple: no
    dataclass to build when the command line starts)."""

    module: str
    attribute: str
    summary: str
    section: str


_THREADS = "Threads"
_CHECKPOINTS = "Checkpoints"
_STORE = "Store"
_MOVING = "Moving data"

COMMANDS: dict[str, LazyCommand] = {
    "threads": LazyCommand("threads", "threads_command", "List threads, newest first.", _THREADS),
    "append": LazyCommand(
        "threads", "append", "Add a message to a thread (created if missing).", _THREADS
    ),
    "show": LazyCommand(
        "reading", "show", "A thread's summary, or one entry as a transcript.", _THREADS
    ),
    "log": LazyCommand("reading", "log", "The path of a thread, root first.", _THREADS),
    "diff": LazyCommand(
        "reading", "diff", "Where two threads part: common ancestor, then each side.", _THREADS
    ),
    "tree": LazyCommand(
        "tree", "tree", "A thread's branches and the threads forked from it.", _THREADS
    ),
    "fork": LazyCommand(
        "threads", "fork", "Start a new thread sharing history (nothing copied).", _THREADS
    ),
    "rm": LazyCommand("threads", "rm", "Delete a thread (restorable, or --purge).", _THREADS),
    "restore": LazyCommand("threads", "restore", "Bring back a deleted thread.", _THREADS),
    "reflog": LazyCommand(
        "threads", "reflog", "Every update of a thread's ref, newest first.", _THREADS
    ),
    "checkpoints": LazyCommand(
        "checkpoints",
        "checkpoints",
        "Run checkpoints: list, show, history, rm, restore.",
        _CHECKPOINTS,
    ),
    "init": LazyCommand("app", "init", "Create the store (a no-op if it exists).", _STORE),
    "cat": LazyCommand("objects", "cat", "Show one stored object.", _STORE),
    "stats": LazyCommand(
        "maintenance", "stats", "What the store holds: logical vs stored bytes.", _STORE
    ),
    "pack": LazyCommand("maintenance", "pack", "Pack loose objects into one pack.", _STORE),
    "gc": LazyCommand("maintenance", "gc", "Delete objects nothing reaches any more.", _STORE),
    "fsck": LazyCommand("maintenance", "fsck", "Check the store (exit 1 on problems).", _STORE),
    "demo": LazyCommand(
        "demo", "demo", "Write a small forking workload and show what it costs.", _STORE
    ),
    "sync": LazyCommand(
        "remote", "sync_command", "Copy what DESTINATION lacks from SOURCE.", _MOVING
    ),
    "push": LazyCommand("remote", "push", "Sync this store into REMOTE.", _MOVING),
    "pull": LazyCommand("remote", "pull", "Sync REMOTE into this store.", _MOVING),
    "clone": LazyCommand("remote", "clone", "Create a new store holding all of SOURCE.", _MOVING),
    "export": LazyCommand("transfer", "export_command", "Write a thread as JSONL.", _MOVING),
    "import": LazyCommand(
        "transfer", "import_command", "Import threads from an export file.", _MOVING
    ),
}
"""Every command of the root group, in the order ``--help`` lists them."""


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


def _debugging() -> bool:
    return os.environ.get(DEBUG_ENV, "") not in ("", "0")


def error_line(exc: BaseException) -> str:
    """The one line shown for an error that ends a command."""
    if isinstance(exc, JournalError):
        return one_line(str(exc)) or type(exc).__name__
    if isinstance(exc, OSError):
        text = exc.strerror or str(exc) or type(exc).__name__
        if exc.filename is not None:
            text = f"{text}: {os.fsdecode(exc.filename)}"
        return one_line(text)
    if isinstance(exc, MemoryError):
        return "out of memory"
    if isinstance(exc, RecursionError):
        return "input is nested too deeply"
    detail = one_line(str(exc))
    return (
        f"internal error {type(exc).__name__}{': ' + detail if detail else ''} "
        f"(a bug in cas-journal: set {DEBUG_ENV}=1 for the traceback and report it)"
    )


def _fail(exc: BaseException) -> NoReturn:
    raise click.ClickException(error_line(exc)) from exc


class RootGroup(click.Group):
    """The ``cas-journal`` group: lazy commands; every error becomes one line."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        """Every command name, in the order of ``COMMANDS``."""
        return list(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        """Import the module defining ``cmd_name`` and return its command."""
        spec = COMMANDS.get(cmd_name)
        if spec is None:
            return None
        module = importlib.import_module(f"{__package__}.{spec.module}")
        command = getattr(module, spec.attribute)
        assert isinstance(command, click.Command)
        return command

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """The command list of ``--help``, by section, without importing any command."""
        sections: dict[str, list[tuple[str, str]]] = {}
        for name, spec in COMMANDS.items():
            sections.setdefault(spec.section, []).append((name, spec.summary))
        for section, rows in sections.items():
            with formatter.section(section):
                formatter.write_dl(rows)

    def make_context(
        self,
        info_name: str | None,
        args: list[str],
        parent: click.Context | None = None,
        **extra: Any,
    ) -> click.Context:
        """Parse the group's own options; usage errors become one line. An argument with
        a NUL character is refused here: no path, id or name can hold one (a real command
        line cannot even carry it), and the file system calls would raise on it."""
        try:
            if any("\0" in arg for arg in args):
                raise click.UsageError("an argument holds a NUL character, which no argument can")
            return super().make_context(info_name, args, parent, **extra)
        except click.UsageError as exc:
            raise _usage(exc) from exc

    def invoke(self, ctx: click.Context) -> Any:
        """Run the subcommand; every error exits with one line on stderr."""
        try:
            return super().invoke(ctx)
        except click.UsageError as exc:
            raise _usage(exc) from exc
        except (click.exceptions.Exit, click.exceptions.Abort, click.ClickException):
            raise
        except BrokenPipeError:
            _silence_stdout()
            raise click.exceptions.Exit(1) from None
        except (JournalError, OSError, MemoryError, RecursionError) as exc:
            _fail(exc)
        except Exception as exc:
            if _debugging():
                raise
            _fail(exc)


class Env:
    """What every command gets: the store location and a journal opened on first use."""

    def __init__(self, location: str) -> None:
        self.location = location
        self._store: Store | None = None
        self._journal: Journal | None = None

    def store(self, create: bool = False, read_only: bool = False) -> Store:
        """The store (without the journal's models); missing is an error unless ``create``.
        ``read_only``: the command only reads (see ``open_location``)."""
        if self._store is None:
            self._store = open_location(self.location, create=create, read_only=read_only)
            click.get_current_context().call_on_close(self.close)
        return self._store

    def journal(self, create: bool = False, read_only: bool = False) -> Journal:
        """The journal on the store; a missing store is an error unless ``create``.
        ``read_only``: the command only reads (see ``open_location``)."""
        if self._journal is None:
            from ..journal import Journal

            self._journal = Journal(self.store(create, read_only))
        return self._journal

    def close(self) -> None:
        """Close the store if it was opened."""
        self._journal = None
        if self._store is not None:
            store, self._store = self._store, None
            store.close()


def check_location(location: str) -> str:
    """Refuse locations the command line cannot use: empty ones, and ``memory://`` (a
    store that lives in one process only, so a command would act on an empty store that
    vanishes when it exits)."""
    if not location.strip():
        raise InvalidInputError("the store location is empty")
    if location.startswith("memory://"):
        raise InvalidInputError(
            f"{location} is a store inside one Python process; the command line cannot "
            "use it (give a directory or an s3:// URL)"
        )
    return location


_gc_paused = False
"""True while ``main`` holds the garbage collector paused (see the module docstring)."""


def resume_gc() -> None:
    """Run the garbage collector again if ``main`` paused it (start-up is over)."""
    global _gc_paused
    if _gc_paused:
        _gc_paused = False
        gc.enable()


def open_location(location: str, create: bool = False, read_only: bool = False) -> Store:
    """The store at a path or URL (``open_store``); a missing store is an error naming
    the command that creates it, unless ``create``.

    ``read_only`` (for commands that only read) opens a local store read-only: the command
    writes nothing and leaves an older store's format as it is, so older cas-journal
    versions can still read it. A store too old to read without upgrading is opened
    writable once, which upgrades it. S3 stores open as usual (without write access, an
    S3 store is read as it is)."""
    from ..backends import open_store
    from ..errors import StoreFormatError, StoreUpgradeRequired

    check_location(location)
    try:
        if read_only and "://" not in location:
            try:
                return open_store(location, create=False, read_only=True)
            except StoreUpgradeRequired:
                pass
        return open_store(location, create=create)
    except StoreFormatError as exc:
        if create or "no cas-journal store" not in str(exc):
            raise
        import shlex

        init = (
            f"{PROG_NAME} init"
            if location == DEFAULT_STORE
            else f"{PROG_NAME} --store {shlex.quote(location)} init"
        )
        raise StoreFormatError(
            f"no cas-journal store at {location}; create one with '{init}'"
        ) from exc
    finally:
        resume_gc()


def open_journal(location: str, create: bool = False, read_only: bool = False) -> Journal:
    """A journal on the store at a path or URL (see ``open_location``)."""
    from ..journal import Journal

    return Journal(open_location(location, create=create, read_only=read_only))


pass_env = click.make_pass_decorator(Env)
"""Decorator passing the command's Env as the first argument."""

json_option = click.option(
    "--json", "as_json", is_flag=True, help="Print JSON (one document on stdout)."
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
    """Content-addressed, deduplicated agent journals and run checkpoints.

    Start with 'cas-journal demo', then 'cas-journal threads' and
    'cas-journal log demo-main'. Every command takes --help.
    """
    ctx.obj = Env(location)


def store_exists(location: str) -> bool:
    """True if a store exists at ``location`` (opened without creating, then closed)."""
    from ..errors import StoreFormatError

    try:
        store = open_location(location, create=False)
    except StoreFormatError as exc:
        if "no cas-journal store" in str(exc):
            return False
        raise
    store.close()
    return True


@cli.command()
@pass_env
def init(env: Env) -> None:
    """Create the store (a no-op if it exists)."""
    existed = store_exists(env.location)
    env.store(create=True)
    verb = "store already exists at" if existed else "created store at"
    click.echo(f"{verb} {env.location}")


def main() -> None:
    """Run the command line (exits the process)."""
    global _gc_paused
    if gc.isenabled():
        gc.disable()
        _gc_paused = True
    try:
        cli.main(prog_name=PROG_NAME)
    finally:
        resume_gc()
        # the process ends here: its objects go with it, so the interpreter's final
        # collections need not visit them (about a fifth of a short command's time)
        gc.freeze()
