"""Injectable faults of the sim's HTTP server.

A :class:`Fault` names a misbehaviour, a rate and a target.  *Transient*
faults draw independently per request from one seeded RNG (so a retry may
succeed); *permanent* ones are decided once per URL by a seeded hash (the same
URL always fails the same way, and :mod:`larbin_py.sim.truth` can know it).

Kinds:

========== ===========================================================
latency    answer after ``delay`` s: a float, ``(lo, hi)`` (uniform), or
           ``f(rng) -> seconds`` (any distribution, e.g. ``lambda r: r.expovariate(20)``)
404 410    that status
500 503    that status; 503 carries ``Retry-After: retry_after``
429        429 with ``Retry-After: retry_after``
reset      the connection is reset (RST) before any byte of the answer
close      headers and half the body are sent, then the connection closes
stall      nothing is ever answered on that connection
drip       the answer trickles: ``drip_bytes`` every ``delay`` s
huge       a 200 HTML body of ``size`` bytes (over a crawler's size cap)
========== ===========================================================

A fault applies to ``/robots.txt`` only when ``robots=True`` or the robots
URL is listed in ``urls``.
"""

from __future__ import annotations

import hashlib
import re
import random
from dataclasses import dataclass
from typing import Callable

STATUS_KINDS = {"404": 404, "410": 410, "500": 500, "503": 503, "429": 429}
TERMINAL_KINDS = frozenset(STATUS_KINDS) | {"reset", "close", "stall", "drip", "huge"}
KINDS = TERMINAL_KINDS | {"latency"}

# The reason a correct crawler ends a URL with under a permanent fault (None:
# the page is still fetched normally).  429 is retried like a 5xx (the server
# asks to slow down) and a body cut by a close is a reset connection: both are
# retried, and end with these reasons once the retries run out.
PERMANENT_REASON = {
    "404": "err40X", "410": "err40X", "429": "err50X", "500": "err50X", "503": "err50X",
    "reset": "reset", "close": "reset", "stall": "timeout", "huge": "tooBig",
    "drip": None, "latency": None,
}


@dataclass(frozen=True)
class Fault:
    """One fault rule; see the module docstring for ``kind``."""

    kind: str
    rate: float
    hosts: frozenset[str] | set[str] | None = None
    urls: frozenset[str] | set[str] | None = None
    transient: bool = True
    robots: bool = False
    delay: float | tuple[float, float] | Callable[[random.Random], float] = 0.05
    retry_after: int = 1
    size: int = 4 * 1024 * 1024
    drip_bytes: int = 64

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"unknown fault kind {self.kind!r}")
        if not 0.0 <= self.rate <= 1.0:
            raise ValueError("fault rate must be within [0, 1]")

    def targets(self, url: str, host: str, is_robots: bool) -> bool:
        if self.urls is not None:
            return url in self.urls
        if is_robots and not self.robots:
            return False
        return self.hosts is None or host in self.hosts

    def pick_delay(self, rng: random.Random) -> float:
        d = self.delay
        if callable(d):
            return float(d(rng))
        return rng.uniform(*d) if isinstance(d, tuple) else float(d)


@dataclass(frozen=True, slots=True)
class Decision:
    """What the server does for one request: extra delay and a terminal fault."""

    delay: float = 0.0
    fault: Fault | None = None
    applied: tuple[str, ...] = ()


NO_FAULT = Decision()


_PORT = re.compile(r"^(https?://[^/:?#]+):\d+")


def _unit(seed: int, index: int, url: str) -> float:
    # the port is left out: the server's port changes from run to run, and
    # the same seed must give the same permanent faults (and ground truth)
    url = _PORT.sub(r"\1", url, count=1)
    h = hashlib.blake2b(f"{seed}|{index}|{url}".encode(), digest_size=8).digest()
    return int.from_bytes(h, "big") / 2.0 ** 64


class FaultPlan:
    """Decides, per request, which faults apply (seeded, reproducible)."""

    def __init__(self, faults: list[Fault] | tuple[Fault, ...] = (), seed: int = 0):
        self.faults = tuple(faults)
        self.seed = seed
        self.rng = random.Random(f"faults:{seed}")

    def __bool__(self) -> bool:
        return bool(self.faults)

    def decide(self, url: str, host: str, is_robots: bool = False) -> Decision:
        """The faults for one request of canonical ``url`` on ``host``."""
        if not self.faults:
            return NO_FAULT
        delay, terminal, applied = 0.0, None, []
        for i, f in enumerate(self.faults):
            if not f.targets(url, host, is_robots):
                continue
            if f.transient:
                hit = self.rng.random() < f.rate
            else:
                hit = _unit(self.seed, i, url) < f.rate
            if not hit:
                continue
            if f.kind == "latency":
                delay += f.pick_delay(self.rng)
                applied.append("latency")
            elif terminal is None:
                terminal = f
                applied.append(f.kind)
        return Decision(delay, terminal, tuple(applied)) if applied else NO_FAULT

    def permanent(self, url: str, host: str, is_robots: bool = False) -> Fault | None:
        """The permanent terminal fault of ``url``, if any (no RNG consumed)."""
        for i, f in enumerate(self.faults):
            if (not f.transient and f.kind != "latency" and f.targets(url, host, is_robots)
                    and _unit(self.seed, i, url) < f.rate):
                return f
        return None
