"""Deterministic workload generators shared by every system.

Every generator is a pure function of its seed and the scale, so each system (run in its
own process) replays exactly the same work. Messages are system-neutral ``Msg`` records;
each adapter maps them to its own format.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from . import textgen as tg

EPOCH = 1_735_689_600.0
"""2025-01-01T00:00:00Z: workload timestamps are EPOCH + a deterministic offset."""


@dataclass(frozen=True)
class Scale:
    """Sizes of every workload for one scale name."""

    name: str
    base_entries: int
    forks: int
    fork_entries: int
    fork_snapshots: tuple[int, ...]
    deep_entries: int
    batch_size: int
    fork_history: tuple[int, ...]
    forks_per_history: int
    checkpoint_iterations: int
    many_threads: int
    path_reads: int
    cold_runs: int


SCALES: dict[str, Scale] = {
    "small": Scale(
        name="small",
        base_entries=100,
        forks=40,
        fork_entries=10,
        fork_snapshots=(0, 5, 10, 20, 40),
        deep_entries=400,
        batch_size=100,
        fork_history=(100, 200, 400),
        forks_per_history=3,
        checkpoint_iterations=40,
        many_threads=1_000,
        path_reads=3,
        cold_runs=1,
    ),
    "full": Scale(
        name="full",
        base_entries=300,
        forks=200,
        fork_entries=20,
        fork_snapshots=(0, 25, 50, 100, 200),
        deep_entries=10_000,
        batch_size=100,
        fork_history=(100, 1_000, 10_000),
        forks_per_history=5,
        checkpoint_iterations=250,
        many_threads=100_000,
        path_reads=5,
        cold_runs=7,
    ),
}


@dataclass(frozen=True, slots=True)
class Msg:
    """One journal entry's payload, independent of any storage format."""

    role: str
    """system, user, assistant or tool."""
    content: str
    turn_id: str
    created_at: float
    tool_name: str = ""
    tool_call_id: str = ""
    tool_args: str = ""

    def size(self) -> int:
        """Payload bytes (content plus tool arguments), for reporting logical volume."""
        return len(self.content.encode()) + len(self.tool_args.encode())


class FilePool:
    """Repository files that tool calls read; the same file read twice is the same bytes."""

    def __init__(self, seed: int, count: int = 48) -> None:
        rng = random.Random(seed)
        self.files: list[tuple[str, str]] = []
        for _ in range(count):
            path = tg.file_path(rng)
            size = tg.log_uniform(rng, 1_000, 30_000)
            code = path.endswith((".py", ".go", ".ts"))
            body = tg.code_file(rng, size) if code else tg.prose(rng, size)
            self.files.append((path, body))


class Conversation:
    """An endless, deterministic agent transcript: user turns, tool cycles, answers."""

    def __init__(self, seed: int, pool: FilePool, start: float, prefix: str) -> None:
        self.rng = random.Random(seed)
        self.pool = pool
        self.clock = start
        self.prefix = prefix
        self.turn = 0
        self.calls = 0

    def _tick(self) -> float:
        self.clock += 1.0 + self.rng.randrange(20)
        return self.clock

    def _tool_result(self) -> tuple[str, str, str]:
        rng = self.rng
        roll = rng.randrange(10)
        if roll < 5:
            path, body = rng.choice(self.pool.files)
            return "read_file", json.dumps({"path": path}), body
        size = tg.log_uniform(rng, 1_000, 30_000)
        if roll < 7:
            return "grep", json.dumps({"pattern": tg._ident(rng)}), tg.grep_output(rng, size)
        if roll < 9:
            return "run_tests", json.dumps({"args": ["-q", "-x"]}), tg.test_output(rng, size)
        return "shell", json.dumps({"cmd": f"ls -la {tg.file_path(rng)}"}), tg.prose(rng, size)

    def turn_messages(self) -> Iterator[Msg]:
        """One user turn: the question, 0-4 tool cycles, the final answer."""
        rng = self.rng
        self.turn += 1
        turn_id = f"{self.prefix}-turn-{self.turn}"
        yield Msg("user", tg.prose(rng, rng.randrange(50, 400)), turn_id, self._tick())
        for _ in range(rng.randrange(0, 5)):
            self.calls += 1
            call_id = f"call_{self.prefix}_{self.calls}"
            name, args, result = self._tool_result()
            text = tg.prose(rng, tg.log_uniform(rng, 200, 1_000))
            yield Msg("assistant", text, turn_id, self._tick(), name, call_id, args)
            yield Msg("tool", result, turn_id, self._tick(), name, call_id)
        answer = tg.prose(rng, tg.log_uniform(rng, 200, 3_000))
        yield Msg("assistant", answer, turn_id, self._tick())

    def take(self, count: int) -> list[Msg]:
        """The next ``count`` messages (a turn may be cut at the end)."""
        out: list[Msg] = []
        while len(out) < count:
            for msg in self.turn_messages():
                out.append(msg)
                if len(out) == count:
                    break
        return out

    def stream(self) -> Iterator[Msg]:
        """Messages forever."""
        while True:
            yield from self.turn_messages()


def system_message(seed: int, created_at: float) -> Msg:
    """The shared ~4 KB system prompt as the first entry of a thread."""
    return Msg("system", tg.system_prompt(seed), "setup", created_at)


# -- workload 1: forks ---------------------------------------------------------------------


@dataclass(frozen=True)
class ForkSpec:
    """Fork ``source`` at path position ``at`` into ``thread``, then append entries."""

    index: int
    source: str
    at: int
    thread: str


@dataclass
class ForkPlan:
    """The base thread, the forks in order, and when to measure stored bytes."""

    scale: Scale
    seed: int
    pool: FilePool
    base: list[Msg]
    forks: list[ForkSpec] = field(default_factory=list)

    def fork_entries(self, spec: ForkSpec) -> list[Msg]:
        """The entries a fork appends after it is created (generated on demand)."""
        conv = Conversation(
            self.seed * 1000 + spec.index,
            self.pool,
            EPOCH + 10_000_000 + spec.index * 10_000,
            f"f{spec.index}",
        )
        return conv.take(self.scale.fork_entries)


def fork_plan(scale: Scale, seed: int = 1) -> ForkPlan:
    """Workload 1: a base thread and forks at random points of earlier threads."""
    pool = FilePool(seed)
    conv = Conversation(seed, pool, EPOCH, "base")
    base = [system_message(seed, EPOCH), *conv.take(scale.base_entries - 1)]
    plan = ForkPlan(scale, seed, pool, base)
    rng = random.Random(seed + 7)
    lengths = {"base": len(base)}
    for i in range(scale.forks):
        # mostly fork the base thread, sometimes a fork (a tree, not a star)
        source = "base" if not plan.forks or rng.random() < 0.7 else rng.choice(plan.forks).thread
        at = rng.randrange(1, lengths[source])
        spec = ForkSpec(i, source, at, f"fork-{i:04d}")
        plan.forks.append(spec)
        lengths[spec.thread] = at + 1 + scale.fork_entries
    return plan


# -- workload 2: deep ----------------------------------------------------------------------


def deep_entries(scale: Scale, seed: int = 2) -> Iterator[Msg]:
    """Workload 2: one long thread (system prompt, then turns)."""
    pool = FilePool(seed)
    yield system_message(seed, EPOCH)
    stream = Conversation(seed, pool, EPOCH, "deep").stream()
    for _ in range(scale.deep_entries - 1):
        yield next(stream)


def batch_entries(scale: Scale, seed: int = 3) -> Iterator[list[Msg]]:
    """Different content of the same shape, in batches (for batched-append throughput)."""
    pool = FilePool(seed)
    stream = Conversation(seed, pool, EPOCH + 50_000_000, "batch").stream()
    batch: list[Msg] = [system_message(seed, EPOCH + 50_000_000)]
    for _ in range(scale.deep_entries - 1):
        batch.append(next(stream))
        if len(batch) == scale.batch_size:
            yield batch
            batch = []
    if batch:
        yield batch


# -- workload 3: checkpoints ---------------------------------------------------------------


def anthropic_message(rng: random.Random, index: int) -> dict[str, Any]:
    """One ~2 KB Anthropic-style message dict; roles alternate user/assistant."""
    size = rng.randrange(1_500, 2_600)
    if index % 2 == 1:
        tool_id = f"toolu_{index:06d}{rng.randrange(10**8):08d}"
        return {
            "role": "assistant",
            "content": [
                {"type": "text", "text": tg.prose(rng, size - 200)},
                {
                    "type": "tool_use",
                    "id": tool_id,
                    "name": "read_file",
                    "input": {"path": tg.file_path(rng)},
                },
            ],
        }
    if index == 0 or rng.randrange(4) == 0:
        return {"role": "user", "content": tg.prose(rng, size)}
    body = tg.code_file(rng, size) if rng.randrange(2) else tg.grep_output(rng, size)
    return {
        "role": "user",
        "content": [
            {"type": "tool_result", "tool_use_id": f"toolu_{index - 1:06d}", "content": body}
        ],
    }


@dataclass(frozen=True)
class CheckpointStep:
    """One iteration of a run: the new messages and the token counters after it."""

    iteration: int
    new_messages: list[dict[str, Any]]
    input_tokens: int
    output_tokens: int
    created_at: float


def checkpoint_steps(scale: Scale, seed: int = 4) -> Iterator[CheckpointStep]:
    """Workload 3: each iteration adds 3 messages to the run's cumulative list."""
    rng = random.Random(seed)
    index = 0
    tokens_in = tokens_out = 0
    for it in range(1, scale.checkpoint_iterations + 1):
        new = []
        for _ in range(3):
            new.append(anthropic_message(rng, index))
            index += 1
        tokens_in += 600 * it
        tokens_out += rng.randrange(100, 900)
        yield CheckpointStep(it, new, tokens_in, tokens_out, EPOCH + 30.0 * it)


def checkpoint_system_prompt(seed: int = 4) -> str:
    """The run's system prompt (saved with every checkpoint)."""
    return tg.system_prompt(seed)


# -- workload 4: many threads --------------------------------------------------------------


@dataclass(frozen=True)
class SmallThread:
    """A short thread: id, creation time, title, a question and an answer."""

    thread_id: str
    created_at: float
    title: str
    messages: tuple[Msg, ...]


def small_threads(scale: Scale, seed: int = 5) -> Iterator[SmallThread]:
    """Workload 4: many small threads, created one after another (newest last)."""
    rng = random.Random(seed)
    for i in range(scale.many_threads):
        created = EPOCH + 60.0 * i
        turn = f"t{i}-turn-1"
        user = Msg("user", tg.prose(rng, rng.randrange(50, 400)), turn, created + 1)
        answer = Msg("assistant", tg.prose(rng, rng.randrange(200, 1_000)), turn, created + 5)
        title = tg.sentence(rng)[:60]
        yield SmallThread(f"thread-{i:06d}", created, title, (user, answer))
