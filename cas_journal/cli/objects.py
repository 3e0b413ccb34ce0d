"""``cat``: one stored object, decoded for people or as its exact stored body."""

from __future__ import annotations

import json

import click

from ..objects import Kind, parse_node
from .app import Env, pass_env
from .output import binary_stdout, echo_lines
from .resolve import OID, resolve_object

HEX_ROW = 16
"""Bytes per line when a binary blob is shown as hex."""


def hex_lines(data: bytes) -> list[str]:
    """``offset  hex bytes`` rows, HEX_ROW bytes each."""
    return [
        f"{offset:08x}  {data[offset : offset + HEX_ROW].hex(' ')}"
        for offset in range(0, len(data), HEX_ROW)
    ]


def body_lines(kind: Kind, body: bytes, oid: str) -> list[str]:
    """A body for people: structured kinds as indented JSON, blobs as text or hex."""
    if kind is not Kind.BLOB:
        parse_node(kind, body, oid)  # CorruptObject if it is not a valid node
        return json.dumps(json.loads(body), indent=2, ensure_ascii=False).splitlines()
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        return hex_lines(body)
    return text.splitlines()


@click.command()
@click.argument("oid", type=OID)
@click.option("--raw", is_flag=True, help="Write the exact stored body bytes to stdout.")
@pass_env
def cat(env: Env, oid: str, raw: bool) -> None:
    """Show one object (full id or a prefix of at least 4 hex digits)."""
    objects = env.journal(read_only=True).store.objects
    full = resolve_object(objects, oid)
    kind, body = objects.get(full)
    if raw:
        stream = binary_stdout()
        stream.write(body)
        stream.flush()
        return
    lines = body_lines(kind, body, full)
    echo_lines([f"object {full}", f"kind   {kind.value}", f"size   {len(body)} bytes", ""])
    echo_lines(lines)


COMMANDS = [cat]
"""The commands this module adds to the root group."""
