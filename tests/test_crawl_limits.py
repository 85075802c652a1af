"""End-to-end: what bounds a crawl's scope and keeps it from hanging or running away.

lockSite with several start hosts, a site whose robots.txt refuses more URLs
than its FIFO holds, endless redirect chains, and private addresses; each
against the synthetic web or a small server on loopback.
"""

from __future__ import annotations

import asyncio
import dataclasses
import io

import pytest

from larbin_py.demo import crawl_rules
from larbin_py.engine import Engine
from larbin_py.sim import Sim, SimConfig
from helpers.crawl import check_conservation, crawl, make_config, page_requests

pytestmark = pytest.mark.slow

#: Ten sim hosts, two per loopback IP, 40 % of links to other hosts: the web of
#: the tests that crawl only some of its hosts (lockSite, privateNetworks).
TEN_HOSTS = SimConfig(seed=4, hosts=10, pages_per_host=(4, 10), hosts_per_ip=2, dns=True, extras=False,
                      trap=False, robots_agent="larbin_py", cross_host_ratio=0.4)


@pytest.mark.async_timeout(120)
async def test_lock_site_crawls_every_start_host_and_nothing_else(tmp_path):
    async with Sim(TEN_HOSTS) as sim:
        seeds = tuple(sim.seeds[:3])
        err = io.StringIO()
        config = make_config(tmp_path, sim, start_urls=seeds, lock_site=True, wait_duration=0.0)
        engine, summary = await crawl(config, err=err)
        assert "refused" not in err.getvalue(), err.getvalue()
        locked = {f"h{i}.sim.test" for i in range(3)}
        # lockSite's truth: links to any other host are dropped, as limitToDomain
        # of exactly the start hosts does (the sim has no subdomains here)
        truth = sim.truth(dataclasses.replace(crawl_rules(config, seeds), limit_to_domain=tuple(locked)))
        requested = [r.url for r in page_requests(sim)]
        assert {r.host for r in page_requests(sim)} == locked
        assert set(requested) == truth.must_request
        assert len(requested) == len(set(requested))
        assert summary.rejected.get("outSite", 0) > 0  # other hosts were really linked
        check_conservation(engine, summary)


def site_server(pages: dict[str, bytes], robots: bytes | None = None, redirect=None):
    """A handler for test_http.Server: ``pages`` by path, robots.txt, redirects.

    ``redirect(path)`` returns a Location for a path, or None.
    """

    async def handler(reader, writer, head):
        path = head.split(b" ", 2)[1].decode()
        target = redirect(path) if redirect is not None else None
        if path == "/robots.txt" and robots is not None:
            status, body, extra = b"200 OK", robots, b"Content-Type: text/plain\r\n"
        elif target is not None:
            status, body, extra = b"301 Moved", b"", b"Location: " + target.encode() + b"\r\n"
        elif path in pages:
            status, body, extra = b"200 OK", pages[path], b"Content-Type: text/html\r\n"
        else:
            status, body, extra = b"404 Not Found", b"", b""
        writer.write(b"HTTP/1.1 " + status + b"\r\n" + extra + b"Content-Length: %d\r\n\r\n" % len(body) + body)
        await writer.drain()

    return handler


def loopback_config(tmp_path, port: int, **changes):
    from larbin_py.config import parse_config_text

    values = dict(start_urls=(f"http://127.0.0.1:{port}/",), save_dir=str(tmp_path / "save"),
                  state_dir=str(tmp_path / "state"), http_port=0, output_mode="stats", wait_duration=0.0,
                  timeout_page=5.0, limit_time=20.0)
    values.update(changes)
    return parse_config_text("", require_start_urls=False).replace(**values)


def paths_asked(srv) -> list[str]:
    return [head.split(b" ", 2)[1].decode() for head in srv.heads]


@pytest.mark.async_timeout(60)
async def test_robots_refusing_more_than_a_site_fifo_holds_ends_and_fetches_the_rest(tmp_path):
    from helpers.http_server import Server

    links = "".join(f'<a href="/no/{i}.html">{i}</a>' for i in range(41)) + '<a href="/ok.html">ok</a>'
    pages = {"/": f"<html><body>{links}</body></html>".encode(), "/ok.html": b"<html>ok</html>"}
    async with Server(site_server(pages, robots=b"User-agent: *\nDisallow: /no/\n")) as srv:
        config = loopback_config(tmp_path, srv.port, max_urls_by_site=40)
        engine, summary = await crawl(config)
    assert summary.stop_reason == "end of work"
    assert paths_asked(srv) == ["/robots.txt", "/", "/ok.html"]
    assert summary.forgotten == {"forbiddenRobots": 41}
    # the two URLs past the FIFO's 40 waited in memory (the park), not in the wait lane
    assert engine.frontier.lanes.wait.pushed == 0 and engine.frontier.parked == 0
    check_conservation(engine, summary)


def endless_chain(path: str) -> str | None:
    """``/rt/N`` redirects to ``/rt/N+1``, for ever."""
    if path.startswith("/rt/"):
        return f"/rt/{int(path[4:]) + 1}"
    return None


@pytest.mark.async_timeout(60)
@pytest.mark.parametrize("limit", [5, 0])
async def test_an_endless_redirect_chain_stops_at_max_redirects(tmp_path, limit):
    from helpers.http_server import Server

    async with Server(site_server({}, redirect=endless_chain)) as srv:
        config = loopback_config(tmp_path, srv.port, start_urls=(f"http://127.0.0.1:{srv.port}/rt/0",),
                                 max_redirects=limit, limit_time=10.0)
        engine, summary = await crawl(config)
    assert summary.stop_reason == "end of work"
    assert paths_asked(srv) == ["/robots.txt"] + [f"/rt/{n}" for n in range(limit + 1)]
    assert summary.forgotten == {"err30X": limit + 1}
    assert summary.rejected.get("tooManyRedirects") == 1
    assert "tooManyRedirects 1" in summary.format()
    check_conservation(engine, summary)


@pytest.mark.async_timeout(60)
async def test_redirect_hops_survive_a_reload(tmp_path):
    # The crawl stops while /rt/4 (4 hops from /rt/0) is queued; the run that
    # continues it must still stop the chain after the 5th redirect.
    from helpers.http_server import Server

    engines = []
    handler = site_server({}, redirect=endless_chain)

    async def stopping(reader, writer, head):
        await handler(reader, writer, head)
        if b" /rt/3 " in head:
            engines[-1].request_stop("stopped by the test")

    async with Server(stopping) as srv:
        config = loopback_config(tmp_path, srv.port, start_urls=(f"http://127.0.0.1:{srv.port}/rt/0",),
                                 limit_time=10.0)
        engines.append(Engine(config))
        first = await engines[-1].run()
        assert first.stop_reason == "stopped by the test" and first.queued == 1
        engines.append(Engine(config, reload=True, err=io.StringIO()))
        summary = await engines[-1].run()
    assert summary.stop_reason == "end of work"
    pages = [p for p in paths_asked(srv) if p != "/robots.txt"]
    assert pages == [f"/rt/{n}" for n in range(6)]
    assert summary.forgotten == {"err30X": 6}
    assert summary.rejected.get("tooManyRedirects") == 1


@pytest.mark.async_timeout(120)
async def test_private_networks_seeds_crawls_the_start_hosts_only(tmp_path):
    # Every sim host is on loopback: under "seeds" only the start URLs' hosts
    # may be fetched; links to the others are forgotten as privateAddress.
    async with Sim(TEN_HOSTS) as sim:
        seeds = tuple(sim.seeds[:3])
        config = make_config(tmp_path, sim, start_urls=seeds, private_networks="seeds", wait_duration=0.0)
        engine, summary = await crawl(config)
        start_hosts = {f"h{i}.sim.test" for i in range(3)}
        truth = sim.truth(dataclasses.replace(crawl_rules(config, seeds), limit_to_domain=tuple(start_hosts)))
        assert {r.host for r in sim.log.requests} == start_hosts
        assert {r.url for r in page_requests(sim)} == truth.must_request
        assert summary.forgotten.get("privateAddress", 0) > 0
        assert "privateAddress" in summary.format()
        check_conservation(engine, summary)


async def serve_two(pages, internal_pages, robots=None, redirect=None):
    """A "public" server on 127.0.0.1 and an "internal" one on 127.0.0.2."""
    from helpers.http_server import Server

    internal = Server(site_server(internal_pages))
    internal.server = await asyncio.start_server(internal._serve, "127.0.0.2", 0)
    internal.port = internal.server.sockets[0].getsockname()[1]
    public = Server(site_server(pages(internal.port), robots=robots(internal.port) if robots else None,
                                redirect=redirect(internal.port) if redirect else None))
    await public.__aenter__()
    return public, internal


@pytest.mark.async_timeout(60)
@pytest.mark.parametrize("policy", ["seeds", "deny", "allow"])
async def test_private_networks_guard_links_redirects_and_posted_urls(tmp_path, policy):
    def pages(port2):
        link = f'<a href="http://127.0.0.2:{port2}/admin">admin</a><a href="/go">go</a>'
        return {"/": f"<html><body>{link}</body></html>".encode()}

    def redirect(port2):
        return lambda path: f"http://127.0.0.2:{port2}/secret" if path == "/go" else None

    public, internal = await serve_two(pages, {"/admin": b"<html>a</html>", "/secret": b"<html>s</html>",
                                               "/posted": b"<html>p</html>"},
                                       robots=lambda port2: b"User-agent: *\nAllow: /\n", redirect=redirect)
    try:
        config = loopback_config(tmp_path, public.port, private_networks=policy)
        engine = Engine(config, err=io.StringIO())
        posted = engine.submit_urls([f"http://127.0.0.2:{internal.port}/posted"])
        assert posted[0]["result"] == "accepted"  # refused by its address, once resolved
        summary = await engine.run()
    finally:
        public.server.close()
        internal.server.close()
    inside = sorted(paths_asked(internal))
    if policy == "allow":
        assert inside == ["/admin", "/posted", "/robots.txt", "/secret"]
        assert "privateAddress" not in summary.forgotten
    elif policy == "seeds":
        assert inside == []
        assert paths_asked(public) == ["/robots.txt", "/", "/go"]
        assert summary.forgotten == {"privateAddress": 3, "err30X": 1}
    else:
        assert inside == [] and paths_asked(public) == []
        assert summary.forgotten == {"privateAddress": 2}  # the start URL and the posted one
    assert summary.stop_reason == "end of work"
    check_conservation(engine, summary)


@pytest.mark.async_timeout(60)
async def test_a_robots_txt_redirect_to_a_private_host_is_not_followed(tmp_path):
    def redirect(port2):
        return lambda path: f"http://127.0.0.2:{port2}/robots.txt" if path == "/robots.txt" else None

    public, internal = await serve_two(lambda port2: {"/": b"<html>home</html>"}, {"/robots.txt": b""},
                                       redirect=redirect)
    try:
        config = loopback_config(tmp_path, public.port, private_networks="seeds")
        engine, summary = await crawl(config)
    finally:
        public.server.close()
        internal.server.close()
    assert paths_asked(internal) == []
    # robots.txt could not be read: unavailable (RFC 9309), asked again, then
    # the site is taken as disallowed
    assert paths_asked(public) == ["/robots.txt"] * 3
    assert summary.rejected.get("privateAddress") == 3
    assert summary.forgotten == {"forbiddenRobots": 1}
    check_conservation(engine, summary)
