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

**Ownership.**  Partition -> worker is :func:`assign` over the live members
(the same pure function in every worker).  A partition given to this worker
is acquired (a new fencing token) and then claimed; one given away is
*drained*: its URLs leave the frontier (:meth:`Frontier.drop`), the requests
still running to its sites end, their acks go out, its site waits are
written and the lease is released with a fenced DEL.  A lost lease (the
heartbeat or a fenced call says so) drops its URLs at once.  Joins take
effect once the member view is stable for two heartbeats; expiries at once
(the dead worker's leases expire with it).

**Safety.**  Fencing cannot stop a fetch: from ``renewed_at + leaseTtl -
margin`` on (the Redis heartbeat's ``alive``), the coordinator suspends every
IP lease, so the frontier starts no request at all until a heartbeat succeeds.

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

**Acks.**  ``on_done(record, outcome)`` buffers the outcome; the ack cycle
(every ``ack_interval``, at a drain, when idle) first awaits ``durable()``
(the output synced: DistState), then sends the acks in the next tick.

**Redis failing.**  A tick that fails -- Redis unreachable, no answer in
time, or any error reply (``-OOM``, ``-LOADING``, ``-READONLY``, ``-BUSY``,
``-MISCONF``, ``-NOAUTH``...; the function library missing is loaded again
by the tick itself) -- is a *pause*: :attr:`paused` holds every request
start (the crawl state's gate), one line names the error and the Redis URL
(password hidden), and the tick is retried with backoff (0.1 s doubling to
5 s) until Redis answers; then one line says how long it lasted.  The failed
tick's links and acks are kept and sent again (both idempotent), its IP
requests asked again (a grant that follows waits a full delay: the answer
that carried the last holder's start may have been lost), and the
partitions it read are claimed again.  Nothing is dropped from memory.  The
pauses are counted (:meth:`stats`: seconds and kinds) for the launcher's
summary.  Anything else that escapes a tick is a bug or a disk error: it
ends :meth:`run` with the exception (the worker fails loudly).

**One tick at a time.**  Ticks share one connection (a reply must be read by
the tick that sent the command): :meth:`tick` holds a lock, so the final
tick of :meth:`stop` waits for a running one.

**Poison pills.**  A claimed entry whose request was running when a worker
died :data:`~larbin_py.distributed.redisio.CRASH_LIMIT` times (larbin_py.distributed.inflight)
is acked ``workerCrash``, its URL named in one line and in the crawl's
``crashed`` list.

**robots.txt answers** are kept in ``robots:{p}`` for their cache time (a
day) and removed once expired: by the owner (a heap of what it wrote or
loaded, checked at each heartbeat), and at a takeover for those found
expired.
"""

from __future__ import annotations

import asyncio
import heapq
import json
import math
import sys
import time
from collections import defaultdict
from typing import Any, Awaitable, Callable

from .. import robots as robots_mod
from ..frontier.scheduler import site_key
from ..frontier.store import UrlRecord
from .inbox import RedisInbox, make_tag, split_tag
from .membership import Membership
from .membership_factory import membership_snapshot
from .membership_redis import RedisMembership
from .partition import assign, partition_of
from .redisio import FENCED, DistError, RedisFailed, RedisIO
from .sink import RedisSink, decode_entry
from .termination import Termination

__all__ = ["Coordinator"]

#: Fewest seconds between two ticks woken by work (pages done, IPs wanted).
MIN_GAP = 0.02
#: Most entries one fenced read asks of one partition.
READ_MAX = 200
#: Most refused acks kept for a partition that may come back (see Coordinator.orphan_acks).
ORPHANS_MAX = 100_000
#: How often an owned partition found empty is read again (seconds).
EMPTY_POLL = 0.5
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
        #: When the external membership last turned not alive (None: alive); see _check_membership.
        self.lapsed_since: float | None = None
        self.lease_deadline = math.inf
        self._mhb: asyncio.Task | None = None
        self.termination = Termination()
        # Partition state.
        self.held: dict[int, int] = self.leases.held  # p -> token (renewed by the heartbeat)
        self.to_claim: set[int] = set()
        self.claimed: set[int] = set()
        self.draining: dict[int, float] = {}
        self.maybe_full: set[int] = set()
        self.polled: dict[int, float] = {}
        self._part_cache: dict[str, int] = {}
        #: The output's position made durable with the last acks (JSON), to store in
        #: ``outpos:<w>`` in the same tick: a respawn continues its output from there.
        self.outpos: str | None = None
        self._outpos_sent: str | None = None
        # Acks: (partition, entry id, outcome); pending until the output is durable.
        self.acks_pending: list[tuple[int, str, str]] = []
        #: robots.txt answers to store in ``robots:{p}`` (robots URL -> blob), by partition.
        self.robots_out: dict[int, dict[str, bytes]] = defaultdict(dict)
        self.robots_loaded = 0
        #: Tags of the records this worker holds (read or claimed, not yet acked): a claim
        #: after a failed tick skips them (no URL twice in the frontier).
        self.live: set[str] = set()
        #: Outcomes whose ack was refused (the lease was lost, e.g. while Redis was away),
        #: tag -> outcome: if this worker takes the partition again, they are acked, not redone.
        self.orphan_acks: dict[str, str] = {}
        self.acks_ready: list[tuple[int, str, str]] = []
        self.done_since_tick = 0
        self.last_ack_cycle = clock()
        # Heartbeats and views.
        self.hb_seq = 0
        self.next_hb = 0.0
        self.started = clock()
        self.view_members: frozenset[str] = frozenset()
        self.view_since = 0.0
        self.suspended = False
        self.acquire_now = False
        # Redis failing: the current pause (its start, message and kind) and the totals.
        self.redis_down: str | None = None
        self.pause_since: float | None = None
        self.pause_kind: str | None = None
        self.paused_total = 0.0
        self.paused_by_kind: dict[str, float] = defaultdict(float)
        self.pauses = 0
        #: IPs asked in a failed tick: a grant that follows waits a full delay.
        self.unclean_ips: set[str] = set()
        # robots.txt answers held in robots:{p}: (expiry wall time, partition, URL), a heap,
        # and the expiry in force per URL (a heap item whose answer was renewed is stale).
        self._robots_expiry: list[tuple[float, int, str]] = []
        self._robots_exp: dict[str, float] = {}
        self.robots_prune: dict[int, list[str]] = defaultdict(list)
        self.robots_pruned = 0
        #: URLs forgotten as workerCrash, to name in the crawl's list at the next tick.
        self.crashed_out: list[str] = []
        # This worker's figures for the launcher's summary (the crawl-wide ``figures`` hash):
        # pages acked and paused seconds by kind, sent as deltas at each heartbeat.
        self.pages_acked = 0
        self._pages_reported = 0
        self._paused_reported: dict[str, float] = defaultdict(float)
        self._tick_lock = asyncio.Lock()
        # Figures.
        self.ticks = 0
        self.takeovers = 0
        self.claimed_entries = 0
        self.acked = 0
        self.fenced = 0
        self.ended = False
        self._wake = asyncio.Event()
        self._stop = False
        self._last_tick = 0.0

    # ------------------------------------------------------------------
    # Hooks the engine's parts call
    # ------------------------------------------------------------------
    def wake(self) -> None:
        self._wake.set()

    def on_done(self, rec: UrlRecord, outcome: str) -> None:
        """A record ended (``fetched`` or a forget reason): ack it after the next durable point."""
        parsed = split_tag(rec.tag)
        if parsed is None:
            return
        self.acks_pending.append((parsed[0], parsed[1], outcome))
        self.done_since_tick += 1

    def robots_answer(self, robots_url: str, when: float, body: bytes | None) -> None:
        """A robots.txt answer (``when``: wall time; ``body`` None: no restriction): shared at the
        next tick in ``robots:{p}``, so the partition's next owner does not fetch it again."""
        parts = site_key(robots_url)
        if parts is None:
            return
        blob = (b"A%r\n" % when) if body is None else (b"B%r\n" % when) + body
        p = self.partition(parts[2])
        self.robots_out[p][robots_url] = blob
        self._robots_held(p, robots_url, when + robots_mod.CACHE_TTL)

    def _robots_held(self, p: int, url: str, expiry: float) -> None:
        self._robots_exp[url] = expiry
        heapq.heappush(self._robots_expiry, (expiry, p, url))

    def _expire_robots(self) -> None:
        """Expired answers of owned partitions: pruned from robots:{p} in this tick."""
        heap, wall = self._robots_expiry, self.wall()
        while heap and heap[0][0] <= wall:
            expiry, p, url = heapq.heappop(heap)
            if self._robots_exp.get(url) == expiry:
                del self._robots_exp[url]
                if p in self.held:
                    self.robots_prune[p].append(url)

    def _pruned(self, r) -> None:
        if r is not FENCED:
            self.robots_pruned += int(r)

    def partition(self, host: str) -> int:
        p = self._part_cache.get(host)
        if p is None:
            if len(self._part_cache) > 100_000:
                self._part_cache.clear()
            p = self._part_cache[host] = partition_of(host, self.partitions)
        return p

    def idle(self) -> bool:
        """Nothing of this worker's in flight, buffered or to claim (its idle report)."""
        return (self.is_idle() and not self.sink.pending and not self.acks_pending and not self.acks_ready
                and not len(self.inbox) and not self.to_claim and not self.draining)

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
        self.view_members = self.membership.members()
        self.view_since = now
        self.next_hb = now + self.hb_interval

    async def run(self) -> None:
        """Tick until :meth:`stop`.  A Redis failure pauses and is retried with
        backoff (the leases lapse by themselves); any other exception ends the
        run with it (see the module docstring)."""
        backoff = BACKOFF_FIRST
        while not self._stop:
            delay = self._next_delay() if self.redis_down is None else 0.0
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
                self._paused(exc)
                self._check_alive()
                self._wake.clear()
                try:  # a stop ends the wait
                    await asyncio.wait_for(self._wake.wait(), backoff)
                except asyncio.TimeoutError:
                    pass
                backoff = min(BACKOFF_MAX, backoff * 2)
                continue
            if self.redis_down is not None:
                self._resumed()
            backoff = BACKOFF_FIRST

    @property
    def paused(self) -> bool:
        """Redis fails: no request may start (the crawl state's gate)."""
        return self.redis_down is not None

    def _paused(self, exc: RedisFailed) -> None:
        now = self.clock()
        if self.pause_since is None:
            self.pause_since = now
            self.pauses += 1
        elif exc.kind != self.pause_kind:
            self.paused_by_kind[self.pause_kind] += now - self.pause_since
            self.paused_total += now - self.pause_since
            self.pause_since = now
        if exc.kind != self.pause_kind:
            print(f"larbin_py: worker {self.worker}: {exc}; fetching paused, retrying", file=self.err, flush=True)
        self.pause_kind = exc.kind
        self.redis_down = str(exc)
        self.wake_engine()

    def _resumed(self) -> None:
        now = self.clock()
        lasted = now - self.pause_since if self.pause_since is not None else 0.0
        self.paused_by_kind[self.pause_kind or "error"] += lasted
        self.paused_total += lasted
        print(f"larbin_py: worker {self.worker}: Redis is back after {lasted:.1f} s ({self.pause_kind}); "
              "fetching resumes", file=self.err, flush=True)
        self.redis_down = self.pause_kind = self.pause_since = None
        self.wake_engine()

    def _next_delay(self) -> float:
        now = self.clock()
        t = self.next_hb
        if self.sink.pending:
            t = min(t, (self.sink.oldest or now) + self.flush_interval)
            if self.sink.pending >= self.sink.batch:
                t = now
        if self.acks_ready:
            t = min(t, now)
        if self.acks_pending:
            t = min(t, self.last_ack_cycle + self.ack_interval)
        ask = self.fr.ip_leases.next_ask()
        if ask is not None:
            t = min(t, now + max(0.0, ask - now))
        if self._reads_wanted(now) or self.to_claim or self.acquire_now:
            t = min(t, now)
        if self.draining:
            t = min(t, now + MIN_GAP * 5)
        return max(0.0, t - now)

    def _reads_wanted(self, now: float) -> bool:
        if not self.fr.is_get or self.inbox.room * 2 < self.inbox.capacity:
            return False
        if self.maybe_full - self.draining.keys():
            return True
        return False

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
                    self._durable_at(await self.durable())
                    self.acks_ready.extend(self.acks_pending)
                except OSError as exc:
                    print(f"larbin_py: worker {self.worker}: the output is not durable ({exc}): its last "
                          "pages are not acked, their partition's next owner fetches them again", file=self.err)
                    self.acks_ready = []
            else:
                self.acks_ready = []
            self.acks_pending = []
            for p in list(self.held):
                if p not in self.draining:
                    self.draining[p] = self.clock()
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
        """One round trip (see the module docstring); one at a time on the connection."""
        async with self._tick_lock:
            await self._tick(final)

    async def _tick(self, final: bool) -> None:
        fr = self.fr
        now = self.clock()
        self._last_tick = now
        self.ticks += 1
        self._check_alive()
        # The ack cycle: the output made durable first.
        if self.acks_pending and (final or self.draining or now - self.last_ack_cycle >= self.ack_interval
                                  or self.is_idle()):
            batch, self.acks_pending = self.acks_pending, []
            self._durable_at(await self.durable())
            self.acks_ready.extend(batch)
            self.last_ack_cycle = self.clock()
        self.done_since_tick = 0
        t = self.io.tick()
        handlers: list[tuple[int, Callable[[Any], None]]] = []
        read_parts: list[int] = []

        # 1. enqueues
        links = self.sink.take()
        for p, items in links.items():
            handlers.append((t.enqueue(p, items), lambda r, p=p: self._enqueued(p, r)))
        # 2. acks
        acks, self.acks_ready = self.acks_ready, []
        by_part: dict[int, list[tuple[str, str]]] = defaultdict(list)
        for p, entry, outcome in acks:
            by_part[p].append((entry, outcome))
        for p, pairs in by_part.items():
            token = self.held.get(p)
            if token is None:
                self.fenced += len(pairs)  # the lease went: the new owner redoes them
                continue
            handlers.append((t.ack(p, self.worker, token, pairs),
                             lambda r, p=p, pairs=pairs: self._acked(p, r, pairs)))
        outpos = self.outpos
        if outpos is not None and outpos != self._outpos_sent:  # with the acks it covers
            handlers.append((t.put_outpos(self.worker, outpos), lambda r, o=outpos: setattr(self, "_outpos_sent", o)))
        # robots.txt answers of owned partitions (fenced)
        robots, self.robots_out = self.robots_out, defaultdict(dict)
        for p, answers in robots.items():
            token = self.held.get(p)
            if token is not None:
                handlers.append((t.put_robots(p, self.worker, token, answers), lambda r: None))
        self._expire_robots()
        prune, self.robots_prune = self.robots_prune, defaultdict(list)
        for p, urls in prune.items():
            token = self.held.get(p)
            if token is not None:
                handlers.append((t.prune_robots(p, self.worker, token, urls), self._pruned))
        crashed, self.crashed_out = self.crashed_out, []
        if crashed:
            handlers.append((t.note_crashed(crashed), lambda r: None))
        # 3. heartbeat, IP renewals, idle report, view
        hb_sent = None
        if now >= self.next_hb or final:
            hb_sent = now
            self.hb_seq += 1
            i = self.leases.stage(t)
            handlers.append((i, lambda r: self._heartbeat(r, hb_sent)))
            if self.external and not final and (self._mhb is None or self._mhb.done()):
                self._mhb = asyncio.ensure_future(self._membership_heartbeat())
            for ip in fr.ip_leases.held():
                handlers.append((t.ip_acquire(ip, self.holder, self._ip_ttl()),
                                 lambda r, ip=ip: self._ip_renewed(ip, r)))
            idle = self.idle()
            handlers.append((t.report(self.worker, self.hb_seq, idle), lambda r: None))
            if idle and not final:
                handlers.append((t.view(), self._view))
            self._stage_figures(t, handlers)
            if self.snapshot is not None:
                try:
                    handlers.append((t.put_stats(self.worker, self.snapshot(), ttl=3 * self.hb_interval),
                                     lambda r: None))
                except Exception:  # a snapshot is best effort
                    pass
        # 4. takeovers, acquisitions, reads
        if not final:
            for p in list(self.to_claim):
                token = self.held.get(p)
                if token is None:
                    self.to_claim.discard(p)
                    continue
                handlers.append((t.get_sitewait(p), lambda r, p=p: self._sitewait_loaded(p, r)))
                handlers.append((t.get_robots(p), lambda r, p=p: self._robots_loaded(p, r)))
                handlers.append((t.claim(p, self.worker, token), lambda r, p=p: self._claimed(p, r)))
            if (hb_sent is not None or self.acquire_now) and self._safe():
                self.acquire_now = False
                for p in self._to_acquire(now):
                    handlers.append((t.acquire(p, self.worker, self.lease_ttl),
                                     lambda r, p=p: self._acquired(p, r)))
            if self._reads_wanted(now) or any(now - self.polled.get(p, 0.0) >= EMPTY_POLL
                                              for p in self.claimed - self.maybe_full):
                read_parts = self._stage_reads(t, handlers, now)
        # 5. IP leases
        for ip, last_start, pace in fr.ip_leases.to_release(now, every=final):
            # Our kept-alive connections to it close first: one connection per IP across workers.
            self.on_ip_release(ip)
            wall_ms = int((self.wall() + (last_start - now)) * 1000) if last_start >= 0 else 0
            pace = dict(pace)
            if pace.get("retry_until"):
                pace["retry_until"] = self.wall() + (pace["retry_until"] - now)
            handlers.append((t.ip_release(ip, self.holder, wall_ms, json.dumps(pace)), lambda r: None))
        asked_ips: list[str] = []
        if not final and not self.suspended:
            asked_ips = fr.ip_leases.wanted(now)
            for ip in asked_ips:
                handlers.append((t.ip_acquire(ip, self.holder, self._ip_ttl()),
                                 lambda r, ip=ip: self._ip_answer(ip, r)))
        # 6. releases of drained partitions
        for p in self._drained(final):
            token = self.held.get(p)
            if token is None:
                continue
            waits = self.fr.site_waits(lambda h, p=p: self.partition(h) == p, now, self.wall())
            handlers.append((t.put_sitewait(p, self.worker, token, {k: repr(v) for k, v in waits.items()}),
                             lambda r: None))
            handlers.append((t.release(p, self.worker, token), lambda r, p=p: self._released(p)))
        if not len(t):
            return
        try:
            results = await t.execute()
        except RedisFailed:
            self._tick_failed(links, acks, asked_ips, read_parts, prune, crashed)
            raise
        for i, handler in handlers:
            handler(results[i])
        self.wake_engine()

    def _ip_ttl(self) -> float:
        return max(self.lease_ttl, self.wait_duration + 2 * self.hb_interval)

    # ------------------------------------------------------------------
    # Results
    # ------------------------------------------------------------------
    def _enqueued(self, p: int, new) -> None:
        if new and p in self.claimed:
            self.maybe_full.add(p)

    def _acked(self, p: int, r, pairs) -> None:
        if r is FENCED:
            self._lost([p])
        else:
            self.acked += int(r)
            for entry, outcome in pairs:
                self.live.discard(make_tag(p, entry))
                if outcome == "fetched":
                    self.pages_acked += 1

    def _durable_at(self, position: dict | None) -> None:
        if position is not None:
            self.outpos = json.dumps(position, sort_keys=True, separators=(",", ":"))

    def _stage_figures(self, t, handlers) -> None:
        """This worker's pages and pauses since the last report, as deltas (a dead
        worker's figures stay in Redis; a respawn adds to them)."""
        pages = self.pages_acked - self._pages_reported
        paused = {k: v - self._paused_reported[k] for k, v in self.paused_by_kind.items()
                  if v - self._paused_reported[k] > 0}
        if not pages and not paused:
            return

        def sent(_r, pages=pages, paused=paused) -> None:
            self._pages_reported += pages
            for k, v in paused.items():
                self._paused_reported[k] += v
        handlers.append((t.add_figures(self.worker, pages, paused), sent))

    def _heartbeat(self, hb, sent_at: float) -> None:
        lost = self.leases.absorb(hb, sent_at)
        if lost:
            self._lost(lost)
        if not hb.duplicate:
            # The frontier starts nothing past this (checked at every start, not only per tick).
            self.lease_deadline = sent_at + self.lease_ttl - self.leases.margin
            if self.lapsed_since is None:
                self.fr.ip_leases.deadline = self.lease_deadline
        now = self.clock()
        self.next_hb = sent_at + self.hb_interval
        self._new_view(self.membership.members(), now)
        self._check_alive()
        self._maybe_resume()
        # Give away what the map gives others, once the view is stable for two heartbeats.
        if now - self.view_since >= 2 * self.hb_interval and self._safe():
            mine = self._mine()
            gone = [p for p in self.held if p not in mine and p not in self.draining]
            if gone:
                self._start_drain(gone)

    def _new_view(self, members: frozenset[str], now: float) -> None:
        if members == self.view_members:
            return
        if self.view_members - members or (self.worker in members and self.worker not in self.view_members):
            # A worker died (its partitions are free, or soon) or this one (re)joined: take ours at once.
            self.acquire_now = True
            self._wake.set()
        self.view_members = members
        self.view_since = now

    def members_changed(self, members: frozenset[str]) -> None:
        """The external membership's watch (on the loop): recompute the map, act at once."""
        if self._stop:
            return
        self._check_alive()
        self._new_view(frozenset(members), self.clock())
        self._maybe_resume()

    async def _membership_heartbeat(self) -> None:
        try:
            await self.membership.heartbeat()
        except Exception as exc:  # retried at the next heartbeat
            print(f"larbin_py: worker {self.worker}: membership check failed: {exc}", file=self.err)

    def _safe(self) -> bool:
        """Requests may start: the Redis leases are fresh and the membership holds this worker."""
        return self.leases.alive and (not self.external or self.membership.alive)

    def _maybe_resume(self) -> None:
        if self.suspended and self._safe():
            self.suspended = False
            self.fr.ip_leases.deadline = self.lease_deadline
            self.fr.ip_leases.resume(self.clock())
            self.wake_engine()

    def _mine(self) -> set[int]:
        return {p for p, w in assign(self.partitions, self.view_members).items() if w == self.worker}

    def _to_acquire(self, now: float) -> list[int]:
        # Wait a little after joining: workers started together see each other first.
        if now - self.started < 2 * self.hb_interval or self.worker not in self.view_members:
            return []
        return [p for p in sorted(self._mine()) if p not in self.held]

    def _acquired(self, p: int, token) -> None:
        if token is None:
            return  # still held by its previous owner (draining, or not yet expired)
        self.held[p] = token
        self.to_claim.add(p)
        self.takeovers += 1

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
        now, wall = self.clock(), self.wall()
        for url, blob in answers.items():
            kind, _, rest = blob.partition(b"\n")
            try:
                when = float(kind[1:])
            except ValueError:
                continue
            left = when + robots_mod.CACHE_TTL - wall
            if left <= 0:
                self.robots_prune[p].append(url)  # expired: leaves robots:{p} with the next tick
                continue
            self._robots_held(p, url, when + robots_mod.CACHE_TTL)
            rules = robots_mod.RobotsTxt.parse(rest) if kind[:1] == b"B" else robots_mod.RobotsTxt.allow_all()
            self.fr.restore_robots(url, rules, now + left)
            self.robots_loaded += 1

    def _claimed(self, p: int, r) -> None:
        self.to_claim.discard(p)
        if r is FENCED:
            self._lost([p])
            return
        fr = self.fr
        orphans = self.orphan_acks
        for e in r.entries:
            outcome = orphans.pop(make_tag(p, e.id), None) if orphans else None
            if outcome is not None:  # done here before the lease was lost: acked, not redone
                self.acks_pending.append((p, e.id, outcome))
                continue
            rec = RedisInbox.record(p, e.id, e.record)
            if rec is None:
                self.acks_ready.append((p, e.id, "badUrl"))
                continue
            if rec.tag in self.live:
                continue  # held here already (a claim after a failed tick)
            self.live.add(rec.tag)
            fr.admission.push_record(rec, priority=True)
        for e in r.poison:
            outcome = orphans.pop(make_tag(p, e.id), None) if orphans else None
            if outcome is not None:
                self.acks_pending.append((p, e.id, outcome))
            elif make_tag(p, e.id) not in self.live:  # (one held here was only re-claimed)
                self.acks_ready.append((p, e.id, "workerCrash"))
                parsed = decode_entry(e.record)
                url = parsed[0] if parsed is not None else repr(e.record[:200])
                self.crashed_out.append(url)
                print(f"larbin_py: worker {self.worker}: {url} forgotten as workerCrash: a worker died "
                      f"{e.crashes} times while fetching it", file=self.err, flush=True)
        if orphans:  # what the claim did not bring back was acked or taken elsewhere
            prefix = f"{p}/"
            for tag in [t for t in orphans if t.startswith(prefix)]:
                del orphans[tag]
        self.claimed_entries += len(r.entries)
        self.claimed.add(p)
        self.maybe_full.add(p)

    def _tick_failed(self, links, acks, asked_ips: list[str], read_parts: list[int], prune=None,
                     crashed=None) -> None:
        """A tick that failed (Redis unreachable, or an error reply): undo what waits on it.

        Links and acks go again (both idempotent); the IPs asked are asked
        again, and a grant that follows waits a full delay (a lost answer may
        have carried the last holder's start); a read may have been delivered
        without its answer reaching us, which would leave its entries pending
        for ever: those partitions are claimed again (skipping the records
        held here).  Prunes and crash names are kept for the next tick.
        """
        self.sink.put_back(links)
        self.acks_ready[:0] = acks
        retry = self.clock() + self.hb_interval
        for ip in asked_ips:
            self.fr.ip_leases.denied(ip, retry)
            self.unclean_ips.add(ip)
        for p in read_parts:
            if p in self.held:
                self.to_claim.add(p)
        for p, urls in (prune or {}).items():
            self.robots_prune[p].extend(urls)
        if crashed:
            self.crashed_out[:0] = crashed

    def _stage_reads(self, t, handlers, now: float) -> list[int]:
        budget = self.inbox.room
        if budget <= 0 or not self.fr.is_get:
            return []
        parts = [p for p in self.claimed if p not in self.draining
                 and (p in self.maybe_full or now - self.polled.get(p, 0.0) >= EMPTY_POLL)]
        if not parts:
            return []
        each = max(1, min(READ_MAX, budget // len(parts)))
        for p in parts:
            self.polled[p] = now
            handlers.append((t.read(p, self.worker, self.held[p], each),
                             lambda r, p=p, each=each: self._read(p, r, each)))
        return parts

    def _read(self, p: int, r, asked: int) -> None:
        if r is FENCED:
            self._lost([p])
            return
        if p in self.draining or p not in self.held:
            return  # stays pending: the next owner claims it
        fr = self.fr
        for e in r:
            rec = RedisInbox.record(p, e.id, e.record)
            if rec is None:
                self.inbox.malformed += 1
                self.acks_ready.append((p, e.id, "badUrl"))
                continue
            self.live.add(rec.tag)
            fr.admission.push_record(rec)
        if len(r) < asked:
            self.maybe_full.discard(p)
        else:
            self.maybe_full.add(p)

    def _view(self, view) -> None:
        if self.ended or not self.idle():
            return
        if self.termination.observe(view.members, view.reports, view.totals):
            self.ended = True
            self.on_end("end of work")

    # ------------------------------------------------------------------
    # IP leases
    # ------------------------------------------------------------------
    def _ip_answer(self, ip: str, g) -> None:
        fr = self.fr
        now = self.clock()
        if not g.granted:
            # Asked again with the next heartbeat: no round trip of its own.
            fr.ip_leases.denied(ip, max(self.next_hb, now + MIN_GAP))
            return
        pace = None
        if g.pace:
            try:
                pace = json.loads(g.pace)
            except ValueError:
                pace = None
        if pace and pace.get("retry_until"):
            pace["retry_until"] = now + (float(pace["retry_until"]) - self.wall())
        penalty = float(pace.get("penalty", 1.0)) if pace else 1.0
        delay = self.wait_duration * penalty
        if not g.clean or ip in self.unclean_ips:
            # Its last requests are unknown (an expired lease, or a lost answer): a full delay.
            self.unclean_ips.discard(ip)
            not_before = now + delay
        elif g.last_start_ms:
            not_before = now + (g.last_start_ms / 1000.0 - self.wall()) + delay
        else:
            not_before = now
        fr.ip_leases.granted(ip, not_before, pace, now)
        if g.wanted:
            fr.ip_leases.contended(ip)

    def _ip_renewed(self, ip: str, g) -> None:
        if g.granted:
            if g.wanted:
                self.fr.ip_leases.contended(ip)
        else:
            self.fr.ip_leases.lost(ip, self.clock())

    # ------------------------------------------------------------------
    # Ownership changes
    # ------------------------------------------------------------------
    def _check_alive(self) -> None:
        """Past ``renewed_at + leaseTtl - margin`` the leases may have lapsed, or the external
        membership lost this worker: start nothing."""
        if not self.suspended and not self.leases.alive and self.leases._renewed_at is not None:
            self.suspended = True
            self.fr.ip_leases.suspend()
        if self.external:
            self._check_membership()

    def _check_membership(self) -> None:
        """The external membership (ZooKeeper) lapsed: stop starting requests at once; once
        the others may see this worker gone (cut off for the session timeout, or the session
        LOST), drain and release every partition so that they take them without waiting."""
        m = self.membership
        if m.alive:
            if self.lapsed_since is not None:
                self.lapsed_since = None
                print(f"larbin_py: worker {self.worker}: back in the membership ({m.source}); "
                      "fetching resumes", file=self.err)
            return
        now = self.clock()
        if self.lapsed_since is None:
            self.lapsed_since = now
            self.fr.ip_leases.deadline = -math.inf
            if not self.suspended:
                self.suspended = True
                self.fr.ip_leases.suspend()
            print(f"larbin_py: worker {self.worker}: out of the membership ({m.source}): "
                  f"{(m.last_change or (0, 'connection lost'))[1]}; fetching paused", file=self.err)
        expired = bool(getattr(m, "session_lost", False))
        limit = float(getattr(m, "session_timeout", self.lease_ttl))
        if expired or now - self.lapsed_since >= limit:
            keep = [p for p in self.held if p not in self.draining]
            if keep:
                why = "its session expired" if expired else f"cut off for {limit:g} s"
                print(f"larbin_py: worker {self.worker}: releasing {len(keep)} partitions ({why}: "
                      "the others see this worker gone)", file=self.err)
                self._start_drain(keep)
                self._wake.set()

    def _start_drain(self, parts: list[int]) -> None:
        now = self.clock()
        gone = set(parts)
        for p in parts:
            self.draining[p] = now
            self.maybe_full.discard(p)
        self.fr.drop(lambda host: self.partition(host) in gone)
        self._forget_live(gone)

    def _forget_live(self, gone: set[int]) -> None:
        """Records of partitions handed over or lost are no longer held here."""
        self.live = {tag for tag in self.live if split_tag(tag)[0] not in gone}

    def _drained(self, final: bool) -> list[int]:
        """Draining partitions with no request of theirs running and no ack left to send."""
        if not self.draining:
            return []
        busy = {self.partition(req.site.host) for req in self.fr.running_requests()}
        if final:
            busy = set()
        waiting = {p for p, _, _ in self.acks_pending}
        return [p for p in self.draining if p not in busy and p not in waiting]

    def _released(self, p: int) -> None:
        self.held.pop(p, None)
        self.claimed.discard(p)
        self.draining.pop(p, None)
        self.to_claim.discard(p)
        self.polled.pop(p, None)

    def _lost(self, parts: list[int]) -> None:
        gone = set(parts)
        for p in gone:
            self.held.pop(p, None)
            self.claimed.discard(p)
            self.draining.pop(p, None)
            self.to_claim.discard(p)
            self.maybe_full.discard(p)
        if len(self.orphan_acks) < ORPHANS_MAX:
            for p, entry, outcome in self.acks_pending + self.acks_ready:
                if p in gone:
                    self.orphan_acks[make_tag(p, entry)] = outcome
        self.acks_pending = [a for a in self.acks_pending if a[0] not in gone]
        self.acks_ready = [a for a in self.acks_ready if a[0] not in gone]
        self.fr.drop(lambda host: self.partition(host) in gone)
        self._forget_live(gone)

    def stats(self) -> dict:
        return {
            "worker": self.worker, "partitions": len(self.held), "draining": len(self.draining),
            "ticks": self.ticks, "round_trips": self.io.round_trips, "takeovers": self.takeovers,
            "claimed": self.claimed_entries, "acked": self.acked, "fenced": self.fenced,
            "ip_leases": len(self.fr.ip_leases.held()), "redis_down": self.redis_down,
            "paused": self.paused_figures(),
            "robots_pruned": self.robots_pruned,
            "membership": membership_snapshot(self.membership),
        }

    def paused_figures(self) -> dict:
        """How long Redis's failures paused this worker: ``{"seconds", "pauses", "by_kind"}``
        (the pause under way included)."""
        by_kind = dict(self.paused_by_kind)
        total = self.paused_total
        if self.pause_since is not None:
            now = self.clock()
            by_kind[self.pause_kind] = by_kind.get(self.pause_kind, 0.0) + now - self.pause_since
            total += now - self.pause_since
        return {"seconds": round(total, 3), "pauses": self.pauses,
                "by_kind": {k: round(v, 3) for k, v in sorted(by_kind.items())}}
