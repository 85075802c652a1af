"""larbin_py.net.fastread: llhttp reads what h11 would read, or hands it to h11.

The property: for every response of a corpus of ordinary and hostile ones,
cut into pieces at random places, with or without the end of the
connection after it, a connection reading with httptools ends exactly as
one reading with h11 alone: the same error kind, status, headers, body,
and the same keep-alive decision.  No socket: a connection object is fed
bytes as its transport would feed them.
"""

from __future__ import annotations

import asyncio
import gzip
import random

import h11
import pytest

from larbin_py.net.fastread import BAD, BIG, DONE, H11, NEED, FastReader
from larbin_py.net.http import _ACTIVE, _IDLE, Fetcher, FetchResult, _Conn, _header_block

MAX_PAGE = 3_000
MAX_HEAD = 400

BODY = bytes(range(32, 127)) * 3
GZ = gzip.compress(b"<p>compressed</p>" * 20)

CORPUS = {
    "length": b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: %d\r\n\r\n%s" % (len(BODY), BODY),
    "length-spaces": b"HTTP/1.1 200 OK\r\nX-A:   padded \t \r\nContent-Length: 2\r\n\r\nhi",
    "no-reason": b"HTTP/1.1 404\r\nContent-Length: 1\r\n\r\nx",
    "chunked": b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n",
    "chunked-ext-trailer": b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2;x=y\r\nhi\r\n0\r\nT: v\r\n\r\n",
    "chunked-upper": b"HTTP/1.1 200 OK\r\nTransfer-Encoding: Chunked\r\n\r\n2\r\nhi\r\n0\r\n\r\n",
    "chunked-bad-size": b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nhi\r\n0\r\n\r\n",
    "chunked-no-crlf": b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nhiXX0\r\n\r\n",
    "chunked-truncated": b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n9\r\nhi",
    "gzip": b"HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Length: %d\r\n\r\n%s" % (len(GZ), GZ),
    "gzip-corrupt": b"HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Length: 10\r\n\r\n0123456789",
    "http10-eof": b"HTTP/1.0 200 OK\r\nContent-Type: text/html\r\n\r\n" + BODY,
    "http10-keep-alive": b"HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 2\r\n\r\nhi",
    "http11-eof": b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n" + BODY,
    "close-with-length": b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nhi",
    "no-content": b"HTTP/1.1 204 No Content\r\n\r\n",
    "not-modified-length": b"HTTP/1.1 304 Not Modified\r\nContent-Length: 50\r\n\r\n",
    "continue-first": b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nhi",
    "two-infos": b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early\r\nLink: </a>\r\n\r\n"
                 b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nhi",
    "empty-line-before": b"\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nhi",
    "empty-line-after": b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nhi\r\n",
    "bad-chunk-extension": b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2;x=\x80y\r\nhi\r\n0\r\n\r\n",
    "bare-lf-trailer": b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nhi\r\n0\r\nT: v\n\r\n",
    "trailing-bytes": b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nhiEXTRA",
    "second-response": b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nhiHTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n",
    "short-body": b"HTTP/1.1 200 OK\r\nContent-Length: 50\r\n\r\nonly this",
    "too-big": b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (MAX_PAGE + 10, b"y" * (MAX_PAGE + 10)),
    "too-big-eof": b"HTTP/1.0 200 OK\r\n\r\n" + b"z" * (MAX_PAGE + 10),
    "head-too-big": b"HTTP/1.1 200 OK\r\n" + b"X-Pad: %s\r\n" % (b"p" * MAX_HEAD) + b"Content-Length: 0\r\n\r\n",
    "bare-lf": b"HTTP/1.1 200 OK\nContent-Length: 2\n\nhi",
    "obs-fold": b"HTTP/1.1 200 OK\r\nX-Fold: a\r\n  b\r\nContent-Length: 2\r\n\r\nhi",
    "space-before-colon": b"HTTP/1.1 200 OK\r\nContent-Length : 2\r\n\r\nhi",
    "dup-length-same": b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\nhi",
    "two-chunked": b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
    "length-list": b"HTTP/1.1 200 OK\r\nContent-Length: 2, 2\r\n\r\nhi",
    "length-21-digits": b"HTTP/1.1 200 OK\r\nContent-Length: 000000000000000000002\r\n\r\nhi",
    "dup-length-differ": b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\nhi",
    "length-and-chunked": b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n"
                          b"2\r\nhi\r\n0\r\n\r\n",
    "te-gzip-chunked": b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n",
    "te-identity": b"HTTP/1.1 200 OK\r\nTransfer-Encoding: identity\r\n\r\nhi",
    "bad-length": b"HTTP/1.1 200 OK\r\nContent-Length: 2x\r\n\r\nhi",
    "negative-length": b"HTTP/1.1 200 OK\r\nContent-Length: -2\r\n\r\nhi",
    "nul-in-value": b"HTTP/1.1 200 OK\r\nX: a\x00b\r\nContent-Length: 2\r\n\r\nhi",
    "ctl-in-value": b"HTTP/1.1 200 OK\r\nX: a\x01b\x7fc\r\nContent-Length: 2\r\n\r\nhi",
    "tab-in-value": b"HTTP/1.1 200 OK\r\nX: a\tb\r\nContent-Length: 2\r\n\r\nhi",
    "cr-in-value": b"HTTP/1.1 200 OK\r\nX: a\rb\r\nContent-Length: 2\r\n\r\nhi",
    "latin1-value": b"HTTP/1.1 200 OK\r\nX: caf\xe9\r\nContent-Length: 2\r\n\r\nhi",
    "empty-name": b"HTTP/1.1 200 OK\r\n: v\r\nContent-Length: 2\r\n\r\nhi",
    "switching": b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: x\r\n\r\nrest",
    "http09": b"<html>no head at all</html>",
    "http2-line": b"HTTP/2 200 OK\r\nContent-Length: 2\r\n\r\nhi",
    "lower-http": b"http/1.1 200 OK\r\nContent-Length: 2\r\n\r\nhi",
    "status-999": b"HTTP/1.1 999 Odd\r\nContent-Length: 2\r\n\r\nhi",
    "status-099": b"HTTP/1.1 099 Low\r\nContent-Length: 2\r\n\r\nhi",
    "status-000": b"HTTP/1.1 000 Zero\r\nContent-Length: 2\r\n\r\nhi",
    "nul-in-reason": b"HTTP/1.1 200 O\x00K\r\nContent-Length: 2\r\n\r\nhi",
    "status-2-digits": b"HTTP/1.1 20 OK\r\nContent-Length: 2\r\n\r\nhi",
    "empty": b"",
    "half-head": b"HTTP/1.1 200 OK\r\nContent-Le",
    # framing and informational answers count against MAX_HEAD (issue 18)
    "long-trailer": b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nhi\r\n0\r\n"
                    + b"T: %s\r\n" % (b"t" * 2 * MAX_HEAD) + b"\r\n",
    "endless-trailer": b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nhi\r\n0\r\n"
                       + b"".join(b"T%d: trailer\r\n" % i for i in range(80)),
    "long-chunk-ext": b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nhi\r\n"
                      b"2;x=%s\r\nho\r\n0\r\n\r\n" % (b"e" * 2 * MAX_HEAD),
    "tiny-chunks": b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + b"1\r\nx\r\n" * 300
                   + b"0\r\n\r\n",
    "many-infos": b"HTTP/1.1 100 Continue\r\n\r\n" * 30 + b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nhi",
}


class _Transport:
    def __init__(self):
        self.closed = False

    def write(self, data):
        pass

    def close(self):
        self.closed = True

    abort = close

    def is_closing(self):
        return self.closed

    def pause_reading(self):
        pass

    def resume_reading(self):
        pass


def _read(parser: str, pieces: list[bytes], eof: bool, loop) -> tuple:
    """How a connection reading with ``parser`` ends, fed ``pieces`` (then EOF)."""
    f = Fetcher(user_agent="t", parser=parser, max_page_size=MAX_PAGE, max_header_size=MAX_HEAD, loop=loop)
    f._loop = loop
    conn = _Conn(f, ("http", "127.0.0.1", 80), "127.0.0.1")
    conn.connection_made(_Transport())
    res = FetchResult("http://a.test/", "127.0.0.1")
    request = h11.Request(method="GET", target="/", headers=[("Host", "a.test"), ("Connection", "keep-alive")])
    head = b"GET / HTTP/1.1\r\n" + _header_block(request.headers) if parser == "httptools" else None
    conn.start(res, request, head)
    for piece in pieces:
        if conn.state != _ACTIVE:
            break
        if not piece:
            continue  # a transport never delivers empty data
        conn.data_received(piece)
    if eof and conn.state == _ACTIVE:
        conn.connection_lost(None)
    kept = conn.state == _IDLE
    after = conn.h.trailing_data[0] if parser == "h11" and conn.h is not None else b""
    return (res.error, res.status, res.headers, res.body, kept, f.stats["h11_handovers"], bytes(after))


def _cuts(data: bytes, rng: random.Random) -> list[list[bytes]]:
    """``data`` whole, byte by byte, and cut at a few random places."""
    ways = [[data], [data[i:i + 1] for i in range(len(data))]]
    for _ in range(4):
        points = sorted(rng.sample(range(1, len(data)), min(3, len(data) - 1))) if len(data) > 1 else []
        edges = [0, *points, len(data)]
        ways.append([data[a:b] for a, b in zip(edges, edges[1:])])
    return ways


@pytest.mark.parametrize("name", sorted(CORPUS))
def test_httptools_ends_every_response_as_h11_does(name):
    loop = asyncio.new_event_loop()
    try:
        rng = random.Random(name)
        data = CORPUS[name]
        for pieces in _cuts(data, rng):
            for eof in (False, True):
                fast = _read("httptools", pieces, eof, loop)
                ref = _read("h11", pieces, eof, loop)
                assert _same_end(fast, ref), (name, eof, [len(p) for p in pieces], fast[:5], ref[:5])
    finally:
        loop.close()


def _same_end(fast: tuple, ref: tuple) -> bool:
    """The two readers ended alike; the one allowed difference: llhttp keeps a
    connection that has only empty lines after the response (RFC 9112 2.2)."""
    if fast[:5] == ref[:5]:
        return True
    return (fast[:4] == ref[:4] and fast[4] and not ref[4] and ref[6] != b""
            and not ref[6].strip(b"\r\n"))


def _mutants(n: int, seed: int):
    """``n`` responses of the corpus with 1-4 random bytes changed, inserted or deleted."""
    rng = random.Random(seed)
    alphabet = b"\r\n \t:;,.-0123456789aAzZ/\x00\x7f\x80\xffHTTPchunkedContent-LengthTransfer-Encoding"
    seeds = [v for v in CORPUS.values() if v]
    for _ in range(n):
        data = bytearray(rng.choice(seeds))
        for _ in range(rng.randint(1, 4)):
            op, pos = rng.random(), rng.randrange(len(data) + 1)
            if op < 0.4 and data:
                data[min(pos, len(data) - 1)] = rng.choice(alphabet)
            elif op < 0.7:
                data[pos:pos] = bytes(rng.choice(alphabet) for _ in range(rng.randint(1, 3)))
            elif data:
                del data[pos:pos + rng.randint(1, 3)]
        if len(data) > 2:
            cuts = sorted(rng.sample(range(1, len(data)), 2))
            yield [bytes(data[a:b]) for a, b in zip([0, *cuts], [*cuts, len(data)])]


def test_mutated_responses_end_as_h11_ends_them():
    loop = asyncio.new_event_loop()
    try:
        checked = 0
        for pieces in _mutants(1500, seed=8):
            for eof in (False, True):
                fast, ref = _read("httptools", pieces, eof, loop), _read("h11", pieces, eof, loop)
                assert _same_end(fast, ref), (b"".join(pieces)[:200], eof, fast[:5], ref[:5])
                checked += 1
        assert checked > 2500
    finally:
        loop.close()


def test_ordinary_responses_never_reach_h11_and_odd_heads_always_do():
    loop = asyncio.new_event_loop()
    try:
        ordinary = ["length", "chunked", "gzip", "http10-eof", "continue-first", "no-content",
                    "close-with-length", "trailing-bytes", "length-spaces", "latin1-value"]
        for name in ordinary:
            assert _read("httptools", [CORPUS[name]], True, loop)[5] == 0, name
        odd = ["bare-lf", "obs-fold", "dup-length-same", "te-identity", "te-gzip-chunked", "switching",
               "http09", "length-and-chunked", "length-21-digits"]
        for name in odd:
            assert _read("httptools", [CORPUS[name]], True, loop)[5] == 1, name
    finally:
        loop.close()


def test_keep_alive_only_for_a_clean_http11_end():
    loop = asyncio.new_event_loop()
    try:
        assert _read("httptools", [CORPUS["length"]], False, loop)[4] is True
        assert _read("httptools", [CORPUS["chunked"]], False, loop)[4] is True
        for name in ("http10-keep-alive", "close-with-length", "trailing-bytes", "second-response", "http10-eof"):
            assert _read("httptools", [CORPUS[name]], True, loop)[4] is False, name
    finally:
        loop.close()


def test_the_reader_alone_reports_head_body_and_outcomes():
    heads, body = [], []
    r = FastReader(lambda *head: heads.append(head), body.append, 1000)
    assert r.feed(b"HTTP/1.1 200 OK\r\nX-Name:  v \r\nContent-Length: 4\r\n\r\nab") is NEED
    assert heads == [(200, b"OK", b"1.1", [(b"x-name", b"v"), (b"content-length", b"4")],
                      [(b"X-Name", b"v"), (b"Content-Length", b"4")])]
    assert r.pending is None  # a Content-Length body: nothing kept for h11
    assert r.feed(b"cd") is DONE and b"".join(body) == b"abcd" and r.reusable
    r = FastReader(lambda *head: None, body.append, 1000)
    assert r.feed(b"HTTP/1.1 200 OK\nContent-Length: 4\n\nabcd") is H11
    assert r.pending == [b"HTTP/1.1 200 OK\nContent-Length: 4\n\nabcd"]
    bad_chunk = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nqq\r\n"
    r = FastReader(lambda *head: None, body.append, 100, max_replay=1000)
    assert r.feed(bad_chunk) is H11 and r.pending == [bad_chunk]  # h11 reads a chunked body again
    r = FastReader(lambda *head: None, body.append, 48, max_replay=48)
    assert r.feed(bad_chunk[:47]) is NEED and r.feed(bad_chunk[47:]) is BAD and r.detail  # past max_replay
    r = FastReader(lambda *head: None, body.append, 1000)
    assert r.feed(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nhiX") is DONE and not r.reusable
    r = FastReader(lambda *head: None, body.append, 1000)
    assert r.feed(b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\nab") is NEED
    assert r.feed_eof() is BAD
    r = FastReader(lambda *head: None, body.append, 1000)
    assert r.feed(b"HTTP/1.0 200 OK\r\n\r\nab") is NEED
    assert r.feed_eof() is DONE and not r.reusable


def test_a_close_before_any_byte_is_not_handed_to_h11():
    r = FastReader(lambda *head: None, lambda data: None, 1000)
    assert r.feed_eof() is BAD and "before the response" in r.detail
    r = FastReader(lambda *head: None, lambda data: None, 1000)
    assert r.feed(b"HTTP/1.1 200") is NEED and r.feed_eof() is H11  # a partial head: h11 judges it
    loop = asyncio.new_event_loop()
    try:
        assert _read("httptools", [], True, loop)[::5] == ("reset", 0)
    finally:
        loop.close()


def test_stop_silences_the_body():
    body = []
    r = FastReader(lambda *head: None, body.append, 1000)
    r.feed(b"HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nabc")
    r.stop()
    r.feed(b"def")
    assert body == [b"abc"]


def test_framing_past_the_header_limit_goes_to_h11_or_is_refused():
    """Trailers count as head: handed to h11 while it can read the response
    again, refused (BIG) past that, never kept (issue 18)."""
    body = []
    start = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nhi\r\n0\r\n"
    line = b"X-T: " + b"t" * 50 + b"\r\n"
    r = FastReader(lambda *head: None, body.append, 200, max_replay=10_000)
    assert r.feed(start[:-5]) is NEED and r.feed(start[-5:]) is NEED  # the body, then its last chunk
    outcomes = [r.feed(line) for _ in range(4)]
    assert outcomes[:3] == [NEED] * 3 and outcomes[3] is H11  # 5 + 4 x 57 B of framing: h11 measures it
    body = []
    r = FastReader(lambda *head: None, body.append, 200, max_replay=200)
    assert r.feed(start[:-5]) is NEED and r.feed(start[-5:]) is NEED
    outcomes = [r.feed(line) for _ in range(4)]
    assert outcomes[3] is BIG and "200" in r.detail and r.pending is None
    assert r._raw == [(b"Transfer-Encoding", b"chunked")] and body == [b"hi"]  # trailers are not kept
    # body data between the framing resets the count: long tiny-chunked bodies pass
    r = FastReader(lambda *head: None, body.append, 200, max_replay=200)
    assert r.feed(start[:-3]) is NEED
    assert all(r.feed(b"1\r\nx\r\n") is NEED for _ in range(500))
    assert r.feed(b"0\r\n\r\n") is DONE


def test_the_fetcher_refuses_what_the_reader_calls_big():
    loop = asyncio.new_event_loop()
    try:
        data = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + b"1\r\nx\r\n" * 700 \
            + b"0\r\n" + b"T: trailer\r\n" * 100
        for parser in PARSERS_BOTH:
            end = _read(parser, [data[i:i + 50] for i in range(0, len(data), 50)], False, loop)
            assert end[0] == "headerTooBig" and end[3] == b"x" * 700, (parser, end[:4])
    finally:
        loop.close()


PARSERS_BOTH = ("httptools", "h11")
