"""When a distributed crawl has ended (sans-I/O).

A worker with nothing to do cannot stop on its own: another worker may be
about to send it links.  The crawl has ended when (docs/distributed-design.md, "Ending the crawl"):

* every live member reports idle (frontier idle, send buffers empty, no
  request or task running), and
* the global counters balance with nothing queued: Σaccepted = Σdone
  (fetched + forgotten) and no entry left in any stream,

in **two consecutive heartbeat waves with unchanged totals**.  A wave is
complete when every member has reported again (a higher report sequence)
since the previous one.  One look is not enough: a worker may report idle
while another is between reading an entry and acking it; but a URL read is
counted as queued until its ack, and its page's links are enqueued (counted
as accepted) before that ack in the same pipeline, so any work done between
two waves changes the totals, and unchanged totals over a full wave mean no
worker did anything in between.  scrapy-redis spiders idle forever instead
(its PR #193 added MAX_IDLE_TIME_BEFORE_CLOSE).

:class:`Termination` is fed the reports and totals (from ``RedisIO.view``)
and answers True once; it keeps no clock and makes no call.
"""

from __future__ import annotations

from typing import Mapping, Protocol

__all__ = ["Termination", "TotalsLike"]


class TotalsLike(Protocol):
    accepted: int
    queued: int

    @property
    def done(self) -> int: ...

    def key(self) -> tuple: ...


class Termination:
    """The two-wave end-of-crawl detector."""

    def __init__(self) -> None:
        self._mark_seqs: dict[str, int] | None = None
        self._mark_members: frozenset[str] = frozenset()
        self._mark_totals: tuple | None = None
        self.waves = 0  # consecutive quiet waves seen (for the dashboard and the tests)

    @staticmethod
    def quiet(members: frozenset[str], reports: Mapping[str, tuple[int, bool]], totals: TotalsLike) -> bool:
        """Every member idle and the counters balanced with nothing queued."""
        return (bool(members) and all(m in reports and reports[m][1] for m in members)
                and totals.queued == 0 and totals.accepted == totals.done)

    def observe(self, members: frozenset[str], reports: Mapping[str, tuple[int, bool]], totals: TotalsLike) -> bool:
        """One look at the crawl; True when it has ended.

        ``reports``: worker → (report sequence, idle), the sequence growing
        with each of its heartbeats.
        """
        members = frozenset(members)
        seqs = {m: reports[m][0] for m in members if m in reports}
        if not self.quiet(members, reports, totals):
            self._restart(None, members, seqs)
            return False
        key = totals.key()
        if self._mark_totals is None or key != self._mark_totals or members != self._mark_members:
            self._restart(key, members, seqs)
            self.waves = 1
            return False
        assert self._mark_seqs is not None
        if all(seqs[m] > self._mark_seqs.get(m, seqs[m]) for m in members):
            self.waves = 2
            return True
        return False  # the wave is not complete yet: some member has not reported again

    def _restart(self, key: tuple | None, members: frozenset[str], seqs: dict[str, int]) -> None:
        self._mark_totals = key
        self._mark_members = members
        self._mark_seqs = dict(seqs)
        self.waves = 0
