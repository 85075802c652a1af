"""IPv6: AAAA beside A (larbin_py.net.dns), Happy Eyeballs (net.connect), Debian's nginx on [::1],
and politeness per /64 (frontier.addresses.polite_key, the scheduler's IpTable).

The blackholed IPv6 address is real: a socket on [::1] that listens with a
full accept queue, so the kernel drops every further SYN (no answer, no
error), while the same port on 127.0.0.1 answers.  Happy Eyeballs must
reach IPv4 within 300 ms; without it the connect times out.
"""

from __future__ import annotations

import asyncio
import random
import socket
import time

import pytest

from larbin_py.config import parse_config_text
from larbin_py.frontier.addresses import IpTable, polite_key
from larbin_py.frontier.assembly import assemble
from larbin_py.net.connect import attempt_order
from larbin_py.net.dns import NXDOMAIN, TIMEOUT, Resolver
from larbin_py.net.http import Fetcher
from larbin_py.net.tls import TlsPolicy
from larbin_py.sim.dns import SimDNSServer
from helpers.crawl import crawl
from helpers.nginx import Nginx, free_port
from helpers.tls import make_pki

ZONE = {"dual.test": ["192.0.2.1", "2001:db8::1", "192.0.2.2", "2001:db8::2"], "v4.test": ["192.0.2.3"],
        "v6only.test": ["::1"]}


@pytest.mark.parametrize("version, expect", [
    ("any", {"dual.test": ("2001:db8::1", "192.0.2.1", "2001:db8::2", "192.0.2.2"), "v4.test": ("192.0.2.3",),
             "v6only.test": ("::1",)}),
    ("4", {"dual.test": ("192.0.2.1", "192.0.2.2"), "v4.test": ("192.0.2.3",), "v6only.test": ()}),
    ("6", {"dual.test": ("2001:db8::1", "2001:db8::2"), "v4.test": (), "v6only.test": ("::1",)}),
])
async def test_aaaa_is_asked_beside_a_and_ipv6_comes_first_interleaved(version, expect):
    async with SimDNSServer(ZONE) as server:
        resolver = Resolver([server.address], ip_version=version)
        answers = {name: await resolver.resolve(name) for name in expect}
        resolver.close()
    for name, ips in expect.items():
        assert answers[name].ips == ips and (answers[name].error is None) == bool(ips), name
        if not ips:
            assert answers[name].error == NXDOMAIN
    qtypes = {q for _, _, q, _ in server.log}
    assert qtypes == {"any": {1, 28}, "4": {1}, "6": {28}}[version]
    assert resolver.stats.in_flight == 0


async def test_a_family_that_fails_does_not_hide_the_other_and_the_worse_error_wins():
    async with SimDNSServer(ZONE, faults={"v4.test": "drop"}) as server:
        resolver = Resolver([server.address], ip_version="any", timeout=0.3, tries=1)
        dual = await resolver.resolve("dual.test")
        dropped = await resolver.resolve("v4.test")
        resolver.close()
    assert dual.ok
    assert dropped.error == TIMEOUT  # no answer for A nor AAAA: a timeout, not "no such name"


def test_attempt_order_interleaves_the_families_other_first():
    assert attempt_order("2001:db8::1", ("2001:db8::1", "192.0.2.1", "2001:db8::2", "192.0.2.2")) == \
        ["2001:db8::1", "192.0.2.1", "2001:db8::2", "192.0.2.2"]
    assert attempt_order("192.0.2.1", ("2001:db8::1", "192.0.2.1", "192.0.2.2")) == \
        ["192.0.2.1", "2001:db8::1", "192.0.2.2"]
    assert len(attempt_order("::1", [f"::{i}" for i in range(1, 20)])) == 4


class Blackhole:
    """[::1]:port drops every SYN (a full accept queue); 127.0.0.1:port serves ``handler``."""

    async def __aenter__(self):
        for _ in range(50):
            hole = socket.socket(socket.AF_INET6)
            hole.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            hole.bind(("::1", 0))
            self.port = hole.getsockname()[1]
            try:
                self.server = await asyncio.start_server(self._serve, "127.0.0.1", self.port)
                break
            except OSError:
                hole.close()
        hole.listen(0)
        self.hole = hole
        self.fill = []
        for _ in range(3):  # the queue's one place taken, and then some: SYNs are dropped from here on
            c = socket.socket(socket.AF_INET6)
            c.setblocking(False)
            try:
                c.connect(("::1", self.port))
            except BlockingIOError:
                pass
            self.fill.append(c)
        return self

    async def _serve(self, reader, writer):
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nipv4")
        await writer.drain()
        writer.close()

    async def __aexit__(self, *exc):
        self.server.close()
        for c in self.fill:
            c.close()
        self.hole.close()


async def test_happy_eyeballs_falls_back_to_ipv4_within_300_ms_when_ipv6_blackholes():
    async with Blackhole() as bh:
        f = Fetcher(user_agent="t", connect_timeout=3.0, timeout_page=3.0)
        res = await f.fetch(f"http://dual.test:{bh.port}/", "::1", bh.port, addresses=("::1", "127.0.0.1"))
        stats = f.stats
        await f.close()
        assert res.error is None and res.body == b"ipv4" and res.ip == "127.0.0.1"
        assert res.sent_at - res.started_at < 0.3, res.sent_at - res.started_at
        assert stats["address_fallbacks"] == 1
        # without the IPv4 address to fall back on, the blackhole costs the whole connect timeout
        f = Fetcher(user_agent="t", connect_timeout=0.6, timeout_page=3.0)
        res = await f.fetch(f"http://dual.test:{bh.port}/", "::1", bh.port)
        await f.close()
        assert res.error == "noConnection" and "connect timeout" in res.error_detail


async def test_a_refused_ipv6_address_falls_back_at_once_not_after_the_delay():
    async def ok(reader, writer):
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nipv4")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(ok, "127.0.0.1", 0)  # nothing listens on [::1] at that port
    port = server.sockets[0].getsockname()[1]
    async with server:
        f = Fetcher(user_agent="t", connect_timeout=3.0, happy_eyeballs_delay=2.0)
        res = await f.fetch(f"http://a.test:{port}/", "::1", port, addresses=("::1", "127.0.0.1"))
        await f.close()
    assert res.error is None and res.ip == "127.0.0.1" and res.sent_at - res.started_at < 1.0
    closed = free_port()
    f = Fetcher(user_agent="t", connect_timeout=3.0, happy_eyeballs_delay=2.0)
    res = await f.fetch(f"http://a.test:{closed}/", "::1", closed, addresses=("::1", "127.0.0.1"))
    await f.close()
    assert res.error == "noConnection" and "refused" in res.error_detail and res.elapsed < 1.0


@pytest.fixture(scope="module")
def v6_nginx(tmp_path_factory):
    pki = make_pki(str(tmp_path_factory.mktemp("pki")), "v6only.test")
    port = free_port("::1")
    nginx = Nginx(f"""
    server {{
        listen [::1]:{port} ssl;
        ssl_certificate {pki.good[0]};
        ssl_certificate_key {pki.good[1]};
        root {{root}}/www;
    }}""", ports=[("::1", port)])
    nginx.write("www/index.html", b"<html>over IPv6 <a href='/next.html'>next</a></html>")
    nginx.write("www/next.html", b"<html>next</html>")
    nginx.write("www/robots.txt", b"User-agent: *\nDisallow:\n")
    with nginx.start():
        yield pki, port, nginx


async def test_https_to_nginx_on_ipv6_loopback(v6_nginx):
    pki, port, nginx = v6_nginx
    f = Fetcher(user_agent="t", tls=TlsPolicy(ca_file=pki.ca))
    res = await f.fetch(f"https://v6only.test:{port}/", "::1", port)
    await f.close()
    assert res.error is None and res.status == 200 and res.ip == "::1"


@pytest.mark.async_timeout(60)
async def test_a_crawl_reaches_an_ipv6_only_site(v6_nginx, tmp_path):
    pki, port, nginx = v6_nginx
    async with SimDNSServer(ZONE) as dns:
        config = parse_config_text("", require_start_urls=False).replace(
            start_urls=(f"https://v6only.test:{port}/",), dns_servers=(dns.address,), private_networks="allow",
            state_dir=str(tmp_path / "state"), save_dir=str(tmp_path / "save"), http_port=0,
            output_mode="stats", wait_duration=0.05, tls_ca_file=pki.ca)
        engine, summary = await crawl(config)
    assert summary.pages == 2, summary
    paths = {"/", "/next.html", "/robots.txt"}
    assert {e["request"].split()[1] for e in nginx.wait_log(
        lambda log: {e["request"].split()[1] for e in log} >= paths)} >= paths


def test_an_ipv6_64_is_one_ip_for_politeness():
    assert polite_key("2001:db8:1:2:aaaa::1") == "2001:db8:1:2::/64"
    assert polite_key("2001:db8:1:2:aaaa::1", 48) == "2001:db8:1::/48"
    assert polite_key("2001:db8::1", 128) == "2001:db8::1"
    assert polite_key("::ffff:192.0.2.7") == "192.0.2.7" and polite_key("192.0.2.7") == "192.0.2.7"
    table = IpTable(64)
    table["2001:db8::1"] = "server"
    assert table.get("2001:db8::ffff") == "server" and "2001:db8:0:1::1" not in table
    assert list(table) == ["2001:db8::/64"]


@pytest.mark.parametrize("prefix, shared", [(64, True), (128, False)])
def test_two_sites_in_one_64_share_the_wait_and_each_request_goes_to_its_own_address(tmp_path, prefix, shared):
    f = assemble(str(tmp_path / "frontier"), ram_urls=100, max_urls_by_site=10, max_requests=10,
                 wait_duration=1.0, jitter=0.0, rng=random.Random(1), agent="larbin", obey_robots=False,
                 ipv6_prefix=prefix)
    for host in ("a.test", "b.test"):
        f.admission.push(f"http://{host}/", 3, 2)
    f.load(0.0)
    for site in f.dns.take():
        f.dns_resolved(site, ({"a.test": "2001:db8::a", "b.test": "2001:db8::b"}[site.host],), 300.0, 0.0)
    first = f.next_request(0.0)
    second = f.next_request(0.0)
    assert first is not None and first.ip == {"a.test": "2001:db8::a", "b.test": "2001:db8::b"}[first.site.host]
    if shared:  # one server: the second site waits for the first request's wait
        assert second is None and len(f.ips) == 1
        f.fetched_ok(first, 0.5)
        assert f.next_request(0.5) is None
        later = f.next_request(1.0)
        assert later is not None and later.site is not first.site and later.ip != first.ip
    else:
        assert second is not None and second.ip != first.ip and len(f.ips) == 2


async def test_the_fetcher_counts_and_closes_connections_by_network():
    """The frontier's key of an IPv6 server is its network: the fetcher answers for it."""
    async def keep(reader, writer):
        while True:
            await reader.readuntil(b"\r\n\r\n")
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
            await writer.drain()

    srv = await asyncio.start_server(keep, "::1", 0)
    port = srv.sockets[0].getsockname()[1]
    async with srv:
        f = Fetcher(user_agent="t")
        res = await f.fetch(f"http://a.test:{port}/", "::1", port)
        assert res.error is None
        assert f.open_to("::/64") == 1 and f.idle_to("::/64") == 1 and f.open_to("1::/64") == 0
        assert f.close_idle("::/64") == 1 and f.open_connections == 0
        await f.close()
