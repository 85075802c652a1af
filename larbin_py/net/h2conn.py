"""HTTP/2 for the fetcher: one connection's streams, with the h2 package (sans-I/O, as h11 is for 1.1).

When a TLS handshake negotiates ``h2`` by ALPN (``httpVersion auto`` or
``2``; larbin_py.net.tls offers it), the fetcher hands the connection's
transport to an :class:`H2Session` (``transport.set_protocol``): the h2
state machine reads and writes the frames, this class turns its events
into :class:`~larbin_py.net.http.FetchResult` values.

Politeness is not changed by HTTP/2: the frontier still starts requests to
a host no closer than ``waitDuration`` and to an IP at most
``connexionsPerIP`` at once; requests to one server that are running
together share the session as streams (instead of opening another
connection), up to the server's ``SETTINGS_MAX_CONCURRENT_STREAMS``.  A
session is kept alive between requests like a 1.1 connection, in the
fetcher's pool under the same key, and closed after ``keep_alive_idle``.

Bounds and outcomes, per stream unless said:

* **body**: decoded as in 1.1 (larbin_py.net.decode); past
  ``max_page_size`` the stream is reset (``RST_STREAM CANCEL``) and the
  result is ``tooBig``; the session lives on.
* **flow control**: the body bytes are acknowledged as they are read
  (``acknowledge_received_data``), so the server's window reopens; the
  stream window we announce is 1 MiB.  Reading pauses, for the whole
  connection, when the bandwidth bucket is in debt.
* **time**: the page deadline as in 1.1 (``timeout_page`` plus the body's
  allowance), checked by the fetcher's sweep: a late stream is reset and
  counted ``timeout``.
* **heads**: a header block is bounded by ``max_header_size`` (the
  ``SETTINGS_MAX_HEADER_LIST_SIZE`` we announce, checked on the decoded
  list), and the bytes read while a block is still open (HEADERS and
  CONTINUATION frames that never end it) are bounded by the same figure:
  past it every stream still waiting for its head ends ``headerTooBig``
  and the connection is closed (it cannot be resynchronised).
* **RST_STREAM** from the server: ``reset`` (``REFUSED_STREAM``: the
  request was not processed, retried free like a stale 1.1 connection).
* **GOAWAY**: the streams above its last stream id were not processed
  (``reset``, retried free); the others finish; no new stream starts on the
  session, which closes when its last stream ends.
* **a server that breaks the protocol** (a frame h2 refuses, a PUSH_PROMISE
  although we disabled push, a bad header block): every open stream ends
  ``badResponse`` and the fetcher speaks HTTP/1.1 to that host from then on
  (:attr:`H2Session.broken`).
"""

from __future__ import annotations

import asyncio

import h2.config
import h2.connection
import h2.events
import h2.exceptions
import h2.settings
from h2.errors import ErrorCodes

from .decode import BodyDecoder, DecodeError, read_headers

__all__ = ["H2Session", "request_headers", "STREAM_WINDOW"]

#: The receive window announced per stream (and added to the connection's).
STREAM_WINDOW = 1 << 20
#: Hop-by-hop request headers HTTP/2 forbids (RFC 9113 section 8.2.2).
_HOP = frozenset({b"host", b"connection", b"keep-alive", b"proxy-connection", b"transfer-encoding", b"upgrade",
                  b"te"})


def request_headers(method: str, authority: str, target: str, headers) -> list[tuple[bytes, bytes]]:
    """The HTTP/2 header list of a request whose 1.1 headers are ``headers`` (pseudo-headers first)."""
    items = headers.raw_items() if hasattr(headers, "raw_items") else headers
    out = [(b":method", method.encode()), (b":scheme", b"https"), (b":authority", authority.encode("idna")
           if not authority.isascii() else authority.encode()), (b":path", target.encode("latin-1", "replace"))]
    out += [(n.lower(), v) for n, v in items if n.lower() not in _HOP]
    return out


class _Stream:
    """One request on a session: its result, its body so far, its deadline."""

    __slots__ = ("res", "waiter", "decoder", "chunks", "body_size", "body_in", "deadline", "sent_at", "got_head",
                 "override", "auth_rule", "auth_sent", "unauthorized", "n_info")

    def __init__(self, res, waiter, deadline: float, sent_at: float, auth_rule, auth_sent: bool,
                 unauthorized) -> None:
        self.res = res
        self.waiter = waiter
        self.decoder: BodyDecoder | None = None
        self.chunks: list[bytes] = []
        self.body_size = 0
        self.body_in = 0
        self.deadline = deadline
        self.sent_at = sent_at
        self.got_head = False
        self.override: tuple[str, str] | None = None
        self.auth_rule = auth_rule
        self.auth_sent = auth_sent
        self.unauthorized = unauthorized
        self.n_info = 0


class H2Session(asyncio.Protocol):
    """One HTTP/2 connection of the fetcher ``f`` (see the module docstring)."""

    def __init__(self, f, key: tuple, ip: str, peer: str, transport, early: bytes = b"") -> None:
        self.f = f
        self.key = key
        self.ip = ip
        self.peer = peer
        self.transport = transport
        self.streams: dict[int, _Stream] = {}
        self.closed = False
        self.going_away = False
        self.broken = ""  # why the server broke the protocol (the fetcher falls back to 1.1 for its host)
        self.idle_since = f._clock()
        self.requests = 0
        self.bw_paused = False
        # bytes read while a header block stays open (h2's frame buffer holds its frames; pinned h2 4.x)
        self._pending = 0
        # outbound headers are ours (request_headers builds them valid): not checked again
        config = h2.config.H2Configuration(client_side=True, header_encoding=None, validate_outbound_headers=False,
                                           normalize_outbound_headers=False)
        h = self.h = h2.connection.H2Connection(config=config)
        h.local_settings = h2.settings.Settings(client=True, initial_values={
            h2.settings.SettingCodes.ENABLE_PUSH: 0,
            h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: STREAM_WINDOW,
            h2.settings.SettingCodes.MAX_HEADER_LIST_SIZE: f.max_header_size,
            h2.settings.SettingCodes.MAX_CONCURRENT_STREAMS: 100,
        })
        h.initiate_connection()
        h.increment_flow_control_window(STREAM_WINDOW)
        transport.set_protocol(self)
        self._flush()
        if early:  # what the server sent before the fetcher handed the transport over (counted then)
            self._feed(early)

    # -- the fetcher's side ------------------------------------------------
    def can_take(self) -> bool:
        """A new stream may start now (open, not going away, below the server's stream limit)."""
        if self.closed or self.going_away or self.broken or self.transport.is_closing():
            return False
        return self.h.open_outbound_streams < self.h.remote_settings.max_concurrent_streams

    async def request(self, res, method: str, headers: list, *, auth_rule=None, auth_sent: bool = False,
                      unauthorized=None) -> None:
        """Send one request as a stream and wait for its end (``res`` filled in place)."""
        f = self.f
        waiter = f._loop.create_future()
        try:
            sid = self.h.get_next_available_stream_id()
            self.h.send_headers(sid, headers, end_stream=True)
        except (h2.exceptions.H2Error, ValueError) as exc:
            res.error, res.error_detail = "reset", f"HTTP/2 stream could not start: {exc}"
            f._count(res.error)
            return
        now = f._clock()
        res.sent_at = now
        res.http_version = b"2"
        st = self.streams[sid] = _Stream(res, waiter, res.started_at + f.timeout_page, now, auth_rule, auth_sent,
                                         unauthorized)
        self.requests += 1
        self._flush()
        try:
            await waiter
        except asyncio.CancelledError:
            if sid in self.streams:
                self._reset(sid, ErrorCodes.CANCEL)
                del self.streams[sid]
            raise
        del st

    def expire(self, now: float) -> None:
        """The sweep: streams past their deadline end ``timeout``; an idle session past keep-alive closes."""
        f = self.f
        cap = f.max_page_size
        for sid, st in list(self.streams.items()):
            body = st.body_in if st.body_in < cap else cap
            if now >= st.deadline + body * f._per_byte:
                self._reset(sid, ErrorCodes.CANCEL)
                self._end(sid, "timeout", f"no complete HTTP/2 response within the page deadline "
                                          f"({f.timeout_page:g}s + {body} body B / {f.timeout_incr} B/s)")
        if not self.streams and now - self.idle_since > f.keep_alive_idle:
            self.close()

    def close(self, error: ErrorCodes = ErrorCodes.NO_ERROR) -> None:
        """GOAWAY, close the transport, end every stream still open (``reset``); idempotent."""
        if self.closed:
            return
        self.closed = True
        try:
            self.h.close_connection(error)
            self._flush()
        except h2.exceptions.H2Error:
            pass
        for sid in list(self.streams):
            self._end(sid, "reset", "HTTP/2 connection closed by the fetcher")
        self.f._h2_closed(self)
        self.transport.close()

    # -- asyncio.Protocol --------------------------------------------------
    def data_received(self, data: bytes) -> None:
        f = self.f
        n = len(data)
        f._bytes += n
        if f._bucket is not None:
            f._bucket.consume(n)
        self._feed(data)

    def _feed(self, data: bytes) -> None:
        f = self.f
        n = len(data)
        if self.closed:
            return
        try:
            events = self.h.receive_data(data)
        except h2.exceptions.DenialOfServiceError as exc:
            return self._break("headerTooBig", f"HTTP/2 header block refused: {exc}", ErrorCodes.ENHANCE_YOUR_CALM)
        except (h2.exceptions.ProtocolError, h2.exceptions.FrameTooLargeError, h2.exceptions.FrameDataMissingError,
                ValueError) as exc:
            name = type(exc).__name__
            if "Oversized" in name or "header list" in str(exc).lower():
                return self._break("headerTooBig", f"HTTP/2 header list over {f.max_header_size} bytes")
            return self._break("badResponse", f"HTTP/2 protocol error: {exc or name}", broke=True)
        if getattr(self.h.incoming_buffer, "_headers_buffer", None):  # a header block is still open
            self._pending += n
            if self._pending > f.max_header_size:
                return self._break("headerTooBig", f"HTTP/2 header block (HEADERS and CONTINUATION frames) "
                                                   f"over {f.max_header_size} bytes", ErrorCodes.ENHANCE_YOUR_CALM)
        else:
            self._pending = 0
        for ev in events:
            if self.closed:
                return
            self._event(ev)
        self._flush()
        if self.going_away and not self.streams:
            self.close()

    def connection_lost(self, exc) -> None:
        if not self.closed:
            self.closed = True
            for sid in list(self.streams):
                self._end(sid, "reset", f"HTTP/2 connection lost: {exc!r}" if exc else
                          "HTTP/2 connection closed before the response was complete")
            self.f._h2_closed(self)

    # -- events ------------------------------------------------------------
    def _event(self, ev) -> None:
        t = type(ev)
        if t is h2.events.DataReceived:
            self.h.acknowledge_received_data(ev.flow_controlled_length, ev.stream_id)
            self._data(ev.stream_id, ev.data)
        elif t is h2.events.ResponseReceived:
            self._head(ev.stream_id, ev.headers)
        elif t is h2.events.StreamEnded:
            self._complete(ev.stream_id)
        elif t is h2.events.StreamReset:
            st = self.streams.get(ev.stream_id)
            if st is not None:
                code = ErrorCodes(ev.error_code).name if ev.error_code in ErrorCodes._value2member_map_ \
                    else ev.error_code
                if ev.error_code == ErrorCodes.REFUSED_STREAM and self.requests > 1:
                    st.res.conn_reused, st.res.bytes_read = True, 0  # not processed: as a stale connection
                else:
                    st.res.bytes_read = max(st.res.bytes_read, 1)  # an ordinary retry
                self._end(ev.stream_id, "reset", f"HTTP/2 RST_STREAM {code}")
        elif t is h2.events.ConnectionTerminated:
            self.going_away = True
            last = ev.last_stream_id if ev.last_stream_id is not None else 0
            for sid in [s for s in self.streams if s > last]:
                st = self.streams[sid]
                if self.requests > 1:  # not processed, on a session used before: retried free
                    st.res.conn_reused, st.res.bytes_read = True, 0
                self._end(sid, "reset", f"HTTP/2 GOAWAY before this stream (last stream {last})")
            if ev.error_code not in (ErrorCodes.NO_ERROR, None):
                for sid in list(self.streams):
                    self._end(sid, "reset", f"HTTP/2 GOAWAY {ev.error_code!r}")
        elif t is h2.events.InformationalResponseReceived:
            st = self.streams.get(ev.stream_id)
            if st is not None:
                st.n_info += 1
        elif t is h2.events.PushedStreamReceived:  # push is disabled: h2 refuses it before this
            self._reset(ev.pushed_stream_id, ErrorCodes.REFUSED_STREAM)

    def _head(self, sid: int, headers) -> None:
        st = self.streams.get(sid)
        if st is None:
            return
        f = self.f
        res = st.res
        st.got_head = True
        res.rtt = f._clock() - st.sent_at
        status = None
        out = []
        for name, value in headers:
            if name == b":status":
                status = int(value)
                continue
            if name[:1] == b":":
                continue
            out.append((name, value))
        coding = read_headers(res, out)
        res.status = status
        res.headers = out
        if coding is not None:
            st.decoder = BodyDecoder(coding, f.max_page_size)
        if f.keep_raw:
            res.raw_response_head = b"HTTP/2 %d\r\n" % status + b"".join(b"%s: %s\r\n" % h for h in out) + b"\r\n"
        if status == 401 and st.unauthorized is not None:
            st.override = st.unauthorized(st.auth_rule, st.auth_sent, out)
        elif st.auth_sent:
            st.auth_rule.succeeded()

    def _data(self, sid: int, data: bytes) -> None:
        st = self.streams.get(sid)
        if st is None:
            return
        f = self.f
        st.body_in += len(data)
        st.res.bytes_read += len(data)
        dec = st.decoder
        if dec is None:
            size = st.body_size + len(data)
            if size > f.max_page_size:
                keep = f.max_page_size - st.body_size
                if keep > 0:
                    st.chunks.append(data[:keep])
                    st.body_size += keep
                self._reset(sid, ErrorCodes.CANCEL)
                return self._end(sid, "tooBig", f"body over {f.max_page_size} bytes")
            st.body_size = size
            st.chunks.append(data)
            return
        try:
            out = dec.feed(data)
        except DecodeError as exc:
            self._reset(sid, ErrorCodes.CANCEL)
            return self._end(sid, "badResponse", str(exc))
        if out:
            st.chunks.append(out)
        if dec.over:
            self._reset(sid, ErrorCodes.CANCEL)
            self._end(sid, "tooBig", f"decoded body over {f.max_page_size} bytes")

    def _complete(self, sid: int) -> None:
        st = self.streams.get(sid)
        if st is None:
            return
        if not st.got_head:
            return self._end(sid, "badResponse", "HTTP/2 stream ended without a response")
        if st.decoder is not None:
            try:
                st.decoder.finish()
            except DecodeError as exc:
                return self._end(sid, "badResponse", str(exc))
        if st.override is not None:
            return self._end(sid, *st.override)
        self._end(sid, None, "")

    # -- ends ----------------------------------------------------------------
    def _end(self, sid: int, error: str | None, detail: str) -> None:
        st = self.streams.pop(sid, None)
        if st is None:
            return
        res = st.res
        res.error, res.error_detail = error, detail
        res.body = b"".join(st.chunks)
        if self.f.keep_raw:
            res.raw_body = res.body
        if error:
            self.f._count(error)
        if not self.streams:
            self.idle_since = self.f._clock()
        if not st.waiter.done():
            st.waiter.set_result(None)

    def _reset(self, sid: int, code: ErrorCodes) -> None:
        try:
            self.h.reset_stream(sid, code)
        except h2.exceptions.H2Error:
            pass
        self._flush()

    def _break(self, error: str, detail: str, code: ErrorCodes = ErrorCodes.PROTOCOL_ERROR,
               broke: bool = False) -> None:
        """The connection cannot go on: every stream ends ``error``; ``broke``: the server's fault."""
        if broke:
            self.broken = detail
        for sid in list(self.streams):
            self._end(sid, error, detail)
        self.close(code)

    def _flush(self) -> None:
        data = self.h.data_to_send()
        if data and not self.transport.is_closing():
            self.transport.write(data)
