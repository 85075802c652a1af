"""Pruning: the frontier forgets the sites and IPs it no longer needs.

A long crawl meets millions of hosts; a site held for ever costs its
:class:`~larbin_py.frontier.sites.NamedSite` (about a kilobyte with its
FIFO) long after its last URL.  The frontier tells :class:`Pruning` when a
site may have gone idle (:meth:`Pruning.note_idle`) and when an IP lost a
named site (:meth:`Pruning.left_ip`); :meth:`Pruning.prune`, called from
the frontier's ``tick``, drops what has been idle long enough.

* A **named site** with nothing queued, running or pending (no DNS query,
  no retry timer, robots.txt not being fetched) is dropped once it has been
  idle ``prune_after`` seconds *and* its next allowed request time has
  passed, so politeness holds across pruning with nothing remembered (a
  new site may start at once, and so could the old one).  What robots.txt
  still needs is kept compactly: the rules and their expiry, the
  crawl-delay and the site's counts, in a bounded LRU (``keep_sites``
  entries); a site made again takes them back (:meth:`Pruning.revive`), so
  robots.txt is not fetched again before its TTL (unless the LRU dropped
  the entry: then it is fetched once more, a request politeness still
  paces).  The DNS answer is not kept (the resolver's cache answers again).
* An **IP** with no named site on it, nothing running or ready, no heap
  entry, no lease, its next allowed time passed and no 429/503 penalty left
  is dropped the same way (its smoothed round-trip time goes: a new one
  starts as any new server).

Mechanism: one heap of ``(due, seq, site or IP)``; an entry found busy is
unlisted (listed again when it next goes idle), one idle but not long
enough, or still needed by politeness, is pushed back with its new due
time.  One :meth:`Pruning.prune` looks at :data:`PRUNE_BATCH` entries at
most, bounding one pump's work.  ``prune_after`` None turns pruning off
(every call is then a no-op, but for the IPs' site counts).  Sans-I/O:
time comes in as ``now``; the frontier's tables are passed in per call.
"""

from __future__ import annotations

import heapq
from collections import OrderedDict

from .sites import DnsState, IPSite, LeaseState, NamedSite, RobotsState

__all__ = ["Pruning", "settled", "PRUNE_AFTER", "KEEP_SITES", "PRUNE_BATCH"]

#: Seconds a site (or IP) stays idle before it is pruned.
PRUNE_AFTER = 120.0
#: Pruned sites whose robots.txt rules and counts are kept (an LRU).
KEEP_SITES = 100_000
#: Most idle entries looked at per :meth:`Pruning.prune` (a bound on one pump's work).
PRUNE_BATCH = 1000


def settled(site: NamedSite) -> bool:
    """No DNS query or retry timer pending, robots.txt not being fetched or retried."""
    return (site.dns is not DnsState.RESOLVING and site.dns is not DnsState.FAILED
            and (site.robots_state is RobotsState.OK or site.robots_state is RobotsState.NONE))


class Pruning:
    """When idle sites and IPs go, and what is kept of a pruned site (see the module docstring)."""

    def __init__(self, prune_after: float | None = PRUNE_AFTER, keep_sites: int = KEEP_SITES) -> None:
        self.prune_after = prune_after
        self.keep_sites = keep_sites
        self._idle: list[tuple[float, int, NamedSite | IPSite]] = []
        self._seq = 0
        #: Pruned sites' key -> (rules, robots_expiry, crawl_delay, pages, errors), an LRU.
        self.kept: OrderedDict[str, tuple] = OrderedDict()
        self.sites_pruned = 0
        self.ips_pruned = 0

    def note_idle(self, site: NamedSite, now: float) -> None:
        """``site`` may be idle from ``now``: list it, or move its idle time on."""
        if self.prune_after is None or not site.idle:
            return
        if site.idle_at < 0:
            self._seq += 1
            heapq.heappush(self._idle, (now + self.prune_after, self._seq, site))
        site.idle_at = now

    def left_ip(self, ip: IPSite, now: float) -> None:
        """A named site no longer uses ``ip``: list it once none does."""
        ip.sites -= 1
        if ip.sites <= 0 and not ip.listed and self.prune_after is not None:
            ip.listed = True
            self._seq += 1
            heapq.heappush(self._idle, (now + self.prune_after, self._seq, ip))

    def revive(self, site: NamedSite, now: float) -> bool:
        """A site made again takes back what was kept of it: its counts, and its
        robots.txt rules and crawl-delay until their expiry.  False: none was kept."""
        kept = self.kept.pop(site.key, None)
        if kept is None:
            return False
        rules, expiry, delay, site.pages, site.errors = kept
        if expiry > now:  # robots.txt is not fetched again before its TTL
            site.robots = rules
            site.robots_event("restore")
            site.robots_expiry = expiry
            site.crawl_delay = delay
        return True

    def prune(self, now: float, sites: dict[str, NamedSite], ips: dict[str, IPSite]) -> None:
        """Drop from ``sites`` and ``ips`` the listed entries idle ``prune_after`` seconds whose waits are over."""
        idle = self._idle
        if not idle or idle[0][0] > now:
            return
        after = self.prune_after
        for _ in range(PRUNE_BATCH):
            if not idle or idle[0][0] > now:
                return
            obj = heapq.heappop(idle)[2]
            if type(obj) is IPSite:
                due = self._prune_ip(obj, now, ips)
                if due is None:
                    continue
            else:
                site = obj
                if sites.get(site.key) is not site or not site.idle:
                    site.idle_at = -1.0
                    continue
                due = site.idle_at + after
                if due <= now:
                    if site.next_allowed > now:
                        due = site.next_allowed  # politeness still needs it
                    elif not settled(site):
                        due = now + after
                    else:
                        self._drop_site(site, now, sites)
                        continue
            self._seq += 1
            heapq.heappush(idle, (due, self._seq, obj))

    def _drop_site(self, site: NamedSite, now: float, sites: dict[str, NamedSite]) -> None:
        del sites[site.key]
        site.idle_at = -1.0
        self.sites_pruned += 1
        keep_rules = site.robots_state is RobotsState.OK and site.robots_expiry > now
        kept = self.kept
        kept[site.key] = (site.robots if keep_rules else None, site.robots_expiry if keep_rules else 0.0,
                          site.crawl_delay if keep_rules else 0.0, site.pages, site.errors)
        if len(kept) > self.keep_sites:
            kept.popitem(last=False)
        ip = site.ip_site
        if ip is not None:
            site.ip_site = None
            self.left_ip(ip, now)

    def _prune_ip(self, ip: IPSite, now: float, ips: dict[str, IPSite]) -> float | None:
        """Drop ``ip`` if it may go; else the time to look again (None: unlisted)."""
        ip.listed = False
        if ips.get(ip.ip) is not ip or ip.sites > 0:
            return None  # listed again when its last site leaves
        pace = ip.pace
        if ip.busy or ip.ready or ip.heap_time is not None or pace.penalty > 1.0 or ip.lease is not LeaseState.NONE:
            due = now + self.prune_after  # a request still runs, or the penalty decays first
        elif ip.next_allowed > now or pace.retry_until > now:
            due = max(ip.next_allowed, pace.retry_until)
        else:
            del ips[ip.ip]
            self.ips_pruned += 1
            return None
        ip.listed = True
        return due
