"""The sim's request log: every HTTP request and every connection, in memory.

:class:`RequestLog` is appended to by the server and read by tests:
``requests`` (one :class:`Request` per request, in arrival order) and
``connections`` (one :class:`Connection` per accepted connection, with open
and close times).  Helpers answer the questions end-to-end tests ask
(politeness: request start times per host and per IP; connection spans per
IP; how many connections one IP ever had open at once), and
:meth:`RequestLog.wait_for` lets a test wait on a condition with a timeout
instead of sleeping.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import asdict, dataclass
from typing import Callable


@dataclass(slots=True)
class Request:
    """One request as the server saw it.

    ``t`` is ``time.monotonic()`` when the request head was complete: when
    the kernel received its last bytes (``late``: how long before the server
    read them, 0.0 when under 10 ms; see :mod:`larbin_py.sim.server`),
    ``wall`` the same in ``time.time()``.  ``host`` is the Host header lower-cased without its port
    (``raw_host`` as sent).  ``status`` is the status served (0 when none was:
    reset, stall).  ``fault`` names the faults applied, '+'-joined, or "".
    """

    t: float
    wall: float
    conn: int
    client_port: int
    server_ip: str
    server_port: int
    host: str
    raw_host: str
    method: str
    target: str
    status: int
    fault: str = ""
    late: float = 0.0
    #: The request's headers but Host, ``(lower-case name, value)``, in order.
    headers: tuple[tuple[str, str], ...] = ()

    def header(self, name: str) -> str | None:
        """The value of header ``name`` (any case), or None."""
        name = name.lower()
        return next((v for n, v in self.headers if n == name), None)

    @property
    def url(self) -> str:
        port = "" if self.server_port == 80 else f":{self.server_port}"
        return f"http://{self.host}{port}{self.target}"

    @property
    def path(self) -> str:
        """The request target without its query."""
        return self.target.split("?", 1)[0]


@dataclass(slots=True)
class Connection:
    """One accepted connection: server IP, client port, open/close times."""

    id: int
    server_ip: str
    client_port: int
    opened: float
    closed: float | None = None
    requests: int = 0


class RequestLog:
    """In-memory record of the sim server's traffic."""

    def __init__(self) -> None:
        self.requests: list[Request] = []
        self.connections: dict[int, Connection] = {}
        self._waiters: list[tuple[Callable[["RequestLog"], bool], asyncio.Future]] = []

    # -- writers (server side) -------------------------------------------------
    def add(self, req: Request) -> None:
        self.requests.append(req)
        conn = self.connections.get(req.conn)
        if conn is not None:
            conn.requests += 1
        if self._waiters:
            self._wake()

    def open(self, conn: Connection) -> None:
        self.connections[conn.id] = conn
        if self._waiters:
            self._wake()

    def close(self, conn_id: int, when: float) -> None:
        conn = self.connections.get(conn_id)
        if conn is not None and conn.closed is None:
            conn.closed = when
        if self._waiters:
            self._wake()

    def _wake(self) -> None:
        keep = []
        for pred, fut in self._waiters:
            if fut.done():
                continue
            try:
                ok = pred(self)
            except Exception as exc:  # a broken predicate fails the waiting test
                fut.set_exception(exc)
                continue
            if ok:
                fut.set_result(None)
            else:
                keep.append((pred, fut))
        self._waiters = keep

    # -- waiting ---------------------------------------------------------------
    async def wait_for(self, pred: Callable[["RequestLog"], bool], timeout: float) -> None:
        """Return once ``pred(log)`` is true (checked on every log change).

        Raises ``TimeoutError`` after ``timeout`` seconds.
        """
        if pred(self):
            return
        fut = asyncio.get_running_loop().create_future()
        self._waiters.append((pred, fut))
        await asyncio.wait_for(fut, timeout)

    async def wait_requests(self, n: int, timeout: float) -> None:
        """Return once at least ``n`` requests were logged."""
        await self.wait_for(lambda log: len(log.requests) >= n, timeout)

    # -- queries ---------------------------------------------------------------
    def clear(self) -> None:
        self.requests.clear()
        self.connections.clear()

    def urls(self) -> list[str]:
        """Requested URLs (``http://host[:port]target``) in order."""
        return [r.url for r in self.requests]

    def by_host(self) -> dict[str, list[Request]]:
        out: dict[str, list[Request]] = {}
        for r in self.requests:
            out.setdefault(r.host, []).append(r)
        return out

    def starts_by_host(self) -> dict[str, list[float]]:
        """Monotonic request times per host name, sorted."""
        return {h: sorted(r.t for r in rs) for h, rs in self.by_host().items()}

    def by_ip(self) -> dict[str, list[Request]]:
        out: dict[str, list[Request]] = {}
        for r in self.requests:
            out.setdefault(r.server_ip, []).append(r)
        return out

    def starts_by_ip(self) -> dict[str, list[float]]:
        """Monotonic request times per server IP, sorted."""
        return {ip: sorted(r.t for r in rs) for ip, rs in self.by_ip().items()}

    def too_close(self, floor: float) -> list[tuple[str, str, Request, Request]]:
        """Consecutive requests to one host or one IP less than ``floor`` seconds
        apart: ``("host" | "IP", name, earlier, later)`` each (politeness checks)."""
        out = []
        for label, groups in (("host", self.by_host()), ("IP", self.by_ip())):
            for key, reqs in groups.items():
                reqs = sorted(reqs, key=lambda r: r.t)
                out.extend((label, key, a, b) for a, b in zip(reqs, reqs[1:]) if b.t - a.t < floor)
        return out

    @staticmethod
    def min_gap(times: list[float]) -> float:
        """Smallest gap between consecutive sorted times (inf if < 2)."""
        return min((b - a for a, b in zip(times, times[1:])), default=float("inf"))

    def spans_by_ip(self, now: float | None = None) -> dict[str, list[tuple[float, float]]]:
        """(opened, closed) of every connection per server IP; open ones end at ``now``."""
        end = time.monotonic() if now is None else now
        out: dict[str, list[tuple[float, float]]] = {}
        for c in self.connections.values():
            out.setdefault(c.server_ip, []).append(
                (c.opened, c.closed if c.closed is not None else end))
        return {ip: sorted(s) for ip, s in out.items()}

    def max_open_per_ip(self) -> dict[str, int]:
        """Most connections ever open at once, per server IP."""
        out = {}
        for ip, spans in self.spans_by_ip().items():
            events = sorted([(a, 1) for a, _ in spans] + [(b, -1) for _, b in spans],
                            key=lambda e: (e[0], e[1]))  # a close before an open at a tie
            cur = best = 0
            for _, d in events:
                cur += d
                best = max(best, cur)
            out[ip] = best
        return out

    def dump_jsonl(self, path: str) -> None:
        """Write one JSON object per line: connections first, then requests."""
        with open(path, "w", encoding="utf-8") as f:
            for c in self.connections.values():
                f.write(json.dumps({"type": "connection", **asdict(c)}) + "\n")
            for r in self.requests:
                f.write(json.dumps({"type": "request", **asdict(r)}) + "\n")
