"""``checkpoints``: run checkpoints (list, show, history, rm)."""

from __future__ import annotations

import json
from typing import Any

import click

from ..errors import CheckpointNotFound
from ..journal import Checkpoint
from .app import Env, json_option, pass_env
from .output import echo_json, echo_lines, first_line, human_time, model_json, table


def checkpoint_json(checkpoint: Checkpoint, with_messages: bool = False) -> dict[str, Any]:
    """A checkpoint for --json output (messages only when asked for)."""
    data: dict[str, Any] = model_json(checkpoint)
    if not with_messages:
        data.pop("messages", None)
    return data


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
    found = env.journal().checkpoints.list()
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
    checkpoint = env.journal().checkpoints.load(run, iteration)
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
    found = env.journal().checkpoints.history(run)
    if as_json:
        echo_json({"run_id": run, "checkpoints": [checkpoint_json(c) for c in found]})
    else:
        echo_lines(checkpoint_rows(found, with_run=False))


@checkpoints.command()
@click.argument("run")
@pass_env
def rm(env: Env, run: str) -> None:
    """Delete a run's checkpoints (restorable from the reflog until gc expires it)."""
    store = env.journal().checkpoints
    if not store.has_checkpoint(run):
        raise CheckpointNotFound(f"no checkpoint for run {run!r}")
    store.delete(run)
    click.echo(f"deleted checkpoints of run {run}")


COMMANDS = [checkpoints]
"""The commands this module adds to the root group."""
