"""A token bucket capping the bytes/s read across all of a fetcher's connections.

Reads cannot be refused after the fact, so the bucket goes into debt: each
``consume(n)`` subtracts ``n``; when the balance drops to zero or below, the
owner's ``pause`` callback stops every connection from reading, and ONE timer
(``loop.call_later``) fires when the debt is repaid at ``rate`` bytes/s, then
``resume`` restarts them.  The burst is ``rate / 10`` (100 ms worth), so over
any window longer than a few tenths of a second the throughput stays at or
under ``rate`` (plus one read-buffer of overshoot).
"""

from __future__ import annotations

import asyncio
import time
from typing import Callable

from ..loopclock import clock_step

__all__ = ["TokenBucket"]


class TokenBucket:
    """Shared bytes/s limiter; see the module docstring."""

    __slots__ = ("rate", "burst", "tokens", "_last", "_clock", "_loop", "_timer",
                 "_pause", "_resume", "paused")

    def __init__(self, rate: int, *, pause: Callable[[], None], resume: Callable[[], None],
                 loop: asyncio.AbstractEventLoop, clock: Callable[[], float] = time.monotonic) -> None:
        self.rate = float(rate)
        self.burst = max(1.0, self.rate / 10.0)
        self.tokens = self.burst
        self._clock = clock
        self._last = clock()
        self._loop = loop
        self._timer: asyncio.TimerHandle | None = None
        self._pause = pause
        self._resume = resume
        self.paused = False

    def _refill(self) -> None:
        now = self._clock()
        self.tokens = min(self.burst, self.tokens + (now - self._last) * self.rate)
        self._last = now

    def consume(self, n: int) -> None:
        """Account ``n`` bytes just read; pause everyone if now in debt."""
        self._refill()
        self.tokens -= n
        if self.tokens <= 0 and not self.paused:
            self.paused = True
            self._pause()
            self._timer = self._loop.call_later((1.0 - self.tokens) / self.rate + clock_step(self._loop), self._tick)

    def _tick(self) -> None:
        self._timer = None
        self._refill()
        if self.tokens > 0:
            self.paused = False
            self._resume()
        else:
            self._timer = self._loop.call_later((1.0 - self.tokens) / self.rate + clock_step(self._loop), self._tick)

    def close(self) -> None:
        """Cancel the timer (the fetcher is closing)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
