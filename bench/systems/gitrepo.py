"""git peer (written with dulwich): entries are commits, thread = branch, fork = new ref.

Each entry is a commit whose tree holds one blob, ``payload.json`` (the message JSON), and
whose parent is the previous entry; the branch ``refs/heads/<thread>`` points at the leaf.
A fork is a new ref at the fork-point commit. A thread exists once it has a commit (git
has no empty branches); its title is not stored. Objects are fsynced
(``core.fsyncObjectFiles``) and dulwich fsyncs ref files, so this peer is durable.
Listing reads every branch head and sorts by commit time (``for-each-ref --sort``).
Checkpoints: one commit per saved iteration whose tree holds ``meta.json`` and a
``messages/`` tree with one blob per message (identical messages share a blob).
The maintenance step is the system git binary's ``git gc --aggressive --prune=now``.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, cast

from dulwich.objects import Blob, Commit, Tree
from dulwich.repo import Repo

from ..workloads import CheckpointStep, Msg, SmallThread
from .base import CHECKPOINTS, JOURNAL, System, entry_type, message_dict

if TYPE_CHECKING:
    # NewTypes of bytes in dulwich's annotations (absent from older dulwich at run time);
    # the casts to them below only label bytes
    from dulwich.objects import ObjectID
    from dulwich.refs import Ref

AUTHOR = b"agent <agent@example.invalid>"
FILE_MODE = 0o100644
DIR_MODE = 0o040000


class GitSystem(System):
    """A bare git repository."""

    name = "git"
    label = "git via dulwich: commit per entry, branch per thread"
    durable = True
    features = frozenset({JOURNAL, CHECKPOINTS})
    compaction = "git gc --aggressive --prune=now"
    fsync_objects = True

    def open(self) -> None:
        if (self.root / "HEAD").exists():
            self.repo = Repo(str(self.root))
        else:
            self.root.mkdir(parents=True, exist_ok=True)
            self.repo = Repo.init_bare(str(self.root))
            config = self.repo.get_config()
            config.set((b"core",), b"fsyncObjectFiles", b"true" if self.fsync_objects else b"false")
            config.set((b"gc",), b"auto", b"0")
            config.write_to_path()
            self.repo = Repo(str(self.root))
        self.store = self.repo.object_store
        self.pending_titles: dict[str, str] = {}

    def close(self) -> None:
        self.repo.close()

    @staticmethod
    def _ref(thread_id: str) -> Ref:
        return cast("Ref", b"refs/heads/" + thread_id.encode())

    def _commit(self, msg: Msg, parent: ObjectID | None) -> Commit:
        blob = Blob.from_string(json.dumps(message_dict(msg)).encode())
        tree = Tree()
        tree.add(b"payload.json", FILE_MODE, blob.id)
        commit = Commit()
        commit.tree = tree.id
        commit.parents = [parent] if parent else []
        commit.author = commit.committer = AUTHOR
        commit.author_time = commit.commit_time = int(msg.created_at)
        commit.author_timezone = commit.commit_timezone = 0
        commit.message = f"{entry_type(msg)}\n\nturn: {msg.turn_id}\n".encode()
        for obj in (blob, tree, commit):
            self.store.add_object(obj)  # loose objects, as `git commit` writes them
        return commit

    def create_thread(self, thread_id: str, created_at: float, title: str = "") -> None:
        self.pending_titles[thread_id] = title

    def append(self, thread_id: str, msg: Msg) -> str:
        ref = self._ref(thread_id)
        try:
            parent: ObjectID | None = self.repo.refs[ref]
        except KeyError:
            parent = None
        commit = self._commit(msg, parent)
        if parent is None:
            ok = self.repo.refs.add_if_new(ref, commit.id)
        else:
            ok = self.repo.refs.set_if_equals(ref, parent, commit.id)
        if not ok:
            raise RuntimeError(f"lost a race on {ref!r}")
        commit_id: bytes = commit.id  # bytes also where dulwich is absent (then Commit is Any)
        return commit_id.decode()

    def fork(
        self, source: str, prefix_ids: list[str], thread_id: str, created_at: float
    ) -> list[str]:
        # the ids are the hex commit ids append returned
        self.repo.refs.add_if_new(self._ref(thread_id), cast("ObjectID", prefix_ids[-1].encode()))
        return list(prefix_ids)

    def read_path(self, thread_id: str) -> int:
        sha: ObjectID | None = self.repo.refs[self._ref(thread_id)]
        chars = 0
        # the object store returns ShaFile; this peer's layout fixes each object's kind
        while sha is not None:
            commit = cast(Commit, self.store[sha])
            tree = cast(Tree, self.store[commit.tree])
            _, blob_id = tree[b"payload.json"]
            chars += len(json.loads(cast(Blob, self.store[blob_id]).data)["content"])
            sha = commit.parents[0] if commit.parents else None
        return chars

    def list_page(self, limit: int = 50) -> list[str]:
        heads = []
        for name in self.repo.refs.keys(base=cast("Ref", b"refs/heads/")):
            commit = cast(Commit, self.store[self.repo.refs[cast("Ref", b"refs/heads/" + name)]])
            heads.append((-commit.commit_time, name.decode()))
        heads.sort()
        return [name for _, name in heads[:limit]]

    def bulk_threads(self, threads: Iterable[SmallThread]) -> int:
        """Objects as usual, refs written once into packed-refs (as git itself would)."""
        refs: dict[Ref, ObjectID] = {}
        self.store.fsync_object_files = False  # bulk load: no fsync, like every peer here
        for t in threads:
            parent: ObjectID | None = None
            for msg in t.messages:
                parent = self._commit(msg, parent).id
            assert parent is not None
            refs[self._ref(t.thread_id)] = parent
        self.repo.refs.add_packed_refs(refs)
        return len(refs)

    def save_checkpoint(
        self, run_id: str, step: CheckpointStep, messages: list[dict[str, Any]], system_prompt: str
    ) -> None:
        objects: list[Any] = []
        listing = Tree()
        for i, message in enumerate(messages):
            blob = Blob.from_string(json.dumps(message).encode())
            objects.append(blob)
            listing.add(b"%06d.json" % i, FILE_MODE, blob.id)
        meta = Blob.from_string(
            json.dumps(
                {
                    "run_id": run_id,
                    "iteration": step.iteration,
                    "system_prompt": system_prompt,
                    "input_tokens": step.input_tokens,
                    "output_tokens": step.output_tokens,
                }
            ).encode()
        )
        root = Tree()
        root.add(b"meta.json", FILE_MODE, meta.id)
        root.add(b"messages", DIR_MODE, listing.id)
        ref = cast("Ref", b"refs/runs/" + run_id.encode())
        try:
            parent: ObjectID | None = self.repo.refs[ref]
        except KeyError:
            parent = None
        commit = Commit()
        commit.tree = root.id
        commit.parents = [parent] if parent else []
        commit.author = commit.committer = AUTHOR
        commit.author_time = commit.commit_time = int(step.created_at)
        commit.author_timezone = commit.commit_timezone = 0
        commit.message = f"iteration {step.iteration}\n".encode()
        for obj in [*objects, meta, listing, root, commit]:
            self.store.add_object(obj)
        self.repo.refs[ref] = commit.id

    def load_checkpoint(self, run_id: str) -> int:
        # a run's commit, its root tree, the messages tree, and blobs (see save_checkpoint)
        commit = cast(
            Commit, self.store[self.repo.refs[cast("Ref", b"refs/runs/" + run_id.encode())]]
        )
        _, listing_id = cast(Tree, self.store[commit.tree])[b"messages"]
        listing = cast(Tree, self.store[listing_id])
        return sum(
            1 for item in listing.items() if json.loads(cast(Blob, self.store[item.sha]).data)
        )

    def compact(self) -> None:
        self.repo.close()
        subprocess.run(
            ["git", "gc", "--aggressive", "--prune=now", "--quiet"],
            cwd=self.root,
            check=True,
            capture_output=True,
        )
        self.repo = Repo(str(self.root))
        self.store = self.repo.object_store
