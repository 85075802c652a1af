"""Larbin's input port: a plain TCP line protocol to feed URLs to the crawl.

A client sends URLs, one per line (``\\n`` or ``\\r\\n``); each non-empty
line is answered, in order, with one line::

    accepted
    duplicate
    rejected <reason>

Every complete line in one read is handed to ``source.submit_urls`` in a
single call.  When a token is required (always when bound to a non-loopback
address, and whenever one is configured) the first line must be
``token <t>``: answered ``ok``, or ``rejected badToken`` and the connection
closed.  A line longer than ``max_line`` bytes is answered ``rejected
lineTooLong`` and the connection closed.  Connections silent for
``idle_timeout`` seconds are closed by one periodic sweep; at most
``max_connections`` are open (the least recently active one makes room).

A line that looks like HTTP -- a request line (``POST / HTTP/1.1``) or a
header line (``Host: ...``, :func:`~.guard.looks_like_http`) -- is
answered ``rejected httpRequest`` and the connection closed: a web page
can make the operator's browser POST a form to this port, and the body's
lines would be taken as URLs, but the request line comes first, so
nothing the browser sends is admitted.  The lines before it (in this read
or an earlier one) are answered as usual, whatever the TCP segments: the
protocol is one line at a time, in order.  Such connections are counted
(``counters["http_refused"]``) and logged in one line (at most one every
10 s, the others counted in it).  An http(s) URL never looks so: it
holds no space, and its scheme is followed by ``://``.

Lines are read as UTF-8 with replacement, never parsed further: no line,
however long, nested or binary, can fail the server; should the crawl
fail to take URLs, they are answered ``rejected internalError`` and the
error logged as one line (``log``, stderr by default).
"""

from __future__ import annotations

import asyncio
import hmac
import sys
import time
from collections import OrderedDict
from typing import Callable

from ..frontier.addresses import is_loopback
from .guard import RefusalLog, looks_like_http, shown
from .source import StatsSource

__all__ = ["InputServer", "verdict_line"]


def verdict_line(verdict: dict) -> bytes:
    """One answer line for a ``submit_urls`` verdict (ends with ``\\n``)."""
    result = verdict.get("result")
    if result in ("accepted", "duplicate"):
        return result.encode() + b"\n"
    reason = verdict.get("reason") or "unknown"
    reason = "".join(ch if ch.isprintable() and not ch.isspace() else "_" for ch in str(reason))
    return b"rejected " + reason.encode("utf-8", "replace") + b"\n"


def _stderr_line(message: str) -> None:
    print(f"larbin_py: {message}", file=sys.stderr, flush=True)


class InputServer:
    """The URL input port; see the module docstring."""

    def __init__(
        self,
        source: StatsSource,
        *,
        host: str = "127.0.0.1",
        port: int,
        token: str | None = None,
        max_line: int = 8192,
        idle_timeout: float = 30.0,
        max_connections: int = 64,
        clock: Callable[[], float] = time.monotonic,
        log: Callable[[str], None] | None = None,
    ) -> None:
        if not token and not is_loopback(host):
            raise ValueError(
                f"refusing to open the input port on non-loopback address {host!r} "
                "without a token (set httpToken)"
            )
        self.source = source
        self.host = host
        self._port = port
        self._token = token.encode() if token else None
        self.max_line = max_line
        self.idle_timeout = idle_timeout
        self.max_connections = max_connections
        self.clock = clock
        self.log = log if log is not None else _stderr_line
        self.refusals = RefusalLog(self.log, clock=clock)
        self.counters = {"http_refused": 0}
        self._conns: OrderedDict[_LineProtocol, None] = OrderedDict()
        self._server: asyncio.AbstractServer | None = None
        self._sweeper: asyncio.TimerHandle | None = None

    @property
    def port(self) -> int:
        """The bound port (the real one when constructed with port=0)."""
        return self._port

    async def start(self) -> None:
        """Bind and start the idle sweep."""
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            lambda: _LineProtocol(self), self.host, self._port, backlog=256
        )
        self._port = self._server.sockets[0].getsockname()[1]
        self._schedule(loop)

    async def close(self) -> None:
        """Stop listening and close every connection."""
        if self._sweeper is not None:
            self._sweeper.cancel()
            self._sweeper = None
        if self._server is not None:
            self._server.close()
        for conn in list(self._conns):
            conn.close()
        if self._server is not None:
            await self._server.wait_closed()
            self._server = None

    def _schedule(self, loop: asyncio.AbstractEventLoop) -> None:
        interval = min(max(self.idle_timeout / 4, 0.02), 1.0)
        self._sweeper = loop.call_later(interval, self._sweep, loop)

    def _sweep(self, loop: asyncio.AbstractEventLoop) -> None:
        limit = self.clock() - self.idle_timeout
        for conn in [c for c in self._conns if c.last < limit]:
            conn.close()
        self._schedule(loop)

    def _check_token(self, line: bytes) -> bool:
        word, _, given = line.partition(b" ")
        assert self._token is not None
        return word == b"token" and hmac.compare_digest(given.strip(), self._token)


class _LineProtocol(asyncio.Protocol):
    def __init__(self, server: InputServer) -> None:
        self.server = server
        self.transport: asyncio.Transport | None = None
        self.buffer = bytearray()
        self.last = server.clock()
        self.authed = server._token is None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        conns = self.server._conns
        if len(conns) >= self.server.max_connections:
            next(iter(conns)).close()
        conns[self] = None

    def connection_lost(self, exc: Exception | None) -> None:
        self.server._conns.pop(self, None)
        self.transport = None

    def pause_writing(self) -> None:
        if self.transport is not None:
            self.transport.pause_reading()

    def resume_writing(self) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.resume_reading()

    def data_received(self, data: bytes) -> None:
        if self.transport is None or self.transport.is_closing():
            return  # refused and closing: nothing more is read
        self.last = self.server.clock()
        self.server._conns.move_to_end(self)
        self.buffer += data
        end = self.buffer.rfind(b"\n")
        if end < 0:
            if len(self.buffer) > self.server.max_line:
                self._fail(b"rejected lineTooLong\n")
            return
        chunk = bytes(self.buffer[:end])
        del self.buffer[: end + 1]
        lines = [line.strip() for line in chunk.split(b"\n")]
        out: list[bytes] = []
        if not self.authed:
            first = next((i for i, line in enumerate(lines) if line), None)
            if first is None:
                return
            if looks_like_http(lines[first]):
                self._refuse_http(lines[first])
                return
            if not self.server._check_token(lines[first]):
                self._fail(b"rejected badToken\n")
                return
            self.authed = True
            out.append(b"ok\n")
            lines = lines[first + 1:]
        # Answer the good lines before the first bad one (too long, or HTTP), then close.
        for i, line in enumerate(lines):
            if len(line) > self.server.max_line:
                out += self._submit(lines[:i])
                self._fail(b"".join(out) + b"rejected lineTooLong\n")
                return
            if looks_like_http(line):
                out += self._submit(lines[:i])
                self._refuse_http(line, b"".join(out))
                return
        if len(self.buffer) > self.server.max_line:
            out += self._submit(lines)
            self._fail(b"".join(out) + b"rejected lineTooLong\n")
            return
        out += self._submit(lines)
        if out and self.transport is not None:
            self.transport.write(b"".join(out))

    def _submit(self, lines: list[bytes]) -> list[bytes]:
        urls = [line.decode("utf-8", "replace") for line in lines if line]
        if not urls:
            return []
        try:
            verdicts = self.server.source.submit_urls(urls)
        except Exception as exc:
            self.server.log(f"input port: {len(urls)} URLs not taken: {type(exc).__name__}: {exc}")
            return [b"rejected internalError\n"] * len(urls)
        return [verdict_line(v) for v in verdicts]

    def _refuse_http(self, line: bytes, before: bytes = b"") -> None:
        """``line`` is HTTP (a browser?): refuse it, count, log, close."""
        server = self.server
        server.counters["http_refused"] += 1
        peer = self.transport.get_extra_info("peername") if self.transport is not None else None
        who = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else "a client"
        server.refusals.refused("http", f"input port: closed the connection of {who}: it sent HTTP "
                                        f"({shown(line, 80)}), not URL lines; nothing from this line on was taken")
        self._fail(before + b"rejected httpRequest\n")

    def _fail(self, message: bytes) -> None:
        if self.transport is not None:
            self.transport.write(message)
        self.close()

    def close(self) -> None:
        self.server._conns.pop(self, None)
        if self.transport is not None:
            self.transport.close()
