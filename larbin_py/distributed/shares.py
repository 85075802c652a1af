"""Load-aware partitions: each worker's measured capacity, and the shares of the map (sans-I/O).

The partition map (:func:`~larbin_py.distributed.partition.assign`) gives
each worker a number of partitions; with ``partitionShares measured`` (the
default) that number follows what each worker was measured to get done, so
a worker on a small machine, or one starved of CPU, ends up with fewer
partitions (docs/distributed-design.md, "Load-aware partitions").  Seed
001's crawler does the same from each node's throughput smoothed over a
fixed window (its "water level").  Three parts, none doing I/O:

* :class:`LoadMeter` — one worker's own figures, sampled at each of its
  heartbeats: its **rate** (URLs done per second over a sliding window of
  ``window`` seconds), its **backlog** (URLs waiting in it: frontier and
  inbox) and its **capacity**: the rate of a window during which it never
  ran short of work (every sample's backlog at least :data:`BUSY_BACKLOG`).
  A worker short of work did what it was given, not what it could: its
  capacity stays the last one measured busy (None until then).  The
  heartbeat publishes the three (``loads``).
* :func:`rebalance` — the next shares from the current ones and the
  members' capacities: a share in proportion to capacity (a member whose
  capacity is not known yet keeps its share's worth), moving at most
  ``max_move`` partitions per call (bounded moves), and nothing at all while
  every worker is within ``hysteresis`` of its target (or one partition):
  measurement noise does not make the map flap; a move once started goes
  on to the target (``moving``).  Deterministic: the same
  inputs give the same shares on every machine.
* :func:`current` — the shares the map uses for the live members: the
  stored record's, members it does not name getting an equal part (a
  joiner starts equal), scaled to the ``partitions``.  Every worker reads
  the same record (``shares`` in Redis) and computes the same map from it.

Who writes the record: the live member first in name order (the others
only read), at its heartbeat, through a compare-and-set on the record's
epoch (``lb_shares``), so two workers that both believe they are first do
not both write.  Starting equal: no record, equal shares.

Limits: capacity is pages per second, and partitions carry unequal work
(host sizes follow a power law); shares even out the workers' *rates*, one
huge host stays one partition on one worker.  A crawl bound by politeness
(every site waiting its delay) does as many pages per partition on every
worker, so its shares do not move.
"""

from __future__ import annotations

import math
from collections import deque
from typing import Iterable, Mapping, NamedTuple

__all__ = ["Load", "LoadMeter", "rebalance", "current", "BUSY_BACKLOG", "MAX_MOVE_SHARE", "HYSTERESIS"]

#: A worker with fewer URLs waiting than this at a sample ran short of work.
BUSY_BACKLOG = 16
#: Most partitions one rebalance moves: this share of all partitions (at least 1).
MAX_MOVE_SHARE = 1 / 16
#: No share moves while every worker is within this fraction of its target.
HYSTERESIS = 0.2


class Load(NamedTuple):
    """One worker's measured figures (what its heartbeat publishes)."""

    rate: float  # URLs done per second over the window
    backlog: int  # URLs waiting in it at the last sample
    capacity: float | None  # URLs per second while it had work (None: never measured busy)


class LoadMeter:
    """A worker's rate, backlog and capacity, sampled at its heartbeats (see the module docstring).

    ``window``: seconds the rate is taken over; a capacity needs a window at
    least half full of samples that all had a backlog.
    """

    def __init__(self, window: float, *, busy_backlog: int = BUSY_BACKLOG) -> None:
        if window <= 0:
            raise ValueError("the window must be positive")
        self.window = float(window)
        self.busy_backlog = busy_backlog
        self._samples: deque[tuple[float, int, int]] = deque()  # (time, URLs done so far, backlog)
        self.capacity: float | None = None
        self.last = Load(0.0, 0, None)

    def sample(self, now: float, done: int, backlog: int) -> Load:
        """Record that ``done`` URLs were done in all by ``now`` with ``backlog`` waiting: the load."""
        s = self._samples
        s.append((now, done, backlog))
        while len(s) > 2 and s[1][0] <= now - self.window:
            s.popleft()  # keep one sample at or before the window's start
        t0, d0, _ = s[0]
        span = now - t0
        rate = (done - d0) / span if span > 0 else 0.0
        busy = len(s) >= 2 and span >= self.window / 2 and all(b >= self.busy_backlog for _t, _d, b in s)
        if busy:
            self.capacity = rate
        elif self.capacity is not None:  # short of work: at least what it did, and what it did busy
            self.capacity = max(self.capacity, rate)
        self.last = Load(rate, backlog, self.capacity)
        return self.last


def _largest_remainder(total: int, parts: Mapping[str, float]) -> dict[str, int]:
    """``total`` split in proportion to ``parts`` (non-negative, not all 0), in integers;
    ties to the first in name order."""
    s = float(sum(parts.values()))
    raw = {w: total * x / s for w, x in parts.items()}
    out = {w: int(math.floor(v)) for w, v in raw.items()}
    left = total - sum(out.values())
    for w in sorted(raw, key=lambda w: (-(raw[w] - out[w]), w))[:left]:
        out[w] += 1
    return out


def current(partitions: int, members: Iterable[str], shares: Mapping[str, int] | None) -> dict[str, int]:
    """The shares of the live ``members`` (integers summing to ``partitions``): the record's
    for the members it names, an equal part (``partitions / N``) for the others, scaled to
    ``partitions``.  No record: equal shares."""
    members = sorted(set(members))
    if not members:
        return {}
    equal = partitions / len(members)
    weights = {w: float(shares[w]) if shares and shares.get(w, 0) > 0 else equal for w in members}
    return _largest_remainder(partitions, weights)


def rebalance(partitions: int, members: Iterable[str], shares: Mapping[str, int] | None,
              capacities: Mapping[str, float | None], *, max_move: int | None = None,
              hysteresis: float = HYSTERESIS, moving: bool = False) -> dict[str, int]:
    """The next shares of ``members`` (integers summing to ``partitions``, each at least 1).

    The target of each member is its part of the total capacity; a member
    whose capacity is unknown (None or 0) counts the capacity per partition
    of the known ones times its share, so it keeps its share.  Nothing moves
    while every member is within ``hysteresis`` of its target (or one
    partition); otherwise at most ``max_move`` partitions (default
    :data:`MAX_MOVE_SHARE` of them) go from the members above their target
    to those below, none past its target.  ``moving``: the previous call
    moved partitions; the move goes on until every member is within one
    partition of its target (the hysteresis starts a move, it does not end
    one: a move cut at the band's edge would leave the shares where the
    least noise starts it again).
    """
    cur = current(partitions, members, shares)
    if len(cur) < 2:
        return cur
    if max_move is None:
        max_move = max(1, int(partitions * MAX_MOVE_SHARE))
    known = {w: float(c) for w, c in capacities.items() if w in cur and c is not None and c > 0}
    if not known:
        return cur
    per_share = sum(known.values()) / sum(cur[w] for w in known)
    cap = {w: known.get(w, cur[w] * per_share) for w in cur}
    total = sum(cap.values())
    target = {w: partitions * cap[w] / total for w in cur}
    dev = {w: target[w] - cur[w] for w in cur}
    band = 0.0 if moving else hysteresis
    if all(abs(d) <= max(1.0, band * target[w]) for w, d in dev.items()):
        return cur
    give = {w: int(math.floor(-d)) for w, d in dev.items() if d < 0 and cur[w] - math.floor(-d) >= 1}
    give = {w: min(g, cur[w] - 1) for w, g in give.items() if g > 0}
    take = {w: int(math.floor(d)) for w, d in dev.items() if d >= 1}
    m = min(max_move, sum(give.values()), sum(take.values()))
    if m <= 0:
        return cur
    out = dict(cur)
    for w, n in _bounded_split(m, give).items():
        out[w] -= n
    for w, n in _bounded_split(m, take).items():
        out[w] += n
    return out


def _bounded_split(m: int, room: Mapping[str, int]) -> dict[str, int]:
    """``m`` split over ``room`` in proportion to it, no one above its room (``m`` at most their sum)."""
    out = _largest_remainder(m, room) if m else {w: 0 for w in room}
    over = 0
    for w in out:
        if out[w] > room[w]:
            over += out[w] - room[w]
            out[w] = room[w]
    for w in sorted(room, key=lambda w: (-(room[w] - out[w]), w)):
        if over <= 0:
            break
        extra = min(over, room[w] - out[w])
        out[w] += extra
        over -= extra
    return out
