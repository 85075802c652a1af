"""What makes a crawl's progress durable, and what ``--reload`` reads back.

The engine does not know where its state lives: it talks to a
:class:`CrawlState`, the checkpointer strategy.  :class:`LocalState` is the
single process's (a folder, ``stateDir``: the URL stores, the seen log, the
robots.txt log, the cookie jar, ``checkpoint.json`` and the journal of
group commits, larbin_py.journal); the distributed mode swaps in its own
(outcomes acknowledged on Redis streams).

What the engine asks of a state, and when:

=======================  =====================================================
call                     when, and what it promises
=======================  =====================================================
``seen``,                built at construction: the seen store, and the
``frontier_options()``   keyword arguments of
                         larbin_py.frontier.assembly.assemble this state
                         sets (the stores' positions to continue from, the
                         URLs a journal found done; a worker's parts)
``attach(frontier)``     once, after the frontier is built
``output_position()``    where the output continues (its files' lengths)
``open(...)``            once the loop runs: start recording outcomes
``done(url, outcome,     every terminal outcome (fetched, or forgotten with
from_request, line)``    its reason) and its crawl log line; durable at the
                         next group commit
``log(line)``            a crawl log line of no URL's outcome (robots.txt)
``holds(running, cap)``  the durability gate: True while no request may
                         start (a crash must cost at most the requests in
                         flight)
``restore(...)``         ``--reload``: the frontier continued, the engine's
                         own section of the checkpoint returned; then
                         ``report_damage(err)`` says what was dropped
``checkpoint(...)``      at the start (beside the first requests when
                         ``first_beside``, else before them), every
                         ``checkpointInterval`` and at the end; False when it
                         keeps nothing (canReload off); raises OSError /
                         OutputError (the crawl stops)
``close_commits()``      at shutdown, before the outputs close
``close()``              at shutdown, after the writer thread ended
``abandon()``            a start that failed before the crawl began
=======================  =====================================================
"""

from __future__ import annotations

import os
import time
from typing import Protocol, runtime_checkable

from . import robots as robots_mod
from .frontier import codec
from .frontier.protocol import Scheduler
from .frontier.sieve import open_seen
from .frontier.store import UrlRecord
from .crawllog import CrawlLogFile
from .journal import COMMIT_INTERVAL, Committer, FETCHED, cut_to_commit, read_journals
from .net.cookies import CookieJar, load_jar, save_jar
from .owner_only import make_private_dir
from .records import MARKER, RECORDS_DIR, OldRecords, RecordsWriter, prepare_recrawl, remove_generation, remove_marker
from .state import (CHECKPOINT, ROBOTS_LOG, SEEN_LOG, CutBeforeFirstCheckpoint, RobotsLog, StateError, has_state,
                    read_checkpoint, remove_crawl_files)

__all__ = ["CrawlState", "LocalState", "StateDirInUse"]


class StateDirInUse(Exception):
    """A plain start found the state of an earlier crawl in stateDir."""


@runtime_checkable
class CrawlState(Protocol):
    """The checkpointer strategy the engine runs with (see the module's table)."""

    #: The seen store the frontier tests links against.
    seen: object
    #: The useCookies jar (None when off), kept across --reload.
    cookies: CookieJar | None
    #: Checkpoints written so far by this run.
    checkpoints: int
    #: State found damaged and dropped on --reload, by file (counts).
    damaged: dict[str, int]
    #: A page's outcome is made final (acked) before an analysis process could
    #: hand its links back (the distributed mode): the link extractor then runs
    #: on the loop, and only the user analyzers go to the processes.
    links_on_loop: bool
    #: The analysis queue's folder under stateDir (one per worker in the distributed mode).
    analysis_queue: str
    #: The first checkpoint may be written beside the crawl's first requests
    #: (larbin_py.checkpoints); False when it must end before any request starts
    #: (the distributed mode: the first one joins the crawl and starts the coordinator).
    first_beside: bool
    #: None, or where each page request's start and end are written (the
    #: distributed mode: a worker's death counts a try against the requests it
    #: had running, larbin_py.distributed.inflight): ``start(tag) -> slot``, ``end(slot)``.
    inflight: object
    #: None, or the fetcher's ``may_send(ip)``, asked before a request goes out on a
    #: connection just opened (larbin_py.net.http): a worker's IP leases still hold.
    may_send: object

    def frontier_options(self) -> dict: ...

    def attach(self, frontier: Scheduler) -> None: ...

    def output_position(self) -> dict | None: ...

    def open(self, loop, writer, output, *, frontier: Scheduler, on_durable, on_error) -> None: ...

    def done(self, url: str, outcome: str, from_request: bool, line: bytes | None = None) -> None: ...

    def log(self, line: bytes) -> None: ...

    def holds(self, running: int, cap: int) -> bool: ...

    def restore(self, frontier: Scheduler, now: float, wall: float, err) -> dict: ...

    def report_damage(self, err) -> None: ...

    async def checkpoint(self, frontier: Scheduler, now: float, section: dict) -> bool: ...

    def close_commits(self) -> None: ...

    def close(self, frontier: Scheduler, *, broken: bool) -> list[OSError]: ...

    def abandon(self, frontier: Scheduler) -> None: ...


class LocalState:
    """The state of a single-process crawl in ``config.state_dir``.

    ``reload``: continue the crawl saved there (the checkpoint read, the
    stores, the seen log and the index cut back to the last group commit);
    otherwise the folder must hold no earlier crawl (:class:`StateDirInUse`).
    ``seen``: a seen store to use instead of the array store (a fresh crawl).
    """

    def __init__(self, config, *, reload: bool = False, seen=None, recrawl: bool = False) -> None:
        self.config = config
        self.reload = reload
        state_dir = self.state_dir = config.state_dir
        seen_log = os.path.join(state_dir, SEEN_LOG)
        #: The records for the next crawl (larbin_py.records): this crawl's generation, the one
        #: it revisits (--recrawl) and how much of that one's records count.
        self.generation = 1
        self.previous: int | None = None
        self.previous_end: list[int] | None = None
        self._start_output: dict | None = None  # where a recrawl's output continues
        self.seeding = False  # a recrawl's records are still to be queued (larbin_py.recrawl)
        self.records: RecordsWriter | None = None
        self.old_records: OldRecords | None = None
        self._finished = False
        if recrawl:
            if reload:
                raise StateError("--recrawl starts a new crawl: it does not go with --reload")
            start = prepare_recrawl(state_dir, config.output_mode)
            self.previous, self.previous_end = start.previous, start.end
            self.generation = start.previous + 1
            self.seeding = True
            if config.output_mode == "warc" and isinstance(start.output, dict):
                # The WARC series and its index.tsv go on (a mirror's index starts afresh).
                self._start_output = {"mode": "warc", "index_length": start.output.get("index_length", 0),
                                      "warc_file": None, "warc_serial": start.output.get("warc_serial", 0)}
        self._doc: dict | None = None
        self._frontier_state: codec.FrontierState | None = None
        self._carry: list[UrlRecord] = []
        self._replay = None
        self.damaged: dict[str, int] = {}
        #: What cutting the crawl log back to the last commit found damaged (one sentence each).
        self.crawl_log_damage: list[str] = []
        #: The crawl log (larbin_py.crawllog), opened with the writer thread; None when off.
        self.crawl_log: CrawlLogFile | None = None
        self._loose: list[bytes] = []  # crawl log lines without a committer (canReload off)
        self._loose_handle = None
        self._loop = None
        self.links_on_loop = False  # done() follows the links' offer or their durable analysis task
        self.analysis_queue = "analysis"
        self.first_beside = True  # its snapshot is on the loop, its writes on the writer thread
        self.inflight = None
        self.may_send = None
        #: A --reload that found a crawl cut before its first checkpoint: the line that says it starts again.
        self.cut_start: str | None = None
        if reload:
            try:
                self._doc, self._carry, bad_carry = read_checkpoint(state_dir)
            except CutBeforeFirstCheckpoint:
                self.cut_start = clear_cut_start(state_dir, config.crawl_log_path)
                reload = self.reload = False
        if reload:
            try:  # the frontier's section, checked before anything is cut or opened
                self._frontier_state = codec.decode(self._doc.get("frontier"))
            except codec.CheckpointError as exc:
                raise StateError(f"{os.path.join(state_dir, CHECKPOINT)}: {exc}") from None
            # Outcomes committed after that checkpoint; the state is cut back to the last commit.
            info = self._doc.get("records")
            if isinstance(info, dict):
                self.generation = int(info["generation"])
                if info.get("previous") is not None and not info.get("finished"):
                    self.previous, self.previous_end = int(info["previous"]), list(info["previous_end"])
            self._replay = read_journals(state_dir, int(self._doc["serial"]), checkpoint=self._doc,
                                         save_dir=config.save_dir, crawl_log=config.crawl_log_path,
                                         generation=self.generation)
            # URLs found done by an earlier --reload and still waiting in the stores
            pending = {str(url): str(outcome) for url, outcome in self._doc.get("replay", ())}
            if pending:
                pending.update(self._replay.done)
                self._replay.done = pending
            self.crawl_log_damage = cut_to_commit(state_dir, self._doc, self._replay, seen_log,
                                                  robots_log=os.path.join(state_dir, ROBOTS_LOG),
                                                  crawl_log=config.crawl_log_path, records=self.generation)
            self.seen = open_seen(config.seen_store, state_dir, reload=True)
            self.damaged = {"carry": bad_carry, "seen": self.seen.dropped_bytes, "journal": self._replay.damaged}
        else:
            if has_state(state_dir):
                raise StateDirInUse(
                    f"stateDir {state_dir!r} holds a previous crawl: continue it with --reload, "
                    "or remove that folder to start afresh"
                )
            self.seen = seen if seen is not None else open_seen(config.seen_store, state_dir)
        #: What a fresh stateDir held before: a start that fails removes what it added (abandon).
        self._before = _entries(state_dir)
        make_private_dir(state_dir)  # 0700, the folders above it as usual (larbin_py.owner_only)
        self._robots_log: RobotsLog | None = None
        self._robots_answers: dict[str, tuple[float, bytes | None]] = {}
        if reload:
            self._robots_answers, self.damaged["robots"] = RobotsLog.load(os.path.join(state_dir, ROBOTS_LOG))
        if config.can_reload:
            self.seen.open_log(seen_log)
            self._robots_log = RobotsLog(os.path.join(state_dir, ROBOTS_LOG))
        self.cookies: CookieJar | None = None
        self._cookies_saved = 0  # the jar's ``changes`` when last saved
        if config.use_cookies or any(rule.cookies for rule in config.site):  # a site line may want a jar
            self.cookies, bad = load_jar(state_dir, time.time()) if reload else (CookieJar(), 0)
            self.damaged["cookies"] = bad
        self._serial = int(self._doc["serial"]) if self._doc else 0
        if self._replay is not None:  # above every journal's number
            self._serial = max(self._serial, self._replay.max_serial)
        if self.previous is not None and config.can_reload:
            self.old_records = OldRecords(state_dir, self.previous, self.previous_end)
        self._committer: Committer | None = None
        self._writer = None
        self.checkpoints = 0
        #: Store segments found cut short on --reload (one sentence each).
        self.store_damage: list[str] = []

    # -- building ---------------------------------------------------------
    @property
    def robots_log(self) -> RobotsLog | None:
        """Where robots.txt answers are logged (None when canReload is off)."""
        return self._robots_log

    def frontier_options(self) -> dict:
        """On --reload: the stores' positions to continue from, and the URLs the
        journal found done that are still in them (``replay``: counted, not
        fetched again, as they come out)."""
        if self._frontier_state is None:
            return {}
        return {"positions": self._frontier_state.stores,
                "replay": dict(self._replay.done) if self._replay is not None else {}}

    def attach(self, frontier: Scheduler) -> None:
        self.damaged["store"] = frontier.lanes.corrupt_records
        self.store_damage = frontier.lanes.damage()

    def output_position(self) -> dict | None:
        """Where the output continues (its files' lengths at the checkpoint; a recrawl's WARC
        after the last crawl's)."""
        return self._doc.get("output") if self._doc else self._start_output

    @property
    def keeps_records(self) -> bool:
        """The records for the next crawl are kept (canReload: they are written with the commits)."""
        return self.config.can_reload

    @property
    def wants_writer(self) -> bool:
        """A writer thread is needed (the crawl log), whatever the output."""
        return self.config.crawl_log_path is not None

    def open(self, loop, writer, output, *, frontier, on_durable, on_error) -> None:
        """Open the crawl log, and start the group commits (canReload on): the
        journal after the files it covers; without them the crawl log's lines
        go to the writer in batches."""
        self._loop = loop
        self._writer = writer
        self._on_error = on_error
        path = self.config.crawl_log_path
        if path is not None and writer is not None:
            self.crawl_log = CrawlLogFile(path, max_bytes=self.config.crawl_log_max_bytes)
        if not self.config.can_reload:
            return
        self.records = RecordsWriter(self.state_dir, self.generation, self.old_records)
        self._committer = Committer(
            loop, writer, self.state_dir, frontier=frontier, seen=self.seen,
            seen_log=os.path.join(self.state_dir, SEEN_LOG), robots_log=self._robots_log,
            robots_path=os.path.join(self.state_dir, ROBOTS_LOG), output=output,
            serial=self._serial, on_durable=on_durable, on_error=on_error,
            sync_commits=self.config.sync_commits, crawl_log=self.crawl_log, records=self.records)

    @property
    def committer(self) -> Committer | None:
        return self._committer

    # -- while crawling ---------------------------------------------------
    def done(self, url: str, outcome: str, from_request: bool, line: bytes | None = None) -> None:
        if self._committer is not None:
            self._committer.done(url, outcome, from_request, line)
        elif line is not None:
            self.log(line)

    def record(self, op) -> None:
        """A page's record for the next crawl (larbin_py.recrawl), written with the next commit."""
        if self._committer is not None:
            self._committer.record(op)

    def log(self, line: bytes) -> None:
        if self._committer is not None:
            self._committer.log(line)
        elif self.crawl_log is not None:  # no journal: the lines go to the writer every few ms
            self._loose.append(line)
            if self._loose_handle is None:
                self._loose_handle = self._loop.call_later(COMMIT_INTERVAL, self._write_loose)

    def _write_loose(self) -> None:
        self._loose_handle = None
        lines, self._loose = self._loose, []
        if lines:
            self._writer.submit(self.crawl_log.write, lines, on_error=self._on_error)

    def holds(self, running: int, cap: int) -> bool:
        com = self._committer
        return com is not None and com.holds(running, cap)

    # -- --reload ---------------------------------------------------------
    def restore(self, frontier: Scheduler, now: float, wall: float, err) -> dict:
        """Continue the crawl of the checkpoint; returns the engine's section of it."""
        doc = self._doc
        state = self._frontier_state
        carry = self._carry
        replay = frontier.replay
        found_done = len(replay)
        if replay:
            # Carried URLs done after the checkpoint are counted, not queued;
            # those still in the stores are dropped as they come out.
            kept_carry = []
            for rec in carry:
                outcome = replay.pop(rec.url, None)
                if outcome is None:
                    kept_carry.append(rec)
                elif outcome == FETCHED:
                    state.fetched += 1
                else:
                    state.forgotten[outcome] = state.forgotten.get(outcome, 0) + 1
            carry = kept_carry
        codec.restore(frontier, state, carry, now, wall)
        kept = 0
        for url, (when, body) in self._robots_answers.items():
            left = when + robots_mod.CACHE_TTL - wall
            if left <= 0:
                continue
            rules = robots_mod.RobotsTxt.parse(body) if body is not None else robots_mod.RobotsTxt.allow_all()
            frontier.restore_robots(url, rules, now + left)
            kept += 1
        self._robots_answers = {}
        self._carry = []
        print(f"larbin_py: continuing the crawl saved in {self.state_dir!r} (checkpoint "
              f"{doc['serial']}): {frontier.fetched} pages done, {frontier.queued} URLs queued, "
              f"{len(carry)} of them carried from memory, {len(self.seen)} URLs seen, "
              f"robots.txt of {kept} sites kept; {found_done} URLs found done in "
              f"{self._replay.commits} commits of the journal", file=err)
        return doc.get("engine", {})

    def report_damage(self, err) -> None:
        """Say what --reload found damaged and dropped (after the engine's own parts restored)."""
        damage = {k: v for k, v in self.damaged.items() if v}
        if damage:
            print("larbin_py: damaged state dropped (a crash cut these files): "
                  + ", ".join(f"{k} {v} {'bytes' if k == 'seen' else 'records'}" for k, v in damage.items()),
                  file=err)
        for message in self.store_damage:
            print(f"larbin_py: damaged state: {message}", file=err)
        for message in self.crawl_log_damage:
            print(f"larbin_py: damaged state: {message}", file=err)
        if self._replay is not None and self._replay.unsynced:
            print(f"larbin_py: {self._replay.unsynced} commits of the journal dropped: what they cover is not "
                  "all on disk (the machine stopped before a checkpoint); their pages are fetched again",
                  file=err)

    # -- checkpoints ------------------------------------------------------
    async def checkpoint(self, frontier: Scheduler, now: float, section: dict) -> bool:
        """Make the progress durable: the snapshot taken here, on the loop;
        the writer thread syncs what it covers and writes checkpoint.json.

        False when there is nothing to write to (canReload off).  Raises
        OSError / OutputError: the engine stops the crawl.
        """
        if self._committer is None:
            return False
        if self.cookies is not None and self.cookies.changes != self._cookies_saved:
            changes = self.cookies.changes
            await self._writer.call(save_jar, self.state_dir, self.cookies.to_json())
            self._cookies_saved = changes
        state, carry = codec.snapshot(frontier, now, time.time(), sync=False)
        self._serial += 1
        data = {"frontier": codec.encode(state), "engine": section, "time": time.time()}
        # The records' generation (their position is the commit's, filled in on the writer)
        # and whether the crawl ended: only a finished crawl is recrawled.
        self._finished = frontier.idle() and not self.seeding
        data["records"] = {"generation": self.generation, "previous": self.previous,
                           "previous_end": self.previous_end, "finished": self._finished}
        if frontier.replay:  # found done in a journal, not yet out of the stores: still done
            data["replay"] = [[url, outcome] for url, outcome in frontier.replay.items()]
        await self._committer.checkpoint(data, carry, self._serial)
        frontier.lanes.release(state.stores)
        self.checkpoints += 1
        if self.previous is not None and not self.seeding:
            remove_marker(self.state_dir)  # a recrawl's start is in a checkpoint: --reload continues it
        return True

    # -- the end ----------------------------------------------------------
    def close_commits(self) -> None:
        """No more commits (the last checkpoint was written): before the outputs close.
        Without commits, the crawl log's last lines go to the writer now."""
        if self._committer is not None:
            self._committer.close()
        if self._loose_handle is not None:
            self._loose_handle.cancel()
        if self._loose and self._writer is not None:
            self._write_loose()

    def close(self, frontier: Scheduler, *, broken: bool) -> list[OSError]:
        """Close the journal, the logs, the stores and the seen log; the failures returned.

        Each close is tried once (a full disk may fail again) so the summary
        still comes.  The stores close before the seen log, which is not
        written at all once a state write failed (``broken``): a fingerprint
        on disk whose URL is not would lose that URL on --reload.
        """
        failures: list[OSError] = []
        if self._committer is not None:
            self._committer.close_journal()
        closes = [self._robots_log.close] if self._robots_log is not None else []
        if self.crawl_log is not None:
            closes.append(self.crawl_log.close)
        if self.records is not None:
            closes.append(self.records.close)
        if self.old_records is not None:
            closes.append(self.old_records.close)
            if self._finished and not broken:  # every record of the generation revisited went on
                closes.append(lambda: remove_generation(self.state_dir, self.previous))
        closes.append(frontier.close)
        for close in closes:
            try:
                close()
            except OSError as exc:
                failures.append(exc)
        if not broken:
            try:
                self.seen.close()
            except OSError as exc:
                exc.filename = exc.filename or os.path.join(self.state_dir, SEEN_LOG)
                failures.append(exc)
        return failures

    def abandon(self, frontier: Scheduler) -> None:
        """Undo a start that failed before the crawl began (a server could not
        listen, the output could not be opened).

        Nothing was fetched, queued or checkpointed: the logs are closed as
        they are, and a fresh stateDir loses the empty files and folders this
        start made (so the next plain start does not take it for an earlier
        crawl); a --reload's checkpoint and logs are left intact.
        """
        if self._robots_log is not None:
            self._robots_log.close()
        if self.crawl_log is not None:
            self.crawl_log.close()
        if self.records is not None:
            self.records.close()
        if self.old_records is not None:
            self.old_records.close()
        self.seen.close()
        frontier.close()
        if not self.reload:
            _remove_new_empty(self.state_dir, self._before)


def clear_cut_start(state_dir: str, crawl_log: str | None) -> str:
    """Remove what a crawl cut before its first checkpoint left in ``state_dir``; the line that says so.

    The first checkpoint is the writer thread's first job (larbin_py.checkpoints): a
    crawl killed before it wrote it had made nothing durable (no commit, no page,
    no records), so nothing of it can be continued and a --reload starts it again
    from its seeds.  Its files go (the stores, the seen and robots logs, the journals,
    the records, the analysis queue, the crawl log when it is stateDir's own); the lock,
    the cookie jar and anything else stay.  A --recrawl's start cut short is done
    again by --recrawl (its marker names the crawl it revisits): StateError.
    """
    if os.path.exists(os.path.join(state_dir, RECORDS_DIR, MARKER)):
        raise StateError(f"{state_dir}: a --recrawl was cut before its first checkpoint: start it again "
                         "with --recrawl")
    remove_crawl_files(state_dir)
    records = os.path.join(state_dir, RECORDS_DIR)  # (this crawl's own: uncommitted)
    if os.path.isdir(records) and not os.path.islink(records):
        import shutil

        shutil.rmtree(records)
    if crawl_log is not None and os.path.dirname(os.path.abspath(crawl_log)) == os.path.abspath(state_dir):
        try:
            os.unlink(crawl_log)
        except FileNotFoundError:
            pass
    return (f"larbin_py: the crawl in {state_dir!r} was cut before its first checkpoint (or ran with "
            "canReload off): nothing of it was kept, it starts again from its seeds")


def _entries(path: str) -> set[str] | None:
    """Every file and folder under ``path`` (None when ``path`` is absent)."""
    if not os.path.isdir(path):
        return None
    found = set()
    for root, dirs, files in os.walk(path):
        found.update(os.path.join(root, name) for name in dirs + files)
    return found


def _remove_new_empty(path: str, before: set[str] | None) -> None:
    """Remove the empty files and folders under ``path`` not in ``before``
    (``path`` itself too when it was absent): what a failed start added."""
    for root, dirs, files in os.walk(path, topdown=False):
        for name in files:
            full = os.path.join(root, name)
            if (before is None or full not in before) and os.path.getsize(full) == 0:
                os.unlink(full)
        for name in dirs:
            full = os.path.join(root, name)
            if before is None or full not in before:
                try:
                    os.rmdir(full)
                except OSError:  # not empty: something else is in it
                    pass
    if before is None:
        try:
            os.rmdir(path)
        except OSError:
            pass
