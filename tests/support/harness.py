"""Crash-consistency harness: a child process works on a local store, the parent kills it.

The child (forked, so a kill cycle costs milliseconds) runs a random mix of journal and
maintenance operations. Before each call it writes an *intent* line to an
acknowledgement log, and after the call returns it writes an *ack* line describing
what is now committed; both are fsynced. The parent SIGKILLs the child at a random
moment (a random delay, or exactly at the Nth file-system call of an operation), then
reopens the store and checks it against the log:

* ``fsck`` (full) is clean on the store and on the sync mirror;
* every acknowledged write is readable: entries reachable from their thread with the
  right content, parent and depth; forks exist; checkpoints load with the right messages;
  deleted threads and runs are gone;
* nothing unacknowledged is half-visible: the only difference from the acknowledged
  state may be the one operation in flight, entirely applied or not at all (a batch is
  all-or-nothing, a thread's path is always a valid chain, no thread is listed twice).

The verifier then records the in-flight operation's outcome in the log (``resolved``),
so the next child starts from exactly what the store holds. Used by tests/test_crash.py
(CI) and bench/soak.py (the long run).
"""

from __future__ import annotations

import contextlib
import itertools
import json
import mmap
import os
import random
import shutil
import signal
import sqlite3
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import blake3

import cas_journal as cj
from cas_journal.backends import LocalStore
from cas_journal.maintenance import fsck, gc, pack, sync
from cas_journal.objects import canonical_json

Record = dict[str, Any]

# -- the acknowledgement log -----------------------------------------------------------


class AckLog:
    """Append-only JSON lines, each written with one ``write`` and fsynced."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def write(self, record: Record) -> None:
        """Append one record durably (newline first: a torn record never swallows the next)."""
        data = ("\n" + json.dumps(record, sort_keys=True)).encode("utf-8")
        written = _REAL_WRITE(self.fd, data)
        assert written == len(data)
        _REAL_FSYNC(self.fd)

    def close(self) -> None:
        """Close the log."""
        os.close(self.fd)


def read_log(path: Path) -> list[Record]:
    """Every complete record of a log (a line torn by a kill is dropped)."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return []
    records = []
    for line in data.split(b"\n"):
        if line:
            try:
                records.append(json.loads(line))
            except ValueError:
                continue  # torn by a kill mid-write: that record was never acknowledged
    return records


def digest(messages: list[dict[str, Any]]) -> str:
    """A short fingerprint of a checkpoint's message list."""
    return blake3.blake3(canonical_json(messages)).hexdigest()[:24]


# -- the model: what the acknowledged log says is committed -----------------------------


@dataclass
class ThreadModel:
    """A thread as acknowledged."""

    entries: set[str] = field(default_factory=set)
    leaf: str | None = None
    forked_from: str = ""
    deleted: bool = False


@dataclass
class RunModel:
    """A checkpoint run as acknowledged: saves since its last delete, oldest first."""

    saves: list[tuple[int, int, str]] = field(default_factory=list)
    messages: list[dict[str, Any]] = field(default_factory=list)
    deleted: bool = False


@dataclass
class Model:
    """The acknowledged state, replayed from the log."""

    nodes: dict[str, tuple[str, int, str]] = field(default_factory=dict)
    """entry id -> (parent id or "", depth, content)."""
    threads: dict[str, ThreadModel] = field(default_factory=dict)
    runs: dict[str, RunModel] = field(default_factory=dict)
    mirror_entries: dict[str, set[str]] = field(default_factory=dict)
    mirror_runs: dict[str, set[int]] = field(default_factory=dict)
    counter: int = 0
    """How many records were applied (names of new things derive from it)."""

    def live_threads(self) -> list[str]:
        """Ids of threads that exist, sorted."""
        return sorted(t for t, m in self.threads.items() if not m.deleted)

    def ancestors(self, entry: str | None) -> set[str]:
        """The entry and its ancestors."""
        out: set[str] = set()
        while entry:
            out.add(entry)
            entry = self.nodes[entry][0]
        return out

    def apply(self, record: Record) -> None:
        """Apply one acknowledged (or resolved) record."""
        self.counter += 1
        op = record["op"]
        if op == "create":
            self.threads[record["thread"]] = ThreadModel()
        elif op == "append":
            self._add_entries(record["thread"], [record["entry"]])
        elif op == "batch":
            self._add_entries(record["thread"], record["entries"])
        elif op == "fork":
            at = record["at"]
            self.threads[record["thread"]] = ThreadModel(
                entries=self.ancestors(at), leaf=at, forked_from=at or ""
            )
        elif op == "move":
            self.threads[record["thread"]].leaf = record["to"]
        elif op == "delete":
            self.threads[record["thread"]].deleted = True
        elif op == "ckpt":
            run = self.runs.setdefault(record["run"], RunModel())
            if run.deleted:
                run.saves, run.deleted = [], False
            run.saves.append((record["iteration"], record["count"], record["digest"]))
            run.messages = record["messages"]
        elif op == "ckdel":
            self.runs[record["run"]].deleted = True
        elif op == "sync":
            for thread_id in self.live_threads():
                self.mirror_entries.setdefault(thread_id, set()).update(
                    self.threads[thread_id].entries
                )
            for run_id, run in self.runs.items():
                if not run.deleted and run.saves:
                    self.mirror_runs.setdefault(run_id, set()).update(i for i, _, _ in run.saves)

    def _add_entries(self, thread_id: str, entries: list[list[Any]]) -> None:
        thread = self.threads[thread_id]
        for entry_id, parent, depth, content in entries:
            self.nodes[entry_id] = (parent, depth, content)
            thread.entries.add(entry_id)
            thread.leaf = entry_id


def replay(records: list[Record]) -> tuple[Model, Record | None]:
    """The model of every ack/resolved record, and the intent left in flight (if any)."""
    model = Model()
    pending: Record | None = None
    for record in records:
        if "intent" in record:
            pending = record["intent"]
        elif "error" in record:
            continue
        else:
            model.apply(record)
            pending = None
    return model, pending


# -- the child: a random workload that acknowledges what it did -------------------------

_REAL_WRITE = os.write
_REAL_FSYNC = os.fsync
_PATCHED = ("write", "replace", "rename", "unlink", "fsync", "open", "utime", "mkdir")
_REAL_CONNECT = sqlite3.connect
COMMIT_KILL_WINDOW = 0.002
"""A kill aimed at a COMMIT lands this many seconds after it starts, at most (inside
SQLite's write of the WAL frames and its fsync, or just after)."""


class LastEvent:
    """One byte shared with the parent: the kind of the last event the child traced
    (``b"C"`` a COMMIT began, ``b"S"`` another SQL statement, ``b"O"`` a file-system call),
    so the parent can tell where a kill landed."""

    def __init__(self) -> None:
        self.memory = mmap.mmap(-1, 1)

    def set(self, kind: bytes) -> None:
        self.memory[0:1] = kind

    def get(self) -> bytes:
        return self.memory[0:1]


class SyscallTrap:
    """Counts events inside operations (file-system calls the store makes through ``os``
    and SQL statements it runs through ``sqlite3``) and SIGKILLs the process at event N.

    ``kill_at`` N > 0 kills right before the Nth event. N < 0 kills right after the Nth
    event; when that event is an SQL statement (which runs in C, out of reach), a watchdog
    thread kills at a random moment within ``COMMIT_KILL_WINDOW`` of its start: for a
    COMMIT, inside SQLite's own writes and syncs (the statement releases the GIL)."""

    def __init__(self, kill_at: int, last: LastEvent | None = None, seed: int = 0) -> None:
        self.kill_at = kill_at
        self.calls = 0
        self.armed = False
        self.last = last
        self.rng = random.Random(seed)

    def install(self) -> None:
        """Wrap the os functions the store writes through, and sqlite3.connect so that
        every connection opened from now on reports its statements."""
        for name in _PATCHED:
            setattr(os, name, self._wrap(getattr(os, name)))

        def connect(*args: Any, **kwargs: Any) -> sqlite3.Connection:
            conn = _REAL_CONNECT(*args, **kwargs)
            conn.set_trace_callback(self._statement)
            return conn

        sqlite3.connect = connect  # type: ignore[assignment]

    def _note(self, kind: bytes) -> None:
        if self.last is not None:
            self.last.set(kind)

    def _statement(self, sql: str) -> None:
        if not self.armed:
            return
        self.calls += 1
        self._note(b"C" if sql.strip().upper() == "COMMIT" else b"S")
        if self.calls == self.kill_at:
            os.kill(os.getpid(), signal.SIGKILL)
        if self.calls == -self.kill_at:
            delay = self.rng.uniform(0, COMMIT_KILL_WINDOW)
            threading.Thread(target=_kill_after, args=(delay,), daemon=True).start()

    def _wrap(self, real: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if self.armed:
                self.calls += 1
                self._note(b"O")
                if self.calls == self.kill_at:
                    os.kill(os.getpid(), signal.SIGKILL)
                if self.calls == -self.kill_at:  # negative: right after the call
                    result = real(*args, **kwargs)
                    os.kill(os.getpid(), signal.SIGKILL)
                    return result
            return real(*args, **kwargs)

        return wrapper

    @contextlib.contextmanager
    def operation(self) -> Iterator[None]:
        """Count calls only inside an operation (not while logging)."""
        self.armed = True
        try:
            yield
        finally:
            self.armed = False
            self._note(b"-")


def _kill_after(delay: float) -> None:
    time.sleep(delay)
    os.kill(os.getpid(), signal.SIGKILL)


def _message(content: str) -> cj.Entry:
    return cj.Entry(
        type=cj.EntryType.USER_MESSAGE, message=cj.Message(role="user", content=content)
    )


COMMON_PREFIX = [{"role": "system", "content": "You are a careful agent. " * 8}] + [
    {"role": "user", "content": f"shared task step {i} " * 6} for i in range(6)
]
"""Every run starts from these messages, so runs share message nodes (dedup across runs)."""


class Worker:
    """Runs random operations on the store, logging intents and acknowledgements."""

    def __init__(
        self,
        store_path: Path,
        mirror_path: Path,
        log: AckLog,
        model: Model,
        rng: random.Random,
        durable: bool,
        trap: SyscallTrap | None,
    ) -> None:
        self.journal = cj.Journal.open(store_path, durable=durable)
        self.mirror_path = mirror_path
        self.durable = durable
        self.log = log
        self.model = model
        self.rng = rng
        self.trap = trap
        self.serial = model.counter

    def name(self, prefix: str) -> str:
        """A new unique name."""
        self.serial += 1
        return f"{prefix}{self.serial}-{self.rng.randrange(10**6)}"

    def content(self, big: bool = True) -> str:
        """A unique message text, sometimes large (a big blob)."""
        text = self.name("msg")
        if big and self.rng.random() < 0.05:
            text += " " + "lorem ipsum dolor " * self.rng.randrange(300, 1500)
        return text

    @contextlib.contextmanager
    def op(self, intent: Record) -> Iterator[None]:
        self.log.write({"intent": intent})
        if self.trap is None:
            yield
        else:
            with self.trap.operation():
                yield

    def ack(self, record: Record) -> None:
        self.log.write(record)
        self.model.apply(record)

    def step(self) -> None:
        """One random operation."""
        live = self.model.live_threads()
        choices: list[tuple[float, Callable[[], None]]] = [
            (3 if len(live) < 6 else 0.5, self.create),
            (30 if live else 0, self.append),
            (10 if live else 0, self.batch),
            (6 if live else 0, self.fork),
            (5 if live else 0, self.move),
            (3 if len(live) > 2 else 0, self.delete),
            (14, self.checkpoint),
            (3 if self.model.runs else 0, self.delete_run),
            (5, self.pack),
            (6, self.gc),
            (5, self.sync),
        ]
        weights = [w for w, _ in choices]
        action = self.rng.choices([f for _, f in choices], weights)[0]
        action()

    def create(self) -> None:
        deleted = [t for t, m in self.model.threads.items() if m.deleted]
        thread_id = (
            self.rng.choice(deleted)  # an id that existed before: recreated afresh
            if deleted and self.rng.random() < 0.3
            else self.name("t")
        )
        with self.op({"op": "create", "thread": thread_id}):
            self.journal.create_thread(cj.ThreadMeta(id=thread_id))
        self.ack({"op": "create", "thread": thread_id})

    def append(self) -> None:
        thread_id = self.rng.choice(self.model.live_threads())
        thread = self.model.threads[thread_id]
        explicit = None
        if thread.entries and self.rng.random() < 0.15:
            explicit = self.rng.choice(sorted(thread.entries))
        parent = explicit or thread.leaf or ""
        text = self.content()
        with self.op({"op": "append", "thread": thread_id, "parent": parent, "content": text}):
            entry = self.journal.append(
                _message(text).model_copy(update={"thread_id": thread_id}), parent_id=explicit
            )
        depth = self.model.nodes[parent][1] + 1 if parent else 0
        if entry.parent_id != parent:
            raise AssertionError(f"append parented on {entry.parent_id!r}, expected {parent!r}")
        self.ack({"op": "append", "thread": thread_id, "entry": [entry.id, parent, depth, text]})

    def batch(self) -> None:
        thread_id = self.rng.choice(self.model.live_threads())
        parent = self.model.threads[thread_id].leaf or ""
        size = self.rng.choice([2, 3, 5, 8, 20, 40])  # 40 entries = 80 objects: one pack
        texts = [self.content() for _ in range(size)]
        with (
            self.op({"op": "batch", "thread": thread_id, "parent": parent, "contents": texts}),
            self.journal.batch(thread_id) as b,
        ):
            made = [b.append(_message(text)) for text in texts]
        depth = self.model.nodes[parent][1] + 1 if parent else 0
        rows = []
        previous = parent
        for offset, (entry, text) in enumerate(zip(made, texts, strict=True)):
            rows.append([entry.id, previous, depth + offset, text])
            previous = entry.id
        self.ack({"op": "batch", "thread": thread_id, "entries": rows})

    def fork(self) -> None:
        source = self.rng.choice(self.model.live_threads())
        entries = sorted(self.model.threads[source].entries)
        at = self.rng.choice(entries) if entries and self.rng.random() < 0.5 else None
        at = at or self.model.threads[source].leaf
        new_id = self.name("f")
        with self.op({"op": "fork", "src": source, "thread": new_id, "at": at}):
            self.journal.fork(source, at, new_thread_id=new_id)
        self.ack({"op": "fork", "src": source, "thread": new_id, "at": at})

    def move(self) -> None:
        thread_id = self.rng.choice(self.model.live_threads())
        entries = sorted(self.model.threads[thread_id].entries)
        target = self.rng.choice(entries) if entries and self.rng.random() < 0.9 else None
        with self.op({"op": "move", "thread": thread_id, "to": target}):
            self.journal.move_leaf(thread_id, target)
        self.ack({"op": "move", "thread": thread_id, "to": target})

    def delete(self) -> None:
        thread_id = self.rng.choice(self.model.live_threads())
        with self.op({"op": "delete", "thread": thread_id}):
            self.journal.delete_thread(thread_id)
        self.ack({"op": "delete", "thread": thread_id})

    def checkpoint(self) -> None:
        runs = [r for r, m in self.model.runs.items()]
        run_id = self.rng.choice(runs) if runs and self.rng.random() < 0.75 else self.name("r")
        run = self.model.runs.get(run_id)
        if run is None or run.deleted or not run.saves:
            base = COMMON_PREFIX[: self.rng.randrange(1, len(COMMON_PREFIX) + 1)]
            iteration = 1 if run is None or not run.saves else run.saves[-1][0] + 1
        else:
            base = run.messages
            iteration = run.saves[-1][0] + 1
        messages = [
            *base,
            *(
                {"role": "assistant", "content": self.content(big=False)}
                for _ in range(self.rng.randrange(0, 4))
            ),
        ]
        fingerprint = digest(messages)
        intent = {
            "op": "ckpt",
            "run": run_id,
            "iteration": iteration,
            "count": len(messages),
            "digest": fingerprint,
            "messages": messages,
        }
        with self.op(intent):
            self.journal.checkpoints.save(
                cj.Checkpoint(run_id=run_id, iteration=iteration, messages=messages)
            )
        self.ack(intent)

    def delete_run(self) -> None:
        run_id = self.rng.choice(sorted(self.model.runs))
        with self.op({"op": "ckdel", "run": run_id}):
            self.journal.checkpoints.delete(run_id)
        self.ack({"op": "ckdel", "run": run_id})

    def pack(self) -> None:
        with self.op({"op": "pack"}):
            pack(self.journal.store)
        self.ack({"op": "pack"})

    def gc(self) -> None:
        prune = self.rng.random() < 0.5
        with self.op({"op": "gc", "prune": prune}):
            if prune:
                gc(self.journal.store, prune_now=True, reflog_expiry=timedelta(0))
            else:
                gc(self.journal.store)
        self.ack({"op": "gc", "prune": prune})

    def sync(self) -> None:
        with self.op({"op": "sync"}):
            mirror = LocalStore(self.mirror_path, durable=self.durable)
            try:
                # the mirror keeps every history, also of threads and runs deleted and
                # created afresh under the same id (unrelated to what it holds)
                sync(self.journal.store, mirror, allow_unrelated=True)
            finally:
                mirror.close()
        self.ack({"op": "sync"})


def child_main(
    store_path: Path,
    mirror_path: Path,
    log_path: Path,
    model: Model,
    seed: int,
    durable: bool,
    max_ops: int,
    kill_at: int,
    last: LastEvent | None = None,
) -> None:
    """The forked child's body: never returns (exits with os._exit)."""
    code = 0
    log = AckLog(log_path)
    try:
        trap = SyscallTrap(kill_at, last, seed)  # kill_at 0: only notes where it is
        trap.install()
        worker = Worker(store_path, mirror_path, log, model, random.Random(seed), durable, trap)
        for _ in range(max_ops):
            worker.step()
    except BaseException:
        code = 3
        with contextlib.suppress(BaseException):
            log.write({"error": traceback.format_exc()})
    os._exit(code)


# -- the verifier ------------------------------------------------------------------------


class Checker:
    """Collects problems instead of stopping at the first."""

    def __init__(self) -> None:
        self.problems: list[str] = []

    def fail(self, message: str) -> None:
        self.problems.append(message)

    def check(self, condition: bool, message: str) -> bool:
        if not condition:
            self.fail(message)
        return condition


def _content(entry: cj.Entry) -> str:
    return entry.message.content if entry.message else ""


def _verify_thread(
    j: cj.Journal, model: Model, thread_id: str, pending: Record | None, c: Checker
) -> Record | None:
    """Check one live thread; return the resolved record if the pending op shows."""
    thread = model.threads[thread_id]
    try:
        meta = j.thread(thread_id)
    except cj.ThreadNotFound:
        if pending and pending["op"] == "delete" and pending["thread"] == thread_id:
            return dict(pending)
        c.fail(f"acknowledged thread {thread_id} is missing")
        return None
    if pending and pending["op"] == "delete" and pending["thread"] == thread_id:
        pass  # the delete did not happen (yet): the thread must be whole
    if thread.forked_from:
        c.check(
            meta.forked_from_entry_id == thread.forked_from,
            f"fork {thread_id} forked from {meta.forked_from_entry_id}, expected {thread.forked_from}",
        )
    actual = {e.id: e for e in j.entries(thread_id)}
    missing = thread.entries - set(actual)
    c.check(not missing, f"thread {thread_id} lost acknowledged entries {sorted(missing)[:3]}")
    for entry_id in sorted(thread.entries & set(actual)):
        parent, depth, text = model.nodes[entry_id]
        entry = j.entry(thread_id, entry_id)
        c.check(entry.parent_id == parent, f"entry {entry_id} has parent {entry.parent_id}")
        c.check(_content(entry) == text, f"entry {entry_id} has other content")
        c.check(len(j.path(thread_id, entry_id)) == depth + 1, f"entry {entry_id} at wrong depth")
    extra = set(actual) - thread.entries
    resolved: Record | None = None
    expected_leaf = thread.leaf
    targets_me = pending is not None and pending.get("thread") == thread_id
    if extra or (targets_me and pending is not None and pending["op"] == "move"):
        if not targets_me or pending is None:
            c.fail(f"thread {thread_id} holds unacknowledged entries {sorted(extra)[:3]}")
        elif pending["op"] == "append":
            (new,) = extra if len(extra) == 1 else (None,)
            if c.check(new is not None, f"thread {thread_id}: {len(extra)} entries appeared"):
                assert new is not None
                entry = actual[new]
                ok = entry.parent_id == pending["parent"] and _content(entry) == pending["content"]
                if c.check(ok, f"thread {thread_id}: the in-flight append shows up wrong"):
                    depth = model.nodes[pending["parent"]][1] + 1 if pending["parent"] else 0
                    row = [new, pending["parent"], depth, pending["content"]]
                    resolved = {"op": "append", "thread": thread_id, "entry": row}
                    expected_leaf = new
        elif pending["op"] == "batch":
            texts = pending["contents"]
            by_text = {_content(e): e for e in actual.values() if e.id in extra}
            if c.check(
                len(extra) == len(texts) and set(by_text) == set(texts),
                f"thread {thread_id}: batch of {len(texts)} shows {len(extra)} entries",
            ):
                rows, previous = [], pending["parent"]
                depth = model.nodes[previous][1] + 1 if previous else 0
                for offset, text in enumerate(texts):
                    entry = by_text[text]
                    c.check(entry.parent_id == previous, f"batch entry {entry.id} out of chain")
                    rows.append([entry.id, previous, depth + offset, text])
                    previous = entry.id
                resolved = {"op": "batch", "thread": thread_id, "entries": rows}
                expected_leaf = previous
        elif pending["op"] == "move":
            if meta.leaf_id != (thread.leaf or "") and meta.leaf_id == (pending["to"] or ""):
                resolved = dict(pending)
                expected_leaf = pending["to"]
            c.check(not extra, f"thread {thread_id}: entries appeared during a move")
        else:
            c.fail(f"thread {thread_id} holds unacknowledged entries {sorted(extra)[:3]}")
    c.check(
        meta.leaf_id == (expected_leaf or ""),
        f"thread {thread_id} leaf is {meta.leaf_id[:12]}, expected {(expected_leaf or '')[:12]}",
    )
    path = j.path(thread_id)
    c.check(bool(path) == bool(meta.leaf_id), f"thread {thread_id}: path and leaf disagree")
    previous_id = ""
    for entry in path:
        if not c.check(entry.parent_id == previous_id, f"thread {thread_id}: path is no chain"):
            break
        previous_id = entry.id
    if path:
        c.check(path[-1].id == meta.leaf_id, f"thread {thread_id}: path does not end at its leaf")
    return resolved


def _verify_new_thread(j: cj.Journal, model: Model, pending: Record, c: Checker) -> Record | None:
    """A thread the in-flight create/fork may or may not have made."""
    thread_id = pending["thread"]
    try:
        meta = j.thread(thread_id)
    except cj.ThreadNotFound:
        return None
    if pending["op"] == "create":
        c.check(meta.leaf_id == "", f"new thread {thread_id} has a leaf")
        c.check(j.entries(thread_id) == [], f"new thread {thread_id} has entries")
    else:
        at = pending["at"]
        c.check(meta.leaf_id == (at or ""), f"fork {thread_id} has leaf {meta.leaf_id}")
        got = {e.id for e in j.entries(thread_id)}
        c.check(got == model.ancestors(at), f"fork {thread_id} has other entries")
    return dict(pending)


def _verify_runs(j: cj.Journal, model: Model, pending: Record | None, c: Checker) -> Record | None:
    resolved: Record | None = None
    names = set(model.runs)
    if pending and pending["op"] in ("ckpt", "ckdel"):
        names.add(pending["run"])
    for run_id in sorted(names):
        run = model.runs.get(run_id) or RunModel(deleted=True)
        mine = pending if pending and pending.get("run") == run_id else None
        has = j.checkpoints.has_checkpoint(run_id)
        expected = [s for s in run.saves] if not run.deleted else []
        if mine and mine["op"] == "ckdel" and not has and expected:
            resolved = dict(mine)
            expected = []
        if not expected and not (mine and mine["op"] == "ckpt"):
            c.check(not has, f"deleted or unsaved run {run_id} still has a checkpoint")
            continue
        if not has:
            c.check(not expected, f"acknowledged run {run_id} has no checkpoint")
            continue
        history = [(h.iteration, h.message_count) for h in j.checkpoints.history(run_id)]
        acked = [(i, n) for i, n, _ in reversed(expected)]
        newest = j.checkpoints.load(run_id)
        fingerprint = digest(newest.messages)
        if (
            mine
            and mine["op"] == "ckpt"
            and history[:1] == [(mine["iteration"], mine["count"])]
            and history[1:] == acked
            and fingerprint == mine["digest"]
        ):
            resolved = dict(mine)
            continue
        c.check(history == acked, f"run {run_id} history {history[:4]} != acknowledged {acked[:4]}")
        if expected:
            c.check(fingerprint == expected[-1][2], f"run {run_id} loads other messages")
        for iteration, _count, print_ in expected:
            loaded = j.checkpoints.load(run_id, iteration)
            c.check(digest(loaded.messages) == print_, f"run {run_id} @{iteration} differs")
    return resolved


def _verify_mirror(mirror_path: Path, model: Model, c: Checker) -> None:
    if not (mirror_path / "FORMAT").exists():
        c.check(not model.mirror_entries and not model.mirror_runs, "mirror vanished")
        return
    with cj.Journal.open(mirror_path, durable=False) as mirror:
        report = fsck(mirror.store)
        c.check(report.ok, f"mirror fsck: {[p.message for p in report.problems][:3]}")
        for thread_id, entries in sorted(model.mirror_entries.items()):
            try:
                got = {e.id for e in mirror.entries(thread_id)}
            except cj.JournalError as exc:
                c.fail(f"mirror thread {thread_id}: {exc!r}")
                continue
            c.check(entries <= got, f"mirror thread {thread_id} lost synced entries")
        for run_id, iterations in sorted(model.mirror_runs.items()):
            try:
                got_iterations = {h.iteration for h in mirror.checkpoints.history(run_id)}
                mirror.checkpoints.load(run_id)
            except cj.JournalError as exc:
                c.fail(f"mirror run {run_id}: {exc!r}")
                continue
            c.check(iterations <= got_iterations, f"mirror run {run_id} lost iterations")


def verify(store_path: Path, mirror_path: Path, log_path: Path) -> tuple[list[str], Record | None]:
    """Check the store against the log: the problems, and the resolved record."""
    records = read_log(log_path)
    c = Checker()
    for record in records:
        if "error" in record:
            c.fail("child raised:\n" + record["error"])
    model, pending = replay(records)
    resolved: Record | None = None
    try:
        with cj.Journal.open(store_path, durable=False) as j:
            report = fsck(j.store)
            c.check(
                report.ok, f"fsck: {[f'{p.subject[:16]} {p.message}' for p in report.problems][:4]}"
            )
            for thread_id, thread in sorted(model.threads.items()):
                if thread.deleted:
                    recreating = (
                        pending and pending["op"] == "create" and pending["thread"] == thread_id
                    )
                    if recreating:
                        continue
                    try:
                        j.thread(thread_id)
                        c.fail(f"deleted thread {thread_id} is back")
                    except cj.ThreadNotFound:
                        pass
                    continue
                found = _verify_thread(j, model, thread_id, pending, c)
                resolved = resolved or found
            new_thread = pending is not None and (
                pending["op"] == "fork"
                or (
                    pending["op"] == "create"
                    and model.threads.get(pending["thread"], ThreadModel(deleted=True)).deleted
                )
            )
            if new_thread and pending is not None:
                resolved = _verify_new_thread(j, model, pending, c) or resolved
            resolved = _verify_runs(j, model, pending, c) or resolved
            live = set(model.live_threads())
            if resolved and resolved["op"] in ("create", "fork"):
                live.add(resolved["thread"])
            if resolved and resolved["op"] == "delete":
                live.discard(resolved["thread"])
            listed = [t.id for t in j.list_threads(include_archived=True)]
            c.check(len(listed) == len(set(listed)), f"a thread is listed twice: {sorted(listed)}")
            c.check(set(listed) == live, f"listed {sorted(set(listed) ^ live)} wrongly")
    except cj.JournalError as exc:
        c.fail(f"reading the store raised {exc!r}\n{traceback.format_exc()}")
    if resolved and resolved["op"] == "sync":
        resolved = None
    if pending and pending["op"] in ("pack", "gc", "sync"):
        resolved = None
    if not c.problems:
        if resolved:
            model.apply(resolved)
        _verify_mirror(mirror_path, model, c)
    return c.problems, resolved


# -- kill cycles -------------------------------------------------------------------------


@dataclass
class CycleStats:
    """What a run of kill cycles did."""

    kills: int = 0
    """Children that died by SIGKILL (each one a verified crash point)."""
    finished: int = 0
    """Children that finished their operations before the kill landed."""
    interrupted: dict[str, int] = field(default_factory=dict)
    """How many kills landed inside each kind of operation."""
    in_sql_commit: int = 0
    """Kills that landed while SQLite committed a transaction (after a COMMIT began and
    before the next statement or file-system call)."""
    in_sql_statement: int = 0
    """Kills that landed right after another SQL statement began (inside a transaction,
    or in a read)."""
    failures: list[str] = field(default_factory=list)


def run_store(
    workdir: Path,
    seed: int,
    cycles: int,
    durable: bool,
    mode: str = "mixed",
    max_ops: int = 40,
    stats: CycleStats | None = None,
    max_delay: float = 0.25,
) -> CycleStats:
    """Kill cycles on one fresh store. ``mode``: "delay", "syscall" or "mixed"."""
    stats = stats or CycleStats()
    rng = random.Random(seed)
    if workdir.exists():
        shutil.rmtree(workdir)
    workdir.mkdir(parents=True)
    store_path, mirror_path, log_path = workdir / "store", workdir / "mirror", workdir / "acks"
    for cycle in range(cycles):
        model, _ = replay(read_log(log_path))
        child_seed = rng.randrange(2**32)
        use_syscall = mode == "syscall" or (mode == "mixed" and cycle % 2 == 1)
        kill_at = 0
        if use_syscall:
            kill_at = rng.randrange(1, 400) * rng.choice((1, -1))
        delay = rng.uniform(0, max_delay) if not use_syscall else 30.0
        last = LastEvent()
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child
            child_main(
                store_path,
                mirror_path,
                log_path,
                model,
                child_seed,
                durable,
                max_ops,
                kill_at,
                last,
            )
        deadline = time.monotonic() + delay
        status = 0
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                break
            if time.monotonic() >= deadline:
                os.kill(pid, signal.SIGKILL)
                _, status = os.waitpid(pid, 0)
                break
            time.sleep(0.001)
        tag = f"seed={seed} cycle={cycle} durable={durable} kill_at={kill_at} delay={delay:.3f}"
        if os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL:
            stats.kills += 1
            stats.in_sql_commit += last.get() == b"C"
            stats.in_sql_statement += last.get() == b"S"
        elif os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0:
            stats.finished += 1
        else:
            stats.failures.append(f"[{tag}] child ended with status {status}")
        _, pending = replay(read_log(log_path))
        if pending is not None and os.WIFSIGNALED(status):
            op = pending["op"] + ("-prune" if pending.get("prune") else "")
            stats.interrupted[op] = stats.interrupted.get(op, 0) + 1
        problems, resolved = verify(store_path, mirror_path, log_path)
        if problems:
            stats.failures.append(f"[{tag}] " + "\n  ".join(problems[:8]))
            return stats  # the store is no longer a trustworthy base for more cycles
        log = AckLog(log_path)
        try:
            log.write(dict(resolved or {"op": "noop"}, resolved=True))
        finally:
            log.close()
    return stats


# -- concurrent load ---------------------------------------------------------------------


@dataclass
class LoadResult:
    """What a concurrent-load run did and found."""

    seconds: float = 0.0
    workers: int = 0
    appends: int = 0
    batches: int = 0
    batch_entries: int = 0
    conflicts: int = 0
    reads: int = 0
    maintenance_cycles: int = 0
    prunes: int = 0
    problems: list[str] = field(default_factory=list)

    @property
    def entries(self) -> int:
        """Entries committed in all."""
        return self.appends + self.batch_entries

    def summary(self) -> str:
        """One paragraph for humans."""
        rate = self.entries / self.seconds if self.seconds else 0.0
        return (
            f"concurrent load: {self.workers} writers + 1 pack/gc process for {self.seconds:.1f} s: "
            f"{self.entries} entries committed ({rate:.0f} entries/s; {self.appends} single "
            f"appends = {self.appends / max(self.seconds, 1e-9):.0f}/s, {self.batches} batches "
            f"holding {self.batch_entries} entries), {self.conflicts} batch conflicts, "
            f"{self.reads} path reads, {self.maintenance_cycles} pack+gc cycles "
            f"({self.prunes} with prune_now), {len(self.problems)} problems"
        )


def _load_writer(path: Path, worker: int, seed: int, deadline: float, durable: bool) -> None:
    """A writer process: appends and batches to shared and private threads; acks each."""
    code = 0
    log = AckLog(path.parent / f"acks-{worker}")
    rng = random.Random(seed)
    counts = {"appends": 0, "batches": 0, "batch_entries": 0, "conflicts": 0, "reads": 0}
    try:
        j = cj.Journal.open(path, durable=durable)
        serial = 0
        while time.monotonic() < deadline:
            serial += 1
            roll = rng.random()
            thread = f"shared{rng.randrange(2)}" if rng.random() < 0.5 else f"private{worker}"
            if roll < 0.6:
                text = f"w{worker}-{serial}"
                entry = j.append(_message(text).model_copy(update={"thread_id": thread}))
                log.write({"thread": thread, "ids": [entry.id], "texts": [text]})
                counts["appends"] += 1
            elif roll < 0.9:
                texts = [f"w{worker}-{serial}-{i}" for i in range(rng.choice((2, 5, 10, 40)))]
                try:
                    with j.batch(thread) as b:
                        made = [b.append(_message(text)) for text in texts]
                except cj.ConflictError:
                    counts["conflicts"] += 1  # documented: the leaf moved, nothing committed
                    continue
                log.write({"thread": thread, "ids": [e.id for e in made], "texts": texts})
                counts["batches"] += 1
                counts["batch_entries"] += len(made)
            else:
                path_entries = j.path(thread)
                if any(a.id != b.parent_id for a, b in itertools.pairwise(path_entries)):
                    raise AssertionError(f"path of {thread} is not a chain")
                counts["reads"] += 1
        log.write({"counts": counts})
    except BaseException:
        code = 3
        with contextlib.suppress(BaseException):
            log.write({"error": f"writer {worker}: " + traceback.format_exc()})
    os._exit(code)


def _load_maintainer(
    path: Path, seed: int, deadline: float, grace: float, durable: bool, prune_rate: float
) -> None:
    """Packs and collects garbage in a loop while the writers work."""
    code = 0
    log = AckLog(path.parent / "acks-maintenance")
    rng = random.Random(seed)
    cycles = prunes = 0
    try:
        store = LocalStore(path, durable=durable)
        while time.monotonic() < deadline:
            pack(store)
            if rng.random() < prune_rate:
                gc(store, prune_now=True)
                prunes += 1
            else:
                gc(store, grace=timedelta(seconds=grace))
            cycles += 1
        log.write({"counts": {"maintenance_cycles": cycles, "prunes": prunes}})
    except BaseException:
        code = 3
        with contextlib.suppress(BaseException):
            log.write({"error": "maintenance: " + traceback.format_exc()})
    os._exit(code)


def concurrent_load(
    workdir: Path,
    seconds: float,
    seed: int = 0,
    workers: int = 4,
    grace: float = 0.5,
    durable: bool = False,
    prune_rate: float = 0.2,
) -> LoadResult:
    """Run writers and a pack/gc loop at once on one store, then check nothing was lost."""
    if workdir.exists():
        shutil.rmtree(workdir)
    workdir.mkdir(parents=True)
    path = workdir / "store"
    threads = ["shared0", "shared1", *(f"private{w}" for w in range(workers))]
    with cj.Journal.open(path, durable=durable) as j:
        for thread in threads:
            j.create_thread(cj.ThreadMeta(id=thread))
    result = LoadResult(workers=workers)
    started = time.monotonic()
    deadline = started + seconds
    pids = []
    for worker in range(workers):
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child
            _load_writer(path, worker, seed * 31 + worker, deadline, durable)
        pids.append(pid)
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        _load_maintainer(path, seed, deadline, grace, durable, prune_rate)
    pids.append(pid)
    for pid in pids:
        _, status = os.waitpid(pid, 0)
        if status != 0:
            result.problems.append(f"process {pid} ended with status {status}")
    result.seconds = time.monotonic() - started
    check_load(workdir, result)
    return result


def check_load(workdir: Path, result: LoadResult) -> None:
    """Read the writers' logs into ``result`` and check the store against them."""
    path = workdir / "store"
    threads = ["shared0", "shared1", *(f"private{w}" for w in range(result.workers))]
    acked: dict[str, dict[str, str]] = {thread: {} for thread in threads}
    for log_path in sorted(workdir.glob("acks-*")):
        for record in read_log(log_path):
            if "error" in record:
                result.problems.append(record["error"])
            elif "counts" in record:
                for key, value in record["counts"].items():
                    setattr(result, key, getattr(result, key) + value)
            else:
                acked[record["thread"]].update(zip(record["ids"], record["texts"], strict=True))
    with cj.Journal.open(path, durable=False) as j:
        report = fsck(j.store)
        if not report.ok:
            result.problems.append(f"fsck: {[p.message for p in report.problems][:4]}")
        for thread, entries in acked.items():
            try:
                found = {e.id: _content(e) for e in j.entries(thread)}
                on_path = {e.id for e in j.path(thread)}
            except cj.JournalError as exc:
                result.problems.append(f"reading {thread}: {exc!r}")
                continue
            lost = [oid for oid in entries if found.get(oid) != entries[oid]]
            if lost:
                result.problems.append(f"{thread} lost {len(lost)} acknowledged entries")
            if set(found) != on_path or set(found) != set(entries):
                result.problems.append(f"{thread}: entries, path and acks disagree")
