"""larbin_py.net.http: the fetcher against the sim and hostile servers.

Each hostile server is a few lines of asyncio on 127.0.0.1 that misbehaves
in one precise way; the fetcher must turn every misbehaviour into a typed
result, never an exception, and keep its memory bounded.  Every test runs
with both response readers: httptools (h11 refereeing) and h11 alone.
"""

from __future__ import annotations

import asyncio
import gzip
import shutil
import ssl
import subprocess
import time
import zlib

import pytest

from larbin_py.net.http import PARSERS, Fetcher, split_url
from larbin_py.sim import Sim, SimConfig
from helpers.http_server import Server, reply


def test_split_url_gives_the_host_header_sni_and_target():
    assert split_url("http://a.test") == ("http", "a.test", "a.test", "/")
    assert split_url("http://a.test?q#f") == ("http", "a.test", "a.test", "/?q")
    assert split_url("HTTPS://u:p@[::1]:8443/x#f") == ("https", "[::1]:8443", "::1", "/x")
    assert split_url("http://a.test:/p") == ("http", "a.test:", "a.test", "/p")
    for bad in ("ftp://a.test/", "http:///x", "http://[::1/"):
        with pytest.raises(ValueError):
            split_url(bad)


_READER = {"parser": PARSERS[0]}


@pytest.fixture(autouse=True, params=PARSERS)
def reader(request):
    """Run the test with each response reader; fetcher() builds with it."""
    _READER["parser"] = request.param
    yield request.param
    _READER["parser"] = PARSERS[0]


def fetcher(**kw) -> Fetcher:
    args = dict(user_agent="larbin_py/test (+http://example.test/bot)", from_addr="bot@example.test",
                connect_timeout=2.0, timeout_page=2.0, timeout_incr=2000, max_page_size=100_000,
                parser=_READER["parser"])
    args.update(kw)
    return Fetcher(**args)


async def get(f: Fetcher, srv: Server, path: str = "/", host: str = "site.test"):
    return await f.fetch(f"http://{host}:{srv.port}{path}", "127.0.0.1", srv.port)


async def test_request_headers_and_a_plain_answer():
    async with Server(reply(b"<html>hello</html>", headers=b"X-A: 1\r\n")) as srv:
        f = fetcher()
        res = await get(f, srv, "/a?b=1")
        await f.close()
    assert res.error is None and res.status == 200 and res.body == b"<html>hello</html>"
    assert res.content_type == "text/html" and (b"x-a", b"1") in res.headers
    head = srv.heads[0].decode().lower()
    assert head.startswith("get /a?b=1 http/1.1\r\n")
    assert f"host: site.test:{srv.port}" in head
    assert "user-agent: larbin_py/test" in head and "from: bot@example.test" in head
    assert "accept-encoding: gzip, deflate" in head and "accept: text/html" in head
    assert res.rtt is not None and 0 <= res.rtt <= res.elapsed


async def test_the_request_bytes_are_the_ones_h11_writes():
    import h11

    async with Server(reply()) as srv:
        f = fetcher()
        assert (await get(f, srv, "/a%20b?c=d~")).error is None
        assert (await f.fetch(f"http://site.test:{srv.port}/x", "127.0.0.1", srv.port,
                              extra_headers=[(b"X-Extra", b"1")])).error is None
        await f.close()
    host = [(b"Host", f"site.test:{srv.port}".encode())]
    for head, target, extra in zip(srv.heads, (b"/a%20b?c=d~", b"/x"), ([], [(b"X-Extra", b"1")])):
        want = h11.Connection(h11.CLIENT).send(
            h11.Request(method=b"GET", target=target, headers=host + f._base_headers + extra))
        assert head == want


async def test_a_recrawl_s_validators_are_added_without_h11_and_a_replaced_header_still_goes_through_it(
        monkeypatch):
    """Headers that only add (a recrawl's If-None-Match, If-Modified-Since) are appended to
    the site's kept bytes, h11 left out; the bytes are those h11 writes.  One that replaces a
    base header (a site's own User-Agent) is checked by h11, and one it refuses is never sent."""
    import h11
    import larbin_py.net.http as http_mod

    validators = [(b"If-None-Match", b'W/"5f-1a2b"'), (b"If-Modified-Since", b"Mon, 23 Nov 2026 00:00:00 GMT")]
    async with Server(reply()) as srv:
        f = fetcher()
        assert (await get(f, srv, "/warm")).error is None  # the site's headers, checked once
        built = []
        real = http_mod.h11.Request
        monkeypatch.setattr(http_mod.h11, "Request", lambda **kw: (built.append(kw), real(**kw))[1])
        assert (await f.fetch(f"http://site.test:{srv.port}/v", "127.0.0.1", srv.port,
                              extra_headers=validators)).error is None
        added_with_h11 = len(built)
        assert (await f.fetch(f"http://site.test:{srv.port}/u", "127.0.0.1", srv.port,
                              extra_headers=[(b"User-Agent", b"other/1.0")])).error is None
        replaced_with_h11 = len(built) - added_with_h11
        bad = await f.fetch(f"http://site.test:{srv.port}/b", "127.0.0.1", srv.port,
                            extra_headers=[(b"If-None-Match", b'"x"\r\nX-Injected: 1')])
        await f.close()
    assert added_with_h11 == (0 if f._fast else 1) and replaced_with_h11 == 1  # (h11 reader: h11 writes all)
    host = [(b"Host", f"site.test:{srv.port}".encode())]
    want = h11.Connection(h11.CLIENT).send(real(method=b"GET", target=b"/v", headers=host + f._base_headers + validators))
    assert srv.heads[1] == want
    assert b"user-agent: other/1.0" in srv.heads[2].lower() and srv.heads[2].lower().count(b"user-agent") == 1
    assert bad.error is not None and len(srv.heads) == 3  # refused before anything was sent
    assert not any(b"X-Injected" in h for h in srv.heads)


async def test_a_target_h11_refuses_is_never_sent():
    async with Server(reply()) as srv:
        f = fetcher()
        res = await get(f, srv, "/a b")
        await f.close()
    assert res.error == "badResponse" and "target" in res.error_detail.lower()
    assert srv.heads == [] and srv.connections == 0


async def test_each_site_gets_its_own_host_header_and_extra_headers_are_sent():
    import larbin_py.net.http as http_mod

    async with Server(reply()) as srv:
        f = fetcher()
        hosts = ["a.test", "b.test", "a.test", "b.test", "c.test"]
        for host in hosts:
            assert (await get(f, srv, "/p", host=host)).error is None
        res = await f.fetch(f"http://a.test:{srv.port}/q", "127.0.0.1", srv.port,
                            extra_headers=[(b"If-Modified-Since", b"Mon, 23 Nov 2026 00:00:00 GMT")])
        assert res.error is None
        # Sites past the bound on kept header lists: the lists are rebuilt, still right.
        old_bound, http_mod.HEADERS_KEPT = http_mod.HEADERS_KEPT, 2
        try:
            for host in ["d.test", "e.test", "f.test", "d.test"]:
                assert (await get(f, srv, "/r", host=host)).error is None
            assert len(f._headers_by_host) <= 2
        finally:
            http_mod.HEADERS_KEPT = old_bound
        await f.close()
    heads = [h.decode().lower() for h in srv.heads]
    for head, host in zip(heads, hosts + ["a.test", "d.test", "e.test", "f.test", "d.test"]):
        assert head.count("host: ") == 1 and f"\r\nhost: {host}:{srv.port}\r\n" in head, head
        assert "user-agent: larbin_py/test" in head and "accept-encoding: gzip, deflate" in head
    assert "if-modified-since: mon, 23 nov 2026" in heads[5]
    assert sum("if-modified-since" in h for h in heads) == 1


@pytest.fixture(scope="module")
def certificate(tmp_path_factory):
    """A self-signed certificate for ``secure.test`` (openssl, from Debian's package)."""
    if shutil.which("openssl") is None:
        pytest.fail("the https tests need the openssl command")
    d = tmp_path_factory.mktemp("tls")
    key, cert = d / "key.pem", d / "cert.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key),
                    "-out", str(cert), "-days", "2", "-subj", "/CN=secure.test",
                    "-addext", "subjectAltName=DNS:secure.test"], check=True, capture_output=True)
    return str(cert), str(key)


async def test_https_with_sni_and_keep_alive(certificate):
    cert, key = certificate
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_ctx.load_cert_chain(cert, key)
    names = []
    server_ctx.sni_callback = lambda sock, name, ctx: names.append(name)
    client_ctx = ssl.create_default_context(cafile=cert)
    async with Server(reply(b"<html>secret</html>"), ssl_context=server_ctx) as srv:
        f = fetcher(ssl_context=client_ctx)
        url = f"https://secure.test:{srv.port}/"
        first = await f.fetch(url, "127.0.0.1", srv.port)
        second = await f.fetch(url + "b", "127.0.0.1", srv.port)
        await f.close()
    assert first.error is None and first.status == 200 and first.body == b"<html>secret</html>"
    assert second.error is None and second.conn_reused and srv.connections == 1
    assert names == ["secure.test"]  # SNI carries the host name, not the IP we dialled
    assert srv.heads[0].lower().startswith(b"get / http/1.1") and b"host: secure.test" in srv.heads[0].lower()


async def test_https_with_an_untrusted_certificate_is_a_tls_error(certificate):
    cert, key = certificate
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_ctx.load_cert_chain(cert, key)
    async with Server(reply(), ssl_context=server_ctx) as srv:
        f = fetcher()  # the system's trust store: a self-signed certificate fails
        res = await f.fetch(f"https://secure.test:{srv.port}/", "127.0.0.1", srv.port)
        await f.close()
    assert res.error == "tlsError" and res.status is None
    assert "certificate verify failed" in (res.error_detail or "").lower()
    assert srv.heads == []


async def test_connection_refused_is_no_connection():
    async with Server(reply()) as srv:
        port = srv.port
    f = fetcher()
    res = await f.fetch(f"http://x.test:{port}/", "127.0.0.1", port)
    await f.close()
    assert res.error == "noConnection" and res.status is None


@pytest.mark.async_timeout(20)
async def test_a_server_that_never_answers_times_out():
    async def silent(reader, writer, head):
        await asyncio.sleep(30)

    async with Server(silent) as srv:
        f = fetcher(timeout_page=0.5)
        t0 = time.monotonic()
        res = await get(f, srv)
        took = time.monotonic() - t0
        await f.close()
    assert res.error == "timeout"
    assert 0.5 <= took < 0.5 + 1.0


@pytest.mark.async_timeout(20)
async def test_slow_drip_gets_more_time_per_byte_then_times_out():
    """Larbin's rule: deadline = timeoutPage + bytes received / timeoutIncr."""
    async def drip(reader, writer, head):
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n")
        for _ in range(100):
            writer.write(b"x" * 100)
            await writer.drain()
            await asyncio.sleep(0.2)
        return False

    async with Server(drip) as srv:
        f = fetcher(timeout_page=0.5, timeout_incr=1000)  # +1 s per 1000 bytes
        t0 = time.monotonic()
        res = await get(f, srv)
        took = time.monotonic() - t0
        await f.close()
    assert res.error == "timeout"
    # 500 bytes/s push the deadline 0.5 s per second: it meets the clock near 1 s, not 0.5 s
    assert 0.8 < took < 2.5
    assert 0 < res.bytes_read < 100000


async def test_endless_body_stops_at_max_page_size():
    async def endless(reader, writer, head):
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\n\r\n")
        try:
            while True:
                writer.write(b"y" * 65536)
                await writer.drain()
        except ConnectionError:
            return False

    async with Server(endless) as srv:
        f = fetcher(max_page_size=200_000)
        res = await get(f, srv)
        await f.close()
    assert res.error == "tooBig" and res.status == 200
    assert len(res.body) == 200_000


async def test_reset_mid_body():
    async def cut(reader, writer, head):
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n" + b"z" * 300)
        await writer.drain()
        writer.transport.abort()
        return False

    async with Server(cut) as srv:
        f = fetcher()
        res = await get(f, srv)
        await f.close()
    assert res.error == "reset"


@pytest.mark.parametrize("answer", [
    b"garbage\r\n\r\n",
    b"HTTP/1.1 abc Nope\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nBad Header Line\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nContent-Length: -5\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello",
])
async def test_garbage_answers_are_bad_response(answer):
    async def bad(reader, writer, head):
        writer.write(answer)
        await writer.drain()
        await asyncio.sleep(0.05)
        return False

    async with Server(bad) as srv:
        f = fetcher()
        res = await get(f, srv)
        await f.close()
    assert res.error == "badResponse", res


async def test_enormous_headers():
    async def huge(reader, writer, head):
        writer.write(b"HTTP/1.1 200 OK\r\n")
        for i in range(5000):
            writer.write(b"X-Filler-%d: %s\r\n" % (i, b"f" * 100))
        writer.write(b"\r\n")
        await writer.drain()
        return False

    async with Server(huge) as srv:
        f = fetcher(max_header_size=16 * 1024)
        res = await get(f, srv)
        await f.close()
    assert res.error == "headerTooBig"


async def test_gzip_bomb_is_capped_without_inflating_it_all():
    bomb = gzip.compress(b"\0" * 50_000_000, compresslevel=9)  # 50 MB in ~50 KB
    async with Server(reply(bomb, headers=b"Content-Encoding: gzip\r\n")) as srv:
        f = fetcher(max_page_size=1_000_000)
        res = await get(f, srv)
        await f.close()
    assert res.error == "tooBig"
    assert len(res.body) <= 1_000_000


@pytest.mark.parametrize("encode", [
    lambda b: gzip.compress(b),
    lambda b: zlib.compress(b),  # "deflate" as the RFC says: zlib-wrapped
    lambda b: zlib.compress(b)[2:-4],  # "deflate" as some servers send it: raw
])
async def test_gzip_and_both_deflates_are_decoded(encode):
    body = b"<html>" + b"compressible text " * 500 + b"</html>"
    name = b"gzip" if encode(b"x")[:2] == b"\x1f\x8b" else b"deflate"
    async with Server(reply(encode(body), headers=b"Content-Encoding: " + name + b"\r\n")) as srv:
        f = fetcher()
        res = await get(f, srv)
        await f.close()
    assert res.error is None and res.body == body


async def test_corrupt_gzip_is_bad_response():
    async with Server(reply(b"\x1f\x8bnot really gzip at all", headers=b"Content-Encoding: gzip\r\n")) as srv:
        f = fetcher()
        res = await get(f, srv)
        await f.close()
    assert res.error == "badResponse"


async def test_short_body_then_close_is_reset():
    async def short(reader, writer, head):
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 500\r\n\r\n" + b"s" * 100)
        await writer.drain()
        return False  # closes cleanly

    async with Server(short) as srv:
        f = fetcher()
        res = await get(f, srv)
        await f.close()
    assert res.error == "reset"


async def test_longer_body_than_declared_keeps_the_declared_part_and_drops_the_connection():
    async def long(reader, writer, head):
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhelloEXTRA GARBAGE")
        await writer.drain()

    async with Server(long) as srv:
        f = fetcher()
        first = await get(f, srv, "/1")
        second = await get(f, srv, "/2")
        await f.close()
    assert first.error is None and first.body == b"hello"
    # the garbage after the body must not be read as the next answer
    assert second.error is None or second.error in ("reset", "badResponse")
    assert second.body in (b"hello", b"")


async def test_broken_chunked_encoding_is_bad_response():
    async with Server(reply(b"5\r\nhello\r\nZZZ\r\nbroken\r\n0\r\n\r\n",
                            headers=b"Transfer-Encoding: chunked\r\n")) as srv:
        f = fetcher()
        res = await get(f, srv)
        await f.close()
    assert res.error == "badResponse"


async def test_good_chunked_encoding():
    async with Server(reply(b"5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n",
                            headers=b"Transfer-Encoding: chunked\r\n")) as srv:
        f = fetcher()
        res = await get(f, srv)
        await f.close()
    assert res.error is None and res.body == b"hello world"


async def test_http10_server_that_closes_to_end_the_body():
    async def old(reader, writer, head):
        writer.write(b"HTTP/1.0 200 OK\r\nContent-Type: text/html\r\n\r\n<html>1.0 body</html>")
        await writer.drain()
        return False

    async with Server(old) as srv:
        f = fetcher()
        res = await get(f, srv)
        await f.close()
    assert res.error is None and res.body == b"<html>1.0 body</html>"


async def test_keep_alive_reuses_one_connection():
    async with Server(reply()) as srv:
        f = fetcher(keep_alive_idle=5.0)
        for i in range(3):
            res = await get(f, srv, f"/{i}")
            assert res.error is None
        await f.close()
    assert len(srv.heads) == 3 and srv.connections == 1


@pytest.mark.async_timeout(20)
async def test_idle_connection_older_than_keep_alive_idle_is_not_reused():
    async with Server(reply()) as srv:
        f = fetcher(keep_alive_idle=0.3)
        await get(f, srv, "/1")
        # wait for the idle sweep to drop it (event: the fetcher's pool empties)
        deadline = time.monotonic() + 5
        while f.open_to("127.0.0.1") and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        await get(f, srv, "/2")
        await f.close()
    assert srv.connections == 2


async def test_connection_close_is_honoured():
    async with Server(reply(close=True)) as srv:
        f = fetcher()
        await get(f, srv, "/1")
        await get(f, srv, "/2")
        await f.close()
    assert srv.connections == 2


async def test_proxy_gets_absolute_form_requests():
    async with Server(reply(b"via proxy")) as proxy:
        f = fetcher(proxy=("127.0.0.1", proxy.port))
        res = await f.fetch("http://far.test:8080/x?y=1", "203.0.113.9", 8080)
        await f.close()
    assert res.error is None and res.body == b"via proxy"
    head = proxy.heads[0].decode()
    assert head.startswith("GET http://far.test:8080/x?y=1 HTTP/1.1\r\n")
    assert "host: far.test:8080" in head.lower()


@pytest.mark.async_timeout(30)
async def test_bandwidth_cap_slows_reading():
    body = b"b" * 1_200_000
    async with Server(reply(body)) as srv:
        f = fetcher(bond_width=400_000, max_page_size=2_000_000, timeout_page=20)
        t0 = time.monotonic()
        res = await get(f, srv)
        took = time.monotonic() - t0
        await f.close()
    assert res.error is None and len(res.body) == 1_200_000
    # 1.2 MB at 400 KB/s: 3 s, or 2 s after a first second's burst; never much faster
    assert took >= 1.8


@pytest.mark.parametrize("header, want", [
    (b"Retry-After: 120\r\n", 120.0),
    (b"Retry-After: Wed, 21 Oct 2015 07:28:00 GMT\r\n", 0.0),  # in the past: no wait
    (b"Retry-After: soon\r\n", None),
])
async def test_retry_after_and_location(header, want):
    async with Server(reply(b"", status=b"503 Busy", headers=header + b"Location: /moved\r\n")) as srv:
        f = fetcher()
        res = await get(f, srv)
        await f.close()
    assert res.status == 503 and res.error is None
    assert res.retry_after == want
    assert res.location == "/moved"


async def test_cancelling_a_fetch_closes_its_connection():
    async def silent(reader, writer, head):
        await asyncio.sleep(30)

    async with Server(silent) as srv:
        f = fetcher()
        task = asyncio.get_running_loop().create_task(get(f, srv))
        await asyncio.sleep(0.1)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert f.open_connections == 0
        await f.close()


async def test_against_the_sim_gzip_chunked_and_keep_alive():
    async with Sim(SimConfig(seed=2, hosts=8, hosts_per_ip=4, extras=False, trap=False,
                             gzip_ratio=0.5, chunked_ratio=0.5)) as sim:
        f = fetcher(max_page_size=5_000_000)
        got = 0
        for url in sim.web.all_urls():
            host = url.split("/")[2].split(":")[0]
            res = await f.fetch(url, sim.web.hosts[host].ip, sim.port)
            resource = sim.web.lookup(url)
            assert res.error is None, (url, res.error, res.error_detail)
            assert res.status == resource.status
            if resource.status == 200:
                assert res.body == resource.body
                got += 1
        await f.close()
    assert got > 20
    assert len(sim.log.connections) < len(sim.log.requests)  # kept alive


@pytest.mark.async_timeout(20)
async def test_an_endless_trickle_of_100_continue_times_out_at_the_page_deadline():
    """The page deadline is absolute: informational answers push nothing back (issue 18)."""
    async def trickle(reader, writer, head):
        try:
            for _ in range(400):  # 10 kB/s for 4 s: each tick would have bought 50 ms more
                writer.write(b"HTTP/1.1 100 Continue\r\n\r\n" * 4)
                await writer.drain()
                await asyncio.sleep(0.01)
        except ConnectionError:
            pass
        return False

    async with Server(trickle) as srv:
        f = fetcher(timeout_page=0.5, timeout_incr=2000, max_header_size=1_000_000)
        t0 = time.monotonic()
        res = await asyncio.wait_for(get(f, srv), 3.0)
        took = time.monotonic() - t0
        await f.close()
    assert res.error == "timeout", (res.error, res.error_detail)
    assert took < 0.5 + f.SWEEP_INTERVAL + 1.0
    assert res.bytes_read > 0 and res.status is None


@pytest.mark.async_timeout(20)
async def test_a_flood_of_informational_answers_counts_against_the_header_limit():
    async def flood(reader, writer, head):
        try:
            for _ in range(40):  # 1 MB of 100 Continue, then silence
                writer.write(b"HTTP/1.1 100 Continue\r\n\r\n" * 1000)
                await writer.drain()
            await asyncio.sleep(30)
        except ConnectionError:
            pass
        return False

    async with Server(flood) as srv:
        f = fetcher(max_header_size=16 * 1024, timeout_page=10)
        res = await asyncio.wait_for(get(f, srv), 5.0)
        await f.close()
    assert res.error == "headerTooBig" and "informational" in res.error_detail, res.error_detail
    assert res.bytes_read < 400_000  # of the 1 MB offered


@pytest.mark.async_timeout(30)
async def test_endless_chunked_trailers_are_refused_without_buffering_them():
    """120 MB of trailers were accepted, with 481 MB of RSS (issue 18): they count as head."""
    total = 16_000_000
    sent = [0]

    async def trailers(reader, writer, head):
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nTransfer-Encoding: chunked\r\n\r\n"
                     b"5\r\nhello\r\n0\r\n")
        line = b"X-Trailer: " + b"t" * 100 + b"\r\n"
        block = line * (65536 // len(line))
        try:
            while sent[0] < total:
                writer.write(block)
                sent[0] += len(block)
                await writer.drain()
            writer.write(b"\r\n")
            await writer.drain()
        except ConnectionError:
            pass
        return False

    async with Server(trailers) as srv:
        f = fetcher(max_header_size=16 * 1024, max_page_size=100_000, timeout_page=20)
        res = await asyncio.wait_for(get(f, srv), 15.0)
        await f.close()
    assert res.error == "headerTooBig", (res.error, res.error_detail)
    assert res.bytes_read < 2_000_000 and sent[0] < total
