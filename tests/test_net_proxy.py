"""The proxy (larbin_py.net.proxy, net.connect): Debian's tinyproxy with Basic auth in front of
nginx (TLS with the test's CA), and scripted proxies that misbehave.

https goes through CONNECT, with TLS to the origin inside the tunnel (SNI and
verification as without a proxy); http goes in absolute form; credentials
reach the proxy and never the origin (nginx's log) nor any error or stat.
A proxy that answers CONNECT with 407, garbage, or nothing is the proxy's
failure (``proxyError``), never the site's.
"""

from __future__ import annotations

import asyncio
import time

import pytest

from larbin_py.net.http import Fetcher
from larbin_py.net.proxy import ConnectReply, NoProxy, ProxyConfig, ProxyError
from larbin_py.net.tls import TlsPolicy
from helpers.http_server import Server, reply
from helpers.nginx import Nginx, free_port
from helpers.tinyproxy import Tinyproxy
from helpers.tls import make_pki

SECRET = "pr0xy-s3cret"


@pytest.fixture(scope="module")
def origin(tmp_path_factory):
    pki = make_pki(str(tmp_path_factory.mktemp("pki")), "secure.test")
    tls_port, plain_port = free_port(), free_port()
    nginx = Nginx(f"""
    server {{
        listen 127.0.0.1:{tls_port} ssl;
        ssl_certificate {pki.good[0]};
        ssl_certificate_key {pki.good[1]};
        root {{root}}/www;
    }}
    server {{
        listen 127.0.0.1:{plain_port};
        root {{root}}/www;
    }}""", ports=[("127.0.0.1", tls_port), ("127.0.0.1", plain_port)])
    nginx.write("www/index.html", b"<html>behind the proxy</html>")
    with nginx.start():
        yield pki, tls_port, plain_port, nginx


@pytest.fixture(scope="module")
def proxy():
    with Tinyproxy("crawler", SECRET) as p:
        yield p


def fetcher(pki, proxy_config, **kw) -> Fetcher:
    return Fetcher(user_agent="larbin_py/test", connect_timeout=2.0, timeout_page=3.0, proxy=proxy_config,
                   tls=TlsPolicy(ca_file=pki.ca), **kw)


async def test_https_through_connect_with_basic_auth(origin, proxy):
    pki, tls_port, _, nginx = origin
    f = fetcher(pki, ProxyConfig("127.0.0.1", proxy.port, "crawler", SECRET))
    url = f"https://secure.test:{tls_port}/"
    first = await f.fetch(url, "127.0.0.1", tls_port)
    second = await f.fetch(url, "127.0.0.1", tls_port)
    await f.close()
    assert first.error is None and first.status == 200 and first.body == b"<html>behind the proxy</html>"
    assert second.error is None and second.conn_reused  # the tunnel is kept alive
    assert f"CONNECT 127.0.0.1:{tls_port}" in proxy.log_text()  # the address the crawl resolved
    served = [e for e in nginx.wait_log(lambda log: sum(e["port"] == str(tls_port) for e in log) >= 2)
              if e["port"] == str(tls_port)]
    assert len(served) == 2 and served[0]["host"] == "secure.test"
    assert all(e["proxy_authorization"] == "" and e["authorization"] == "" for e in served)


async def test_http_through_the_proxy_sends_its_credentials_to_it_only(origin, proxy):
    pki, _, plain_port, nginx = origin
    f = fetcher(pki, ProxyConfig("127.0.0.1", proxy.port, "crawler", SECRET))
    res = await f.fetch(f"http://127.0.0.1:{plain_port}/", "127.0.0.1", plain_port)  # the proxy resolves it
    await f.close()
    assert res.error is None and res.status == 200 and res.body == b"<html>behind the proxy</html>"
    assert f"GET http://127.0.0.1:{plain_port}/" in proxy.log_text()
    served = [e for e in nginx.wait_log(lambda log: any(e["port"] == str(plain_port) for e in log))
              if e["port"] == str(plain_port)]
    assert served and served[-1]["proxy_authorization"] == ""


async def test_wrong_credentials_are_the_proxys_failure_never_the_sites(origin, proxy):
    """tinyproxy refuses CONNECT with a 401 (RFC 9110 wants 407): any refusal of CONNECT is the proxy's."""
    pki, tls_port, _, _ = origin
    f = fetcher(pki, ProxyConfig("127.0.0.1", proxy.port, "crawler", "wrong-" + SECRET))
    res = await f.fetch(f"https://secure.test:{tls_port}/", "127.0.0.1", tls_port)
    await f.close()
    assert res.error == "proxyError" and "401" in res.error_detail
    assert SECRET not in res.error_detail and SECRET not in repr(f.stats) and SECRET not in repr(f.proxy)


async def test_a_407_to_an_http_request_is_the_proxys_and_keeps_the_connection():
    async def handler(reader, writer, head):
        assert head.startswith(b"GET http://site.test/ ") and b"proxy-authorization: basic " in head.lower()
        writer.write(b"HTTP/1.1 407 Proxy Authentication Required\r\nContent-Length: 4\r\n\r\nnope")
        await writer.drain()
    async with Server(handler) as srv:
        f = Fetcher(user_agent="t", connect_timeout=2.0, timeout_page=2.0,
                    proxy=ProxyConfig("127.0.0.1", srv.port, "u", SECRET))
        first = await f.fetch("http://site.test/", "192.0.2.1", 80)
        second = await f.fetch("http://site.test/", "192.0.2.1", 80)
        await f.close()
    assert first.error == second.error == "proxyError" and "407" in first.error_detail
    assert second.conn_reused and srv.connections == 1  # a whole answer: the connection stays good
    assert SECRET not in first.error_detail


async def test_no_proxy_hosts_go_direct(origin, proxy):
    pki, tls_port, _, _ = origin
    before = proxy.log_text().count("CONNECT")
    f = fetcher(pki, ProxyConfig("127.0.0.1", proxy.port, "crawler", SECRET), no_proxy=("secure.test",))
    res = await f.fetch(f"https://secure.test:{tls_port}/", "127.0.0.1", tls_port)
    await f.close()
    assert res.error is None and res.status == 200
    assert proxy.log_text().count("CONNECT") == before


def test_no_proxy_patterns():
    rules = NoProxy(["example.com", ".sub.test", "10.0.0.0/8", "::1"])
    assert rules.bypass("example.com") and rules.bypass("www.example.com")
    assert not rules.bypass("notexample.com") and not rules.bypass("example.com.evil.test")
    assert rules.bypass("a.sub.test") and not rules.bypass("sub.test")
    assert rules.bypass("10.1.2.3") and not rules.bypass("11.0.0.1") and rules.bypass("[::1]")
    assert NoProxy(["*"]).bypass("anything.test") and not NoProxy().bypass("a.test")


def test_proxy_urls_parse_and_never_show_the_password():
    p = ProxyConfig.parse("http://crawler:p%40ss@cache.test:3128")
    assert (p.host, p.port, p.user, p.password) == ("cache.test", 3128, "crawler", "p@ss")
    assert "p@ss" not in repr(p) and p.shown() == "http://crawler:***@cache.test:3128"
    assert ProxyConfig.parse(p.url()) == p
    assert ProxyConfig.parse("[::1]:8080") == ProxyConfig("::1", 8080)
    for bad, why in [("https://h:1", "http://"), ("http://h", "port is required"), ("http://u@h:1", "USER:PASSWORD"),
                     ("http://h:99999", "1..65535"), ("http://h:1/x", "no path")]:
        with pytest.raises(ValueError, match=why):
            ProxyConfig.parse(bad)


# ---------------------------------------------------------------- hostile proxies

async def proxy_that(answer):
    """A scripted proxy: reads the CONNECT head, then ``answer(writer)`` (None: never answers)."""
    async def handler(reader, writer, head):
        assert head.startswith(b"CONNECT ")
        if answer is None:
            await asyncio.sleep(3600)
        writer.write(answer)
        await writer.drain()
        return False
    return Server(handler)


@pytest.mark.parametrize("answer, why", [
    (b"HTTP/1.1 407 Proxy Authentication Required\r\nProxy-Authenticate: Basic realm=x\r\n"
     b"Content-Length: 0\r\n\r\n", "407"),
    (b"\x16\x03\x01garbage that is not HTTP\r\n\r\n", "not HTTP"),
    (b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n\r\n", "502"),
    (b"HTTP/1.1 200 OK\r\n\r\nearly bytes", "bytes after"),
    (b"HTTP/1.1 200 OK\r\nX: " + b"y" * 100_000, "over"),
])
async def test_a_proxy_that_refuses_or_answers_garbage_is_proxy_error(answer, why):
    async with await proxy_that(answer) as srv:
        f = Fetcher(user_agent="t", connect_timeout=2.0, timeout_page=2.0,
                    proxy=ProxyConfig("127.0.0.1", srv.port, "u", SECRET))
        res = await f.fetch("https://site.test/", "192.0.2.1", 443)
        await f.close()
    assert res.error == "proxyError" and why in res.error_detail, res.error_detail
    assert SECRET not in res.error_detail


async def test_a_proxy_answering_407_forever_is_never_asked_in_a_loop():
    """Each fetch asks CONNECT once: no retry of its own (the engine retries, politely)."""
    answer = b"HTTP/1.1 407 Proxy Authentication Required\r\nContent-Length: 0\r\n\r\n"
    async with await proxy_that(answer) as srv:
        f = Fetcher(user_agent="t", connect_timeout=2.0, timeout_page=2.0, proxy=("127.0.0.1", srv.port))
        results = [await f.fetch("https://site.test/", "192.0.2.1", 443) for _ in range(3)]
        await f.close()
    assert [r.error for r in results] == ["proxyError"] * 3 and len(srv.heads) == 3


async def test_a_proxy_that_never_answers_connect_is_proxy_error_at_the_connect_timeout():
    async with await proxy_that(None) as srv:
        f = Fetcher(user_agent="t", connect_timeout=0.5, timeout_page=5.0, proxy=("127.0.0.1", srv.port))
        started = time.monotonic()
        res = await f.fetch("https://site.test/", "192.0.2.1", 443)
        took = time.monotonic() - started
        await f.close()
    assert res.error == "proxyError" and "did not open the tunnel" in res.error_detail
    assert 0.5 <= took < 0.5 + 2 * Fetcher.SWEEP_INTERVAL + 0.2


async def test_an_unreachable_proxy_is_proxy_error():
    f = Fetcher(user_agent="t", connect_timeout=1.0, proxy=("127.0.0.1", free_port()))
    res = await f.fetch("http://site.test/", "192.0.2.1", 80)
    await f.close()
    assert res.error == "proxyError" and "unreachable" in res.error_detail


def test_connect_reply_reads_informational_answers_then_the_status():
    r = ConnectReply("a.test:443")
    assert not r.feed(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 Conn")
    assert r.feed(b"ection established\r\n\r\n") and r.status == 200
    r.check()
    with pytest.raises(ProxyError, match="closed the connection"):
        ConnectReply("a.test:443").feed(b"")


def test_the_configuration_shows_the_proxy_and_auth_passwords_as_stars():
    from larbin_py.config import parse_config_text
    from larbin_py.config.text import format_config

    text = (f"startUrl http://a.test/\nproxy http://crawler:{SECRET}@cache.test:3128\nnoProxy .internal.test\n"
            f"auth\n  https://a.test/docs/ basic bob au7h-{SECRET}\n  https://b.test/ digest eve dig-{SECRET}\nend\n")
    config = parse_config_text(text)
    assert config.proxy == ("cache.test", 3128, "crawler", SECRET)
    shown = format_config(config, redact=True)
    assert SECRET not in shown
    assert "proxy http://crawler:***@cache.test:3128" in shown and "https://a.test/docs/ basic bob ***" in shown
    assert parse_config_text(format_config(config)) == config  # the file form keeps them
