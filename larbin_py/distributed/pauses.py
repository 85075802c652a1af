"""How long Redis's failures paused a worker (sans-I/O: times are arguments).

A tick Redis fails (unreachable, or an error reply) pauses the worker until
a tick succeeds (the coordinator; docs/distributed-worker.md).  :class:`Pauses`
keeps the pause under way -- its start, its kind (``connection``, ``OOM``,
``LOADING``..., :attr:`RedisFailed.kind <larbin_py.distributed.redisio.RedisFailed.kind>`)
and its message -- and the totals: seconds by kind and the number of
pauses.  A pause whose failure changes kind (Redis restarting answers
``connection`` then ``LOADING``) is one pause, its seconds split by kind.
The seconds of ended stretches are reported as deltas to the crawl's
``figures`` hash (:meth:`to_report`, :meth:`reported`), so a dead
worker's seconds stay counted and a respawn adds to them.
"""

from __future__ import annotations

from collections import defaultdict

__all__ = ["Pauses"]


class Pauses:
    """The pause under way and the totals (see the module docstring)."""

    def __init__(self) -> None:
        #: The failure under way, in one line (None: Redis answers).
        self.down: str | None = None
        self.since: float | None = None
        self.kind: str | None = None
        self.total = 0.0
        self.by_kind: dict[str, float] = defaultdict(float)
        self.count = 0
        self._reported: dict[str, float] = defaultdict(float)

    def failed(self, kind: str, message: str, now: float) -> bool:
        """A tick failed with ``kind``: True when that is news (a new pause, or a new kind: say it)."""
        if self.since is None:
            self.since = now
            self.count += 1
        elif kind != self.kind:
            self._close(now)
            self.since = now
        news = kind != self.kind
        self.kind = kind
        self.down = message
        return news

    def resumed(self, now: float) -> tuple[float, str]:
        """A tick succeeded: ``(seconds the pause lasted, its last kind)``."""
        lasted = now - self.since if self.since is not None else 0.0
        kind = self.kind or "error"
        self.by_kind[kind] += lasted
        self.total += lasted
        self.down = self.kind = self.since = None
        return lasted, kind

    def _close(self, now: float) -> None:
        self.by_kind[self.kind] += now - self.since
        self.total += now - self.since

    def figures(self, now: float) -> dict:
        """``{"seconds", "pauses", "by_kind"}``, the pause under way included."""
        by_kind = dict(self.by_kind)
        total = self.total
        if self.since is not None:
            by_kind[self.kind] = by_kind.get(self.kind, 0.0) + now - self.since
            total += now - self.since
        return {"seconds": round(total, 3), "pauses": self.count,
                "by_kind": {k: round(v, 3) for k, v in sorted(by_kind.items())}}

    def to_report(self) -> dict[str, float]:
        """Seconds by kind of the stretches ended since the last report."""
        return {k: v - self._reported[k] for k, v in self.by_kind.items() if v - self._reported[k] > 0}

    def reported(self, paused: dict[str, float]) -> None:
        for k, v in paused.items():
            self._reported[k] += v
