"""The durable analysis queue: ``stateDir/analysis/queue-G.log`` and ``bodies-G.bin``.

A task is one analyzer to run on one page.  The page's body is appended to
the *spool* ``bodies-G.bin`` (once, however many analyzers it has), then one
line per task to ``queue-G.log``, both with ``write()`` on the loop: they
are in the kernel before the journal line that records the page as fetched
(written later by the writer thread), so a crash of the process never leaves
a page done whose tasks are lost -- the discipline of larbin_py.journal.
The analysis processes read the body from the spool (``pread``), whatever
the output mode saves: the spool is how a body travels (see docs/analysis.md
for the measurement against a pipe and shared memory).

Lines are framed by larbin_py.logline (CRC32 in front), JSON bodies:

* ``{"a": id, "u": url, "d": depth, "n": analyzer, "g": gen, "o": offset,
  "l": length, "s": status, "c": content type, "h": charset[, "hl": the
  headers' length (they lie in the spool just before the body), "v": where
  the page was saved]}`` a task;
* ``{"t": id, "k": tries}`` a failed try (the count survives a restart);
* ``{"x": id}`` done: written only once a checkpoint covers what the task
  produced (its links are then in the URL stores for good: the stores are
  cut back to the last commit on ``--reload``); a crash before that runs
  the task again, which the seen test makes harmless for links;
* ``{"f": id}`` failed for good (its alert was raised first).

``--reload`` reads the generations in order, each up to its first damaged
line (a line cut by the crash), and gives back the tasks neither done nor
failed.  A generation is a pair of files; a new one starts when the spool
passes :data:`SEGMENT_BYTES`, and a generation none of whose tasks is
pending any more is deleted.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass

from ..logline import frame, unframe
from ..owner_only import makedirs, opener

__all__ = ["SEGMENT_BYTES", "Task", "TaskQueue", "QueueDamage"]

#: A new generation starts when the spool reaches this size.
SEGMENT_BYTES = 64 << 20


class QueueDamage(Exception):
    """A task's body is not (wholly) in its spool: a machine crash cut it."""


@dataclass(slots=True)
class Task:
    id: int
    url: str
    depth: int
    analyzer: str
    gen: int
    offset: int
    length: int
    status: int | None = None
    content_type: str | None = None
    charset: str | None = None
    #: The answer's headers (larbin_py.analysis.analyzers.format_headers) lie
    #: in the spool just before the body, this many bytes (0: not kept).
    headers_length: int = 0
    #: Where the output saved the page (None: not saved, or not known).
    saved: str | None = None
    #: Failed tries so far.
    tries: int = 0
    #: The last failure, for the alert.
    error: str = ""

    def record(self) -> dict:
        r = {"a": self.id, "u": self.url, "d": self.depth, "n": self.analyzer, "g": self.gen,
             "o": self.offset, "l": self.length, "s": self.status, "c": self.content_type,
             "h": self.charset}
        if self.headers_length:
            r["hl"] = self.headers_length
        if self.saved is not None:
            r["v"] = self.saved
        return r

    @classmethod
    def from_record(cls, r: dict) -> "Task":
        return cls(int(r["a"]), str(r["u"]), int(r["d"]), str(r["n"]), int(r["g"]), int(r["o"]),
                   int(r["l"]), r.get("s"), r.get("c"), r.get("h"), int(r.get("hl", 0)), r.get("v"))


def queue_name(gen: int) -> str:
    return f"queue-{gen:08d}.log"


def spool_name(gen: int) -> str:
    return f"bodies-{gen:08d}.bin"


def _generations(directory: str) -> list[int]:
    gens = []
    for name in os.listdir(directory):
        if name.startswith("queue-") and name.endswith(".log") and name[6:-4].isdigit():
            gens.append(int(name[6:-4]))
    return sorted(gens)


class TaskQueue:
    """The queue in ``directory``: appends on the caller's thread (the loop), reads by offset.

    ``reload``: continue the tasks found there (:attr:`resumed`); otherwise
    the files of an earlier queue are removed.  ``segment_bytes``: when a
    new generation starts (default :data:`SEGMENT_BYTES`, read when called).
    """

    def __init__(self, directory: str, *, reload: bool = False, segment_bytes: int | None = None) -> None:
        self.directory = directory
        self.segment_bytes = segment_bytes if segment_bytes is not None else SEGMENT_BYTES
        #: Tasks given back by --reload, in the order they were queued.
        self.resumed: list[Task] = []
        #: Damaged lines dropped by --reload (a crash cut them).
        self.damaged = 0
        #: Live tasks (neither done nor failed) by generation.
        self._live: dict[int, int] = {}
        #: Finished tasks not yet marked done (a checkpoint must cover them first).
        self._finished: list[Task] = []
        self._next_id = 1
        self._read_fds: dict[int, int] = {}
        gens = _generations(directory) if os.path.isdir(directory) else []
        #: Generations to remove once the queue is first written (nothing is
        #: changed in stateDir before the crawl has started: a failed start leaves it as it was).
        self._stale: list[int] = []
        if reload:
            self._read(gens)
        else:
            self._stale = gens
        self.gen = (gens[-1] + 1) if gens else 1
        self._qfd = self._sfd = -1
        self._spool_size = 0

    # -- files --------------------------------------------------------------
    def _path(self, name: str) -> str:
        return os.path.join(self.directory, name)

    def _open_gen(self) -> None:
        if self._stale:
            for gen in self._stale:
                self._remove(gen)
            self._stale = []
        makedirs(self.directory)
        flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND
        self._qfd = opener(self._path(queue_name(self.gen)), flags)
        self._sfd = opener(self._path(spool_name(self.gen)), flags)
        self._spool_size = os.fstat(self._sfd).st_size
        self._live.setdefault(self.gen, 0)

    def _write(self, fd: int, data: bytes, name: str) -> None:
        view = memoryview(data)
        try:
            while view:
                view = view[os.write(fd, view):]
        except OSError as exc:  # a write() names no file: say which one failed
            if exc.filename is None:
                exc.filename = self._path(name)
            raise

    def _line(self, record: dict) -> None:
        if self._qfd < 0:
            self._open_gen()
        self._write(self._qfd, frame(json.dumps(record, separators=(",", ":")).encode()), queue_name(self.gen))

    def _remove(self, gen: int) -> None:
        fd = self._read_fds.pop(gen, None)
        if fd is not None:
            os.close(fd)
        for name in (queue_name(gen), spool_name(gen)):
            try:
                os.unlink(self._path(name))
            except FileNotFoundError:
                pass

    def _read(self, gens: list[int]) -> None:
        tasks: dict[int, Task] = {}
        top = 0
        for gen in gens:
            try:
                with open(self._path(queue_name(gen)), "rb") as f:
                    data = f.read()
            except FileNotFoundError:
                continue
            for line in data.splitlines(keepends=True):
                body = unframe(line)
                try:
                    r = json.loads(body) if body else None
                except ValueError:
                    r = None
                if not isinstance(r, dict):
                    self.damaged += 1
                    break  # a crash cut this line: nothing after it was written whole
                if "a" in r:
                    task = Task.from_record(r)
                    tasks[task.id] = task
                    top = max(top, task.id)
                elif "t" in r and r["t"] in tasks:
                    tasks[r["t"]].tries = int(r["k"])
                elif "x" in r:
                    tasks.pop(r["x"], None)
                elif "f" in r:
                    tasks.pop(r["f"], None)
        self._next_id = top + 1
        self.resumed = sorted(tasks.values(), key=lambda t: t.id)
        for task in self.resumed:
            self._live[task.gen] = self._live.get(task.gen, 0) + 1
        self._stale = [gen for gen in gens if not self._live.get(gen)]

    # -- the loop's side ----------------------------------------------------
    def add(self, url: str, depth: int, analyzers: list[str], body: bytes, *, status=None,
            content_type=None, charset=None, headers: bytes = b"", saved: str | None = None) -> list[Task]:
        """Queue ``analyzers`` on a page: its headers (when given) and body to the
        spool in one write, one line per task (the lines in one write too)."""
        if self._qfd < 0:
            self._open_gen()
        if self._spool_size >= self.segment_bytes and not self._live.get(self.gen):
            pass  # an empty generation is reused as is
        elif self._spool_size >= self.segment_bytes:
            os.close(self._qfd)
            os.close(self._sfd)
            self.gen += 1
            self._open_gen()
        hl = len(headers)
        offset = self._spool_size + hl
        self._write(self._sfd, headers + body if hl else body, spool_name(self.gen))
        self._spool_size += hl + len(body)
        tasks = []
        lines = []
        for name in analyzers:
            task = Task(self._next_id, url, depth, name, self.gen, offset, len(body), status, content_type, charset,
                        hl, saved)
            self._next_id += 1
            lines.append(frame(json.dumps(task.record(), separators=(",", ":")).encode()))
            tasks.append(task)
        self._write(self._qfd, b"".join(lines), queue_name(self.gen))
        self._live[self.gen] = self._live.get(self.gen, 0) + len(tasks)
        return tasks

    def tried(self, task: Task, error: str) -> None:
        """A try failed: counted, durably."""
        task.tries += 1
        task.error = error
        self._line({"t": task.id, "k": task.tries})

    def finished(self, task: Task) -> None:
        """The task succeeded: marked done at the next :meth:`confirm`."""
        self._finished.append(task)

    def failed(self, task: Task) -> None:
        """The task failed for good (its alert is raised): marked at once."""
        self._line({"f": task.id})
        self._release(task)

    def mark(self) -> int:
        """How many finished tasks a checkpoint starting now covers."""
        return len(self._finished)

    def confirm(self, mark: int) -> list[int]:
        """The first ``mark`` finished tasks are covered by a checkpoint: marked done.

        Returns the generations now without a live task (not the current
        one): their files may go (:meth:`drop`, off the loop).
        """
        done, self._finished = self._finished[:mark], self._finished[mark:]
        if done:
            if self._qfd < 0:
                self._open_gen()
            data = b"".join(frame(json.dumps({"x": t.id}, separators=(",", ":")).encode()) for t in done)
            self._write(self._qfd, data, queue_name(self.gen))
        for task in done:
            self._release(task)
        return [g for g, n in self._live.items() if n == 0 and g != self.gen]

    def drop(self, gens: list[int]) -> None:
        """Remove the files of finished generations."""
        for gen in gens:
            if self._live.get(gen) == 0:
                del self._live[gen]
                self._remove(gen)

    def _release(self, task: Task) -> None:
        self._live[task.gen] = self._live.get(task.gen, 1) - 1

    @property
    def live(self) -> int:
        """Tasks neither done nor failed (finished ones awaiting their checkpoint included)."""
        return sum(self._live.values())

    def sync_paths(self) -> list[str]:
        """The files a checkpoint fsyncs: every live generation's (a machine crash
        must not lose the tasks of pages the checkpoint says are done)."""
        gens = set(self._live)
        if self._qfd >= 0:
            gens.add(self.gen)
        return [self._path(name(g)) for g in sorted(gens) for name in (spool_name, queue_name)]

    @property
    def spool_dir(self) -> str:
        """The folder of the spools (the analysis processes read them there)."""
        return self.directory

    def spool_path(self, gen: int) -> str:
        return self._path(spool_name(gen))

    def body(self, task: Task) -> bytes:
        """The task's body, read from its spool (inline use and tests)."""
        fd = self._read_fds.get(task.gen)
        if fd is None:
            fd = self._read_fds[task.gen] = os.open(self.spool_path(task.gen), os.O_RDONLY | os.O_CLOEXEC)
        data = os.pread(fd, task.length, task.offset)
        if len(data) != task.length:
            raise QueueDamage(f"the body of {task.url} is cut short in {self.spool_path(task.gen)}")
        return data

    def close(self, *, remove_if_empty: bool = True) -> None:
        """Close the files; with no live task left, the queue's files go."""
        for fd in (self._qfd, self._sfd, *self._read_fds.values()):
            if fd >= 0:
                os.close(fd)
        self._qfd = self._sfd = -1
        self._read_fds = {}
        if remove_if_empty and self.live == 0 and os.path.isdir(self.directory):
            for gen in list(self._live) + _generations(self.directory):
                self._remove(gen)
            self._live = {}
            try:
                os.rmdir(self.directory)
            except OSError:  # something else is in it
                pass
