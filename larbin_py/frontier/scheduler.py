"""The frontier: Larbin's gate, site FIFOs, IP heap, politeness and pace, sans-I/O.

The engine asks for the next request and reports what happened; the
frontier decides *what* may be fetched *when*.  It never touches a socket and
never reads a clock: every method that depends on time takes ``now``
(monotonic seconds) from the caller.  Its interface is
:class:`~larbin_py.frontier.protocol.Scheduler` (the engine's and its parts')
and :class:`~larbin_py.frontier.protocol.DistScheduler` (the coordinator's).

The data path (Larbin's, with its one failure mode removed)::

    admission ──► priority lane ─┐
    admission ──► main lane ─────┼─► load(), gated by ``is_get`` ─► NamedSite FIFO
                    wait lane ◄──┘        (site full: its park in memory, else the wait lane)
                                                │ DNS ok, robots.txt known
                                                ▼
                        IPSite ready queue ─► heap by next-allowed time
                                                │ < max_requests running, IP gate open
                                                ▼
                                     next_request(now) ─► Request

What is here:

* **Gate** (``is_get``): URLs are loaded from the lanes only while the site
  FIFOs together hold fewer than ``ram_urls``.  A URL whose site FIFO is full
  (``max_urls_by_site``, in-flight URLs included) is appended to the *wait
  lane* and comes back when that site has room, in batches
  (:class:`~larbin_py.frontier.refill.WaitRefill`).  Nothing is ever dropped
  for lack of room.
* **The park**: a URL loaded from the main or priority lane while its
  site's FIFO is full waits in memory beside that FIFO (``site.parked``),
  as long as the parks together hold fewer than ``park_urls`` (a quarter of
  ``ram_urls`` by default) and the site has none in the wait lane; it goes
  into the FIFO as soon as a slot frees, with no rotation of the wait lane.
  A recrawl queues every page at once: parking them in the wait lane, whose
  rotation pops about :data:`~larbin_py.frontier.refill.REFILL_SHARE`
  records a record placed (each written to disk again), cost it a sixth of
  its CPU (docs/recrawl.md).  Parked URLs do not
  count in the gate (one large site must not close it on the others); a
  checkpoint carries them as it carries the FIFOs.
* **Robots first**: the first request to a site whose rules are unknown is its
  robots.txt; no page request starts until the rules are known.
* **Politeness**: two request starts to one host name are at least
  ``max(wait_duration, crawl-delay)`` apart, two to one IP at least
  ``wait_duration`` apart (each stretched by a random jitter of up to ``jitter``,
  a fraction: waitJitter, 5 % by default), and at most ``conn_per_ip``
  requests run to one IP (what happens after a start, a late send or a
  follow-up request, is :class:`~larbin_py.frontier.follow_ups.FollowUps`').
  **Pace**: each IP's delay follows its server's round-trip time and 429/503
  answers (:class:`~larbin_py.throttle.ServerPace`, fed by :meth:`Frontier.server_answered`).
* **DNS answers**: a site whose addresses the ``privateNetworks`` policy all
  refuses (:class:`~larbin_py.frontier.dns_queue.DnsQueue`) is *refused*
  until its answer expires, and its URLs are forgotten as ``privateAddress``.
* **Retries**: a URL whose DNS, connection or server failed goes back to the
  tail of its site's FIFO with one retry fewer, and is forgotten with its
  reason when none are left.
* **Per-site settings** (``site_rules``: larbin.conf's ``site`` lines,
  :class:`~larbin_py.site_settings.SiteSettings`): a host's own
  waitDuration replaces the crawl's for the gaps after its requests (the
  host name's and its IP's), and its own UserAgent's product token is the
  agent its robots.txt is read for; both set when its site is made.
* **Budgets** (:class:`~larbin_py.frontier.budget.SiteBudget`): a page
  request of a site past its page or byte budget does not start; its URL
  is forgotten as ``siteBudget``.
* **Conservation**: ``taken == fetched + sum(forgotten) + queued + in_flight``
  at every moment (see :meth:`Frontier.conservation`).
* **Hand-over** (the distributed mode): :meth:`Frontier.drop` gives up the
  sites of partitions another worker took; their waits cross in wall-clock
  time (:meth:`Frontier.site_waits`, :meth:`Frontier.restore_waits`), as
  they do a restart.

The other jobs are rooms of their own, passed in at construction
(:func:`larbin_py.frontier.assembly.assemble` builds them from plain
settings): the URL library (:class:`~larbin_py.frontier.lanes.Lanes`), the
way in (:class:`~larbin_py.frontier.admission.Admission`: offer, the
lately-met cache, the seen test or the distributed sink), the names to
resolve (:class:`~larbin_py.frontier.dns_queue.DnsQueue`), pruning
(:class:`~larbin_py.frontier.pruning.Pruning`) and the IP-lease gate
(:mod:`larbin_py.frontier.ip_leases`: always open in one process, the lease
policy in a worker).  Checkpoints are :mod:`larbin_py.frontier.codec`'s
(after a ``--reload`` the URLs a journal found done, ``replay``, are counted,
not placed, as they come out of the lanes); the stats page's figures
:mod:`larbin_py.frontier.stats`'.

Errors: an ``OSError`` from a lane means the crawl state cannot be written
and propagates to the engine (which stops the crawl); a state change a
site's DNS or robots.txt machine does not allow is an
:class:`~larbin_py.transitions.IllegalTransition` (a bug, never input).
"""

from __future__ import annotations

import heapq
import math
import random
from collections import Counter
from dataclasses import dataclass
from typing import Callable

from .. import robots as robots_mod
from ..robots import product_token
from ..site_settings import SiteSettings
from ..throttle import ServerPace
from ..url import authority_of
from .addresses import IpTable
from .admission import Admission
from .budget import REASON as BUDGET_REASON
from .budget import SiteBudget
from .dns_queue import DnsQueue
from .follow_ups import FollowUps
from .ip_leases import IpLeaseGate, OpenGate
from .lanes import Lanes
from .pruning import Pruning
from .refill import WaitRefill
from .sites import DnsState, IPSite, LeaseState, NamedSite, RobotsState
from .store import UrlRecord
from .topcounts import TopCounts

__all__ = ["Frontier", "Settings", "Request", "site_key", "PAGE", "ROBOTS"]

PAGE = "page"
ROBOTS = "robots"


def site_key(url: str) -> tuple[str, str, str, int] | None:
    """``(key, scheme, host, port)`` of an absolute http(s) URL, or None
    (:func:`larbin_py.url.authority_of` splits it).

    ``key`` is ``scheme://host:port`` with the port always written, so the
    key of ``http://a/`` and ``http://a:80/x`` is the same.  User info is not
    part of the site.
    """
    parts = authority_of(url)
    if parts is None:
        return None
    scheme, _, host, port, _ = parts
    return f"{scheme}://{host}:{port}", scheme, host, port


@dataclass(frozen=True, slots=True)
class Settings:
    """The frontier's figures, set once (larbin.conf's keys, see wiring.build_frontier)."""

    ram_urls: int  # records the site FIFOs hold together (the gate)
    max_urls_by_site: int  # records one site holds, in flight included
    max_requests: int  # requests running at once (flowControl moves it at run time)
    wait_duration: float  # seconds between two starts to a host, and to an IP
    conn_per_ip: int = 1
    jitter: float = 0.05  # a fraction of the delay, drawn per start
    agent: str = "*"  # the robots.txt product token
    obey_robots: bool = True
    server_rtt_factor: float = 0.0  # ServerPace: the delay follows rtt x this (0: off)
    robots_retry_base: float = 1.0  # seconds before an unavailable robots.txt is asked again (growing)
    ipv6_prefix: int = 64  # IPv6 addresses sharing this prefix are one IP for politeness (128: each)
    park_urls: int = 0  # records of full sites parked in memory beside their FIFOs, together (0: none)


@dataclass(slots=True)
class Request:
    """One request the engine should make now."""

    kind: str  # PAGE or ROBOTS
    site: NamedSite
    record: UrlRecord | None  # None for robots.txt
    url: str
    ip: str
    port: int
    started: float


class Frontier:
    """Sites, gate and scheduling over the parts passed in; see the module docstring.

    ``lanes`` and ``admission`` (built on those lanes) are required; the
    other parts default to their single-process selves (``dns``: policy
    ``allow``; ``pruning``: its defaults; ``ip_leases``: an
    :class:`~larbin_py.frontier.ip_leases.OpenGate`).  ``on_forget(record,
    reason)`` hears every URL that ends without being fetched (the engine
    logs it); ``on_done(record, outcome)`` every record's end, ``fetched``
    or the forget reason (the distributed mode's acks).  ``replay``: URL ->
    outcome as the journal writes it (``""``: fetched, else the forget
    reason) of the URLs a ``--reload`` found done and still in the lanes.
    """

    def __init__(
        self,
        settings: Settings,
        *,
        lanes: Lanes,
        admission: Admission,
        dns: DnsQueue | None = None,
        pruning: Pruning | None = None,
        ip_leases: IpLeaseGate | None = None,
        rng: random.Random | None = None,
        on_forget: Callable[[UrlRecord, str], None] | None = None,
        on_done: Callable[[UrlRecord, str], None] | None = None,
        replay: dict[str, str] | None = None,
        budget: SiteBudget | None = None,
        site_rules: SiteSettings | None = None,
    ) -> None:
        if admission.lanes is not lanes:
            raise ValueError("the admission must queue into the frontier's own lanes")
        s = self.settings = settings
        # The figures the per-request path reads, as attributes (max_requests: flowControl moves it).
        self.ram_urls, self.max_urls_by_site, self.max_requests = s.ram_urls, s.max_urls_by_site, s.max_requests
        self.wait_duration, self.conn_per_ip, self.jitter = s.wait_duration, s.conn_per_ip, s.jitter
        self.agent, self.obey_robots = s.agent, s.obey_robots
        self.rng = rng or random.Random()
        self.on_forget, self.on_done = on_forget, on_done
        self.lanes, self.admission = lanes, admission
        self.dns = dns if dns is not None else DnsQueue()
        self.pruning = pruning if pruning is not None else Pruning()
        self.ip_leases: IpLeaseGate = ip_leases if ip_leases is not None else OpenGate()
        #: The sites' page and byte budgets (none by default).
        self.budget = budget if budget is not None else SiteBudget()
        self._budget_on = self.budget.active
        #: larbin.conf's site lines (a host's waitDuration and robots agent).
        self.site_rules = site_rules if site_rules else None
        #: URLs found done by a --reload's journal and still in the lanes (see the class docstring).
        self.replay: dict[str, str] = replay if replay is not None else {}
        self.refill = WaitRefill(s.max_urls_by_site, replaying=lanes.parked_at_start)
        self.sites: dict[str, NamedSite] = {}
        # The servers, by politeness key (an IPv4 address; an IPv6 /ipv6_prefix), looked up by address.
        self.ips: IpTable = IpTable(s.ipv6_prefix)
        self.follow_ups = FollowUps(self.ips, wait_duration=s.wait_duration, jitter=s.jitter, rng=self.rng,
                                    gate=self.ip_leases)
        self._heap: list[tuple[float, int, IPSite]] = []
        #: The DNS and robots.txt retry timers: a heap of (when, seq, site, "dns" or "robots").
        self.timers: list[tuple[float, int, NamedSite, str]] = []
        self._seq = 0
        self.in_sites = 0  # records in site FIFOs
        self.in_flight = 0  # page records taken and not finished
        self.requests = 0  # requests running (robots.txt included)
        self._running: dict[int, Request] = {}  # id -> running request
        self._last_now = 0.0  # the latest ``now`` given (see next_wakeup)
        self.sites_total = 0  # sites made (a pruned one made again counts once while kept)
        self.ready_sites = 0  # sites listed in their IP's ready queue (larbin_py.frontier.stats)
        self.busiest = TopCounts()
        self.failing = TopCounts()
        # Outcome counters, for conservation and stats.
        self.fetched = 0
        self.forgotten: Counter[str] = Counter()
        self.retried: Counter[str] = Counter()
        #: Records given up by drop() (handed over to another worker).
        self.handed_over = 0
        #: The parks' bound, and the records in them (see the module docstring: the park).
        self.park_urls = s.park_urls
        self.parked = 0
        #: The sites whose FIFO freed a slot while they had parked records: load() moves them in.
        self._unpark: dict[NamedSite, None] = {}
        # The parts' calls on the per-request path, bound once.
        self._leased = self.ip_leases.leased
        self._note_idle = self.pruning.note_idle
        self.ip_leases.attach(self.ips, self._schedule_ip)

    # ------------------------------------------------------------------
    # The gate: from the lanes into the site FIFOs
    # ------------------------------------------------------------------
    @property
    def is_get(self) -> bool:
        """Larbin's gate: True while the site FIFOs have room to load more."""
        return self.in_sites < self.ram_urls

    def load(self, now: float, max_reads: int = 2000) -> int:
        """Move URLs from the lanes into their sites while the gate is open.

        Order: the parks of the sites that freed room, then the priority
        lane, then the wait lane (only while some site whose URLs are parked
        there has freed room), then the main lane.
        Returns the number of records placed in a site (or counted done by
        ``replay``).
        """
        self._last_now = now
        lanes, refill, replay = self.lanes, self.refill, self.replay
        prio, main, wait = lanes.prio, lanes.main, lanes.wait
        placed = self._unpark_due(now) if self._unpark else 0
        reads = 0
        while reads < max_reads and self.in_sites < self.ram_urls:
            if len(prio):
                rec, from_wait = prio.pop(), False
            elif refill.replaying > 0 and len(wait):
                rec, from_wait = wait.pop(), False
                refill.replaying -= 1
            elif refill.rotating and len(wait):
                rec, from_wait = wait.pop(), True
            elif len(main):
                rec, from_wait = main.pop(), False
            else:
                break
            reads += 1
            if rec is None:  # the lane lost records to corruption
                continue
            outcome = replay.pop(rec.url, None) if replay else None
            if outcome is not None:  # done after the checkpoint: counted, not placed
                if outcome:
                    self.forgotten[outcome] += 1
                else:
                    self.fetched += 1
                ok = True
            else:
                ok = self._place(rec, now, from_wait)
            if ok:
                placed += 1
                if from_wait:
                    refill.hit()
            elif from_wait:
                refill.miss(len(wait))
        if refill.rotating and not len(wait):
            refill.end()
        return placed

    def more_to_load(self) -> bool:
        """True when :meth:`load` stopped at its batch size with room left:
        the gate is open and the priority or main lane still holds records
        (the engine pumps again at once instead of waiting for a timer)."""
        lanes = self.lanes
        return self.in_sites < self.ram_urls and bool(len(lanes.prio) or len(lanes.main) or self._unpark)

    def _unpark_due(self, now: float) -> int:
        """Move parked records into the FIFOs that freed slots, while the gate is open."""
        placed = 0
        due, bound = self._unpark, self.max_urls_by_site
        while due and self.in_sites < self.ram_urls:
            site = next(iter(due))
            parked = site.parked
            while parked and site.room(bound) and self.in_sites < self.ram_urls:
                self.parked -= 1
                self._enter(site, parked.popleft(), now, False)
                placed += 1
            if parked and site.room(bound):
                break  # the gate closed: the site stays listed
            del due[site]
            if not parked and site.room(bound):
                self.refill.freed(site)  # its records in the wait lane, if any, may come back
        return placed

    def _freed(self, site: NamedSite) -> None:
        """A slot of ``site``'s FIFO became free: its parked records first, then the wait lane's."""
        if site.parked:
            self._unpark[site] = None
        else:
            self.refill.freed(site)

    def _site_for(self, url: str, now: float | None = None) -> NamedSite | None:
        """The site of ``url``, made (or made again after pruning) if need be; None: not http(s)."""
        parsed = site_key(url)
        if parsed is None:
            return None
        key, scheme, host, port = parsed
        site = self.sites.get(key)
        if site is None:
            now = self._last_now if now is None else now
            site = self.sites[key] = NamedSite(key, scheme, host, port)
            if self.site_rules is not None and (rule := self.site_rules.for_host(host)) is not None:
                site.wait = rule.wait_duration
                if rule.user_agent:
                    site.agent = product_token(rule.user_agent)
            if not self.pruning.revive(site, now):
                self.sites_total += 1
            self._note_idle(site, now)  # listed at once: pruned even if it never runs
        return site

    def _place(self, rec: UrlRecord, now: float, from_wait: bool) -> bool:
        """Put ``rec`` in its site's FIFO (True), or park it beside the FIFO or in the wait lane (False)."""
        site = self._site_for(rec.url, now)
        if site is None:
            self._forget(rec, "badUrl")
            return True
        return self._enter(site, rec, now, from_wait)

    def _enter(self, site: NamedSite, rec: UrlRecord, now: float, from_wait: bool) -> bool:
        """:meth:`_place` once the site is known."""
        site.dropped = False
        if site.room(self.max_urls_by_site):
            site.fifo.append(rec)
            self.in_sites += 1
            if site.overflow > 0:
                self.refill.placed(site, from_wait)
            if site.dns is DnsState.REFUSED and site.dns_expiry <= now:
                site.dns_event("expire")  # the answer expired: the name may have moved
            if site.dns is DnsState.NEW:
                self.dns.ask(site)
            elif site.dns is DnsState.OK:
                self._make_ready(site, now)
            elif site.dns is DnsState.REFUSED:
                self._refuse_fifo(site)
            return True
        if not from_wait:
            if not site.overflow and self.parked < self.park_urls:
                site.parked.append(rec)  # none of its records in the wait lane: order is kept
                self.parked += 1
                return False
            self.refill.park(site)
        self.lanes.wait.push(rec)
        return False

    def _refuse_fifo(self, site: NamedSite) -> None:
        """Forget the URLs of a site whose addresses are all refused."""
        if not site.fifo:
            return
        self.in_sites -= len(site.fifo)
        for rec in site.fifo:
            self._forget(rec, "privateAddress")
        site.fifo.clear()
        self._freed(site)
        self._note_idle(site, self._last_now)

    # ------------------------------------------------------------------
    # DNS answers (the names to resolve are the DnsQueue's)
    # ------------------------------------------------------------------
    def dns_resolved(self, site: NamedSite, ips: tuple[str, ...], ttl: float, now: float) -> None:
        """The name resolved to ``ips`` (valid ``ttl`` seconds).

        The addresses the private-network policy refuses are dropped; when
        none is left, the site is refused until the answer expires and its
        URLs are forgotten as ``privateAddress`` (those in flight end as
        they will: they started on an address allowed then).
        """
        ips = self.dns.answered(site, ips, ttl, now)
        old = site.ip_site
        if not ips:
            site.ip_site = None
            if old is not None:
                self.pruning.left_ip(old, now)
            self._refuse_fifo(site)
            return
        ip = ips[0]  # the address requests go to (site.ips[0]); its server is keyed by polite_key
        ip_site = self.ips.get(ip)
        if ip_site is None:
            key = self.ips.key(ip)
            ip_site = self.ips[key] = IPSite(key, ServerPace(rtt_factor=self.settings.server_rtt_factor))
        if ip_site is not old:
            ip_site.sites += 1
            site.ip_site = ip_site
            if old is not None:
                self.pruning.left_ip(old, now)
        self._make_ready(site, now)
        self._note_idle(site, now)

    def dns_failed(self, site: NamedSite, error: str, now: float) -> None:
        """The name did not resolve: every waiting URL loses a retry."""
        retry_at = self.dns.failed(site, now)
        kept = []
        for rec in site.fifo:
            if rec.retries > 0:
                rec.retries -= 1
                self.retried["noDNS"] += 1
                kept.append(rec)
            else:
                self.in_sites -= 1
                self._forget(rec, "noDNS")
        dropped = len(site.fifo) - len(kept)
        site.fifo.clear()
        site.fifo.extend(kept)
        if dropped:
            # After the FIFO shrank (not while it is walked): its parked URLs
            # may come back, to be asked for again or forgotten in turn.
            self._freed(site)
        self._seq += 1
        heapq.heappush(self.timers, (retry_at, self._seq, site, "dns"))
        self._note_idle(site, now)

    # ------------------------------------------------------------------
    # Scheduling: the IP heap
    # ------------------------------------------------------------------
    def _make_ready(self, site: NamedSite, now: float) -> None:
        if site.queued or site.active or not site.fifo or site.ip_site is None:
            return
        if site.dns is not DnsState.OK:
            return
        if site.robots_state in (RobotsState.FETCHING, RobotsState.ERROR):
            return
        ip = site.ip_site
        ip.ready.append(site)
        site.queued = True
        self.ready_sites += 1
        self._schedule_ip(ip, now)

    def _schedule_ip(self, ip: IPSite, at: float) -> None:
        if ip.busy >= self.conn_per_ip or not ip.ready:
            return
        if self._leased and ip.lease is not LeaseState.HELD:
            if ip.lease is LeaseState.NONE:
                self.ip_leases.want(ip)
            return
        t = max(at, ip.next_allowed)
        if ip.heap_time is not None and ip.heap_time <= t:
            return
        ip.heap_time = t
        self._seq += 1
        heapq.heappush(self._heap, (t, self._seq, ip))

    def tick(self, now: float) -> None:
        """Run the DNS and robots.txt retry timers that are due, and prune idle sites and IPs."""
        self._last_now = now
        timers = self.timers
        while timers and timers[0][0] <= now:
            _, _, site, kind = heapq.heappop(timers)
            if kind == "dns" and site.dns is DnsState.FAILED:
                if site.fifo:
                    self.dns.ask(site)
                else:
                    site.dns_event("expire")
                    self._note_idle(site, now)
            elif kind == "robots" and site.robots_state is RobotsState.ERROR:
                site.robots_event("expire")
                self._make_ready(site, now)
                self._note_idle(site, now)
        self.pruning.prune(now, self.sites, self.ips)

    def next_wakeup(self) -> float | None:
        """The earliest time at which :meth:`load`, :meth:`next_request` or :meth:`tick` has work.

        Work is due at once (the latest ``now`` given) when a name waits to
        be resolved (``dns.take()``: :meth:`next_request` found an address
        stale), or when the gate is open and a lane has records
        :meth:`load` would read: the main or priority lane, a park whose
        site freed a slot, or the wait lane while a rotation runs or a
        reload's parked records are replayed.
        Both happen outside any request's end (robots.txt refusing the URLs
        of a FIFO in :meth:`next_request`, a name that did not resolve):
        without this, nothing would ask DNS again or bring the parked URLs
        back, and the crawl would wait for ever with nothing running.
        """
        if self.dns.wanted:
            return self._last_now
        if self.in_sites < self.ram_urls:
            lanes, refill = self.lanes, self.refill
            if len(lanes.prio) or len(lanes.main) or self._unpark or \
                    (len(lanes.wait) and (refill.rotating or refill.replaying > 0)):
                return self._last_now
        t = math.inf
        if self._heap and self.requests < self.max_requests and self._last_now <= self.ip_leases.deadline:
            t = self._heap[0][0]  # (past the lease deadline, the renewal wakes the engine)
        if self.timers:
            t = min(t, self.timers[0][0])
        return None if t == math.inf else t

    def next_request(self, now: float) -> Request | None:
        """The next request allowed to start at ``now``, or None."""
        self._last_now = now
        if now > self.ip_leases.deadline:
            return None  # the leases may have lapsed: nothing starts until they are renewed
        heap = self._heap
        while heap and self.requests < self.max_requests:
            t, _, ip = heap[0]
            if t > now:
                return None
            heapq.heappop(heap)
            if ip.heap_time != t:
                continue  # superseded by an earlier entry
            ip.heap_time = None
            if ip.busy >= self.conn_per_ip:
                continue  # rescheduled when a request to it ends
            if self._leased and ip.lease is not LeaseState.HELD:
                continue  # rescheduled when the lease is granted again
            if ip.next_allowed > now:
                self._schedule_ip(ip, ip.next_allowed)
                continue
            req = self._take_from_ip(ip, now)
            if req is not None:
                return req
        return None

    def _take_from_ip(self, ip: IPSite, now: float) -> Request | None:
        earliest = math.inf
        for _ in range(len(ip.ready)):
            site = ip.ready.popleft()
            site.queued = False
            self.ready_sites -= 1
            if site.active or not site.fifo or site.ip_site is not ip:
                continue
            if site.dns_expiry <= now:
                self.dns.ask(site)  # the address is stale: ask again before the next request
                continue
            if site.next_allowed > now:
                ip.ready.append(site)
                site.queued = True
                self.ready_sites += 1
                earliest = min(earliest, site.next_allowed)
                continue
            req = self._take_from_site(site, ip, now)
            if req is not None:
                self._schedule_ip(ip, earliest if earliest != math.inf else now)
                return req
        if ip.ready:
            self._schedule_ip(ip, earliest)
        return None

    def _take_from_site(self, site: NamedSite, ip: IPSite, now: float) -> Request | None:
        if self.obey_robots:
            if site.robots_state is RobotsState.OK and site.robots_expiry <= now:
                site.robots_event("expire")
            if site.robots_state is RobotsState.NONE:
                site.robots_event("fetch")
                return self._start(site, ip, None, site.robots_url, ROBOTS, now)
        while site.fifo:
            rec = site.fifo.popleft()
            self.in_sites -= 1
            if self.obey_robots and site.robots is not None and \
                    not site.robots.allowed(site.agent or self.agent, rec.url):
                self._forget(rec, site.robots_reason or "forbiddenRobots")
                self._freed(site)
                continue
            if self._budget_on and rec.via[:1] != "m":  # a page (a sitemap file spends no budget)
                if not self.budget.allows(site.key, site.host):
                    self._forget(rec, BUDGET_REASON)
                    self._freed(site)
                    continue
                self.budget.started(site.key, site.host)
            site.in_flight += 1
            self.in_flight += 1
            return self._start(site, ip, rec, rec.url, PAGE, now)
        self._note_idle(site, now)
        return None

    def _start(self, site: NamedSite, ip: IPSite, rec: UrlRecord | None, url: str, kind: str, now: float) -> Request:
        site.active += 1
        ip.busy += 1
        ip.last_start = now
        self.requests += 1
        jitter = 1.0 + self.jitter * self.rng.random()
        pace = ip.pace
        wait = self.wait_duration if site.wait is None else site.wait
        ip.next_allowed = max(now + pace.delay(wait) * jitter, pace.retry_until)
        site.next_allowed = max(now + pace.delay(max(wait, site.crawl_delay)) * jitter, pace.retry_until)
        # The site's own address (an IPv6 server's key is its network, not an address to dial).
        req = Request(kind, site, rec, url, site.ips[0] if site.ips else ip.ip, site.port, now)
        self._running[id(req)] = req
        return req

    def _release(self, req: Request, now: float) -> None:
        self._running.pop(id(req), None)
        site = req.site
        site.active -= 1
        self.requests -= 1
        ip = site.ip_site
        if ip is not None and ip.ip == self.ips.key(req.ip):
            ip.busy -= 1
        else:  # the site moved to another address meanwhile
            old = self.ips.get(req.ip)
            if old is not None:
                old.busy -= 1
                self._schedule_ip(old, now)
        if req.record is not None:
            site.in_flight -= 1
            self.in_flight -= 1
            self._freed(site)
            if self._budget_on and req.record.via[:1] != "m":
                self.budget.ended(site.key)
        if ip is not None:
            self._make_ready(site, now)
            self._schedule_ip(ip, now)
        if not site.fifo and not site.active and not site.in_flight:
            self._note_idle(site, now)

    # ------------------------------------------------------------------
    # The servers' pace (ServerPace): fed by the engine with every answer
    # ------------------------------------------------------------------
    def server_answered(self, req: Request, rtt: float | None, status: int | None, now: float,
                        retry_after: float | None = None) -> None:
        """Feed the answer of ``req`` to its IP's pace.

        ``rtt`` (request sent to end of headers) updates the server's smoothed
        round-trip time; 429 and 503 double its delay (and ``retry_after``
        holds it back until then); any other answer lets the penalty decay.
        Call before the outcome (fetched_ok / forget / retry) so the next
        start of that IP is computed with the new pace.
        """
        ip = self.ips.get(req.ip)
        if ip is None:
            return
        pace = ip.pace
        if rtt is not None:
            pace.observe(rtt)
        if status in (429, 503):
            pace.overloaded(now, retry_after)
            wait = pace.earliest(now, self.wait_duration)
            if wait > ip.next_allowed:
                ip.next_allowed = wait
        elif status is not None:
            pace.success()

    def spent(self, req: Request, nbytes: int) -> None:
        """``nbytes`` of a page's body were read (the site's byte budget)."""
        rec = req.record
        if self._budget_on and rec is not None and rec.via[:1] != "m":
            self.budget.spent(req.site.key, req.site.host, nbytes)

    # ------------------------------------------------------------------
    # Outcomes
    # ------------------------------------------------------------------
    def fetched_ok(self, req: Request, now: float) -> None:
        """The page was fetched (whatever its status counted as: see forget)."""
        self.fetched += 1
        site = req.site
        site.pages += 1
        self.busiest.update(site.key, site.pages)
        if self.on_done is not None and req.record is not None:
            self.on_done(req.record, "fetched")
        self._release(req, now)

    def forget(self, req: Request, reason: str, now: float, *, error: bool = True) -> None:
        """The page request ended for good without a fetched page.

        ``error`` False: the answer was good but the page is not kept (``noindex``,
        ``canonicalised``): not counted among the site's errors.
        """
        site = req.site
        if error:
            site.errors += 1
            self.failing.update(site.key, site.errors)
        self._forget(req.record, reason)
        self._release(req, now)

    def retry(self, req: Request, reason: str, now: float, delay: float = 0.0, *,
              free: bool = False) -> bool:
        """Put the URL back at the tail of its site with one retry fewer.

        ``delay`` postpones the next request to the site (Retry-After, backoff).
        ``free`` keeps the retry count (the request never reached the server:
        a kept-alive connection the server had just closed).
        Returns False when no retry was left and the URL was forgotten.
        """
        rec = req.record
        site = req.site
        if not free:
            site.errors += 1
            self.failing.update(site.key, site.errors)
        if delay > 0:
            site.next_allowed = max(site.next_allowed, now + delay)
        if free:
            rec.retries += 1  # undone below: this attempt does not count
        if rec.retries <= 0:
            self._forget(rec, reason)
            self._release(req, now)
            return False
        self.retried[reason] += 1
        req.record = None  # accounted for here: release only the request
        if self._budget_on and rec.via[:1] != "m":
            self.budget.released(site.key)
        site.in_flight -= 1
        self.in_flight -= 1
        if site.dropped:
            # The site was handed over: its new owner claims the URL again.
            self.handed_over += 1
            self._release(req, now)
            return True
        rec.retries -= 1
        site.fifo.append(rec)
        self.in_sites += 1
        self._release(req, now)
        if site.dns is DnsState.REFUSED:  # its name moved to a refused address meanwhile
            self._refuse_fifo(site)
        return True

    def robots_known(self, req: Request, rules, ttl: float, now: float) -> None:
        """robots.txt was read (or is known to be absent): apply ``rules``."""
        site = req.site
        site.set_robots(rules, "known", now + ttl, site.agent or self.agent)
        site.robots_failures = 0
        if site.crawl_delay > (self.wait_duration if site.wait is None else site.wait):
            # The first page request waits out the crawl-delay after robots.txt.
            site.next_allowed = max(site.next_allowed, req.started + site.crawl_delay)
        self._release(req, now)

    def robots_unavailable(self, req: Request, now: float, reason: str | None = None, *,
                           free: bool = False) -> None:
        """robots.txt answered 5xx or could not be reached: disallow, retry later.

        ``reason``: the transport failure (``tlsError``, ``proxyError``) that
        kept robots.txt unread; when the site is given up, its URLs are
        forgotten under it rather than as ``forbiddenRobots`` (the site
        forbade nothing: it could not be reached as it should).

        ``free``: the request never reached the server (a kept-alive
        connection it closed as we reused it, a request no longer allowed
        out): asked again at once, politely, and not counted among the
        :data:`~larbin_py.robots.MAX_ERROR_ATTEMPTS` failures that give the
        site up -- the site failed nothing.
        """
        site = req.site
        if free:
            site.robots_event("fail")
            site.retry_at = now
            self._seq += 1
            heapq.heappush(self.timers, (now, self._seq, site, "robots"))
            self._release(req, now)
            return
        site.robots_failures += 1
        site.robots_reason = reason
        if site.robots_failures >= robots_mod.MAX_ERROR_ATTEMPTS:
            site.robots = robots_mod.RobotsTxt.disallow_all()
            site.robots_event("give_up")
            site.robots_expiry = now + robots_mod.CACHE_TTL
        else:
            site.robots_event("fail")
            site.retry_at = now + robots_mod.robots_retry_delay(site.robots_failures,
                                                                self.settings.robots_retry_base)
            self._seq += 1
            heapq.heappush(self.timers, (site.retry_at, self._seq, site, "robots"))
        self._release(req, now)

    def restore_robots(self, robots_url: str, rules, expiry: float) -> None:
        """Reuse robots.txt rules fetched before (a restart, a takeover) until ``expiry`` (loop time)."""
        site = self._site_for(robots_url)
        if site is not None and site.robots_state is not RobotsState.OK:
            site.set_robots(rules, "restore", expiry, site.agent or self.agent)

    def _forget(self, rec: UrlRecord, reason: str) -> None:
        self.forgotten[reason] += 1
        if self.on_forget is not None:
            self.on_forget(rec, reason)
        if self.on_done is not None:
            self.on_done(rec, reason)

    # ------------------------------------------------------------------
    # Hand-over (the distributed mode)
    # ------------------------------------------------------------------
    def drop(self, pred: Callable[[str], bool]) -> int:
        """Give up every site whose host ``pred`` names (their partition went to another worker).

        Their URLs waiting here (site FIFOs and parks, the priority and wait lanes,
        and the main lane when it has a ``drop`` of its own) leave this
        frontier's accounts uncounted as outcomes: they stay pending in
        Redis, where the new owner claims them.  Requests running to those
        sites end as usual (their outcome is still this worker's, acked
        before the partition is released), except that a retry is handed
        over too.  The lanes are filtered at once rather than as they are
        popped: no predicate lingers to be retired, so a partition that
        comes back later is taken as new.  Returns how many records left.
        """
        n = 0
        refill = self.refill
        for site in self.sites.values():
            if not pred(site.host):
                continue
            site.dropped = True
            if site.fifo:
                n += len(site.fifo)
                self.in_sites -= len(site.fifo)
                site.fifo.clear()
            if site.parked:
                n += len(site.parked)
                self.parked -= len(site.parked)
                site.parked.clear()
            self._unpark.pop(site, None)
            refill.forget(site)
            if site.queued and site.ip_site is not None:
                try:
                    site.ip_site.ready.remove(site)
                except ValueError:
                    pass
                else:
                    self.ready_sites -= 1
                site.queued = False
            self._note_idle(site, self._last_now)

        def gone(rec: UrlRecord | None) -> bool:
            parts = site_key(rec.url) if rec is not None else None
            return parts is not None and pred(parts[2])

        n += self.lanes.drop(gone)
        refill.lane_filtered()
        self.handed_over += n
        return n

    def running_requests(self):
        """The requests running now (a drain waits for those of its partitions; a checkpoint carries them)."""
        return self._running.values()

    def site_waits(self, pred: Callable[[str], bool] | None, now: float, wall: float, *,
                   ahead: float = 0.0) -> dict[str, float]:
        """``{site key: wall time}`` of the next allowed request of the sites whose host ``pred``
        names (None: all) that is more than ``ahead`` seconds after ``now``: what a hand-over
        passes on (``sitewait``) and a checkpoint keeps (the loop's clock starts anew elsewhere)."""
        limit = now + ahead
        return {site.key: wall + (site.next_allowed - now) for site in self.sites.values()
                if site.next_allowed > limit and (pred is None or pred(site.host))}

    def restore_waits(self, waits: dict[str, float], now: float, wall: float) -> None:
        """Hold the sites of ``waits`` (site key -> wall time) back until then (a takeover, a restart);
        a wait already over, or a key that is not ``scheme://host:port``, is skipped."""
        for key, until in waits.items():
            if until <= wall or len(key.split("://", 1)) != 2:
                continue
            site = self._site_for(f"{key}/", now)
            if site is not None:
                site.next_allowed = max(site.next_allowed, now + (until - wall))

    # ------------------------------------------------------------------
    # Accounting and stats
    # ------------------------------------------------------------------
    @property
    def queued(self) -> int:
        return self.lanes.queued + self.in_sites + self.parked

    @property
    def taken(self) -> int:
        """Records taken into the frontier and not handed over (conservation's left side)."""
        return self.admission.taken - self.handed_over

    def conservation(self) -> tuple[int, int]:
        """``(taken, fetched + forgotten + queued + in_flight)``: always equal."""
        return self.taken, self.fetched + sum(self.forgotten.values()) + self.queued + self.in_flight

    def urls_in_memory(self) -> int:
        """URL records held in RAM: lane windows, site FIFOs and parks, in flight."""
        return self.lanes.in_memory + self.in_sites + self.parked + self.in_flight

    def idle(self) -> bool:
        """Nothing queued, nothing running, nothing waiting on DNS: the crawl is over."""
        return self.queued == 0 and self.requests == 0 and self.dns.pending == 0

    def recount(self, fetched: int, forgotten: dict[str, int], retried: dict[str, int]) -> None:
        """Take a checkpoint's outcome counters (a restart, :func:`larbin_py.frontier.codec.restore`)
        and count ``taken`` again over what the lanes and sites hold now."""
        self.fetched = fetched
        self.forgotten = Counter(forgotten)
        self.retried = Counter(retried)
        self.admission.taken = (self.fetched + sum(self.forgotten.values()) + self.queued + self.in_flight
                                + self.handed_over)

    def close(self) -> None:
        """Close the lanes (the seen store is its owner's to close, after them)."""
        self.lanes.close()
