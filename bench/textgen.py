"""Deterministic, realistic-looking text: prose from a small grammar, code from templates.

Everything is driven by a ``random.Random`` the caller seeds, so the same seed gives the
same bytes on every machine and Python version (only ``random.Random`` methods whose
output is stable across versions are used: ``random``, ``randrange``, ``choice``).
The text compresses the way agent transcripts do (a few x with zstd), unlike random
bytes (incompressible) or one repeated sentence (compresses ~100x).
"""

from __future__ import annotations

import random

NOUNS = (
    "buffer",
    "cache",
    "client",
    "config",
    "context",
    "cursor",
    "database",
    "deadline",
    "decoder",
    "directory",
    "entry",
    "error",
    "event",
    "field",
    "file",
    "fixture",
    "function",
    "handler",
    "header",
    "index",
    "iterator",
    "journal",
    "key",
    "layer",
    "lease",
    "limit",
    "lock",
    "message",
    "method",
    "module",
    "node",
    "object",
    "offset",
    "option",
    "pack",
    "parser",
    "path",
    "payload",
    "pointer",
    "process",
    "queue",
    "reader",
    "record",
    "ref",
    "request",
    "response",
    "result",
    "retry",
    "schema",
    "session",
    "signal",
    "snapshot",
    "socket",
    "stream",
    "string",
    "table",
    "task",
    "test",
    "thread",
    "timeout",
    "token",
    "tree",
    "type",
    "user",
    "value",
    "version",
    "worker",
    "writer",
    "branch",
    "commit",
    "checkpoint",
    "frame",
)
VERBS = (
    "add",
    "allocate",
    "append",
    "build",
    "cache",
    "check",
    "close",
    "collect",
    "compare",
    "compress",
    "copy",
    "create",
    "decode",
    "delete",
    "detect",
    "emit",
    "encode",
    "ensure",
    "fetch",
    "find",
    "flush",
    "fork",
    "handle",
    "hash",
    "ignore",
    "load",
    "lock",
    "merge",
    "move",
    "open",
    "pack",
    "parse",
    "read",
    "record",
    "refresh",
    "release",
    "rename",
    "replace",
    "resolve",
    "retry",
    "return",
    "reuse",
    "rewrite",
    "scan",
    "send",
    "skip",
    "sort",
    "split",
    "store",
    "sync",
    "track",
    "truncate",
    "update",
    "validate",
    "verify",
    "walk",
    "wrap",
    "write",
)
ADJECTIVES = (
    "atomic",
    "broken",
    "cached",
    "canonical",
    "concurrent",
    "current",
    "deterministic",
    "durable",
    "empty",
    "expensive",
    "explicit",
    "external",
    "failing",
    "fresh",
    "hidden",
    "idempotent",
    "immutable",
    "incremental",
    "internal",
    "large",
    "local",
    "missing",
    "mutable",
    "nested",
    "new",
    "obsolete",
    "old",
    "optional",
    "partial",
    "pending",
    "previous",
    "private",
    "public",
    "recent",
    "redundant",
    "remote",
    "shared",
    "slow",
    "small",
    "stale",
    "strict",
    "temporary",
    "unique",
    "unused",
    "valid",
)
ADVERBS = (
    "already",
    "carefully",
    "eventually",
    "first",
    "instead",
    "later",
    "now",
    "only",
    "quickly",
    "still",
)
CONNECTIVES = (
    "because",
    "so",
    "but",
    "although",
    "while",
    "when",
    "unless",
    "and then",
    "since",
)
OPENERS = (
    "I think",
    "It looks like",
    "The problem is that",
    "As far as I can tell,",
    "Note that",
    "In this case",
    "After the change,",
    "Before we continue,",
    "To be safe,",
    "Otherwise",
    "Right now",
    "The test shows that",
)
PY_TYPES = ("str", "int", "bytes", "bool", "float", "Path", "dict[str, Any]", "list[str]")
EXTS = (".py", ".py", ".py", ".go", ".ts", ".md", ".toml", ".json")


def _ident(rng: random.Random, parts: int = 2) -> str:
    words = [rng.choice(VERBS if i == 0 else NOUNS) for i in range(parts)]
    return "_".join(words)


def _camel(rng: random.Random) -> str:
    return rng.choice(ADJECTIVES).capitalize() + rng.choice(NOUNS).capitalize()


def sentence(rng: random.Random) -> str:
    """One prose sentence from a tiny grammar."""
    subject = f"the {rng.choice(ADJECTIVES)} {rng.choice(NOUNS)}"
    verb = rng.choice(VERBS)
    obj = f"the {rng.choice(NOUNS)}"
    form = rng.randrange(6)
    if form == 0:
        text = f"{subject} should {verb} {obj}"
    elif form == 1:
        text = f"{rng.choice(OPENERS)} {subject} does not {verb} {obj}"
    elif form == 2:
        text = (
            f"{subject} will {rng.choice(ADVERBS)} {verb} {obj} "
            f"{rng.choice(CONNECTIVES)} {rng.choice(NOUNS)}s are {rng.choice(ADJECTIVES)}"
        )
    elif form == 3:
        text = f"we need to {verb} {obj} in `{_ident(rng)}` before the {rng.choice(NOUNS)}"
    elif form == 4:
        text = (
            f"{rng.choice(OPENERS)} `{_camel(rng)}.{_ident(rng)}` can {verb} "
            f"{rng.randrange(2, 400)} {rng.choice(NOUNS)}s"
        )
    else:
        text = f"if {subject} is {rng.choice(ADJECTIVES)}, {verb} {obj} and {rng.choice(VERBS)} it"
    return text[0].upper() + text[1:] + rng.choice(".....?!")


def paragraph(rng: random.Random, sentences: int) -> str:
    """Several sentences joined into one paragraph."""
    return " ".join(sentence(rng) for _ in range(sentences))


def prose(rng: random.Random, size: int) -> str:
    """Prose of about ``size`` characters: paragraphs, sometimes a bullet list."""
    out: list[str] = []
    total = 0
    while total < size:
        if rng.randrange(4) == 0:
            block = "\n".join(f"- {sentence(rng)}" for _ in range(rng.randrange(2, 5)))
        else:
            block = paragraph(rng, rng.randrange(2, 6))
        out.append(block)
        total += len(block) + 2
    return "\n\n".join(out)[: max(size, 1)]


def code_function(rng: random.Random) -> str:
    """One Python-like function with a docstring, branches and a loop."""
    name = _ident(rng, rng.randrange(2, 4))
    args = [rng.choice(NOUNS) for _ in range(rng.randrange(1, 4))]
    sig = ", ".join(f"{a}: {rng.choice(PY_TYPES)}" for a in dict.fromkeys(args))
    lines = [f"def {name}({sig}) -> {rng.choice(PY_TYPES)}:", f'    """{sentence(rng)}"""']
    var = rng.choice(NOUNS)
    for _ in range(rng.randrange(2, 7)):
        kind = rng.randrange(5)
        if kind == 0:
            lines.append(f"    if {var} is None or not {rng.choice(NOUNS)}.{_ident(rng)}():")
            error = _camel(rng)
            lines.append(f'        raise {error}Error(f"cannot {rng.choice(VERBS)} {{{var}!r}}")')
        elif kind == 1:
            lines.append(f"    for {rng.choice(NOUNS)} in self.{rng.choice(NOUNS)}s:")
            lines.append(f"        {var} = {_ident(rng)}({var}, {rng.randrange(64)})")
        elif kind == 2:
            lines.append(f"    # {sentence(rng)}")
            lines.append(f"    {var} = self.{rng.choice(NOUNS)}.get({rng.choice(NOUNS)!r}, {var})")
        elif kind == 3:
            opener = _ident(rng)
            lines.append(f"    with {opener}(self.{rng.choice(NOUNS)}) as {rng.choice(NOUNS)}:")
            lines.append(f"        {rng.choice(NOUNS)}.{rng.choice(VERBS)}({var})")
        else:
            a, b, c = rng.choice(NOUNS), rng.choice(NOUNS), rng.choice(NOUNS)
            lines.append(f"    {var} = [{a} for {b} in {var} if {c}]")
    lines.append(f"    return {var}")
    return "\n".join(lines)


def code_file(rng: random.Random, size: int) -> str:
    """A Python-like source file of about ``size`` characters."""
    out = [f'"""{sentence(rng)}"""', "", "from __future__ import annotations", ""]
    out += [f"import {rng.choice(NOUNS)}" for _ in range(rng.randrange(1, 4))]
    total = sum(len(x) + 1 for x in out)
    while total < size:
        if rng.randrange(5) == 0:
            block = f'\n\nclass {_camel(rng)}:\n    """{sentence(rng)}"""\n'
        else:
            block = "\n\n" + code_function(rng)
        out.append(block)
        total += len(block) + 1
    return "\n".join(out)[:size]


def file_path(rng: random.Random) -> str:
    """A plausible repository path."""
    parts = [rng.choice(("src", "pkg", "lib", "internal", "app"))]
    parts += [rng.choice(NOUNS) for _ in range(rng.randrange(1, 3))]
    return "/".join(parts) + "/" + _ident(rng) + rng.choice(EXTS)


def grep_output(rng: random.Random, size: int) -> str:
    """``path:line: code`` lines as a search tool prints them."""
    lines: list[str] = []
    total = 0
    paths = [file_path(rng) for _ in range(rng.randrange(2, 9))]
    while total < size:
        line = (
            f"{rng.choice(paths)}:{rng.randrange(1, 900)}:    "
            f"{rng.choice(NOUNS)} = {_ident(rng)}(self.{rng.choice(NOUNS)}, {rng.choice(NOUNS)})"
        )
        lines.append(line)
        total += len(line) + 1
    return "\n".join(lines)[:size]


def test_output(rng: random.Random, size: int) -> str:
    """A pytest-like run log with passes, a failure and a traceback."""
    lines = ["============================= test session starts =============================="]
    total = len(lines[0])
    while total < size:
        roll = rng.randrange(10)
        if roll < 7:
            name = f"tests/test_{rng.choice(NOUNS)}.py::test_{_ident(rng)}"
            line = f"{name} PASSED [{rng.randrange(100):3d}%]"
        elif roll < 9:
            line = f"tests/test_{rng.choice(NOUNS)}.py::test_{_ident(rng)} FAILED"
        else:
            line = (
                f"E       AssertionError: expected {rng.randrange(1000)} {rng.choice(NOUNS)}s, "
                f"got {rng.randrange(1000)}\n    {code_function(rng).splitlines()[2]}"
            )
        lines.append(line)
        total += len(line) + 1
    return "\n".join(lines)[:size]


def log_uniform(rng: random.Random, low: int, high: int) -> int:
    """An integer between low and high, uniform on a log scale (many small, few large)."""
    import math

    return int(math.exp(math.log(low) + rng.random() * (math.log(high) - math.log(low))))


def system_prompt(seed: int, size: int = 4096) -> str:
    """The shared system prompt of a workload: instructions, tool list, conventions."""
    rng = random.Random(seed)
    head = "You are a coding agent working in a repository. Follow these rules.\n\n"
    tools = "\n".join(
        f"- {name}: {sentence(rng)}"
        for name in ("read_file", "write_file", "grep", "run_tests", "shell", "ask_user")
    )
    body = head + "## Tools\n" + tools + "\n\n## Conventions\n" + prose(rng, size)
    return body[:size]
