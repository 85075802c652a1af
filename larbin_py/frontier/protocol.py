"""The frontier's interface, as Protocols: all its callers may use, and nothing more.

The engine and its parts (the page handler, robots.txt fetching, dynamic
pages' sub-requests, the stats, the crawl state and its journal) use a
:class:`Scheduler`; the distributed mode's coordinator a
:class:`DistScheduler`, which adds the hand-over of sites and the IP
leases.  :class:`~larbin_py.frontier.scheduler.Frontier` implements both
(a worker's :class:`~larbin_py.distributed.crawl_worker.DistFrontier` with a
:class:`~larbin_py.frontier.ip_leases.LeasePolicy` as its gate), as Scrapy's
scheduler implements the ``BaseScheduler`` its engine uses.

Some jobs are the frontier's parts, reached through it: ``admission`` (the
way in: ``offer``, ``offer_url``, ``push_record``, the refusals),
``dns`` (the names to resolve, the address policy), ``follow_ups``
(politeness after a request's start), ``lanes`` (positions and flushes for
checkpoints and the journal), ``pruning`` (its counts), ``ip_leases`` (the
coordinator's side of the leases).  No caller touches a member outside
these Protocols (tests/test_frontier_protocol.py checks the engine's
modules and the coordinator).

Every call is made from the event loop's thread and returns at once (no
I/O but the lanes' buffered writes); times are the loop's (``now``) or the
wall clock's (``wall``, for what crosses a restart or a hand-over).
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Callable, Iterable, Protocol, runtime_checkable

if TYPE_CHECKING:
    from .admission import Admission
    from .budget import SiteBudget
    from .dns_queue import DnsQueue
    from .follow_ups import FollowUps
    from .ip_leases import LeasePolicy
    from .lanes import Lanes
    from .pruning import Pruning
    from .scheduler import Request
    from .sites import IPSite, NamedSite
    from .topcounts import TopCounts

__all__ = ["Scheduler", "DistScheduler"]


@runtime_checkable
class Scheduler(Protocol):
    """What the engine and its parts use of the frontier."""

    # -- the parts ----------------------------------------------------------
    admission: "Admission"
    dns: "DnsQueue"
    follow_ups: "FollowUps"
    lanes: "Lanes"
    pruning: "Pruning"
    budget: "SiteBudget"

    # -- figures (read; ``max_requests`` is set by flowControl) --------------
    max_requests: int
    requests: int
    fetched: int
    in_flight: int
    #: URLs waiting in memory beside their site's full FIFO (counted in urls_in_memory()).
    parked: int
    forgotten: Counter
    retried: Counter
    sites_total: int
    ready_sites: int
    busiest: "TopCounts"
    failing: "TopCounts"
    timers: list
    #: URLs a --reload's journal found done and still in the lanes (URL -> outcome).
    replay: dict
    # -- what dynamic pages' sub-requests read of a site ----------------------
    sites: dict[str, "NamedSite"]
    ips: dict[str, "IPSite"]
    obey_robots: bool
    agent: str

    @property
    def is_get(self) -> bool:
        """The gate: the site FIFOs have room to load more."""
        ...

    @property
    def queued(self) -> int:
        """Records in the lanes and the site FIFOs."""
        ...

    @property
    def taken(self) -> int:
        """Records taken in and not handed over (conservation's left side)."""
        ...

    # -- the pump ---------------------------------------------------------------
    def tick(self, now: float) -> None:
        """Run the retry timers that are due; prune what has been idle long enough."""
        ...

    def load(self, now: float, max_reads: int = 2000) -> int:
        """Move records from the lanes into their sites while the gate is open; how many."""
        ...

    def more_to_load(self) -> bool:
        """:meth:`load` stopped at its batch size with room and records left."""
        ...

    def next_request(self, now: float) -> "Request | None":
        """The next request allowed to start at ``now``, or None."""
        ...

    def next_wakeup(self) -> float | None:
        """When the frontier next has work (loop time), or None."""
        ...

    def dns_resolved(self, site: "NamedSite", ips: tuple[str, ...], ttl: float, now: float) -> None:
        """``site``'s name resolved to ``ips`` for ``ttl`` seconds."""
        ...

    def dns_failed(self, site: "NamedSite", error: str, now: float) -> None:
        """``site``'s name did not resolve (``error``: the resolver's reason)."""
        ...

    # -- a request's end --------------------------------------------------------
    def server_answered(self, req: "Request", rtt: float | None, status: int | None, now: float,
                        retry_after: float | None = None) -> None:
        """Feed the server's answer to its IP's pace (before the outcome)."""
        ...

    def spent(self, req: "Request", nbytes: int) -> None:
        """``nbytes`` of a page's body were read (the site's byte budget)."""
        ...

    def fetched_ok(self, req: "Request", now: float) -> None:
        """The page was fetched."""
        ...

    def forget(self, req: "Request", reason: str, now: float, *, error: bool = True) -> None:
        """The page request ended for good without a page (``error`` False: a good answer not kept)."""
        ...

    def retry(self, req: "Request", reason: str, now: float, delay: float = 0.0, *, free: bool = False) -> bool:
        """The URL goes back to its site with one retry fewer (False: none left, forgotten)."""
        ...

    def robots_known(self, req: "Request", rules, ttl: float, now: float) -> None:
        """robots.txt was read (or is absent): its ``rules`` apply for ``ttl`` seconds."""
        ...

    def robots_unavailable(self, req: "Request", now: float, reason: str | None = None, *,
                           free: bool = False) -> None:
        """robots.txt answered 5xx or could not be reached (``reason``: a transport failure that
        must name the site's URLs if it persists, e.g. ``tlsError``; None: ``forbiddenRobots``;
        ``free``: nothing reached the server, asked again without counting a failure)."""
        ...

    def restore_robots(self, robots_url: str, rules, expiry: float) -> None:
        """Rules fetched before (a restart, a takeover) apply until ``expiry`` (loop time)."""
        ...

    # -- accounting, restarts -----------------------------------------------
    def urls_in_memory(self) -> int:
        """URL records held in RAM."""
        ...

    def idle(self) -> bool:
        """Nothing queued, running or resolving: the crawl is over (a worker: the whole crawl)."""
        ...

    def conservation(self) -> tuple[int, int]:
        """``(taken, fetched + forgotten + queued + in_flight)``: always equal."""
        ...

    def running_requests(self) -> Iterable["Request"]:
        """The requests running now."""
        ...

    def site_waits(self, pred: Callable[[str], bool] | None, now: float, wall: float, *,
                   ahead: float = 0.0) -> dict[str, float]:
        """``{site key: wall time}`` of the sites ``pred`` names (None: all) held back more than ``ahead`` s."""
        ...

    def restore_waits(self, waits: dict[str, float], now: float, wall: float) -> None:
        """Hold the sites of ``waits`` (site key -> wall time) back until then."""
        ...

    def recount(self, fetched: int, forgotten: dict[str, int], retried: dict[str, int]) -> None:
        """Take a checkpoint's outcome counters and count ``taken`` again."""
        ...

    def close(self) -> None:
        """Close the lanes."""
        ...


@runtime_checkable
class DistScheduler(Scheduler, Protocol):
    """What a worker's coordinator uses of its frontier, besides the :class:`Scheduler`."""

    ip_leases: "LeasePolicy"

    def drop(self, pred: Callable[[str], bool]) -> int:
        """Give up the sites whose host ``pred`` names (handed over); how many records left."""
        ...

