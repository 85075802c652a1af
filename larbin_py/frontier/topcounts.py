"""The ``n`` largest counts by key, kept as they grow: the stats' busiest and failing hosts.

The frontier updates two tables per outcome (pages fetched per site, errors
per site); its stats read them in O(n) whatever the number of sites, and
the tables outlive the sites pruning drops.  Plain data, no I/O.
"""

from __future__ import annotations

__all__ = ["TopCounts"]


class TopCounts:
    """The ``n`` largest counts by key, kept as they grow (the stats' busiest/failing hosts).

    An update of a key already listed, or of one whose count does not pass
    the smallest listed, costs a dict lookup and a comparison; only a key
    that enters the table costs a scan of its ``n`` entries.  A key's count
    is the largest it was given (a pruned site made again restarts lower).
    """

    __slots__ = ("n", "counts", "_floor")

    def __init__(self, n: int = 10) -> None:
        self.n = n
        self.counts: dict[str, int] = {}
        self._floor = 0  # at most the smallest listed count once full

    def update(self, key: str, count: int) -> None:
        counts = self.counts
        old = counts.get(key)
        if old is not None:
            if count > old:
                counts[key] = count
            return
        if len(counts) < self.n:
            counts[key] = count
            return
        if count <= self._floor:
            return
        low = min(counts, key=counts.__getitem__)
        if count <= counts[low]:
            self._floor = counts[low]
            return
        del counts[low]
        counts[key] = count
        self._floor = min(counts.values())

    def top(self) -> list[tuple[str, int]]:
        """``(key, count)`` pairs, largest first."""
        return sorted(self.counts.items(), key=lambda kv: kv[1], reverse=True)
