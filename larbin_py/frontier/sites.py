"""Per-site and per-IP state: Larbin's ``NamedSite`` and ``IPSite``.

A :class:`NamedSite` is one origin (scheme, host, port): its bounded FIFO of
URLs waiting in memory, its DNS state, its robots.txt rules, and the earliest
time the next request to that host name may start.  An :class:`IPSite` is one
server address: the named sites on it that are ready to send, the earliest
time the next request to that IP may start, and how many requests to it are
running.  Both are plain data; :mod:`larbin_py.frontier.scheduler` drives them.

A named site's DNS and robots.txt states change only through
:meth:`NamedSite.dns_event` and :meth:`NamedSite.robots_event`, which apply
:data:`DNS_TRANSITIONS` and :data:`ROBOTS_TRANSITIONS` (see
:mod:`larbin_py.transitions`): the two tables below are the whole of both
state machines.
"""

from __future__ import annotations

from collections import deque
from enum import Enum

from ..throttle import ServerPace
from ..transitions import step
from .store import UrlRecord

__all__ = ["DnsState", "RobotsState", "LeaseState", "DNS_TRANSITIONS", "ROBOTS_TRANSITIONS", "NamedSite", "IPSite",
           "MAX_CRAWL_DELAY"]

#: Largest robots.txt crawl-delay honoured, seconds (a larger one is clamped).
MAX_CRAWL_DELAY = 120.0


class DnsState(Enum):
    NEW = "new"  # never asked
    RESOLVING = "resolving"  # a query is running
    OK = "ok"  # ips known until dns_expiry
    FAILED = "failed"  # last query failed; ask again at retry_at
    REFUSED = "refused"  # every address is private (privateNetworks): URLs forgotten until dns_expiry


class RobotsState(Enum):
    NONE = "none"  # rules unknown: the next request to the site fetches robots.txt
    FETCHING = "fetching"
    OK = "ok"  # rules known until robots_expiry
    ERROR = "error"  # unreachable or 5xx: everything disallowed until retry_at


class LeaseState(Enum):
    """An IP's lease, in the distributed mode (one worker at a time may send to an IP).

    With leases off (one process) every IP is simply schedulable and this
    stays NONE.  With leases on, only a HELD IP is scheduled.
    """

    NONE = "none"  # not held, not wanted
    WANTED = "wanted"  # a site on it is ready: the coordinator asks Redis for it
    HELD = "held"  # granted and renewed: requests may start
    EXPIRING = "expiring"  # held, but its renewal is late (it may have lapsed): no new request


#: A site's DNS state machine: (state, event) -> new state.
DNS_TRANSITIONS: dict[tuple[DnsState, str], DnsState] = {
    (DnsState.NEW, "ask"): DnsState.RESOLVING,  # URLs arrived for a name never asked (or whose answer expired)
    (DnsState.OK, "ask"): DnsState.RESOLVING,  # the address went stale before the next request
    (DnsState.FAILED, "ask"): DnsState.RESOLVING,  # the retry timer, with URLs waiting
    (DnsState.RESOLVING, "answer"): DnsState.OK,  # addresses the privateNetworks policy allows
    (DnsState.RESOLVING, "refuse"): DnsState.REFUSED,  # every address is refused by privateNetworks
    (DnsState.RESOLVING, "fail"): DnsState.FAILED,  # no answer, an error, no address
    (DnsState.REFUSED, "expire"): DnsState.NEW,  # the refused answer expired: the name may have moved
    (DnsState.FAILED, "expire"): DnsState.NEW,  # the retry timer, with no URL waiting
}

#: A site's robots.txt state machine: (state, event) -> new state.
ROBOTS_TRANSITIONS: dict[tuple[RobotsState, str], RobotsState] = {
    (RobotsState.NONE, "fetch"): RobotsState.FETCHING,  # the site's next request is its robots.txt
    (RobotsState.FETCHING, "known"): RobotsState.OK,  # read, or known absent (4xx): rules until robots_expiry
    (RobotsState.FETCHING, "give_up"): RobotsState.OK,  # unavailable too many times: disallow all
    (RobotsState.FETCHING, "fail"): RobotsState.ERROR,  # 5xx or unreachable: disallow until retry_at
    (RobotsState.ERROR, "expire"): RobotsState.NONE,  # the retry timer: ask again
    (RobotsState.OK, "expire"): RobotsState.NONE,  # the rules aged out (robots_expiry): ask again
    (RobotsState.NONE, "restore"): RobotsState.OK,  # rules kept from before a restart (--reload)
}


class NamedSite:
    """One origin: ``key`` is ``scheme://host:port``."""

    __slots__ = (
        "key", "scheme", "host", "port", "fifo", "parked", "in_flight", "active", "overflow",
        "dns", "ips", "dns_expiry", "dns_failures", "ip_site",
        "robots_state", "robots", "robots_expiry", "robots_failures", "robots_reason", "crawl_delay",
        "retry_at", "next_allowed", "queued", "pages", "errors", "idle_at", "dropped", "wait", "agent",
    )

    def __init__(self, key: str, scheme: str, host: str, port: int) -> None:
        self.key = key
        self.scheme = scheme
        self.host = host
        self.port = port
        self.fifo: deque[UrlRecord] = deque()
        #: Records loaded while the FIFO was full, waiting in memory for a slot (the frontier's park).
        self.parked: deque[UrlRecord] = deque()
        self.in_flight = 0  # records taken from the FIFO and not finished
        self.active = 0  # requests (robots.txt included) running to this site
        self.overflow = 0  # records of this site parked in the wait store
        self.dns = DnsState.NEW
        self.ips: tuple[str, ...] = ()
        self.dns_expiry = 0.0
        self.dns_failures = 0
        self.ip_site: IPSite | None = None
        self.robots_state = RobotsState.NONE
        self.robots = None  # larbin_py.robots.RobotsTxt once known
        self.robots_expiry = 0.0
        self.robots_failures = 0
        #: The transport failure that kept robots.txt unread (tlsError...): the reason its URLs are
        #: forgotten under once the site is given up, instead of forbiddenRobots; None once read.
        self.robots_reason: str | None = None
        self.crawl_delay = 0.0
        self.retry_at = 0.0  # DNS or robots retry time, when failed
        self.next_allowed = 0.0  # earliest start of the next request here
        self.queued = False  # listed in its IPSite's ready queue
        self.pages = 0
        self.errors = 0
        #: When last seen idle, while listed for pruning; -1.0 when not listed.
        self.idle_at = -1.0
        #: Handed over to another worker (Frontier.drop): a retry of a request
        #: still running is handed over too; cleared when a URL of it is placed.
        self.dropped = False
        #: A ``site`` line's waitDuration for this host (None: the crawl's).
        self.wait: float | None = None
        #: The robots.txt product token of a ``site`` line's UserAgent (None: the crawl's).
        self.agent: str | None = None

    @property
    def idle(self) -> bool:
        """Nothing queued, parked, running or in the ready queue (pruning may follow)."""
        return not (self.fifo or self.parked or self.active or self.in_flight or self.overflow or self.queued)

    def dns_event(self, event: str) -> None:
        """Move the DNS state by ``event`` (:data:`DNS_TRANSITIONS`); IllegalTransition if not allowed."""
        self.dns = step(DNS_TRANSITIONS, self.dns, event, f"DNS of {self.key}")

    def robots_event(self, event: str) -> None:
        """Move the robots.txt state by ``event`` (:data:`ROBOTS_TRANSITIONS`); IllegalTransition if not allowed."""
        self.robots_state = step(ROBOTS_TRANSITIONS, self.robots_state, event, f"robots.txt of {self.key}")

    def set_robots(self, rules, event: str, expiry: float, agent: str) -> None:
        """Take robots.txt ``rules`` (None: none apply) by ``event`` (``known``, ``restore``)
        until ``expiry``, with their crawl-delay for ``agent`` (at most :data:`MAX_CRAWL_DELAY`)."""
        self.robots = rules
        self.robots_reason = None
        self.robots_event(event)
        self.robots_expiry = expiry
        delay = rules.crawl_delay(agent) if rules is not None else None
        self.crawl_delay = min(float(delay), MAX_CRAWL_DELAY) if delay else 0.0

    @property
    def robots_url(self) -> str:
        default = 443 if self.scheme == "https" else 80
        port = "" if self.port == default else f":{self.port}"
        return f"{self.scheme}://{self.host}{port}/robots.txt"

    def room(self, bound: int) -> bool:
        """True when one more URL fits under ``bound`` (in-flight ones count)."""
        return len(self.fifo) + self.in_flight < bound

    def __repr__(self) -> str:  # pragma: no cover - debugging aid
        return f"<NamedSite {self.key} fifo={len(self.fifo)} dns={self.dns.value} robots={self.robots_state.value}>"


class IPSite:
    """One server IP: the ready named sites on it and its politeness clock."""

    __slots__ = ("ip", "ready", "next_allowed", "busy", "heap_time", "pace", "sites", "listed",
                 "lease", "lease_since", "lease_retry", "last_start", "contended")

    def __init__(self, ip: str, pace: ServerPace | None = None) -> None:
        self.ip = ip
        self.ready: deque[NamedSite] = deque()
        self.next_allowed = 0.0
        self.busy = 0  # requests running to this IP
        self.heap_time: float | None = None  # time of its live heap entry
        #: Its smoothed round-trip time and 429/503 penalty (per-server pace).
        self.pace = pace if pace is not None else ServerPace()
        self.sites = 0  # named sites whose address this is (ip_site)
        self.listed = False  # listed for pruning
        # The distributed mode's IP lease (see LeaseState and larbin_py.frontier.ip_leases).
        self.lease = LeaseState.NONE
        self.lease_since = 0.0  # when granted
        self.lease_retry = 0.0  # WANTED: ask again from then (inf: an answer is awaited)
        self.last_start = -1.0  # the last request start to this IP (-1: none yet)
        self.contended = False  # another worker waits for it
