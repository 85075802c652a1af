"""The IP-lease gate: may a request to this IP start here?

Politeness per IP holds within one process by the frontier's IP heap.  In
the distributed mode several workers may reach one server: one worker at a
time may send to an IP, the one holding its *lease* in Redis.  The frontier
asks its gate, passed in at construction:

* :class:`OpenGate` (one process): always open.  ``leased`` is False, so
  the frontier's hot path never calls it; ``deadline`` is infinite.
* :class:`LeasePolicy` (a worker): only a HELD IP is scheduled.  An IP
  with a site ready and no lease becomes WANTED (:meth:`LeasePolicy.want`,
  which calls ``on_wanted``: the coordinator sends a tick at once); the
  coordinator asks Redis for the wanted ones (:meth:`~LeasePolicy.wanted`)
  and reports each answer (:meth:`~LeasePolicy.granted`,
  :meth:`~LeasePolicy.denied`), renews the held ones with its heartbeat
  (:meth:`~LeasePolicy.held`; a late heartbeat :meth:`~LeasePolicy.suspend`\\ s
  them, a renewal :meth:`~LeasePolicy.resume`\\ s them, a renewal that
  found one gone reports it :meth:`~LeasePolicy.lost`), and gives back
  what :meth:`~LeasePolicy.to_release` names.  ``deadline`` (loop time),
  moved by each renewal, is when the leases may lapse: the frontier starts
  no request past it, follow-ups included.

The lease state of each IP lives on its :class:`~larbin_py.frontier.sites.IPSite`
(:class:`~larbin_py.frontier.sites.LeaseState`); the gate keeps the wanted and
held ones.  The frontier gives its gate its IP table and its scheduling
function once, in its constructor (:meth:`LeasePolicy.attach`): a grant, a
resumption or a loss reschedules the IP at once.  Sans-I/O: times come in as
``now``; the coordinator does the Redis round trips.
"""

from __future__ import annotations

import math
from typing import Callable, Protocol

from .sites import IPSite, LeaseState

__all__ = ["IpLeaseGate", "OpenGate", "LeasePolicy", "IP_IDLE_RELEASE", "IP_IDLE_RELEASE_MIN", "IP_REASK_AFTER"]

#: An IP lease held with nothing ready on it is released after this many
#: waitDurations (and at least IP_IDLE_RELEASE_MIN seconds) since its last start.
IP_IDLE_RELEASE = 2.0
IP_IDLE_RELEASE_MIN = 0.2
#: A released IP that still has ready sites asks for its lease again after
#: this many seconds: a worker waiting for it gets its turn first.
IP_REASK_AFTER = 0.5


class IpLeaseGate(Protocol):
    """What the frontier asks of its gate."""

    #: True: only an IP whose lease is HELD is scheduled (the frontier checks ``ip.lease`` itself).
    leased: bool
    #: No request starts after this time (loop time): the leases may have lapsed.
    deadline: float

    def attach(self, ips: dict[str, IPSite], schedule: Callable[[IPSite, float], None]) -> None:
        """The frontier's IP table and its ``schedule(ip, at)`` (called once, by the frontier)."""
        ...

    def want(self, ip: IPSite) -> None:
        """``ip`` has a site ready and no lease (only called when ``leased``)."""
        ...

    def allows(self, ip: IPSite | None) -> bool:
        """A follow-up request to ``ip`` may start (the deadline aside)."""
        ...


class OpenGate:
    """The single process's gate: every IP is always open."""

    leased = False
    deadline = math.inf

    def attach(self, ips: dict[str, IPSite], schedule: Callable[[IPSite, float], None]) -> None:
        pass

    def want(self, ip: IPSite) -> None:
        raise RuntimeError("an open gate has no lease to ask for")

    def allows(self, ip: IPSite | None) -> bool:
        return True


class LeasePolicy:
    """The distributed mode's gate: the IP leases of one worker.

    ``wait_duration`` sets how long an idle lease is kept (see
    :meth:`to_release`); ``hold``: how long a lease another worker wants is
    kept at least; ``on_wanted()``: an IP starts wanting its lease.
    """

    leased = True

    def __init__(self, *, wait_duration: float, hold: float = 10.0,
                 on_wanted: Callable[[], None] | None = None) -> None:
        self.hold = hold
        self.idle_after = max(IP_IDLE_RELEASE * wait_duration, IP_IDLE_RELEASE_MIN)
        self.on_wanted = on_wanted
        #: No request starts after this time (loop time), until the coordinator's
        #: next renewal moves it (the leases may have lapsed).
        self.deadline = math.inf
        self._wanted: dict[str, IPSite] = {}  # lease WANTED
        self._held: dict[str, IPSite] = {}  # lease HELD or EXPIRING
        self._ips: dict[str, IPSite] | None = None
        self._schedule: Callable[[IPSite, float], None] | None = None

    def attach(self, ips: dict[str, IPSite], schedule: Callable[[IPSite, float], None]) -> None:
        if self._ips is not None and self._ips is not ips:
            raise ValueError("a LeasePolicy serves one frontier")
        self._ips, self._schedule = ips, schedule

    # -- the frontier's side -------------------------------------------------
    def want(self, ip: IPSite) -> None:
        ip.lease = LeaseState.WANTED
        ip.lease_retry = 0.0  # ask at once
        self._wanted[ip.ip] = ip
        if self.on_wanted is not None:
            self.on_wanted()

    def allows(self, ip: IPSite | None) -> bool:
        return ip is not None and ip.lease is LeaseState.HELD

    # -- the coordinator's side ----------------------------------------------
    def next_ask(self) -> float | None:
        """When :meth:`wanted` next has an IP to ask for (None: none wanted)."""
        times = [ip.lease_retry for ip in self._wanted.values()
                 if ip.lease is LeaseState.WANTED and ip.lease_retry != math.inf]
        return min(times) if times else None

    def wanted(self, now: float) -> list[str]:
        """The IPs whose lease the coordinator should ask for now (each once until answered).

        An IP no longer wanted (its ready sites left) goes back to NONE.
        """
        out = []
        for key, ip in list(self._wanted.items()):
            if ip.lease is not LeaseState.WANTED or not ip.ready:
                if ip.lease is LeaseState.WANTED:
                    ip.lease = LeaseState.NONE
                del self._wanted[key]
                continue
            if ip.lease_retry <= now:
                ip.lease_retry = math.inf  # asked: wait for the answer
                out.append(key)
        return out

    def granted(self, addr: str, not_before: float, pace: dict | None, now: float, *,
                last_start: float | None = None) -> None:
        """The lease of ``addr`` was granted: requests to it may start from ``not_before``.

        ``not_before`` (loop time) is the previous holder's last start plus
        the delay (or a full delay after a lapsed lease); ``pace`` is the
        previous holder's :class:`~larbin_py.throttle.ServerPace` state, the
        server's frequency control moving with the IP; ``last_start`` that
        start (loop time), kept as the IP's last start when later than its
        own: released before any request here, the lease passes it on.  A
        renewal of an EXPIRING lease is a grant too.
        """
        ip = self._ips.get(addr) if self._ips is not None else None
        if ip is None:
            return  # pruned meanwhile: the coordinator releases what it does not hold
        self._wanted.pop(addr, None)
        if ip.lease is not LeaseState.HELD and ip.lease is not LeaseState.EXPIRING:
            ip.lease_since = now
            ip.contended = False
        ip.lease = LeaseState.HELD
        self._held[addr] = ip
        if not_before > ip.next_allowed:
            ip.next_allowed = not_before
        if last_start is not None and last_start > ip.last_start:
            ip.last_start = last_start
        if pace:
            p = ip.pace
            p.penalty = max(p.penalty, float(pace.get("penalty", 1.0)))
            p.retry_until = max(p.retry_until, float(pace.get("retry_until", 0.0)))
            if p.srtt is None and pace.get("srtt") is not None:
                p.srtt = float(pace["srtt"])
            if p.floor is None and pace.get("floor") is not None:
                p.floor = float(pace["floor"])
        self._schedule(ip, now)

    def denied(self, addr: str, retry_at: float) -> None:
        """Another worker holds ``addr``: ask again at ``retry_at``."""
        ip = self._ips.get(addr) if self._ips is not None else None
        if ip is None or ip.lease is not LeaseState.WANTED:
            return
        ip.lease_retry = retry_at
        self._wanted[addr] = ip

    def lost(self, addr: str, now: float) -> None:
        """The lease of ``addr`` is no longer this worker's (a renewal found it gone)."""
        ip = self._held.pop(addr, None)
        if ip is None:
            return
        ip.lease = LeaseState.NONE
        ip.lease_retry = now
        self._schedule(ip, now)  # wanted again if sites are ready

    def contended(self, addr: str) -> None:
        """Another worker waits for ``addr``: release it once held ``hold`` and idle."""
        ip = self._held.get(addr)
        if ip is not None:
            ip.contended = True

    def suspend(self) -> None:
        """The leases may have lapsed (the heartbeat is late): start no request on any."""
        for ip in self._held.values():
            ip.lease = LeaseState.EXPIRING

    def resume(self, now: float) -> None:
        """The leases were renewed: EXPIRING ones are HELD again."""
        for ip in self._held.values():
            if ip.lease is LeaseState.EXPIRING:
                ip.lease = LeaseState.HELD
                self._schedule(ip, now)

    def held(self) -> list[str]:
        """The IPs whose lease this worker holds (renewed by the heartbeat)."""
        return list(self._held)

    def to_release(self, now: float, *, every: bool = False) -> list[tuple[str, float, dict]]:
        """Leases to give back now: ``(ip, last_start, pace)`` each, and NONE here.

        An IP is released when no request to it runs and either nothing has
        been ready on it for :attr:`idle_after` seconds since its last
        start, or another worker waits for it and it was held at least
        ``hold``; ``every``: each one with no request running (a worker that
        stops).  ``last_start`` (loop time, -1 when none) and the pace go to
        ``iplast`` for the next holder.
        """
        out = []
        for key, ip in list(self._held.items()):
            if ip.busy:
                continue
            since = max(ip.last_start, ip.lease_since)
            if not every:
                if ip.ready and not (ip.contended and now - ip.lease_since >= self.hold):
                    continue
                if not ip.ready and now - since < self.idle_after:
                    continue
            del self._held[key]
            ip.lease = LeaseState.NONE
            ip.contended = False
            p = ip.pace
            out.append((key, ip.last_start, {"penalty": p.penalty, "retry_until": p.retry_until,
                                             "srtt": p.srtt, "floor": p.floor}))
            if ip.ready and not every:  # still wanted: the waiting worker gets its turn first
                ip.lease = LeaseState.WANTED
                ip.lease_retry = now + IP_REASK_AFTER
                self._wanted[key] = ip
        return out
