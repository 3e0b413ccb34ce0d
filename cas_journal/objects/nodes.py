"""The structured object kinds: their canonical bodies, strict parsers and references.

Each node type builds its canonical JSON body (empty optional fields omitted) and parses
one back, refusing anything malformed with CorruptObject. ``references`` lists the oids
an object points at, which is all that gc, fsck and sync need to know about a kind.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any, NamedTuple, Protocol, TypeVar, cast

from ..errors import CorruptObject, InvalidInputError
from .canonical import (
    canonical_json,
    canonical_json_of_plain,
    is_canonical_time,
    is_plain,
    parse_json,
    parse_json_exact,
)
from .codec import is_oid
from .kinds import Kind


def skip_depth(depth: int) -> int:
    """Depth of the ancestor an entry at ``depth`` keeps a skip pointer to.

    Clearing the lowest set bits of the depth gives a deterministic skip list: any
    ancestor is reachable in O(log depth) hops using parent and skip pointers.
    """
    if depth < 2:
        return 0
    if depth & 1:
        n = depth - 1
        n &= n - 1
        n &= n - 1
        return n + 1
    return depth & (depth - 1)


class ChainNode(Protocol):
    """A node of a skip-listed chain: its depth, first parent and skip pointer."""

    @property
    def depth(self) -> int: ...
    @property
    def parent(self) -> str | None: ...
    @property
    def skip(self) -> str | None: ...


N = TypeVar("N", bound=ChainNode)


def ancestor_at(lookup: Callable[[str], N], oid: str, depth: int) -> str:
    """The ancestor of ``oid`` at ``depth`` on its first-parent chain (``oid`` itself at its
    own depth), in O(log depth) calls of ``lookup`` (oid -> node) through skip pointers.

    ValueError if ``depth`` is not between 0 and the node's depth, or if the chain is
    inconsistent (a parent whose depth is not one less).
    """
    node = lookup(oid)
    if depth > node.depth or depth < 0:
        raise ValueError(f"no ancestor at depth {depth} of a node at depth {node.depth}")
    current = oid
    while node.depth > depth:
        below = node.depth
        if node.skip is not None and skip_depth(below) >= depth:
            current = node.skip
        elif node.parent is not None:
            current = node.parent
        else:
            raise ValueError(f"node {current} at depth {below} has no parent")
        node = lookup(current)
        if node.depth >= below:
            raise ValueError(f"node {current} does not lie below its child's depth")
    if node.depth != depth:
        raise ValueError(f"the chain skips depth {depth}")
    return current


def skip_pointer(
    lookup: Callable[[str], N], parent: str, depth: int, line: dict[int, str] | None = None
) -> str | None:
    """The skip pointer of a new node at ``depth`` whose first parent is ``parent``: its
    first-parent ancestor at ``skip_depth(depth)``, or None below depth 2. ``line``, if
    given, maps depths to first-parent ancestors of ``parent`` already known (a writer's
    recent ones): a target found there is not looked for, and one looked for is added."""
    if depth < 2:
        return None
    target = skip_depth(depth)
    skip = line.get(target) if line is not None else None
    if skip is None:
        skip = ancestor_at(lookup, parent, target)
        if line is not None:
            line[target] = skip
    return skip


def meeting_point(
    lookup_a: Callable[[str], N], a: str, lookup_b: Callable[[str], N], b: str
) -> str | None:
    """The newest node the first-parent chains of ``a`` and ``b`` share (None if they
    share none above depth 0's own nodes), in O(log^2 depth) lookups: the two sides may
    live in two stores (``lookup_a``, ``lookup_b``), e.g. a local and a remote one.

    Chains only meet where their nodes are equal, and below a shared node they stay
    equal, so a binary search over depths finds the newest shared one.
    """
    depth = min(lookup_a(a).depth, lookup_b(b).depth)
    lo, hi, found = 0, depth, None
    while lo <= hi:
        mid = (lo + hi) // 2
        left = ancestor_at(lookup_a, a, mid)
        if left == ancestor_at(lookup_b, b, mid):
            found, lo = left, mid + 1
        else:
            hi = mid - 1
    return found


class _Reader:
    """Validating accessors over one parsed JSON object (raise CorruptObject on misuse)."""

    def __init__(self, oid: str | None, body: bytes, what: str, long_ints: bool = True) -> None:
        self.oid = oid
        self.what = what
        try:
            value = parse_json(body, long_ints)
        except (ValueError, UnicodeDecodeError, RecursionError) as exc:
            raise CorruptObject(f"{what} body is not valid JSON", oid) from exc
        if not isinstance(value, dict):
            raise CorruptObject(f"{what} body is not a JSON object", oid)
        self.value: dict[str, Any] = value

    def fail(self, message: str) -> CorruptObject:
        return CorruptObject(f"{self.what}: {message}", self.oid)

    def oid_field(self, name: str, required: bool = False) -> str | None:
        value = self.value.get(name)
        if value is None and not required:
            return None
        if not is_oid(value):
            raise self.fail(f"field {name!r} is not an object id")
        return str(value)

    def oid_list(self, name: str) -> tuple[str, ...]:
        value = self.value.get(name, [])
        if not isinstance(value, list) or not all(is_oid(item) for item in value):
            raise self.fail(f"field {name!r} is not a list of object ids")
        return tuple(value)

    def int_field(self, name: str) -> int:
        value = self.value.get(name, 0)
        if not isinstance(value, int) or isinstance(value, bool):
            raise self.fail(f"field {name!r} is not an integer")
        return value

    def str_field(self, name: str) -> str:
        value = self.value.get(name, "")
        if not isinstance(value, str):
            raise self.fail(f"field {name!r} is not a string")
        return value

    def time_field(self, name: str) -> str:
        value = self.value.get(name)
        if not is_canonical_time(value):
            raise self.fail(f"field {name!r} is not a canonical timestamp")
        assert isinstance(value, str)
        return value

    def dict_field(self, name: str) -> dict[str, Any]:
        value = self.value.get(name, {})
        if not isinstance(value, dict):
            raise self.fail(f"field {name!r} is not an object")
        return value

    def only(self, allowed: frozenset[str]) -> None:
        unknown = set(self.value) - allowed
        if unknown:
            raise self.fail(f"unknown fields {sorted(unknown)}")


def _compact(fields: dict[str, Any]) -> dict[str, Any]:
    """Drop empty optional fields (None, "", 0, empty containers) for the canonical form."""
    return {key: value for key, value in fields.items() if value not in (None, "", 0, [], {})}


_CANONICAL_ENTRY = re.compile(
    r'\{"created_at":"([0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{6}Z)"'
    r'(?:,"depth":([1-9][0-9]{0,17}))?'
    r'(?:,"parent":"([0-9a-f]{64})")?'
    r',"payload":"([0-9a-f]{64})"'
    r'(?:,"skip":"([0-9a-f]{64})")?'
    r'(?:,"turn_id":"([^"\\\x00-\x1f]*)")?\}'
)
"""An entry body (decoded) exactly as ``EntryNode.body`` writes it, with a turn id free
of JSON escapes: such a body is read by this pattern alone; any other goes through the
JSON parser, which gives the same fields or the same error (a property test compares
them)."""
_DEEP_ENTRY = re.compile(
    r'\{"created_at":"([0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{6}Z)"'
    r',"depth":([1-9][0-9]{0,17})'
    r',"parent":"([0-9a-f]{64})"'
    r',"payload":"([0-9a-f]{64})"'
    r',"skip":"([0-9a-f]{64})"'
    r'(?:,"turn_id":"([^"\\\x00-\x1f]*)")?\}'
)
"""``_CANONICAL_ENTRY`` for an entry from depth 2 on (every entry of a thread but its
first two), with its depth, parent and skip required: a body it matches,
``_CANONICAL_ENTRY`` matches with the same groups (a property test compares them), and
it matches in 15% fewer instructions (callgrind: 11,700 against 13,700 a body) as it
tries no optional group but the turn id's. It is tried first."""


_EntryFields = tuple[str, int, str | None, str, str | None, str]
"""``(created_at, depth, parent, payload, skip, turn_id)`` of an entry body."""
_from_iso = datetime.fromisoformat


def _canonical_entry_fields(body: bytes) -> _EntryFields | None:
    """``(created_at, depth, parent, payload, skip, turn_id)`` of a canonical entry body
    whose time is a real instant, or None if the body is not in that form (the caller
    then parses it as JSON, which refuses it with the reason)."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        return None  # the JSON parser refuses it with its own message
    match = _DEEP_ENTRY.fullmatch(text) or _CANONICAL_ENTRY.fullmatch(text)
    if match is None:
        return None
    created_at, depth, parent, payload, skip, turn_id = match.groups()
    try:  # the pattern fixed the shape; the date itself must exist (no February 30)
        _from_iso(created_at)
    except ValueError:
        return None
    return created_at, int(depth) if depth else 0, parent, payload, skip, turn_id or ""


def _json_entry_fields(body: bytes, oid: str | None, allowed: frozenset[str]) -> _EntryFields:
    """The fields of an entry body in any JSON form, each of the right type (the caller
    checks how they fit together)."""
    # an integer beyond 64 bits may come back as a float: refused as "not an integer"
    value = _Reader(oid, body, "entry", long_ints=False).value
    if not allowed.issuperset(value):
        raise CorruptObject(f"entry: unknown fields {sorted(set(value) - allowed)}", oid)
    payload, parent, skip = value.get("payload"), value.get("parent"), value.get("skip")
    depth, turn_id = value.get("depth", 0), value.get("turn_id", "")
    created_at = value.get("created_at")
    for name, ref in (("payload", payload), ("parent", parent), ("skip", skip)):
        if (ref is not None or name == "payload") and not is_oid(ref):
            raise CorruptObject(f"entry: field {name!r} is not an object id", oid)
    if type(depth) is not int:
        raise CorruptObject("entry: field 'depth' is not an integer", oid)
    if type(turn_id) is not str:
        raise CorruptObject("entry: field 'turn_id' is not a string", oid)
    if type(created_at) is not str:
        raise CorruptObject("entry: field 'created_at' is not a canonical timestamp", oid)
    return created_at, depth, parent, cast(str, payload), skip, turn_id


new_tuple = tuple.__new__
"""Builds a NamedTuple from all its fields, in order, without its Python-level
``__new__`` (which binds each argument to its field by name first). The one home of this
helper: the journal's modules that build tuples on their hot paths import it from here."""

# the members an EntryNode body may hold
_ENTRY_FIELDS = frozenset({"payload", "created_at", "depth", "parent", "skip", "turn_id"})


def _json_text(text: str) -> str:
    """``text`` as a canonical JSON string: quoted as it is when nothing in it needs an
    escape (printable ASCII without quote or backslash), else through the encoder."""
    if text.isascii() and text.isprintable() and '"' not in text and "\\" not in text:
        return f'"{text}"'
    return canonical_json(text).decode("utf-8")


class EntryNode(NamedTuple):
    """A journal tree node. Its oid is the entry id; the thread id is deliberately absent."""

    payload: str
    created_at: str
    depth: int = 0
    parent: str | None = None
    skip: str | None = None
    turn_id: str = ""

    def body(self) -> bytes:
        """Canonical JSON body of this node (built directly: it is on the append hot path;
        a property test checks it equals the generic canonical encoding). The oids and the
        time are written as they are (they hold nothing JSON escapes); the turn id is
        encoded."""
        payload, created_at, depth, parent, skip, turn_id = self
        end = f',"turn_id":{_json_text(turn_id)}}}' if turn_id else "}"
        if depth and parent and skip:  # every entry from depth 2 on: one format
            return (
                f'{{"created_at":"{created_at}","depth":{depth},"parent":"{parent}",'
                f'"payload":"{payload}","skip":"{skip}"{end}'
            ).encode()
        parts = [f'{{"created_at":"{created_at}"']
        if depth:
            parts.append(f',"depth":{depth}')
        if parent:
            parts.append(f',"parent":"{parent}"')
        parts.append(f',"payload":"{payload}"')
        if skip:
            parts.append(f',"skip":"{skip}"')
        parts.append(end)
        return "".join(parts).encode("utf-8")

    def generic_body(self) -> bytes:
        """The same body through the generic canonical encoder (reference for tests)."""
        fields = _compact(
            {"parent": self.parent, "skip": self.skip, "turn_id": self.turn_id, "depth": self.depth}
        )
        fields["payload"] = self.payload
        fields["created_at"] = self.created_at
        return canonical_json(fields)

    def references(self) -> list[str]:
        """Oids this node points at."""
        return [ref for ref in (self.parent, self.skip, self.payload) if ref]

    def typed_references(self) -> list[tuple[str, Kind]]:
        """Oids this node points at, with the kind each must be."""
        refs = [(self.payload, Kind.BLOB)]
        refs += [(ref, Kind.ENTRY) for ref in (self.parent, self.skip) if ref]
        return refs

    @classmethod
    def parse(cls, body: bytes, oid: str | None = None) -> EntryNode:
        """Parse and validate an entry body (written out: it runs once per entry of every
        path read from the store)."""
        fields = _canonical_entry_fields(body)  # the form the journal writes: no JSON
        if fields is None:
            fields = _json_entry_fields(body, oid, _ENTRY_FIELDS)
            if not is_canonical_time(fields[0]):
                raise CorruptObject("entry: field 'created_at' is not a canonical timestamp", oid)
        created_at, depth, parent, payload, skip, turn_id = fields
        if depth < 0 or (parent is None) != (depth == 0):
            raise CorruptObject("entry: depth and parent disagree", oid)
        if (skip is not None) != (depth >= 2):
            raise CorruptObject("entry: skip pointer missing or unexpected", oid)
        return new_tuple(cls, (payload, created_at, depth, parent, skip, turn_id))


_STR_OR_NONE = frozenset({str, type(None)})
_STR_ONLY = frozenset({str})
# the members a ThreadStateNode body may hold
_THREAD_STATE_FIELDS = frozenset({"meta", "leaf", "heads", "parents", "depth", "skip"})


class ThreadStateNode(NamedTuple):
    """A thread's state: metadata, leaf, every branch head, and the state(s) it follows.

    ``depth`` counts first-parent steps back to the nearest state of depth 0 (a thread's
    first state, or a state written before states had depths); from depth 2 on, ``skip``
    points at the first-parent ancestor at ``skip_depth(depth)``, as entries do, so any
    ancestor on the first-parent chain is O(log depth) reads away (``ancestor_at``).
    Both are omitted at zero, so states written without them still parse.
    """

    meta: dict[str, Any]
    leaf: str | None = None
    heads: tuple[str, ...] = ()
    parents: tuple[str, ...] = ()
    depth: int = 0
    skip: str | None = None

    @property
    def parent(self) -> str | None:
        """The first parent (the state this one was written over), if any."""
        return self.parents[0] if self.parents else None

    def body(self) -> bytes:
        """Canonical JSON body of this state (the empty fields left out, as ``_compact``
        leaves them out; ``meta`` always written). Only ``meta`` is walked for values the
        fast encoder would write otherwise (``canonical_json``): oids that are str and a
        depth that is an int need no walk (every append and fork writes a state; the
        walk of all the fields cost half the body's 30,000 instructions)."""
        meta, leaf, heads, parents, depth, skip = self
        fields: dict[str, Any] = {"meta": meta}
        if leaf not in (None, ""):
            fields["leaf"] = leaf
        if heads:
            fields["heads"] = sorted(heads)
        if parents:
            fields["parents"] = list(parents)
        if depth not in (None, "", 0):
            fields["depth"] = depth
        if skip not in (None, ""):
            fields["skip"] = skip
        if (
            type(depth) is int
            and type(leaf) in _STR_OR_NONE
            and type(skip) in _STR_OR_NONE
            and _STR_ONLY.issuperset(map(type, heads))
            and _STR_ONLY.issuperset(map(type, parents))
            and is_plain(meta)
        ):
            return canonical_json_of_plain(fields)
        return canonical_json(fields)

    def references(self) -> list[str]:
        """Oids this state points at."""
        refs = list(self.parents) + list(self.heads)
        if self.leaf:
            refs.append(self.leaf)
        if self.skip:
            refs.append(self.skip)
        return refs

    def typed_references(self) -> list[tuple[str, Kind]]:
        """Oids this state points at, with the kind each must be."""
        refs = [(oid, Kind.THREAD) for oid in (*self.parents, *([self.skip] if self.skip else []))]
        refs += [(oid, Kind.ENTRY) for oid in (*self.heads, *([self.leaf] if self.leaf else []))]
        return refs

    @classmethod
    def parse(cls, body: bytes, oid: str | None = None) -> ThreadStateNode:
        """Parse and validate a thread-state body."""
        r = _Reader(oid, body, "thread state")
        r.only(_THREAD_STATE_FIELDS)
        meta = r.dict_field("meta")
        if not isinstance(meta.get("id"), str) or not meta["id"]:
            raise r.fail("metadata has no thread id")
        node = cls(
            meta=meta,
            leaf=r.oid_field("leaf"),
            heads=r.oid_list("heads"),
            parents=r.oid_list("parents"),
            depth=r.int_field("depth"),
            skip=r.oid_field("skip"),
        )
        if node.depth < 0 or (node.depth > 0 and not node.parents):
            raise r.fail("depth and parents disagree")
        if (node.skip is not None) != (node.depth >= 2):
            raise r.fail("skip pointer missing or unexpected")
        return node


# the members a CheckpointNode body may hold
_CHECKPOINT_FIELDS = frozenset(
    {
        "run_id",
        "created_at",
        "iteration",
        "task_name",
        "input_tokens",
        "output_tokens",
        "message_count",
        "messages",
        "segment",
        "system_prompt",
        "previous",
    }
)


class CheckpointNode(NamedTuple):
    """One saved iteration of a run; ``previous`` links the run's history.

    Its message list is spelled by ``segment`` (a segment object, how runs are saved
    now) or by ``messages`` (the last node of a message chain, how runs were saved
    before segments), never both; neither when the list is empty. Two fields, not one
    that may name either kind: every reference of every object names one kind, which
    is what gc, fsck and sync check.

    ``previous`` holds one checkpoint normally, two for a merge (two stores saved the run
    independently and a sync joined them: the merge repeats the newer side's content).
    """

    run_id: str
    created_at: str
    iteration: int = 0
    task_name: str = ""
    input_tokens: int = 0
    output_tokens: int = 0
    message_count: int = 0
    messages: str | None = None
    system_prompt: str | None = None
    previous: tuple[str, ...] = ()
    segment: str | None = None

    @property
    def message_list(self) -> tuple[str, Kind] | None:
        """The object spelling the message list and its kind (None: no messages)."""
        if self.segment is not None:
            return self.segment, Kind.SEGMENT
        if self.messages is not None:
            return self.messages, Kind.MESSAGE
        return None

    def body(self) -> bytes:
        """Canonical JSON body of this checkpoint."""
        fields = _compact(
            {
                "iteration": self.iteration,
                "task_name": self.task_name,
                "input_tokens": self.input_tokens,
                "output_tokens": self.output_tokens,
                "message_count": self.message_count,
                "messages": self.messages,
                "segment": self.segment,
                "system_prompt": self.system_prompt,
                "previous": list(self.previous),
            }
        )
        fields["run_id"] = self.run_id
        fields["created_at"] = self.created_at
        return canonical_json(fields)

    def references(self) -> list[str]:
        """Oids this checkpoint points at."""
        refs = (self.messages, self.segment, self.system_prompt)
        return [*self.previous, *(ref for ref in refs if ref)]

    def typed_references(self) -> list[tuple[str, Kind]]:
        """Oids this checkpoint points at, with the kind each must be."""
        pairs = [
            (self.messages, Kind.MESSAGE),
            (self.segment, Kind.SEGMENT),
            (self.system_prompt, Kind.BLOB),
        ]
        return [(oid, Kind.CHECKPOINT) for oid in self.previous] + [
            (oid, kind) for oid, kind in pairs if oid
        ]

    @property
    def is_merge(self) -> bool:
        """True for a node that only joins two histories."""
        return len(self.previous) > 1

    @classmethod
    def parse(cls, body: bytes, oid: str | None = None) -> CheckpointNode:
        """Parse and validate a checkpoint body."""
        r = _Reader(oid, body, "checkpoint")
        r.only(_CHECKPOINT_FIELDS)
        node = cls(
            run_id=r.str_field("run_id"),
            created_at=r.time_field("created_at"),
            iteration=r.int_field("iteration"),
            task_name=r.str_field("task_name"),
            input_tokens=r.int_field("input_tokens"),
            output_tokens=r.int_field("output_tokens"),
            message_count=r.int_field("message_count"),
            messages=r.oid_field("messages"),
            system_prompt=r.oid_field("system_prompt"),
            previous=r.oid_list("previous"),
            segment=r.oid_field("segment"),
        )
        if not node.run_id:
            raise r.fail("run id is empty")
        if node.messages is not None and node.segment is not None:
            raise r.fail("names both a message chain and a segment")
        if node.message_count < 0 or (node.message_list is None) != (node.message_count == 0):
            raise r.fail("message count and message list disagree")
        return node


# the members a MessageNode body may hold
_MESSAGE_FIELDS = frozenset({"message", "parent"})
# the canonical body of a MessageNode, which ``parse`` reads without a JSON parser
_CANONICAL_MESSAGE_NODE = re.compile(
    rb'\{"message":"([0-9a-f]{64})"(?:,"parent":"([0-9a-f]{64})")?\}'
)


class MessageNode(NamedTuple):
    """One link of a checkpoint message chain: the message blob and the previous link."""

    message: str
    parent: str | None = None

    def body(self) -> bytes:
        """Canonical JSON body of this link."""
        fields = _compact({"parent": self.parent})
        fields["message"] = self.message
        return canonical_json(fields)

    def references(self) -> list[str]:
        """Oids this link points at."""
        return [self.message] + ([self.parent] if self.parent else [])

    def typed_references(self) -> list[tuple[str, Kind]]:
        """Oids this link points at, with the kind each must be."""
        refs = [(self.message, Kind.BLOB)]
        if self.parent:
            refs.append((self.parent, Kind.MESSAGE))
        return refs

    @classmethod
    def parse(cls, body: bytes, oid: str | None = None) -> MessageNode:
        """Parse and validate a message-node body."""
        canonical = _CANONICAL_MESSAGE_NODE.fullmatch(body)
        if canonical is not None:  # what every writer writes: one match, no JSON parse
            message, parent = canonical.groups()
            return cls(message.decode("ascii"), parent.decode("ascii") if parent else None)
        value = _Reader(oid, body, "message node", long_ints=False).value
        if not _MESSAGE_FIELDS.issuperset(value):
            raise CorruptObject(
                f"message node: unknown fields {sorted(set(value) - _MESSAGE_FIELDS)}", oid
            )
        message, parent = value.get("message"), value.get("parent")
        if not is_oid(message) or (parent is not None and not is_oid(parent)):
            raise CorruptObject("message node: a field is not an object id", oid)
        return cls(cast(str, message), parent)


# the members a SegmentNode body may hold
_SEGMENT_FIELDS = frozenset({"base", "base_chain", "keep", "messages"})


def segment_body(
    messages: Sequence[bytes], keep: int = 0, base: str | None = None, base_chain: str | None = None
) -> bytes:
    """The canonical body of a segment from its messages' canonical JSON (the save path
    has them encoded already; a property test checks this equals ``SegmentNode.body``)."""
    head = b"{"
    if base is not None:
        head += b'"base":"%s",' % base.encode("ascii")
    if base_chain is not None:
        head += b'"base_chain":"%s",' % base_chain.encode("ascii")
    if keep:
        head += b'"keep":%d,' % keep
    return head + b'"messages":[' + b",".join(messages) + b"]}"


class SegmentNode(NamedTuple):
    """A checkpoint's message list as one object: the first ``keep`` messages of an older
    list, then ``messages`` (JSON objects, inline).

    The older list is that of ``base`` (a segment) or of ``base_chain`` (the last node
    of a message chain, as runs saved before segments have); at most one is set, and
    ``keep`` is positive exactly when one is. The list is ``keep + len(messages)`` long.
    Whether ``keep`` is within the older list's length is checked by whoever reads that
    list (the parser sees one object). The body is canonical JSON with ``base``,
    ``base_chain`` and ``keep`` omitted when empty and ``messages`` always present.
    """

    messages: list[dict[str, Any]]
    keep: int = 0
    base: str | None = None
    base_chain: str | None = None

    @property
    def length(self) -> int:
        """How many messages this segment's list holds."""
        return self.keep + len(self.messages)

    @property
    def below(self) -> tuple[str, Kind] | None:
        """The older list's object and its kind (None: the list starts here)."""
        if self.base is not None:
            return self.base, Kind.SEGMENT
        if self.base_chain is not None:
            return self.base_chain, Kind.MESSAGE
        return None

    def body(self) -> bytes:
        """Canonical JSON body of this segment (through the generic encoder)."""
        fields: dict[str, Any] = _compact(
            {"base": self.base, "base_chain": self.base_chain, "keep": self.keep}
        )
        fields["messages"] = list(self.messages)
        return canonical_json(fields)

    def references(self) -> list[str]:
        """Oids this segment points at."""
        below = self.below
        return [] if below is None else [below[0]]

    def typed_references(self) -> list[tuple[str, Kind]]:
        """Oids this segment points at, with the kind each must be."""
        below = self.below
        return [] if below is None else [below]

    @classmethod
    def parse(cls, body: bytes, oid: str | None = None) -> SegmentNode:
        """Parse and validate a segment body (one JSON parse, exact for long integers)."""
        try:
            value = parse_json_exact(body)
        except (ValueError, UnicodeDecodeError, RecursionError) as exc:
            raise CorruptObject("segment body is not valid JSON", oid) from exc
        if type(value) is not dict:
            raise CorruptObject("segment body is not a JSON object", oid)
        if not _SEGMENT_FIELDS.issuperset(value):
            unknown = sorted(set(value) - _SEGMENT_FIELDS)
            raise CorruptObject(f"segment: unknown fields {unknown}", oid)
        messages, keep = value.get("messages"), value.get("keep", 0)
        base, base_chain = value.get("base"), value.get("base_chain")
        if type(messages) is not list:
            raise CorruptObject("segment: field 'messages' is not a list", oid)
        if not all(type(message) is dict for message in messages):
            index = next(i for i, message in enumerate(messages) if type(message) is not dict)
            raise CorruptObject(f"segment: message {index} is not a JSON object", oid)
        if type(keep) is not int or keep < 0:
            raise CorruptObject("segment: field 'keep' is not a count", oid)
        for name, ref in (("base", base), ("base_chain", base_chain)):
            if ref is not None and not is_oid(ref):
                raise CorruptObject(f"segment: field {name!r} is not an object id", oid)
        if base is not None and base_chain is not None:
            raise CorruptObject("segment: names both a base segment and a base chain", oid)
        if (base is None and base_chain is None) != (keep == 0):
            raise CorruptObject("segment: keep and base disagree", oid)
        return new_tuple(cls, (messages, keep, base, base_chain))


MAX_TREE_NAME_BYTES = 4096
"""The longest reference name a tree may hold (UTF-8 bytes)."""

_KINDS_BY_NAME = {kind.value: kind for kind in Kind}


class TreeNode:
    """A generic structure: named, typed references plus small inline data.

    Integrations keep their structured objects as trees (a LangGraph checkpoint with its
    channel values and pending writes is one): ``refs`` maps a name to the kind and oid it
    points at, so gc, fsck, pack and sync follow every reference without knowing the
    integration, and ``data`` is any JSON value kept inline (None: no data). The body is
    the canonical JSON ``{"data": ..., "refs": {name: [kind, oid], ...}}`` with an empty
    member omitted; the parser refuses any body that is not exactly that canonical form
    (whitespace, key order, duplicate keys, escapes), so one tree has one oid.
    """

    __slots__ = ("_data", "_refs")

    FIELDS = frozenset({"data", "refs"})

    def __init__(
        self, refs: Mapping[str, tuple[Kind | str, str]] | None = None, data: Any = None
    ) -> None:
        checked: dict[str, tuple[Kind, str]] = {}
        for name, ref in (refs or {}).items():
            kind, oid = ref
            if not isinstance(name, str) or not name or not is_oid(oid):
                raise InvalidInputError(f"tree reference {name!r} is not a name and an oid")
            checked[name] = (Kind(kind), oid)
        self._refs = checked
        self._data = data

    @property
    def refs(self) -> Mapping[str, tuple[Kind, str]]:
        """Name -> (kind, oid) of every reference."""
        return self._refs

    @property
    def data(self) -> Any:
        """The inline JSON value (None: no data)."""
        return self._data

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, TreeNode):
            return NotImplemented
        return (self._refs, self._data) == (other._refs, other._data)

    def __repr__(self) -> str:
        return f"TreeNode(refs={self._refs!r}, data={self._data!r})"

    def body(self) -> bytes:
        """Canonical JSON body of this tree."""
        fields: dict[str, Any] = {}
        if self.data is not None:
            fields["data"] = self.data
        if self.refs:
            fields["refs"] = {name: [kind.value, oid] for name, (kind, oid) in self.refs.items()}
        return canonical_json(fields)

    def references(self) -> list[str]:
        """Oids this tree points at, in name order."""
        return [oid for _, (_, oid) in sorted(self.refs.items())]

    def typed_references(self) -> list[tuple[str, Kind]]:
        """Oids this tree points at, with the kind each must be, in name order."""
        return [(oid, kind) for _, (kind, oid) in sorted(self.refs.items())]

    @classmethod
    def parse(cls, body: bytes, oid: str | None = None) -> TreeNode:
        """Parse and validate a tree body (which must be in canonical form)."""
        r = _Reader(oid, body, "tree")
        r.only(cls.FIELDS)
        raw_refs = r.dict_field("refs")
        if "refs" in r.value and not raw_refs:
            raise r.fail("empty refs member (the canonical form omits it)")
        if "data" in r.value and r.value["data"] is None:
            raise r.fail("null data member (the canonical form omits it)")
        refs: dict[str, tuple[Kind, str]] = {}
        for name, ref in raw_refs.items():
            if not name or len(name.encode("utf-8", "surrogatepass")) > MAX_TREE_NAME_BYTES:
                raise r.fail("reference name is empty or too long")
            if not isinstance(ref, list) or len(ref) != 2 or not isinstance(ref[0], str):
                raise r.fail(f"reference {name[:80]!r} is not [kind, oid]")
            if ref[0] not in _KINDS_BY_NAME:
                raise r.fail(f"reference {name[:80]!r} is not [kind, oid]")
            if not is_oid(ref[1]):
                raise r.fail(f"reference {name[:80]!r} does not hold an object id")
            refs[name] = (_KINDS_BY_NAME[ref[0]], ref[1])
        node = cls.__new__(cls)  # (the references are checked above: not checked twice)
        node._refs, node._data = refs, r.value.get("data")
        try:
            canonical = node.body()
        except (InvalidInputError, RecursionError) as exc:
            raise r.fail(f"data is not canonical JSON: {exc}") from exc
        if canonical != body:
            raise r.fail("body is not in canonical form")
        return node


Node = EntryNode | ThreadStateNode | CheckpointNode | MessageNode | TreeNode | SegmentNode

_PARSERS: dict[Kind, Any] = {
    Kind.ENTRY: EntryNode.parse,
    Kind.THREAD: ThreadStateNode.parse,
    Kind.CHECKPOINT: CheckpointNode.parse,
    Kind.MESSAGE: MessageNode.parse,
    Kind.TREE: TreeNode.parse,
    Kind.SEGMENT: SegmentNode.parse,
}


def parse_node(kind: Kind, body: bytes, oid: str | None = None) -> Node | None:
    """Parse a structured object; blobs (opaque bytes) give None."""
    parser = _PARSERS.get(kind)
    return None if parser is None else parser(body, oid)


def references(kind: Kind, body: bytes, oid: str | None = None) -> list[str]:
    """The oids an object points at (none for blobs). Raises CorruptObject if malformed."""
    node = parse_node(kind, body, oid)
    return [] if node is None else node.references()


def typed_references(kind: Kind, body: bytes, oid: str | None = None) -> list[tuple[str, Kind]]:
    """The oids an object points at with the kind each must be (none for blobs)."""
    node = parse_node(kind, body, oid)
    return [] if node is None else node.typed_references()
