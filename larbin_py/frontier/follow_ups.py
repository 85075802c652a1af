"""Politeness inside a running request's slot: its real send time, and the requests that follow it.

The frontier's heap decides when a request *starts* and pushes its site's
and IP's next allowed times at that start.  Two things happen after the
start that politeness must see too, and this room handles them on the
same :class:`~larbin_py.frontier.sites.IPSite` and
:class:`~larbin_py.frontier.sites.NamedSite` clocks:

* the request reached the wire late (a slow connect):
  :meth:`FollowUps.sent_late` moves both next allowed times to count from
  the send, since politeness is about what the server sees;
* a running request makes a *follow-up* in its own slot (a robots.txt
  redirect, a dynamic page's sub-request): it waits like any other
  request to that host and IP (:meth:`FollowUps.delay`), may start only
  while the IP-lease gate allows (:meth:`FollowUps.allowed`: in the
  distributed mode, the IP's lease held and the deadline not passed), and
  pushes the next allowed times when it starts (:meth:`FollowUps.started`).

The frontier builds its :class:`FollowUps` on its own IP table, random
source (the jitter draws stay in one sequence) and gate; callers reach it
as ``frontier.follow_ups``.  Sans-I/O: time comes in as ``now``.
"""

from __future__ import annotations

import random

from .ip_leases import IpLeaseGate
from .sites import IPSite

__all__ = ["FollowUps"]


class FollowUps:
    """Politeness after a request's start, with the frontier's ``ips``, ``rng`` and ``gate``;
    ``wait_duration`` and ``jitter`` as the frontier's."""

    __slots__ = ("ips", "wait_duration", "jitter", "rng", "gate")

    def __init__(self, ips: dict[str, IPSite], *, wait_duration: float, jitter: float, rng: random.Random,
                 gate: IpLeaseGate) -> None:
        self.ips = ips
        self.wait_duration = wait_duration
        self.jitter = jitter
        self.rng = rng
        self.gate = gate

    def sent_late(self, req, sent_at: float | None) -> None:
        """``req`` reached the wire at ``sent_at``, after its start (a connect).

        The next request to the site and to the IP may not start before
        ``sent_at`` plus their delay, so two requests never arrive closer
        than the delay because the first one waited for its connection.
        (A maximum, not a sum: requests running side by side to one IP must
        not push each other's lags.)
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

    def delay(self, req, now: float) -> float:
        """Seconds before ``req`` may send a follow-up request to its server."""
        ip = self.ips.get(req.ip)
        wait = req.site.next_allowed - now
        if ip is not None:
            wait = max(wait, ip.next_allowed - now)
        return max(0.0, wait)

    def allowed(self, req, now: float) -> bool:
        """A follow-up of ``req`` may start at ``now``: the frontier's own rule for a start.

        Past the lease deadline, or with the IP's lease suspended or given
        up (the distributed mode), it must not: another worker may own the
        IP by then.  In one process: always.
        """
        gate = self.gate
        if now > gate.deadline:
            return False
        return not gate.leased or gate.allows(self.ips.get(req.ip))

    def started(self, req, now: float) -> None:
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
