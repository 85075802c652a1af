"""Reading an HTTP/1.1 response with httptools (llhttp), h11 as the referee.

h11 is the fetcher's reference reader, and it costs about 100 µs of Python
per request and response, as much as resolving half a page's links.
:class:`FastReader` reads the common response with llhttp, the C parser of
Node.js wrapped by httptools (the parser uvicorn uses for the same reason),
in about 12 µs (``bench/hotpath.py``), and hands every response it is not
sure about to h11:

* **The head.**  llhttp parses it.  When llhttp refuses a head, or the head
  is one that llhttp and h11 read differently (a status below 100 or
  ``101``, a ``Transfer-Encoding`` other than one plain ``chunked``, a
  Content-Length of more than 20 digits), or the head is still incomplete
  past ``max_header_size`` bytes, :meth:`FastReader.feed`
  returns :data:`H11` and has delivered nothing.  The caller replays
  :attr:`FastReader.pending` (every byte of the response so far) into h11,
  whose verdict is final.  So a head reaches the crawler either read the
  same way by both parsers, or read by h11 alone.
* **Informational responses** (``1xx`` but ``101``) are skipped and counted
  in :attr:`FastReader.n_info`, as h11 does.
* **The body** is framed by Content-Length, chunked coding, or the end of
  the connection (:meth:`FastReader.feed_eof`).  llhttp is stricter than
  h11 on chunked framing (chunk extensions, trailers), so the bytes of a
  chunked response are kept until it ends (up to ``max_replay`` bytes):
  when llhttp refuses its body, :meth:`FastReader.feed` returns H11 too,
  and h11 reads the whole response again.  Past ``max_replay``, or for a
  Content-Length body, a refusal is :data:`BAD`, with
  :attr:`FastReader.detail` saying why.
* **Chunked framing counts as head.**  The bytes of a chunked body that are
  not body data (chunk-size lines, their extensions, the trailers) may not
  run on past ``max_header_size`` without body data between them, as h11
  refuses any incomplete event that long: an endless trailer is refused,
  not buffered.  llhttp says nothing of where in a piece the body ended, so
  the reader counts an upper bound (the piece's bytes that were not body
  data) and hands the response to h11 when it passes the limit, whose
  verdict is exact; when the response is too long to read again, it
  returns :data:`BIG` once whole pieces without body data pass the limit.
* **Keep-alive**: :attr:`FastReader.reusable` after :data:`DONE`.  It is true
  when llhttp keeps the connection at the end of the message, the response
  is HTTP/1.1 (h11 never keeps HTTP/1.0 connections), and no byte followed
  the response in what was read -- but for empty lines (CR, LF), which
  llhttp skips between messages as RFC 9112 section 2.2 allows, where h11
  would drop the connection.  That is the one difference from h11 that the
  tests allow.

Header names are given in lower case and values without surrounding white
space, as h11 gives them.  The reader does no I/O: it is fed bytes and calls
``on_head`` and ``on_body``; ``stop()`` silences it once the caller has what
it wants (a body over the size limit, say).  One reader reads one response.
"""

from __future__ import annotations

import re
from typing import Callable

import httptools

__all__ = ["FastReader", "NEED", "DONE", "H11", "BAD", "BIG"]

#: :meth:`FastReader.feed` outcomes (BIG: chunked framing, such as trailers, past max_header_size).
NEED, DONE, H11, BAD, BIG = "need", "done", "h11", "bad", "big"

_EOF_FRAMED = "eof"
#: What h11 refuses in a reason phrase and llhttp lets through.
_BAD_REASON = re.compile(rb"[\x00-\x08\x0a-\x1f\x7f]")


class _HandOver(Exception):
    """Raised inside a callback: this head is for h11 to judge."""


class FastReader:
    """One HTTP/1.1 response read by llhttp (see the module docstring).

    ``on_head(status, reason, http_version, headers, raw_items)`` is called
    once, for the final response: ``headers`` as lower-case ``(name,
    value)`` pairs, ``raw_items`` with the names as sent.  ``on_body(data)``
    is called for each piece of the de-chunked body.
    """

    __slots__ = ("_p", "_on_head", "_on_body", "_max_head", "_max_replay", "pending", "_size", "_head_done",
                 "_raw", "_reason", "_framing", "_done", "_stopped", "_after", "reusable",
                 "n_info", "detail", "_fed_body", "_body_last", "_quiet_hi", "_quiet_lo")

    def __init__(self, on_head: Callable, on_body: Callable[[bytes], None], max_header_size: int,
                 max_replay: int = 0) -> None:
        self._p = httptools.HttpResponseParser(self)
        self._on_head = on_head
        self._on_body = on_body
        self._max_head = max_header_size
        self._max_replay = max(max_replay, max_header_size)
        # the response's bytes while h11 may have to read it again: until the
        # head is read, or to the end of a chunked body (None: given up)
        self.pending: list[bytes] | None = []
        self._size = 0
        self._head_done = False
        self._raw: list[tuple[bytes, bytes]] = []
        self._reason = b""
        self._framing = ""
        self._done = False
        self._stopped = False
        self._after = False  # a byte followed the response
        self.reusable = False
        self.n_info = 0
        self.detail = ""
        # chunked framing since the last body data (see "Chunked framing counts as head")
        self._fed_body = 0  # body bytes delivered by the piece being read
        self._body_last = False  # the last callback was body data
        self._quiet_hi = 0  # at most this many framing bytes since the last body data
        self._quiet_lo = 0  # at least this many

    # -- the caller's side ----------------------------------------------
    def feed(self, data: bytes) -> str:
        """Read ``data``: NEED more, DONE, hand over to H11, or BAD (see ``detail``).

        After H11 the caller replays :attr:`pending` into h11; if the head
        had been delivered, h11 delivers it again, and the body from its
        first byte.
        """
        pending = self.pending
        self._fed_body = 0
        if pending is not None:
            if not self._size and data[:1] in (b"\r", b"\n"):
                pending.append(data)
                return H11  # llhttp skips empty lines before a status line; h11 refuses them
            self._size += len(data)
            if self._size > self._max_replay and self._head_done:
                self.pending = None  # too long to read twice: llhttp's verdict stands
            else:
                pending.append(data)
        try:
            self._p.feed_data(data)
        except httptools.HttpParserError as exc:
            if self._done:
                self._after = True
            elif self.pending is not None or isinstance(exc.__context__, _HandOver):
                return H11
            else:
                cause = exc.__context__
                self.detail = f"{exc}" if cause is None else f"{exc}: {cause!r}"
                return BAD
        if self._done:
            self.reusable = self.reusable and not self._after
            return DONE
        if not self._head_done:
            if self._size > self._max_head:
                return H11  # h11 names it: a head over max_header_size
        elif self._framing == "chunked" and not self._stopped:
            return self._count_framing(len(data))
        return NEED

    def _count_framing(self, n: int) -> str:
        """Count the chunked framing that ``n`` bytes just read ended with (see the module docstring)."""
        if self._body_last:
            self._quiet_hi = self._quiet_lo = 0
            return NEED
        if self._fed_body:  # body data, then framing: how much of the rest is unknown
            self._quiet_hi, self._quiet_lo = n - self._fed_body, 0
        else:
            self._quiet_hi += n
            self._quiet_lo += n
        if self._quiet_hi <= self._max_head:
            return NEED
        if self.pending is not None:
            return H11  # h11 measures it exactly
        if self._quiet_lo <= self._max_head:
            return NEED
        self.detail = f"chunked framing (chunk lines, trailers) over {self._max_head} bytes"
        return BIG

    def feed_eof(self) -> str:
        """The peer closed: DONE for a body that ends there, H11 for a partial head, else BAD.

        BAD when no byte came at all (a kept-alive connection the server
        closed) or the body was cut short.
        """
        if self._done:
            return DONE
        if not self._head_done:
            if self._size:
                return H11
            self.detail = "connection closed before the response"
            return BAD
        if self._framing == _EOF_FRAMED:
            self._done = True
            self.reusable = False
            return DONE
        self.detail = "connection closed mid-body"
        return BAD

    def stop(self) -> None:
        """Deliver nothing more (the caller has finished with this response)."""
        self._stopped = True

    # -- llhttp's callbacks ---------------------------------------------
    def on_message_begin(self) -> None:
        if self._done:
            self._after = True
        self._raw = []
        self._reason = b""

    def on_status(self, reason: bytes) -> None:
        self._reason += reason

    def on_header(self, name: bytes, value: bytes) -> None:
        if not self._head_done:  # not a trailer: those are not kept
            self._raw.append((name, value.strip(b" \t")))
        else:
            self._body_last = False

    def on_headers_complete(self) -> None:
        if self._done:
            return
        p = self._p
        status = p.get_status_code()
        raw = self._raw
        headers = [(name.lower(), value) for name, value in raw]
        framing = _EOF_FRAMED
        for i, (name, value) in enumerate(headers):
            if name == b"transfer-encoding":
                if value.lower() != b"chunked" or framing == "chunked":
                    raise _HandOver  # h11 supports one chunked alone
                framing = "chunked"
                headers[i] = (name, b"chunked")  # as h11 gives it
            elif name == b"content-length":
                if len(value) > 20:
                    raise _HandOver  # h11 refuses more digits
                if framing == _EOF_FRAMED:
                    framing = "length"
        if _BAD_REASON.search(self._reason) is not None:
            raise _HandOver  # h11 refuses control characters in the reason phrase
        if status < 200:
            if status < 100 or status == 101:
                raise _HandOver  # not a status h11 reads as llhttp does (we never ask to switch)
            self.n_info += 1
            return
        version = p.get_http_version().encode()
        self._framing = framing
        self._head_done = True
        if framing != "chunked":
            self.pending = None  # llhttp and h11 frame such a body alike
        self._on_head(status, self._reason, version, headers, raw)

    def on_body(self, data: bytes) -> None:
        self._fed_body += len(data)
        self._body_last = True
        if not self._done and not self._stopped:
            self._on_body(data)

    def on_chunk_complete(self) -> None:
        self._body_last = False  # framing follows: the chunk's CRLF, the next size line

    def on_chunk_header(self) -> None:
        self._body_last = False

    def on_message_complete(self) -> None:
        if self._done or not self._head_done:
            return  # bytes after the response, or the end of a 1xx
        self._done = True
        self.reusable = self._p.should_keep_alive() and self._p.get_http_version() == "1.1"
