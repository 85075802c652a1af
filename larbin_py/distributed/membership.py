"""Membership: which workers are in the crawl, and when one of them is gone.

Two implementations share this seam: ``RedisMembership`` (member keys with a
TTL renewed by the heartbeat; death decided by key expiry on Redis's clock)
and ``ZkMembership`` (an ephemeral znode per worker; death decided by the end
of its ZooKeeper session, seen through a children watch).  Either one only
answers "who is alive"; partition leases and their fencing tokens stay in
Redis whatever the membership, because the fence must live in the store that
is written (docs/distributed-design.md, "Membership, leases and fencing").

The coordinator derives the partition map from :meth:`Membership.members`
(a pure function of the member list: larbin_py.distributed.partition), so every
worker computes the same map from the same view.

Threading: every method is called on the event loop's thread, and every
callback given to :meth:`Membership.watch` is called on it too (a client
that calls back on its own thread, as kazoo does, hops with
``loop.call_soon_threadsafe``).

Failure semantics:

==========================  ==================================================
event                       what the implementation does
==========================  ==================================================
service unreachable at      :meth:`join` raises :class:`MembershipError` whose
start                       message names the key to fix (``redisUrl``,
                            ``zkHosts``); the command line exits 2 with it
own membership lapsed       :attr:`alive` turns False *before* another worker
(session lost, key          could take this worker's leases; the worker then
expired, paused process)    starts no request for its partitions, and the
                            implementation reconnects and joins again
another worker gone         it leaves :meth:`members`; watchers are called
==========================  ==================================================
"""

from __future__ import annotations

from typing import Callable, Protocol, runtime_checkable

__all__ = ["Membership", "MembershipError", "MembershipChange"]


class MembershipError(Exception):
    """The membership service cannot be reached or refused this worker (a clear sentence)."""


#: ``(wall time, description)`` of the last change of the member set, e.g.
#: ``(1764063000.2, "w2 left (session expired)")``: the dashboard shows it.
MembershipChange = tuple[float, str]


@runtime_checkable
class Membership(Protocol):
    """Discovery and failure detection of the crawl's workers."""

    #: ``"redis"`` or ``"zookeeper"``: shown on the dashboard.
    source: str

    async def join(self, worker_id: str) -> None:
        """Register this worker; returns once it is visible to the others.

        Raises :class:`MembershipError` when the service cannot be reached
        or ``worker_id`` is held by a live worker.
        """

    async def heartbeat(self) -> None:
        """Called every ``leaseTtl / 5`` s by the coordinator: renew what
        needs renewing (Redis) or check the session (ZooKeeper)."""

    def members(self) -> frozenset[str]:
        """The live workers as last seen (this one included while :attr:`alive`)."""

    def watch(self, callback: Callable[[frozenset[str]], None]) -> None:
        """Call ``callback(members)`` on the loop at every change of the member set."""

    @property
    def alive(self) -> bool:
        """False from the moment this worker's own membership may have lapsed."""

    @property
    def last_change(self) -> MembershipChange | None:
        """The last change of the member set, for the dashboard."""

    async def leave(self) -> None:
        """Deregister (a clean stop); the others see the worker go at once."""
