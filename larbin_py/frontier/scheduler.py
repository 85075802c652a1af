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
* **Offer** (:meth:`Frontier.offer`): a page's links go through the rules
  (:class:`~larbin_py.rules.UrlRules`), the cache of links met lately
  (:class:`~larbin_py.frontier.seen.SeenUrls`) and the seen test
  (a :class:`~larbin_py.frontier.interfaces.SeenStore`) and are queued, in
  one call: one atomic step when the stores are remote.  Every refusal is
  counted in :attr:`Frontier.rejected` by reason (``seen`` included).
* **Stores** are injected (a :data:`~larbin_py.frontier.interfaces.StoreFactory`
  building the three :class:`~larbin_py.frontier.interfaces.UrlQueue` lanes;
  by default :func:`disk_stores` in stateDir), and so is the seen store.
* **Pruning**: a named site with nothing queued, running or pending (no DNS
  query, no retry timer) is dropped once it has been idle ``prune_after``
  seconds *and* its next allowed request time has passed, so politeness
  holds across pruning with nothing remembered (a new site may start at
  once, and so could the old one).  What robots.txt still needs is kept
  compactly: the rules and their expiry, the crawl-delay and the site's
  counts, in a bounded LRU (``keep_sites`` entries); a site made again
  takes them back, so robots.txt is not fetched again before its TTL
  (unless the LRU dropped the entry: then it is fetched once more, a
  request to robots.txt that politeness still paces).  The DNS answer is
  not kept (the resolver's cache answers again).  An IP with no named site
  on it, nothing running, its next allowed time passed and no 429/503
  penalty left is dropped the same way (its smoothed round-trip time goes:
  a new one starts as any new server).
* **Distributed mode** (docs/distributed-worker.md, the parts swapped; all off by default,
  and then the frontier is exactly the single process's): ``main`` is an
  injected main lane (a worker's inbox, fed from Redis), ``sink`` takes the
  links :meth:`offer` admits instead of the seen test and the main lane (the
  owner of their host queues them), ``on_done(record, outcome)`` hears every
  record's terminal outcome (``fetched`` or the forget reason: the ack),
  :meth:`drop` gives up the sites of partitions handed to another worker,
  and ``ip_leases`` schedules only the IPs whose lease this worker holds
  (:class:`~larbin_py.frontier.sites.LeaseState`; :meth:`ip_leases_wanted`,
  :meth:`ip_lease_granted`, :meth:`ip_lease_denied`, :meth:`ip_leases_to_release`).
* **Stats** (:meth:`Frontier.stats`) cost O(1) per call: the ready sites
  are counted as they change, the busiest and failing sites kept in two
  top-10 tables updated per outcome (see :class:`TopCounts`).
"""

from __future__ import annotations

import heapq
import math
import os
import random
from collections import Counter, OrderedDict
from dataclasses import dataclass
from typing import Callable

from .. import robots as robots_mod
from ..rules import UrlRules
from ..throttle import ServerPace
from ..url import authority_of, fingerprint, fingerprints
from .addresses import POLICIES as PRIVATE_POLICIES, is_private_address
from .interfaces import SeenStore, StoreFactory, UrlQueue
from .seen import SeenSet, SeenUrls
from .sites import DnsState, IPSite, LeaseState, NamedSite, RobotsState
from .store import UrlRecord, UrlStore

__all__ = ["Frontier", "Request", "TopCounts", "disk_stores", "site_key", "PAGE", "ROBOTS"]

PAGE = "page"
ROBOTS = "robots"

#: Largest robots.txt crawl-delay honoured, seconds (a larger one is clamped).
MAX_CRAWL_DELAY = 120.0

#: A rotation of the wait store starts once one in this many sites with
#: parked URLs wants a refill (or a wanting site has nothing left to send):
#: a rotation then pops about this many records per record placed.
REFILL_SHARE = 4

#: Seconds a site (or IP) stays idle before it is pruned (see "Pruning").
PRUNE_AFTER = 120.0
#: Pruned sites whose robots.txt rules and counts are kept (an LRU).
KEEP_SITES = 100_000
#: Most idle entries looked at per :meth:`Frontier.tick` (a bound on one pump's work).
PRUNE_BATCH = 1000
#: An IP lease held with nothing ready on it is released after this many
#: waitDurations (and at least IP_IDLE_RELEASE_MIN seconds) since its last start.
IP_IDLE_RELEASE = 2.0
IP_IDLE_RELEASE_MIN = 0.2
#: A released IP that still has ready sites asks for its lease again after
#: this many seconds: a worker waiting for it gets its turn first.
IP_REASK_AFTER = 0.5


def disk_stores(state_dir: str, *, positions: dict | None = None,
                segment_bytes: int = 64 * 1024 * 1024) -> StoreFactory:
    """The default lanes: :class:`UrlStore` segments in ``state_dir/<name>``.

    ``positions`` (a checkpoint's ``stores``) reopens the segments left by
    an earlier run from those read positions (``--reload``).
    """

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

    return store


class TopCounts:
    """The ``n`` largest counts by key, kept as they grow (the stats' busiest/failing hosts).

    An update of a key already listed, or of one whose count does not pass
    the smallest listed, costs a dict lookup and a comparison; only a key
    that enters the table costs a scan of its ``n`` entries.  A key's count
    is the largest it was given (a pruned site made again restarts lower).
    """

    __slots__ = ("n", "counts", "_floor")

    def __init__(self, n: int = 10) -> None:
        self.n = n
        self.counts: dict[str, int] = {}
        self._floor = 0  # at most the smallest listed count once full

    def update(self, key: str, count: int) -> None:
        counts = self.counts
        old = counts.get(key)
        if old is not None:
            if count > old:
                counts[key] = count
            return
        if len(counts) < self.n:
            counts[key] = count
            return
        if count <= self._floor:
            return
        low = min(counts, key=counts.__getitem__)
        if count <= counts[low]:
            self._floor = counts[low]
            return
        del counts[low]
        counts[key] = count
        self._floor = min(counts.values())

    def top(self) -> list[tuple[str, int]]:
        """``(key, count)`` pairs, largest first."""
        return sorted(self.counts.items(), key=lambda kv: kv[1], reverse=True)


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


def _key_host(key: str) -> str:
    """The host of a site key ``scheme://host:port``."""
    return key[key.index("://") + 3:key.rindex(":")]


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

    ``stores`` builds the three lanes (default: :func:`disk_stores` in
    ``state_dir``, from ``positions`` on a reload); ``seen`` is the seen
    store (default: an empty in-memory :class:`SeenSet`); ``rules`` the
    rules :meth:`offer` applies; ``retries`` the retries a queued URL gets.
    ``positions`` not None also says the stores were reopened after a
    restart (their parked records are replayed).

    The distributed mode's seams (see the module docstring): ``main``
    replaces the factory's main lane; ``sink`` (with ``add_many(links,
    depths, hops)``) receives what :meth:`offer` admits; ``on_done(record,
    outcome)`` hears each record's end; ``ip_leases`` turns the IP leases
    on, ``ip_lease_hold`` being how long a lease another worker wants is
    kept at least.
    """

    def __init__(
        self,
        state_dir: str | None = None,
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
        stores: StoreFactory | None = None,
        seen: SeenStore | None = None,
        rules: UrlRules | None = None,
        retries: int = 0,
        prune_after: float | None = PRUNE_AFTER,
        keep_sites: int = KEEP_SITES,
        main: UrlQueue | None = None,
        sink=None,
        on_done: Callable[[UrlRecord, str], None] | None = None,
        ip_leases: bool = False,
        ip_lease_hold: float = 10.0,
        on_ip_wanted: Callable[[], None] | None = None,
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
        if stores is None:
            if state_dir is None:
                raise ValueError("Frontier needs a state_dir or a stores factory")
            stores = disk_stores(state_dir, positions=positions, segment_bytes=segment_bytes)
        self.main: UrlQueue = main if main is not None else stores("main", max(1, ram_urls - 2 * lane))
        self.prio: UrlQueue = stores("priority", lane)
        self.wait: UrlQueue = stores("wait", lane)
        #: The seen test, the rules and the cache of links met lately (see offer).
        self.seen: SeenStore = seen if seen is not None else SeenSet()
        self.rules = rules if rules is not None else UrlRules()
        self.seen_urls = SeenUrls()
        self.retries = retries
        self.sink = sink
        self.on_done = on_done
        self.ip_leases = ip_leases
        self.ip_lease_hold = ip_lease_hold
        self.on_ip_wanted = on_ip_wanted  # called when an IP starts wanting its lease
        self._ip_wanted: dict[str, IPSite] = {}  # lease WANTED
        self._ip_held: dict[str, IPSite] = {}  # lease HELD or EXPIRING
        #: With leases on: no request starts after this time (loop time), until
        #: the coordinator's next renewal moves it (the leases may have lapsed).
        self.ip_lease_deadline = math.inf
        #: Records given up by drop() (handed over to another worker).
        self.handed_over = 0
        #: Links refused by :meth:`offer` / :meth:`offer_url`, by reason ("seen" included).
        self.rejected: Counter[str] = Counter()
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
        # Pruning (see the module docstring): a heap of (due, seq, site or IP).
        self.prune_after = prune_after
        self.keep_sites = keep_sites
        self._idle: list[tuple[float, int, NamedSite | IPSite]] = []
        #: Pruned sites' key -> (rules, robots_expiry, crawl_delay, pages, errors), an LRU.
        self._kept: OrderedDict[str, tuple] = OrderedDict()
        self.sites_total = 0  # sites made (a pruned one made again counts once while kept)
        self.sites_pruned = 0
        self.ips_pruned = 0
        # Stats kept as they change (see stats()).
        self.ready_sites = 0  # sites listed in their IP's ready queue
        self.busiest = TopCounts()
        self.failing = TopCounts()
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

    def push_record(self, rec: UrlRecord, *, priority: bool = False) -> None:
        """Queue a record as it is (the distributed mode: its ``tag`` names its stream entry)."""
        (self.prio if priority else self.main).push(rec)
        self.taken += 1

    def offer(self, page_url: str, depth: int, links, *, redirect: bool = False, hops: int = 0) -> int:
        """Queue those of a page's ``links`` that pass the rules and the seen test.

        ``depth`` is the page's; ``links`` are normalized absolute URLs.
        A link held in :attr:`seen_urls` (met lately, so in the seen store)
        is counted "seen" at once, before the rules.  ``redirect``: the one
        link is a redirect's target (it keeps the page's depth); ``hops``:
        the redirects that led to it, 0 for a page's links.  Returns how
        many were queued; every refusal is counted in :attr:`rejected`.
        """
        rejected = self.rejected
        fresh = self.seen_urls.unknown(links)
        if len(fresh) < len(links):
            rejected["seen"] += len(links) - len(fresh)
        ok_links, depths, refused = self.rules.admit_many(fresh, page_url, depth, redirect=redirect)
        for reason, count in refused.items():
            rejected[reason] += count
        if not ok_links:
            return 0
        if self.sink is not None:
            # The owner of each link's host tests and queues it (exactly, in
            # Redis); remembered here once buffered (see SeenUrls).
            self.seen_urls.remember(ok_links)
            self.sink.add_many(ok_links, depths, hops)
            return len(ok_links)
        new = self.seen.add_many(fingerprints(ok_links))
        self.seen_urls.remember(ok_links)
        push = self.main.push
        retries = self.retries
        queued = 0
        for link, d, is_new in zip(ok_links, depths, new):
            if is_new:
                push(UrlRecord(link, d, retries, hops))
                queued += 1
        self.taken += queued
        if queued < len(ok_links):
            rejected["seen"] += len(ok_links) - queued
        return queued

    def offer_url(self, url: str, *, priority: bool = True) -> tuple[str, str | None]:
        """Queue a start URL or one given at run time: ``(result, reason)``.

        ``url`` is normalized; it goes through the rules as a seed (depth
        ``depthInSite``) and the seen test.  ``result`` is ``accepted``,
        ``duplicate`` or ``rejected`` (with the rule's reason); a duplicate
        is not counted in :attr:`rejected` (the caller answers it).
        """
        verdict = self.rules.admit(url, None, 0)
        if isinstance(verdict, str):
            return "rejected", verdict
        if self.sink is not None:  # accepted for its owner (a duplicate is dropped there)
            self.sink.add_many((url,), (verdict,), 0)
            return "accepted", None
        if not self.seen.add_many((fingerprint(url),))[0]:
            return "duplicate", None
        self.push(url, verdict, self.retries, priority=priority)
        return "accepted", None

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

    def more_to_load(self) -> bool:
        """True when :meth:`load` stopped at its batch size with room left:
        the gate is open and the priority or main lane still holds records
        (the engine pumps again at once instead of waiting for a timer)."""
        return self.in_sites < self.ram_urls and bool(len(self.prio) or len(self.main))

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

    def _site_for(self, url: str, now: float | None = None) -> NamedSite | None:
        parsed = site_key(url)
        if parsed is None:
            return None
        key, scheme, host, port = parsed
        site = self.sites.get(key)
        if site is None:
            site = self.sites[key] = self._new_site(key, scheme, host, port,
                                                    self._last_now if now is None else now)
        return site

    def _new_site(self, key: str, scheme: str, host: str, port: int, now: float) -> NamedSite:
        """A site made, or made again after pruning with what was kept of it."""
        site = NamedSite(key, scheme, host, port)
        kept = self._kept.pop(key, None)
        if kept is None:
            self.sites_total += 1
        else:
            rules, expiry, delay, site.pages, site.errors = kept
            if expiry > now:  # robots.txt is not fetched again before its TTL
                site.robots = rules
                site.robots_event("restore")
                site.robots_expiry = expiry
                site.crawl_delay = delay
        self._note_idle(site, now)  # listed at once: pruned even if it never runs
        return site

    def _place(self, rec: UrlRecord, now: float, from_wait: bool) -> bool:
        site = self._site_for(rec.url, now)
        if site is None:
            self._forget(rec, "badUrl")
            return True
        site.dropped = False
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
        self._note_idle(site, self._last_now)

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
        old = site.ip_site
        if not ips:
            site.dns_event("refuse")
            site.ips = ()
            site.ip_site = None
            if old is not None:
                self._left_ip(old, now)
            self._refuse_fifo(site)
            return
        site.dns_event("answer")
        site.ips = ips
        ip = ips[0]
        ip_site = self.ips.get(ip)
        if ip_site is None:
            ip_site = self.ips[ip] = IPSite(ip, ServerPace(rtt_factor=self.server_rtt_factor))
        if ip_site is not old:
            ip_site.sites += 1
            site.ip_site = ip_site
            if old is not None:
                self._left_ip(old, now)
        self._make_ready(site, now)
        self._note_idle(site, now)

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
        self._note_idle(site, now)

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
        self.ready_sites += 1
        self._schedule_ip(ip, now)

    def _schedule_ip(self, ip: IPSite, at: float) -> None:
        if ip.busy >= self.conn_per_ip or not ip.ready:
            return
        if self.ip_leases and ip.lease is not LeaseState.HELD:
            if ip.lease is LeaseState.NONE:
                ip.lease = LeaseState.WANTED
                ip.lease_retry = 0.0  # ask at once
                self._ip_wanted[ip.ip] = ip
                if self.on_ip_wanted is not None:
                    self.on_ip_wanted()
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
        """Run the DNS and robots.txt retry timers that are due, and prune idle sites and IPs."""
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
                    self._note_idle(site, now)
            elif kind == "robots" and site.robots_state is RobotsState.ERROR:
                site.robots_event("expire")
                self._make_ready(site, now)
                self._note_idle(site, now)
        idle = self._idle
        if idle and idle[0][0] <= now:
            self._prune(now)

    # ------------------------------------------------------------------
    # Pruning (see the module docstring)
    # ------------------------------------------------------------------
    def _note_idle(self, site: NamedSite, now: float) -> None:
        """``site`` may be idle from ``now``: list it for pruning, or move its idle time on."""
        if self.prune_after is None or not site.idle:
            return
        if site.idle_at < 0:
            self._seq += 1
            heapq.heappush(self._idle, (now + self.prune_after, self._seq, site))
        site.idle_at = now

    def _left_ip(self, ip: IPSite, now: float) -> None:
        """A named site no longer uses ``ip``: list it for pruning once none does."""
        ip.sites -= 1
        if ip.sites <= 0 and not ip.listed and self.prune_after is not None:
            ip.listed = True
            self._seq += 1
            heapq.heappush(self._idle, (now + self.prune_after, self._seq, ip))

    @staticmethod
    def _settled(site: NamedSite) -> bool:
        """No DNS query or retry timer pending, robots.txt not being fetched or retried."""
        return (site.dns is not DnsState.RESOLVING and site.dns is not DnsState.FAILED
                and (site.robots_state is RobotsState.OK or site.robots_state is RobotsState.NONE))

    def _prune(self, now: float) -> None:
        """Drop the listed sites and IPs idle ``prune_after`` seconds whose waits are over.

        A listed entry found busy is unlisted (it is listed again when it
        next goes idle); one idle but not yet long enough, or whose next
        allowed time is still ahead, is looked at again then.
        """
        idle = self._idle
        after = self.prune_after
        for _ in range(PRUNE_BATCH):
            if not idle or idle[0][0] > now:
                return
            obj = heapq.heappop(idle)[2]
            if type(obj) is IPSite:
                due = self._prune_ip(obj, now)
                if due is None:
                    continue
            else:
                site = obj
                if self.sites.get(site.key) is not site or not site.idle:
                    site.idle_at = -1.0
                    continue
                due = site.idle_at + after
                if due <= now:
                    if site.next_allowed > now:
                        due = site.next_allowed  # politeness still needs it
                    elif not self._settled(site):
                        due = now + after
                    else:
                        self._drop_site(site, now)
                        continue
            self._seq += 1
            heapq.heappush(idle, (due, self._seq, obj))

    def _drop_site(self, site: NamedSite, now: float) -> None:
        del self.sites[site.key]
        site.idle_at = -1.0
        self.sites_pruned += 1
        keep_rules = site.robots_state is RobotsState.OK and site.robots_expiry > now
        kept = self._kept
        kept[site.key] = (site.robots if keep_rules else None, site.robots_expiry if keep_rules else 0.0,
                          site.crawl_delay if keep_rules else 0.0, site.pages, site.errors)
        if len(kept) > self.keep_sites:
            kept.popitem(last=False)
        ip = site.ip_site
        if ip is not None:
            site.ip_site = None
            self._left_ip(ip, now)

    def _prune_ip(self, ip: IPSite, now: float) -> float | None:
        """Drop ``ip`` if it may go; else the time to look again (None: unlisted)."""
        ip.listed = False
        if self.ips.get(ip.ip) is not ip or ip.sites > 0:
            return None  # listed again when its last site leaves
        pace = ip.pace
        if ip.busy or ip.ready or ip.heap_time is not None or pace.penalty > 1.0 or ip.lease is not LeaseState.NONE:
            due = now + self.prune_after  # a request still runs, or the penalty decays first
        elif ip.next_allowed > now or pace.retry_until > now:
            due = max(ip.next_allowed, pace.retry_until)
        else:
            del self.ips[ip.ip]
            self.ips_pruned += 1
            return None
        ip.listed = True
        return due

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
        if self._heap and self.requests < self.max_requests and self._last_now <= self.ip_lease_deadline:
            t = self._heap[0][0]  # (past the lease deadline, the renewal wakes the engine)
        if self._timers:
            t = min(t, self._timers[0][0])
        return None if t == math.inf else t

    def next_request(self, now: float) -> Request | None:
        """The next request allowed to start at ``now``, or None."""
        self._last_now = now
        if now > self.ip_lease_deadline:
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
            if self.ip_leases and ip.lease is not LeaseState.HELD:
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
                # The address is stale: ask DNS again before the next request.
                site.dns_event("ask")
                self.dns_pending += 1
                self.dns_wanted.append(site)
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
            if self.obey_robots and site.robots is not None and not site.robots.allowed(self.agent, rec.url):
                self._forget(rec, "forbiddenRobots")
                self._freed(site)
                continue
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
        if not site.fifo and not site.active and not site.in_flight:
            self._note_idle(site, now)

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
            if sent_at > ip.last_start:
                ip.last_start = sent_at  # what a lease's next holder counts from (the server's view)
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

    def follow_up_allowed(self, req: Request, now: float) -> bool:
        """A follow-up of ``req`` may start at ``now``: in the distributed mode,
        its IP's lease is held and fresh (:meth:`next_request`'s own rule).

        A request already running made the follow-up (a robots.txt redirect,
        a dynamic page's sub-request); past the lease deadline, or with the
        lease suspended or given up, it must not start: another worker may
        own the IP by then.
        """
        if now > self.ip_lease_deadline:
            return False
        if self.ip_leases:
            ip = self.ips.get(req.ip)
            return ip is not None and ip.lease is LeaseState.HELD
        return True

    def follow_up_started(self, req: Request, now: float) -> None:
        """A follow-up request of ``req`` starts now: push the next allowed times."""
        site = req.site
        ip = self.ips.get(req.ip)
        jitter = 1.0 + self.jitter * self.rng.random()
        if ip is not None:
            pace = ip.pace
            ip.last_start = now
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
        site = req.site
        site.pages += 1
        self.busiest.update(site.key, site.pages)
        if self.on_done is not None and req.record is not None:
            self.on_done(req.record, "fetched")
        self._release(req, now)

    def forget(self, req: Request, reason: str, now: float) -> None:
        """The page request ended for good without a fetched page."""
        site = req.site
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
        if site.dropped:
            # The site was handed over: its new owner claims the URL again.
            self.retried[reason] += 1
            self.taken -= 1
            self.handed_over += 1
            req.record = None
            site.in_flight -= 1
            self.in_flight -= 1
            self._release(req, now)
            return True
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
        if self.on_done is not None:
            self.on_done(rec, reason)

    # ------------------------------------------------------------------
    # The distributed mode: handing sites over, IP leases
    # ------------------------------------------------------------------
    def drop(self, pred: Callable[[str], bool]) -> int:
        """Give up every site whose host ``pred`` names (their partition went to another worker).

        Their URLs waiting here (site FIFOs, the priority and wait lanes,
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
        for site in self.sites.values():
            if not pred(site.host):
                continue
            site.dropped = True
            if site.fifo:
                n += len(site.fifo)
                self.in_sites -= len(site.fifo)
                site.fifo.clear()
            if site.overflow > 0:
                site.overflow = 0
                self._parked_sites -= 1
                self._wanting.discard(site)
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

        for lane in (self.prio, self.wait, self.main):
            own = getattr(lane, "drop", None)
            if own is not None:
                n += own(gone)
                continue
            kept = []
            for _ in range(len(lane)):
                rec = lane.pop()
                if rec is None:
                    continue
                if gone(rec):
                    n += 1
                else:
                    kept.append(rec)
            for rec in kept:
                lane.push(rec)
        self._wait_misses = 0
        if self._rotating and not self._wanting:
            self._rotating = False
        self.taken -= n
        self.handed_over += n
        return n

    def running_requests(self):
        """The requests running now (a drain waits for those of its partitions)."""
        return self._running.values()

    def site_waits(self, pred: Callable[[str], bool], now: float, wall: float) -> dict[str, float]:
        """``{site key: wall time}`` of the next allowed request of the sites whose host ``pred`` names
        (still ahead of ``now``): what a handover passes on (``sitewait``)."""
        return {site.key: wall + (site.next_allowed - now) for site in self.sites.values()
                if site.next_allowed > now and pred(site.host)}

    def restore_waits(self, waits: dict[str, float], now: float, wall: float) -> None:
        """Hold the sites of ``waits`` (site key -> wall time) back until then (a takeover)."""
        for key, until in waits.items():
            parsed = key.split("://", 1)
            if len(parsed) != 2 or until <= wall:
                continue
            site = self._site_for(f"{key}/", now)
            if site is not None:
                site.next_allowed = max(site.next_allowed, now + (until - wall))

    def ip_lease_next_ask(self) -> float | None:
        """When :meth:`ip_leases_wanted` next has an IP to ask for (None: none wanted)."""
        times = [ip.lease_retry for ip in self._ip_wanted.values()
                 if ip.lease is LeaseState.WANTED and ip.lease_retry != math.inf]
        return min(times) if times else None

    def ip_leases_wanted(self, now: float) -> list[str]:
        """The IPs whose lease the coordinator should ask for now (each once until answered).

        An IP no longer wanted (its ready sites left) goes back to NONE.
        """
        out = []
        for key, ip in list(self._ip_wanted.items()):
            if ip.lease is not LeaseState.WANTED or not ip.ready:
                if ip.lease is LeaseState.WANTED:
                    ip.lease = LeaseState.NONE
                del self._ip_wanted[key]
                continue
            if ip.lease_retry <= now:
                ip.lease_retry = math.inf  # asked: wait for the answer
                out.append(key)
        return out

    def ip_lease_granted(self, addr: str, not_before: float, pace: dict | None, now: float) -> None:
        """The lease of ``addr`` was granted: requests to it may start from ``not_before``.

        ``not_before`` (loop time) is the previous holder's last start plus
        the delay (or a full delay after a lapsed lease); ``pace`` is the
        previous holder's :class:`~larbin_py.throttle.ServerPace` state, the
        server's frequency control moving with the IP.  A renewal of an
        EXPIRING lease is a grant too.
        """
        ip = self.ips.get(addr)
        if ip is None:
            return  # pruned meanwhile: the coordinator releases what it does not hold
        self._ip_wanted.pop(addr, None)
        if ip.lease is not LeaseState.HELD and ip.lease is not LeaseState.EXPIRING:
            ip.lease_since = now
            ip.contended = False
        ip.lease = LeaseState.HELD
        self._ip_held[addr] = ip
        if not_before > ip.next_allowed:
            ip.next_allowed = not_before
        if pace:
            p = ip.pace
            p.penalty = max(p.penalty, float(pace.get("penalty", 1.0)))
            p.retry_until = max(p.retry_until, float(pace.get("retry_until", 0.0)))
            if p.srtt is None and pace.get("srtt") is not None:
                p.srtt = float(pace["srtt"])
            if p.floor is None and pace.get("floor") is not None:
                p.floor = float(pace["floor"])
        self._schedule_ip(ip, now)

    def ip_lease_denied(self, addr: str, retry_at: float) -> None:
        """Another worker holds ``addr``: ask again at ``retry_at``."""
        ip = self.ips.get(addr)
        if ip is None or ip.lease is not LeaseState.WANTED:
            return
        ip.lease_retry = retry_at
        self._ip_wanted[addr] = ip

    def ip_lease_lost(self, addr: str, now: float) -> None:
        """The lease of ``addr`` is no longer this worker's (a renewal found it gone)."""
        ip = self._ip_held.pop(addr, None)
        if ip is None:
            return
        ip.lease = LeaseState.NONE
        ip.lease_retry = now
        self._schedule_ip(ip, now)  # wanted again if sites are ready

    def ip_lease_contended(self, addr: str) -> None:
        """Another worker waits for ``addr``: release it once held ``ip_lease_hold`` and idle."""
        ip = self._ip_held.get(addr)
        if ip is not None:
            ip.contended = True

    def ip_leases_suspend(self) -> None:
        """The leases may have lapsed (the heartbeat is late): start no request on any."""
        for ip in self._ip_held.values():
            ip.lease = LeaseState.EXPIRING

    def ip_leases_resume(self, now: float) -> None:
        """The leases were renewed: EXPIRING ones are HELD again."""
        for ip in self._ip_held.values():
            if ip.lease is LeaseState.EXPIRING:
                ip.lease = LeaseState.HELD
                self._schedule_ip(ip, now)

    def ip_leases_held(self) -> list[str]:
        """The IPs whose lease this worker holds (renewed by the heartbeat)."""
        return list(self._ip_held)

    def ip_leases_to_release(self, now: float, *, every: bool = False) -> list[tuple[str, float, dict]]:
        """Leases to give back now: ``(ip, last_start, pace)`` each, and NONE here.

        An IP is released when no request to it runs and either nothing has
        been ready on it for ``IP_IDLE_RELEASE`` waitDurations since its last
        start, or another worker waits for it and it was held at least
        ``ip_lease_hold``; ``every``: each one with no request running (a
        worker that stops).  ``last_start`` (loop time, -1 when none) and the
        pace go to ``iplast`` for the next holder.
        """
        out = []
        idle_after = max(IP_IDLE_RELEASE * self.wait_duration, IP_IDLE_RELEASE_MIN)
        for key, ip in list(self._ip_held.items()):
            if ip.busy:
                continue
            since = max(ip.last_start, ip.lease_since)
            if not every:
                if ip.ready and not (ip.contended and now - ip.lease_since >= self.ip_lease_hold):
                    continue
                if not ip.ready and now - since < idle_after:
                    continue
            del self._ip_held[key]
            ip.lease = LeaseState.NONE
            ip.contended = False
            p = ip.pace
            out.append((key, ip.last_start, {"penalty": p.penalty, "retry_until": p.retry_until,
                                             "srtt": p.srtt, "floor": p.floor}))
            if ip.ready and not every:  # still wanted: the waiting worker gets its turn first
                ip.lease = LeaseState.WANTED
                ip.lease_retry = now + IP_REASK_AFTER
                self._ip_wanted[key] = ip
        return out

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
        """Flush the three lanes (not the seen store: its owner flushes it after them)."""
        for store in (self.prio, self.main, self.wait):
            store.flush(sync)

    def stats(self) -> dict:
        """What the engine's stats read of the frontier; O(1) per call.

        ``sites``: ``known`` are held now, ``total`` were ever made (a pruned
        site made again counts once while its compact record is kept),
        ``ready`` wait in their IP's ready queue, ``waiting`` on DNS or a
        retry timer; ``hosts``: the ten sites with the most pages fetched
        and with the most errors (see :class:`TopCounts`).
        """
        main, prio, wait = self.main, self.prio, self.wait
        return {
            "taken": self.taken,
            "fetched": self.fetched,
            "queued": self.queued,
            "queued_disk": main.on_disk_only + prio.on_disk_only + wait.on_disk_only,
            "in_memory": self.urls_in_memory(),
            "in_flight": self.in_flight,
            "forgotten": dict(self.forgotten),
            "retried": dict(self.retried),
            "retry_wait": sum(self.retried.values()),
            "rejected": dict(self.rejected),
            "seen": len(self.seen),
            "is_get": self.is_get,
            "requests": self.requests,
            "max_requests": self.max_requests,
            "sites": {
                "known": len(self.sites),
                "total": self.sites_total,
                "ready": self.ready_sites,
                "waiting": self.dns_pending + len(self._timers),
                "dns_pending": self.dns_pending,
                "timers": len(self._timers),
                "pruned": self.sites_pruned,
                "kept": len(self._kept),
                "ips": len(self.ips),
                "ips_pruned": self.ips_pruned,
            },
            "hosts": {
                "busiest": [{"host": _key_host(k), "pages": n} for k, n in self.busiest.top() if n],
                "failing": [{"host": _key_host(k), "errors": n} for k, n in self.failing.top() if n],
            },
        }

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
            site = self._site_for(f"{parsed[0]}://{host}:{port}/", now)
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
