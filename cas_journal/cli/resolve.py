"""Typed object ids: short hex prefixes (at least four digits) resolved against the store."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

if TYPE_CHECKING:
    from ..backends import ObjectStore
    from ..journal import Journal

MIN_PREFIX = 4
"""The shortest prefix accepted where an object id is typed."""
_HEX = frozenset("0123456789abcdef")


if TYPE_CHECKING:
    _ParamType = click.ParamType[str]
else:  # click < 8.4 has no generic ParamType
    _ParamType = click.ParamType


def is_prefix(text: str) -> bool:
    """True if ``text`` has the form of an object id or of a prefix of one."""
    return MIN_PREFIX <= len(text) <= 64 and _HEX.issuperset(text.lower())


class OidPrefix(_ParamType):
    """A full object id or a prefix of at least MIN_PREFIX hex digits (lowercased)."""

    name = "OID"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        """Check the form only; the store resolves the prefix later."""
        text = str(value).strip().lower()
        if not is_prefix(text):
            self.fail(
                f"{value!r} is not an object id or a prefix of {MIN_PREFIX} to 64 hex digits",
                param,
                ctx,
            )
        return text


OID = OidPrefix()
"""The parameter type of every object-id argument and option."""


def resolve_object(objects: ObjectStore, prefix: str) -> str:
    """The one stored oid starting with ``prefix`` (``ObjectStore.resolve``)."""
    return objects.resolve(prefix)


def resolve_entry(journal: Journal, thread_id: str, prefix: str) -> str:
    """The one entry of the thread whose id starts with ``prefix`` (``Journal.resolve_entry``)."""
    return journal.resolve_entry(thread_id, prefix)
