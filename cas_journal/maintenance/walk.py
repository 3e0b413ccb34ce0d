"""Reachability: the roots of a store and a typed walk of everything they reach.

Roots are the values of the ``threads/``, ``checkpoints/`` and ``langgraph/`` refs plus
every value in their reflogs (optionally only entries newer than a cutoff). Each
reference an object holds says what kind it points at, so the walk never needs to read
a blob.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from datetime import datetime

from ..backends import Store
from ..errors import CorruptObject, CorruptRef, JournalError, ObjectNotFound
from ..journal.state import CHECKPOINT_PREFIX, THREAD_PREFIX
from ..objects import Kind, is_oid, typed_references

LANGGRAPH_PREFIX = "langgraph/"
"""Refs of LangGraph checkpoint namespaces (``cas_journal.langgraph``); each holds a tree."""

ROOT_PREFIXES = {
    THREAD_PREFIX: Kind.THREAD,
    CHECKPOINT_PREFIX: Kind.CHECKPOINT,
    LANGGRAPH_PREFIX: Kind.TREE,
}


def roots(
    store: Store,
    reflog_cutoff: datetime | None = None,
    on_problem: Callable[[str, str], None] | None = None,
) -> Iterator[tuple[str, Kind, str]]:
    """``(oid, kind, where)`` for every ref value and every reflog value after the cutoff.
    A ref or reflog that cannot be read raises CorruptRef, or is reported through
    ``on_problem(subject, message)`` and skipped."""
    for prefix, kind in ROOT_PREFIXES.items():
        for name in store.refs.list_refs(prefix):
            try:
                value = store.refs.read_ref(name)
            except CorruptRef as exc:
                if on_problem is None:
                    raise
                on_problem(f"ref {name}", str(exc))
                continue
            if value is not None:
                yield value, kind, f"ref {name}"
        for name in store.refs.reflog_names(prefix):
            try:
                entries = store.refs.reflog(name)
            except CorruptRef as exc:
                if on_problem is None:
                    raise
                on_problem(f"reflog {name}", str(exc))
                continue
            for entry in entries:
                if reflog_cutoff is not None and entry.time < reflog_cutoff:
                    continue
                for value in (entry.old, entry.new):
                    if value is not None:
                        yield value, kind, f"reflog {name}"


def walk(
    store: Store,
    start: Iterable[tuple[str, Kind, str]],
    on_problem: Callable[[str, str], None] | None = None,
    check_blobs: bool = False,
    visit: Callable[[str, Kind], None] | None = None,
    unreadable: dict[str, Kind] | None = None,
) -> set[bytes]:
    """Every object reachable from ``start`` (as raw 32-byte oids).

    Structured objects are read and parsed; blobs are only checked for existence when
    ``check_blobs``. Missing, damaged or wrongly-kinded objects are reported through
    ``on_problem(subject, message)`` (or raise if it is None) and, with the kind they
    were expected to be, added to ``unreadable`` (keyed by oid, or by the ref holding
    something that is not an oid): what they reference is unknown.
    """
    seen: set[bytes] = set()
    stack: list[tuple[str, Kind, str]] = list(start)

    def problem(subject: str, message: str, oid: str | None = None, kind: Kind = Kind.BLOB) -> None:
        if on_problem is None:
            raise CorruptObject(message, subject)
        if unreadable is not None and oid is not None:
            unreadable[oid] = kind
        on_problem(subject, message)

    while stack:
        oid, kind, where = stack.pop()
        if not is_oid(oid):
            problem(where, f"holds {oid[:80]!r}, which is not an object id", where, kind)
            continue
        raw = bytes.fromhex(oid)
        if raw in seen:
            continue
        seen.add(raw)
        if visit is not None:
            visit(oid, kind)
        if kind is Kind.BLOB:
            if check_blobs and not store.objects.has(oid):
                problem(oid, f"missing blob (referenced from {where})", oid)
            continue
        try:
            found, body = store.objects.get(oid)
            if found is not kind:
                problem(oid, f"is a {found.value}, but {where} expects a {kind.value}", oid, kind)
                continue
            references = typed_references(found, body, oid)
        except ObjectNotFound:
            problem(oid, f"missing {kind.value} (referenced from {where})", oid, kind)
            continue
        except JournalError as exc:
            problem(oid, str(exc), oid, kind)
            continue
        stack.extend((ref, ref_kind, f"{kind.value} {oid}") for ref, ref_kind in references)
    return seen
