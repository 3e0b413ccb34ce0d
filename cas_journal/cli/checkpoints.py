"""``checkpoints``: run checkpoints (list, show, history, rm, restore, reflog)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import click

from ..errors import CheckpointNotFound, ConflictError
from .app import Env, json_option, pass_env
from .output import echo_json, echo_lines, first_line, human_time, model_json, printable, table
from .threads import reflog_json, reflog_rows

if TYPE_CHECKING:
    from ..backends import ReflogEntry, Store
    from ..journal import Checkpoint

CHECKPOINT_PREFIX = "checkpoints/"
"""The prefix of run refs (``cas_journal.journal.refnames.CHECKPOINT_PREFIX``)."""


def checkpoint_json(checkpoint: Checkpoint, with_messages: bool = False) -> dict[str, Any]:
    """A checkpoint for --json output (messages only when asked for)."""
    return model_json(checkpoint, exclude=None if with_messages else {"messages"})


def _block_text(block: Any) -> str:
    """The words of one content block (text, tool use or tool result)."""
    if not isinstance(block, dict):
        return str(block)
    kind = block.get("type")
    if isinstance(block.get("text"), str):
        return str(block["text"])
    if kind == "tool_use":
        arguments = json.dumps(block.get("input", {}), sort_keys=True, ensure_ascii=False)
        return f"{block.get('name', '?')} {arguments}"
    if kind == "tool_result":
        content = block.get("content")
        if isinstance(content, list):
            return " ".join(_block_text(item) for item in content)
        return str(content if content is not None else "")
    return json.dumps(block, sort_keys=True, ensure_ascii=False)


def message_text(message: dict[str, Any]) -> str:
    """What a checkpoint message says: its text, tool calls or tool results, else its JSON.

    Understands plain string content and lists of content blocks (Anthropic style), and
    OpenAI-style ``tool_calls``.
    """
    content = message.get("content")
    if isinstance(content, str) and content:
        return content
    if isinstance(content, list) and content:
        return " ".join(_block_text(block) for block in content)
    calls = message.get("tool_calls")
    if isinstance(calls, list) and calls:
        names = [
            str(call.get("function", {}).get("name", "?"))
            for call in calls
            if isinstance(call, dict)
        ]
        return "tool calls: " + ", ".join(names)
    rest = {key: value for key, value in message.items() if key != "role"}
    return json.dumps(rest, sort_keys=True, ensure_ascii=False)


def checkpoint_rows(found: list[Checkpoint], with_run: bool) -> list[str]:
    """Checkpoints as an aligned table."""
    headers = (["RUN"] if with_run else []) + [
        "ITERATION",
        "CREATED",
        "MESSAGES",
        "TOKENS IN/OUT",
        "TASK",
    ]
    rows = [
        ([c.run_id] if with_run else [])
        + [
            str(c.iteration),
            human_time(c.created_at),
            str(c.message_count),
            f"{c.input_tokens}/{c.output_tokens}",
            c.task_name or "-",
        ]
        for c in found
    ]
    return table(rows, headers)


@click.group(invoke_without_command=True)
@click.pass_context
def checkpoints(ctx: click.Context) -> None:
    """Run checkpoints; without a subcommand, list them."""
    if ctx.invoked_subcommand is None:
        ctx.invoke(list_command, as_json=False)


@checkpoints.command("list")
@json_option
@pass_env
def list_command(env: Env, as_json: bool) -> None:
    """Every run's newest checkpoint, newest first."""
    found = env.journal(read_only=True).checkpoints.list()
    if as_json:
        echo_json({"checkpoints": [checkpoint_json(c) for c in found]})
    elif not found:
        click.echo("no checkpoints")
    else:
        echo_lines(checkpoint_rows(found, with_run=True))


@checkpoints.command()
@click.argument("run")
@click.option("--iteration", type=int, help="Show this iteration (default: the newest).")
@json_option
@pass_env
def show(env: Env, run: str, iteration: int | None, as_json: bool) -> None:
    """One checkpoint with its messages."""
    checkpoint = env.journal(read_only=True).checkpoints.load(run, iteration)
    if as_json:
        echo_json(checkpoint_json(checkpoint, with_messages=True))
        return
    rows = [
        ["run:", checkpoint.run_id],
        ["task:", checkpoint.task_name or "-"],
        ["iteration:", str(checkpoint.iteration)],
        ["created:", human_time(checkpoint.created_at)],
        ["tokens:", f"{checkpoint.input_tokens} in, {checkpoint.output_tokens} out"],
        ["system:", first_line(checkpoint.system_prompt) or "-"],
        ["messages:", str(checkpoint.message_count)],
    ]
    echo_lines(table(rows))
    echo_lines(
        table(
            [
                [f"  {index}", str(message.get("role", "?")), first_line(message_text(message))]
                for index, message in enumerate(checkpoint.messages)
            ]
        )
    )


@checkpoints.command()
@click.argument("run")
@json_option
@pass_env
def history(env: Env, run: str, as_json: bool) -> None:
    """Every saved iteration of a run, newest first."""
    found = env.journal(read_only=True).checkpoints.history(run)
    if as_json:
        echo_json({"run_id": run, "checkpoints": [checkpoint_json(c) for c in found]})
    else:
        echo_lines(checkpoint_rows(found, with_run=False))


@checkpoints.command()
@click.argument("run")
@pass_env
def rm(env: Env, run: str) -> None:
    """Delete a run's checkpoints (undo with 'checkpoints restore RUN' until gc expires
    the run's reflog, 30 days by default)."""
    store = env.journal().checkpoints
    if not store.has_checkpoint(run):
        raise CheckpointNotFound(f"no checkpoint for run {run!r}")
    store.delete(run)
    click.echo(
        printable(
            f"deleted checkpoints of run {run} (undo with 'cas-journal checkpoints restore {run}')"
        )
    )


def run_ref(run: str) -> str:
    """The ref name of a run (validating the id)."""
    from ..journal.refnames import checkpoint_ref

    return checkpoint_ref(run)


def restore_run(store: Store, run: str) -> str:
    """Point a deleted run's ref back at its last checkpoint (from the reflog)."""
    from ..objects import is_oid

    name = run_ref(run)
    if store.refs.read_ref(name) is not None:
        raise ConflictError(f"run {run!r} exists; nothing to restore")
    last = next((e.new for e in reversed(store.refs.reflog(name)) if e.new), None)
    if last is None or not is_oid(last) or not store.objects.has(last):
        raise CheckpointNotFound(f"run {run!r} has no restorable checkpoint in its reflog")
    if not store.refs.set_if_equals(name, None, last, "restore"):
        raise ConflictError(f"run {run!r} was created meanwhile; nothing restored")
    return last


@checkpoints.command()
@click.argument("run")
@pass_env
def restore(env: Env, run: str) -> None:
    """Bring back a deleted run at its newest checkpoint."""
    journal = env.journal()
    restore_run(journal.store, run)
    newest = journal.checkpoints.history(run)[0]
    click.echo(
        printable(
            f"restored run {run} (iteration {newest.iteration}, {newest.message_count} messages)"
        )
    )


@checkpoints.command()
@click.argument("run", required=False)
@json_option
@pass_env
def reflog(env: Env, run: str | None, as_json: bool) -> None:
    """Every update of RUN's ref, newest first; without RUN, every run that has a reflog,
    deleted ones included (restore them with 'checkpoints restore RUN')."""
    refs = env.journal(read_only=True).store.refs
    if run is not None:
        name = run_ref(run)
        updates = list(reversed(refs.reflog(name)))
        if not updates:
            raise CheckpointNotFound(f"run {run!r} has no reflog")
        if as_json:
            echo_json({"run_id": run, "ref": name, "entries": reflog_json(updates)})
        else:
            echo_lines(reflog_rows(updates))
        return
    runs: list[tuple[str, bool, ReflogEntry]] = []
    for name in refs.reflog_names(CHECKPOINT_PREFIX):
        updates = refs.reflog(name)
        if updates:
            runs.append((name[len(CHECKPOINT_PREFIX) :], refs.read_ref(name) is None, updates[-1]))
    if as_json:
        echo_json(
            {
                "runs": [
                    {"run_id": run_id, "deleted": deleted, "last_change": reflog_json([last])[0]}
                    for run_id, deleted, last in runs
                ]
            }
        )
        return
    if not runs:
        click.echo("no run has a reflog")
        return
    rows = [
        [run_id, "deleted" if deleted else "live", human_time(last.time), last.reason or "-"]
        for run_id, deleted, last in runs
    ]
    echo_lines(table(rows, ["RUN", "STATE", "LAST CHANGE", "REASON"]))


COMMANDS = [checkpoints]
"""The commands this module adds to the root group."""
