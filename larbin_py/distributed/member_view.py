"""The live members as one worker acts on them, and the partitions the map gives it (sans-I/O).

Every worker computes the same map (:func:`~larbin_py.distributed.partition.assign`)
from the members it sees.  Acting on every change of the view at once
would move partitions back and forth while workers start together or a
member flickers, so (docs/distributed-worker.md, "Ownership"):

* a member gone, or this worker (re)joined: :meth:`MemberView.update`
  answers True, the coordinator acquires what the map now gives it at once
  (the dead worker's leases are free, or soon);
* a member joined: nothing at once; partitions are given away only once
  the view has been the same for ``settle`` seconds (:meth:`stable`; two
  heartbeats), so every worker has seen the newcomer first.

With load-aware partitions the map also follows the stored shares
(:mod:`~larbin_py.distributed.shares`): :meth:`MemberView.set_shares` takes
the record every worker reads, and :meth:`mine` gives this worker what the
weighted map gives it; ``None`` shares (``partitionShares equal``, or no
record yet) are the equal map.

Times are arguments; the view keeps no clock.
"""

from __future__ import annotations

from typing import Iterable

from .partition import assign

__all__ = ["MemberView"]


class MemberView:
    """One worker's view of the members (see the module docstring)."""

    def __init__(self, worker: str, partitions: int, settle: float) -> None:
        self.worker = worker
        self.partitions = partitions
        self.settle = settle
        self.members: frozenset[str] = frozenset()
        #: When the view last changed.
        self.since = 0.0
        #: The shares the map follows (worker -> partitions), None: equal shares.
        self.shares: dict[str, int] | None = None

    def reset(self, members: Iterable[str], now: float) -> None:
        """The first view (at join)."""
        self.members = frozenset(members)
        self.since = now

    def update(self, members: Iterable[str], now: float) -> bool:
        """A new view; True when the worker should acquire at once (a member gone, or itself back)."""
        members = frozenset(members)
        if members == self.members:
            return False
        urgent = bool(self.members - members) or (self.worker in members and self.worker not in self.members)
        self.members = members
        self.since = now
        return urgent

    def stable(self, now: float) -> bool:
        """The view has not changed for ``settle`` seconds: the map may give partitions away."""
        return now - self.since >= self.settle

    def joined(self) -> bool:
        """This worker is in its own view (it may acquire)."""
        return self.worker in self.members

    def set_shares(self, shares: dict[str, int] | None) -> bool:
        """The map follows ``shares`` from now on (None: equal); True when they changed."""
        shares = dict(shares) if shares else None
        if shares == self.shares:
            return False
        self.shares = shares
        return True

    def map(self) -> dict[int, str]:
        """Partition -> worker for the members acted on (and the shares)."""
        return assign(self.partitions, self.members, weights=self.shares)

    def mine(self) -> set[int]:
        """The partitions the map gives this worker."""
        return {p for p, w in self.map().items() if w == self.worker}
