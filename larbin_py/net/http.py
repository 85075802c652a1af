"""HTTP fetcher: an asyncio Protocol that writes HTTP/1.1 requests and reads responses; HTTP/2
sessions beside it (:mod:`larbin_py.net.h2conn`).

Responses are read by llhttp (httptools) with h11 as the referee, or by h11
alone (``parser="h11"``): see :mod:`larbin_py.net.fastread` for how the two
share the work.  Request headers are always checked by h11, and the bytes
sent are the ones h11 writes.

One :class:`Fetcher` owns every connection of the crawler.  ``fetch()`` sends
one request and returns a :class:`FetchResult`; it never raises (except
``CancelledError``): every failure is a value in ``result.error``:

==================  =========================================================
``noConnection``    refused, unreachable, connect timeout (the TCP connect
                    or the TLS handshake; see ``error_detail``)
``tlsError``        the server's certificate refused (expired, another
                    name, an unknown CA) or its TLS handshake refused
``proxyError``      the proxy unreachable, CONNECT refused (407 included),
                    answered with garbage or not within the connect
                    timeout; a 407 to an http request through it
``authRequired``    a 401 to a request sent without credentials (status
                    and body as received)
``authRetry``       a 401 with a digest challenge the auth rule will answer
                    on the next request (larbin_py.net.auth)
``timeout``         the total page deadline passed (see *Timers*)
``notSent``         the connection opened, but ``may_send`` refused the
                    request (a distributed worker whose IP leases may have
                    lapsed meanwhile): closed, nothing sent
``reset``           the connection was reset or closed before the response
                    was complete
``tooBig``          the decoded body passed ``max_page_size``; ``body`` holds
                    the first ``max_page_size`` bytes
``badResponse``     not HTTP: bad status line or headers, bad chunked
                    framing, invalid Content-Length, undecodable gzip/deflate
``headerTooBig``    the response head passed ``max_header_size``; so did
                    the informational (1xx) answers before it, counted
                    with it, or the chunked framing (trailers, chunk lines)
                    between two pieces of body data
==================  =========================================================

Timers
    No timer per request.  One periodic *sweep* (``SWEEP_INTERVAL`` = 0.25 s,
    started when the first connection opens, stopped when none is left)
    checks every connecting or active connection against its deadline and
    every idle connection against ``keep_alive_idle``.  Deadlines are thus
    enforced with a resolution of ``SWEEP_INTERVAL``: a page times out between
    its deadline and a quarter second later.  The deadlines (Larbin's rules):

    * connect: ``connect_timeout`` after the connect started;
    * page: ``timeout_page + body_bytes / timeout_incr`` seconds after
      ``fetch()`` started -- a page may take longer the more body it has
      sent.  Only body bytes count (de-chunked, before content decoding),
      and at most ``max_page_size`` of them: heads, informational answers
      and chunked framing push nothing back, so no fetch outlives
      ``timeout_page + max_page_size / timeout_incr`` whatever the server
      trickles (Larbin counted every byte: an endless ``100 Continue``
      kept a fetch alive for ever).

    **The loop standing still.**  A deadline counts the time the crawler
    could have read the answer, not time the process did not run (SIGSTOP,
    a suspended VM, a swap storm, a callback blocking the loop).  After
    such a stall the deadlines of the fetches in flight have passed,
    though nothing could be read or sent meanwhile: the first sweep after
    it would time out a connect that completed in the stall, a request
    not yet written, an answer that comes a moment later (a worker woken
    by SIGCONT has a backlog, and a server its own delay).  So the sweep
    knows when it is due; when it runs more than ``STALL_SLACK`` (0.25 s)
    late, every deadline in flight (connects, pages, HTTP/2 streams, and
    a page whose connect spanned the stall) moves later by the lateness:
    what was not due when the sweep should have run does not expire in
    it.  The lateness is the stall less up to one ``SWEEP_INTERVAL`` (the
    part before the sweep was due), the resolution deadlines have anyway.
    Idle keep-alive connections do not move (the server's clock went on).
    ``stats["stalls"]`` and ``stats["stalled_seconds"]`` count them.  The
    bound above is thus in the loop's running time, and it still comes:
    each sweep takes at least ``SWEEP_INTERVAL`` off the time left.  A
    loop blocked 0.3 s in every 0.55 s gives a page about twice its time
    in wall-clock terms.

Sending after a connect
    A connect may outlive what allowed the request (a distributed worker's
    IP lease lapses while it is stopped, or while Redis fails and a slow
    connect goes on).  ``may_send(ip)``, when set, is asked once a new
    connection is open, before the request is written: False closes it and
    ends the fetch ``notSent``, which the engine queues again for free (the
    request never reached the server).  A kept-alive connection is reused
    at once, when the request starts: the engine's own gate was just asked.

Keep-alive
    After a complete response that both sides allow to be kept, the
    connection goes idle in a pool keyed ``("http", ip, port)``,
    ``("https", ip, port, server_hostname)``, ``("proxy", host, port)`` or
    ``("tunnel", proxy_host, proxy_port, ip, port, server_hostname)``.
    Any host on the same key reuses it (the Host header is per request).  An
    idle connection older than ``keep_alive_idle``, closed by the server or
    sending unsolicited bytes is dropped.  A request on a reused connection
    that ends in ``reset`` before any response byte arrived (the server
    closed an idle connection as we used it) is *not* re-sent here: a second
    request at once would break the politeness delay.  The result says so
    (``conn_reused`` and ``bytes_read == 0``) and the engine queues it again,
    politely, without counting it against the URL's retries.  Idle
    connections count in ``open_to(ip)``; the engine may drop them with
    ``close_idle(ip)``.

Flow control
    Reading stops (``pause_reading``) when the shared ``bond_width`` token
    bucket is in debt, and the connection is aborted as soon as the decoded
    body reaches ``max_page_size``.  Content decoding is capped the same way
    (see :mod:`larbin_py.net.decode`), so neither an endless body nor a gzip
    bomb can take more than about ``max_page_size`` of memory.

HTTP/2
    With ``http_version`` ``auto`` or ``2`` (and the h2 package), https
    connections offer ``h2`` by ALPN; one whose handshake chose it becomes
    an :class:`~larbin_py.net.h2conn.H2Session` kept under the same key, and
    the requests to that key share it as streams while it takes them.  The
    sweep checks its streams' deadlines and closes it when idle.  A host
    whose server broke HTTP/2 is offered HTTP/1.1 only from then on
    (``h1_hosts``).

Connections
    Opened by :mod:`larbin_py.net.connect`: Happy Eyeballs over the
    ``addresses`` of ``fetch()`` (the host's other addresses), or the
    proxy; then TLS with the context of :class:`~larbin_py.net.tls.TlsPolicy`
    (or the ``ssl_context`` given).  ``FetchResult.ip`` is the address
    connected to.

Proxy
    With ``proxy`` (a :class:`~larbin_py.net.proxy.ProxyConfig`) http
    requests go to the proxy in absolute form (``GET http://host/path
    HTTP/1.1``, with ``Proxy-Authorization`` when it has credentials); https
    ones through a tunnel, ``CONNECT ip:port`` to the address the crawl
    resolved (politeness is per IP), then TLS to the origin inside it, SNI
    and the certificate check naming the host (larbin_py.net.connect).
    ``no_proxy`` hosts go direct.  The proxy's failures are ``proxyError``.
    A proxy given by name is resolved by the loop's ``getaddrinfo``; give an
    IP to avoid that.
"""

from __future__ import annotations

import asyncio
import ipaddress
import re
import ssl as _ssl
import time
from dataclasses import dataclass, field
from typing import Callable, Iterable

import h11

from ..lazyimport import LazyModule
from ..url import authority_of
from ..transitions import step
from . import tls as _tls
from .auth import AuthRules, parse_challenges
from .bandwidth import TokenBucket
from .choices import H2_AVAILABLE, HTTP_VERSIONS, PARSERS
from .connect import attempt_order, open_socket, tunnel
from .decode import BodyDecoder, DecodeError, accept_encoding, read_headers
from .fastread import BIG, DONE, H11, NEED, FastReader
from .proxy import NoProxy, ProxyConfig, ProxyError

# HTTP/2 (the optional "http2" extra) is imported by the first connection
# whose TLS chose h2: h2 and hpack cost 20-30 ms of a crawl's start, and the
# default httpVersion 1.1 never offers h2.  (H2_AVAILABLE says the package is
# there; an h2 whose own imports fail raises its ImportError at that first
# connection, not at the start.)
_h2conn = LazyModule("larbin_py.net.h2conn", globals(), "_h2conn")

__all__ = ["Fetcher", "FetchResult", "ERRORS", "CONN_TRANSITIONS"]

ERRORS = ("noConnection", "timeout", "reset", "tooBig", "badResponse", "headerTooBig", "proxyError", "tlsError",
          "authRequired", "authRetry")
_ALPN = {"1.1": ("http/1.1",), "auto": ("h2", "http/1.1"), "2": ("h2",)}

ACCEPT = b"text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"
ACCEPT_ENCODING = accept_encoding()
#: Sites whose request headers are kept (see Fetcher._host_headers).
HEADERS_KEPT = 1024

_CONNECTING, _ACTIVE, _IDLE, _CLOSED = range(4)
#: A connection's state machine (every change of ``_Conn.state`` goes through
#: it, see larbin_py.transitions): (state, event) -> new state.
CONN_TRANSITIONS: dict[tuple[int, str], int] = {
    (_CONNECTING, "send"): _ACTIVE,  # start(): a request is written on a new or reused connection
    (_ACTIVE, "done"): _IDLE,  # _finish(): the answer is complete (kept alive, or closed next)
    (_ACTIVE, "fail"): _CLOSED,  # _finish() with an error: never reused
    (_IDLE, "reuse"): _CONNECTING,  # taken from the idle pool; start() makes it active
    (_CONNECTING, "close"): _CLOSED,  # the connect failed or timed out, may_send refused, or the fetcher closes
    (_ACTIVE, "close"): _CLOSED,  # the fetch was cancelled: aborted mid-request (else _finish ran first)
    (_IDLE, "close"): _CLOSED,  # stale, unsolicited bytes, or the fetcher closes
    (_CLOSED, "close"): _CLOSED,  # close() is idempotent
}
_INF = float("inf")


@dataclass(slots=True)
class FetchResult:
    """The outcome of one ``Fetcher.fetch``; ``error`` is None on success.

    A response that arrived is described even when ``error`` is set (e.g. the
    status and truncated body of a ``tooBig`` page).  ``headers`` names are
    lower-case; ``body`` is de-chunked and content-decoded.  The ``raw_*``
    fields are filled only when the fetcher has ``keep_raw`` (for WARC).
    """

    url: str
    ip: str
    status: int | None = None
    reason_phrase: str = ""
    headers: list = field(default_factory=list)
    body: bytes = b""
    error: str | None = None
    error_detail: str = ""
    content_type: str | None = None
    charset: str | None = None
    location: str | None = None
    retry_after: float | None = None
    rtt: float | None = None
    sent_at: float | None = None  # clock time the request was written (after any connect)
    elapsed: float = 0.0
    started_at: float = 0.0  # clock time fetch() started, later by any stall of the loop since (the page deadline's base)
    bytes_read: int = 0
    conn_reused: bool = False
    http_version: bytes = b""
    raw_request: bytes = b""
    raw_response_head: bytes = b""
    raw_body: bytes = b""


def _host_bytes(host_header: str) -> bytes:
    """A Host header's value as sent: IDNA for a non-ASCII name."""
    return host_header.encode() if host_header.isascii() else host_header.encode("idna")


#: A request target h11 accepts (its ``request_target``: one or more VCHAR).
_TARGET = re.compile(rb"[\x21-\x7e]+")


def _header_block(headers) -> bytes:
    """Checked h11 headers as h11 writes them: Host first, then the rest, then the blank line."""
    items = headers.raw_items()
    lines = [b"%s: %s\r\n" % (n, v) for n, v in items if n.lower() == b"host"]
    lines += [b"%s: %s\r\n" % (n, v) for n, v in items if n.lower() != b"host"]
    lines.append(b"\r\n")
    return b"".join(lines)


#: A header value that h11 accepts (its field-value, without obs-text).
_VALUE = re.compile(rb"[\x21-\x7e]+(?:[ \t]+[\x21-\x7e]+)*")
#: A header name h11 accepts (a token, RFC 9110 5.6.2).
_NAME = re.compile(rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")


def _with_header(headers, block: bytes | None, name: bytes, value: bytes) -> tuple:
    """``headers`` and their bytes with ``name: value`` added last.

    The kept per-site headers stay as they are (a cookie, credentials are
    per request).  A value h11 would accept is added to the block here, so
    the fast path still skips h11; any other has no block, and h11 checks
    (and refuses) it.
    """
    return _with_headers(headers, block, ((name, value),))


def _with_headers(headers, block: bytes | None, pairs) -> tuple:
    """:func:`_with_header` for each of ``pairs`` (a recrawl's validators), in one copy."""
    headers = [*(headers.raw_items() if hasattr(headers, "raw_items") else headers), *pairs]
    if block is None:
        return headers, None
    for _name, value in pairs:
        if not _VALUE.fullmatch(value):
            return headers, None
    return headers, block[:-2] + b"".join([b"%s: %s\r\n" % (name, value) for name, value in pairs]) + b"\r\n"


def split_url(url: str) -> tuple[str, str, str, str]:
    """``(scheme, host_header, server_hostname, target)`` of an absolute URL.

    The authority is split by :func:`larbin_py.url.authority_of`.
    ``host_header`` is the authority without userinfo (it keeps ``:port`` when
    the URL has one); ``server_hostname`` is the bare host (no brackets);
    ``target`` is the origin-form path and query (``/`` when empty), without
    the fragment.  Raises ValueError on a URL that is not http(s) with a host.
    """
    parts = authority_of(url)
    if parts is None:
        raise ValueError(f"not an http(s) URL with a host: {url!r}")
    scheme, host_header, host, _, end = parts
    hash_at = url.find("#", end)
    target = url[end:] if hash_at == -1 else url[end:hash_at]
    if target[:1] != "/":  # empty, or a query
        target = "/" + target
    if host[0] == "[":
        host = host[1:-1]
    return scheme, host_header, host, target


class _Conn(asyncio.Protocol):
    """One client connection: transport + reader state + the request in flight.

    A request is read by a :class:`FastReader` (``fast``) or by the h11
    connection ``h``; a fast reader that hands its response over replays it
    into a fresh h11 connection, which then reads the rest.
    """

    __slots__ = (
        "f", "key", "ip", "state", "transport", "h", "fast", "request", "waiter", "connect_task",
        "deadline", "idle_since", "res", "resp_bytes", "chunks", "raw_chunks",
        "raw_size", "decoder", "sent_at", "head_buf", "n_info", "method_head",
        "got_response", "bw_paused", "closed", "body_size", "body_in", "phase", "peer", "override",
        "auth_rule", "auth_sent", "proxied", "h2", "early",
    )

    def __init__(self, fetcher: "Fetcher", key: tuple, ip: str) -> None:
        self.f = fetcher
        self.key = key
        self.ip = ip
        self.state = _CONNECTING
        self.transport: asyncio.Transport | None = None
        self.h: h11.Connection | None = None  # made when a request is first read by h11
        self.fast: FastReader | None = None
        self.request = None  # h11.Request or (method, target, headers): see start()
        self.waiter: asyncio.Future | None = None
        self.connect_task: asyncio.Task | None = None
        self.deadline = _INF
        self.idle_since = 0.0
        self.res: FetchResult | None = None
        self.resp_bytes = 0
        self.chunks: list[bytes] = []
        self.raw_chunks: list[bytes] | None = None
        self.raw_size = 0
        self.decoder: BodyDecoder | None = None
        self.sent_at = 0.0
        self.head_buf: bytearray | None = None
        self.n_info = 0
        self.method_head = False
        self.got_response = False
        self.bw_paused = False
        self.closed = False
        self.body_size = 0  # identity body bytes kept so far
        self.body_in = 0  # body bytes received (before content decoding): the page deadline's allowance
        self.phase = "connect"  # while connecting: connect, proxy (the proxy's connect and CONNECT), tls
        self.peer = ip  # the address connected to (Happy Eyeballs may pick another of the host's)
        self.override: tuple[str, str] | None = None  # (error, detail) the head decided (a 407, a 401)
        self.auth_rule = None  # the auth rule of the request in flight (larbin_py.net.auth)
        self.auth_sent = False  # the request carried that rule's credentials
        self.proxied = key[0] == "proxy"  # absolute-form requests to an http proxy: its 407 is its own
        self.h2 = False  # the TLS handshake chose h2: the fetcher makes it an HTTP/2 session
        self.early = b""  # bytes the server sent before our first request (an HTTP/2 server's SETTINGS)

    # -- asyncio.Protocol -------------------------------------------------
    def connection_made(self, transport) -> None:
        self.transport = transport
        bucket = self.f._bucket
        if bucket is not None and bucket.paused:
            transport.pause_reading()
            self.bw_paused = True

    def data_received(self, data: bytes) -> None:
        f = self.f
        n = len(data)
        f._bytes += n
        if f._bucket is not None:
            f._bucket.consume(n)
        if self.state != _ACTIVE:
            if self.state == _IDLE:  # unsolicited bytes: not reusable
                self.close(abort=True)
            elif self.state == _CONNECTING and len(self.early) < 65536:
                self.early += data  # an HTTP/2 server speaks first: its session reads them
            return
        self.resp_bytes += n
        if self.head_buf is not None and not self.got_response:
            self.head_buf += data
        fast = self.fast
        if fast is not None:
            self._fast_outcome(fast.feed(data), False)
        else:
            self.h.receive_data(data)
            self._events()
        if not self.got_response and self.resp_bytes > f.max_header_size and self.state == _ACTIVE:
            # informational answers count with the head they precede: an endless 100 Continue ends here
            self._finish("headerTooBig", f"response head (with {self._n_info()} "
                                         f"informational answers) over {f.max_header_size} bytes")

    def connection_lost(self, exc) -> None:
        state = self.state
        if state == _ACTIVE:
            if exc is not None:
                self._finish("reset", f"connection lost: {exc!r}")
            elif self.fast is not None:
                self._fast_outcome(self.fast.feed_eof(), True)
            else:
                self._h11_eof()
            if self.state == _ACTIVE:  # no complete message came out
                self._finish("reset", "connection closed before the response was complete")
        self.close()

    def _h11_eof(self) -> None:
        try:
            self.h.receive_data(b"")
        except RuntimeError:
            pass
        self._events(eof=True)

    # -- request/response -------------------------------------------------
    def start(self, res: FetchResult, request, head: bytes | None = None, secrets=()) -> asyncio.Future:
        """Send ``request`` for ``res``; the returned future is set when done.

        With ``head`` (the request's bytes, made by the fetcher) a
        :class:`FastReader` reads the response, and ``request`` is an
        ``h11.Request`` or its ``(method, target, headers)``, for h11 should
        it take over; without, ``request`` is an ``h11.Request`` that h11
        writes, and h11 reads the response.  ``secrets``: credential bytes
        of the request, kept out of ``raw_request`` (``***`` there).
        """
        f = self.f
        self.state = step(CONN_TRANSITIONS, self.state, "send", "connection")
        self.res = res
        self.resp_bytes = 0
        self._clear_response()
        self.head_buf = bytearray() if f.keep_raw else None
        self.method_head = head is None and request.method == b"HEAD"
        self.deadline = res.started_at + f.timeout_page
        self.waiter = waiter = f._loop.create_future()
        if head is not None:
            self.fast = FastReader(self._on_head, self._on_data, f.max_header_size,
                                   f.max_page_size + f.max_header_size)
            self.request = request
            data = head
        else:
            h = self.h
            if h is None:
                h = self.h = h11.Connection(h11.CLIENT, max_incomplete_event_size=f.max_header_size)
            data = h.send(request) + h.send(h11.EndOfMessage())
        if f.keep_raw:
            raw = data
            for secret in secrets:
                raw = raw.replace(secret, b"***")
            res.raw_request = raw
        self.sent_at = res.sent_at = f._clock()
        self.transport.write(data)
        return waiter

    def _n_info(self) -> int:
        fast = self.fast
        return fast.n_info if fast is not None else self.n_info

    def _clear_response(self) -> None:
        """Forget what was read of the response (its head, its body so far)."""
        self.got_response = False
        self.override = None
        self.n_info = 0
        self.chunks = []
        self.body_size = 0
        self.body_in = 0
        self.decoder = None
        self.raw_chunks = [] if self.f.keep_raw else None
        self.raw_size = 0

    def _fast_outcome(self, outcome: str, eof: bool) -> None:
        if outcome is NEED or self.state != _ACTIVE:
            return
        if outcome is DONE:
            self._complete()
        elif outcome is H11:
            self._hand_over(eof)
        elif outcome is BIG:
            self._finish("headerTooBig", self.fast.detail)
        else:  # BAD: after a good head; at the end of the connection, h11 says reset
            self._finish("reset" if eof else "badResponse", self.fast.detail)

    def _hand_over(self, eof: bool) -> None:
        """h11 reads this response from its first byte (see :mod:`.fastread`).

        What llhttp had delivered (a head, part of a chunked body) is
        dropped first: h11 delivers it again.
        """
        f = self.f
        pending = self.fast.pending
        self.fast = None
        f._handovers += 1
        self._clear_response()  # if llhttp read the head, then refused the body: h11 reads it all again
        request = self.request
        if type(request) is tuple:  # a GET the fetcher checked without h11 (see Fetcher._fetch)
            method, target, headers = request
            request = h11.Request(method=method, target=target, headers=headers)
        h = self.h = h11.Connection(h11.CLIENT, max_incomplete_event_size=f.max_header_size)
        h.send(request)
        h.send(h11.EndOfMessage())
        h.receive_data(b"".join(pending))
        if eof:
            self._h11_eof()
        else:
            self._events()

    def _complete(self) -> None:
        """The response is whole: end the content decoding, then finish."""
        dec = self.decoder
        if dec is not None:
            try:
                dec.finish()
            except DecodeError as exc:
                self._finish("badResponse", str(exc))
                return
        self._finish(None, "")

    def _events(self, eof: bool = False) -> None:
        h = self.h
        while self.state == _ACTIVE:
            try:
                ev = h.next_event()
            except h11.RemoteProtocolError as exc:
                if eof and self.got_response:
                    self._finish("reset", f"connection closed mid-body: {exc}")
                elif eof:
                    self._finish("reset", f"connection closed before the response: {exc}")
                elif getattr(exc, "error_status_hint", 400) == 431:
                    self._finish("headerTooBig", f"response head over {self.f.max_header_size} bytes")
                else:
                    self._finish("badResponse", str(exc))
                return
            t = type(ev)
            if t is h11.Data:
                self._on_data(ev.data)
            elif ev is h11.NEED_DATA or ev is h11.PAUSED:
                return
            elif t is h11.Response:
                self._on_head(ev.status_code, ev.reason, ev.http_version, list(ev.headers),
                              ev.headers.raw_items() if self.head_buf is not None else ())
            elif t is h11.EndOfMessage:
                self._complete()
                return
            elif t is h11.InformationalResponse:
                self.n_info += 1
            elif t is h11.ConnectionClosed:
                self._finish("reset", "connection closed before the response was complete")
                return

    def _on_head(self, status: int, reason: bytes, version: bytes, headers: list, raw_items) -> None:
        """The final response's head: ``headers`` with lower-case names, ``raw_items`` as sent."""
        f = self.f
        res = self.res
        self.got_response = True
        if self.fast is not None:
            self.n_info = self.fast.n_info
        res.rtt = f._clock() - self.sent_at
        res.status = status
        res.reason_phrase = reason.decode("latin-1")
        res.http_version = version
        res.headers = headers
        coding = read_headers(res, headers)
        if coding is not None and not self.method_head:
            self.decoder = BodyDecoder(coding, f.max_page_size)
        if status == 407 and self.proxied:
            self.override = ("proxyError", "proxy answered 407 proxy authentication required"
                                           " (credentials missing or refused)")
        elif status == 401:
            self.override = _unauthorized(self.auth_rule, self.auth_sent, headers)
        elif self.auth_sent:
            self.auth_rule.succeeded()
        if self.head_buf is not None:
            res.raw_response_head = self._raw_head(status, reason, version, raw_items)
            self.head_buf = None

    def _raw_head(self, status: int, reason: bytes, version: bytes, raw_items) -> bytes:
        """The final response head exactly as received (status line to CRLFCRLF)."""
        buf = self.head_buf
        pos = start = 0
        for _ in range(self.n_info + 1):
            j = buf.find(b"\r\n\r\n", pos)
            if j < 0:  # bare-LF server: rebuild from the parser's case-preserving view
                lines = [b"HTTP/%s %d %s" % (version, status, reason)]
                lines += [n + b": " + v for n, v in raw_items]
                return b"\r\n".join(lines) + b"\r\n\r\n"
            start, pos = pos, j + 4
        return bytes(buf[start:pos])

    def _on_data(self, data: bytes) -> None:
        f = self.f
        self.body_in += len(data)
        if self.raw_chunks is not None and self.raw_size < f.max_page_size:
            room = f.max_page_size - self.raw_size
            piece = data if len(data) <= room else data[:room]
            self.raw_chunks.append(piece)
            self.raw_size += len(piece)
        dec = self.decoder
        if dec is None:
            room = f.max_page_size - self.raw_size if self.raw_chunks is not None else None
            size = self.body_size + len(data)
            if size > f.max_page_size:
                keep = f.max_page_size - self.body_size
                if keep > 0:
                    self.chunks.append(data[:keep])
                    self.body_size += keep
                self._finish("tooBig", f"body over {f.max_page_size} bytes")
                return
            self.body_size = size
            self.chunks.append(data)
            return
        try:
            out = dec.feed(data)
        except DecodeError as exc:
            self._finish("badResponse", str(exc))
            return
        if out:
            self.chunks.append(out)
        if dec.over:
            self._finish("tooBig", f"decoded body over {f.max_page_size} bytes")

    def _finish(self, error: str | None, detail: str) -> None:
        """Complete the request in flight; keep or close the connection."""
        f = self.f
        res = self.res
        override = self.override
        if override is not None and error is None:  # a whole answer: the connection stays good
            self.override = None
            self.state = step(CONN_TRANSITIONS, self.state, "done", "connection")
            error, detail = override
            res.error, res.error_detail = error, detail
            f._errors[error] = f._errors.get(error, 0) + 1
            return self._end(res, None)
        self.state = step(CONN_TRANSITIONS, self.state, "fail" if error else "done", "connection")
        res.error = error
        res.error_detail = detail
        if error:
            f._errors[error] = f._errors.get(error, 0) + 1
        self._end(res, error)

    def _end(self, res: FetchResult, error: str | None) -> None:
        """Hand ``res`` its body; keep the connection (no ``error``) or close it."""
        f = self.f
        res.bytes_read = self.resp_bytes
        chunks = self.chunks
        res.body = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        if self.raw_chunks is not None:
            res.raw_body = b"".join(self.raw_chunks) if self.decoder is not None else res.body
        self.chunks = []
        self.raw_chunks = None
        self.res = None
        self.override = None
        self.auth_rule = None
        self.auth_sent = False
        waiter = self.waiter
        self.waiter = None
        self.request = None
        fast = self.fast
        if fast is not None:
            fast.stop()
            self.fast = None
            keep = error is None and not f._closing and fast.reusable
        else:
            h = self.h
            keep = (
                error is None
                and not f._closing
                and h.our_state is h11.DONE
                and h.their_state is h11.DONE
                and not h.trailing_data[0]
            )
            if keep:
                try:
                    h.start_next_cycle()
                except h11.LocalProtocolError:
                    keep = False
        if keep:
            self.idle_since = f._clock()
            self.deadline = _INF
            f._make_idle(self)
        else:
            self.close(abort=error is not None)
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def expire(self) -> None:
        """Called by the sweep when the page deadline has passed."""
        f = self.f
        body = min(self.body_in, f.max_page_size)
        self._finish("timeout", f"no complete response within the page deadline "
                                f"({f.timeout_page:g}s + {body} body B / {f.timeout_incr} B/s)")

    def close(self, abort: bool = False) -> None:
        """Close the transport and forget this connection (idempotent)."""
        if self.closed:
            return
        self.closed = True
        if self.state == _ACTIVE and self.res is not None:
            self._finish("reset", "connection closed by the fetcher")
        self.state = step(CONN_TRANSITIONS, self.state, "close", "connection")
        self.f._forget(self)
        t = self.transport
        if t is not None:
            if abort:
                t.abort()
            else:
                t.close()


class Fetcher:
    """Owns all HTTP connections: see the module docstring for the behaviour."""

    SWEEP_INTERVAL = 0.25
    #: A sweep later than this (seconds) means the loop stood still: deadlines move by the lateness.
    STALL_SLACK = 0.25

    def __init__(
        self,
        *,
        user_agent: str,
        from_addr: str = "",
        connect_timeout: float = 10.0,
        timeout_page: float = 30.0,
        timeout_incr: int = 2000,
        max_page_size: int = 5_000_000,
        max_header_size: int = 64 * 1024,
        proxy: ProxyConfig | tuple[str, int] | None = None,
        no_proxy=(),
        bond_width: int = 0,
        keep_alive_idle: float = 5.0,
        keep_raw: bool = False,
        parser: str = "httptools",
        ssl_context=None,
        tls: _tls.TlsPolicy | None = None,
        auth: AuthRules | None = None,
        happy_eyeballs_delay: float = 0.25,
        http_version: str = "1.1",
        clock: Callable[[], float] = time.monotonic,
        loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        self.user_agent = user_agent
        self.from_addr = from_addr
        self.connect_timeout = connect_timeout
        self.timeout_page = timeout_page
        self.timeout_incr = timeout_incr
        self._per_byte = 1.0 / timeout_incr if timeout_incr > 0 else 0.0
        self.max_page_size = max_page_size
        self.max_header_size = max_header_size
        if isinstance(proxy, tuple):
            proxy = ProxyConfig(*proxy)
        self.proxy: ProxyConfig | None = proxy
        self.no_proxy = no_proxy if isinstance(no_proxy, NoProxy) else NoProxy(no_proxy)
        self.tls = tls
        self.auth = auth if auth else None
        self.happy_eyeballs_delay = happy_eyeballs_delay
        if http_version not in HTTP_VERSIONS:
            raise ValueError(f"http_version must be one of {', '.join(HTTP_VERSIONS)}, got {http_version!r}")
        if http_version == "2" and not H2_AVAILABLE:
            raise ValueError("httpVersion 2 needs the h2 package (pip install 'larbin_py[http2]')")
        self.http_version = http_version if H2_AVAILABLE else "1.1"
        self._h2_sessions: dict[tuple, "H2Session"] = {}
        #: Hosts whose server broke HTTP/2: spoken to in HTTP/1.1 from then on.
        self.h1_hosts: set[str] = set()
        self.bond_width = bond_width
        self.keep_alive_idle = keep_alive_idle
        self.keep_raw = keep_raw
        if parser not in PARSERS:
            raise ValueError(f"parser must be one of {', '.join(PARSERS)}, got {parser!r}")
        self.parser = parser
        self._fast = parser == "httptools"
        self._ssl_context = ssl_context
        self._clock = clock
        self._loop_arg = loop
        self._loop: asyncio.AbstractEventLoop | None = None
        self._bucket: TokenBucket | None = None
        self._base_headers = [(b"User-Agent", user_agent.encode("latin-1", "replace"))]
        if from_addr:
            self._base_headers.append((b"From", from_addr.encode("latin-1", "replace")))
        self._base_headers += [
            (b"Accept", ACCEPT),
            (b"Accept-Encoding", ACCEPT_ENCODING),
            (b"Connection", b"keep-alive"),
        ]
        self._base_names = frozenset([b"host", *(name.lower() for name, _ in self._base_headers)])
        # Host header -> (checked request headers, their bytes) of that site (_host_headers)
        self._headers_by_host: dict[str, tuple] = {}
        self._live: set[_Conn] = set()  # connecting or active
        self._idle: dict[tuple, list[_Conn]] = {}
        self._n_idle = 0
        self._per_ip: dict[str, int] = {}
        self._sweeper: asyncio.TimerHandle | None = None
        self._sweep_due = 0.0  # when the armed sweep should run
        self._stalled = 0.0  # seconds the loop stood still, in all (deadlines moved by them)
        self._stalls = 0
        self._closing = False
        #: Asked before a request is written on a connection just opened (module docstring).
        self.may_send: Callable[[str], bool] | None = None
        self._requests = 0
        self._reuses = 0
        self._opened = 0
        self._bytes = 0
        self._handovers = 0
        self._errors: dict[str, int] = {}
        self._tls_versions: dict[str, int] = {}  # negotiated per connection
        self._alpn: dict[str, int] = {}
        self._fallbacks = 0  # connections Happy Eyeballs made to another address than the first
        self._h2_requests = 0

    # -- public ------------------------------------------------------------
    def _count(self, error: str) -> None:
        self._errors[error] = self._errors.get(error, 0) + 1

    def _h2_wanted(self, host: str) -> bool:
        return self.http_version != "1.1" and host not in self.h1_hosts

    @property
    def open_connections(self) -> int:
        """Open connections, idle keep-alive ones included."""
        return sum(self._per_ip.values())

    def open_to(self, ip: str) -> int:
        """Open connections (active or idle) to ``ip``: an address, or a network (``2001:db8::/64``,
        the frontier's key of an IPv6 server)."""
        if "/" in ip:
            return sum(n for a, n in self._per_ip.items() if _in_net(a, ip))
        return self._per_ip.get(ip, 0)

    def idle_to(self, ip: str) -> int:
        """Idle keep-alive connections to ``ip`` (an address or a network; an HTTP/2 session without
        streams counts)."""
        return (sum(1 for conns in self._idle.values() for c in conns if _in_net(c.ip, ip))
                + sum(1 for s in self._h2_sessions.values() if not s.streams and _in_net(s.ip, ip)))

    def close_idle(self, ip: str | None = None) -> int:
        """Close idle connections to ``ip`` (an address or a network; all idle ones if None); how many."""
        victims = [c for conns in self._idle.values() for c in conns if ip is None or _in_net(c.ip, ip)]
        victims += [s for s in self._h2_sessions.values() if not s.streams and (ip is None or _in_net(s.ip, ip))]
        for c in victims:
            c.close()
        return len(victims)

    @property
    def stats(self) -> dict:
        """A snapshot: connections, requests, reuses, retries, bytes, errors by kind."""
        return {
            "open_connections": self.open_connections,
            "idle_connections": self._n_idle,
            "active_connections": len(self._live),
            "connections_opened": self._opened,
            "requests": self._requests,
            "reuses": self._reuses,
            "bytes": self._bytes,
            "h11_handovers": self._handovers,
            "errors": dict(self._errors),
            "tls_versions": dict(self._tls_versions),
            "alpn": dict(self._alpn),
            "h2_sessions": len(self._h2_sessions),
            "h2_requests": self._h2_requests,
            "h2_fallback_hosts": len(self.h1_hosts),
            "address_fallbacks": self._fallbacks,
            "stalls": self._stalls,
            "stalled_seconds": round(self._stalled, 3),
        }

    async def close(self) -> None:
        """Close every connection; fetches in flight end with ``reset``."""
        self._closing = True
        for s in list(self._h2_sessions.values()):
            s.close()
        for c in list(self._live) + [c for cs in self._idle.values() for c in cs]:
            if c.connect_task is not None and not c.connect_task.done():
                c.connect_task.cancel()
            c.close(abort=True)
        if self._sweeper is not None:
            self._sweeper.cancel()
            self._sweeper = None
        if self._bucket is not None:
            self._bucket.close()
        await asyncio.sleep(0)  # let transports deliver connection_lost

    async def fetch(self, url: str, ip: str, port: int, *, method: str = "GET",
                    extra_headers: Iterable[tuple] = (), cookie: bytes | None = None,
                    addresses: Iterable[str] = ()) -> FetchResult:
        """Fetch ``url`` from ``ip:port``; never raises except CancelledError.

        ``cookie`` is a ``Cookie`` header's value (from the cookie jar), sent
        last; the site's kept headers and the fast path are used as without.
        ``extra_headers`` (``(name, value)`` bytes: a ``site`` line's) are sent
        after the base ones, each replacing a base header of its name
        (``User-Agent``, ``Accept``...); h11 checks them.
        ``addresses``: the host's other addresses, tried by Happy Eyeballs
        (larbin_py.net.connect) when ``ip`` does not answer quickly.
        """
        started = self._clock()
        res = FetchResult(url, ip, started_at=started)
        try:
            await self._fetch(res, url, ip, port, method, extra_headers, cookie, addresses)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a bug here must not kill the engine
            res.error = "badResponse"
            res.error_detail = f"internal error: {exc!r}"
        res.elapsed = self._clock() - started
        return res

    # -- internals ---------------------------------------------------------
    async def _fetch(self, res: FetchResult, url: str, ip: str, port: int,
                     method: str, extra_headers, cookie: bytes | None = None, addresses=()) -> None:
        if self._loop is None:
            self._loop = self._loop_arg or asyncio.get_running_loop()
            if self.bond_width > 0:
                self._bucket = TokenBucket(self.bond_width, pause=self._pause_all,
                                           resume=self._resume_all, loop=self._loop)
        if self._closing:
            res.error, res.error_detail = "noConnection", "fetcher closed"
            return
        try:
            scheme, host_header, sni, target = split_url(url)
        except ValueError as exc:
            res.error, res.error_detail = "noConnection", str(exc)
            return
        tls = scheme == "https"
        proxy = self.proxy
        if proxy is not None and self.no_proxy and self.no_proxy.bypass(sni):
            proxy = None
        if proxy is None:
            key = ("https", ip, port, sni) if tls else ("http", ip, port)
        elif tls:  # a tunnel to host:port through the proxy (CONNECT)
            key = ("tunnel", proxy.host, proxy.port, ip, port, sni)
        else:  # absolute-form requests to the proxy
            key = ("proxy", proxy.host, proxy.port)
        rule = self.auth.for_url(url) if self.auth is not None else None
        headers, block, secrets, sent = self._request_headers(
            host_header, method, target, extra_headers=extra_headers, cookie=cookie, rule=rule,
            proxy=proxy if proxy is not None and not tls else None)
        if proxy is not None and not tls:
            target = url.partition("#")[0]
        target_bytes = target.encode("latin-1", "replace")
        head = None
        if self._fast and method == "GET" and block is not None and _TARGET.fullmatch(target_bytes):
            # h11 would accept this request as it is: it is built only if h11 must read the answer
            request = (b"GET", target_bytes, headers)
            head = b"GET %s HTTP/1.1\r\n%s" % (target_bytes, block)
        else:
            request = h11.Request(method=method, target=target_bytes, headers=headers)
            if self._fast and request.method != b"HEAD":  # h11 reads HEAD responses: llhttp cannot
                if block is None:
                    block = _header_block(request.headers)
                head = b"%s %s HTTP/1.1\r\n%s" % (request.method, request.target, block)
        self._requests += 1
        if tls and self.http_version != "1.1":
            session = self._h2_sessions.get(key)
            if session is not None and session.can_take():
                self._reuses += 1
                res.conn_reused = True
                return await self._h2_request(session, res, method, host_header, target, headers, rule, sent,
                                              secrets)
        conn = self._take_idle(key)
        reused = conn is not None
        if conn is None:
            # CONNECT names the address the crawl resolved (its politeness is per IP); SNI and the
            # certificate check name the host
            authority = f"[{ip}]:{port}" if ":" in ip else f"{ip}:{port}"
            stalled = self._stalled
            conn = await self._connect(res, key, ip, port, tls, sni, addresses, proxy, authority)
            if conn is None:
                return
            if self._stalled != stalled:  # the loop stood still while connecting: the page's time too
                res.started_at += self._stalled - stalled
            if self.may_send is not None and not self.may_send(ip):
                conn.close()
                res.error, res.error_detail = "notSent", "the connection opened when requests to this IP " \
                                                         "were no longer allowed here (its lease may have lapsed)"
                self._count("notSent")
                return
            if conn.h2:  # the server chose HTTP/2 by ALPN: the session takes the transport over
                session = self._adopt_h2(conn)
                return await self._h2_request(session, res, method, host_header, target, headers, rule, sent,
                                              secrets)
        else:
            self._reuses += 1
        res.conn_reused = reused
        res.ip = conn.peer
        conn.auth_rule, conn.auth_sent = rule, sent
        waiter = conn.start(res, request, head, secrets)
        try:
            await waiter
        except asyncio.CancelledError:
            conn.res = None
            conn.close(abort=True)
            raise

    async def _h2_request(self, session, res: FetchResult, method: str, host_header: str, target: str, headers,
                          rule, sent: bool, secrets=()) -> None:
        """One request as a stream of ``session`` (larbin_py.net.h2conn).

        With ``keep_raw`` the request is recorded as an HTTP/1.1-shaped
        text (``GET /path HTTP/2``, then the headers), credentials as ``***``.
        """
        self._h2_requests += 1
        res.ip = session.peer
        if self.keep_raw:
            raw = b"%s %s HTTP/2\r\n%s" % (method.encode(), target.encode("latin-1", "replace"),
                                             _header_block(h11.Request(method=method, target=b"/",
                                                                       headers=headers).headers))
            for secret in secrets:
                raw = raw.replace(secret, b"***")
            res.raw_request = raw
        await session.request(res, method, _h2conn.request_headers(method, host_header, target, headers),
                              auth_rule=rule, auth_sent=sent, unauthorized=_unauthorized)
        if session.broken and session.key[-1] not in self.h1_hosts:
            self.h1_hosts.add(session.key[-1])  # the server broke HTTP/2: 1.1 for its host from now on

    def _adopt_h2(self, conn: _Conn) -> "H2Session":
        """A connection whose TLS chose h2 becomes an HTTP/2 session (it keeps the per-IP count)."""
        conn.state = step(CONN_TRANSITIONS, conn.state, "close", "connection")
        conn.closed = True
        self._live.discard(conn)
        session = _h2conn.H2Session(self, conn.key, conn.ip, conn.peer, conn.transport, early=conn.early)
        old = self._h2_sessions.get(conn.key)
        self._h2_sessions[conn.key] = session
        if old is not None and not old.streams:
            old.close()
        self._arm()
        return session

    def _h2_closed(self, session) -> None:
        """Bookkeeping when an HTTP/2 session closes."""
        if self._h2_sessions.get(session.key) is session:
            del self._h2_sessions[session.key]
        n = self._per_ip.get(session.ip, 0) - 1
        if n > 0:
            self._per_ip[session.ip] = n
        else:
            self._per_ip.pop(session.ip, None)

    def _request_headers(self, host_header: str, method: str, target: str, *, extra_headers=(),
                         cookie: bytes | None = None, rule=None, proxy: ProxyConfig | None = None) -> tuple:
        """Every header of one request, in one place: ``(headers, block, secrets, credentials_sent)``.

        The site's kept headers (:meth:`_host_headers`), or those and
        ``extra_headers`` checked anew (each replacing a base header of its name); then ``Authorization`` (the auth
        ``rule`` of the URL, if it has credentials to send now),
        ``Proxy-Authorization`` (absolute-form requests to a ``proxy`` with
        credentials) and ``Cookie`` last.  ``block`` is their bytes when the
        fast path may send them without h11 (else None); ``secrets`` the
        credential bytes a record must not keep.
        """
        if extra_headers and not self._adds_only(extra_headers):
            # a request's own headers replace the base ones of their names
            names = {name.lower() for name, _ in extra_headers}
            headers = [(b"Host", _host_bytes(host_header)),
                       *(h for h in self._base_headers if h[0].lower() not in names), *extra_headers]
            block = None
        else:
            headers, block = self._headers_by_host.get(host_header) or self._host_headers(host_header)
            if extra_headers:  # (a recrawl's validators: added after the kept ones)
                headers, block = _with_headers(headers, block, extra_headers)
        secrets: list[bytes] = []
        sent = False
        if rule is not None:
            cred = rule.credential(method, target)
            if cred is not None:
                headers, block = _with_header(headers, block, b"Authorization", cred.value)
                secrets.append(cred.secret)
                sent = True
        if proxy is not None:
            auth = proxy.authorization()
            if auth is not None:
                headers, block = _with_header(headers, block, b"Proxy-Authorization", auth)
                secrets.append(auth.partition(b" ")[2])
        if cookie is not None:
            headers, block = _with_header(headers, block, b"Cookie", cookie)
        return headers, block, secrets, sent

    def _adds_only(self, extra_headers) -> bool:
        """Do ``extra_headers`` only add headers (well-formed names, none of a base header's
        or Host)?  They are then appended to the site's kept ones and their bytes, h11 left out."""
        base = self._base_names
        for name, _value in extra_headers:
            if not _NAME.fullmatch(name) or name.lower() in base:
                return False
        return True

    def _host_headers(self, host_header: str) -> tuple:
        """The request headers for ``host_header``, checked by h11 once, and their bytes; kept.

        h11 takes headers it has already checked (an event's ``headers``)
        without checking them again: a site's requests share one list, and
        the fast path sends the same bytes h11 would write.
        """
        headers = h11.Request(method=b"GET", target=b"/",
                              headers=[(b"Host", _host_bytes(host_header)), *self._base_headers]).headers
        if len(self._headers_by_host) >= HEADERS_KEPT:
            self._headers_by_host.clear()
        kept = self._headers_by_host[host_header] = (headers, _header_block(headers))
        return kept

    async def _connect(self, res: FetchResult, key: tuple, ip: str, port: int, tls: bool, sni: str,
                       addresses, proxy: ProxyConfig | None, authority: str) -> _Conn | None:
        """Open a connection for ``key``; on failure set ``res`` and return None.

        The whole opening (Happy Eyeballs, the proxy's CONNECT, the TLS
        handshake) is one task that the sweep cancels at the connect
        deadline; the phase it was in names the failure.
        """
        loop = self._loop
        conn = _Conn(self, key, ip)
        conn.deadline = self._clock() + self.connect_timeout
        self._opened += 1
        self._per_ip[ip] = self._per_ip.get(ip, 0) + 1
        self._live.add(conn)
        self._arm()
        task = conn.connect_task = loop.create_task(
            self._open(conn, ip, port, tls, sni, addresses, proxy, authority))
        try:
            await asyncio.shield(task)
        except asyncio.CancelledError:
            if not conn_timed_out(conn):  # our caller was cancelled
                if not task.done():
                    task.cancel()
                conn.close(abort=True)
                raise
            if conn.phase == "proxy":
                return self._failed(conn, res, "proxyError", f"proxy {proxy.shown()} did not open the tunnel "
                                                             f"within the connect timeout ({self.connect_timeout:g}s)")
            what = "TLS handshake" if conn.phase == "tls" else "connect"
            return self._failed(conn, res, "noConnection", f"{what} timeout ({self.connect_timeout:g}s)")
        except ProxyError as exc:
            return self._failed(conn, res, "proxyError", str(exc))
        except _ssl.SSLError as exc:  # certificate refused, handshake refused: the server's TLS
            return self._failed(conn, res, "tlsError", _tls.failure(exc))
        except (OSError, ValueError) as exc:
            detail = _connect_detail(exc)
            if conn.phase == "tls":
                detail = f"during the TLS handshake: {detail}"
            return self._failed(conn, res, "noConnection", detail)
        conn.connect_task = None
        if conn.closed or conn.transport is None:
            return self._failed(conn, res, "noConnection", "connection closed during connect")
        if tls:
            version, alpn = _tls.negotiated(conn.transport)
            if version:
                self._tls_versions[version] = self._tls_versions.get(version, 0) + 1
            if alpn:
                self._alpn[alpn] = self._alpn.get(alpn, 0) + 1
            conn.h2 = alpn == "h2" and H2_AVAILABLE
        if conn.peer != ip:
            self._fallbacks += 1
        return conn

    async def _open(self, conn: _Conn, ip: str, port: int, tls: bool, sni: str, addresses,
                    proxy: ProxyConfig | None, authority: str) -> None:
        """Connect ``conn``: a socket (Happy Eyeballs, or the proxy), the tunnel, TLS."""
        loop = self._loop
        if proxy is not None:
            conn.phase = "proxy"
        sock, peer = await open_socket(loop, attempt_order(ip, addresses), port,
                                       delay=self.happy_eyeballs_delay, proxy=proxy)
        try:
            if proxy is None:
                conn.peer = peer
            else:
                if tls:
                    await tunnel(loop, sock, authority, proxy, user_agent=self._base_headers[0][1],
                                 max_head=self.max_header_size)
                conn.phase = "connect"
            if tls:
                conn.phase = "tls"
                ctx = self._ssl_context
                if ctx is None:
                    if self.tls is None:
                        self.tls = _tls.TlsPolicy()
                    ctx = self.tls.context(sni, _ALPN[self.http_version if self._h2_wanted(sni) else "1.1"])
                await loop.create_connection(lambda: conn, sock=sock, ssl=ctx, server_hostname=sni)
            else:
                await loop.create_connection(lambda: conn, sock=sock)
        except BaseException:
            sock.close()
            raise

    def _failed(self, conn: _Conn, res: FetchResult, error: str, detail: str) -> None:
        """A connection that could not be opened: closed, and ``res`` says why."""
        conn.close(abort=True)
        res.error, res.error_detail = error, detail
        self._errors[error] = self._errors.get(error, 0) + 1
        return None

    def _take_idle(self, key: tuple) -> _Conn | None:
        conns = self._idle.get(key)
        if not conns:
            return None
        limit = self._clock() - self.keep_alive_idle
        while conns:
            c = conns.pop()
            self._n_idle -= 1
            if c.closed or c.idle_since < limit or c.transport.is_closing():
                c.state = step(CONN_TRANSITIONS, c.state, "close", "connection")
                c.closed = False  # let close() run its bookkeeping once
                c.close()
                continue
            if not conns:
                del self._idle[key]
            c.state = step(CONN_TRANSITIONS, c.state, "reuse", "connection")  # start() makes it active
            self._live.add(c)
            self._arm()
            return c
        del self._idle[key]
        return None

    def _make_idle(self, conn: _Conn) -> None:
        self._live.discard(conn)
        self._idle.setdefault(conn.key, []).append(conn)
        self._n_idle += 1

    def _forget(self, conn: _Conn) -> None:
        """Bookkeeping when a connection closes."""
        self._live.discard(conn)
        conns = self._idle.get(conn.key)
        if conns and conn in conns:
            conns.remove(conn)
            self._n_idle -= 1
            if not conns:
                del self._idle[conn.key]
        n = self._per_ip.get(conn.ip, 0) - 1
        if n > 0:
            self._per_ip[conn.ip] = n
        else:
            self._per_ip.pop(conn.ip, None)

    # -- the sweep ---------------------------------------------------------
    def _arm(self) -> None:
        if self._sweeper is None and not self._closing:
            self._sweep_due = self._clock() + self.SWEEP_INTERVAL
            self._sweeper = self._loop.call_later(self.SWEEP_INTERVAL, self._sweep)

    def _sweep(self) -> None:
        self._sweeper = None
        now = self._clock()
        late = now - self._sweep_due
        if late > self.STALL_SLACK:
            self._stood_still(late)
        per_byte = self._per_byte
        cap = self.max_page_size
        for s in list(self._h2_sessions.values()):
            s.expire(now)
        for c in list(self._live):
            if c.state == _ACTIVE:
                body = c.body_in
                if now >= c.deadline + (body if body < cap else cap) * per_byte:
                    c.expire()
            elif c.state == _CONNECTING and c.connect_task is not None and now >= c.deadline:
                c.deadline = -_INF  # marks "timed out" for _connect
                c.connect_task.cancel()
        if self._idle:
            limit = now - self.keep_alive_idle
            stale = [c for cs in self._idle.values() for c in cs if c.idle_since < limit]
            for c in stale:
                c.close()
        if self._live or self._idle or self._h2_sessions:
            self._arm()

    def _stood_still(self, late: float) -> None:
        """The loop ran nothing for ``late`` seconds: every deadline in flight moves by as much
        (module docstring, *The loop standing still*)."""
        self._stalls += 1
        self._stalled += late
        for c in self._live:
            c.deadline += late  # (a connect's or a page's; +-inf stays)
        for s in self._h2_sessions.values():
            for st in s.streams.values():
                st.deadline += late

    # -- bandwidth ---------------------------------------------------------
    def _pause_all(self) -> None:
        for c in [*self._live, *self._h2_sessions.values()]:
            t = c.transport
            if t is not None and not c.bw_paused and not t.is_closing():
                t.pause_reading()
                c.bw_paused = True

    def _resume_all(self) -> None:
        for c in [*self._live, *self._h2_sessions.values()]:
            if c.bw_paused:
                c.bw_paused = False
                t = c.transport
                if t is not None and not t.is_closing():
                    t.resume_reading()


def _unauthorized(rule, sent: bool, headers: list) -> tuple[str, str] | None:
    """A 401's outcome: ``authRequired`` without credentials, ``authRetry`` for a digest challenge
    to answer, None (an ordinary 4xx) when our credentials were refused (HTTP/1.1 and HTTP/2 alike)."""
    if rule is None:
        return ("authRequired", "401 and no auth rule for this URL")
    challenges = parse_challenges(v for n, v in headers if n == b"www-authenticate")
    if rule.answered_401(sent, challenges) == "retry":
        return ("authRetry", "401 with a digest challenge: asked again with credentials")
    if not sent:
        return ("authRequired", f"401 and no {rule.scheme} credentials to send")
    return None


def conn_timed_out(conn: _Conn) -> bool:
    return conn.deadline == -_INF


def _in_net(address: str, ip: str) -> bool:
    """``address`` is ``ip``, or lies in the network ``ip`` (``2001:db8::/64``)."""
    if "/" not in ip:
        return address == ip
    try:
        return ipaddress.ip_address(address) in ipaddress.ip_network(ip, strict=False)
    except ValueError:
        return False


def _connect_detail(exc: BaseException) -> str:
    if isinstance(exc, ConnectionRefusedError):
        return f"refused: {exc}"
    if isinstance(exc, _ssl.SSLError):
        return f"tls: {exc}"
    if isinstance(exc, OSError) and exc.errno is not None:
        return f"unreachable: {exc}"
    return f"connect failed: {exc!r}"
