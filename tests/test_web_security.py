"""The stats server and the input port against the operator's own browser.

DNS rebinding (a hostile ``Host``: 421, no crawl data), cross-site writes
(``Origin``, ``Sec-Fetch-Site``, text/plain without a token: 403/415,
nothing submitted), and a browser's POST to the line-based input port
(closed at its request line, nothing admitted).  Raw HTTP over sockets to
a real StatsServer / InputServer on a free loopback port; a sim crawl for
the end to end check; headless Chromium for what a real page can do.
"""

from __future__ import annotations

import asyncio
import io
import json
import re
import signal

import pytest

from larbin_py.config import ConfigError, parse_config_text
from larbin_py.engine import Engine
from larbin_py.sim import Sim, SimConfig
from larbin_py.web import FakeSource, InputServer, StatsServer
from larbin_py.web.guard import HostPolicy, RefusalLog, cross_site_reason, host_name, looks_like_http

from test_dist_launcher import _wait as launcher_wait
from test_dist_launcher import redis_config, setup  # noqa: F401 (setup: a fixture)
from helpers.crawl import make_config
from helpers.web import chromium, free_port, running

SECRET_HOST = "secret-crawl-host.test"  # crawl data: must never show in a refused answer
TOKEN = "s3cret-token"
AUTH = f"Authorization: Bearer {TOKEN}"
ROUTES = ["/", "/index.html", "/dashboard.js", "/dashboard.css", "/stats.json", "/history.json",
          "/metrics", "/healthz", "/nowhere"]


def still() -> float:
    """A clock that does not move: the refusal log's 10 s window never ends during a test."""
    return 0.0


def crawl_source() -> FakeSource:
    src = FakeSource()
    src.data["hosts"] = {"busiest": [{"host": SECRET_HOST, "pages": 3}], "failing": []}
    src.data["last"] = [{"url": f"http://{SECRET_HOST}/private", "status": 200, "reason": None,
                         "bytes": 10, "time": 1.0}]
    return src


async def exchange(port: int, head: str, body: bytes = b"", version: str = "1.1",
                   timeout: float = 5.0) -> tuple[int, bytes]:
    """Send ``head`` (request line and header lines, ``\\n``-separated) and ``body``; (status, body)."""
    lines = head.strip("\n").split("\n")
    lines[0] += f" HTTP/{version}"
    if body:
        lines.append(f"Content-Length: {len(body)}")
    raw = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(raw)
        answer = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout)
        status = int(answer.split(b" ", 2)[1])
        length = re.search(rb"(?i)content-length: *(\d+)", answer)
        head_only = head.startswith("HEAD ")
        data = b""
        if length and not head_only:
            data = await asyncio.wait_for(reader.readexactly(int(length.group(1))), timeout)
        return status, data
    finally:
        writer.close()


# -- DNS rebinding: the Host check ------------------------------------------------------

HOSTILE_HOSTS = [
    "rebind.attacker.example:{port}",     # the rebinding page, with the port
    "rebind.attacker.example",            # without port
    "REBIND.ATTACKER.EXAMPLE:{port}",     # upper case changes nothing
    "rebind.attacker.example.:{port}",    # nor a trailing dot
    "203.0.113.9:{port}",                 # an address that is neither loopback nor the bind address
    "localhost.attacker.example:{port}",  # loopback names as prefixes
    "127.0.0.1.attacker.example",
    "user@127.0.0.1:{port}",              # userinfo: not a Host
    "127.0.0.1@rebind.attacker.example",
    "127.0.0.1:{port}/x",                 # a path
    "localhost:99999",                    # a port out of range
    "[::2]:{port}",
    "",                                   # empty
]


@pytest.mark.parametrize("host", HOSTILE_HOSTS)
async def test_a_hostile_host_gets_421_and_no_crawl_data_on_every_route(host):
    src, logged = crawl_source(), []
    async with running(StatsServer(src, port=0, accept_urls=True, log=logged.append, clock=still)) as srv:
        value = host.format(port=srv.port)
        for path in ROUTES:
            for method in ("GET", "HEAD"):
                status, body = await exchange(srv.port, f"{method} {path}\nHost: {value}")
                assert status == 421, (method, path, status)
                assert SECRET_HOST.encode() not in body and b"larbin" not in body.lower()
        status, body = await exchange(srv.port, f"POST /urls\nHost: {value}\nContent-Type: application/json",
                                      b'["http://evil.test/"]')
        assert status == 421 and b"httpHosts" in body
    assert src.submitted == []
    assert srv.counters["misdirected"] == 2 * len(ROUTES) + 1
    # one line, not one per request (the page may retry in a loop)
    assert len(logged) == 1 and "refused (421)" in logged[0] and "\n" not in logged[0]


@pytest.mark.parametrize("host", ["127.0.0.1:{port}", "localhost:{port}", "LOCALHOST:{port}", "localhost.:{port}",
                                  "127.0.0.1", "127.7.8.9:{port}", "[::1]:{port}", "[0:0::1]", "[::ffff:127.0.0.1]",
                                  "crawler.example:{port}", "Crawler.Example", "crawler.example.", "10.9.8.7:8443"])
async def test_loopback_names_the_bind_address_and_http_hosts_are_answered(host):
    src = crawl_source()
    async with running(StatsServer(src, port=0, hosts=("crawler.example", "10.9.8.7"))) as srv:
        value = host.format(port=srv.port)
        for path in ("/", "/stats.json", "/metrics", "/healthz"):
            status, body = await exchange(srv.port, f"GET {path}\nHost: {value}")
            assert status == 200, (path, status, body)
        status, body = await exchange(srv.port, f"GET /stats.json\nHost: {value}")
        assert json.loads(body)["hosts"]["busiest"][0]["host"] == SECRET_HOST


async def test_http_1_0_without_host_is_answered_but_not_with_a_hostile_one():
    """No browser sends a request without Host (h11 refuses one in HTTP/1.1)."""
    async with running(StatsServer(crawl_source(), port=0)) as srv:
        assert (await exchange(srv.port, "GET /stats.json", version="1.0"))[0] == 200
        assert (await exchange(srv.port, "GET /stats.json", version="1.1"))[0] == 400
        assert (await exchange(srv.port, "GET /stats.json\nHost: rebind.attacker.example", version="1.0"))[0] == 421


async def test_the_bind_address_is_a_host_and_the_check_comes_before_the_token():
    async with running(StatsServer(crawl_source(), host="0.0.0.0", port=0, token=TOKEN)) as srv:
        assert (await exchange(srv.port, f"GET /stats.json\nHost: 0.0.0.0:{srv.port}\n{AUTH}"))[0] == 200
        # even with the token: a rebound name is not this server
        status, body = await exchange(srv.port, f"GET /stats.json\nHost: rebind.attacker.example\n{AUTH}")
        assert status == 421 and SECRET_HOST.encode() not in body
        assert (await exchange(srv.port, "GET /healthz\nHost: rebind.attacker.example"))[0] == 421


def test_the_host_policy_takes_the_address_a_connection_came_in_on():
    policy = HostPolicy("0.0.0.0", ["crawler.example"])
    assert policy.check(b"10.0.0.5:8081", local="10.0.0.5") is None
    assert policy.check(b"10.0.0.5:8081", local="::ffff:10.0.0.5") is None  # a dual-stack socket
    assert policy.check(b"10.0.0.5:8081", local="10.0.0.6") is not None
    assert policy.check(b"10.0.0.5:8081") is not None
    assert policy.check(b"0.0.0.0") is None and policy.check(b"crawler.example:1") is None
    assert "not a name of this server" in HostPolicy("127.0.0.1").check(b"0.0.0.0")
    assert "malformed" in policy.check(b"a\xffb")


def test_http_hosts_key_reads_checks_and_prints():
    config = parse_config_text("httpHosts Crawler.Example. 10.0.0.5 [::1]\n", "t.conf", require_start_urls=False)
    assert config.http_hosts == ("crawler.example", "10.0.0.5", "::1")
    assert parse_config_text("", require_start_urls=False).http_hosts == ()
    for line, message in [
        ("httpHosts crawler.example:8081", "t.conf:1: httpHosts: expected a host name without a port "
                                           "(any port is accepted), got 'crawler.example:8081'"),
        ("httpHosts *", "t.conf:1: httpHosts: expected a host name or IP address, got '*'"),
        ("httpHosts user@crawler.example", "t.conf:1: httpHosts: expected a host name or IP address, "
                                           "got 'user@crawler.example'"),
    ]:
        with pytest.raises(ConfigError) as err:
            parse_config_text(line + "\n", "t.conf", require_start_urls=False)
        assert str(err.value) == message
    with pytest.raises(ConfigError, match="set twice"):
        parse_config_text("httpHosts a.example\nhttpHosts b.example\n", "t.conf", require_start_urls=False)
    with pytest.raises(ValueError, match="host name"):
        StatsServer(FakeSource(), port=0, hosts=("a.example:80",))
    assert host_name("[::1]") == host_name("::1") == "::1"


# -- cross-site writes ------------------------------------------------------------------

CROSS_SITE = [
    "Origin: http://attacker.example",
    "Origin: null",
    "Origin: http://127.0.0.1:{other}",         # another server of this machine
    "Origin: http://localhost:{port}",          # not the origin the request was sent to
    "Origin: https://127.0.0.1:{port}",
    "Origin: http://127.0.0.1:{port}/path",     # not an origin
    "Sec-Fetch-Site: cross-site",
    "Sec-Fetch-Site: same-site",
    "Sec-Fetch-Site: same-origin\nOrigin: http://attacker.example",
    "Origin: http://127.0.0.1:{port}\nSec-Fetch-Site: cross-site",
]


@pytest.mark.parametrize("headers", CROSS_SITE)
@pytest.mark.parametrize("token", [None, TOKEN])
async def test_a_cross_site_post_is_refused_with_or_without_a_token(headers, token):
    src, logged = FakeSource(), []
    async with running(StatsServer(src, port=0, accept_urls=True, token=token, log=logged.append,
                                   clock=still)) as srv:
        extra = headers.format(port=srv.port, other=srv.port + 1)
        auth = f"\n{AUTH}" if token else ""
        for ctype, body in (("text/plain", b"http://evil.test/\n"), ("application/json", b'["http://evil.test/"]')):
            status, answer = await exchange(
                srv.port, f"POST /urls\nHost: 127.0.0.1:{srv.port}\nContent-Type: {ctype}\n{extra}{auth}", body)
            assert status == 403 and b"cross-site" in answer, (ctype, status, answer)
    assert src.submitted == []
    assert srv.counters["cross_site"] == 2
    assert len(logged) == 1 and logged[0].startswith("POST /urls refused (403): cross-site request")


@pytest.mark.parametrize("headers", ["", "Origin: http://127.0.0.1:{port}", "Sec-Fetch-Site: same-origin",
                                     "Sec-Fetch-Site: none",
                                     "Origin: http://127.0.0.1:{port}\nSec-Fetch-Site: same-origin"])
async def test_same_origin_pages_and_api_clients_may_post_json_but_not_text_without_a_token(headers):
    src = FakeSource()
    async with running(StatsServer(src, port=0, accept_urls=True)) as srv:
        extra = headers.format(port=srv.port)
        status, answer = await exchange(
            srv.port, f"POST /urls\nHost: 127.0.0.1:{srv.port}\nContent-Type: application/json\n{extra}",
            b'["http://a.test/"]')
        assert status == 200 and json.loads(answer)[0]["result"] == "accepted"
        status, answer = await exchange(
            srv.port, f"POST /urls\nHost: 127.0.0.1:{srv.port}\nContent-Type: text/plain\n{extra}",
            b"http://b.test/\n")
        assert status == 415
    assert src.submitted == ["http://a.test/"]


async def test_text_plain_needs_a_token():
    src, logged = FakeSource(), []
    async with running(StatsServer(src, port=0, accept_urls=True, log=logged.append, clock=still)) as srv:
        for ctype in ("Content-Type: text/plain", "Content-Type: text/plain; charset=utf-8", ""):
            status, answer = await exchange(srv.port, f"POST /urls\nHost: 127.0.0.1\n{ctype}",
                                            b"http://evil.test/\n")
            assert status == 415 and b"application/json" in answer, ctype
    assert src.submitted == [] and len(logged) == 1 and "(415)" in logged[0]
    async with running(StatsServer(src, port=0, accept_urls=True, token=TOKEN)) as srv:
        status, answer = await exchange(srv.port, "POST /urls\nHost: 127.0.0.1\nContent-Type: text/plain",
                                        b"http://a.test/\n")
        assert status == 401  # the token is still needed
        status, answer = await exchange(srv.port, f"POST /urls\nHost: 127.0.0.1\nContent-Type: text/plain\n{AUTH}",
                                        b"http://a.test/\n")
        assert status == 200 and json.loads(answer)[0]["result"] == "accepted"
    assert src.submitted == ["http://a.test/"]


def test_cross_site_reason_rules():
    host = b"127.0.0.1:8081"
    assert cross_site_reason([], [], host) is None
    assert cross_site_reason([b"http://127.0.0.1:8081"], [b"same-origin"], host) is None
    assert cross_site_reason([b"HTTP://127.0.0.1:8081"], [], host) is None  # scheme and host case-insensitive
    assert cross_site_reason([b"http://localhost"], [], b"localhost:80") is None  # the default port
    assert cross_site_reason([b"http://127.0.0.1:8081"], [b"bogus"], host)  # an unknown value fails closed
    assert cross_site_reason([b"http://127.0.0.1:8081"], [], None)  # an Origin without Host
    assert cross_site_reason([b"http://a.example http://127.0.0.1:8081"], [], host)  # an origin list


def test_the_refusal_log_writes_one_line_per_kind_per_interval():
    now, lines = [0.0], []
    log = RefusalLog(lines.append, interval=10.0, clock=lambda: now[0])
    assert log.refused("host", "a") and not log.refused("host", "b") and not log.refused("host", "c")
    assert log.refused("cross_site", "x")  # another kind has its own line
    now[0] = 10.0
    assert log.refused("host", "d")
    assert lines == ["a", "x", "d (and 2 more like it since)"]


# -- the line-based input port ----------------------------------------------------------

def browser_post(port: int, body: bytes) -> bytes:
    """What a browser sends for a text/plain form posted from another site to the input port."""
    return (f"POST / HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: keep-alive\r\n"
            f"Content-Length: {len(body)}\r\nOrigin: http://attacker.example\r\n"
            "Content-Type: text/plain\r\nUser-Agent: Mozilla/5.0\r\n"
            "Sec-Fetch-Site: cross-site\r\n\r\n").encode() + body


class input_server:
    def __init__(self, src, **kw):
        self.logged: list[str] = []
        self.server = InputServer(src, port=0, log=self.logged.append, clock=still, **kw)

    async def __aenter__(self):
        await self.server.start()
        return self

    async def __aexit__(self, *exc):
        await self.server.close()

    async def talk(self, *pieces: bytes) -> bytes:
        """Send ``pieces`` (one write each, the last may wait for the answer); all the server said until EOF."""
        reader, writer = await asyncio.open_connection("127.0.0.1", self.server.port)
        try:
            for piece in pieces:
                writer.write(piece)
                await writer.drain()
            return await asyncio.wait_for(reader.read(), 5)  # the server closes: EOF
        finally:
            writer.close()


@pytest.mark.parametrize("split", ["whole", "by line", "by byte"])
async def test_a_browser_post_to_the_input_port_is_closed_at_its_request_line(split):
    src = FakeSource()
    async with input_server(src) as srv:
        port = srv.server.port
        raw = browser_post(port, b"http://evil.test/=x\r\nhttp://evil2.test/\r\n")
        pieces = {"whole": [raw], "by line": raw.splitlines(keepends=True),
                  "by byte": [raw[i:i + 1] for i in range(len(raw))]}[split]
        try:
            answer = await srv.talk(*pieces)
        except ConnectionResetError:  # closed while the rest was on its way: nothing read either way
            answer = b"rejected httpRequest\n"
        assert answer == b"rejected httpRequest\n"
    assert src.submitted == []
    assert srv.server.counters["http_refused"] == 1
    assert len(srv.logged) == 1 and "sent HTTP ('POST / HTTP/1.1')" in srv.logged[0]


async def test_the_input_port_answers_lines_before_an_http_line_then_closes():
    src = FakeSource()
    async with input_server(src) as srv:
        answer = await srv.talk(b"http://a.test/\nHost: 127.0.0.1\nhttp://b.test/\n")
        assert answer == b"accepted\nrejected httpRequest\n"
        answer = await srv.talk(b"http://c.test/\n", b"GET / HTTP/1.1\r\nhttp://d.test/\n")
        assert answer == b"accepted\nrejected httpRequest\n"
        # URLs, even odd ones, are still URLs
        reader, writer = await asyncio.open_connection("127.0.0.1", srv.server.port)
        writer.write(b"mailto:x\nhttps://e.test/a?b=c:d\nurn:isbn:1\n")
        answers = [await asyncio.wait_for(reader.readline(), 5) for _ in range(3)]
        writer.close()
        assert answers == [b"rejected badUrl\n", b"accepted\n", b"rejected badUrl\n"]
    assert src.submitted == ["http://a.test/", "http://c.test/", "https://e.test/a?b=c:d"]
    assert srv.server.counters["http_refused"] == 2


async def test_with_a_token_an_http_first_line_is_refused_as_http():
    src = FakeSource()
    async with input_server(src, token=TOKEN) as srv:
        assert await srv.talk(browser_post(srv.server.port, f"token {TOKEN}\nhttp://evil.test/\n".encode())) \
            == b"rejected httpRequest\n"
        assert await srv.talk(f"token {TOKEN}\nhttp://a.test/\nOrigin: http://x\n".encode()) \
            == b"ok\naccepted\nrejected httpRequest\n"
    assert src.submitted == ["http://a.test/"] and srv.server.counters["http_refused"] == 2


@pytest.mark.parametrize("line, http", [
    (b"POST / HTTP/1.1", True), (b"GET /?http://a.test/ HTTP/1.0", True), (b"OPTIONS * HTTP/1.1", True),
    (b"PRI * HTTP/2.0", True), (b"Host: 127.0.0.1:1976", True), (b"host:127.0.0.1", True),
    (b"Origin: null", True), (b"Sec-Fetch-Site: cross-site", True), (b"X-Anything: 1", True),
    (b"http://a.test/", False), (b"https://a.test/x?y=z:1", False), (b"mailto:a@b", False),
    (b"http://a.test/ HTTP", False), (b"", False),
])
def test_looks_like_http(line, http):
    assert looks_like_http(line) is http


# -- end to end: a crawl's stats server and input port -----------------------------------

@pytest.mark.slow
@pytest.mark.async_timeout(120)
async def test_a_crawl_refuses_a_rebinding_host_and_cross_site_urls(tmp_path, capsys):
    sim_cfg = SimConfig(seed=21, hosts=6, dns=True, robots_agent="larbin_py", trap=False,
                        pages_per_host=(30, 30), seeds=1)
    async with Sim(sim_cfg) as sim:
        seed_host = sim.seeds[0].split("/")[2].split(":")[0]
        others = [h for h in sim.web.hosts if h != seed_host and not sim.web.hosts[h].cname]
        evil, evil2, wanted = (sim.web.url(h, "/") for h in others[:3])
        config = make_config(tmp_path, sim, wait_duration=0.2, http_port=free_port(), input_port=free_port(),
                             url_input=True, http_hosts=("crawler.example",), start_urls=(sim.seeds[0],),
                             no_external_links=True)
        engine = Engine(config, err=io.StringIO())
        task = asyncio.get_running_loop().create_task(engine.run())
        port = config.http_port
        try:
            await sim.log.wait_requests(3, timeout=30)
            status, body = await exchange(port, f"GET /stats.json\nHost: rebind.attacker.example:{port}")
            assert status == 421 and seed_host.encode() not in body
            status, body = await exchange(port, f"GET /stats.json\nHost: crawler.example:{port}")
            assert status == 200 and seed_host in body.decode()
            status, _b = await exchange(port, f"POST /urls\nHost: 127.0.0.1:{port}\nContent-Type: text/plain\n"
                                              "Origin: http://attacker.example", evil.encode() + b"\n")
            assert status == 403
            status, _b = await exchange(port, f"POST /urls\nHost: 127.0.0.1:{port}\nContent-Type: text/plain",
                                        evil.encode() + b"\n")
            assert status == 415
            reader, writer = await asyncio.open_connection("127.0.0.1", config.input_port)
            writer.write(browser_post(config.input_port, evil2.encode() + b"\r\n"))
            assert await asyncio.wait_for(reader.read(), 10) == b"rejected httpRequest\n"
            writer.close()
            # the way that stays open: JSON from a script, fetched
            status, body = await exchange(port, f"POST /urls\nHost: 127.0.0.1:{port}\n"
                                                "Content-Type: application/json", json.dumps([wanted]).encode())
            assert status == 200 and json.loads(body)[0]["result"] == "accepted"
            wanted_host = wanted.split("/")[2].split(":")[0]
            await sim.log.wait_for(lambda log: any(r.host == wanted_host for r in log.requests), timeout=30)
        finally:
            engine.request_stop("test over")
            await task
    refused_hosts = {u.split("/")[2].split(":")[0] for u in (evil, evil2)}
    assert not any(r.host in refused_hosts for r in sim.log.requests)
    log = capsys.readouterr().err  # the servers' one-line refusals
    assert "stats server: GET '/stats.json' refused (421): Host 'rebind.attacker.example:" in log
    assert "stats server: POST /urls refused (403): cross-site request: Origin 'http://attacker.example'" in log
    assert "larbin_py: input port: closed the connection of 127.0.0.1:" in log


async def test_the_launchers_cluster_stats_server_checks_the_host_with_http_hosts(setup, redis_server):
    """``--workers N``: the launcher serves the cluster's stats with the same StatsServer and httpHosts."""
    launcher, _out = setup(n=1, env={"PLAN_w1": "wait"}, **redis_config(redis_server))
    launcher.config = launcher.config.replace(http_port=free_port(), http_hosts=("crawler.example",))
    task = asyncio.ensure_future(launcher.run())
    try:
        async def ready():
            return launcher.http is not None and launcher.source is not None and "w1" in launcher.source.snapshots
        await launcher_wait(ready)
        port = launcher.http.port
        status, body = await exchange(port, f"GET /stats.json\nHost: rebind.attacker.example:{port}")
        assert status == 421 and b"cluster" not in body
        status, body = await exchange(port, f"GET /stats.json\nHost: crawler.example:{port}")
        assert status == 200 and json.loads(body)["cluster"]["workers"][0]["worker"] == "w1"
    finally:
        launcher.request_stop(signal.SIGTERM)
        assert await task == 143


# -- what a real page in a real browser can do -------------------------------------------

ATTACK_PAGE = """<!doctype html><html><body>
<iframe name="a"></iframe><iframe name="b"></iframe>
<form id="urls" method="post" enctype="text/plain" target="a" action="http://127.0.0.1:{http}/urls">
<input name="http://evil.test/?x" value="1"></form>
<form id="input" method="post" enctype="text/plain" target="b" action="http://127.0.0.1:{input}/">
<input name="http://evil2.test/?x" value="1"></form>
<script>
document.getElementById("urls").submit();
document.getElementById("input").submit();
fetch("http://127.0.0.1:{http}/urls", {{method: "POST", mode: "no-cors", body: "http://evil3.test/\\n"}});
</script></body></html>"""


class AttackSite:
    """The attacker's web server (http://localhost:PORT/): one page, whatever is asked."""

    def __init__(self, page: str):
        self.page = page.encode()
        self.server = None
        self.port = 0

    async def __aenter__(self):
        async def serve(reader, writer):
            await reader.readuntil(b"\r\n\r\n")
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nConnection: close\r\n"
                         b"Content-Length: %d\r\n\r\n" % len(self.page) + self.page)
            await writer.drain()
            writer.close()

        self.server = await asyncio.start_server(serve, "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc):
        self.server.close()
        await self.server.wait_closed()


async def chromium_dom(url: str, tmp_path, *flags: str) -> str:
    profile = tmp_path / "profile"
    args = [chromium(), "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
            f"--user-data-dir={profile}", "--virtual-time-budget=3000", *flags, "--dump-dom", url]
    proc = await asyncio.create_subprocess_exec(*args, stdout=asyncio.subprocess.PIPE,
                                                stderr=asyncio.subprocess.DEVNULL)
    out, _ = await asyncio.wait_for(proc.communicate(), 90)
    return out.decode("utf-8", "replace")


@pytest.mark.slow
@pytest.mark.async_timeout(200)
async def test_a_page_in_chromium_can_neither_read_the_stats_nor_feed_urls(tmp_path):
    src = crawl_source()
    async with running(StatsServer(src, port=0, accept_urls=True)) as srv, \
            input_server(src) as inp, AttackSite("") as site:
        site.page = ATTACK_PAGE.format(http=srv.port, input=inp.server.port).encode()
        # a page of another site (localhost:X is not 127.0.0.1's site) posts forms and a no-cors fetch
        await chromium_dom(f"http://localhost:{site.port}/", tmp_path)
        assert src.submitted == []
        assert srv.counters["cross_site"] >= 2, srv.counters  # both requests came, and were refused
        assert inp.server.counters["http_refused"] == 1
        # DNS rebinding: the attacker's name resolves to 127.0.0.1
        dom = await chromium_dom(f"http://rebind.attacker.example:{srv.port}/stats.json", tmp_path,
                                 "--host-resolver-rules=MAP rebind.attacker.example 127.0.0.1")
        assert "misdirected request" in dom and SECRET_HOST not in dom
        assert srv.counters["misdirected"] >= 1
