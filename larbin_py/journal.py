"""The completion journal: a page's outcome is recorded as it happens.

A checkpoint (every ``checkpointInterval`` seconds) saves the whole crawl
state; between two checkpoints, each terminal outcome of a URL -- fetched,
or forgotten with its reason (``err40X``, ``err30X``, ``noDNS``...) -- is
appended to ``stateDir/journal-NNNNNNNN.log`` by a *group commit* on the
writer thread, every :data:`COMMIT_INTERVAL` seconds at most while pages
end.  A commit writes, in this order, with ``write()`` (into the kernel):

1. the page files of the pages it covers (written and renamed by the writer
   thread before it), then the output's index (or WARC file) -- the
   output's position is read then;
2. the URL stores' appends (the links those pages queued) and the seen log
   (written by the loop before the commit is handed to the writer);
3. the crawl log's lines of those outcomes (larbin_py.crawllog) and the
   records of the pages fetched, for the next crawl (larbin_py.records), then
4. one journal line: the outcomes, the stores' write positions, the seen
   log's length, the output's position, the crawl log's, the robots.txt
   log's and the records' positions, with a CRC32.

Two kinds of crash, two guarantees:

* **The process dies** (``kill -9``, out of memory, a bug): every byte
  written is in the kernel and reaches the disk anyway, so a journal line
  in the file implies everything it covers is there too.  A page counts as
  in flight until its commit is written: the engine starts no request while
  requests running plus outcomes not yet committed reach
  ``pagesConnexions``, so such a crash costs at most the requests in
  flight.  No fsync is needed for this.
* **The machine stops** (power loss, kernel panic): only what was fsynced
  is sure.  Every checkpoint fsyncs, off the loop, the page files written
  since the last one, their directories, the index (or WARC file), the
  store segments, the seen and robots logs and the journal, then writes
  ``checkpoint.json``; a store segment is also fsynced when it is complete
  (every 64 MB).  Commits after the checkpoint may have lost their files'
  ends: ``--reload`` checks each against the disk (:func:`valid_commits`)
  and keeps them only up to the first that is not wholly there, so the
  crawl goes back to the last commit on disk -- to the checkpoint at worst,
  what ``checkpointInterval`` bounds.  With ``syncCommits`` each commit
  fsyncs what it covers and its journal line (about half the pages per
  CPU-second on an ext4 disk): a machine crash then also costs only the
  requests in flight.

On ``--reload`` (:func:`read_journals`, :func:`cut_to_commit`): the journals
numbered from the checkpoint's serial on are read up to the first damaged
line, and checked as said above; the URL stores (main and priority), the
seen log and the output are cut back to the last valid commit's positions
(what came after was not committed: the pages that produced it are done
again; the crawl log and the robots.txt log too, so an outcome or an
answer not committed is logged once, when it is done again), and the URLs
the journal found done are dropped, counted as done,
when they come out of the stores (the frontier's ``replay``) or the
checkpoint's carried records.  A checkpoint ``N`` starts ``journal-N``; the
older journals go once it is durable.

Line format: ``crc32hex JSON`` with the JSON ``{"done": [[url, outcome],
...], "stores": {"main": [seg, off], "priority": [seg, off]}, "seen": bytes,
"output": {...}, "crawl_log": [rotations, offset], "robots": bytes,
"records": [bytes, bytes]}`` (the last three when kept); outcome ``""``
means fetched.  A commit may carry
no outcome, only crawl log lines (robots.txt answers).  The output's position
holds the index length; the index line of each page gives its file and
length, which is what the check on ``--reload`` compares with the disk.
"""

from __future__ import annotations

import json
import os
import stat
from dataclasses import dataclass, field

from .crawllog import rotations_of, cut_crawl_log
from .records import cut_records, links_path, records_path
from .frontier.store import UrlRecord, cut_segments, segment_path
from .logline import frame, unframe
from .output.base import INDEX_NAME, parse_index_line
from .owner_only import opener
from .state import write_checkpoint

__all__ = [
    "COMMIT_INTERVAL",
    "FETCHED",
    "Committer",
    "Replay",
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
    return frame(json.dumps(record, separators=(",", ":")).encode("ascii"))


def decode_commit(line: bytes) -> dict | None:
    """One journal line (with its newline) as a dict; None when damaged."""
    body = unframe(line)
    if not body:
        return None
    try:
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
    #: Whole commits dropped because what they cover is not on disk (a machine crash).
    unsynced: int = 0
    #: Highest journal serial found (the next checkpoint must number above it).
    max_serial: int = 0


def read_journals(state_dir: str, serial: int, *, checkpoint: dict | None = None,
                  save_dir: str | None = None, seen_log: str | None = None,
                  crawl_log: str | None = None, generation: int | None = None) -> Replay:
    """Read ``journal-N`` for every N >= ``serial`` in order, to the first damage.

    With ``checkpoint`` (the checkpoint's document), the commits are then
    checked against the files (:func:`valid_commits`) and only those up to
    the first one whose files are not all on disk count.
    """
    replay = Replay(max_serial=serial)
    records = []
    for n in _journal_serials(state_dir):
        replay.max_serial = max(replay.max_serial, n)
        if n < serial or replay.damaged:
            continue
        path = os.path.join(state_dir, journal_name(n))
        if not stat.S_ISREG(os.stat(path).st_mode):  # a device or a pipe would be read for ever
            replay.damaged += 1
            continue
        with open(path, "rb") as f:
            for line in f:
                record = decode_commit(line)
                if record is None:
                    replay.damaged += 1
                    break
                records.append(record)
    if checkpoint is not None and records:
        keep = valid_commits(state_dir, checkpoint, records, save_dir,
                             seen_log or os.path.join(state_dir, "seen.log"), crawl_log, generation)
        replay.unsynced = len(records) - keep
        del records[keep:]
    for record in records:
        for url, outcome in record["done"]:
            replay.done[url] = outcome
        replay.last = record
        replay.commits += 1
    return replay


def _size(path: str) -> int:
    try:
        return os.stat(path).st_size
    except OSError:
        return -1


def _warc_size(save_dir: str, name) -> int:
    name = str(name)
    if not name or "/" in name or name.startswith("."):
        return -1
    return max(_size(os.path.join(save_dir, name)), _size(os.path.join(save_dir, name + ".open")))


def _commit_on_disk(state_dir: str, record: dict, save_dir: str | None, seen_size: int,
                    index_size: int, crawl_log: tuple[int, int] | None = None,
                    records: tuple[int, int] | None = None) -> bool:
    """Are the positions ``record`` names all within the files (stores, seen log, output)?"""
    try:
        for name in ("main", "priority"):
            seg, off = (int(x) for x in record["stores"][name])
            path = segment_path(os.path.join(state_dir, "frontier", name), seg)
            if _size(path) < off:
                return False
        if int(record["seen"]) > seen_size:
            return False
        if crawl_log is not None and "crawl_log" in record:
            rotations, offset = (int(x) for x in record["crawl_log"])
            if rotations == crawl_log[0] and offset > crawl_log[1]:
                return False
        if records is not None and "records" in record:
            if any(int(want) > have for want, have in zip(record["records"], records)):
                return False
        output = record["output"]
        if output.get("mode") in ("mirror", "save", "warc"):
            if save_dir is None or int(output["index_length"]) > index_size:
                return False
            if output.get("warc_file") and _warc_size(save_dir, output["warc_file"]) < int(output["warc_offset"]):
                return False
    except (KeyError, TypeError, ValueError, AttributeError):
        return False
    return True


def _first_bad_line(save_dir: str, mode: str, start: int, end: int) -> int | None:
    """The offset of the first index line in [start, end) whose file is not
    whole on disk, or None.  A page file named again later in the range is
    checked at its last line only (the file holds that one)."""
    try:
        with open(os.path.join(save_dir, INDEX_NAME), "rb") as f:
            f.seek(start)
            data = f.read(end - start)
    except OSError:
        return start
    if len(data) < end - start:
        return start
    lines, offset = [], start
    raws = data.split(b"\n")
    tail = raws.pop()  # b"" when the range ends with a whole line, as a commit's does
    for raw in raws:
        lines.append((offset, raw))
        offset += len(raw) + 1
    if tail:
        return offset
    parsed, last = [], {}
    for offset, raw in lines:
        try:
            entry = parse_index_line(raw.decode("utf-8"))
        except ValueError:
            return offset
        parsed.append((offset, entry))
        last[entry["path"]] = offset
    for offset, entry in parsed:
        if mode == "warc":
            if _warc_size(save_dir, entry["path"]) <= (entry["offset"] or 0):
                return offset
        elif last[entry["path"]] == offset:
            path = entry["path"]
            if path.startswith("/") or ".." in path.split("/"):
                return offset
            if _size(os.path.join(save_dir, path)) != entry["length"]:
                return offset
    return None


def valid_commits(state_dir: str, checkpoint: dict, records: list[dict], save_dir: str | None,
                  seen_log: str, crawl_log: str | None = None, generation: int | None = None) -> int:
    """How many of ``records`` (commits after ``checkpoint``, in order) are on disk.

    After a process crash every byte written is in the kernel's cache and
    every commit is; after a machine crash (power loss) the files written
    since the checkpoint (synced only at checkpoints) may have lost their
    end.  A commit counts when each position it names is within its file
    (the last store segment, the seen log, the index, the WARC file) and
    every page file the index names up to its position (after the
    checkpoint's) exists with the length the index gives; the first commit
    that fails and all after it are dropped, so the crawl goes back to the
    last commit wholly on disk (to the checkpoint at worst).
    """
    seen_size = max(_size(seen_log), 0)
    log_end = None
    if crawl_log is not None:  # the crawl log's rotations and the current file's length
        log_end = (rotations_of(crawl_log), max(_size(crawl_log), 0))
    kept = None
    if generation is not None:  # the records' and their links' lengths
        kept = (max(_size(records_path(state_dir, generation)), 0), max(_size(links_path(state_dir, generation)), 0))
    base_output = checkpoint.get("output") or {}
    mode = base_output.get("mode")
    disk = mode in ("mirror", "save", "warc") and save_dir is not None
    index_size = 0
    if disk:
        index_size = _size(os.path.join(save_dir, INDEX_NAME))
    keep = 0
    for record in records:
        if not _commit_on_disk(state_dir, record, save_dir, seen_size, index_size, log_end, kept):
            break
        keep += 1
    if not disk or keep == 0:
        return keep
    try:
        base = int(base_output.get("index_length", 0))
    except (TypeError, ValueError):
        return 0
    while keep:
        end = int(records[keep - 1]["output"]["index_length"])
        bad = _first_bad_line(save_dir, mode, base, end) if end > base else None
        if bad is None:
            break
        while keep and int(records[keep - 1]["output"]["index_length"]) > bad:
            keep -= 1
    return keep


def cut_to_commit(state_dir: str, doc: dict, replay: Replay, seen_log: str, *,
                  robots_log: str | None = None, crawl_log: str | None = None,
                  records: int | None = None) -> list[str]:
    """Cut the state in ``state_dir`` back to the last commit (see the module docstring).

    Updates ``doc["output"]`` to the position of that commit.  A checkpoint
    written before the journal existed (no ``"commit"``) is left as it is.
    ``robots_log``, ``crawl_log``: those logs' paths, cut too when the
    commit names their positions; ``records``: the generation whose
    records (larbin_py.records) are cut too.  Returns what the crawl log's cut found
    damaged (larbin_py.crawllog.cut_crawl_log).
    """
    commit = replay.last if replay.last is not None else doc.get("commit")
    if commit is None:
        return []
    stores = commit["stores"]
    frontier = os.path.join(state_dir, "frontier")
    cut_segments(os.path.join(frontier, "main"), stores["main"])
    cut_segments(os.path.join(frontier, "priority"), stores["priority"])
    seen = int(commit["seen"])
    if os.path.exists(seen_log) and os.path.getsize(seen_log) > seen:
        os.truncate(seen_log, seen)
    if robots_log is not None and "robots" in commit and os.path.exists(robots_log) \
            and os.path.getsize(robots_log) > int(commit["robots"]):
        os.truncate(robots_log, int(commit["robots"]))
    if records is not None and "records" in commit:
        cut_records(state_dir, records, commit["records"])
    damage = []
    if crawl_log is not None and "crawl_log" in commit:
        damage = cut_crawl_log(crawl_log, commit["crawl_log"])
    if replay.last is not None:
        doc["output"] = replay.last["output"]
    return damage


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
    before) when a commit is prepared; the writer thread writes the output's
    index out and appends the journal line after the pages handed over
    before it.  ``output`` is the engine's output (a
    :class:`~larbin_py.output.writer.ThreadedOutput`, or one that writes
    nothing).  A commit is a fire-and-forget job: the loop hears of it only
    when it waits for one (:meth:`holds`: ``on_durable()`` is then called on
    the loop once a commit is written).  ``on_error(exc)`` is called (on
    the loop) when a commit or a checkpoint fails.  ``sync_commits``: each
    commit also fsyncs what it covers (see the module docstring).
    """

    def __init__(self, loop, writer, state_dir: str, *, frontier, seen, seen_log: str,
                 robots_log=None, robots_path: str | None = None, output=None, serial: int = 0,
                 on_durable=None, on_error=None, interval: float = COMMIT_INTERVAL,
                 sync_commits: bool = False, crawl_log=None, records=None) -> None:
        self._loop = loop
        self.writer = writer
        self.state_dir = state_dir
        self.frontier = frontier
        self.seen = seen
        self.seen_log = seen_log
        #: (Writer.) Tells the seen store how much of its log a written commit covers
        #: (a disk store merges no further: --reload never cuts the log below it).
        self._seen_committed = getattr(seen, "committed", None) or (lambda _bytes: None)
        self.robots_log = robots_log
        self.robots_path = robots_path
        self.output = output
        self.serial = serial  # the journal appended to
        self.on_durable = on_durable
        self.on_error = on_error
        self.interval = interval
        self.sync_commits = sync_commits
        #: The crawl log (a larbin_py.crawllog.CrawlLogFile, written on the writer), or None.
        self.crawl_log = crawl_log
        #: The records for the next crawl (a larbin_py.records.RecordsWriter, on the writer), or None.
        self.records = records
        self._pending: list[list[str]] = []
        self._lines: list[bytes] = []
        self._ops: list = []
        self._pending_requests = 0
        #: Outcomes of requests handed to the writer (loop) / written in a commit (writer).
        self._handed = 0
        self._written = 0
        #: The loop waits for a commit (:meth:`holds`); the writer then posts on_durable.
        self._want_durable = False
        self._handle = None
        self._last_start = -1e9
        #: Commit jobs handed to the writer (loop) / ended there (writer): while one
        #: runs and another waits, the next is not handed over but grows (a slow disk
        #: gets fewer, larger commits, and its queue holds at most two of them).
        self._jobs_sent = 0
        self._jobs_ended = 0
        #: Per store, the first segment that may hold bytes not yet synced.
        self._synced_seg: dict[str, int] = {}
        self._fd = -1  # the journal file (writer thread)
        self._fd_serial = -1
        self.commits = 0
        #: ``() -> [paths]`` fsynced with everything else when a commit or a
        #: checkpoint syncs (the analysis queue, larbin_py.analysis.queue).
        self.sync_also = None
        if hasattr(output, "take_pending"):
            # The pages go to the writer with the commit that covers them:
            # one thread hand-over every few ms instead of one per loop turn.
            output.batch_by_commit = True

    # -- the loop's side ---------------------------------------------------
    @property
    def uncommitted(self) -> int:
        """Outcomes of requests not yet in the journal (they count as in flight)."""
        return self._pending_requests + self._handed - self._written

    def holds(self, running: int, limit: int) -> bool:
        """True while ``running`` requests plus the uncommitted outcomes reach
        ``limit``; ``on_durable`` is then called (on the loop) after the next commit."""
        pending = self.uncommitted
        if pending <= 0 or running + pending < limit:
            return False
        self._want_durable = True
        # The writer may have written a commit between the test and the flag.
        pending = self.uncommitted
        return pending > 0 and running + pending >= limit

    def done(self, url: str, outcome: str, request: bool, line: bytes | None = None) -> None:
        """``url`` ended with ``outcome``; ``request``: a request of ours produced it;
        ``line``: its crawl log line (written by the commit that covers it)."""
        self._pending.append([url, outcome])
        if request:
            self._pending_requests += 1
        if line is not None and self.crawl_log is not None:
            self._lines.append(line)
        self._soon()

    def log(self, line: bytes) -> None:
        """A crawl log line that is no URL's outcome (a robots.txt answer): in the next commit."""
        if self.crawl_log is not None:
            self._lines.append(line)
            self._soon()

    def record(self, op) -> None:
        """A page's record for the next crawl (larbin_py.records.RecordsWriter.apply's op):
        written by the next commit, before its journal line."""
        if self.records is not None:
            self._ops.append(op)
            self._soon()

    def _soon(self) -> None:
        if self._handle is None:
            delay = self._last_start + self.interval - self._loop.time()
            self._handle = (self._loop.call_later(delay, self._commit) if delay > 0
                            else self._loop.call_soon(self._commit))

    def _take(self) -> tuple[list, int, tuple[list[bytes], list]]:
        done, n, lines, ops = self._pending, self._pending_requests, self._lines, self._ops
        self._pending, self._pending_requests, self._lines, self._ops = [], 0, [], []
        self._handed += n
        return done, n, (lines, ops)

    def _prepare(self, sync: bool, checkpoint: bool = False) -> tuple[dict, int, list[str]]:
        """Write the loop's buffers out; (store positions, seen length, paths to sync).

        The paths are every state file the commit covers when ``sync``; else
        only the store segments completed since the last commit (once per
        segment, 64 MB: a commit's position is then checked on ``--reload``
        against its last segment alone).
        """
        lanes = self.frontier.lanes
        lanes.flush()
        try:
            self.seen.flush()
        except OSError as exc:  # a write() names no file: say which one failed
            if exc.filename is None:
                exc.filename = self.seen_log
            raise
        paths = [self.seen_log] if sync else []
        if self.robots_log is not None:
            self.robots_log.flush()
            if sync:
                paths.append(self.robots_path)
        stores = {"main": lanes.main, "priority": lanes.prio}
        if checkpoint:
            stores["wait"] = lanes.wait
        positions = {}
        for name, store in stores.items():
            seg, off = store.write_position()
            positions[name] = [seg, off]
            first = self._synced_seg.get(name, seg)
            last = seg + 1 if sync else seg
            paths.extend(segment_path(store.directory, n) for n in range(first, last))
            self._synced_seg[name] = seg
        positions.pop("wait", None)
        if self.robots_log is not None:
            positions["robots"] = self.robots_log.position()
        if sync and self.sync_also is not None:
            paths.extend(self.sync_also())
        seen = os.path.getsize(self.seen_log) if os.path.exists(self.seen_log) else 0
        return positions, seen, paths

    def _commit(self) -> None:
        self._handle = None
        if not self._pending and not self._lines and not self._ops:
            return
        if self._jobs_sent - self._jobs_ended >= 2 and self.writer.error is None:
            # the writer is behind: this one waits and grows (a failed writer skips the jobs
            # queued, their ends never counted: nothing waits for them then)
            self._handle = self._loop.call_later(self.interval, self._commit)
            return
        self._last_start = self._loop.time()
        done, n, lines = self._take()
        try:
            positions, seen, paths = self._prepare(self.sync_commits)
        except OSError as exc:  # a state file could not be written (a full disk...)
            self._handed -= n
            if self.on_error is not None:
                self.on_error(exc)
            return
        pages = self._take_pages()
        self._jobs_sent += 1
        self.writer.submit(self._queued_commit_job, done, positions, seen, paths, n, pages, lines,
                           weight=1 + len(pages), on_error=self.on_error)  # lines: (crawl log lines, records)

    def _take_pages(self) -> list:
        """The pages written since the last commit (this commit's job stores them first)."""
        take = getattr(self.output, "take_pending", None)
        return take() if take is not None else []

    def _checkpointed(self, fut, n: int) -> None:
        if fut.cancelled() or fut.exception() is not None:
            self._handed -= n  # the crawl stops: nothing more is waited for

    async def checkpoint(self, data: dict, carry: list[UrlRecord], serial: int) -> None:
        """Commit what is pending, then write checkpoint ``serial`` (``data``
        gets the output's position and the commit's positions); raises on failure."""
        done, n, lines = self._take()
        positions, seen, paths = self._prepare(True, checkpoint=True)
        pages = self._take_pages()
        if pages:  # they go first, in order
            self.writer.submit(self.output.write_many, pages, weight=len(pages), on_error=self.on_error)
        fut = self.writer.call(self._checkpoint_job, done, positions, seen, paths, n, data, carry, serial, lines)
        fut.add_done_callback(lambda f: self._checkpointed(f, n))
        await fut

    def close(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None

    # -- the writer's side ---------------------------------------------------
    def _position(self, sync: bool, paths: list[str]) -> dict:
        out = self.output
        if sync:
            position = out.sync_position() if hasattr(out, "sync_position") else out.position()
        else:
            position = out.flush_position() if hasattr(out, "flush_position") else out.position()
        for path in paths:
            if path:
                _fdatasync_path(path)
        return position

    def _append(self, record: dict, sync: bool) -> None:
        path = os.path.join(self.state_dir, journal_name(self.serial))
        try:
            if self._fd_serial != self.serial:
                self._close_journal()
                self._fd = opener(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
                self._fd_serial = self.serial
            data = encode_commit(record)
            view = memoryview(data)
            while view:
                view = view[os.write(self._fd, view):]
            if sync:
                os.fdatasync(self._fd)
        except OSError as exc:  # a write() names no file: say which one failed
            if exc.filename is None:
                exc.filename = path
            raise
        self.commits += 1

    def _close_journal(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd, self._fd_serial = -1, -1

    def _written_up(self, n: int) -> None:
        """(Writer.) ``n`` more outcomes are in the journal; wake the loop if it waits."""
        self._written += n
        if self._want_durable:
            self._want_durable = False
            if self.on_durable is not None:
                self.writer._post(self.on_durable)

    def _queued_commit_job(self, done, stores, seen, paths, n, pages, extra) -> None:
        try:
            self._commit_job(done, stores, seen, paths, n, None, pages, extra)
        finally:
            self._jobs_ended += 1

    def _commit_job(self, done: list, stores: dict, seen: int, paths: list[str], n: int,
                    sync: bool | None = None, pages: list | None = None,
                    extra: tuple | None = None) -> dict:
        if pages:  # the pages this commit covers, stored first
            self.output.write_many(pages)
        sync = self.sync_commits if sync is None else sync
        position = self._position(sync, paths)
        lines, ops = extra if extra is not None else ((), ())
        log = self.crawl_log
        if log is not None:
            if lines:  # the lines of the outcomes this commit covers, before its journal line
                log.write(lines)
            if sync:
                log.sync()
            stores["crawl_log"] = log.position()
        records = self.records
        if records is not None:
            records.apply(ops)
            if sync:
                records.sync()
            stores["records"] = records.position()
        if done or lines or ops:
            record = {"done": done, "stores": {"main": stores["main"], "priority": stores["priority"]},
                      "seen": seen, "output": position}
            for name in ("crawl_log", "robots", "records"):
                if name in stores:
                    record[name] = stores[name]
            self._append(record, sync)
            self._seen_committed(seen)
        self._written_up(n)
        return position

    def _checkpoint_job(self, done, stores, seen, paths, n, data, carry, serial, lines=None) -> None:
        position = self._commit_job(done, stores, seen, paths, n, sync=True, extra=lines)
        if self._fd >= 0 and not done:
            os.fdatasync(self._fd)  # the journal's earlier commits (the checkpoint covers them)
        # Commits from here on belong to checkpoint ``serial``: its journal
        # exists (empty) before the checkpoint names it.
        self._close_journal()
        path = os.path.join(self.state_dir, journal_name(serial))
        fd = opener(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        os.close(fd)
        self.serial = serial
        data["output"] = position
        data["commit"] = {"stores": {"main": stores["main"], "priority": stores["priority"]}, "seen": seen}
        for name in ("crawl_log", "robots", "records"):
            if name in stores:
                data["commit"][name] = stores[name]
        if "records" in stores and isinstance(data.get("records"), dict):
            data["records"]["position"] = stores["records"]
        write_checkpoint(self.state_dir, data, carry, serial)
        self._seen_committed(seen)
        for n in _journal_serials(self.state_dir):
            if n < serial:
                try:
                    os.unlink(os.path.join(self.state_dir, journal_name(n)))
                except FileNotFoundError:
                    pass

    def close_journal(self) -> None:
        """(Writer thread, or after it stopped.) Close the journal file."""
        self._close_journal()
