"""Flow control from measured round-trip times (sans-I/O, injected time).

Two controllers, both fed with the round-trip time ``R`` of every response
(from sending the request to the end of the response headers):

:class:`RttController` — the global concurrency cap, ``MaxRequestCount``.
    A smoothed estimator ``S = (1 - alpha) * S + alpha * R``.  Every
    ``interval`` seconds the minimum and maximum of ``S`` are reset to the
    current ``S``; inside the interval they follow every new ``S``.  They tell
    how loaded the network and the servers are right now.  Then::

        if R < minimum or R < rtt_min:   MaxRequestCount += increase
        elif R > maximum or R > rtt_max: MaxRequestCount -= decrease

    clamped to ``[min_requests, max_requests]``.  ``R`` is compared with the
    minimum and maximum of the *previous* estimates, then ``S`` is updated.

    At most one step per round trip: after a step, the rule rests until ``S``
    seconds have passed (``S`` and the window keep following every answer).
    A step shows in ``R`` only one round trip later, through the requests it
    let start; stepping on every answer in between acts on the same stale
    news dozens of times, and the cap swings from one bound to the other
    (in a model of bench/flow_control.py: 2 to 44 and back every few seconds).
    This is TCP's rule of one window change per round trip.

:class:`ServerPace` — per-server frequency control.
    Each IP keeps its own smoothed RTT and the lowest it has seen (its
    unloaded round trip).  While the smoothed RTT is more than ``slow_ratio``
    times that floor -- the server slowed down -- the delay between two
    request starts to it is ``max(wait_duration, crawl_delay, rtt_factor *
    srtt)``; once it recovers, the plain politeness delay again.  That delay
    is multiplied by a *penalty* that 429 and 503 answers double
    (``Retry-After`` honoured, up to ``max_penalty``) and that decays back
    towards 1 after each success.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["RttController", "ServerPace"]


class RttController:
    """Adaptive ``MaxRequestCount`` from round-trip times; see the module docstring."""

    __slots__ = (
        "alpha", "interval", "rtt_min", "rtt_max", "increase", "decrease",
        "min_requests", "max_requests", "limit", "srtt", "window_min", "window_max",
        "_window_end", "_rest_until", "samples", "increases", "decreases",
    )

    @classmethod
    def from_config(cls, c) -> "RttController":
        """The controller of a crawl's configuration (flowControl's keys): it
        starts at its floor, ``min(minConnexions, pagesConnexions)``."""
        low = min(c.min_connexions, c.pages_connexions)
        return cls(alpha=c.rtt_alpha, interval=c.rtt_interval, rtt_min=c.rtt_min, rtt_max=c.rtt_max,
                   increase=c.conn_increase, decrease=c.conn_decrease, min_requests=low,
                   max_requests=c.pages_connexions, start=low)

    def __init__(
        self,
        *,
        alpha: float = 0.1,
        interval: float = 5.0,
        rtt_min: float = 0.05,
        rtt_max: float = 2.0,
        increase: int = 1,
        decrease: int = 2,
        min_requests: int = 1,
        max_requests: int = 100,
        start: int | None = None,
    ) -> None:
        if not 0 < alpha <= 1:
            raise ValueError("alpha must be in (0, 1]")
        if min_requests < 1 or max_requests < min_requests:
            raise ValueError("need 1 <= min_requests <= max_requests")
        self.alpha = alpha
        self.interval = interval
        self.rtt_min = rtt_min
        self.rtt_max = rtt_max
        self.increase = increase
        self.decrease = decrease
        self.min_requests = min_requests
        self.max_requests = max_requests
        self.limit = max(min_requests, min(max_requests, start if start is not None else min_requests))
        self.srtt: float | None = None
        self.window_min: float | None = None
        self.window_max: float | None = None
        self._window_end = float("-inf")
        self._rest_until = float("-inf")
        self.samples = 0
        self.increases = 0
        self.decreases = 0

    def observe(self, rtt: float, now: float) -> int:
        """Feed one round-trip time measured at ``now``; the new limit."""
        self.samples += 1
        if self.srtt is None:
            self.srtt = rtt
            self.window_min = self.window_max = rtt
            self._window_end = now + self.interval
            return self.limit
        if now >= self._window_end:
            self.window_min = self.window_max = self.srtt
            self._window_end = now + self.interval
        if now >= self._rest_until:
            new = self.limit
            if rtt < self.window_min or rtt < self.rtt_min:
                new = min(self.max_requests, self.limit + self.increase)
            elif rtt > self.window_max or rtt > self.rtt_max:
                new = max(self.min_requests, self.limit - self.decrease)
            if new != self.limit:
                if new > self.limit:
                    self.increases += 1
                else:
                    self.decreases += 1
                self.limit = new
                self._rest_until = now + self.srtt
        s = (1.0 - self.alpha) * self.srtt + self.alpha * rtt
        self.srtt = s
        if s < self.window_min:
            self.window_min = s
        if s > self.window_max:
            self.window_max = s
        return self.limit

    def state(self) -> dict:
        return {
            "srtt": self.srtt,
            "rtt_min": self.window_min,
            "rtt_max": self.window_max,
            "max_requests": self.limit,
        }


@dataclass(slots=True)
class ServerPace:
    """Per-IP pace: smoothed RTT and a 429/503 penalty; see the module docstring."""

    alpha: float = 0.2
    rtt_factor: float = 0.0  # 0 = the RTT never stretches the delay
    slow_ratio: float = 2.0
    max_penalty: float = 32.0
    decay: float = 0.8
    srtt: float | None = None
    floor: float | None = None  # lowest smoothed RTT seen: the unloaded round trip
    penalty: float = 1.0
    retry_until: float = 0.0

    def observe(self, rtt: float) -> None:
        self.srtt = rtt if self.srtt is None else (1.0 - self.alpha) * self.srtt + self.alpha * rtt
        if self.floor is None or self.srtt < self.floor:
            self.floor = self.srtt

    @property
    def slowed(self) -> bool:
        """True while the server answers markedly slower than its best."""
        return (self.srtt is not None and self.floor is not None
                and self.srtt > self.slow_ratio * self.floor)

    def success(self) -> None:
        """A normal answer: the penalty decays towards 1."""
        if self.penalty > 1.0:
            self.penalty = max(1.0, self.penalty * self.decay)

    def overloaded(self, now: float, retry_after: float | None) -> None:
        """A 429 or 503: double the penalty and honour ``Retry-After``."""
        self.penalty = min(self.max_penalty, self.penalty * 2.0)
        if retry_after is not None:
            self.retry_until = max(self.retry_until, now + retry_after)

    def delay(self, base: float) -> float:
        """Seconds between two request starts, for a base politeness delay."""
        d = base
        if self.rtt_factor and self.slowed:
            d = max(d, self.rtt_factor * self.srtt)
        return d * self.penalty

    def earliest(self, start: float, base: float) -> float:
        """When the next request may start after one that started at ``start``."""
        return max(start + self.delay(base), self.retry_until)
