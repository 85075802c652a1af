"""HTTP/2 (larbin_py.net.h2conn): Debian's nginx with http2 on, and hostile h2 servers.

nginx offers h2 by ALPN: ``httpVersion auto`` takes it, ``1.1`` never
offers it; requests running together share one connection as streams;
gzip, the body bound and the page deadline hold as in 1.1.  The hostile
servers speak real HTTP/2 (the h2 package, server side) and misbehave in
one way each: an endless HEADERS/CONTINUATION stream, 1,000 PUSH_PROMISEs
although push is disabled, RST_STREAM, GOAWAY, silence, a frame h2
refuses -- each ends as an outcome, and a server that breaks the protocol
is spoken to in HTTP/1.1 from then on.
"""

from __future__ import annotations

import asyncio
import gzip
import ssl
import time

import h2.config
import h2.connection
import h2.events
import h2.settings
import pytest
from hyperframe.frame import ContinuationFrame, HeadersFrame, PushPromiseFrame

from larbin_py.net.http import Fetcher
from larbin_py.net.tls import TlsPolicy
from helpers.nginx import Nginx, free_port
from helpers.tls import make_pki

BIG = b"<html>" + b"x" * 300_000 + b"</html>"


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return make_pki(str(tmp_path_factory.mktemp("pki")), "h2.test")


@pytest.fixture(scope="module")
def nginx(pki):
    port = free_port()
    server = Nginx(f"""
    server {{
        listen 127.0.0.1:{port} ssl http2;
        ssl_certificate {pki.good[0]};
        ssl_certificate_key {pki.good[1]};
        root {{root}}/www;
        location = /slow {{ return 200 "never"; }}
    }}""", ports=[("127.0.0.1", port)])
    server.write("www/index.html", b"<html>over h2</html>")
    server.write("www/big.html", BIG)
    server.write("www/zipped.html", gzip.compress(b"<html>zipped</html>"))
    for i in range(8):
        server.write(f"www/p{i}.html", b"<html>page %d</html>" % i)
    with server.start():
        yield port, server


def fetcher(pki, version="auto", **kw) -> Fetcher:
    args = dict(user_agent="larbin_py/test", connect_timeout=2.0, timeout_page=3.0, http_version=version,
                tls=TlsPolicy(ca_file=pki.ca))
    args.update(kw)
    return Fetcher(**args)


async def test_auto_speaks_h2_when_offered_and_1_1_never_offers_it(pki, nginx):
    port, server = nginx
    f = fetcher(pki)
    res = await f.fetch(f"https://h2.test:{port}/", "127.0.0.1", port)
    again = await f.fetch(f"https://h2.test:{port}/p1.html", "127.0.0.1", port)
    stats = f.stats
    await f.close()
    assert res.error is None and res.status == 200 and res.body == b"<html>over h2</html>"
    assert res.http_version == b"2" and res.content_type == "text/html"
    assert again.error is None and again.conn_reused and stats["connections_opened"] == 1
    assert stats["alpn"] == {"h2": 1} and stats["h2_requests"] == 2
    f = fetcher(pki, "1.1")
    res = await f.fetch(f"https://h2.test:{port}/", "127.0.0.1", port)
    await f.close()
    assert res.error is None and res.http_version == b"1.1" and f.stats["alpn"] == {"http/1.1": 1}
    protocols = [e["protocol"] for e in server.wait_log(lambda log: any(e["protocol"] == "HTTP/1.1" for e in log))]
    assert protocols.count("HTTP/2.0") >= 2 and protocols[-1] == "HTTP/1.1"


async def test_requests_running_together_share_one_connection_as_streams(pki, nginx):
    port, _ = nginx
    f = fetcher(pki)
    first = await f.fetch(f"https://h2.test:{port}/", "127.0.0.1", port)  # the session
    results = await asyncio.gather(*(f.fetch(f"https://h2.test:{port}/p{i}.html", "127.0.0.1", port)
                                     for i in range(8)))
    stats = f.stats
    assert f.open_to("127.0.0.1") == 1
    await f.close()
    assert first.error is None
    assert [r.body for r in results] == [b"<html>page %d</html>" % i for i in range(8)]
    assert stats["connections_opened"] == 1 and stats["h2_sessions"] == 1


async def test_the_body_bound_and_content_coding_hold(pki, nginx):
    port, _ = nginx
    f = fetcher(pki, max_page_size=100_000)
    big = await f.fetch(f"https://h2.test:{port}/big.html", "127.0.0.1", port)
    after = await f.fetch(f"https://h2.test:{port}/", "127.0.0.1", port)
    await f.close()
    assert big.error == "tooBig" and len(big.body) == 100_000
    assert after.error is None and after.conn_reused  # the stream was reset, the session lives on


# ---------------------------------------------------------------- hostile h2 servers

class H2Server:
    """A TLS server that negotiates h2 and hands each connection to ``behave(conn, h2conn, event)``."""

    def __init__(self, pki, behave):
        self.pki = pki
        self.behave = behave
        self.connections = 0
        self.requests = 0

    async def __aenter__(self):
        ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ctx.load_cert_chain(*self.pki.good)
        ctx.set_alpn_protocols(["h2", "http/1.1"])
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0, ssl=ctx)
        self.port = self.server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc):
        self.server.close()

    async def _serve(self, reader, writer):
        self.connections += 1
        proto = writer.get_extra_info("ssl_object").selected_alpn_protocol()
        if proto != "h2":  # the fallback: a plain HTTP/1.1 answer
            while True:
                try:
                    await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, ConnectionError):
                    break
                self.requests += 1
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\nover h1.1")
                await writer.drain()
            writer.close()
            return
        conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=False, header_encoding=None))
        conn.initiate_connection()
        writer.write(conn.data_to_send())
        try:
            while True:
                data = await reader.read(65536)
                if not data:
                    break
                for ev in conn.receive_data(data):
                    if isinstance(ev, h2.events.RequestReceived):
                        self.requests += 1
                        if await self.behave(writer, conn, ev) is False:
                            writer.close()
                            return
                writer.write(conn.data_to_send())
                await writer.drain()
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            writer.close()


def answer(conn, sid, body=b"ok", status=b"200"):
    conn.send_headers(sid, [(b":status", status), (b"content-length", b"%d" % len(body))])
    conn.send_data(sid, body, end_stream=True)


async def fetch_from(srv, pki, path="/", **kw):
    f = fetcher(pki, **kw)
    res = await f.fetch(f"https://h2.test:{srv.port}{path}", "127.0.0.1", srv.port)
    return f, res


async def test_an_endless_headers_continuation_stream_is_header_too_big(pki):
    async def behave(writer, conn, ev):
        writer.write(conn.data_to_send())
        head = HeadersFrame(ev.stream_id)
        head.data = conn.encoder.encode([(b":status", b"200")])
        writer.write(head.serialize())
        for _ in range(2000):  # 16 KB each, never END_HEADERS
            frame = ContinuationFrame(ev.stream_id)
            frame.data = b"\x00" * 16000
            writer.write(frame.serialize())
            await writer.drain()
        await asyncio.sleep(3600)

    async with H2Server(pki, behave) as srv:
        started = time.monotonic()
        f, res = await fetch_from(srv, pki, max_header_size=64 * 1024)
        await f.close()
    assert res.error == "headerTooBig", (res.error, res.error_detail)
    assert time.monotonic() - started < 2.0 and res.bytes_read < 2_000_000


async def test_a_thousand_push_promises_break_the_protocol_and_the_host_falls_back_to_1_1(pki):
    async def behave(writer, conn, ev):
        writer.write(conn.data_to_send())
        for i in range(1000):  # push is disabled by our SETTINGS: each one is a protocol error
            frame = PushPromiseFrame(ev.stream_id)
            frame.promised_stream_id = 2 * (i + 1)
            frame.data = conn.encoder.encode([(b":method", b"GET"), (b":scheme", b"https"),
                                              (b":authority", b"h2.test"), (b":path", b"/p%d" % i)])
            frame.flags.add("END_HEADERS")
            writer.write(frame.serialize())
        await writer.drain()
        await asyncio.sleep(3600)

    async with H2Server(pki, behave) as srv:
        f, res = await fetch_from(srv, pki)
        again = await f.fetch(f"https://h2.test:{srv.port}/", "127.0.0.1", srv.port)
        stats = f.stats
        await f.close()
    assert res.error == "badResponse" and "HTTP/2 protocol error" in res.error_detail
    assert again.error is None and again.http_version == b"1.1" and again.body == b"over h1.1"
    assert stats["h2_fallback_hosts"] == 1 and stats["alpn"] == {"h2": 1, "http/1.1": 1}


async def test_rst_stream_and_goaway_are_outcomes(pki):
    async def reset(writer, conn, ev):
        conn.reset_stream(ev.stream_id, h2.errors.ErrorCodes.INTERNAL_ERROR)

    async with H2Server(pki, reset) as srv:
        f, res = await fetch_from(srv, pki)
        await f.close()
    assert res.error == "reset" and "RST_STREAM INTERNAL_ERROR" in res.error_detail and res.bytes_read > 0

    async def goaway(writer, conn, ev):
        if ev.stream_id == 1:
            answer(conn, 1)
        else:  # the second request is not processed: GOAWAY with last stream 1
            conn.close_connection(last_stream_id=1)

    async with H2Server(pki, goaway) as srv:
        f, first = await fetch_from(srv, pki)
        second = await f.fetch(f"https://h2.test:{srv.port}/b", "127.0.0.1", srv.port)
        third = await f.fetch(f"https://h2.test:{srv.port}/c", "127.0.0.1", srv.port)
        await f.close()
    assert first.error is None and first.body == b"ok"
    # not processed on a session used before: retried free, as a stale 1.1 connection
    assert second.error == "reset" and "GOAWAY" in second.error_detail
    assert second.conn_reused and second.bytes_read == 0
    assert third.error is None and srv.connections == 2  # a new session after the GOAWAY


async def test_a_silent_stream_times_out_and_a_big_body_is_cut(pki):
    async def silent(writer, conn, ev):
        conn.send_headers(ev.stream_id, [(b":status", b"200")])  # then nothing

    async with H2Server(pki, silent) as srv:
        started = time.monotonic()
        f, res = await fetch_from(srv, pki, timeout_page=0.5)
        took = time.monotonic() - started
        await f.close()
    assert res.error == "timeout" and 0.5 <= took < 0.5 + 2 * Fetcher.SWEEP_INTERVAL + 0.3

    async def endless(writer, conn, ev):
        conn.send_headers(ev.stream_id, [(b":status", b"200")])
        for _ in range(200):  # 3.2 MB, within the windows we opened as it reads
            try:
                conn.send_data(ev.stream_id, b"y" * 16000)
            except Exception:
                break
            writer.write(conn.data_to_send())
            await writer.drain()

    async with H2Server(pki, endless) as srv:
        f, res = await fetch_from(srv, pki, max_page_size=50_000)
        await f.close()
    assert res.error == "tooBig" and len(res.body) == 50_000


async def test_a_stream_in_flight_through_a_stall_keeps_the_time_it_had_left(pki):
    """The stream is sent, the crawler's loop stands still (as under SIGSTOP) well past the page
    deadline, and the server answers 0.4 s after: the stream's deadline moved by the stall
    (larbin_py.net.http, *The loop standing still*), so the answer is in time."""
    async def late(writer, conn, ev):
        await asyncio.sleep(0.4)
        answer(conn, ev.stream_id, b"after the stall")

    async with H2Server(pki, late) as srv:
        f = fetcher(pki, timeout_page=1.0)
        task = asyncio.create_task(f.fetch(f"https://h2.test:{srv.port}/", "127.0.0.1", srv.port))
        while not any(s.streams for s in f._h2_sessions.values()):  # the stream is sent
            await asyncio.sleep(0)
        time.sleep(1.5)
        res = await task
        stats = f.stats
        await f.close()
    assert res.error is None and res.body == b"after the stall", (res.error, res.error_detail)
    assert res.http_version == b"2" and stats["stalls"] == 1


async def test_a_401_over_h2_is_auth_required(pki):
    async def unauthorized(writer, conn, ev):
        answer(conn, ev.stream_id, b"no", b"401")

    async with H2Server(pki, unauthorized) as srv:
        f, res = await fetch_from(srv, pki)
        await f.close()
    assert res.error == "authRequired" and res.status == 401


def test_http_version_2_without_h2_is_refused_in_words():
    import os
    import subprocess
    import sys

    code = ("import sys; sys.modules['h2'] = None\n"
            "from larbin_py.net.http import Fetcher, H2_AVAILABLE\n"
            "assert not H2_AVAILABLE\n"
            "assert Fetcher(user_agent='t', http_version='auto').http_version == '1.1'\n"
            "try:\n    Fetcher(user_agent='t', http_version='2')\nexcept ValueError as e:\n    print(e)\n")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=root, timeout=60)
    assert proc.returncode == 0 and "needs the h2 package" in proc.stdout, proc.stderr


async def test_the_warc_records_of_an_h2_request_hide_credentials(pki, nginx):
    from larbin_py.net.auth import AuthRules

    port, server = nginx
    f = fetcher(pki, keep_raw=True, auth=AuthRules([(f"https://h2.test:{port}/", "basic", "u", "s3cret-pw")]))
    res = await f.fetch(f"https://h2.test:{port}/", "127.0.0.1", port)
    await f.close()
    assert res.error is None and res.http_version == b"2"
    assert res.raw_request.startswith(b"GET / HTTP/2\r\nHost: h2.test:")
    import base64
    assert b"Authorization: Basic ***" in res.raw_request
    assert base64.b64encode(b"u:s3cret-pw") not in res.raw_request
    assert res.raw_response_head.startswith(b"HTTP/2 200\r\n")
    log = server.wait_log(lambda log: any(e["authorization"] for e in log))
    assert log[-1]["authorization"].startswith("Basic ")  # sent over h2 all the same
