"""robots.txt through the real engine: cut at the size cap, and sent on dropped connections.

A robots.txt longer than ``robots.MAX_BODY`` whose cut falls inside
``Disallow: /images/`` made it ``Disallow: /``: the whole site was forbidden
(issue 18).  The engine must parse (and log for ``--reload``) the body
without its partial last line, so the site is crawled whole.

A robots.txt request that never reached the server (a kept-alive connection
the server dropped as it was reused) is no failure of the site's: a server
that drops every such request must not get the site given up.
"""

from __future__ import annotations

import socket
import struct

import pytest
from helpers.http_server import Server

from larbin_py.config import parse_config_text
from larbin_py.engine import Engine
from larbin_py.robots import MAX_BODY
from larbin_py.sim import Sim, SimConfig
from larbin_py.sim.dns import SimDNSServer
from larbin_py.sim.model import RobotsProfile


def _robots_cut_inside(rule: bytes, keep: int, cap: int) -> bytes:
    """A robots.txt of more than ``cap`` octets whose ``rule`` is cut after ``keep`` octets there."""
    head = b"User-agent: *\nDisallow: /nowhere/\n"
    line = b"# " + b"padding " * 15 + b"\n"
    pad = line * ((cap - keep - len(head)) // len(line))
    pad += b"#" * (cap - keep - len(head) - len(pad) - 1) + b"\n"
    body = head + pad + rule + b"\n" + line * 4
    assert body[cap - keep : cap] == rule[:keep] and len(body) > cap
    return body


@pytest.mark.async_timeout(120)
@pytest.mark.parametrize("max_page_size", [5_000_000, 100_000])  # the robots cap; the fetcher's (tooBig)
async def test_a_disallow_cut_at_the_cap_does_not_forbid_the_site(tmp_path, max_page_size):
    sim_cfg = SimConfig(seed=5, hosts=1, pages_per_host=(6, 6), dns=True, extras=False, trap=False,
                        robots_mix={"absent": 1.0}, p_redirect=0, p_loop=0, p_missing=0)
    async with Sim(sim_cfg) as sim:
        (host,) = sim.web.hosts.values()
        host.robots = RobotsProfile("rules", 200, _robots_cut_inside(b"Disallow: /images/", len(b"Disallow: /"),
                                                                    min(MAX_BODY, max_page_size)))
        base = parse_config_text("", require_start_urls=False)
        config = base.replace(
            start_urls=tuple(sim.seeds), dns_servers=(("127.0.0.1", sim.dns_port),),
            save_dir=str(tmp_path / "save"), state_dir=str(tmp_path / "state"), http_port=0,
            output_mode="stats", wait_duration=0.01, timeout_page=3.0, forbidden_extensions=(),
            get_cgi=True, max_page_size=max_page_size)
        engine = Engine(config)
        summary = await engine.run()
        pages = [r for r in sim.log.requests if r.path != "/robots.txt"]
        robots = [r for r in sim.log.requests if r.path == "/robots.txt"]
    assert len(robots) == 1
    assert len(pages) >= 2 and summary.pages >= 2, (summary.forgotten, len(pages))
    assert "forbiddenRobots" not in summary.forgotten, summary.forgotten


@pytest.mark.async_timeout(60)
async def test_a_robots_txt_sent_on_connections_the_server_drops_is_asked_again_and_the_site_crawled(tmp_path):
    """Two sites on one IP share its kept-alive connection.  The server resets a robots.txt request
    that comes on a reused connection, before any byte of an answer: a stale connection, the
    request never reached it.  b.test's robots.txt always finds a.test's idle connection, so
    before the free retry its three tries failed and the site was given up (its pages forgotten
    as forbiddenRobots); now each stale try is asked again at once on a new connection, no
    failure is counted, and both sites are crawled whole, one connection to the IP at a time."""
    served_on: dict[int, int] = {}  # connection -> requests read on it
    log: list[tuple[str, str, int]] = []  # host, path, the request's rank on its connection

    async def handler(reader, writer, head):
        lines = head.decode("latin-1").split("\r\n")
        path = lines[0].split(" ")[1]
        host = next(v.strip() for k, _, v in (h.partition(":") for h in lines[1:]) if k.lower() == "host")
        host = host.split(":")[0]
        rank = served_on[id(writer)] = served_on.get(id(writer), 0) + 1
        log.append((host, path, rank))
        if path == "/robots.txt" and rank > 1:  # drop it: RST before any byte
            writer.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            writer.transport.abort()
            return False
        if path == "/robots.txt":
            body, status = b"", b"404 Not Found"
        else:
            n = int(path.strip("/p") or 0)
            body, status = (b'<html><a href="/p%d">next</a></html>' % (n + 1) if n < 12 else b"<html>end</html>",
                            b"200 OK")
        writer.write(b"HTTP/1.1 " + status + b"\r\nContent-Type: text/html\r\nContent-Length: %d\r\n\r\n" % len(body)
                     + body)
        await writer.drain()
        return True

    async with Server(handler) as srv, SimDNSServer({"a.test": ["127.0.0.1"], "b.test": ["127.0.0.1"]}) as dns:
        config = parse_config_text("", require_start_urls=False).replace(
            start_urls=(f"http://a.test:{srv.port}/", f"http://b.test:{srv.port}/"),
            dns_servers=(dns.address,), private_networks="allow", save_dir=str(tmp_path / "save"),
            state_dir=str(tmp_path / "state"), http_port=0, output_mode="stats", wait_duration=0.15, depth_in_site=30,
            timeout_page=3.0, robots_retry_delay=0.5, retries=0)
        summary = await Engine(config).run()
    stale_robots = [h for h, p, rank in log if p == "/robots.txt" and rank > 1]
    assert "b.test" in stale_robots, log  # the attack happened: b.test's robots.txt met a dropped connection
    assert "forbiddenRobots" not in summary.forgotten, (summary.forgotten, log)
    pages = {(h, p) for h, p, _ in log if p != "/robots.txt"}
    assert pages == {(h, "/" if n == 0 else f"/p{n}") for h in ("a.test", "b.test") for n in range(13)}, log
    assert summary.pages == 26 and summary.connections_opened <= 4 + len(stale_robots)
