"""A worker's IP leases: the frontier's lease calls turned into Redis's arguments and back.

Across the workers of a crawl, one connection per IP and ``waitDuration``
between two requests to an IP, whoever sends them: an IP is scheduled only
while this worker holds its lease ``ip:{X}`` (docs/distributed-worker.md).
The frontier keeps each IP's lease state and says which IPs to ask and
which to let go; :class:`IpLeases` translates, for the coordinator's tick,
without I/O (times are arguments):

* **asks** (``lb_ip_acquire``): the IPs the frontier wants;
* **a grant** (:func:`not_before`): requests may start on the IP from the
  previous holder's last start plus the delay (``waitDuration`` times the
  server's penalty, from the pace it left); a full delay from now when that
  start is unknown -- the lease expired unreleased (the grant is not
  ``clean``), or this worker asked in a tick that failed (the answer that
  carried the start may have been lost: the IP is *unclean* until its next
  grant).  The pace's ``retry_until`` (a wall time, the workers' clocks
  share no origin) is turned into this worker's clock.  That start
  (:func:`previous_start`; "now" when unknown) becomes the IP's last start
  here, so a lease let go before this worker sent anything on it passes
  the previous holder's start on, not an older one of its own;
* **a denial**: asked again at ``retry_at`` (the coordinator's next
  heartbeat); a tick that failed: its asks are denied until a heartbeat
  later, and marked unclean;
* **a renewal** (with every heartbeat) refused: the lease is lost, nothing
  more starts on that IP; granted with another worker waiting: the
  frontier lets the IP go sooner;
* **releases** (``lb_ip_release``): the IPs the frontier lets go (every one
  at a stop), with the last request's start and the pace in wall time; the
  start is rounded up to the millisecond, plus the loop clock's step
  (:data:`CLOCK_STEP`: ``loop.time()`` is cut to the millisecond, so a
  start it dates may have happened up to a step later), so the next holder
  never counts from a start earlier than the real one.

A pace that does not parse is taken as none.
"""

from __future__ import annotations

import json
import math

from .redisio import IpGrant

__all__ = ["IpLeases", "not_before", "previous_start", "CLOCK_STEP"]

#: How much later than the loop clock says a start may have happened (uvloop: 1 ms).
CLOCK_STEP = 0.001


def not_before(g: IpGrant, now: float, wall: float, wait_duration: float, unclean: bool) -> tuple[float, dict | None]:
    """When requests may start on an IP just granted (this worker's clock ``now``,
    its wall time ``wall``), and the previous holder's pace in this worker's clock."""
    pace = None
    if g.pace:
        try:
            pace = json.loads(g.pace)
        except ValueError:
            pace = None
    if not isinstance(pace, dict):
        pace = None
    if pace and pace.get("retry_until"):
        pace["retry_until"] = now + (float(pace["retry_until"]) - wall)
    penalty = float(pace.get("penalty", 1.0)) if pace else 1.0
    delay = wait_duration * penalty
    if not g.clean or unclean:
        return now + delay, pace  # its last requests are unknown: a full delay
    if g.last_start_ms:
        return now + (g.last_start_ms / 1000.0 - wall) + delay, pace
    return now, pace


def previous_start(g: IpGrant, now: float, wall: float, unclean: bool) -> float | None:
    """The previous holder's last start in this worker's clock: ``now`` when it is not known
    (as if a request had just started: the next holder waits a full delay), None when it
    left none (the IP was never asked, or not for an hour)."""
    if not g.clean or unclean:
        return now
    if g.last_start_ms:
        return now + (g.last_start_ms / 1000.0 - wall)
    return None


class IpLeases:
    """The frontier's side of the IP leases, for one worker's ticks (see the module docstring)."""

    def __init__(self, frontier, *, wait_duration: float, ttl: float) -> None:
        self.fr = frontier
        self.wait_duration = wait_duration
        #: How long a lease asked or renewed lives in Redis (seconds).
        self.ttl = ttl
        #: IPs asked in a failed tick: the grant that follows waits a full delay.
        self.unclean: set[str] = set()

    def asks(self, now: float) -> list[str]:
        return self.fr.ip_leases.wanted(now)

    def held(self) -> list[str]:
        """The IPs to renew with the heartbeat."""
        return self.fr.ip_leases.held()

    def releases(self, now: float, wall: float, every: bool) -> list[tuple[str, int, str]]:
        """``(ip, last start in wall ms (0: none), pace JSON)`` of the IPs to let go (``every``: a stop)."""
        out = []
        for ip, last_start, pace in self.fr.ip_leases.to_release(now, every=every):
            wall_ms = math.ceil((wall + (last_start - now) + CLOCK_STEP) * 1000) if last_start >= 0 else 0
            pace = dict(pace)
            if pace.get("retry_until"):
                pace["retry_until"] = wall + (pace["retry_until"] - now)
            out.append((ip, wall_ms, json.dumps(pace)))
        return out

    def answered(self, ip: str, g: IpGrant, now: float, wall: float, retry_at: float) -> None:
        """The answer to an ask: granted (from :func:`not_before` on), or asked again at ``retry_at``."""
        if not g.granted:
            self.fr.ip_leases.denied(ip, retry_at)
            return
        unclean = ip in self.unclean
        start, pace = not_before(g, now, wall, self.wait_duration, unclean)
        self.unclean.discard(ip)
        self.fr.ip_leases.granted(ip, start, pace, now, last_start=previous_start(g, now, wall, unclean))
        if g.wanted:
            self.fr.ip_leases.contended(ip)

    def renewed(self, ip: str, g: IpGrant, now: float) -> None:
        """The answer to a renewal."""
        if not g.granted:
            self.fr.ip_leases.lost(ip, now)
        elif g.wanted:
            self.fr.ip_leases.contended(ip)

    def unanswered(self, asked: list[str], retry_at: float) -> None:
        """The tick that asked for ``asked`` failed: asked again at ``retry_at``, then a full delay."""
        for ip in asked:
            self.fr.ip_leases.denied(ip, retry_at)
            self.unclean.add(ip)
