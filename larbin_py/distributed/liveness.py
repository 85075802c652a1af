"""Whether a worker may start requests: its leases fresh, and the membership holding it.

Fencing guards Redis, not the web: a request already started cannot be
called back, so a worker whose partitions may be another's by now must not
start one (docs/distributed-design.md, "Membership, leases and fencing").
Two sources say so; :class:`Liveness` watches both and moves the
frontier's gate (its IP leases suspended, and a deadline checked at every
request start, not only per tick):

* **the Redis leases**: :attr:`RedisMembership.alive
  <larbin_py.distributed.membership_redis.RedisMembership.alive>` turns
  False at ``renewed_at + leaseTtl - margin``.  Each heartbeat that renewed
  them sets the frontier's deadline there (:meth:`renewed`); once past it,
  every IP lease is suspended until a heartbeat succeeds (:meth:`resume`).
* **an external membership** (``membership zookeeper``): lapsed (the
  session SUSPENDED or LOST), the deadline is set in the past and the IP
  leases suspended at once, with one line naming the cause; still cut off
  after the session timeout (the others see this worker gone by then), or
  the session LOST, :meth:`check` answers why every partition must be
  released (the coordinator drains them, so the others need not wait for
  the leases to expire); back with its session, one line says so and the
  worker resumes at the next heartbeat.

Times are arguments; the membership objects answer ``alive`` from their
own clocks.  Nothing here talks to Redis or ZooKeeper.
"""

from __future__ import annotations

import math

__all__ = ["Liveness"]


class Liveness:
    """The frontier's gate for one worker (see the module docstring)."""

    def __init__(self, frontier, leases, membership, *, worker: str, lease_ttl: float, err) -> None:
        self.fr = frontier
        self.leases = leases
        self.membership = membership
        self.external = membership is not leases
        self.worker = worker
        self.lease_ttl = lease_ttl
        self.err = err
        #: The IP leases are suspended: nothing starts.
        self.suspended = False
        #: When the external membership last turned not alive (None: alive).
        self.lapsed_since: float | None = None
        #: The last renewal's deadline (the frontier's, while the membership holds this worker).
        self.lease_deadline = math.inf

    def safe(self) -> bool:
        """Requests may start: the Redis leases are fresh and the membership holds this worker."""
        return self.leases.alive and (not self.external or self.membership.alive)

    def renewed(self, deadline: float) -> None:
        """A heartbeat renewed the leases until ``deadline`` (this worker's clock)."""
        self.lease_deadline = deadline
        if self.lapsed_since is None:
            self.fr.ip_leases.deadline = deadline

    def resume(self, now: float) -> bool:
        """Suspended and safe again: the IP leases resume.  True when they did."""
        if not (self.suspended and self.safe()):
            return False
        self.suspended = False
        self.fr.ip_leases.deadline = self.lease_deadline
        self.fr.ip_leases.resume(now)
        return True

    def check(self, now: float) -> str | None:
        """Suspend what is no longer safe; returns why every partition must be released
        (the membership lapsed long enough), or None."""
        if not self.suspended and not self.leases.alive and self.leases._renewed_at is not None:
            self._suspend()
        if self.external:
            return self._check_membership(now)
        return None

    def _suspend(self) -> None:
        self.suspended = True
        self.fr.ip_leases.suspend()

    def _check_membership(self, now: float) -> str | None:
        m = self.membership
        if m.alive:
            if self.lapsed_since is not None:
                self.lapsed_since = None
                print(f"larbin_py: worker {self.worker}: back in the membership ({m.source}); "
                      "fetching resumes", file=self.err)
            return None
        if self.lapsed_since is None:
            self.lapsed_since = now
            self.fr.ip_leases.deadline = -math.inf
            if not self.suspended:
                self._suspend()
            print(f"larbin_py: worker {self.worker}: out of the membership ({m.source}): "
                  f"{(m.last_change or (0, 'connection lost'))[1]}; fetching paused", file=self.err)
        expired = bool(getattr(m, "session_lost", False))
        limit = float(getattr(m, "session_timeout", self.lease_ttl))
        if expired:
            return "its session expired"
        if now - self.lapsed_since >= limit:
            return f"cut off for {limit:g} s"
        return None
