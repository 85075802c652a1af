"""The worker's coordinator: one Redis pipeline per tick (docs/distributed-worker.md, the tick).

A worker is today's Engine with its parts swapped: the frontier's main lane
is a :class:`~larbin_py.distributed.inbox.RedisInbox`, its admitted links go to a
:class:`~larbin_py.distributed.sink.RedisSink`, its records' ends come here through
``on_done`` (the acks), and its IPs are scheduled only while this worker
holds their lease.  The coordinator is the one task that talks to Redis; each
tick is one pipeline (one round trip) carrying, in this order:

1. the enqueues of the buffered links (``lb_enqueue``, per partition);
2. the acks of the pages whose output is durable (``lb_ack``, fenced): after
   the enqueues in the same pipeline, so a page is acked only once its links
   are safe (Redis runs a pipeline in order);
3. the heartbeat when due (``lb_heartbeat``: member key, partition leases,
   the live members) with the renewal of the held IP leases, this worker's
   idle report and, when idle, a view of the counters (termination);
4. the takeover of newly acquired partitions (``lb_claim`` of every pending
   entry, the partition's robots.txt answers and site waits), acquisitions
   of the partitions :func:`~larbin_py.distributed.partition.assign` gives this
   worker, and fenced reads (``lb_read``) while the frontier's gate is open
   and the inbox below half its capacity;
5. IP lease requests and releases (``lb_ip_acquire`` / ``lb_ip_release``);
6. the release of drained partitions (their site waits written first).

**Own links consumed locally.**  A link of a partition this worker reads
is enqueued in step 1 and read back in step 4 of the same tick (one
MULTI/EXEC: Redis runs them in order), so Redis stays the one seen test
and the stream entry the durable copy, acked when done, claimed by the
next owner at a handover, and yet the link is in the frontier when the
tick's answer is in.  A link of another worker's partition is enqueued
and that worker is told (``news:<w>``, a set of partitions it takes with
its next tick): it reads the partition then, instead of at its next poll.

**When a tick goes.**  When links reach ``redisBatch``, when the oldest
link has waited ``redisFlushInterval`` (at once, at most every
:data:`STARVE_GAP`, while the frontier holds less than :data:`STARVE_AHEAD`
seconds of work: its own links are its next work), when an ack cycle's
sync has ended (the output is made durable beside the ticks, so links go
on being sent meanwhile), when the frontier starves, when an IP lease is
first wanted, and at every heartbeat (``leaseTtl / 5``), which also
carries the re-asks of denied IP leases, the polls of partitions found
empty, this worker's measured load and the shares.  Nothing left here
(frontier idle, inbox empty): what is buffered goes at once.

**The end seen at once.**  ``open`` in Redis counts the URLs accepted and
not yet acked over the whole crawl, kept by the same calls that enqueue
and ack; every tick reads it.  An idle worker ticks every
:data:`END_POLL` s while it is at most :data:`OPEN_NEAR`, and once it is 0
sends its idle report every :data:`END_WAVE` s: the termination's two
quiet waves (the guard: the count alone decides nothing) come within a
few tenths of a second of the last ack.

**Load-aware partitions** (``partitionShares measured``).  Each heartbeat
publishes this worker's rate, backlog and capacity
(:class:`~larbin_py.distributed.shares.LoadMeter`, in ``loads``) and reads
every worker's and the stored shares (``shares``); the map follows the
shares (:meth:`MemberView.map`).  The first live member in name order
computes the next shares (:func:`~larbin_py.distributed.shares.rebalance`)
and writes them with a compare-and-set on their epoch (``lb_shares``);
the partitions the new map gives away are drained as after a join.

**Parts.**  The coordinator keeps the loop and the tick's I/O: it stages
the operations, sends the pipeline and routes each answer.  What it
decides with lives in sans-I/O parts, each tested without Redis: the
partitions' states (:mod:`~larbin_py.distributed.ownership`), the acks
(:mod:`~larbin_py.distributed.acks`), the IP leases
(:mod:`~larbin_py.distributed.ip_leases`), the frontier's gate
(:mod:`~larbin_py.distributed.liveness`), the member view
(:mod:`~larbin_py.distributed.member_view`), the robots.txt answers
(:mod:`~larbin_py.distributed.robots_share`), the pauses
(:mod:`~larbin_py.distributed.pauses`) and the shares
(:mod:`~larbin_py.distributed.shares`).

**Ownership.**  Partition -> worker is :func:`assign` over the live members
(the same pure function in every worker).  Each partition's state lives in
:class:`~larbin_py.distributed.ownership.Ownership`, a table of transitions:
the coordinator stages what it answers (acquisitions, claims, reads,
releases) and feeds it the answers as events.  A partition given to this
worker is acquired (a new fencing token) and then claimed; one given away
is *drained*: its URLs leave the frontier (:meth:`Frontier.drop`), the
requests still running to its sites end, their acks go out, its site waits
are written and the lease is released with a fenced DEL.  A lost lease (the
heartbeat or a fenced call says so) drops its URLs at once.  Joins take
effect once the member view is stable for two heartbeats; expiries at once
(the dead worker's leases expire with it).  A joiner acquires two
heartbeats after it joined, or as soon as it sees every worker the
launcher started with it (``expect``; it reads the members every
:data:`SETTLE_POLL` s until then).

**Safety.**  Fencing cannot stop a fetch: from ``renewed_at + leaseTtl -
margin`` on (the Redis heartbeat's ``alive``), the coordinator suspends every
IP lease, so the frontier starts no request at all until a heartbeat
succeeds (:class:`~larbin_py.distributed.liveness.Liveness`).

**Membership.**  The live-worker view comes from the configured
:class:`~larbin_py.distributed.membership.Membership` (``membership`` in
larbin.conf).  ``redis``: the heartbeat's member keys (:attr:`leases` is the
membership).  ``zookeeper``: a
:class:`~larbin_py.distributed.membership_zk.ZkMembership`, whose children watch
calls :meth:`Coordinator.members_changed` on the loop: the partition map is
recomputed and acquisitions sent at once.  Partition leases, their fencing
tokens and the member key that guards the worker id stay in Redis either
way (:attr:`leases`, renewed by the same heartbeat).  The ZooKeeper session
SUSPENDED or LOST: the frontier starts nothing from that moment (its
deadline is set in the past, the IP leases suspended); still cut off after
``zkSessionTimeout`` (the others see the node gone by then) or LOST at once,
the worker drains and releases every partition (fenced DELs), so the others'
acquisitions succeed without waiting for the leases to expire; reconnected
with its session, it resumes; rejoined with a new one, it acquires again.

**Acks.**  ``on_done(record, outcome)`` buffers the outcome in the
:class:`~larbin_py.distributed.acks.AckBuffer`; the ack cycle (every
``ack_interval``, at a drain, when idle) runs ``durable()`` (the output
synced: DistState) in a task beside the ticks (a stop's final tick awaits
it), then sends the acks in the next tick, with the output's position they
cover (``outpos:<w>``).  A sync that raises ends :meth:`run` with its
exception: the worker fails, those entries stay pending.

**Redis failing.**  A tick that fails -- Redis unreachable, no answer in
time, or any error reply (``-OOM``, ``-LOADING``, ``-READONLY``, ``-BUSY``,
``-MISCONF``, ``-NOAUTH``...; the function library missing is loaded again
by the tick itself) -- is a *pause*: :attr:`paused` holds every request
start (the crawl state's gate), one line names the error and the Redis URL
(password hidden), and the tick is retried with backoff (0.1 s doubling to
5 s, or to the heartbeat interval, leaseTtl/5, when shorter: a fault that
ends before the leases lapse finds the worker back in time to renew them)
until Redis answers; then one line says how long it lasted.  An ack that
comes back fenced (the lease went meanwhile) keeps its outcomes as orphans.  The failed
tick's links and acks are kept and sent again (both idempotent), its IP
requests asked again (a grant that follows waits a full delay: the answer
that carried the last holder's start may have been lost), the partitions
it read are claimed again, its acquisitions asked again at a later
heartbeat and its releases sent again (the ownership's ``unanswered``
event).  Nothing is dropped from memory.  The pauses are counted
(:meth:`stats`: seconds and kinds) for the launcher's summary.  Anything
else that escapes a tick is a bug or a disk error: it ends :meth:`run` with
the exception (the worker fails loudly).

**One tick at a time.**  Ticks share one connection (a reply must be read by
the tick that sent the command): :meth:`tick` holds a lock, so the final
tick of :meth:`stop` waits for a running one; the final tick then drains
every partition still held (those the running tick acquired included), and
no tick but a final one is sent after a stop.

**Poison pills.**  A claimed entry whose request was running when a worker
died :data:`~larbin_py.distributed.redisio.CRASH_LIMIT` times (larbin_py.distributed.inflight)
is acked ``workerCrash``, its URL named in one line and in the crawl's
``crashed`` list.

**robots.txt answers** are kept in ``robots:{p}`` for their cache time (a
day) and removed once expired: by the owner (a heap of what it wrote or
loaded, checked at each heartbeat), and at a takeover for those found
expired (:class:`~larbin_py.distributed.robots_share.RobotsShare`).
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from typing import Any, Awaitable, Callable

from ..frontier.scheduler import site_key
from ..frontier.store import UrlRecord
from .acks import AckBuffer
from .inbox import RedisInbox, split_tag
from .ip_leases import IpLeases
from .liveness import Liveness
from .member_view import MemberView
from .membership import Membership
from .membership_factory import membership_snapshot
from .membership_redis import RedisMembership
from .ownership import ACTIVE, DRAINING, HELD, READABLE, RELEASING, Ownership
from .partition import partition_of
from .pauses import Pauses
from .redisio import FENCED, DistError, RedisFailed, RedisIO
from .robots_share import RobotsShare
from .shares import LoadMeter, current as current_shares, rebalance
from .sink import RedisSink, decode_entry
from .termination import Termination

__all__ = ["Coordinator"]

#: Fewest seconds between two ticks woken by work (pages done, IPs wanted).
MIN_GAP = 0.02
#: The backoff of a tick retried while Redis fails: first and longest wait (seconds).
BACKOFF_FIRST, BACKOFF_MAX = 0.1, 5.0
#: How long a stop keeps retrying its final tick while Redis fails (seconds).
STOP_RETRY = 5.0
#: How often a worker started with others (``expect``) reads the members until it sees them all.
SETTLE_POLL = 0.05
#: How often a worker with nothing to do looks at the crawl's open count once it is at most
#: OPEN_NEAR (the end is near: seen within about a second), and reports idle once it is 0.
END_POLL = 0.25
OPEN_NEAR = 1000
#: How often an idle worker reports idle (a termination wave) while nothing is open.
END_WAVE = 0.1
#: Links are sent without waiting for redisFlushInterval, and reads asked at once, while the
#: frontier holds fewer URLs than it fetches in STARVE_AHEAD seconds (or STARVE_MIN): it would
#: run dry before; links then go at most every STARVE_GAP seconds.
STARVE_AHEAD = 0.5
STARVE_MIN = 8
STARVE_GAP = 0.1


async def _nothing() -> None:
    return None


class Coordinator:
    """One worker's Redis traffic, ownership, drains, acks and IP leases; see the module docstring."""

    def __init__(self, io: RedisIO, frontier, sink: RedisSink, inbox: RedisInbox, *, worker: str,
                 lease_ttl: float = 10.0, flush_interval: float = 0.5, wait_duration: float = 0.0,
                 ack_interval: float = 1.0, clock: Callable[[], float] = time.monotonic,
                 wall: Callable[[], float] = time.time,
                 wake_engine: Callable[[], None] | None = None,
                 is_idle: Callable[[], bool] | None = None,
                 on_end: Callable[[str], None] | None = None,
                 durable: Callable[[], Awaitable[dict | None]] | None = None,
                 snapshot: Callable[[], dict] | None = None,
                 on_ip_release: Callable[[str], Any] | None = None,
                 membership: Membership | None = None,
                 shares: str = "measured",
                 err=None) -> None:
        self.io = io
        self.fr = frontier
        self.sink = sink
        self.inbox = inbox
        self.worker = worker
        self.lease_ttl = lease_ttl
        self.hb_interval = lease_ttl / 5
        #: The longest wait between two tries of a failing tick: no longer than a heartbeat's,
        #: so a fault shorter than the lease costs no lease (Redis back, renewed within it).
        self.backoff_max = min(BACKOFF_MAX, self.hb_interval)
        self.flush_interval = flush_interval
        self.wait_duration = wait_duration
        self.ack_interval = ack_interval
        self.clock = clock
        self.wall = wall
        self.wake_engine = wake_engine or (lambda: None)
        self.is_idle = is_idle or (lambda: True)
        self.on_end = on_end or (lambda reason: None)
        self.durable = durable or _nothing
        self.snapshot = snapshot
        self.on_ip_release = on_ip_release or (lambda ip: None)
        #: A URL read from a stream that is handled without being queued (True): a recrawl's
        #: page younger than revisitAfter (larbin_py.recrawl.Recrawl.divert); None: every one queued.
        self.divert: Callable[[UrlRecord], bool] | None = None
        self.err = err if err is not None else sys.stderr
        self.partitions = io.partitions
        self.holder = f"{worker}:{io.instance}"
        #: The Redis heartbeat: member key (the worker id's guard), partition leases, fencing deadline.
        self.leases = RedisMembership(io, lease_ttl, clock=clock)
        #: Who is alive: the leases' member keys (``membership redis``) or ZooKeeper.
        self.membership: Membership = membership if membership is not None else self.leases
        self.external = self.membership is not self.leases
        #: Whether requests may start (larbin_py.distributed.liveness).
        self.liveness = Liveness(frontier, self.leases, self.membership, worker=worker, lease_ttl=lease_ttl,
                                 err=self.err)
        #: The IP leases' traffic (larbin_py.distributed.ip_leases).
        self.ips = IpLeases(frontier, wait_duration=wait_duration,
                            ttl=max(lease_ttl, wait_duration + 2 * self.hb_interval))
        self._mhb: asyncio.Task | None = None
        self.termination = Termination()
        #: Each partition's state and record (larbin_py.distributed.ownership); a partition
        #: found empty is read again at the heartbeats (the others' links come as news).
        self.own = Ownership(poll=self.hb_interval)
        self._part_cache: dict[str, int] = {}
        #: The outcomes on their way to Redis (larbin_py.distributed.acks).
        self.acks = AckBuffer(now=clock())
        #: robots.txt answers shared in ``robots:{p}`` (larbin_py.distributed.robots_share).
        self.robots = RobotsShare()
        #: Redis's failures: the pause under way and the totals (larbin_py.distributed.pauses).
        self.pauses = Pauses()
        # Heartbeats and views.
        self.hb_seq = 0
        self.next_hb = 0.0
        self.started = clock()
        #: The members this worker acts on, and what the map gives it (larbin_py.distributed.member_view).
        self.view = MemberView(worker, self.partitions, settle=2 * self.hb_interval)
        self.acquire_now = False
        #: The workers the launcher started with this one (``expect``): it acquires as soon as it
        #: sees them all (empty: two heartbeats after it joined).
        self.expected: frozenset[str] = frozenset()
        #: ``partitionShares``: ``measured`` (load-aware) or ``equal``.
        self.shares_mode = shares
        #: This worker's rate, backlog and capacity (larbin_py.distributed.shares), and URLs done.
        self.meter = LoadMeter(window=max(8 * self.hb_interval, 4.0))
        self.done = 0
        #: The shares record last read ``(epoch, at, shares)``, and the next one to write.
        self.shares_record: tuple[int | None, int, dict[str, int]] = (None, 0, {})
        self._loads: dict[str, tuple[float, int, float | None]] = {}
        self._shares_out: tuple[int | None, int, int, dict[str, int]] | None = None
        #: This worker's last share computation moved partitions (the move goes on to the target).
        self._moving = False
        #: The crawl's open count at the last tick (None: not read yet).
        self.open: int | None = None
        #: The output's sync under way beside the ticks, and its failure.
        self._sync: asyncio.Task | None = None
        self._sync_error: BaseException | None = None
        self._last_starve = 0.0
        #: URLs done per second here, smoothed over the ticks (what "about to run dry" means).
        self.pace = 0.0
        self._pace_at = (clock(), 0)
        #: URLs forgotten as workerCrash, to name in the crawl's list at the next tick.
        self.crashed_out: list[str] = []
        self._tick_lock = asyncio.Lock()
        # Figures.
        self.ticks = 0
        self.claimed_entries = 0
        self.acked = 0
        self.fenced = 0
        self.ended = False
        self._wake = asyncio.Event()
        self._stop = False
        self._last_tick = 0.0

    @property
    def held(self) -> dict[int, int]:
        """``{partition: token}`` of the partitions held (renewed by the heartbeat)."""
        return self.own.tokens()

    # ------------------------------------------------------------------
    # Hooks the engine's parts call
    # ------------------------------------------------------------------
    def wake(self) -> None:
        self._wake.set()

    def on_done(self, rec: UrlRecord, outcome: str) -> None:
        """A record ended (``fetched`` or a forget reason): ack it after the next durable point."""
        parsed = split_tag(rec.tag)
        self.done += 1
        if parsed is not None:
            self.acks.add(parsed[0], parsed[1], outcome)
        self._wake.set()  # the ack cycle's time, or the worker's last page: its acks go now

    def robots_answer(self, robots_url: str, when: float, body: bytes | None) -> None:
        """A robots.txt answer (``when``: wall time; ``body`` None: no restriction): shared at the
        next tick in ``robots:{p}``, so the partition's next owner does not fetch it again."""
        parts = site_key(robots_url)
        if parts is not None:
            self.robots.answer(self.partition(parts[2]), robots_url, when, body)

    def partition(self, host: str) -> int:
        p = self._part_cache.get(host)
        if p is None:
            if len(self._part_cache) > 100_000:
                self._part_cache.clear()
            p = self._part_cache[host] = partition_of(host, self.partitions)
        return p

    def idle(self) -> bool:
        """Nothing of this worker's in flight, buffered or to claim (its idle report)."""
        return (self.is_idle() and not self.sink.pending and not self.acks and not len(self.inbox)
                and not self.own.unsettled())

    # ------------------------------------------------------------------
    # The loop
    # ------------------------------------------------------------------
    async def start(self) -> None:
        """Join the crawl (its member key, and the external membership when configured);
        ownership starts at the following heartbeats."""
        await self.leases.join(self.worker)
        if self.external:
            try:
                await self.membership.join(self.worker)
            except BaseException:
                try:
                    await self.leases.leave()
                except DistError:
                    pass
                raise
            self.membership.watch(self.members_changed)
        t = self.io.tick()
        i = t.get_expect()
        try:
            expected = (await t.execute())[i]
        except RedisFailed:
            expected = frozenset()  # two heartbeats then, as a worker started by hand
        self.expected = expected if self.worker in expected else frozenset()
        now = self.clock()
        self.view.reset(self.membership.members(), now)
        self.next_hb = now + (SETTLE_POLL if self.expected else self.hb_interval)

    async def run(self) -> None:
        """Tick until :meth:`stop`.  A Redis failure pauses and is retried with
        backoff (the leases lapse by themselves); any other exception ends the
        run with it (see the module docstring)."""
        backoff = BACKOFF_FIRST
        while not self._stop:
            if self._sync_error is not None:
                raise self._sync_error  # the output could not be made durable (larbin_py.distributed.crawl_worker)
            if self.pauses.down is None:
                self._wake.clear()
                delay = max(self._next_delay(), self._last_tick + MIN_GAP - self.clock())
                if delay > 0:  # a wake is not a tick: what is due is computed again
                    try:
                        await asyncio.wait_for(self._wake.wait(), delay)
                    except asyncio.TimeoutError:
                        pass
                    continue
            try:
                await self.tick()
            except RedisFailed as exc:
                if self.pauses.failed(exc.kind, str(exc), self.clock()):
                    print(f"larbin_py: worker {self.worker}: {exc}; fetching paused, retrying", file=self.err,
                          flush=True)
                self.wake_engine()
                self._check_alive()
                self._wake.clear()
                try:  # a stop ends the wait
                    await asyncio.wait_for(self._wake.wait(), backoff)
                except asyncio.TimeoutError:
                    pass
                backoff = min(self.backoff_max, backoff * 2)
                continue
            if self.pauses.down is not None:
                lasted, kind = self.pauses.resumed(self.clock())
                print(f"larbin_py: worker {self.worker}: Redis is back after {lasted:.1f} s ({kind}); "
                      "fetching resumes", file=self.err, flush=True)
                self.wake_engine()
            backoff = BACKOFF_FIRST

    @property
    def paused(self) -> bool:
        """Redis fails: no request may start (the crawl state's gate)."""
        return self.pauses.down is not None

    def _next_delay(self) -> float:
        """Seconds until the next tick is due (see the module docstring, "When a tick goes")."""
        now = self.clock()
        t = self.next_hb
        if self._sync_error is not None:
            return 0.0
        starving = self._starving()
        done = self._done_here()
        if self.sink.pending:
            t = min(t, (self.sink.oldest or now) + self.flush_interval)
            if self.sink.pending >= self.sink.batch or done:
                t = now
            elif starving:  # its own links are its next work: they come back in the tick
                t = min(t, max(now, self._last_starve + STARVE_GAP))
        if self.acks.ready:  # with the next tick, at the latest an ack interval after the sync
            t = min(t, now if done or self.own.count((DRAINING,)) else self.acks.last_cycle + self.ack_interval)
        if self.acks.pending and self._sync is None:
            t = min(t, now if done else self.acks.last_cycle + self.ack_interval)
        if self.idle() and (self.open is None or self.open <= OPEN_NEAR):
            t = min(t, self._last_tick + (END_WAVE if self.open == 0 else END_POLL))
        ask = self.fr.ip_leases.next_ask()
        if ask is not None:
            t = min(t, now + max(0.0, ask - now))
        if (starving and self._reads_wanted()) or self.own.claims() or self.acquire_now:
            t = min(t, now)
        if self.own.count((DRAINING,)):
            t = min(t, now + MIN_GAP * 5)
        return max(0.0, t - now)

    def _starving(self) -> bool:
        """The frontier is about to run dry: fewer URLs wait in it (the inbox included) than it
        fetches in :data:`STARVE_AHEAD` seconds at its pace, or than :data:`STARVE_MIN`."""
        return self.fr.queued < max(STARVE_MIN, self.pace * STARVE_AHEAD)

    def _done_here(self) -> bool:
        """Nothing left to fetch here: the frontier idle, the inbox empty (what is buffered,
        links and outcomes, goes now: the crawl may be ending)."""
        return self.is_idle() and not len(self.inbox)

    def settled(self, now: float) -> bool:
        """This worker may acquire: it is in its view, and it sees every worker started with it
        (``expect``), or two heartbeats passed since it joined."""
        if not self.view.joined():
            return False
        if self.expected and self.expected <= self.view.members:
            return True
        return now - self.started >= 2 * self.hb_interval

    def _reads_wanted(self) -> bool:
        """The frontier takes URLs, the inbox is at most half full, and a partition may hold more."""
        return self.fr.is_get and self.inbox.room * 2 >= self.inbox.capacity and self.own.wants_reads()

    async def stop(self, *, ack: bool = True) -> None:
        """A clean stop: acks sent, links flushed, partitions and IPs released, membership left.

        ``ack`` False (the worker failed: its output may not be durable): the
        outcomes are not acked, their entries stay pending for the next owner.
        The final tick waits for a running one, and is retried for up to
        :data:`STOP_RETRY` s while Redis fails.
        """
        self._stop = True
        self._wake.set()
        try:
            if self._sync is not None:  # the sync under way ends first (its batch is then ready)
                await asyncio.gather(self._sync, return_exceptions=True)
            if ack and self._sync_error is None:
                try:
                    self.acks.flush(await self.durable(), self.clock())
                except OSError as exc:
                    print(f"larbin_py: worker {self.worker}: the output is not durable ({exc}): its last "
                          "pages are not acked, their partition's next owner fetches them again", file=self.err)
                    self.acks.drop()
            else:
                self.acks.drop()
            deadline = self.clock() + STOP_RETRY
            while True:
                try:
                    await self.tick(final=True)
                    break
                except RedisFailed as exc:
                    if self.clock() >= deadline:
                        print(f"larbin_py: worker {self.worker}: at stop: {exc}; its leases expire by "
                              "themselves", file=self.err)
                        break
                    await asyncio.sleep(0.2)
        finally:
            if self._mhb is not None and not self._mhb.done():
                self._mhb.cancel()
            if self.external:
                try:
                    await self.membership.leave()
                except Exception as exc:  # its session ends with the process anyway
                    print(f"larbin_py: worker {self.worker}: leaving the membership: {exc}", file=self.err)
        try:
            await self.leases.leave()
        except DistError:
            pass  # the member key expires by itself

    # ------------------------------------------------------------------
    # One tick
    # ------------------------------------------------------------------
    async def tick(self, final: bool = False) -> None:
        """One round trip (see the module docstring); one at a time on the connection.
        After a stop, only the final tick is sent."""
        async with self._tick_lock:
            if self._stop and not final:
                return
            await self._tick(final)

    async def _tick(self, final: bool) -> None:
        now = self.clock()
        self._last_tick = now
        self.ticks += 1
        t0, d0 = self._pace_at
        if now - t0 >= 0.5:  # URLs done per second, smoothed (a time constant of a few seconds)
            self.pace += 0.3 * ((self.done - d0) / (now - t0) - self.pace)
            self._pace_at = (now, self.done)
        if final:  # a stop: every partition still held is released by this tick
            self.own.events(self.own.where(ACTIVE), "drain")
        self._check_alive()
        # The ack cycle: the output made durable first, beside the ticks (the final one waits).
        if self.acks.pending and self._sync is None and (
                final or self.own.count((DRAINING,)) or self.acks.cycle_late(now, self.ack_interval)
                or self.is_idle()):
            if final:
                batch = self.acks.take_pending()
                position = await self.durable()
                self.acks.made_durable(batch, position, self.clock())
            else:
                self._start_sync()
        t = self.io.tick()
        handlers: list[tuple[int, Callable[[Any], None]]] = []
        # 1. enqueues; the partitions held here are read in this same tick (step 4: their new
        # links come back at once), the owners of the others are told (news)
        links = self.sink.take()
        self._stage_links(t, handlers, links, now)
        if not final and self.fr.is_get:
            handlers.append((t.take_news(self.worker), self._news))
        handlers.append((t.get_open(), self._open_read))
        # 2. acks, with the output position they cover; robots.txt answers; crash names
        acks = self._stage_acks(t, handlers)
        prune = self._stage_robots(t, handlers)
        crashed, self.crashed_out = self.crashed_out, []
        if crashed:
            handlers.append((t.note_crashed(crashed), lambda r: None))
        shares_out, self._shares_out = self._shares_out, None
        if shares_out is not None and not final:
            expected, epoch, at, shares = shares_out
            handlers.append((t.put_shares(expected, epoch, at, shares),
                             lambda ok, rec=(epoch, at, shares): self._shares_written(ok, rec)))
        # 3. heartbeat, IP renewals, idle report, view (when idle); or, idle with nothing open in
        # the whole crawl, the idle report and the view alone: the end is seen in a few ticks
        hb_sent = now if now >= self.next_hb or final else None
        if hb_sent is not None:
            self._stage_heartbeat(t, handlers, hb_sent, final)
        elif self.open == 0 and not final and self.idle():
            self._stage_report(t, handlers, final)
        # 4. takeovers, acquisitions, reads
        read_parts: list[int] = []
        if not final:
            read_parts = self._stage_ownership(t, handlers, now, heartbeat=hb_sent is not None)
        # 5. IP leases
        asked_ips = self._stage_ips(t, handlers, now, final)
        # 6. releases of drained partitions
        self._stage_releases(t, handlers, now, final)
        if not len(t):
            return
        try:
            results = await t.execute()
        except BaseException:  # no answer (Redis failed, or the task was cancelled): see _tick_failed
            self._tick_failed(links, acks, asked_ips, read_parts, prune, crashed)
            raise
        for i, handler in handlers:
            handler(results[i])
        self.wake_engine()

    def _start_sync(self) -> None:
        """Make the output durable beside the ticks: its acks go with the tick after."""
        batch = self.acks.take_pending()

        async def sync() -> None:
            try:
                position = await self.durable()
            except asyncio.CancelledError:
                raise
            except BaseException as exc:  # the run loop raises it: the worker fails (crawl_worker)
                self._sync_error = exc
            else:
                self.acks.made_durable(batch, position, self.clock())
            finally:
                self._sync = None
                self._wake.set()
        self._sync = asyncio.ensure_future(sync())

    def _stage_links(self, t, handlers, links: dict, now: float) -> None:
        """The enqueues; a partition read here is marked to read in this tick, the owner the
        map gives each other partition is told (``news:<w>``)."""
        if not links:
            return
        owners = None
        told: dict[str, list[int]] = {}
        for p, items in links.items():
            handlers.append((t.enqueue(p, items), lambda r, p=p: r and self.own.enqueued(p)))
            if self.own.state(p) in READABLE:
                self.own.enqueued(p)
                continue
            if owners is None:
                owners = self.view.map()
            owner = owners.get(p)
            if owner is not None and owner != self.worker:
                told.setdefault(owner, []).append(p)
        for owner, parts in told.items():
            handlers.append((t.tell(owner, parts), lambda r: None))
        if self._starving():
            self._last_starve = now

    def _news(self, parts: set[int]) -> None:
        """Other workers queued URLs into these partitions: read them (the next tick)."""
        for p in parts:
            self.own.enqueued(p)

    def _open_read(self, n: int) -> None:
        self.open = n

    def _stage_acks(self, t, handlers) -> list:
        """The acks of held partitions (an ack of a partition no longer held is counted
        ``fenced``: its next owner redoes the entry), then the output position they cover."""
        acks, by_part = self.acks.take_ready()
        for p, pairs in by_part.items():
            token = self.own.token(p)
            if token is None:
                self.fenced += len(pairs)
                self.acks.refused(p, pairs)
                continue
            handlers.append((t.ack(p, self.worker, token, pairs),
                             lambda r, p=p, pairs=pairs: self._acked(p, r, pairs)))
        outpos = self.acks.outpos_due()
        if outpos is not None:
            handlers.append((t.put_outpos(self.worker, outpos), lambda r, o=outpos: self.acks.outpos_stored(o)))
        return acks

    def _stage_robots(self, t, handlers) -> dict[int, list[str]]:
        """robots.txt answers and prunes of the partitions held (fenced); returns the prunes."""
        for p, answers in self.robots.take_out().items():
            token = self.own.token(p)
            if token is not None:
                handlers.append((t.put_robots(p, self.worker, token, answers), lambda r: None))
        self.robots.expire(self.wall(), self.own.tokens())
        prune = self.robots.take_prune()
        for p, urls in prune.items():
            token = self.own.token(p)
            if token is not None:
                handlers.append((t.prune_robots(p, self.worker, token, urls),
                                 lambda r: self.robots.count_pruned(0 if r is FENCED else int(r))))
        return prune

    def _stage_heartbeat(self, t, handlers, sent: float, final: bool) -> None:
        # this worker's load, and the shares (read before the heartbeat's answer acts on the map)
        load = self.meter.sample(sent, self.done, self.fr.queued + len(self.inbox))
        handlers.append((t.put_load(self.worker, load.rate, load.backlog, load.capacity), lambda r: None))
        if self.shares_mode == "measured" and not final:
            handlers.append((t.get_loads(), self._loads_read))
            handlers.append((t.get_shares(), self._shares_read))
        self.leases.held = self.own.tokens()
        i = self.leases.stage(t)
        handlers.append((i, lambda r: self._heartbeat(r, sent)))
        if self.external and not final and (self._mhb is None or self._mhb.done()):
            self._mhb = asyncio.ensure_future(self._membership_heartbeat())
        for ip in self.ips.held():
            handlers.append((t.ip_acquire(ip, self.holder, self.ips.ttl), lambda r, ip=ip: self._ip_renewed(ip, r)))
        self._stage_report(t, handlers, final)
        pages, paused = self.acks.pages_to_report(), self.pauses.to_report()
        if pages or paused:  # as deltas: a dead worker's figures stay in Redis, a respawn adds to them
            handlers.append((t.add_figures(self.worker, pages, paused),
                             lambda r: (self.acks.pages_reported(pages), self.pauses.reported(paused))))
        if self.snapshot is not None:
            try:
                handlers.append((t.put_stats(self.worker, self.snapshot(), ttl=3 * self.hb_interval),
                                 lambda r: None))
            except Exception:  # a snapshot is best effort
                pass

    def _stage_report(self, t, handlers, final: bool) -> None:
        """This worker's idle report (a new sequence: the termination's waves), and the view when idle."""
        self.hb_seq += 1
        idle = self.idle()
        handlers.append((t.report(self.worker, self.hb_seq, idle), lambda r: None))
        if idle and not final:
            handlers.append((t.view(), self._view))

    def _stage_ownership(self, t, handlers, now: float, heartbeat: bool) -> list[int]:
        """Claims (with the partition's site waits and robots.txt answers), acquisitions, reads:
        returns the partitions read."""
        for p, token in self.own.claims():
            handlers.append((t.get_sitewait(p), lambda r, p=p: self._sitewait_loaded(p, r)))
            handlers.append((t.get_robots(p), lambda r, p=p: self._robots_loaded(p, r)))
            handlers.append((t.claim(p, self.worker, token), lambda r, p=p: self._claimed(p, r)))
        if (heartbeat or self.acquire_now) and self.liveness.safe():
            self.acquire_now = False
            # Not before every worker started with it is seen (or two heartbeats after joining):
            # workers started together see each other first.
            for p in self.own.to_acquire(self.view.mine()) if self.settled(now) else []:
                self.own.event(p, "acquire")
                # None: still held by its previous owner (draining, or not yet expired)
                handlers.append((t.acquire(p, self.worker, self.lease_ttl),
                                 lambda r, p=p: self.own.event(p, "refused" if r is None else "acquired", r)))
        if not (self._reads_wanted() or self.own.polls_due(now)) or not self.fr.is_get:
            return []
        reads = self.own.reads(now, self.inbox.room)
        for p, token, count in reads:
            handlers.append((t.read(p, self.worker, token, count),
                             lambda r, p=p, count=count: self._read(p, r, count)))
        return [p for p, _token, _count in reads]

    def _stage_ips(self, t, handlers, now: float, final: bool) -> list[str]:
        """IP leases released (every one at a stop) and asked: returns the IPs asked."""
        for ip, wall_ms, pace in self.ips.releases(now, self.wall(), every=final):
            # Our kept-alive connections to it close first: one connection per IP across workers.
            self.on_ip_release(ip)
            handlers.append((t.ip_release(ip, self.holder, wall_ms, pace), lambda r: None))
        if final or self.liveness.suspended:
            return []
        asked = self.ips.asks(now)
        for ip in asked:  # denied: asked again with the next heartbeat, no round trip of its own
            handlers.append((t.ip_acquire(ip, self.holder, self.ips.ttl), lambda r, ip=ip: self.ips.answered(
                ip, r, self.clock(), self.wall(), retry_at=max(self.next_hb, self.clock() + MIN_GAP))))
        return asked

    def _stage_releases(self, t, handlers, now: float, final: bool) -> None:
        """Drained partitions: their site waits written, then the fenced release."""
        if not self.own.count((DRAINING,)):
            return
        busy = set() if final else {self.partition(req.site.host) for req in self.fr.running_requests()}
        for p in self.own.drained(busy, self.acks.waiting()):
            token = self.own.token(p)
            self.own.event(p, "release")
            waits = self.fr.site_waits(lambda h, p=p: self.partition(h) == p, now, self.wall())
            handlers.append((t.put_sitewait(p, self.worker, token, {k: repr(v) for k, v in waits.items()}),
                             lambda r: None))
            handlers.append((t.release(p, self.worker, token), lambda r, p=p: self.own.event(p, "released")))

    def may_send(self, ip: str) -> bool:
        """The fetcher's ``may_send`` (larbin_py.net.http): a request goes out on a connection just
        opened only while the IP leases hold (their deadline, which a stop, a late heartbeat or a
        lapsed membership passes; the leases are renewed together)."""
        return self.clock() <= self.fr.ip_leases.deadline

    def _ip_renewed(self, ip: str, r) -> None:
        """A renewal's answer; refused, the lease is another's now: our kept-alive connections to
        the IP close (a request running on it ends as it must: it cannot be called back)."""
        self.ips.renewed(ip, r, self.clock())
        if not r.granted:
            self.on_ip_release(ip)

    def _tick_failed(self, links, acks, asked_ips: list[str], read_parts: list[int], prune=None,
                     crashed=None) -> None:
        """A tick whose answer never came (Redis failed, or a cancel): undo what waits on it.

        Links and acks go again (both idempotent); the IPs asked are asked
        again, and a grant that follows waits a full delay (a lost answer may
        have carried the last holder's start); the ownership's ``unanswered``
        event: acquisitions asked again later, releases sent again, and a
        read may have been delivered without its answer reaching us, which
        would leave its entries pending for ever: those partitions are
        claimed again (skipping the records held here).  Prunes and crash
        names are kept for the next tick.
        """
        self.sink.put_back(links)
        self.acks.put_back(acks)
        self.ips.unanswered(asked_ips, self.clock() + self.hb_interval)
        self.own.unanswered(read_parts)
        self.robots.put_back(prune or {})
        if crashed:
            self.crashed_out[:0] = crashed

    # ------------------------------------------------------------------
    # Results
    # ------------------------------------------------------------------
    def _acked(self, p: int, r, pairs) -> None:
        if r is FENCED:
            self.fenced += len(pairs)
            self.acks.refused(p, pairs)
            self._lost([p])
            return
        self.acked += int(r)
        for entry, _outcome in pairs:
            self.own.let_go(p, entry)
        self.acks.acked(pairs)

    def _heartbeat(self, hb, sent_at: float) -> None:
        lost = self.leases.absorb(hb, sent_at)
        if lost:
            self._lost(lost)
        if not hb.duplicate:
            # The frontier starts nothing past this (checked at every start, not only per tick).
            self.liveness.renewed(sent_at + self.lease_ttl - self.leases.margin)
        now = self.clock()
        was_settled = self.settled(now)
        self._new_view(self.membership.members(), now)
        settled = self.settled(now)
        # Until it sees every worker started with it, a worker reads the members often.
        self.next_hb = sent_at + (SETTLE_POLL if self.expected and not settled else self.hb_interval)
        if settled and not was_settled:
            self.acquire_now = True
            self._wake.set()
        self._check_alive()
        if self.liveness.resume(now):
            self.wake_engine()
        self._give_away(now)

    def _give_away(self, now: float) -> None:
        """Drain what the map now gives others, once the member view is stable for two heartbeats."""
        if self.view.stable(now) and self.liveness.safe():
            mine = self.view.mine()
            gone = [p for p in self.own.where(ACTIVE) if p not in mine]
            if gone:
                self._start_drain(gone)

    def _loads_read(self, loads: dict) -> None:
        self._loads = loads

    def _shares_read(self, record) -> None:
        """The stored shares (read with each heartbeat): the map follows them; the first live
        member in name order computes the next ones and writes them with the next tick."""
        self._apply_shares(record)
        epoch, _at, shares = record
        members = self.view.members
        if not members or min(members) != self.worker or len(members) < 2:
            return
        loads = self._loads
        capacities = {w: loads[w][2] for w in members if w in loads}
        new = rebalance(self.partitions, members, shares or None, capacities, moving=self._moving)
        self._moving = new != current_shares(self.partitions, members, shares or None)
        if self._moving:
            self._shares_out = (epoch, (epoch or 0) + 1, int(self.wall() * 1000), new)
            self._wake.set()

    def _shares_written(self, ok: bool, record) -> None:
        if ok:  # (else another worker wrote first: read at the next heartbeat)
            self._apply_shares(record)
            self._give_away(self.clock())

    def _apply_shares(self, record) -> None:
        self.shares_record = record
        self.view.set_shares(record[2] or None)

    def _new_view(self, members: frozenset[str], now: float) -> None:
        if self.view.update(members, now):
            # A worker died (its partitions are free, or soon) or this one (re)joined: take ours at once.
            self.acquire_now = True
            self._wake.set()

    def members_changed(self, members: frozenset[str]) -> None:
        """The external membership's watch (on the loop): recompute the map, act at once."""
        if self._stop:
            return
        self._check_alive()
        self._new_view(frozenset(members), self.clock())
        if self.liveness.resume(self.clock()):
            self.wake_engine()

    async def _membership_heartbeat(self) -> None:
        try:
            await self.membership.heartbeat()
        except Exception as exc:  # retried at the next heartbeat
            print(f"larbin_py: worker {self.worker}: membership check failed: {exc}", file=self.err)

    def _sitewait_loaded(self, p: int, waits: dict) -> None:
        parsed = {}
        for key, value in waits.items():
            try:
                parsed[key] = float(value)
            except ValueError:
                continue
        if parsed:
            self.fr.restore_waits(parsed, self.clock(), self.wall())

    def _robots_loaded(self, p: int, answers: dict) -> None:
        now = self.clock()
        for url, rules, left in self.robots.load(p, answers, self.wall()):
            self.fr.restore_robots(url, rules, now + left)

    def _claimed(self, p: int, r) -> None:
        """A takeover's pending entries: crawled, or acked (done here before the lease was
        lost, malformed, or poison); dropped when the partition moved on meanwhile."""
        if r is FENCED:
            self._lost([p])
            return
        if self.own.event(p, "claimed") not in READABLE:
            return  # given away or lost meanwhile: the entries stay pending for the next owner
        fr = self.fr
        for e in r.entries:
            outcome = self.acks.orphan(p, e.id)
            if outcome is not None:  # done here before the lease was lost: acked, not redone
                self.acks.add(p, e.id, outcome)
                continue
            rec = RedisInbox.record(p, e.id, e.record)
            if rec is None:
                self.acks.add_ready(p, e.id, "badUrl")
                continue
            if self.own.holds(p, e.id):
                continue  # held here already (a claim after a failed tick)
            self.own.hold(p, e.id)
            if self.divert is None or not self.divert(rec):
                fr.admission.push_record(rec, priority=True)
        for e in r.poison:
            outcome = self.acks.orphan(p, e.id)
            if outcome is not None:
                self.acks.add(p, e.id, outcome)
            elif not self.own.holds(p, e.id):  # (one held here was only re-claimed)
                self.acks.add_ready(p, e.id, "workerCrash")
                parsed = decode_entry(e.record)
                url = parsed[0] if parsed is not None else repr(e.record[:200])
                self.crashed_out.append(url)
                print(f"larbin_py: worker {self.worker}: {url} forgotten as workerCrash: a worker died "
                      f"{e.crashes} times while fetching it", file=self.err, flush=True)
        self.acks.forget_orphans(p)  # what the claim did not bring back was acked or taken elsewhere
        self.claimed_entries += len(r.entries)

    def _read(self, p: int, r, asked: int) -> None:
        if r is FENCED:
            self._lost([p])
            return
        if self.own.event(p, "read") not in READABLE:
            return  # given away or lost meanwhile: stays pending, the next owner claims it
        fr = self.fr
        for e in r:
            rec = RedisInbox.record(p, e.id, e.record)
            if rec is None:
                self.inbox.malformed += 1
                self.acks.add_ready(p, e.id, "badUrl")
                continue
            self.own.hold(p, e.id)
            if self.divert is None or not self.divert(rec):
                fr.admission.push_record(rec)
        self.own.read_answered(p, len(r), asked)

    def _view(self, view) -> None:
        if self.ended or not self.idle():
            return
        if self.termination.observe(view.members, view.reports, view.totals):
            self.ended = True
            self.on_end("end of work")

    # ------------------------------------------------------------------
    # Ownership changes
    # ------------------------------------------------------------------
    def _check_alive(self) -> None:
        """Start nothing that is no longer safe (larbin_py.distributed.liveness); cut off from
        the membership long enough, drain and release every partition so that the others
        take them without waiting for the leases to expire."""
        was_suspended = self.liveness.suspended
        why = self.liveness.check(self.clock())
        if self.liveness.suspended and not was_suspended:
            # The IP leases may have lapsed (a worker that was stopped, or cut off): another
            # worker may connect to those IPs now, so our kept-alive connections close at once.
            for ip in self.ips.held():
                self.on_ip_release(ip)
        keep = self.own.where(ACTIVE) if why else []
        if keep:
            print(f"larbin_py: worker {self.worker}: releasing {len(keep)} partitions ({why}: "
                  "the others see this worker gone)", file=self.err)
            self._start_drain(keep)
            self._wake.set()

    def _start_drain(self, parts: list[int]) -> None:
        """Give ``parts`` away: their URLs leave the frontier (they stay pending in Redis)."""
        gone = set(self.own.events(parts, "drain"))
        self.fr.drop(lambda host: self.partition(host) in gone)

    def _lost(self, parts: list[int]) -> None:
        """The leases of ``parts`` are gone: their URLs leave the frontier, their outcomes
        not yet acked become orphans (acked if the partition comes back)."""
        gone = set(self.own.events(parts, "lost"))
        if not gone:
            return
        self.acks.lost(gone)
        self.fr.drop(lambda host: self.partition(host) in gone)

    def stats(self) -> dict:
        return {
            "worker": self.worker, "partitions": self.own.count(HELD),
            "draining": self.own.count((DRAINING, RELEASING)),
            "ticks": self.ticks, "round_trips": self.io.round_trips, "takeovers": self.own.acquisitions,
            "claimed": self.claimed_entries, "acked": self.acked, "fenced": self.fenced,
            "ip_leases": len(self.fr.ip_leases.held()), "redis_down": self.pauses.down,
            "paused": self.pauses.figures(self.clock()),
            "robots_pruned": self.robots.pruned,
            "membership": membership_snapshot(self.membership),
        }
