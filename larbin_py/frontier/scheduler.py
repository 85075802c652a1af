"""The frontier: Larbin's URL library, sites, gate and politeness, sans-I/O.

The engine pushes URLs in, asks for the next request, and reports what
happened; the frontier decides *what* may be fetched *when*.  It never touches
a socket and never reads a clock: every method that depends on time takes
``now`` (monotonic seconds) from the caller.

The data path (Larbin's, with its one failure mode removed)::

    push ──► priority store ─┐
    push ──► main store ─────┼─► load(), gated by ``is_get`` ─► NamedSite FIFO
                wait store ◄─┘         (site full: park in the wait store)
                                                │ DNS ok, robots.txt known
                                                ▼
                        IPSite ready queue ─► heap by next-allowed time
                                                │ < max_requests running
                                                ▼
                                     next_request(now) ─► Request

* **Gate** (``is_get``): URLs are loaded from the stores only while the site
  FIFOs together hold fewer than ``ram_urls``.  A URL whose site FIFO is full
  (``max_urls_by_site``, in-flight URLs included) is appended to the *wait
  store* (Larbin's ``URLsDiskWait``) and comes back when that site has room.
  Nothing is ever dropped for lack of room.
* **Refills in batches**: the wait store mixes every full site's URLs, so
  finding one site's next URL means rotating past the others (a miss is
  popped and appended again).  Larbin rotated for every freed slot: with a
  few hundred full sites that is dozens of misses per page fetched.  Here a
  site *wants* a refill only once it has drained to half its bound
  (``refill_block`` free slots), and the rotation starts only when at least
  one in :data:`REFILL_SHARE` of the sites with parked URLs wants one, or
  when a wanting site has nothing left to send.  One rotation then fills
  many sites, and stops as soon as none wants more or a whole turn of the
  store found nothing that fits.
* **Robots first**: the first request to a site whose rules are unknown is its
  robots.txt; no page request starts until the rules are known.
* **Politeness**: two request starts to one host name are at least
  ``max(wait_duration, crawl-delay)`` apart, two to one IP at least
  ``wait_duration`` apart (each stretched by a random jitter of up to ``jitter``,
  a fraction: waitJitter, 5 % by default), and
  at most ``conn_per_ip`` requests run to one IP.
* **Private addresses** (``private_networks``, see
  :mod:`larbin_py.frontier.addresses`): the addresses a name resolves to are
  filtered by the policy; a site left with none is *refused* until its DNS
  answer expires, and its URLs are forgotten as ``privateAddress``.
* **Retries**: a URL whose DNS, connection or server failed goes back to the
  tail of its site's FIFO with one retry fewer, and is forgotten with its
  reason when none are left.
* **Conservation**: ``taken == fetched + sum(forgotten) + queued + in_flight``
  at every moment (see :meth:`Frontier.conservation`).
"""

from __future__ import annotations

import heapq
import math
import os
import random
from collections import Counter
from dataclasses import dataclass
from typing import Callable

from .. import robots as robots_mod
from ..throttle import ServerPace
from ..url import authority_of
from .addresses import POLICIES as PRIVATE_POLICIES, is_private_address
from .sites import DnsState, IPSite, NamedSite, RobotsState
from .store import UrlRecord, UrlStore

__all__ = ["Frontier", "Request", "site_key", "PAGE", "ROBOTS"]

PAGE = "page"
ROBOTS = "robots"

#: Largest robots.txt crawl-delay honoured, seconds (a larger one is clamped).
MAX_CRAWL_DELAY = 120.0

#: A rotation of the wait store starts once one in this many sites with
#: parked URLs wants a refill (or a wanting site has nothing left to send):
#: a rotation then pops about this many records per record placed.
REFILL_SHARE = 4


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
    """URL library, sites and scheduling; see the module docstring.

    ``on_forget(record, reason)`` is called for every URL that ends without
    being fetched (the engine logs and counts it; the frontier counts too).
    """

    def __init__(
        self,
        state_dir: str,
        *,
        ram_urls: int,
        max_urls_by_site: int,
        max_requests: int,
        wait_duration: float,
        conn_per_ip: int = 1,
        agent: str = "*",
        obey_robots: bool = True,
        dns_retry_base: float = 2.0,
        robots_retry_base: float = 1.0,
        jitter: float = 0.05,
        rng: random.Random | None = None,
        on_forget: Callable[[UrlRecord, str], None] | None = None,
        segment_bytes: int = 64 * 1024 * 1024,
        server_rtt_factor: float = 0.0,
        positions: dict | None = None,
        private_networks: str = "allow",
    ) -> None:
        self.ram_urls = ram_urls
        self.max_urls_by_site = max_urls_by_site
        self.max_requests = max_requests
        self.wait_duration = wait_duration
        self.conn_per_ip = conn_per_ip
        self.agent = agent
        self.obey_robots = obey_robots
        self.dns_retry_base = dns_retry_base
        self.robots_retry_base = robots_retry_base
        self.jitter = jitter
        self.server_rtt_factor = server_rtt_factor
        self.rng = rng or random.Random()
        self.on_forget = on_forget
        if private_networks not in PRIVATE_POLICIES:
            raise ValueError(f"private_networks: expected one of {', '.join(PRIVATE_POLICIES)}")
        self.private_networks = private_networks
        #: Host names whose private addresses ``seeds`` lets through (see allow_private).
        self.private_hosts: set[str] = set()
        # The three stores share the RAM budget: the main lane gets most of it.
        lane = max(1, ram_urls // 10)

        def store(name: str, ram: int) -> UrlStore:
            directory = os.path.join(state_dir, name)
            if positions is None:
                return UrlStore(directory, ram_urls=ram, segment_bytes=segment_bytes)
            # Records parked in the wait store after the checkpoint were popped
            # from a store after it too, so they are read again: cut them off.
            cut = positions.get("wait_end") if name == "wait" else None
            return UrlStore.open_existing(directory, tuple(positions[name]), ram_urls=ram,
                                          segment_bytes=segment_bytes,
                                          truncate_at=tuple(cut) if cut is not None else None)

        self.main = store("main", max(1, ram_urls - 2 * lane))
        self.prio = store("priority", lane)
        self.wait = store("wait", lane)
        # After a reload, the parked URLs' sites have no overflow count yet:
        # the first pops of the wait store are placed as fresh URLs.
        self._wait_replay = len(self.wait) if positions is not None else 0
        self.sites: dict[str, NamedSite] = {}
        self.ips: dict[str, IPSite] = {}
        self._heap: list[tuple[float, int, IPSite]] = []
        self._timers: list[tuple[float, int, NamedSite, str]] = []
        self._seq = 0
        self.dns_wanted: list[NamedSite] = []
        self.dns_pending = 0
        self.in_sites = 0  # records in site FIFOs
        self.in_flight = 0  # page records taken and not finished
        self.requests = 0  # requests running (robots.txt included)
        self._running: dict[int, Request] = {}  # id -> running request
        # Refills from the wait store (see "Refills in batches" above).
        self.refill_block = max(1, max_urls_by_site // 2)
        self._parked_sites = 0  # sites with overflow > 0
        self._wanting: set[NamedSite] = set()  # parked sites drained to refill_block
        self._rotating = False
        self._wait_misses = 0
        self._last_now = 0.0  # the latest ``now`` given (see next_wakeup)
        # Counters for conservation and stats.
        self.taken = 0
        self.fetched = 0
        self.forgotten: Counter[str] = Counter()
        self.retried: Counter[str] = Counter()

    # ------------------------------------------------------------------
    # Input
    # ------------------------------------------------------------------
    def push(self, url: str, depth: int, retries: int, *, priority: bool = False, hops: int = 0) -> None:
        """Queue a URL that passed the rules and the seen test.

        ``hops``: the redirects that led to it (kept with the record, on disk too).
        """
        rec = UrlRecord(url, depth, retries, hops)
        (self.prio if priority else self.main).push(rec)
        self.taken += 1

    @property
    def is_get(self) -> bool:
        """Larbin's gate: True while the site FIFOs have room to load more."""
        return self.in_sites < self.ram_urls

    def load(self, now: float, max_reads: int = 2000) -> int:
        """Move URLs from the stores into their sites while the gate is open.

        Order: the priority lane, then the wait store (only while some site
        whose URLs are parked there has freed room), then the main store.
        Returns the number of records placed in a site.
        """
        self._last_now = now
        placed = 0
        reads = 0
        while reads < max_reads and self.in_sites < self.ram_urls:
            if len(self.prio):
                rec, from_wait = self.prio.pop(), False
            elif self._wait_replay > 0 and len(self.wait):
                rec, from_wait = self.wait.pop(), False
                self._wait_replay -= 1
            elif self._rotating and len(self.wait):
                rec, from_wait = self.wait.pop(), True
            elif len(self.main):
                rec, from_wait = self.main.pop(), False
            else:
                break
            reads += 1
            if rec is None:  # the store lost records to corruption
                continue
            if self._place(rec, now, from_wait):
                placed += 1
                if from_wait:
                    self._wait_misses = 0
                    if not self._wanting:
                        self._rotating = False
            elif from_wait:
                self._wait_misses += 1
                if self._wait_misses >= len(self.wait):
                    self._end_rotation()
        if self._rotating and not len(self.wait):
            self._end_rotation()
        return placed

    def _load_due(self) -> bool:
        """True when :meth:`load` has work now: the gate is open and a store
        has records it would read (the wait store only while a rotation runs
        or a reload's parked records are being replayed)."""
        if self.in_sites >= self.ram_urls:
            return False
        if len(self.prio) or len(self.main):
            return True
        return bool(len(self.wait)) and (self._rotating or self._wait_replay > 0)

    def _end_rotation(self) -> None:
        """A whole turn of the wait store found nothing for the wanting sites.

        So none of them has a record parked (their counts were off: records
        lost to a damaged store): they stop wanting.
        """
        for site in self._wanting:
            self._parked_sites -= 1
            site.overflow = 0
        self._wanting.clear()
        self._rotating = False
        self._wait_misses = 0

    def _site_for(self, url: str) -> NamedSite | None:
        parsed = site_key(url)
        if parsed is None:
            return None
        key, scheme, host, port = parsed
        site = self.sites.get(key)
        if site is None:
            site = self.sites[key] = NamedSite(key, scheme, host, port)
        return site

    def _place(self, rec: UrlRecord, now: float, from_wait: bool) -> bool:
        site = self._site_for(rec.url)
        if site is None:
            self._forget(rec, "badUrl")
            return True
        if site.room(self.max_urls_by_site):
            site.fifo.append(rec)
            self.in_sites += 1
            if site.overflow > 0:
                if from_wait:
                    site.overflow -= 1
                    if site.overflow == 0:
                        self._parked_sites -= 1
                        self._wanting.discard(site)
                # A full site wants nothing (whichever store filled it).
                if not site.room(self.max_urls_by_site):
                    self._wanting.discard(site)
            self._on_work(site, now)
            return True
        if not from_wait:
            site.overflow += 1
            if site.overflow == 1:
                self._parked_sites += 1
        self.wait.push(rec)
        return False

    def _on_work(self, site: NamedSite, now: float) -> None:
        if site.dns is DnsState.REFUSED and site.dns_expiry <= now:
            site.dns_event("expire")  # the answer expired: the name may have moved
        if site.dns is DnsState.NEW:
            site.dns_event("ask")
            self.dns_pending += 1
            self.dns_wanted.append(site)
        elif site.dns is DnsState.OK:
            self._make_ready(site, now)
        elif site.dns is DnsState.REFUSED:
            self._refuse_fifo(site)

    def _refuse_fifo(self, site: NamedSite) -> None:
        """Forget the URLs of a site whose addresses are all refused."""
        if not site.fifo:
            return
        self.in_sites -= len(site.fifo)
        for rec in site.fifo:
            self._forget(rec, "privateAddress")
        site.fifo.clear()
        self._freed(site)

    def _freed(self, site: NamedSite) -> None:
        """A slot of ``site`` became free: parked URLs of it may come back."""
        if site.overflow <= 0:
            return
        wanting = self._wanting
        if site not in wanting:
            if len(site.fifo) + site.in_flight > self.max_urls_by_site - self.refill_block:
                return
            wanting.add(site)
            # A turn counts from here: earlier misses may be this site's.
            self._wait_misses = 0
        if not self._rotating and (len(wanting) * REFILL_SHARE >= self._parked_sites or not site.fifo):
            self._rotating = True
            self._wait_misses = 0

    # ------------------------------------------------------------------
    # DNS
    # ------------------------------------------------------------------
    def take_dns_requests(self) -> list[NamedSite]:
        """Sites whose host name the engine must resolve now."""
        wanted, self.dns_wanted = self.dns_wanted, []
        return wanted

    def allow_private(self, host: str) -> None:
        """Let ``host`` (a start URL's host name) reach private addresses under ``seeds``."""
        self.private_hosts.add(host.lower())

    def allowed_addresses(self, host: str, ips) -> tuple[str, ...]:
        """The addresses of ``ips`` the ``privateNetworks`` policy lets ``host`` reach."""
        policy = self.private_networks
        if policy == "allow" or (policy == "seeds" and host.lower() in self.private_hosts):
            return tuple(ips)
        return tuple(ip for ip in ips if not is_private_address(ip))

    def dns_resolved(self, site: NamedSite, ips: tuple[str, ...], ttl: float, now: float) -> None:
        """The name resolved to ``ips`` (valid ``ttl`` seconds).

        The addresses the private-network policy refuses are dropped; when
        none is left, the site is refused until the answer expires and its
        URLs are forgotten as ``privateAddress`` (those in flight end as
        they will: they started on an address allowed then).
        """
        self.dns_pending -= 1
        site.dns_expiry = now + ttl
        site.dns_failures = 0
        ips = self.allowed_addresses(site.host, ips)
        if not ips:
            site.dns_event("refuse")
            site.ips = ()
            site.ip_site = None
            self._refuse_fifo(site)
            return
        site.dns_event("answer")
        site.ips = ips
        ip = ips[0]
        ip_site = self.ips.get(ip)
        if ip_site is None:
            ip_site = self.ips[ip] = IPSite(ip, ServerPace(rtt_factor=self.server_rtt_factor))
        site.ip_site = ip_site
        self._make_ready(site, now)

    def dns_failed(self, site: NamedSite, error: str, now: float) -> None:
        """The name did not resolve: every waiting URL loses a retry."""
        self.dns_pending -= 1
        site.dns_event("fail")
        site.dns_failures += 1
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
        delay = self.dns_retry_base * (2 ** min(site.dns_failures - 1, 6))
        site.retry_at = now + delay
        self._add_timer(site.retry_at, site, "dns")

    # ------------------------------------------------------------------
    # Scheduling
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
        self._schedule_ip(ip, now)

    def _schedule_ip(self, ip: IPSite, at: float) -> None:
        if ip.busy >= self.conn_per_ip or not ip.ready:
            return
        t = max(at, ip.next_allowed)
        if ip.heap_time is not None and ip.heap_time <= t:
            return
        ip.heap_time = t
        self._seq += 1
        heapq.heappush(self._heap, (t, self._seq, ip))

    def _add_timer(self, when: float, site: NamedSite, kind: str) -> None:
        self._seq += 1
        heapq.heappush(self._timers, (when, self._seq, site, kind))

    def tick(self, now: float) -> None:
        """Run the DNS and robots.txt retry timers that are due."""
        self._last_now = now
        timers = self._timers
        while timers and timers[0][0] <= now:
            _, _, site, kind = heapq.heappop(timers)
            if kind == "dns" and site.dns is DnsState.FAILED:
                if site.fifo:
                    site.dns_event("ask")
                    self.dns_pending += 1
                    self.dns_wanted.append(site)
                else:
                    site.dns_event("expire")
            elif kind == "robots" and site.robots_state is RobotsState.ERROR:
                site.robots_event("expire")
                self._make_ready(site, now)

    def next_wakeup(self) -> float | None:
        """The earliest time at which :meth:`load`, :meth:`next_request` or :meth:`tick` has work.

        Work is due at once (the latest ``now`` given) when a site waits for
        :meth:`take_dns_requests` (:meth:`next_request` found its address
        stale), or when the gate is open and a store has records to read:
        the main or priority lane, or the wait store once a site freed room.
        Both happen outside any request's end (robots.txt refusing the URLs
        of a FIFO in :meth:`next_request`, a name that did not resolve):
        without this, nothing would ask DNS again or bring the parked URLs
        back, and the crawl would wait for ever with nothing running.
        """
        if self.dns_wanted or self._load_due():
            return self._last_now
        t = math.inf
        if self._heap and self.requests < self.max_requests:
            t = self._heap[0][0]
        if self._timers:
            t = min(t, self._timers[0][0])
        return None if t == math.inf else t

    def next_request(self, now: float) -> Request | None:
        """The next request allowed to start at ``now``, or None."""
        self._last_now = now
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
            if site.active or not site.fifo or site.ip_site is not ip:
                continue
            if site.dns_expiry <= now:
                # The address is stale: ask DNS again before the next request.
                site.dns_event("ask")
                self.dns_pending += 1
                self.dns_wanted.append(site)
                continue
            if site.next_allowed > now:
                ip.ready.append(site)
                site.queued = True
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
            if self.obey_robots and site.robots is not None and not site.robots.allowed(self.agent, rec.url):
                self._forget(rec, "forbiddenRobots")
                self._freed(site)
                continue
            site.in_flight += 1
            self.in_flight += 1
            return self._start(site, ip, rec, rec.url, PAGE, now)
        return None

    def _start(self, site: NamedSite, ip: IPSite, rec: UrlRecord | None, url: str, kind: str, now: float) -> Request:
        site.active += 1
        ip.busy += 1
        self.requests += 1
        jitter = 1.0 + self.jitter * self.rng.random()
        pace = ip.pace
        ip.next_allowed = max(now + pace.delay(self.wait_duration) * jitter, pace.retry_until)
        site.next_allowed = max(now + pace.delay(max(self.wait_duration, site.crawl_delay)) * jitter,
                                pace.retry_until)
        req = Request(kind, site, rec, url, ip.ip, site.port, now)
        self._running[id(req)] = req
        return req

    def _release(self, req: Request, now: float) -> None:
        self._running.pop(id(req), None)
        site = req.site
        site.active -= 1
        self.requests -= 1
        ip = site.ip_site
        if ip is not None and ip.ip == req.ip:
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
        if ip is not None:
            self._make_ready(site, now)
            self._schedule_ip(ip, now)

    def sent_late(self, req: Request, sent_at: float | None) -> None:
        """``req`` reached the wire at ``sent_at``, after its start (a connect).

        Politeness is about what the server sees: the next request to the
        site and to the IP may not start before ``sent_at`` plus their delay,
        so two requests never arrive closer than the delay because the first
        one waited for its connection.  (A maximum, not a sum: requests
        running side by side to one IP must not push each other's lags.)
        """
        if sent_at is None or sent_at <= req.started:
            return
        ip = self.ips.get(req.ip)
        site = req.site
        if ip is not None:
            pace = ip.pace
            ip_delay = pace.delay(self.wait_duration)
            site_delay = pace.delay(max(self.wait_duration, site.crawl_delay))
            if sent_at + ip_delay > ip.next_allowed:
                ip.next_allowed = sent_at + ip_delay
        else:
            site_delay = max(self.wait_duration, site.crawl_delay)
        if sent_at + site_delay > site.next_allowed:
            site.next_allowed = sent_at + site_delay

    def follow_up_delay(self, req: Request, now: float) -> float:
        """Seconds before ``req`` may send a follow-up request to its server.

        A robots.txt redirect is followed inside the same request slot: the
        next hop waits like any other request to that host and IP.
        """
        ip = self.ips.get(req.ip)
        wait = req.site.next_allowed - now
        if ip is not None:
            wait = max(wait, ip.next_allowed - now)
        return max(0.0, wait)

    def follow_up_started(self, req: Request, now: float) -> None:
        """A follow-up request of ``req`` starts now: push the next allowed times."""
        site = req.site
        ip = self.ips.get(req.ip)
        jitter = 1.0 + self.jitter * self.rng.random()
        if ip is not None:
            pace = ip.pace
            ip.next_allowed = max(ip.next_allowed, now + pace.delay(self.wait_duration) * jitter)
            site.next_allowed = max(site.next_allowed,
                                    now + pace.delay(max(self.wait_duration, site.crawl_delay)) * jitter)
        else:
            site.next_allowed = max(site.next_allowed, now + self.wait_duration * jitter)

    # ------------------------------------------------------------------
    # Per-server pace (issue 7): fed by the engine with every answer
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

    # ------------------------------------------------------------------
    # Outcomes
    # ------------------------------------------------------------------
    def fetched_ok(self, req: Request, now: float) -> None:
        """The page was fetched (whatever its status counted as: see forget)."""
        self.fetched += 1
        req.site.pages += 1
        self._release(req, now)

    def forget(self, req: Request, reason: str, now: float) -> None:
        """The page request ended for good without a fetched page."""
        req.site.errors += 1
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
        if delay > 0:
            site.next_allowed = max(site.next_allowed, now + delay)
        if free:
            rec.retries += 1  # undone below: this attempt does not count
        if rec.retries <= 0:
            self._forget(rec, reason)
            self._release(req, now)
            return False
        rec.retries -= 1
        self.retried[reason] += 1
        site.fifo.append(rec)
        self.in_sites += 1
        site.in_flight -= 1
        self.in_flight -= 1
        req.record = None  # already accounted for: release only the request
        self._release(req, now)
        if site.dns is DnsState.REFUSED:  # its name moved to a refused address meanwhile
            self._refuse_fifo(site)
        return True

    def robots_known(self, req: Request, rules, ttl: float, now: float) -> None:
        """robots.txt was read (or is known to be absent): apply ``rules``."""
        site = req.site
        site.robots = rules
        site.robots_event("known")
        site.robots_expiry = now + ttl
        site.robots_failures = 0
        delay = rules.crawl_delay(self.agent) if rules is not None else None
        site.crawl_delay = min(float(delay), MAX_CRAWL_DELAY) if delay else 0.0
        if site.crawl_delay > self.wait_duration:
            # The first page request waits out the crawl-delay after robots.txt.
            site.next_allowed = max(site.next_allowed, req.started + site.crawl_delay)
        self._release(req, now)

    def robots_unavailable(self, req: Request, now: float) -> None:
        """robots.txt answered 5xx or could not be reached: disallow, retry later."""
        site = req.site
        site.robots_failures += 1
        if site.robots_failures >= robots_mod.MAX_ERROR_ATTEMPTS:
            site.robots = robots_mod.RobotsTxt.disallow_all()
            site.robots_event("give_up")
            site.robots_expiry = now + robots_mod.CACHE_TTL
        else:
            site.robots_event("fail")
            site.retry_at = now + robots_mod.robots_retry_delay(site.robots_failures, self.robots_retry_base)
            self._add_timer(site.retry_at, site, "robots")
        self._release(req, now)

    def _forget(self, rec: UrlRecord, reason: str) -> None:
        self.forgotten[reason] += 1
        if self.on_forget is not None:
            self.on_forget(rec, reason)

    # ------------------------------------------------------------------
    # Accounting
    # ------------------------------------------------------------------
    @property
    def queued(self) -> int:
        return len(self.prio) + len(self.main) + len(self.wait) + self.in_sites

    def conservation(self) -> tuple[int, int]:
        """``(taken, fetched + forgotten + queued + in_flight)``: always equal."""
        return self.taken, self.fetched + sum(self.forgotten.values()) + self.queued + self.in_flight

    def urls_in_memory(self) -> int:
        """URL records held in RAM: store windows, site FIFOs, in flight."""
        return self.prio.in_memory + self.main.in_memory + self.wait.in_memory + self.in_sites + self.in_flight

    def idle(self) -> bool:
        """Nothing queued, nothing running, nothing waiting on DNS: the crawl is over."""
        return self.queued == 0 and self.requests == 0 and self.dns_pending == 0

    def flush(self, sync: bool = False) -> None:
        for store in (self.prio, self.main, self.wait):
            store.flush(sync)

    # ------------------------------------------------------------------
    # Checkpoints (crash safety; the engine writes them, see engine.state)
    # ------------------------------------------------------------------
    def checkpoint(self, now: float, wall: float, *, sync: bool = True) -> tuple[dict, list[UrlRecord]]:
        """What a restart needs: ``(state, carry)``; flushes the stores first.

        ``carry`` lists every record held in memory and not done: the
        stores' RAM windows, the site FIFOs and the pages in flight (a page
        counts as done only once its outcome is recorded).  ``state`` holds
        the stores' read positions (the first record not in a RAM window),
        the counters, and the sites' pending waits as wall-clock times.
        ``sync=False`` leaves the fsync of the stores to the caller (the
        engine's writer thread).
        """
        self.flush(sync=sync)
        carry: list[UrlRecord] = []
        for store in (self.prio, self.wait, self.main):
            carry.extend(store.ram_records())
        for req in self._running.values():
            if req.record is not None:
                carry.append(req.record)
        for site in self.sites.values():
            carry.extend(site.fifo)
        waits = {}
        for site in self.sites.values():
            if site.next_allowed > now + 1.0:
                waits[site.key] = wall + (site.next_allowed - now)
        state = {
            "stores": {"main": list(self.main.read_position()),
                       "priority": list(self.prio.read_position()),
                       "wait": list(self.wait.read_position()),
                       "wait_end": list(self.wait.write_position())},
            "fetched": self.fetched,
            "forgotten": dict(self.forgotten),
            "retried": dict(self.retried),
            "waits": waits,
        }
        return state, carry

    def release_segments(self, state: dict) -> int:
        """Delete the segments a durable checkpoint ``state`` no longer needs."""
        stores = {"main": self.main, "priority": self.prio, "wait": self.wait}
        return sum(store.release_through(state["stores"][name][0]) for name, store in stores.items())

    def restore(self, state: dict, carry: list[UrlRecord], now: float, wall: float) -> None:
        """Continue from a checkpoint: counters, carried records, site waits.

        The Frontier must have been built with ``positions=state["stores"]``.
        Carried records go to the priority lane (they were already being
        worked on).  ``taken`` is recounted so that conservation holds over
        what is really on disk, records queued after the checkpoint included.
        """
        for rec in carry:
            self.prio.push(rec)
        self.fetched = int(state["fetched"])
        self.forgotten = Counter({k: int(v) for k, v in state["forgotten"].items()})
        self.retried = Counter({k: int(v) for k, v in state["retried"].items()})
        for key, until in state.get("waits", {}).items():
            parsed = key.split("://", 1)
            if len(parsed) != 2:
                continue
            host, _, port = parsed[1].rpartition(":")
            site = self._site_for(f"{parsed[0]}://{host}:{port}/")
            if site is not None and until > wall:
                site.next_allowed = now + (until - wall)
        self.taken = self.fetched + sum(self.forgotten.values()) + self.queued + self.in_flight

    def restore_robots(self, robots_url: str, rules, expiry: float) -> None:
        """Reuse robots.txt rules fetched before a restart, until ``expiry`` (loop time)."""
        site = self._site_for(robots_url)
        if site is None or site.robots_state is RobotsState.OK:
            return
        site.robots = rules
        site.robots_event("restore")
        site.robots_expiry = expiry
        delay = rules.crawl_delay(self.agent) if rules is not None else None
        site.crawl_delay = min(float(delay), MAX_CRAWL_DELAY) if delay else 0.0

    @property
    def corrupt_records(self) -> int:
        return self.main.corrupt_records + self.prio.corrupt_records + self.wait.corrupt_records

    def close(self) -> None:
        for store in (self.prio, self.main, self.wait):
            store.close()
