"""When the crawl loop and its writer thread stay on one core (``cpuAffinity auto``): the policy.

The loop thread and the writer thread hand the GIL to each other thousands
of times a second (every disk call of the writer lets the loop run, and
back).  On two cores each hand-over wakes a thread on the other core:
measured on 2026-11-28 (docs/benchmarks.md), the writer was scheduled
10,200 times in a recrawl of 5,260 requests, against 3,100 with both
threads kept on one core, and the recrawl took a fifth to a third more
CPU.  So with ``cpuAffinity auto`` both threads are pinned to the core the
loop runs on at the start
(larbin_py.core_pin does it; the analysis processes, Chromium and the
process's other threads keep every core).

A pinned thread cannot move when another program takes its core.  This
policy watches for that: every :data:`WINDOW` seconds it is told how long
the loop thread has waited for its core (the kernel's run delay), and when
that is more than :data:`BUSY` of the window the threads are freed (the
kernel places them again) for a *rest* that starts at :data:`REST` seconds
and doubles at each release, up to :data:`MAX_REST`; after the rest they
are pinned again to the core the loop is on then.  A pinned stretch of
:data:`CALM` seconds with no release brings the rest back to :data:`REST`.
The loop waits a little even on a core of its own: the writer shares it
(0.17 of the time in a recrawl against a local nginx, 2026-11-28); a
second program that wants the core all the time makes it about half.

Sans-I/O: :meth:`CorePolicy.observe` takes the time and the loop's total
run delay (seconds, as ``/proc/thread-self/schedstat`` counts it) and
returns what to do (:data:`PIN`, :data:`FREE` or None); the states change
only through :data:`CORE_TRANSITIONS`.
"""

from __future__ import annotations

from .transitions import step

__all__ = ["BUSY", "CALM", "CORE_TRANSITIONS", "CorePolicy", "FREE", "MAX_REST", "PIN", "REST", "WINDOW"]

#: Seconds between two looks at the loop's run delay.
WINDOW = 2.0
#: The share of a window the loop may wait for its core before the threads are freed.
BUSY = 0.35
#: Seconds the threads stay free after the first release (doubled at each release).
REST = 10.0
#: The longest rest.
MAX_REST = 300.0
#: Seconds pinned without a release after which the rest is back to :data:`REST`.
CALM = 60.0

#: The actions :meth:`CorePolicy.observe` returns.
PIN, FREE = "pin", "free"

#: ``(state, event) -> state``: ``pinned`` (the two threads on one core) or ``free``.
CORE_TRANSITIONS = {
    ("pinned", "calm"): "pinned",
    ("pinned", "busy"): "free",
    ("free", "resting"): "free",
    ("free", "rested"): "pinned",
}


class CorePolicy:
    """Pinned or free, and when to change (see the module docstring).

    ``start(now, delay)`` begins pinned (the caller has pinned the threads);
    then ``observe(now, delay)`` as often as the caller likes: a window is
    judged once :data:`WINDOW` seconds have passed since the last judgement.
    """

    __slots__ = ("window", "busy", "rest", "max_rest", "calm", "state", "releases", "next_rest",
                 "_t0", "_d0", "_pinned_at", "_free_until", "last_share")

    def __init__(self, *, window: float = WINDOW, busy: float = BUSY, rest: float = REST,
                 max_rest: float = MAX_REST, calm: float = CALM) -> None:
        self.window, self.busy, self.rest, self.max_rest, self.calm = window, busy, rest, max_rest, calm
        self.state = "pinned"
        #: Times the threads were freed because their core was taken.
        self.releases = 0
        self.next_rest = rest
        self._t0 = self._d0 = 0.0
        self._pinned_at = 0.0
        self._free_until = 0.0
        #: The share of the last judged window the loop waited for its core.
        self.last_share = 0.0

    def start(self, now: float, delay: float) -> None:
        self.state = "pinned"
        self._t0, self._d0, self._pinned_at = now, delay, now

    def observe(self, now: float, delay: float) -> str | None:
        """``delay``: the loop thread's total run delay so far (seconds).  Returns
        :data:`FREE` (free both threads), :data:`PIN` (pin both to the loop's core now)
        or None (nothing to change)."""
        if self.state == "free":
            if now < self._free_until:
                self.state = step(CORE_TRANSITIONS, self.state, "resting", "cpu affinity")
                return None
            self.state = step(CORE_TRANSITIONS, self.state, "rested", "cpu affinity")
            self._t0, self._d0, self._pinned_at = now, delay, now
            return PIN
        elapsed = now - self._t0
        if elapsed < self.window:
            return None
        share = max(0.0, delay - self._d0) / elapsed
        self.last_share = share
        self._t0, self._d0 = now, delay
        if share <= self.busy:
            self.state = step(CORE_TRANSITIONS, self.state, "calm", "cpu affinity")
            if now - self._pinned_at >= self.calm:
                self.next_rest = self.rest
            return None
        self.state = step(CORE_TRANSITIONS, self.state, "busy", "cpu affinity")
        self.releases += 1
        self._free_until = now + self.next_rest
        self.next_rest = min(self.next_rest * 2, self.max_rest)
        return FREE

    @property
    def free_until(self) -> float:
        """When a freed pair may be pinned again."""
        return self._free_until
