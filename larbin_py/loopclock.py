"""The event loop's clock step: how early a timer may fire.

uvloop (libuv underneath) keeps time in whole milliseconds: ``loop.time()``
is the monotonic clock cut to the millisecond, and ``call_at(t)`` becomes a
libuv timer of ``round((t - loop.time()) * 1000)`` ms.  Its callback may
therefore run while ``loop.time()`` is still up to 1 ms short of ``t``.
Code that finds nothing due then and arms the same ``t`` again gets a timer
of 0 ms, and spins until the millisecond turns: about 140 wake-ups for one
wait of 0.5-5 ms on this machine (2026-11-26), which cost a distributed
worker, waiting on its IP leases most of the time, more CPU than its pages.
asyncio's own loops run a timer once ``loop.time()`` is within
``_clock_resolution`` (about 1 ns) of it.

:func:`clock_step` is what to add to a deadline so that ``loop.time()`` has
reached it when the callback runs.
"""

from __future__ import annotations

#: The step assumed for a loop that does not say (uvloop: milliseconds).
MILLISECOND = 0.001


def clock_step(loop) -> float:
    """Seconds a timer of ``loop`` may fire before its time (asyncio: its
    ``_clock_resolution``; uvloop and any other loop: 1 ms)."""
    res = getattr(loop, "_clock_resolution", None)
    return MILLISECOND if res is None else float(res)
