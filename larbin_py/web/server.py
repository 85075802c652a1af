"""The stats web server (Larbin's port 8081), on the crawl's own event loop.

An h11 server over a plain :class:`asyncio.Protocol`: every request is
answered synchronously from ``source.snapshot()`` (which is cheap), so a
request costs one snapshot and one JSON encoding, and never a task.

Routes::

    GET  /                 the dashboard (static HTML; no crawl data in it)
    GET  /dashboard.js     its script          GET /dashboard.css  its style
    GET  /stats.json       snapshot + "history"
    GET  /history.json     the time series only
    GET  /metrics          Prometheus text format 0.0.4
    GET  /healthz          "ok" (503 and the state when the crawl failed)
    POST /urls             URLs to crawl (when accept_urls), verdicts as JSON

Protection of the crawl (it shares the loop):

* headers are capped (``max_header_bytes``, 431 beyond), bodies too
  (``max_body_bytes``; a larger Content-Length is refused with 413 at once
  and the connection is closed after a short bounded drain, so the body is
  never held in memory);
* deadlines: a request's headers (and then its body) within
  ``header_timeout`` of its first byte (or of the connection), idle
  keep-alive connections closed after ``idle_timeout``; one periodic sweep
  checks every connection, no timer per connection;
* at most ``max_connections``: beyond it, the least recently active idle or
  silent connection is closed to make room, so silent clients cannot lock
  the page out;
* methods GET, HEAD and POST only (405 otherwise), back-pressure on slow
  readers (reading pauses while the write buffer is full).

Who may ask (``guard.py`` has the rules and why):

* every route answers only a ``Host`` naming this server (``localhost``,
  a loopback address, the bind address, the address the connection came
  in on, a name of ``hosts`` -- ``httpHosts``), any port; anything else
  gets ``421 Misdirected Request`` and no crawl data (DNS rebinding).
  ``/healthz`` too: a load balancer asking by the machine's name needs the
  name in ``httpHosts``.  A request without Host (HTTP/1.0) is answered;
* ``POST /urls`` from a page of another origin is refused ``403`` --
  ``Sec-Fetch-Site`` other than ``same-origin``/``none``, an ``Origin``
  other than ``http://`` + the request's Host, ``Origin: null`` -- token
  or not; without a token only ``application/json`` is taken (``415``
  otherwise), a type no cross-site page can send without a preflight the
  server never grants.  Refusals are logged, one line each, at most one
  per kind every 10 s (:class:`~.guard.RefusalLog`).

URL input is off unless ``accept_urls``.  Bound to a non-loopback address
a ``token`` is mandatory (:class:`ValueError` at construction, before
anything is bound): the stats name every URL and host of the crawl.  There
every route but ``/healthz`` needs the token, as ``Authorization: Bearer
<token>`` or HTTP Basic with the token as the password (so a browser asks
for it once and the dashboard's own requests carry it); on loopback only
``POST /urls`` needs it, when one is set.  Tokens are compared in constant
time.

A body ``POST /urls`` cannot use -- not UTF-8, not JSON, JSON nested past
what the decoder takes, not a list of strings, over ``max_body_bytes`` --
is answered 400 or 413 with the reason, and logged as one line (``log``,
stderr by default); so is any unexpected error, answered 500: no request
ends without an answer, nor with a traceback.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hashlib
import hmac
import json
import math
import sys
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from importlib import resources
from typing import Any, Callable, Iterable

import h11

from ..frontier.addresses import is_loopback
from .guard import HostPolicy, RefusalLog, cross_site_reason, shown
from .history import StatsHistory
from .metrics import CONTENT_TYPE as METRICS_CONTENT_TYPE
from .metrics import render_metrics
from .source import StatsSource

__all__ = ["Reply", "StatsServer", "json_bytes", "load_static"]

CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; frame-ancestors 'none'"
)
_COMMON_HEADERS = [
    (b"content-security-policy", CSP.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"server", b"larbin_py"),
]
TEXT = "text/plain; charset=utf-8"
JSON = "application/json; charset=utf-8"

_STATIC = {
    b"/": ("dashboard.html", "text/html; charset=utf-8"),
    b"/index.html": ("dashboard.html", "text/html; charset=utf-8"),
    b"/dashboard.js": ("dashboard.js", "text/javascript; charset=utf-8"),
    b"/dashboard.css": ("dashboard.css", "text/css; charset=utf-8"),
}


def _stderr_line(message: str) -> None:
    print(f"larbin_py: stats server: {message}", file=sys.stderr, flush=True)


def load_static(name: str) -> bytes:
    """Bytes of ``larbin_py/web/static/<name>`` via importlib.resources."""
    return resources.files("larbin_py.web").joinpath("static", name).read_bytes()


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def json_text(obj: Any) -> str:
    """Compact ASCII JSON; NaN/inf become null; ``<``, ``>``, ``&`` escaped."""
    try:
        text = json.dumps(obj, separators=(",", ":"), allow_nan=False)
    except ValueError:
        text = json.dumps(_finite(obj), separators=(",", ":"), allow_nan=False)
    # These characters only occur inside JSON strings, where \\uXXXX is valid.
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def json_bytes(obj: Any) -> bytes:
    """:func:`json_text` encoded (ASCII)."""
    return json_text(obj).encode("ascii")


@dataclass
class Reply:
    """One response: status, content type, body, extra headers, close flag."""

    status: int
    content_type: str = TEXT
    body: bytes = b""
    headers: list[tuple[bytes, bytes]] = field(default_factory=list)
    cache: bytes = b"no-store"
    close: bool = False


def _text(status: int, message: str, **kw: Any) -> Reply:
    return Reply(status, TEXT, (message + "\n").encode(), **kw)


def _header(request: h11.Request, name: bytes) -> bytes | None:
    for key, value in request.headers:
        if key == name:
            return value
    return None


def _headers(request: h11.Request, name: bytes) -> list[bytes]:
    return [value for key, value in request.headers if key == name]


class StatsServer:
    """The stats/dashboard HTTP server; see the module docstring."""

    def __init__(
        self,
        source: StatsSource,
        *,
        host: str = "127.0.0.1",
        port: int = 8081,
        token: str | None = None,
        hosts: Iterable[str] = (),
        accept_urls: bool = False,
        clock: Callable[[], float] = time.monotonic,
        header_timeout: float = 10.0,
        idle_timeout: float = 15.0,
        max_connections: int = 256,
        max_header_bytes: int = 64 * 1024,
        max_body_bytes: int = 1024 * 1024,
        history: StatsHistory | None = None,
        log: Callable[[str], None] | None = None,
    ) -> None:
        if not token and not is_loopback(host):
            what = "accept URLs" if accept_urls else "serve the crawl's stats"
            raise ValueError(
                f"refusing to {what} on non-loopback address {host!r} without a token "
                "(set httpToken)"
            )
        if max_connections < 1:
            raise ValueError("max_connections must be >= 1")
        self.source = source
        self.host = host
        #: the Host values answered (ValueError here for a bad name in ``hosts``)
        self.hosts = HostPolicy(host, hosts)
        self._port = port
        self._token = token.encode() if token else None
        #: beyond loopback every route but /healthz needs the token
        self.guard_all = self._token is not None and not is_loopback(host)
        self.log = log if log is not None else _stderr_line
        self.refusals = RefusalLog(self.log, clock=clock)
        self.accept_urls = accept_urls
        self.clock = clock
        self.header_timeout = header_timeout
        self.idle_timeout = idle_timeout
        self.max_connections = max_connections
        self.max_header_bytes = max_header_bytes
        self.max_body_bytes = max_body_bytes
        self.history = history if history is not None else StatsHistory(source)
        self.counters = {
            "requests": 0, "timeouts": 0, "evicted": 0, "too_large": 0, "errors": 0,
            "bad_requests": 0, "unauthorized": 0, "misdirected": 0, "cross_site": 0,
        }
        self._conns: OrderedDict[_HTTPProtocol, None] = OrderedDict()
        self._server: asyncio.AbstractServer | None = None
        self._sweeper: asyncio.TimerHandle | None = None
        self._static: dict[bytes, tuple[bytes, str, bytes]] = {}
        for path, (name, ctype) in _STATIC.items():
            body = load_static(name)
            etag = b'"' + hashlib.sha256(body).hexdigest()[:16].encode() + b'"'
            self._static[path] = (body, ctype, etag)
        self._get_routes: dict[bytes, Callable[[h11.Request], Reply]] = {
            b"/stats.json": self._stats,
            b"/history.json": self._history,
            b"/metrics": self._metrics,
            b"/healthz": self._healthz,
        }

    # -- lifecycle ----------------------------------------------------------

    @property
    def port(self) -> int:
        """The bound port (the real one when constructed with port=0)."""
        return self._port

    @property
    def connections(self) -> int:
        """Connections currently open."""
        return len(self._conns)

    async def start(self) -> None:
        """Bind, start the history sampler and the timeout sweep."""
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            lambda: _HTTPProtocol(self), self.host, self._port, backlog=1024
        )
        self._port = self._server.sockets[0].getsockname()[1]
        self.history.start()
        self._schedule_sweep(loop)

    async def close(self) -> None:
        """Stop listening, close every connection, stop the timers."""
        if self._sweeper is not None:
            self._sweeper.cancel()
            self._sweeper = None
        self.history.stop()
        if self._server is not None:
            self._server.close()
        for conn in list(self._conns):
            conn.abort()
        if self._server is not None:
            await self._server.wait_closed()
            self._server = None

    # -- connection bookkeeping --------------------------------------------

    def _sweep_interval(self) -> float:
        return min(max(min(self.header_timeout, self.idle_timeout) / 4, 0.02), 1.0)

    def _schedule_sweep(self, loop: asyncio.AbstractEventLoop) -> None:
        self._sweeper = loop.call_later(self._sweep_interval(), self._sweep, loop)

    def _sweep(self, loop: asyncio.AbstractEventLoop) -> None:
        now = self.clock()
        for conn in [c for c in self._conns if c.deadline <= now]:
            conn.expire()
        self._schedule_sweep(loop)

    def _admit(self, conn: _HTTPProtocol) -> None:
        if len(self._conns) >= self.max_connections:
            victim = next((c for c in self._conns if c.phase in ("new", "idle")), None)
            if victim is None:
                victim = next(iter(self._conns))
            self.counters["evicted"] += 1
            victim.abort()
        self._conns[conn] = None

    def _touch(self, conn: _HTTPProtocol) -> None:
        if conn in self._conns:
            self._conns.move_to_end(conn)

    def _forget(self, conn: _HTTPProtocol) -> None:
        self._conns.pop(conn, None)

    # -- routing ------------------------------------------------------------

    def route(self, request: h11.Request, local: str | None = None) -> Reply | None:
        """Answer ``request`` from its headers alone, or None if it needs its body.

        ``local``: the address the connection came in on (a Host naming it is ours).
        """
        self.counters["requests"] += 1
        method = request.method
        path = request.target.split(b"?", 1)[0]
        why = self.hosts.check(_header(request, b"host"), local)
        if why is not None:
            self.counters["misdirected"] += 1
            self.refusals.refused("host", f"{method.decode()} {shown(path)} refused (421): {why}")
            return _text(421, f"misdirected request: {why}; if it is this server's name, "
                              "add it to httpHosts", close=True)
        if method not in (b"GET", b"HEAD", b"POST"):
            return _text(405, "method not allowed", headers=[(b"allow", b"GET, HEAD, POST")])
        if self.guard_all and path != b"/healthz" and not self._authorized(request):
            return self._unauthorized()
        if path == b"/urls":
            if method != b"POST":
                return _text(405, "use POST", headers=[(b"allow", b"POST")])
            if not self.accept_urls:
                return _text(403, "URL input is disabled (start with URL input enabled)")
            why = cross_site_reason(_headers(request, b"origin"), _headers(request, b"sec-fetch-site"),
                                    _header(request, b"host"))
            if why is not None:
                self.counters["cross_site"] += 1
                self.refusals.refused("cross_site", f"POST /urls refused (403): cross-site request: {why}")
                return _text(403, f"cross-site request refused: {why}; a page of another origin "
                                  "may not give URLs to the crawl")
            if self._token is not None and not self._authorized(request):
                return self._unauthorized()
            media = _media_type(request)
            if media not in ("text/plain", "application/json"):
                return _text(415, "send text/plain (one URL per line) or a JSON list")
            if self._token is None and media != "application/json":
                self.counters["bad_requests"] += 1
                self.refusals.refused("type", "POST /urls refused (415): text/plain without httpToken")
                return _text(415, "without httpToken, POST /urls takes only application/json (a JSON "
                                  "list of URLs): any web page can send text/plain")
            return None
        static = self._static.get(path)
        if static is None and path not in self._get_routes:
            return _text(404, "not found")
        if method == b"POST":
            return _text(405, "method not allowed", headers=[(b"allow", b"GET, HEAD")])
        if static is not None:
            body, ctype, etag = static
            if _header(request, b"if-none-match") == etag:
                return Reply(304, ctype, b"", [(b"etag", etag)], cache=b"no-cache")
            return Reply(200, ctype, body, [(b"etag", etag)], cache=b"no-cache")
        try:
            return self._get_routes[path](request)
        except Exception as exc:  # the source failed: report, never crash the loop
            self.counters["errors"] += 1
            return Reply(500, JSON, json_bytes({"error": f"{type(exc).__name__}: {exc}"}))

    def _authorized(self, request: h11.Request) -> bool:
        """The request carries the token: ``Bearer <token>``, or Basic with it as the password."""
        value = _header(request, b"authorization") or b""
        scheme, _, given = value.strip().partition(b" ")
        scheme = scheme.lower()
        if scheme == b"basic":
            try:
                given = base64.b64decode(given.strip(), validate=True).partition(b":")[2]
            except (binascii.Error, ValueError):
                return False
        elif scheme != b"bearer":
            return False
        assert self._token is not None
        return hmac.compare_digest(given.strip(), self._token)

    def _unauthorized(self) -> Reply:
        self.counters["unauthorized"] += 1
        return _text(
            401, "missing or wrong token: send 'Authorization: Bearer <token>' "
                 "(or HTTP Basic, the token as the password)",
            headers=[(b"www-authenticate", b'Bearer realm="larbin"'),
                     (b"www-authenticate", b'Basic realm="larbin", charset="UTF-8"')],
        )

    def refuse(self, status: int, message: str) -> Reply:
        """A request refused for its body: answered ``status`` with ``message``, logged as one line."""
        if status == 413:
            self.counters["too_large"] += 1
        else:
            self.counters["bad_requests"] += 1
        self.log(f"POST /urls refused ({status}): {message}")
        return _text(status, message)

    def _stats(self, request: h11.Request) -> Reply:
        snap = dict(self.source.snapshot())
        snap.pop("history", None)
        text = json_text(snap)
        history = self.history.to_json()
        body = (text[:-1] + ("," if len(snap) else "") + '"history":' + history + "}")
        return Reply(200, JSON, body.encode("ascii"))

    def _history(self, request: h11.Request) -> Reply:
        return Reply(200, JSON, self.history.to_json().encode("ascii"))

    def _metrics(self, request: h11.Request) -> Reply:
        return Reply(200, METRICS_CONTENT_TYPE, render_metrics(self.source.snapshot()).encode())

    def _healthz(self, request: h11.Request) -> Reply:
        state = self.source.snapshot().get("state")
        if state == "failed":
            return _text(503, str(state))
        return _text(200, "ok")

    def submit(self, request: h11.Request, body: bytes) -> Reply:
        """Answer ``POST /urls`` once its body is complete."""
        try:
            text = body.decode("utf-8")
        except UnicodeDecodeError as exc:
            return self.refuse(400, f"body is not UTF-8 (byte {exc.start})")
        if _media_type(request) == "application/json":
            try:
                urls = json.loads(text)
            except RecursionError:
                return self.refuse(400, "invalid JSON: nested too deeply (send a flat list of strings)")
            except ValueError as exc:
                return self.refuse(400, f"invalid JSON: {exc}")
            if not isinstance(urls, list) or not all(isinstance(u, str) for u in urls):
                return self.refuse(400, "JSON body must be a list of strings")
            if not all(u.isascii() or _utf8(u) for u in urls):
                return self.refuse(400, "JSON strings must be valid Unicode (no lone surrogates)")
            urls = [u.strip() for u in urls if u.strip()]
        else:
            urls = [s for s in (line.strip() for line in text.splitlines())
                    if s and not s.startswith("#")]
        try:
            verdicts = self.source.submit_urls(urls)
        except Exception as exc:
            self.counters["errors"] += 1
            self.log(f"POST /urls failed (500): {type(exc).__name__}: {exc}")
            return Reply(500, JSON, json_bytes({"error": f"{type(exc).__name__}: {exc}"}))
        return Reply(200, JSON, json_bytes(verdicts))


def _utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _media_type(request: h11.Request) -> str:
    value = _header(request, b"content-type")
    if value is None:
        return "text/plain"
    return value.split(b";", 1)[0].strip().lower().decode("latin-1")


class _HTTPProtocol(asyncio.Protocol):
    """One client connection: h11 state, a phase and a deadline.

    Phases: ``new`` (connected, nothing received), ``request`` (receiving
    headers), ``body`` (receiving a POST body), ``idle`` (keep-alive, between
    requests), ``linger`` (answered early and closing: the rest of the
    request is drained, at most ``max_body_bytes``, then the socket is cut).
    """

    def __init__(self, server: StatsServer) -> None:
        self.server = server
        self.transport: asyncio.Transport | None = None
        self.h11 = h11.Connection(
            h11.SERVER, max_incomplete_event_size=server.max_header_bytes
        )
        self.phase = "new"
        self.deadline = server.clock() + server.header_timeout
        self.request: h11.Request | None = None
        self.body: list[bytes] = []
        self.body_size = 0
        self.drained = 0
        self.write_paused = False
        # An answer decided from the headers, sent once the (empty) body is read.
        self.pending: tuple[Reply, bool] | None = None
        self.local: str | None = None

    # asyncio callbacks

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        sockname = transport.get_extra_info("sockname")
        #: the address the client connected to (a Host naming it is ours)
        self.local = sockname[0] if isinstance(sockname, tuple) else None
        self.server._admit(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self.server._forget(self)
        self.transport = None

    def data_received(self, data: bytes) -> None:
        if self.phase == "linger":
            self.drained += len(data)
            if self.drained > self.server.max_body_bytes:
                self.abort()
            return
        self.server._touch(self)
        if self.phase in ("new", "idle"):
            self.phase = "request"
            self.deadline = self.server.clock() + self.server.header_timeout
        self.h11.receive_data(data)
        self._guarded()

    def _guarded(self) -> None:
        """:meth:`_process`, with any error answered 500 and logged as one line (no traceback)."""
        try:
            self._process()
        except Exception as exc:  # a bug here must neither kill the loop's callback nor leave the client waiting
            server = self.server
            server.counters["errors"] += 1
            server.log(f"internal error answering a request: {type(exc).__name__}: {exc}")
            self.request, self.body, self.body_size, self.pending = None, [], 0, None
            if self.transport is not None and self.h11.our_state in (h11.IDLE, h11.SEND_RESPONSE):
                self._reply(_text(500, "internal error", close=True))
            else:
                self.abort()

    def eof_received(self) -> bool | None:
        if self.phase != "linger":
            self.h11.receive_data(b"")
            self._guarded()
        return False

    def pause_writing(self) -> None:
        self.write_paused = True
        if self.transport is not None:
            self.transport.pause_reading()

    def resume_writing(self) -> None:
        self.write_paused = False
        if self.transport is not None and not self.transport.is_closing():
            self.transport.resume_reading()
            self._guarded()

    # the protocol

    def _process(self) -> None:
        server = self.server
        while not self.write_paused and self.transport is not None and self.phase != "linger":
            try:
                event = self.h11.next_event()
            except h11.RemoteProtocolError as exc:
                status = exc.error_status_hint
                if status == 431 or status == 413:
                    server.counters["too_large"] += 1
                self._reply(_text(status, f"bad request: {exc}", close=True))
                return
            if event is h11.NEED_DATA:
                return
            if event is h11.PAUSED:
                return
            if isinstance(event, h11.Request):
                self._on_request(event)
            elif isinstance(event, h11.Data):
                self.body_size += len(event.data)
                if self.body_size > server.max_body_bytes:
                    reply = server.refuse(413, f"request body over {server.max_body_bytes} bytes")
                    reply.close = True
                    self._reply(reply)
                    return
                self.body.append(event.data)
            elif isinstance(event, h11.EndOfMessage):
                if self.pending is not None:
                    reply, head = self.pending
                    self.pending = None
                    self._reply(reply, head=head)
                elif self.request is not None:
                    request, body = self.request, b"".join(self.body)
                    self.request, self.body, self.body_size = None, [], 0
                    self._reply(server.submit(request, body))
            elif isinstance(event, h11.ConnectionClosed):
                self.close()
                return

    def _on_request(self, request: h11.Request) -> None:
        server = self.server
        # h11 bounds only a head still incomplete; one that came whole is measured here.
        size = len(request.target) + sum(len(k) + len(v) + 4 for k, v in request.headers)
        if size > server.max_header_bytes:
            server.counters["too_large"] += 1
            self._reply(_text(431, "request header fields too large", close=True))
            return
        reply = server.route(request, self.local)
        if reply is not None:
            has_body = _header(request, b"transfer-encoding") is not None or (
                _header(request, b"content-length") not in (None, b"0"))
            if reply.close or has_body:
                self._reply(reply, head=request.method == b"HEAD")
            else:  # answer at EndOfMessage, so the connection can be kept alive
                self.pending = (reply, request.method == b"HEAD")
            return
        length = _header(request, b"content-length")
        if length is not None and length.isdigit() and int(length) > server.max_body_bytes:
            reply = server.refuse(413, f"request body over {server.max_body_bytes} bytes")
            reply.close = True
            self._reply(reply)
            return
        self.request = request
        self.phase = "body"
        self.deadline = server.clock() + server.header_timeout

    def _reply(self, reply: Reply, head: bool = False) -> None:
        conn, transport = self.h11, self.transport
        if transport is None:
            return
        unread = conn.their_state not in (h11.DONE, h11.MUST_CLOSE, h11.CLOSED)
        close = reply.close or unread
        headers = [
            (b"content-type", reply.content_type.encode()),
            (b"content-length", str(len(reply.body)).encode()),
            (b"cache-control", reply.cache),
            *_COMMON_HEADERS,
            *reply.headers,
        ]
        if close:
            headers.append((b"connection", b"close"))
        try:
            out = [conn.send(h11.Response(status_code=reply.status, headers=headers))]
            if reply.body and not head and reply.status != 304:
                out.append(conn.send(h11.Data(data=reply.body)))
            out.append(conn.send(h11.EndOfMessage()))
        except h11.LocalProtocolError:
            self.abort()
            return
        transport.write(b"".join(x for x in out if x))
        if close or conn.our_state is h11.MUST_CLOSE:
            if unread or conn.their_state is h11.ERROR:
                self._linger()
            else:
                self.close()
            return
        conn.start_next_cycle()
        self.phase = "request" if conn.trailing_data[0] else "idle"
        timeout = self.server.header_timeout if self.phase == "request" else self.server.idle_timeout
        self.deadline = self.server.clock() + timeout

    def _linger(self) -> None:
        """Half-close and drain (bounded) so the client can read our answer."""
        transport = self.transport
        assert transport is not None
        self.phase = "linger"
        self.deadline = self.server.clock() + min(2.0, self.server.header_timeout)
        if self.write_paused:
            transport.resume_reading()
        if transport.can_write_eof():
            transport.write_eof()
        else:
            transport.close()

    def expire(self) -> None:
        """The deadline passed: 408 for a started request, else just close."""
        self.server.counters["timeouts"] += 1
        if self.phase == "linger":
            self.abort()
            return
        if self.phase in ("request", "body") and self.h11.our_state in (h11.IDLE, h11.SEND_RESPONSE):
            self._reply(_text(408, "request timeout", close=True))
        # A client too slow once gets no drain time: flush and close now.
        self.close()

    def close(self) -> None:
        self.server._forget(self)
        if self.transport is not None:
            self.transport.close()

    def abort(self) -> None:
        self.server._forget(self)
        if self.transport is not None:
            self.transport.abort()
