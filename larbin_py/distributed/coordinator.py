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

A tick is sent when links reach ``redisBatch``, when the oldest link has
waited ``redisFlushInterval``, when an ack cycle is due (``ack_interval``:
acks wait for the output's sync anyway), when the frontier starves, when an
IP lease is first wanted, and at every heartbeat (``leaseTtl / 5``), which
also carries the re-asks of denied IP leases and the polls of partitions
found empty: a worker at work sends a few ticks a second whatever its rate.

**Parts.**  The coordinator keeps the loop and the tick's I/O: it stages
the operations, sends the pipeline and routes each answer.  What it
decides with lives in sans-I/O parts, each tested without Redis: the
partitions' states (:mod:`~larbin_py.distributed.ownership`), the acks
(:mod:`~larbin_py.distributed.acks`), the IP leases
(:mod:`~larbin_py.distributed.ip_leases`), the frontier's gate
(:mod:`~larbin_py.distributed.liveness`), the member view
(:mod:`~larbin_py.distributed.member_view`), the robots.txt answers
(:mod:`~larbin_py.distributed.robots_share`) and the pauses
(:mod:`~larbin_py.distributed.pauses`).

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
(the dead worker's leases expire with it).

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
``ack_interval``, at a drain, when idle) first awaits ``durable()`` (the
output synced: DistState), then sends the acks in the next tick, with the
output's position they cover (``outpos:<w>``).

**Redis failing.**  A tick that fails -- Redis unreachable, no answer in
time, or any error reply (``-OOM``, ``-LOADING``, ``-READONLY``, ``-BUSY``,
``-MISCONF``, ``-NOAUTH``...; the function library missing is loaded again
by the tick itself) -- is a *pause*: :attr:`paused` holds every request
start (the crawl state's gate), one line names the error and the Redis URL
(password hidden), and the tick is retried with backoff (0.1 s doubling to
5 s) until Redis answers; then one line says how long it lasted.  The failed
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
from .sink import RedisSink, decode_entry
from .termination import Termination

__all__ = ["Coordinator"]

#: Fewest seconds between two ticks woken by work (pages done, IPs wanted).
MIN_GAP = 0.02
#: The backoff of a tick retried while Redis fails: first and longest wait (seconds).
BACKOFF_FIRST, BACKOFF_MAX = 0.1, 5.0
#: How long a stop keeps retrying its final tick while Redis fails (seconds).
STOP_RETRY = 5.0


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
                 err=None) -> None:
        self.io = io
        self.fr = frontier
        self.sink = sink
        self.inbox = inbox
        self.worker = worker
        self.lease_ttl = lease_ttl
        self.hb_interval = lease_ttl / 5
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
        #: Each partition's state and record (larbin_py.distributed.ownership).
        self.own = Ownership()
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
        if parsed is not None:
            self.acks.add(parsed[0], parsed[1], outcome)

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
        now = self.clock()
        self.view.reset(self.membership.members(), now)
        self.next_hb = now + self.hb_interval

    async def run(self) -> None:
        """Tick until :meth:`stop`.  A Redis failure pauses and is retried with
        backoff (the leases lapse by themselves); any other exception ends the
        run with it (see the module docstring)."""
        backoff = BACKOFF_FIRST
        while not self._stop:
            delay = self._next_delay() if self.pauses.down is None else 0.0
            if delay > 0:
                self._wake.clear()
                try:
                    await asyncio.wait_for(self._wake.wait(), delay)
                except asyncio.TimeoutError:
                    pass
                if self._stop:
                    break
                gap = self._last_tick + MIN_GAP - self.clock()
                if gap > 0:
                    await asyncio.sleep(gap)
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
                backoff = min(BACKOFF_MAX, backoff * 2)
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
        now = self.clock()
        t = self.next_hb
        if self.sink.pending:
            t = min(t, (self.sink.oldest or now) + self.flush_interval)
            if self.sink.pending >= self.sink.batch:
                t = now
        if self.acks.ready:
            t = min(t, now)
        if self.acks.pending:
            t = min(t, self.acks.last_cycle + self.ack_interval)
        ask = self.fr.ip_leases.next_ask()
        if ask is not None:
            t = min(t, now + max(0.0, ask - now))
        if self._reads_wanted() or self.own.claims() or self.acquire_now:
            t = min(t, now)
        if self.own.count((DRAINING,)):
            t = min(t, now + MIN_GAP * 5)
        return max(0.0, t - now)

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
            if ack:
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
        if final:  # a stop: every partition still held is released by this tick
            self.own.events(self.own.where(ACTIVE), "drain")
        self._check_alive()
        # The ack cycle: the output made durable first.
        if self.acks.pending and (final or self.own.count((DRAINING,)) or
                                  self.acks.cycle_late(now, self.ack_interval) or self.is_idle()):
            batch = self.acks.take_pending()
            position = await self.durable()
            self.acks.made_durable(batch, position, self.clock())
        t = self.io.tick()
        handlers: list[tuple[int, Callable[[Any], None]]] = []
        # 1. enqueues
        links = self.sink.take()
        for p, items in links.items():
            handlers.append((t.enqueue(p, items), lambda r, p=p: r and self.own.enqueued(p)))
        # 2. acks, with the output position they cover; robots.txt answers; crash names
        acks = self._stage_acks(t, handlers)
        prune = self._stage_robots(t, handlers)
        crashed, self.crashed_out = self.crashed_out, []
        if crashed:
            handlers.append((t.note_crashed(crashed), lambda r: None))
        # 3. heartbeat, IP renewals, idle report, view
        hb_sent = now if now >= self.next_hb or final else None
        if hb_sent is not None:
            self._stage_heartbeat(t, handlers, hb_sent, final)
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

    def _stage_acks(self, t, handlers) -> list:
        """The acks of held partitions (an ack of a partition no longer held is counted
        ``fenced``: its next owner redoes the entry), then the output position they cover."""
        acks, by_part = self.acks.take_ready()
        for p, pairs in by_part.items():
            token = self.own.token(p)
            if token is None:
                self.fenced += len(pairs)
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
        self.hb_seq += 1
        self.leases.held = self.own.tokens()
        i = self.leases.stage(t)
        handlers.append((i, lambda r: self._heartbeat(r, sent)))
        if self.external and not final and (self._mhb is None or self._mhb.done()):
            self._mhb = asyncio.ensure_future(self._membership_heartbeat())
        for ip in self.ips.held():
            handlers.append((t.ip_acquire(ip, self.holder, self.ips.ttl),
                             lambda r, ip=ip: self.ips.renewed(ip, r, self.clock())))
        idle = self.idle()
        handlers.append((t.report(self.worker, self.hb_seq, idle), lambda r: None))
        if idle and not final:
            handlers.append((t.view(), self._view))
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

    def _stage_ownership(self, t, handlers, now: float, heartbeat: bool) -> list[int]:
        """Claims (with the partition's site waits and robots.txt answers), acquisitions, reads:
        returns the partitions read."""
        for p, token in self.own.claims():
            handlers.append((t.get_sitewait(p), lambda r, p=p: self._sitewait_loaded(p, r)))
            handlers.append((t.get_robots(p), lambda r, p=p: self._robots_loaded(p, r)))
            handlers.append((t.claim(p, self.worker, token), lambda r, p=p: self._claimed(p, r)))
        if (heartbeat or self.acquire_now) and self.liveness.safe():
            self.acquire_now = False
            # Not in the first heartbeats after joining: workers started together see each other first.
            settled = now - self.started >= 2 * self.hb_interval and self.view.joined()
            for p in self.own.to_acquire(self.view.mine()) if settled else []:
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
        self.next_hb = sent_at + self.hb_interval
        self._new_view(self.membership.members(), now)
        self._check_alive()
        if self.liveness.resume(now):
            self.wake_engine()
        # Give away what the map gives others, once the view is stable for two heartbeats.
        if self.view.stable(now) and self.liveness.safe():
            mine = self.view.mine()
            gone = [p for p in self.own.where(ACTIVE) if p not in mine]
            if gone:
                self._start_drain(gone)

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
        why = self.liveness.check(self.clock())
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
