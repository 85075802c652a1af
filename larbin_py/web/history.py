"""Time series of the crawl: Larbin's histograms, kept in ring buffers.

:class:`StatsHistory` samples ``source.snapshot()`` once every ``every``
seconds with a single loop timer and keeps the last ``keep`` samples of:
unix time, pages/s, bytes/s, forgotten URLs/s by reason, smoothed RTT,
flow control's request cap and open connections.  Rates are deltas of the
snapshot's counters over the monotonic time between samples.

:meth:`StatsHistory.sample` can be called directly (tests drive it without a
timer).  :meth:`StatsHistory.to_json` is cached until the next sample, so the
dashboard polling it costs one string copy, not an encoding.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import deque
from typing import Any, Callable

from .source import StatsSource

__all__ = ["StatsHistory", "SERIES"]

#: The plain numeric series (besides the per-reason ``errors`` mapping).
SERIES = ("time", "pages_rate", "bytes_rate", "srtt", "max_requests", "open_connections")


def _num(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return value


class StatsHistory:
    """Ring buffers of the crawl's rates, one sample per ``every`` seconds."""

    def __init__(
        self,
        source: StatsSource,
        *,
        every: float = 1.0,
        keep: int = 600,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if every <= 0 or keep < 1:
            raise ValueError("every must be > 0 and keep >= 1")
        self.source = source
        self.every = every
        self.keep = keep
        self._clock = clock
        self.series: dict[str, deque] = {name: deque(maxlen=keep) for name in SERIES}
        self.errors: dict[str, deque] = {}
        self._last: tuple[float, int, int, dict[str, int]] | None = None
        self._json: str | None = None
        self._handle: asyncio.TimerHandle | None = None
        self._next = 0.0

    def __len__(self) -> int:
        return len(self.series["time"])

    def sample(self) -> None:
        """Take one sample now (rates relative to the previous sample)."""
        snap = self.source.snapshot()
        now = self._clock()
        pages = snap.get("pages") or {}
        urls = snap.get("urls") or {}
        fetched = int(pages.get("fetched") or 0)
        nbytes = int(pages.get("bytes") or 0)
        forgotten = {str(k): int(v) for k, v in (urls.get("forgotten") or {}).items()}
        last = self._last
        if last is None:
            pages_rate = _num(pages.get("rate_now")) or 0.0
            bytes_rate = _num(pages.get("bytes_rate_now")) or 0.0
            err_rates: dict[str, float] = {}
        else:
            dt = max(now - last[0], 1e-9)
            pages_rate = max(fetched - last[1], 0) / dt
            bytes_rate = max(nbytes - last[2], 0) / dt
            err_rates = {
                r: max(n - last[3].get(r, 0), 0) / dt for r, n in forgotten.items()
            }
        self._last = (now, fetched, nbytes, forgotten)

        length = len(self.series["time"])
        for reason in err_rates:
            if reason not in self.errors:
                self.errors[reason] = deque([0.0] * length, maxlen=self.keep)
        for reason, buf in self.errors.items():
            buf.append(round(err_rates.get(reason, 0.0), 3))

        flow = snap.get("flow") or {}
        conns = snap.get("connections") or {}
        s = self.series
        s["time"].append(round(float(snap.get("time") or time.time()), 3))
        s["pages_rate"].append(round(pages_rate, 3))
        s["bytes_rate"].append(round(bytes_rate, 1))
        srtt = _num(flow.get("srtt"))
        s["srtt"].append(None if srtt is None else round(srtt, 6))
        s["max_requests"].append(_num(flow.get("max_requests")))
        s["open_connections"].append(_num(conns.get("open")))
        self._json = None

    def as_dict(self) -> dict:
        """The series as lists: ``{"every", "time", ..., "errors": {reason: [...]}}``."""
        out: dict[str, Any] = {"every": self.every}
        for name, buf in self.series.items():
            out[name] = list(buf)
        out["errors"] = {r: list(buf) for r, buf in sorted(self.errors.items())}
        return out

    def to_json(self) -> str:
        """:meth:`as_dict` encoded as compact JSON, cached until the next sample."""
        if self._json is None:
            self._json = json.dumps(self.as_dict(), separators=(",", ":"), allow_nan=False)
        return self._json

    # -- the timer ---------------------------------------------------------

    def start(self) -> None:
        """Sample now, then every ``every`` seconds on the running loop."""
        if self._handle is not None:
            return
        loop = asyncio.get_running_loop()
        self._next = loop.time()
        self._tick(loop)

    def _tick(self, loop: asyncio.AbstractEventLoop) -> None:
        try:
            self.sample()
        except Exception:  # a failing source must not kill the timer
            pass
        # Fixed cadence without drift; skip missed slots after a stall.
        self._next += self.every
        now = loop.time()
        if self._next < now:
            self._next = now + self.every
        self._handle = loop.call_at(self._next, self._tick, loop)

    def stop(self) -> None:
        """Cancel the timer (the buffers stay readable)."""
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
