"""The sim's HTTP/1.1 server: pre-rendered answers by Host header, on loopback.

One asyncio listening socket per IP of the web (never 0.0.0.0), all on one
port.  Requests are parsed by a tiny hand parser (request line + the headers
``host``, ``connection``, ``accept-encoding``, ``content-length``); answers
are assembled from bytes cached per (host, path, encoding), so one process
serves thousands of pages per second.  Keep-alive is the default for
HTTP/1.1 (``Connection: close`` and HTTP/1.0 close); requests that arrive
while an answer is pending are answered in order afterwards.

What is served:

* unknown Host -> 404; unknown path -> 404; ``/robots.txt`` per the host's
  :class:`~larbin_py.sim.web.RobotsProfile` (``timeout``: never answered;
  ``redirect``: 301 to the rules file);
* gzip (``Content-Encoding: gzip``) for hosts with ``gzip`` when the request
  accepts it; ``Transfer-Encoding: chunked`` for hosts with ``chunked``;
* :class:`~larbin_py.sim.faults.Fault` behaviours decided by a
  :class:`~larbin_py.sim.faults.FaultPlan`;
* the load model: a host in ``load`` with ``(base, per_request)`` answers
  after ``base + per_request * in_flight(host)``; with ``(base, per_request,
  capacity)`` it is a server of ``capacity`` workers sharing its time, so
  the answer comes after ``base * max(1, in_flight / capacity) + per_request
  * in_flight``: beyond its capacity a server gets no faster, only slower to
  answer.  A key of ``load`` may also be a server IP: then the requests in
  flight to all the hosts on that IP count.  ``peak_in_flight[host]`` and
  ``peak_in_flight_ip[ip]`` record the most concurrent requests each host
  and each IP ever had (loaded or not); ``load_delays`` lists the answer
  time the load model gave each request to a loaded host, in order: the
  server's own view of how loaded it was.

Every request and connection is recorded in a
:class:`~larbin_py.sim.log.RequestLog`, timed by its arrival: when the
kernel received the request's last bytes (``TCP_INFO``'s
``tcpi_last_data_recv``; a connection's end closed by the client: its FIN,
``tcpi_last_ack_recv``), not when this process got to read them.  A test
process busy elsewhere (another test's service starting, a CPU shared with
the crawler's processes) reads a request late; timed by the read, two
requests sent a waitDuration apart would look closer, and a polite crawler
would fail a politeness check.  The kernel's clock ticks in jiffies (4 ms
at HZ 250), so a read under :data:`READ_LATE_MIN` late keeps the read time.
"""

from __future__ import annotations

import asyncio
import gzip
import itertools
import socket
import struct
import time

from .faults import STATUS_KINDS, FaultPlan
from .log import Connection, Request, RequestLog
from .urls import canonical_path
from .web import Host, Resource, SimWeb

REASONS = {200: "OK", 301: "Moved Permanently", 302: "Found", 307: "Temporary Redirect",
           400: "Bad Request", 401: "Unauthorized", 403: "Forbidden", 404: "Not Found", 410: "Gone", 429: "Too Many Requests",
           500: "Internal Server Error", 503: "Service Unavailable"}
NOT_FOUND = b"<html><body><h1>404 Not Found</h1></body></html>\n"
MAX_HEAD = 64 * 1024
#: A read this late (seconds after the kernel got the data) or more is timed by the arrival.
READ_LATE_MIN = 0.010
_TCP_INFO = getattr(socket, "TCP_INFO", None)  # Linux
# struct tcp_info: 8 one-byte fields, then u32s; tcpi_last_data_recv is the 12th,
# tcpi_last_ack_recv the 13th (a FIN carries no data: its arrival is the last ACK's).
_LAST_DATA_RECV = 52
_LAST_ACK_RECV = 56


def read_late(sock, field: int = _LAST_DATA_RECV) -> float:
    """Seconds since the kernel last received data on ``sock`` (on a new connection:
    since its handshake ended; ``_LAST_ACK_RECV``: any segment, a FIN included);
    0.0 under :data:`READ_LATE_MIN` or where TCP_INFO is not."""
    if sock is None or _TCP_INFO is None:
        return 0.0
    try:
        info = sock.getsockopt(socket.IPPROTO_TCP, _TCP_INFO, 104)
    except (OSError, AttributeError):
        return 0.0
    if len(info) < field + 4:
        return 0.0
    late = struct.unpack_from("I", info, field)[0] / 1000
    return late if late >= READ_LATE_MIN else 0.0


def _chunked(body: bytes, size: int = 1000) -> bytes:
    parts = [b"%x\r\n%s\r\n" % (len(body[i:i + size]), body[i:i + size])
             for i in range(0, len(body), size)]
    return b"".join(parts) + b"0\r\n\r\n"


def render_head(status: int, headers: list[tuple[str, str]]) -> bytes:
    """Status line and headers, without the blank line that ends the head."""
    lines = [f"HTTP/1.1 {status} {REASONS.get(status, 'Status')}\r\n"]
    lines.extend(f"{k}: {v}\r\n" for k, v in headers)
    return "".join(lines).encode("latin-1")


class SimServer:
    """Serves a :class:`SimWeb` (see the module docstring)."""

    def __init__(self, web: SimWeb | None, log: RequestLog, faults: FaultPlan | None = None,
                 load: dict[str, tuple[float, float]] | None = None):
        self.web = web
        self.log = log
        self.faults = faults or FaultPlan()
        self.load = dict(load or {})
        self.port = 0
        self.ips: list[str] = []
        self.in_flight: dict[str, int] = {}
        self.peak_in_flight: dict[str, int] = {}
        self.in_flight_ip: dict[str, int] = {}  # the same, per server IP
        self.peak_in_flight_ip: dict[str, int] = {}
        self.load_delays: list[float] = []
        self._servers: list[asyncio.AbstractServer] = []
        self._conns: set["_HTTPConn"] = set()
        self._cache: dict[tuple, tuple[bytes, bytes]] = {}
        self._ids = itertools.count(1)
        self._huge: dict[int, bytes] = {}

    # -- lifecycle ---------------------------------------------------------------
    async def start(self, ips: list[str], port: int = 0) -> int:
        """Listen on every IP of ``ips`` on one port (0: a free one); return it."""
        loop = asyncio.get_running_loop()
        for attempt in range(50):
            servers = []
            chosen = port
            try:
                for ip in ips:
                    srv = await loop.create_server(lambda: _HTTPConn(self), ip, chosen,
                                                   reuse_address=True, backlog=2048)
                    servers.append(srv)
                    if chosen == 0:
                        chosen = srv.sockets[0].getsockname()[1]
            except OSError:
                for srv in servers:
                    srv.close()
                if port != 0 or attempt == 49:
                    raise
                continue
            self._servers, self.port, self.ips = servers, chosen, list(ips)
            return chosen
        raise OSError("no free port usable on every IP")

    async def close(self) -> None:
        for srv in self._servers:
            srv.close()
        for conn in list(self._conns):
            conn.transport.abort()
        for srv in self._servers:
            await srv.wait_closed()
        self._servers = []

    # -- answers -----------------------------------------------------------------
    def _rendered(self, host: Host, pq: str, res: Resource, gz: bool) -> tuple[bytes, bytes]:
        """(head without terminator, body) for a resource, cached."""
        key = (host.name, pq, gz)
        hit = self._cache.get(key)
        if hit is not None:
            return hit
        body = res.body
        headers = [("Content-Type", res.content_type), ("Server", "larbin-sim")]
        if res.location is not None:
            headers.append(("Location", res.location))
        headers.extend(res.extra_headers)
        if gz:
            body = gzip.compress(body, compresslevel=6, mtime=0)
            headers.append(("Content-Encoding", "gzip"))
            headers.append(("Vary", "Accept-Encoding"))
        if host.chunked:
            body = _chunked(body)
            headers.append(("Transfer-Encoding", "chunked"))
        else:
            headers.append(("Content-Length", str(len(body))))
        out = (render_head(res.status, headers), body)
        if len(self._cache) < 200_000 and not host.trap:
            self._cache[key] = out
        return out

    @staticmethod
    def _simple(status: int, body: bytes, ctype: str = "text/html; charset=utf-8",
                extra: tuple[tuple[str, str], ...] = ()) -> tuple[bytes, bytes]:
        headers = [("Content-Type", ctype), ("Server", "larbin-sim"), *extra,
                   ("Content-Length", str(len(body)))]
        return render_head(status, headers), body

    def robots_answer(self, host: Host, pq: str) -> tuple[bytes, bytes] | None:
        """The robots answer for ``pq`` (None: stall / not a robots path)."""
        prof = host.robots
        if pq == "/robots.txt":
            if prof.kind == "timeout":
                return None
            if prof.kind == "redirect":
                return self._simple(prof.status, prof.body, "text/plain",
                                    (("Location", prof.target),))
            ctype = "text/plain" if prof.status == 200 else "text/html; charset=utf-8"
            return self._simple(prof.status, prof.body, ctype)
        if prof.kind == "redirect" and pq == prof.target:
            return self._simple(200, prof.rules_body, "text/plain")
        return None

    def is_robots(self, host: Host, pq: str) -> bool:
        return pq == "/robots.txt" or (host.robots.kind == "redirect" and pq == host.robots.target)

    def huge_body(self, size: int) -> bytes:
        body = self._huge.get(size)
        if body is None:
            head = b"<html><body><p>"
            body = head + b"x" * max(0, size - len(head))
            self._huge[size] = body
        return body


class _HTTPConn(asyncio.Protocol):
    """One server-side connection: parse, decide, answer, in order."""

    __slots__ = ("srv", "transport", "id", "ip", "client_port", "buf", "busy", "closed",
                 "loop", "conn", "skip", "stalled", "sock", "arrived", "late", "fin_at", "headers")

    def __init__(self, srv: SimServer):
        self.srv = srv
        self.buf = b""
        self.busy = False
        self.closed = False
        self.skip = 0
        self.stalled: str | None = None  # host of a request never to be answered
        self.sock = None
        self.arrived = 0.0  # monotonic arrival of the last bytes read (see read_late)
        self.late = 0.0  # how long after it they were read
        self.fin_at: float | None = None  # monotonic arrival of the client's FIN
        self.headers: tuple = ()  # the current request's headers but Host (the log keeps them)

    def connection_made(self, transport) -> None:
        self.transport = transport
        self.loop = asyncio.get_running_loop()
        self.id = next(self.srv._ids)
        self.ip = transport.get_extra_info("sockname")[0]
        peer = transport.get_extra_info("peername")
        self.client_port = peer[1] if peer else 0
        self.srv._conns.add(self)
        self.sock = transport.get_extra_info("socket")
        self.conn = Connection(self.id, self.ip, self.client_port, time.monotonic() - read_late(self.sock))
        self.srv.log.open(self.conn)

    def connection_lost(self, exc) -> None:
        self.closed = True
        if self.stalled is not None:
            self.srv.in_flight[self.stalled] -= 1
            self.srv.in_flight_ip[self.ip] -= 1
            self.stalled = None
        self.srv._conns.discard(self)
        self.srv.log.close(self.id, self.fin_at if self.fin_at is not None else time.monotonic())

    def eof_received(self):
        """The client closed its side: its FIN's arrival is when the connection ended
        (the transport then closes it)."""
        self.fin_at = time.monotonic() - read_late(self.sock, _LAST_ACK_RECV)
        return None

    def data_received(self, data: bytes) -> None:
        self.late = read_late(self.sock)
        self.arrived = time.monotonic() - self.late
        if self.skip:
            cut = min(self.skip, len(data))
            self.skip -= cut
            data = data[cut:]
        self.buf += data
        if not self.busy:
            self._process()

    # -- request loop -----------------------------------------------------------
    def _process(self) -> None:
        while not self.busy and not self.closed:
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                if len(self.buf) > MAX_HEAD:
                    self._bad()
                return
            head = self.buf[:end].decode("latin-1")
            self.buf = self.buf[end + 4:]
            self._handle(head)

    def _bad(self) -> None:
        h, b = SimServer._simple(400, b"bad request\n")
        self.transport.write(h + b"Connection: close\r\n\r\n" + b)
        self.transport.close()
        self.closed = True

    def _handle(self, head: str) -> None:
        lines = head.split("\r\n")
        parts = lines[0].split(" ")
        if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
            self._bad()
            return
        method, target, version = parts
        raw_host = accept = conn_hdr = ""
        seen_headers = []
        for line in lines[1:]:
            name, _, value = line.partition(":")
            name = name.strip().lower()
            if name and name != "host":
                seen_headers.append((name, value.strip()))
            if name == "host":
                raw_host = value.strip()
            elif name == "accept-encoding":
                accept = value.lower()
            elif name == "connection":
                conn_hdr = value.strip().lower()
            elif name == "content-length":
                try:
                    n = int(value)
                except ValueError:
                    self._bad()
                    return
                cut = min(n, len(self.buf))
                self.buf = self.buf[cut:]
                self.skip = n - cut
        self.headers = tuple(seen_headers[:32])
        keep = ("close" not in conn_hdr) if version == "HTTP/1.1" else ("keep-alive" in conn_hdr)
        hostname = raw_host.rsplit(":", 1)[0] if not raw_host.endswith("]") else raw_host
        hostname = hostname.lower().rstrip(".")
        srv = self.srv
        host = srv.web.hosts.get(hostname) if srv.web is not None else None
        now = self.arrived  # the head's last bytes: when the server got the request
        if host is None:
            h, b = SimServer._simple(404, NOT_FOUND)
            self._log(now, hostname, raw_host, method, target, 404, "")
            self._send(h, b, keep, method, None)
            return
        if target.startswith(("http://", "HTTP://")):  # absolute form (proxy requests)
            target = "/" + target.split("/", 3)[3] if target.count("/") >= 3 else "/"
        pq = target if target.startswith("/") else "/"
        try:
            pq = canonical_path(pq.split("#", 1)[0])
        except Exception:
            pass
        url = f"{'http://' + host.name}{'' if srv.port == 80 else f':{srv.port}'}{pq}"
        robots = srv.is_robots(host, pq)
        decision = srv.faults.decide(url, host.name, robots) if srv.faults else None
        fault = decision.fault if decision is not None else None
        delay = decision.delay if decision is not None else 0.0
        name = host.name
        inflight = srv.in_flight.get(name, 0) + 1
        srv.in_flight[name] = inflight
        if inflight > srv.peak_in_flight.get(name, 0):
            srv.peak_in_flight[name] = inflight
        on_ip = srv.in_flight_ip.get(self.ip, 0) + 1
        srv.in_flight_ip[self.ip] = on_ip
        if on_ip > srv.peak_in_flight_ip.get(self.ip, 0):
            srv.peak_in_flight_ip[self.ip] = on_ip
        load = srv.load.get(name)
        if load is None:
            load = srv.load.get(self.ip)  # a loaded server IP: all its hosts share it
            if load is not None:
                inflight = on_ip
        if load is not None:
            if len(load) > 2:
                extra = load[0] * max(1.0, inflight / load[2]) + load[1] * inflight
            else:
                extra = load[0] + load[1] * inflight
            srv.load_delays.append(extra)
            delay += extra
        applied = "+".join(decision.applied) if decision is not None else ""
        if fault is not None:
            kind = fault.kind
            if kind in STATUS_KINDS:
                status = STATUS_KINDS[kind]
                extra = (("Retry-After", str(fault.retry_after)),) if status in (429, 503) else ()
                h, b = SimServer._simple(status, f"<html><body>{status}</body></html>\n".encode(),
                                         extra=extra)
                self._log(now, name, raw_host, method, target, status, applied)
                self._later(delay, name, h, b, keep, method, None)
                return
            if kind in ("reset", "stall"):
                self._log(now, name, raw_host, method, target, 0, applied)
                if kind == "reset":
                    self._later(delay, name, None, None, False, method, "reset")
                else:
                    self.busy = True  # never answered; the client gives up
                    self.stalled = name
                return
            if kind == "huge":
                h, b = SimServer._simple(200, srv.huge_body(fault.size))
                self._log(now, name, raw_host, method, target, 200, applied)
                self._later(delay, name, h, b, keep, method, None)
                return
        if robots:
            answer = srv.robots_answer(host, pq)
            if answer is None:  # the "timeout" profile: never answers
                self._log(now, name, raw_host, method, target, 0, applied or "robotsTimeout")
                self.busy = True
                self.stalled = name
                return
            h, b = answer
        else:
            res = srv.web.resource(host, pq)
            if res is None:
                h, b = SimServer._simple(404, NOT_FOUND)
            else:
                h, b = srv._rendered(host, pq, res, host.gzip and "gzip" in accept)
        status = int(h[9:12])
        self._log(now, name, raw_host, method, target, status, applied)
        special = fault.kind if fault is not None else None
        self._later(delay, name, h, b, keep, method, special, fault)

    def _log(self, now, host, raw_host, method, target, status, fault) -> None:
        self.srv.log.add(Request(now, time.time() - self.late, self.id, self.client_port, self.ip,
                                 self.srv.port, host, raw_host, method, target, status, fault, self.late,
                                 self.headers))

    def _later(self, delay, host, h, b, keep, method, special, fault=None) -> None:
        if delay > 0:
            self.busy = True
            self.loop.call_later(delay, self._finish, host, h, b, keep, method, special, fault)
        else:
            self._finish(host, h, b, keep, method, special, fault)

    def _finish(self, host, h, b, keep, method, special, fault) -> None:
        srv = self.srv
        if host is not None:
            srv.in_flight[host] = srv.in_flight.get(host, 1) - 1
            srv.in_flight_ip[self.ip] = srv.in_flight_ip.get(self.ip, 1) - 1
        self.busy = False
        if self.closed:
            return
        if special == "reset":
            self._reset()
            return
        if special == "close":
            self.transport.write(h + b"\r\n" + b[: len(b) // 2])
            self.transport.close()
            self.closed = True
            return
        if special == "drip":
            self.busy = True
            self._drip(h + (b"\r\n" if keep else b"Connection: close\r\n\r\n")
                       + (b if method != "HEAD" else b""), keep, fault)
            return
        self._send(h, b, keep, method, None)
        if not self.busy and self.buf and not self.closed:
            self._process()

    def _send(self, h: bytes, b: bytes, keep: bool, method: str, _special) -> None:
        if method == "HEAD":
            b = b""
        if keep:
            self.transport.write(h + b"\r\n" + b)
        else:
            self.transport.write(h + b"Connection: close\r\n\r\n" + b)
            self.transport.close()
            self.closed = True

    def _drip(self, data: bytes, keep: bool, fault) -> None:
        if self.closed:
            return
        step = fault.drip_bytes
        self.transport.write(data[:step])
        rest = data[step:]
        if rest:
            self.loop.call_later(fault.pick_delay(self.srv.faults.rng), self._drip, rest, keep, fault)
            return
        self.busy = False
        if not keep:
            self.transport.close()
            self.closed = True
        elif self.buf:
            self._process()

    def _reset(self) -> None:
        sock = self.transport.get_extra_info("socket")
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        except (OSError, AttributeError):
            pass
        self.transport.abort()
        self.closed = True
