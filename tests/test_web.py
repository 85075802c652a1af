"""The stats web server: JSON, metrics, routes, limits, URL input, the dashboard.

Server tests talk HTTP over real sockets on 127.0.0.1; the browser test
loads the dashboard in headless Chromium during a real sim crawl.
"""

from __future__ import annotations

import asyncio
import base64
import io
import json
import os
import re
import shutil

import pytest
from prometheus_client.parser import text_string_to_metric_families

from larbin_py.engine import Engine
from larbin_py.sim import Sim, SimConfig
from larbin_py.web import (FakeSource, InputServer, StatsServer, check_snapshot, format_status,
                           render_metrics)

from helpers.crawl import make_config
from helpers.web import AUTH, chromium, dump_dom, free_port, get, http, post, running


# -- JSON and metrics ---------------------------------------------------------------

def test_fake_and_edge_snapshots_follow_the_schema():
    src = FakeSource()
    src.advance(10, tooDeep=3, err40X=1)
    assert check_snapshot(src.snapshot()) == []
    bad = src.snapshot()
    bad["pages"]["fetched"] = "many"
    assert check_snapshot(bad)


def test_metrics_parse_as_prometheus_text():
    src = FakeSource()
    src.advance(42, bytes_per_page=100, tooDeep=3)
    text = render_metrics(src.snapshot())
    families = {f.name: f for f in text_string_to_metric_families(text)}
    assert all(name.startswith("larbin_") for name in families)
    kinds = {name: f.type for name, f in families.items()}
    counters = [n for n, t in kinds.items() if t == "counter"]
    gauges = [n for n, t in kinds.items() if t == "gauge"]
    assert counters and gauges
    values = {s.name: s.value for f in families.values() for s in f.samples}
    assert any(v == 42 for k, v in values.items() if "pages" in k)
    forgotten = [s for f in families.values() for s in f.samples if s.labels.get("reason") == "tooDeep"]
    assert forgotten and forgotten[0].value == 3


@pytest.mark.async_timeout(120)
async def test_the_engine_snapshot_follows_the_schema_and_renders(tmp_path):
    async with Sim(SimConfig(seed=5, hosts=10, dns=True, robots_agent="larbin_py", trap=False)) as sim:
        config = make_config(tmp_path, sim, wait_duration=0.05)
        engine = Engine(config)
        snaps = []
        task = asyncio.get_running_loop().create_task(engine.run())
        await sim.log.wait_requests(20, timeout=60)
        snaps.append(engine.snapshot())
        summary = await task
        snaps.append(engine.snapshot())
    for snap in snaps:
        assert check_snapshot(snap) == [], check_snapshot(snap)
        list(text_string_to_metric_families(render_metrics(snap)))
    assert snaps[-1]["pages"]["fetched"] == summary.pages > 0
    assert snaps[-1]["state"] == "finished"


# -- the server ------------------------------------------------------------------------

async def test_routes_and_security_headers():
    src = FakeSource()
    async with running(StatsServer(src, port=0)) as srv:
        status, headers, body = await http(srv.port, get("/"))
        assert status == 200 and headers["content-type"].startswith("text/html")
        csp = headers["content-security-policy"]
        assert "default-src 'self'" in csp and "unsafe-inline" not in csp.split("script-src")[-1].split(";")[0]
        assert headers["x-content-type-options"] == "nosniff"
        assert b"<script" in body and b"src=\"/dashboard.js\"" in body.replace(b"'", b'"')
        status, headers, body = await http(srv.port, get("/stats.json"))
        assert status == 200 and headers["content-type"].startswith("application/json")
        data = json.loads(body)
        assert check_snapshot({k: v for k, v in data.items() if k != "history"}) == []
        status, headers, body = await http(srv.port, get("/metrics"))
        assert status == 200 and headers["content-type"].startswith("text/plain")
        list(text_string_to_metric_families(body.decode()))
        assert (await http(srv.port, get("/healthz")))[0] == 200
        assert (await http(srv.port, get("/nowhere")))[0] == 404
        assert (await http(srv.port, b"PUT / HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 0\r\n\r\n"))[0] == 405
        assert (await http(srv.port, b"DELETE /stats.json HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"))[0] == 405
        src.data["state"] = "failed"
        assert (await http(srv.port, get("/healthz")))[0] == 503


async def test_keep_alive_serves_several_requests_on_one_connection():
    async with running(StatsServer(FakeSource(), port=0)) as srv:
        reader, writer = await asyncio.open_connection("127.0.0.1", srv.port)
        for _ in range(3):
            writer.write(get("/healthz"))
            await writer.drain()
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
            assert head.startswith(b"HTTP/1.1 200")
            length = int(re.search(rb"content-length: (\d+)", head, re.I).group(1))
            await reader.readexactly(length)
        writer.close()


async def test_oversized_requests_are_refused_and_closed():
    async with running(StatsServer(FakeSource(), port=0, max_header_bytes=4096,
                                   accept_urls=True, max_body_bytes=1000)) as srv:
        status, _h, _b = await http(srv.port, get("/", b"X-Big: " + b"a" * 10000 + b"\r\n"))
        assert status == 431
        status, _h, _b = await http(srv.port, post("/urls", b'["http://a.test/"]' * 200, b"application/json"))
        assert status == 413


@pytest.mark.async_timeout(20)
async def test_a_slow_client_is_disconnected():
    async with running(StatsServer(FakeSource(), port=0, header_timeout=0.3, idle_timeout=0.3)) as srv:
        reader, writer = await asyncio.open_connection("127.0.0.1", srv.port)
        writer.write(b"GET / HTTP/1.1\r\nHo")  # half a request, then nothing
        await writer.drain()
        data = await asyncio.wait_for(reader.read(), 5)  # the server closes: EOF
        assert data == b"" or data.startswith(b"HTTP/1.1 408")
        assert srv.counters["timeouts"] >= 1
        writer.close()


async def test_url_input_lines_json_and_verdicts():
    src = FakeSource()
    # text/plain needs the token (test_web_security: without one, JSON only)
    async with running(StatsServer(src, port=0, accept_urls=True, token="s3cret-token")) as srv:
        status, _h, body = await http(srv.port, post("/urls", b"http://a.test/\n# comment\nmailto:x\n\nhttp://a.test/\n",
                                                     extra=AUTH))
        assert status == 200
        assert [(v["url"], v["result"]) for v in json.loads(body)] == [
            ("http://a.test/", "accepted"), ("mailto:x", "rejected"), ("http://a.test/", "duplicate")]
        status, _h, body = await http(srv.port, post("/urls", b'["http://b.test/"]', b"application/json", AUTH))
        assert status == 200 and json.loads(body)[0]["result"] == "accepted"
        assert (await http(srv.port, post("/urls", b"{bad json", b"application/json", AUTH)))[0] == 400
        assert (await http(srv.port, post("/urls", b"x", b"image/png", AUTH)))[0] == 415
        assert (await http(srv.port, get("/urls")))[0] == 405
    assert src.submitted == ["http://a.test/", "http://b.test/"]


async def test_url_input_is_off_unless_enabled():
    src = FakeSource()
    async with running(StatsServer(src, port=0)) as srv:
        assert (await http(srv.port, post("/urls", b"http://a.test/\n")))[0] == 403
    assert src.submitted == []


async def test_beyond_loopback_url_input_needs_a_token():
    with pytest.raises(ValueError, match="token"):
        StatsServer(FakeSource(), host="0.0.0.0", port=0, accept_urls=True)
    src = FakeSource()
    # bound to loopback here, but with a token: the token is then required
    async with running(StatsServer(src, port=0, accept_urls=True, token="s3cret-token")) as srv:
        assert (await http(srv.port, post("/urls", b"http://a.test/\n")))[0] == 401
        wrong = b"Authorization: Bearer nope\r\n"
        assert (await http(srv.port, post("/urls", b"http://a.test/\n", extra=wrong)))[0] == 401
        right = b"Authorization: Bearer s3cret-token\r\n"
        assert (await http(srv.port, post("/urls", b"http://a.test/\n", extra=right)))[0] == 200
    assert src.submitted == ["http://a.test/"]


async def test_deeply_nested_json_gets_a_400_and_one_log_line():
    """issue 18: '[' x 100k got no answer and a RecursionError traceback in the log."""
    src, logged = FakeSource(), []
    async with running(StatsServer(src, port=0, accept_urls=True, log=logged.append)) as srv:
        status, _h, body = await http(srv.port, post("/urls", b"[" * 100_000, b"application/json"),
                                      read_timeout=3.0)
        assert status == 400 and b"nested too deeply" in body
        assert len(logged) == 1 and "nested too deeply" in logged[0] and "\n" not in logged[0]
        # the server still answers
        assert (await http(srv.port, post("/urls", b'["http://a.test/"]', b"application/json")))[0] == 200
    assert srv.counters["bad_requests"] == 1 and srv.counters["errors"] == 0
    assert src.submitted == ["http://a.test/"]


@pytest.mark.parametrize("body, ctype, status, reason", [
    (b"http://a.test/\xff\xfe\n", b"text/plain", 400, b"not UTF-8"),
    (b'["http://a.test/\xc3"]', b"application/json", 400, b"not UTF-8"),
    (b'{"url": "http://a.test/"}', b"application/json", 400, b"list of strings"),
    (b'["http://a.test/", 5]', b"application/json", 400, b"list of strings"),
    (b'[["http://a.test/"]]', b"application/json", 400, b"list of strings"),
    (b'["http://a.test/\\ud800"]', b"application/json", 400, b"lone surrogates"),
    (b"1" * 5000, b"application/json", 400, b"invalid JSON"),
    (b"[" * 1000 + b"]" * 1000, b"application/json", 400, b"list of strings"),
    (b'["' + b"a" * 9000 + b'"]', b"application/json", 413, b"over 8000 bytes"),
])
async def test_every_malformed_url_body_gets_a_4xx_and_one_log_line(body, ctype, status, reason):
    src, logged = FakeSource(), []
    async with running(StatsServer(src, port=0, accept_urls=True, max_body_bytes=8000, token="s3cret-token",
                                   log=logged.append)) as srv:
        got, _h, answer = await http(srv.port, post("/urls", body, ctype, AUTH), read_timeout=3.0)
        assert (got, reason in answer) == (status, True), answer
        # a chunked body over the limit is cut off as it comes
        chunked = (b"POST /urls HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: text/plain\r\n" + AUTH +
                   b"Transfer-Encoding: chunked\r\n\r\n" + b"2400\r\n" + b"u" * 9216 + b"\r\n" + b"0\r\n\r\n")
        assert (await http(srv.port, chunked, read_timeout=3.0))[0] == 413
    assert len(logged) == 2 and all(line.startswith("POST /urls refused (4") for line in logged)
    assert src.submitted == []


async def test_beyond_loopback_every_route_but_healthz_needs_the_token():
    """issue 18: bound beyond loopback, the stats (every URL and host) were open to all."""
    with pytest.raises(ValueError, match="token"):
        StatsServer(FakeSource(), host="0.0.0.0", port=0)  # without urlInput too
    src = FakeSource()
    async with running(StatsServer(src, host="0.0.0.0", port=0, token="s3cret-token", accept_urls=True)) as srv:
        assert srv.guard_all
        for path in ("/", "/index.html", "/dashboard.js", "/stats.json", "/history.json", "/metrics", "/nowhere"):
            status, headers, body = await http(srv.port, get(path))
            assert status == 401 and b"Bearer" in body, path
            assert b"s3cret" not in body and b"example" not in body
            status, _h, _b = await http(srv.port, get(path, b"Authorization: Bearer wrong-token\r\n"))
            assert status == 401
        reader, writer = await asyncio.open_connection("127.0.0.1", srv.port)
        writer.write(get("/stats.json"))
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
        writer.close()
        assert b'www-authenticate: Basic realm="larbin"' in head.lower().replace(b"basic", b"Basic")
        assert (await http(srv.port, get("/healthz")))[0] == 200
        bearer = b"Authorization: Bearer s3cret-token\r\n"
        basic = b"Authorization: Basic " + base64.b64encode(b"anyone:s3cret-token") + b"\r\n"
        wrong_basic = b"Authorization: Basic " + base64.b64encode(b"s3cret-token:nope") + b"\r\n"
        for extra in (bearer, basic):
            for path in ("/", "/stats.json", "/metrics"):
                assert (await http(srv.port, get(path, extra)))[0] == 200, (path, extra)
        assert (await http(srv.port, get("/stats.json", wrong_basic)))[0] == 401
        assert (await http(srv.port, get("/stats.json", b"Authorization: Basic !!!\r\n")))[0] == 401
        assert (await http(srv.port, post("/urls", b"http://a.test/\n")))[0] == 401
        assert (await http(srv.port, post("/urls", b"http://a.test/\n", extra=basic)))[0] == 200
    assert src.submitted == ["http://a.test/"]
    # on loopback with a token, the stats stay open (only POST /urls needs it)
    async with running(StatsServer(FakeSource(), port=0, token="s3cret-token")) as srv:
        assert not srv.guard_all
        assert (await http(srv.port, get("/stats.json")))[0] == 200


async def test_the_plain_input_port_takes_one_url_per_line():
    src = FakeSource()
    server = InputServer(src, port=0)
    await server.start()
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        writer.write(b"http://a.test/\nnot a url\nhttp://a.test/\n")
        await writer.drain()
        answers = [await asyncio.wait_for(reader.readline(), 5) for _ in range(3)]
        writer.close()
    finally:
        await server.close()
    text = b"".join(answers).decode()
    assert "accepted" in answers[0].decode() and "rejected" in answers[1].decode()
    assert "duplicate" in answers[2].decode()
    assert src.submitted == ["http://a.test/"]
    assert text.count("\n") == 3


def test_status_line_and_progress_bar():
    src = FakeSource()
    src.advance(250)
    snap = src.snapshot()
    snap["pages"]["limit"] = 1000
    line = format_status(snap, width=100, tty=True)
    assert "250" in line and "25" in line  # pages and percent
    assert len(line) <= 100
    plain = format_status(src.snapshot(), width=100, tty=False)
    assert "250" in plain


# -- the dashboard in a real browser ---------------------------------------------------


@pytest.mark.slow
@pytest.mark.async_timeout(280)
async def test_dashboard_in_headless_chromium_during_a_sim_crawl(tmp_path):
    browser = chromium()
    # All hosts on two IPs and half a second between requests to one IP: ~4
    # outcomes a second, so an entry stays ~5 s among the dashboard's last 20.
    sim_cfg = SimConfig(seed=8, hosts=20, dns=True, robots_agent="larbin_py", trap=False, hostile=True,
                        seeds=2, hosts_per_ip=50)
    async with Sim(sim_cfg) as sim:
        evil = sim.web.url("evil.sim.test", "/")
        config = make_config(tmp_path, sim, wait_duration=0.5, http_port=free_port(),
                             start_urls=(evil,) + tuple(sim.seeds))
        engine = Engine(config, err=io.StringIO())
        task = asyncio.get_running_loop().create_task(engine.run())
        try:
            await sim.log.wait_requests(30, timeout=60)
            url = f"http://127.0.0.1:{config.http_port}/"

            def counter(dom: str) -> int:
                m = re.search(r'id="pages-fetched"[^>]*>([^<]*)<', dom)
                assert m, dom[:2000]
                return int(re.sub(r"[^0-9]", "", m.group(1)) or "0")

            first = await dump_dom(browser, url, tmp_path)
            seen = len(sim.log.requests)
            await sim.log.wait_for(lambda log: len(log.requests) >= seen + 10, timeout=60)
            second = await dump_dom(browser, url, tmp_path)
            assert counter(second) > counter(first) > 0
            # a URL carrying <script> and quotes shows as text, never as markup
            # the engine has recorded it (not only the sim seen it asked for)
            async with asyncio.timeout(60):
                while not any("script" in entry["url"] for entry in engine.counts.last):
                    await asyncio.sleep(0.05)
            # (the dashboard shows what its last /stats.json said: on a loaded machine the
            # headless run may end before that fetch has come back, so it is looked at again)
            for _ in range(5):
                third = await dump_dom(browser, url, tmp_path)
                if "%3Cscript%3Ealert(%22x%22)%3C/script%3E" in third:
                    break
            assert "%3Cscript%3Ealert(%22x%22)%3C/script%3E" in third
            assert "<script>alert(" not in third
            shot = tmp_path / "dashboard.png"
            await dump_dom(browser, url, tmp_path, screenshot=str(shot))
            assert shot.exists() and shot.stat().st_size > 10_000
            if os.environ.get("LARBIN_SAVE_SCREENSHOT"):
                shutil.copy(shot, os.path.join(os.path.dirname(__file__), "..", "docs", "dashboard.png"))
        finally:
            engine.request_stop("test over")
            await task


@pytest.mark.slow
@pytest.mark.async_timeout(120)
async def test_url_input_feeds_a_live_crawl_despite_idle_clients_and_a_huge_post(tmp_path):
    """POST /urls reaches the frontier of a running crawl; 500 silent clients
    and a 10 MB request neither stop the crawl nor the server's answers."""
    sim_cfg = SimConfig(seed=12, hosts=6, dns=True, robots_agent="larbin_py", trap=False,
                        pages_per_host=(30, 30), seeds=1)
    async with Sim(sim_cfg) as sim:
        seed_host = sim.seeds[0].split("/")[2].split(":")[0]
        other = next(h for h in sim.web.hosts if h != seed_host and not sim.web.hosts[h].cname)
        wanted = sim.web.url(other, "/")
        config = make_config(tmp_path, sim, wait_duration=0.2, http_port=free_port(), url_input=True,
                             start_urls=(sim.seeds[0],), no_external_links=True)
        engine = Engine(config, err=io.StringIO())
        task = asyncio.get_running_loop().create_task(engine.run())
        idle = []
        try:
            await sim.log.wait_requests(3, timeout=30)
            assert not any(r.host == other for r in sim.log.requests)
            # 500 clients that connect and never send a byte
            for _ in range(500):
                idle.append(await asyncio.open_connection("127.0.0.1", config.http_port))
            before = len(sim.log.requests)
            status, _h, body = await http(config.http_port, get("/stats.json"), read_timeout=10)
            assert status == 200 and json.loads(body)["pages"]["fetched"] >= 1
            # a 10 MB body is refused from its Content-Length, without being read
            reader, writer = await asyncio.open_connection("127.0.0.1", config.http_port)
            body10 = b"http://x.test/\n" * (10 * 1024 * 1024 // 15)
            writer.write(b"POST /urls HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                         b"Content-Length: %d\r\n\r\n" % len(body10))
            await writer.drain()
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
            assert head.startswith(b"HTTP/1.1 413")
            try:  # the body the server refused: it is not read, the connection is cut
                writer.write(body10)
                await asyncio.wait_for(writer.drain(), 10)
                assert await asyncio.wait_for(reader.read(), 10) == b""
            except ConnectionError:
                pass
            writer.close()
            # the server still answers, and the URL input works
            status, _h, body = await http(config.http_port, post("/urls", json.dumps([wanted]).encode(),
                                                                 b"application/json"), read_timeout=10)
            assert status == 200 and json.loads(body)[0]["result"] == "accepted"
            await sim.log.wait_for(lambda log: any(r.host == other and r.target == "/" for r in log.requests),
                                   timeout=30)
            # the seed's site went on being crawled meanwhile
            assert any(r.host == seed_host for r in sim.log.requests[before:])
        finally:
            for _r, w in idle:
                w.close()
            engine.request_stop("test over")
            await task


async def test_the_input_port_answers_hostile_lines_one_by_one():
    class Failing(FakeSource):
        def submit_urls(self, urls):
            if any("boom" in u for u in urls):
                raise RecursionError("deep")
            return super().submit_urls(urls)

    src, logged = Failing(), []
    server = InputServer(src, port=0, max_line=4096, log=logged.append)
    await server.start()
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        writer.write(b"[" * 4000 + b"\nhttp://a.test/\xff\xfe\n\x00\x01\nhttp://b.test/\n")
        await writer.drain()
        answers = [await asyncio.wait_for(reader.readline(), 5) for _ in range(4)]
        assert answers[0].startswith(b"rejected") and answers[2].startswith(b"rejected")
        assert answers[1] == b"accepted\n" and answers[3] == b"accepted\n"
        writer.write(b"http://boom.test/\n")  # the crawl fails to take it: answered, logged once
        await writer.drain()
        assert await asyncio.wait_for(reader.readline(), 5) == b"rejected internalError\n"
        assert len(logged) == 1 and "RecursionError" in logged[0]
        writer.write(b"[" * 100_000 + b"\n")  # past max_line: refused, the connection closed
        await writer.drain()
        assert await asyncio.wait_for(reader.readline(), 5) == b"rejected lineTooLong\n"
        assert await asyncio.wait_for(reader.read(), 5) == b""
        writer.close()
    finally:
        await server.close()
