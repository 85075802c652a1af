"""Membership on Redis: member keys with a TTL, death decided on Redis's clock.

Each worker holds ``member:<w>`` (``PX leaseTtl``, its value the process's
instance id) and a score in the ``members`` zset (its expiry in Redis ms);
:meth:`RedisMembership.heartbeat` renews both every ``leaseTtl / 5`` s and
reads the live members back, dropping the expired ones.  Death is decided
by key expiry on Redis's clock, so the workers' clocks never need to agree.

:attr:`RedisMembership.alive` turns False at ``renewed_at + ttl - margin``,
where ``renewed_at`` is this process's monotonic time when the last
successful heartbeat was *sent* (the renewal happened after that, so the
key lives at least until ``renewed_at + ttl`` on any clock that does not run
fast by more than ``margin``): from then on another worker may take the
leases, and this one starts no request for its partitions.

The coordinator renews its partition leases in the same call: it sets
:attr:`held` (``{partition: token}``) and reads :attr:`lost` after each
heartbeat, or stages the heartbeat in its own tick with :meth:`stage` and
:meth:`absorb` (one round trip for everything).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, Callable

from .membership import MembershipChange, MembershipError
from .redisio import DistError, Heartbeat, RedisFailed, RedisIO, Tick

__all__ = ["RedisMembership"]


class RedisMembership:
    """The :class:`~larbin_py.distributed.membership.Membership` seam on Redis."""

    source = "redis"

    def __init__(self, io: RedisIO, ttl: float, *, margin: float | None = None, join_wait: float | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.io = io
        self.ttl = float(ttl)
        self.margin = self.ttl / 5 if margin is None else float(margin)
        # A respawned worker reuses its id while its dead predecessor's key
        # still lives: wait that key out (a live holder keeps renewing and is
        # still there after the wait, and is refused then).
        self.join_wait = self.ttl + 1.0 if join_wait is None else float(join_wait)
        self.clock = clock
        self.worker: str | None = None
        self.instance = io.instance
        self.held: dict[int, int] = {}
        self.lost: list[int] = []
        self.error: str | None = None  # the last heartbeat's failure, for the dashboard
        self.duplicate = False
        self._members: frozenset[str] = frozenset()
        self._renewed_at: float | None = None
        self._watchers: list[Callable[[frozenset[str]], None]] = []
        self._last_change: MembershipChange | None = None

    # --- the Membership protocol ---------------------------------------------
    async def join(self, worker_id: str) -> None:
        """Register ``worker_id``; a Redis failing meanwhile (unreachable, an error
        reply) is waited for, with backoff."""
        self.worker = worker_id
        deadline = self.clock() + self.join_wait
        backoff = 0.1
        while True:
            sent = self.clock()
            try:
                t = self.io.tick()
                t.join(worker_id, self.instance, self.ttl)
                i = self.stage(t)
                res = await t.execute()
            except RedisFailed as exc:
                self.error = str(exc)
                await asyncio.sleep(backoff)
                backoff = min(5.0, backoff * 2)
                deadline = max(deadline, self.clock() + self.join_wait)
                continue
            except DistError as exc:
                raise MembershipError(f"cannot join the crawl: {exc} (check redisUrl)") from exc
            if res[0] is True:
                self.absorb(res[i], sent)
                return
            if self.clock() >= deadline:
                raise MembershipError(f"workerId {worker_id!r} is held by a live worker of crawl "
                                      f"{self.io.crawl!r} (instance {res[0]}): choose another workerId")
            await asyncio.sleep(min(0.2, self.ttl / 10))

    async def heartbeat(self) -> None:
        sent = self.clock()
        try:
            t = self.io.tick()
            i = self.stage(t)
            res = await t.execute()
        except DistError as exc:  # alive decays by itself; the coordinator retries
            self.error = str(exc)
            return
        self.absorb(res[i], sent)

    def members(self) -> frozenset[str]:
        if self.worker is not None and self.alive:
            return self._members | {self.worker}
        return self._members - ({self.worker} if self.worker else set())

    def watch(self, callback: Callable[[frozenset[str]], None]) -> None:
        self._watchers.append(callback)

    @property
    def alive(self) -> bool:
        if self._renewed_at is None or self.duplicate:
            return False
        return self.clock() < self._renewed_at + self.ttl - self.margin

    @property
    def last_change(self) -> MembershipChange | None:
        return self._last_change

    async def leave(self) -> None:
        if self.worker is None:
            return
        try:
            t = self.io.tick()
            t.leave(self.worker, self.instance)
            await t.execute()
        except DistError:
            pass  # the key expires by itself
        self._renewed_at = None

    # --- one tick with the coordinator's traffic -------------------------------
    def stage(self, tick: Tick) -> int:
        """Put this worker's heartbeat (member key and :attr:`held` leases) in ``tick``."""
        if self.worker is None:
            raise MembershipError("heartbeat before join")
        return tick.heartbeat(self.worker, self.ttl, dict(self.held), self.instance)

    def absorb(self, hb: Heartbeat, sent_at: float) -> list[int]:
        """Take in a heartbeat's answer (``sent_at``: the clock when its tick was sent);
        returns the partitions lost."""
        self.error = None
        self.duplicate = hb.duplicate
        if not hb.duplicate:
            self._renewed_at = sent_at
        self.lost = list(hb.lost)
        for p in hb.lost:
            self.held.pop(p, None)
        members = frozenset(hb.members)
        if members != self._members:
            self._note_change(self._members, members)
            self._members = members
            for cb in list(self._watchers):
                cb(self.members())
        return self.lost

    def _note_change(self, before: frozenset[str], after: frozenset[str]) -> None:
        parts = [f"{w} joined" for w in sorted(after - before)] + [f"{w} left" for w in sorted(before - after)]
        self._last_change = (time.time(), ", ".join(parts))

    def describe(self) -> dict[str, Any]:
        """For the dashboard."""
        return {"source": self.source, "members": sorted(self.members()), "alive": self.alive,
                "error": self.error, "last_change": self._last_change}
