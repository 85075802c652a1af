"""The completion journal: a page's outcome is durable as it happens.

A checkpoint (every ``checkpointInterval`` seconds) saves the whole crawl
state; between two checkpoints, each terminal outcome of a URL -- fetched,
or forgotten with its reason (``err40X``, ``err30X``, ``noDNS``...) -- is
appended to ``stateDir/journal-NNNNNNNN.log`` by a *group commit* on the
writer thread, every :data:`COMMIT_INTERVAL` seconds at most while pages
end.  A commit makes durable, in this order:

1. the page files written since the last commit and their directories, then
   the output's index (or WARC file) -- the output's position is read then;
2. the URL stores' appends (the links those pages queued) and the seen log;
3. one journal line: the outcomes, the stores' write positions, the seen
   log's length and the output's position, with a CRC32, then fdatasync.

A journal line on disk therefore implies everything it covers is on disk.
A page counts as in flight until its commit is durable: the engine starts
no request while requests running plus outcomes not yet committed reach
``pagesConnexions``, so a crash costs at most the requests in flight.

On ``--reload`` (:func:`read_journals`, :func:`cut_to_commit`): the journals
numbered from the checkpoint's serial on are read up to the first damaged
line; the URL stores (main and priority), the seen log and the output are
cut back to the last commit's positions (what came after was not committed:
the pages that produced it are done again), and the URLs the journal found
done are dropped, counted as done, when they come out of the stores
(:class:`ReplayFrontier`) or the checkpoint's carried records.  A checkpoint
``N`` starts ``journal-N``; the older journals go once it is durable.

Line format: ``crc32hex JSON`` with the JSON ``{"done": [[url, outcome],
...], "stores": {"main": [seg, off], "priority": [seg, off]}, "seen": bytes,
"output": {...}}``; outcome ``""`` means fetched.
"""

from __future__ import annotations

import json
import os
import zlib
from dataclasses import dataclass, field

from .frontier.scheduler import Frontier
from .frontier.store import UrlRecord
from .state import write_checkpoint

__all__ = [
    "COMMIT_INTERVAL",
    "FETCHED",
    "Committer",
    "Replay",
    "ReplayFrontier",
    "cut_to_commit",
    "journal_name",
    "read_journals",
]

#: Longest wait before the outcomes of finished pages are committed, seconds.
COMMIT_INTERVAL = 0.005
#: The outcome recorded for a fetched page (others are the forget reasons).
FETCHED = ""
PREFIX = "journal-"
SUFFIX = ".log"


def journal_name(serial: int) -> str:
    return f"{PREFIX}{serial:08d}{SUFFIX}"


def _journal_serials(state_dir: str) -> list[int]:
    serials = []
    for name in os.listdir(state_dir):
        if name.startswith(PREFIX) and name.endswith(SUFFIX):
            digits = name[len(PREFIX):-len(SUFFIX)]
            if digits.isdigit():
                serials.append(int(digits))
    return sorted(serials)


def encode_commit(record: dict) -> bytes:
    body = json.dumps(record, separators=(",", ":")).encode("ascii")
    return b"%08x %s\n" % (zlib.crc32(body), body)


def decode_commit(line: bytes) -> dict | None:
    """One journal line (with its newline) as a dict; None when damaged."""
    if not line.endswith(b"\n") or len(line) < 11 or line[8:9] != b" ":
        return None
    body = line[9:-1]
    try:
        if int(line[:8], 16) != zlib.crc32(body):
            return None
        record = json.loads(body)
    except ValueError:
        return None
    return record if isinstance(record, dict) and isinstance(record.get("done"), list) else None


@dataclass
class Replay:
    """What the journals after a checkpoint say (see :func:`read_journals`)."""

    #: URL -> outcome (:data:`FETCHED` or a forget reason) of the URLs done since the checkpoint.
    done: dict[str, str] = field(default_factory=dict)
    #: The last whole commit (its positions are where the state is cut back to), or None.
    last: dict | None = None
    commits: int = 0
    #: Damaged lines (a line cut by the crash); reading stops at the first.
    damaged: int = 0
    #: Highest journal serial found (the next checkpoint must number above it).
    max_serial: int = 0


def read_journals(state_dir: str, serial: int) -> Replay:
    """Read ``journal-N`` for every N >= ``serial`` in order, to the first damage."""
    replay = Replay(max_serial=serial)
    for n in _journal_serials(state_dir):
        replay.max_serial = max(replay.max_serial, n)
        if n < serial or replay.damaged:
            continue
        with open(os.path.join(state_dir, journal_name(n)), "rb") as f:
            for line in f:
                record = decode_commit(line)
                if record is None:
                    replay.damaged += 1
                    break
                for url, outcome in record["done"]:
                    replay.done[url] = outcome
                replay.last = record
                replay.commits += 1
    return replay


def _cut_store(directory: str, position) -> None:
    """Cut the segment log in ``directory`` back to ``(segment, offset)``."""
    if not os.path.isdir(directory):
        return
    seg, off = int(position[0]), int(position[1])
    for name in os.listdir(directory):
        if not (name.startswith("seg-") and name.endswith(".log") and name[4:12].isdigit()):
            continue
        n = int(name[4:12])
        path = os.path.join(directory, name)
        if n > seg:
            os.unlink(path)
        elif n == seg and os.path.getsize(path) > off:
            os.truncate(path, off)


def cut_to_commit(state_dir: str, doc: dict, replay: Replay, seen_log: str) -> None:
    """Cut the state in ``state_dir`` back to the last commit (see the module docstring).

    Updates ``doc["output"]`` to the position of that commit.  A checkpoint
    written before the journal existed (no ``"commit"``) is left as it is.
    """
    commit = replay.last if replay.last is not None else doc.get("commit")
    if commit is None:
        return
    stores = commit["stores"]
    frontier = os.path.join(state_dir, "frontier")
    _cut_store(os.path.join(frontier, "main"), stores["main"])
    _cut_store(os.path.join(frontier, "priority"), stores["priority"])
    seen = int(commit["seen"])
    if os.path.exists(seen_log) and os.path.getsize(seen_log) > seen:
        os.truncate(seen_log, seen)
    if replay.last is not None:
        doc["output"] = replay.last["output"]


class ReplayFrontier(Frontier):
    """A :class:`Frontier` that drops the URLs found done in the journal.

    ``replay`` maps each such URL (still in a store after ``--reload``) to its
    outcome; when it comes out of a store it is counted as done (fetched or
    forgotten with its reason) instead of being placed in its site, so
    ``taken = fetched + forgotten + queued + in flight`` holds throughout.
    """

    replay: dict[str, str] = {}

    def _place(self, rec: UrlRecord, now: float, from_wait: bool) -> bool:
        replay = self.replay
        if replay:
            outcome = replay.pop(rec.url, None)
            if outcome is not None:
                if outcome == FETCHED:
                    self.fetched += 1
                else:
                    self.forgotten[outcome] += 1
                return True
        return super()._place(rec, now, from_wait)


def _fdatasync_path(path: str) -> None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:  # a segment released meanwhile: its records were done
        return
    try:
        os.fdatasync(fd)
    finally:
        os.close(fd)


class Committer:
    """Group commits of outcomes and checkpoints, prepared on the loop, run on the writer.

    ``frontier``, ``seen`` (and ``robots_log``) are the loop's objects:
    their buffers are written out on the loop (page-cache writes, as
    before) when a commit is prepared; the writer thread fsyncs the files
    by path and appends the journal line.  ``output`` is the engine's output
    (a :class:`~larbin_py.output.writer.ThreadedOutput`, or one that writes
    nothing).  ``on_durable()`` is called on the loop after each commit,
    ``on_error(exc)`` when one fails.
    """

    def __init__(self, loop, writer, state_dir: str, *, frontier, seen, seen_log: str,
                 robots_log=None, robots_path: str | None = None, output=None, serial: int = 0,
                 on_durable=None, on_error=None, interval: float = COMMIT_INTERVAL) -> None:
        self._loop = loop
        self.writer = writer
        self.state_dir = state_dir
        self.frontier = frontier
        self.seen = seen
        self.seen_log = seen_log
        self.robots_log = robots_log
        self.robots_path = robots_path
        self.output = output
        self.serial = serial  # the journal appended to
        self.on_durable = on_durable
        self.on_error = on_error
        self.interval = interval
        self._pending: list[list[str]] = []
        self._pending_requests = 0
        #: Outcomes of requests handed to the writer and not yet durable.
        self._committing_requests = 0
        self._commit_running = False
        self._handle = None
        self._last_start = -1e9
        self._synced_seg: dict[str, int] = {}
        self._fd = -1  # the journal file (writer thread)
        self._fd_serial = -1
        self.commits = 0

    # -- the loop's side ---------------------------------------------------
    @property
    def uncommitted(self) -> int:
        """Outcomes of requests not yet durable (they count as in flight)."""
        return self._pending_requests + self._committing_requests

    def done(self, url: str, outcome: str, request: bool) -> None:
        """``url`` ended with ``outcome``; ``request``: a request of ours produced it."""
        self._pending.append([url, outcome])
        if request:
            self._pending_requests += 1
        if self._handle is None and not self._commit_running:
            delay = self._last_start + self.interval - self._loop.time()
            self._handle = (self._loop.call_later(delay, self._commit) if delay > 0
                            else self._loop.call_soon(self._commit))

    def _take(self) -> tuple[list, int]:
        done, n = self._pending, self._pending_requests
        self._pending, self._pending_requests = [], 0
        self._committing_requests += n
        return done, n

    def _prepare(self, checkpoint: bool) -> tuple[dict, int, list[str]]:
        """Write the loop's buffers out; (store positions, seen length, paths to sync)."""
        submit = getattr(self.output, "submit_pending", None)
        if submit is not None:  # the pages this commit covers go to the writer first
            submit()
        fr = self.frontier
        fr.flush()
        try:
            self.seen.flush()
        except OSError as exc:  # a write() names no file: say which one failed
            exc.filename = exc.filename or self.seen_log
            raise
        paths = [self.seen_log]
        if self.robots_log is not None:
            self.robots_log.flush()
            paths.append(self.robots_path)
        stores = {"main": fr.main, "priority": fr.prio}
        if checkpoint:
            stores["wait"] = fr.wait
        positions = {}
        for name, store in stores.items():
            seg, off = store.write_position()
            positions[name] = [seg, off]
            first = self._synced_seg.get(name, seg)
            paths.extend(os.path.join(store.directory, f"seg-{n:08d}.log") for n in range(first, seg + 1))
            self._synced_seg[name] = seg
        positions.pop("wait", None)
        seen = os.path.getsize(self.seen_log) if os.path.exists(self.seen_log) else 0
        return positions, seen, paths

    def _commit(self) -> None:
        self._handle = None
        if not self._pending or self._commit_running:
            return
        self._last_start = self._loop.time()
        done, n = self._take()
        try:
            positions, seen, paths = self._prepare(False)
        except OSError as exc:  # a state file could not be written (a full disk...)
            self._committing_requests -= n
            if self.on_error is not None:
                self.on_error(exc)
            return
        self._commit_running = True
        fut = self.writer.call(self._commit_job, done, positions, seen, paths)
        fut.add_done_callback(lambda f: self._committed(f, n, True))

    def _committed(self, fut, n: int, from_commit: bool) -> None:
        self._committing_requests -= n
        if from_commit:
            self._commit_running = False
        exc = fut.exception() if not fut.cancelled() else None
        if exc is not None:
            if self.on_error is not None:
                self.on_error(exc)
            return
        if self._pending and self._handle is None and not self._commit_running:
            delay = self._last_start + self.interval - self._loop.time()
            self._handle = (self._loop.call_later(delay, self._commit) if delay > 0
                            else self._loop.call_soon(self._commit))
        if self.on_durable is not None:
            self.on_durable()

    async def checkpoint(self, data: dict, carry: list[UrlRecord], serial: int) -> None:
        """Commit what is pending, then write checkpoint ``serial`` (``data``
        gets the output's position and the commit's positions); raises on failure."""
        done, n = self._take()
        positions, seen, paths = self._prepare(True)
        fut = self.writer.call(self._checkpoint_job, done, positions, seen, paths, data, carry, serial)
        fut.add_done_callback(lambda f: self._committed(f, n, False))
        await fut

    def close(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None

    # -- the writer's side ---------------------------------------------------
    def _sync(self, paths: list[str]) -> dict:
        out = self.output
        position = out.sync_position() if hasattr(out, "sync_position") else out.position()
        for path in paths:
            if path:
                _fdatasync_path(path)
        return position

    def _append(self, record: dict) -> None:
        if self._fd_serial != self.serial:
            self._close_journal()
            self._fd = os.open(os.path.join(self.state_dir, journal_name(self.serial)),
                               os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o644)
            self._fd_serial = self.serial
        data = encode_commit(record)
        view = memoryview(data)
        while view:
            view = view[os.write(self._fd, view):]
        os.fdatasync(self._fd)
        self.commits += 1

    def _close_journal(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd, self._fd_serial = -1, -1

    def _commit_job(self, done: list, stores: dict, seen: int, paths: list[str]) -> dict:
        position = self._sync(paths)
        if done:
            self._append({"done": done, "stores": stores, "seen": seen, "output": position})
        return position

    def _checkpoint_job(self, done, stores, seen, paths, data, carry, serial) -> None:
        position = self._commit_job(done, stores, seen, paths)
        # Commits from here on belong to checkpoint ``serial``: its journal
        # exists (empty) before the checkpoint names it.
        self._close_journal()
        path = os.path.join(self.state_dir, journal_name(serial))
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
        os.close(fd)
        self.serial = serial
        data["output"] = position
        data["commit"] = {"stores": stores, "seen": seen}
        write_checkpoint(self.state_dir, data, carry, serial)
        for n in _journal_serials(self.state_dir):
            if n < serial:
                try:
                    os.unlink(os.path.join(self.state_dir, journal_name(n)))
                except FileNotFoundError:
                    pass

    def close_journal(self) -> None:
        """(Writer thread, or after it stopped.) Close the journal file."""
        self._close_journal()
