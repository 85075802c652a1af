"""A worker of a distributed crawl: today's Engine with four parts swapped.

``run_worker(config)`` builds the :class:`~larbin_py.engine.Engine` with a
:class:`DistState` as its crawl state (the checkpointer strategy of
:mod:`larbin_py.crawl_state`), which gives the engine a frontier whose

* main lane is a :class:`~larbin_py.distributed.inbox.RedisInbox` (fed by fenced
  reads of the owned partitions' streams),
* admitted links go to a :class:`~larbin_py.distributed.sink.RedisSink`,
* records' ends go to the coordinator's ``on_done`` (the acks), and
* IPs are scheduled only while their lease is held;

and runs the :class:`~larbin_py.distributed.coordinator.Coordinator` beside it.
Nothing of the engine is forked.

**State.**  Redis holds the crawl: every queued URL is pending in its
partition's stream until acked, after the output that covers it is durable.
The worker's local stores (priority and wait lanes) are scratch in
``stateDir/<workerId>/``, emptied at start; there is no journal and no
checkpoint file (``--reload`` continues from Redis).

**The end.**  A worker idle on its own does not stop (another may be about
to send it links): the frontier's ``idle()`` answers True only once the
coordinator saw the crawl end (two quiet waves, larbin_py.distributed.termination).

**Outputs.**  ``mirror``: one tree shared by the workers of a machine (one
host has one owner at a time, so no file is written by two), each worker
indexing its pages in ``saveDir/.workers/<workerId>/index.tsv``;
:func:`merge_index` writes ``saveDir/index.tsv`` from them with each URL
once (a page fetched again after a takeover keeps its last line).  Every
worker merges when it ends (under a lock: workers sharing a saveDir merge
one at a time), and the launcher once more at the very end, so each
machine's saveDir is a whole mirror of what its workers saved.  ``warc``
and ``save``: one series per worker in ``saveDir/<workerId>/``.

**Records** (larbin_py.distributed.records): a worker of a launcher's crawl
(``stateDir/.workers/.generation.json``) writes the record of each page it
fetched to ``stateDir/.workers/<workerId>/records/``, applied and synced on
its writer thread with the output's durable point, before the acks that
point covers; their position goes with the output's (``outpos:<w>``) and a
worker started again cuts them back to it.  In a recrawl it reads the
previous generation's links logs of every worker of its stateDir
(:class:`~larbin_py.distributed.records.PeerRecords`), and tells the
verdict of each page to its ack (larbin_py.distributed.acks).

**Tries.**  Each page request's start and end are written to
``stateDir/inflight-<workerId>`` (larbin_py.distributed.inflight); a worker that
starts finds what its dead predecessor left there and counts one try
against each of those entries in Redis before it joins.

**Failures.**  A Redis failure pauses the worker (the coordinator; the gate
:meth:`DistState.holds` starts nothing meanwhile).  The coordinator's task
ending with any other exception fails the worker loudly: the traceback is
printed, the crawl stops (exit 1, the launcher respawns it), and a disk
error in making the output durable is reported as a full stateDir is in the
single process; its last outcomes are then not acked (their entries stay
pending for the next owner).  A worker started again (``--reload``, the
launcher's respawn) waits for a Redis it cannot reach, instead of exiting
2 as a first start does; it resumes its analysis tasks.
"""

from __future__ import annotations

import asyncio
import fcntl
import json
import os
import shutil
import socket
import sys
import time
import traceback
from functools import partial
from typing import Callable

from ..config import replicas_for
from ..frontier.ip_leases import LeasePolicy
from ..frontier.lanes import disk_stores
from ..frontier.scheduler import Frontier
from ..frontier.seen import SeenSet
from ..output import OutputError, make_output, open_output
from ..output.base import INDEX_NAME, IndexWriter, OutputStats
from ..output.mirror import MirrorOutput
from ..output.paths import SafeTree
from ..output.writer import ThreadedOutput
from ..owner_only import makedirs
from ..records import RecordsWriter, cut_records
from ..state import StateError
from ..statelock import StateDirError, lock_worker
from .coordinator import Coordinator
from .inbox import RedisInbox, split_tag
from .inflight import InflightLog, count_crashes, inflight_path
from .membership import MembershipError
from .membership_factory import make_membership
from .records import Generation, PeerRecords, read_generation, worker_root
from .redisio import DistError, RedisFailed, RedisIO
from .shared import crawl_meta
from .sink import RedisSink

__all__ = ["DistState", "DistFrontier", "WorkerMirrorOutput", "merge_index", "worker_id_of", "run_worker",
           "WORKERS_DIR"]

#: Where the workers' own indexes live under saveDir (mirror mode).
WORKERS_DIR = ".workers"


def worker_id_of(config) -> str:
    """``workerId``, or ``<hostname>-<pid>`` when unset."""
    return config.worker_id or f"{socket.gethostname().split('.')[0]}-{os.getpid()}"


class DistFrontier(Frontier):
    """The frontier of a worker: idle only once the whole crawl has ended (``ended()``,
    the coordinator's termination: another worker may still send it links)."""

    def __init__(self, *args, ended: Callable[[], bool], **kw) -> None:
        super().__init__(*args, **kw)
        self._ended = ended

    def idle(self) -> bool:
        return self._ended() and super().idle()

    def locally_idle(self) -> bool:
        """Nothing left here (the worker's idle report; the crawl may go on elsewhere)."""
        return super().idle()


class WorkerMirrorOutput(MirrorOutput):
    """The mirror output of one worker: pages in the shared tree, its index of its own.

    ``position``: the worker is started again (a respawn, ``--reload``) and
    its last acks covered this much (``outpos:<w>``): its index continues
    from there (the lines after it are of pages not acked, fetched again);
    None: it starts empty.  An index shorter than the position (lost with a
    machine) continues from its last whole line.
    """

    def __init__(self, save_dir: str, worker: str, *, position: dict | None = None) -> None:
        self.save_dir = save_dir
        self.stats = OutputStats()
        self._tree = SafeTree(save_dir)
        self._closed = False
        index_dir = os.path.join(self._tree.root, WORKERS_DIR, worker)
        os.makedirs(index_dir, exist_ok=True)
        length = None
        if position is not None:
            length = min(int(position.get("index_length", 0)), whole_lines(os.path.join(index_dir, INDEX_NAME)))
        try:
            self._index = IndexWriter(index_dir, length)
        except BaseException:
            self._tree.close()
            raise


def whole_lines(path: str) -> int:
    """The length of ``path``'s whole lines (0 when there is no file)."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return 0
    return data.rfind(b"\n") + 1


def merge_index(save_dir: str) -> int:
    """Write ``saveDir/index.tsv`` from the workers' indexes: each URL once (its last line).

    Run when a worker ends and once every worker has ended (the launcher);
    several processes sharing one saveDir merge one at a time (an ``flock``
    on ``.workers/merge.lock``), each into a temporary file renamed over the
    index, so a reader never sees half of it.  Returns the lines written.
    """
    root = os.path.join(save_dir, WORKERS_DIR)
    os.makedirs(root, exist_ok=True)
    lock = os.open(os.path.join(root, "merge.lock"), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)
        lines: dict[bytes, bytes] = {}
        for worker in sorted(os.listdir(root)):
            path = os.path.join(root, worker, INDEX_NAME)
            try:
                with open(path, "rb") as f:
                    data = f.read()
            except OSError:  # (the lock file, a worker with no index yet)
                continue
            for line in data.splitlines(keepends=True):
                if not line.endswith(b"\n"):
                    continue  # a worker killed mid-line
                url = line.split(b"\t", 1)[0]
                lines.pop(url, None)
                lines[url] = line
        tmp = os.path.join(save_dir, f"{INDEX_NAME}.{os.getpid()}.tmp")
        with open(tmp, "wb") as f:
            f.writelines(lines.values())
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, os.path.join(save_dir, INDEX_NAME))
        return len(lines)
    finally:
        os.close(lock)


def make_worker_output(config, worker: str, *, position: dict | None = None):
    """The worker's output; ``position`` (``outpos:<w>``, a respawn): continue it from there."""
    mode = getattr(config, "output_mode", "none")
    if position is not None and position.get("mode", mode) != mode:
        position = None  # (another mode: nothing of it to continue)
    if mode == "mirror":
        return WorkerMirrorOutput(config.save_dir, worker, position=position)
    if mode in ("warc", "save"):
        return open_output(mode, os.path.join(config.save_dir, worker), files_per_dir=config.files_per_dir,
                           warc_max_size=getattr(config, "warc_max_size", 1 << 30), position=position)
    return make_output(config)


class DistState:
    """The crawl state of a worker (the :class:`~larbin_py.crawl_state.CrawlState` seam).

    Builds the swapped parts (inbox, sink, coordinator) and hands the engine
    a frontier wired to them; acks replace the journal and checkpoints.
    """

    def __init__(self, config, io: RedisIO, worker: str, *, membership=None, err=None,
                 generation: Generation | None = None, records_position=None) -> None:
        self.config = config
        self.membership = membership  # None: the Redis member keys (membership redis)
        self.io = io
        self.worker = worker
        self.err = err if err is not None else sys.stderr
        self.seen = SeenSet()  # never asked: the owner's Redis set decides
        self.cookies = None
        self.checkpoints = 0
        self.damaged: dict[str, int] = {}
        #: A page's ack reaches Redis once its output is durable; its links must be
        #: offered by then, so they are extracted on the loop (analysis processes run
        #: the user analyzers only; their tasks wait in this worker's stateDir).
        self.links_on_loop = True
        #: The first checkpoint joins the crawl and starts the coordinator: it ends before any request.
        self.first_beside = False
        #: Kept across restarts (the scratch folder is not): a worker restarted with
        #: --reload (the launcher's respawn) resumes its analysis tasks.
        self.analysis_queue = f"analysis-{worker}"
        self.scratch = os.path.join(config.state_dir, worker)
        shutil.rmtree(self.scratch, ignore_errors=True)
        makedirs(self.scratch)  # 0700 (larbin_py.owner_only)
        #: The requests running, for the tries of a death (the caller counted the last one's).
        self.inflight = InflightLog(inflight_path(config.state_dir, worker))
        #: The engine's phase (``starting``, ``running``, ``stopping``...): tells the
        #: periodic checkpoints from the last (run_worker sets it).
        self.phase = lambda: "running"
        #: How a coordinator that failed fails the crawl (run_worker: the engine's failures).
        self.fail = None
        self.inbox = RedisInbox(max(1, config.ram_urls // 10))
        self.sink = RedisSink(io.partitions, retries=config.retries, batch=config.redis_batch)
        try:
            self.sink.clock = asyncio.get_running_loop().time
        except RuntimeError:
            pass
        #: The IP-lease gate of the worker's frontier (its coordinator asks Redis for the leases).
        self.ip_leases = LeasePolicy(wait_duration=config.wait_duration, hold=self._ip_lease_hold(),
                                     on_wanted=self._ip_wanted)
        #: The coordinator saw the whole crawl end (two quiet waves): the frontier may report idle.
        self.crawl_ended = False
        #: The engine's analysis stage (analyzers configured), or None: its pending
        #: tasks keep the worker from reporting idle (their links are still to come).
        self.analysis = None
        self.coordinator: Coordinator | None = None
        self.frontier: DistFrontier | None = None
        self._writer = None
        self._output = None
        self._task: asyncio.Task | None = None
        self._wake_engine = None
        self._on_error = None
        self.started = False
        self.joined = False
        self.stopped = False
        #: The records for the next crawl (``generation``: the launcher's; None, a worker
        #: started by hand: none kept) and, in a recrawl, the previous generation's links.
        #: ``records_position``: where the last acks left them (a worker started again).
        self.records: RecordsWriter | None = None
        self.old_records: PeerRecords | None = None
        self.seeding = False  # (the launcher queued the records: larbin_py.distributed.records)
        #: The engine's records and revisit (larbin_py.recrawl), once built (run_worker).
        self.recrawl = None
        self._record_ops: list = []
        if generation is not None:
            root = worker_root(config.state_dir, worker)
            cut_records(root, generation.generation, records_position or (0, 0))
            if generation.previous is not None:
                self.old_records = PeerRecords(config.state_dir, generation.previous)
            self.records = RecordsWriter(root, generation.generation, self.old_records)

    # -- building ---------------------------------------------------------
    def frontier_options(self) -> dict:
        """The worker's parts: scratch lanes with the inbox as the main lane, the
        sink, the acks (``on_done``), the IP leases, and idle only at the crawl's end."""
        return {"stores": disk_stores(os.path.join(self.scratch, "frontier")), "main": self.inbox,
                "sink": self.sink, "on_done": self._on_done, "ip_leases": self.ip_leases,
                "frontier_class": partial(DistFrontier, ended=lambda: self.crawl_ended)}

    @property
    def robots_log(self):
        """Where robots.txt answers go (RobotsFetch's ``log``): to ``robots:{p}`` in Redis."""
        return self

    def append(self, robots_url: str, when: float, body: bytes | None) -> None:
        if self.coordinator is not None:
            self.coordinator.robots_answer(robots_url, when, body)

    def _ip_lease_hold(self) -> float:
        c = self.config
        return c.ip_lease_hold if c.ip_lease_hold > 0 else max(10.0, 5 * c.wait_duration)

    def _on_done(self, rec, outcome: str) -> None:
        if self.coordinator is not None:
            self.coordinator.on_done(rec, outcome)

    def _ip_wanted(self) -> None:
        """An IP started wanting its lease: the coordinator sends a tick at once."""
        if self.coordinator is not None:
            self.coordinator.wake()

    def _locally_idle(self) -> bool:
        """Nothing left in this worker: its frontier and its analysis stage (the idle report)."""
        return self.frontier.locally_idle() and (self.analysis is None or self.analysis.idle()) and \
            (self.recrawl is None or not self.recrawl.skipping)

    def attach(self, frontier) -> None:
        self.frontier = frontier
        c = self.config
        try:  # the frontier's clock: the engine's loop time
            clock = asyncio.get_running_loop().time
        except RuntimeError:
            clock = time.monotonic
        self.coordinator = Coordinator(
            self.io, frontier, self.sink, self.inbox, worker=self.worker, lease_ttl=c.lease_ttl, clock=clock,
            flush_interval=c.redis_flush_interval, wait_duration=c.wait_duration,
            ack_interval=min(1.0, c.checkpoint_interval), is_idle=self._locally_idle,
            on_end=self._ended, durable=self._durable, err=self.err, membership=self.membership,
            shares=c.partition_shares,
            wake_engine=lambda: self._wake_engine() if self._wake_engine is not None else None)
        self.sink.wake = self.coordinator.wake
        self.coordinator.divert = self._divert

    def _divert(self, rec) -> bool:
        """A URL read from a stream and skipped by the recrawl (revisitAfter), not queued."""
        return self.recrawl is not None and self.recrawl.divert(rec)

    def output_position(self) -> dict | None:
        return None

    @property
    def keeps_records(self) -> bool:
        """Records are kept for the next crawl (larbin_py.recrawl): a launcher's worker."""
        return self.records is not None

    @property
    def wants_writer(self) -> bool:
        return self.records is not None

    @property
    def may_send(self):
        """The fetcher's gate for a request on a new connection: the IP leases' deadline."""
        return self.coordinator.may_send

    def record(self, op) -> None:
        """A page's record (larbin_py.recrawl), written with the next durable point."""
        self._record_ops.append(op)

    def verdict(self, rec, verdicts) -> None:
        """A recrawl's verdicts of ``rec``: counted in Redis with its ack."""
        parsed = split_tag(rec.tag)
        if parsed is not None and self.coordinator is not None:
            self.coordinator.acks.verdict(parsed[0], parsed[1], verdicts)

    def open(self, loop, writer, output, *, frontier, on_durable, on_error) -> None:
        self._writer = writer
        self._output = output
        self._wake_engine = on_durable
        self._on_error = on_error

    # -- while crawling ---------------------------------------------------
    def done(self, url: str, outcome: str, from_request: bool, line: bytes | None = None) -> None:
        pass  # the frontier's on_done carries the ack (a worker keeps no crawl log: docs/outputs.md)

    def log(self, line: bytes) -> None:
        pass

    def holds(self, running: int, cap: int) -> bool:
        """No request starts while Redis fails (its outcomes could not be acked)."""
        return self.coordinator is not None and self.coordinator.paused

    async def _durable(self) -> dict | None:
        """Make the output written so far durable (the acks follow it): its position then."""
        out = self._output
        ops, self._record_ops = self._record_ops, []
        position = None
        if out is None:
            pass
        elif isinstance(out, ThreadedOutput):
            out.submit_pending()
            position = await self._writer.call(out.sync_position)
        elif getattr(out, "mode", None) in ("mirror", "save", "warc"):
            out.flush(sync=True)
            position = out.position()
        if self.records is not None:  # the records of the pages the acks will cover, synced first
            position = dict(position or {}, records=await self._writer.call(self._write_records, ops))
        return position

    def _write_records(self, ops: list) -> list[int]:
        """(Writer.) ``ops`` written and synced: the records' position."""
        self.records.apply(ops)
        self.records.sync()
        return self.records.position()

    def _ended(self, reason: str) -> None:
        self.crawl_ended = True
        if self._wake_engine is not None:
            self._wake_engine()

    def restore(self, frontier, now: float, wall: float, err) -> dict:
        print(f"larbin_py: worker {self.worker}: continuing crawl {self.io.crawl!r} from Redis", file=err)
        return {}

    def report_damage(self, err) -> None:
        pass

    async def checkpoint(self, frontier, now: float, section: dict) -> bool:
        """The first call (before the crawl runs) joins the crawl and starts the
        coordinator; the periodic ones keep nothing (Redis holds the crawl) but
        let the analysis stage confirm its finished tasks, so its spool is
        trimmed while the crawl runs; the last (at the end) stops the
        coordinator cleanly.  No file is written."""
        if not self.started:
            self.started = True
            if not self.joined:
                await self.coordinator.start()
            self._task = asyncio.get_running_loop().create_task(self.coordinator.run())
            self._task.add_done_callback(self._coordinator_ended)
            return True
        if self.phase() == "running":
            return True
        await self.stop()
        return False

    def _coordinator_ended(self, task: asyncio.Task) -> None:
        """The coordinator's task ended: by a stop (fine), or with an exception (the worker fails)."""
        if task.cancelled() or self.stopped:
            return
        exc = task.exception()
        if exc is None:
            return
        if isinstance(exc, (OSError, OutputError)) and self._on_error is not None:
            self._on_error(exc)  # the output could not be made durable: as a full stateDir is
            return
        print(f"larbin_py: worker {self.worker}: internal error in the coordinator:", file=self.err)
        traceback.print_exception(exc, file=self.err)
        if self.fail is not None:
            self.fail(f"internal error in the coordinator: {type(exc).__name__}: {exc}")

    async def stop(self, *, ack: bool = True) -> None:
        """The coordinator stopped (``ack`` False: a failed crawl's outcomes are not acked)."""
        if self.stopped or self.coordinator is None:
            return
        self.stopped = True
        if self._task is not None:
            if self._task.done() and not self._task.cancelled() and self._task.exception() is not None:
                ack = False  # it failed: its output may not be durable
            await self.coordinator.stop(ack=ack)
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    def close_commits(self) -> None:
        if self._task is not None and not self._task.done():
            self._task.cancel()  # a failed crawl: its entries stay pending for another worker

    def _close_records(self) -> None:
        for part in (self.records, self.old_records):
            if part is not None:
                part.close()

    def close(self, frontier, *, broken: bool) -> list[OSError]:
        failures = []
        for close in (frontier.close, self.inflight.close, self._close_records):
            try:
                close()
            except OSError as exc:
                failures.append(exc)
        return failures

    def abandon(self, frontier) -> None:
        frontier.close()
        self.inflight.close()
        self._close_records()


async def connect_redis(io: RedisIO, meta, *, wait: bool, worker: str, err) -> None:
    """Connect and join the crawl's meta.  A Redis that answers with an error reply
    (loading, out of memory...) is waited for; one that cannot be reached is
    waited for only when ``wait`` (a worker started again), else DistError."""
    async def attempt() -> None:
        try:
            await io.connect()
            await io.join_crawl(meta)
        except RedisFailed as exc:
            await io.close()
            if not wait and exc.kind == "connection":
                raise DistError(str(exc)) from exc  # a first start: the URL may be wrong
            raise
    await waiting_for_redis(attempt, "joining the crawl", worker, err)


async def waiting_for_redis(call, what: str, worker: str, err):
    """``await call()``, retried with backoff while Redis fails (one line per kind of failure)."""
    delay, said = 0.2, None
    while True:
        try:
            return await call()
        except RedisFailed as exc:
            if exc.kind != said:
                print(f"larbin_py: worker {worker}: {what}: {exc}; retrying", file=err, flush=True)
                said = exc.kind
        await asyncio.sleep(delay)
        delay = min(5.0, delay * 2)


async def read_outpos(io: RedisIO, worker: str) -> dict | None:
    """The output position this worker's last acks covered (``outpos:<w>``), or None."""
    t = io.tick()
    i = t.get_outpos(worker)
    raw = (await t.execute())[i]
    try:
        return json.loads(raw) if raw else None
    except ValueError:
        return None


async def count_tries(io: RedisIO, path: str, worker: str, err) -> None:
    """The tries a dead predecessor left in its in-flight file, counted in Redis (waited for)."""
    left, counted = await waiting_for_redis(lambda: count_crashes(io, path),
                                            "counting the tries of its last death", worker, err)
    if left:
        print(f"larbin_py: worker {worker}: {left} requests were running when it last died: one try "
              f"more each ({counted} still queued)", file=err, flush=True)


async def run_worker(config, *, reload: bool = False, err=None, engine_kw: dict | None = None) -> int:
    """Run one worker of the crawl in ``config.redis_url`` to its end: the exit code.

    ``reload``: the worker is started again (``--reload``, the launcher's
    respawn): it waits for an unreachable Redis, and resumes its analysis tasks.
    It holds ``stateDir/<workerId>.lock`` meanwhile (larbin_py.statelock): a
    second worker with its id on its stateDir exits 2 at once."""
    err = err if err is not None else sys.stderr
    try:
        lock = lock_worker(config.state_dir, worker_id_of(config))
    except StateDirError as exc:
        print(f"larbin_py: {exc}", file=err)
        return 2
    if lock.warning:
        print(f"larbin_py: {lock.warning}", file=err)
    try:
        return await _run_worker(config, reload=reload, err=err, engine_kw=engine_kw)
    finally:
        lock.release()


async def _run_worker(config, *, reload: bool, err, engine_kw: dict | None) -> int:
    from ..engine import Engine
    from ..runner import run_engine

    if config.redis_url == "auto":
        print("larbin_py: redisUrl auto starts a private redis-server with --workers N; a lone worker "
              "needs redis://host:port/db, unix:///path or redis+sentinel://host:port,.../master", file=err)
        return 2
    worker = worker_id_of(config)
    membership = None
    if getattr(config, "membership", "redis") != "redis":
        try:  # ZooKeeper for who is alive; leases and fencing stay in Redis
            membership = make_membership(config, crawl=config.crawl_name)
        except MembershipError as exc:
            print(f"larbin_py: {exc}", file=err)
            return 2
        if config.zk_session_timeout >= config.lease_ttl:
            print(f"larbin_py: worker {worker}: zkSessionTimeout {config.zk_session_timeout:g} s is not below "
                  f"leaseTtl {config.lease_ttl:g} s: a dead worker's partitions wait for its ZooKeeper "
                  "session to end (docs/membership.md)", file=err)
    io = RedisIO(config.redis_url, config.crawl_name, partitions=config.partitions,
                 seen_buckets=config.seen_buckets, replicas=replicas_for(config))
    try:
        await connect_redis(io, crawl_meta(config), wait=reload, worker=worker, err=err)
        await count_tries(io, inflight_path(config.state_dir, worker), worker, err)
        position = None
        if reload:
            position = await waiting_for_redis(lambda: read_outpos(io, worker), "reading its output position",
                                               worker, err)
    except DistError as exc:
        print(f"larbin_py: {exc}", file=err)
        await io.close()
        return 2
    try:
        if not config.analyzers:
            # The link extractor runs on each worker's loop: the workers are the
            # crawl's processes already (analysisWorkers is the embedded crawler's;
            # and a page's ack goes to Redis before a process would hand its links back).
            config = config.replace(analysis_workers=0)
        try:
            generation = read_generation(config.state_dir)
        except StateError as exc:
            print(f"larbin_py: {exc}", file=err)
            return 2
        records_position = position.pop("records", None) if position is not None else None
        state = DistState(config, io, worker, membership=membership, err=err, generation=generation,
                          records_position=records_position)
        output = None if (engine_kw or {}).get("output") else make_worker_output(config, worker, position=position)
        kw = dict(engine_kw or {})
        kw.setdefault("output", output)
        engine = Engine(config, crawl_state=state, err=err, reload=reload, **kw)
        state.phase = lambda: engine.state
        state.fail = engine.failures.fail
        state.analysis = engine.analysis
        state.recrawl = engine.recrawl
        state.coordinator.on_ip_release = \
            lambda ip: engine.edge.fetcher.close_idle(ip) if engine.edge.fetcher is not None else 0
        coordinator = state.coordinator

        def snapshot() -> dict:  # written to stats:<w> at each heartbeat (the launcher's dashboard)
            snap = engine.snapshot()
            snap["dist"] = coordinator.stats()
            return snap
        coordinator.snapshot = snapshot
        try:  # join before the crawl starts: a Redis lost meanwhile is a clear exit 2
            await coordinator.start()
        except MembershipError as exc:
            print(f"larbin_py: {exc}", file=err)
            return 2
        state.joined = True
        code = await run_engine(engine)
        await state.stop(ack=engine.failures.message is None)
        if config.output_mode == "mirror" and output is not None:
            try:  # this machine's saveDir is a whole mirror of what its workers saved
                merge_index(config.save_dir)
            except OSError as exc:
                print(f"larbin_py: worker {worker}: cannot write "
                      f"{os.path.join(config.save_dir, INDEX_NAME)}: {exc}", file=err)
        return code
    finally:
        if membership is not None:  # (after a clean stop: already left, a no-op)
            try:
                await membership.leave()
            except Exception:
                pass
        await io.close()
