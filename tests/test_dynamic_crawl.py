"""Dynamic pages, end to end: the crawler with dynamicPages against the sim's JavaScript host.

The sim (``SimConfig(dynamic=True)``, larbin_py.sim.dynamic) knows which
links only JavaScript writes and which trigger each page needs; its truth
(``CrawlRules.dynamic_pages``) says what a correct crawl fetches.  Every
request, the scripts' sub-requests included, is in the sim's log: politeness
is checked there.  Real Chromium (``require_service``).
"""

from __future__ import annotations

import asyncio
import glob
from collections import Counter

import pytest

from larbin_py.demo import crawl_rules
from larbin_py.engine import Engine
from larbin_py.sim import Sim, SimConfig
from larbin_py.sim.dynamic import DYN_LINKS, JS_HOST, REFRESH_TARGET, SECRET_LINKS

from conftest import require_service
from helpers.crawl import ROBOTS_PATHS, SLACK, check_conservation, make_config

pytestmark = pytest.mark.slow

WAIT = 0.05
SIM = dict(seed=5, hosts=2, pages_per_host=(2, 3), extras=False, trap=False, dynamic=True,
           robots_mix={"absent": 1.0}, dns=True)


def rules(port: int, endless: bool = True) -> tuple[tuple[str, str], ...]:
    base = f"http://{JS_HOST}:{port}"
    pages = "onload|xhr|refresh" + ("|endless" if endless else "")
    return ((base + "/scroll", "scroll"), ("re:.*/call\\.html$", "call:loadMore"),
            (f"re:https?://js\\.sim\\.test:\\d+/({pages})\\.html$", "none"))


def pages_requested(sim, truth) -> list[str]:
    """URLs the crawler asked for as pages (not robots.txt, not the scripts' sub-requests)."""
    return [r.url for r in sim.log.requests
            if r.path not in ROBOTS_PATHS and r.url not in truth.sub_requests and "/api/tick" not in r.url]


def stored_pages(save_dir) -> dict[str, bytes]:
    """What a mirror or save output holds: URL -> the bytes of its file (the last one written)."""
    from larbin_py.output import parse_index_line

    out = {}
    with open(save_dir / "index.tsv", encoding="utf-8") as f:
        for line in f:
            entry = parse_index_line(line.rstrip("\n"))
            out[entry["url"]] = (save_dir / entry["path"]).read_bytes()
    return out


def check_politeness_with_sub_requests(sim, wait: float) -> None:
    """Every request, the browser's sub-requests included, a wait apart per host and per IP."""
    close = sim.log.too_close(wait - SLACK)
    assert not close, [(label, key, round(b.t - a.t, 3), a.target, b.target) for label, key, a, b in close[:3]]


@pytest.mark.async_timeout(120)
async def test_dynamic_pages_find_every_javascript_link_politely(work_dir):
    require_service("chromium", "apt-get install chromium")
    async with Sim(SimConfig(**SIM)) as sim:
        config = make_config(work_dir, sim, wait_duration=WAIT, dynamic_pages=rules(sim.port),
                             dynamic_timeout=3.0, output_mode="warc")
        truth = sim.truth(crawl_rules(config, sim.seeds))
        engine = Engine(config)
        summary = await engine.run()
        base = f"http://{JS_HOST}:{sim.port}"
        dyn_links = {base + p for links in DYN_LINKS.values() for p in links}
        assert dyn_links <= truth.must_request and all(truth.rendered.values())
        requested = pages_requested(sim, truth)
        assert set(requested) == truth.must_request, (sorted(set(requested) ^ truth.must_request), summary.dynamic)
        assert not [u for u, n in Counter(requested).items() if n > 1]
        assert not (truth.must_not_request & {r.url for r in sim.log.requests})
        # robots.txt disallows /private/: the JSON is never fetched, its link never found
        assert not any(r.path.startswith("/private/") or r.path in SECRET_LINKS for r in sim.log.requests)
        assert not any(r.path.startswith("/img/") for r in sim.log.requests)  # images blocked
        assert not any(r.host == "other.sim.test" for r in sim.log.requests)  # other hosts refused
        check_politeness_with_sub_requests(sim, WAIT)
        check_conservation(engine, summary)
        d = summary.dynamic
        assert d["pages"] == {"ok": 5, "dynamicTimeout": 1, "noFunction": 0, "renderFailed": 0}
        assert d["sub_refused"]["forbiddenRobots"] == 1 and d["sub_refused"]["otherHost"] == 1
        # every sub-request is a request of the crawl: counted in the summary
        subs = sum(1 for r in sim.log.requests if r.host == JS_HOST and r.url in truth.sub_requests
                   or "/api/tick" in r.path)
        assert d["sub_requests"] == subs and summary.requests == len(sim.log.requests)
        assert "dynamic pages   ok" in summary.format()
        # the WARC keeps each rendered page's fetched answer and its rendering, marked as such
        from warcio.archiveiterator import ArchiveIterator
        conversions = {}
        for path in glob.glob(str(work_dir / "save" / "*.warc.gz")):
            with open(path, "rb") as f:
                for rec in ArchiveIterator(f):
                    if rec.rec_type == "conversion":
                        conversions[rec.rec_headers.get_header("WARC-Target-URI")] = rec.content_stream().read()
        assert set(conversions) == {base + p for p in DYN_LINKS}
        assert b'href="/dyn/scroll-1.html"' in conversions[base + "/scroll.html"]


@pytest.mark.async_timeout(60)
@pytest.mark.parametrize("mode", ["mirror", "save"])
async def test_without_dynamic_pages_no_javascript_link_is_found(tmp_path, mode):
    async with Sim(SimConfig(**SIM)) as sim:
        config = make_config(tmp_path, sim, wait_duration=0.0, output_mode=mode)
        truth = sim.truth(crawl_rules(config, sim.seeds))
        engine = Engine(config)
        summary = await engine.run()
        requested = pages_requested(sim, truth)
        assert set(requested) == truth.must_request
        static_links = {"/dyn/static-1.html", REFRESH_TARGET}  # plain links in the pages' HTML
        assert not any(r.path.startswith("/dyn/") and r.path not in static_links for r in sim.log.requests)
        assert not any(r.path in ("/app.js", "/api/links.json") for r in sim.log.requests)
        assert summary.dynamic is None and not (tmp_path / "state" / "browser").exists()
        # the stored pages are the pages as fetched: no link that only JavaScript writes
        stored = stored_pages(tmp_path / "save")
        base = f"http://{JS_HOST}:{sim.port}"
        assert {base + p for p in DYN_LINKS} <= set(stored)
        for page, links in DYN_LINKS.items():
            assert not any(f'href="{link}"'.encode() in stored[base + page] for link in links), page


@pytest.mark.async_timeout(120)
async def test_killing_the_browser_mid_crawl_loses_nothing(work_dir):
    require_service("chromium", "apt-get install chromium")
    async with Sim(SimConfig(**SIM)) as sim:
        # generous timeout (a loaded machine must not turn a render into a timeout); no endless page
        config = make_config(work_dir, sim, wait_duration=0.0, dynamic_pages=rules(sim.port, endless=False),
                             dynamic_timeout=10.0, output_mode="mirror")
        truth = sim.truth(crawl_rules(config, sim.seeds))
        engine = Engine(config)
        run = asyncio.ensure_future(engine.run())
        # kill it while a page renders: its scripts have started asking for sub-requests
        await sim.log.wait_for(lambda log: any(r.path == "/app.js" for r in log.requests), 30)
        engine.edge.browser.kill()
        summary = await run
        requested = set(pages_requested(sim, truth))
        assert requested == truth.must_request, sorted(requested ^ truth.must_request)
        check_conservation(engine, summary)
        assert summary.pages == len(truth.saved) and not summary.forgotten
        assert summary.dynamic["crashes"] >= 1 and summary.dynamic["browser_starts"] >= 2
        # the mirror holds each page as rendered (the one rendered when the browser died too):
        # every link its JavaScript writes is in its file
        stored = stored_pages(work_dir / "save")
        base = f"http://{JS_HOST}:{sim.port}"
        for page, links in DYN_LINKS.items():
            if page != "/endless.html":  # no rule for it here
                for link in links:
                    assert f'href="{link}"'.encode() in stored[base + page], (page, link)


@pytest.mark.async_timeout(30)
async def test_no_browser_means_exit_2_with_the_apt_get_hint_and_nothing_written(tmp_path, monkeypatch, capsys):
    from larbin_py.runner import run_engine

    empty = tmp_path / "empty-path"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))  # no chromium to be found
    async with Sim(SimConfig(**SIM)) as sim:
        config = make_config(tmp_path, sim, dynamic_pages=rules(sim.port), output_mode="mirror")
        code = await run_engine(Engine(config))
        assert code == 2
        err = capsys.readouterr().err
        assert "dynamicPages needs Chromium" in err and "apt-get install chromium" in err
        assert "Traceback" not in err
        assert not sim.log.requests  # nothing fetched
        assert not (tmp_path / "state").exists() or not list((tmp_path / "state").iterdir())


class CookieSite:
    """A one-page site on 127.0.0.1 whose script's XHR yields links only with the page's cookie."""

    PAGE = (b"<!DOCTYPE html><html><head><title>c</title></head><body><div id=out></div><script>"
            b"fetch('/data.json').then(function (r) { return r.json(); }).then(function (paths) {"
            b" paths.forEach(function (p) { var a = document.createElement('a'); a.href = p;"
            b" document.getElementById('out').appendChild(a); }); });</script></body></html>")

    def __init__(self) -> None:
        self.requests: list[tuple[str, str]] = []  # (path, Cookie header)

    async def start(self) -> int:
        self.server = await asyncio.start_server(self.handle, "127.0.0.1", 0)
        return self.server.sockets[0].getsockname()[1]

    async def handle(self, reader, writer) -> None:
        head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
        path = head[0].split(" ")[1]
        cookie = next((h.split(":", 1)[1].strip() for h in head[1:] if h.lower().startswith("cookie:")), "")
        self.requests.append((path, cookie))
        extra, ctype, status = "", "text/html", "200 OK"
        if path == "/":
            body, extra = self.PAGE, "Set-Cookie: session=s3cret; Path=/\r\n"
        elif path == "/data.json":
            body, ctype = (b'["/members.html"]' if "session=s3cret" in cookie else b"[]"), "application/json"
        elif path == "/members.html":
            body = b"<html><body>members</body></html>"
        else:
            body, status = b"not found", "404 Not Found"
        writer.write(f"HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {len(body)}\r\n{extra}"
                     "Connection: close\r\n\r\n".encode() + body)
        await writer.drain()
        writer.close()


@pytest.mark.async_timeout(60)
async def test_with_use_cookies_a_scripts_request_carries_the_crawls_cookies(work_dir):
    require_service("chromium", "apt-get install chromium")
    from larbin_py.config import parse_config_text

    site = CookieSite()
    port = await site.start()
    root = f"http://127.0.0.1:{port}/"
    try:
        def config(name, dynamic):
            return parse_config_text("", require_start_urls=False).replace(
                start_urls=(root,), private_networks="allow", http_port=0,
                output_mode="save", wait_duration=0.0, save_dir=str(work_dir / name / "save"),
                state_dir=str(work_dir / name / "state"), use_cookies=True, dynamic_pages=dynamic,
                dynamic_timeout=10.0)
        summary = await Engine(config("rendered", ((root, "none"),))).run()
        asked = list(site.requests)
        site.requests.clear()
        plain = await Engine(config("plain", ())).run()  # the same crawl without the rule
    finally:
        site.server.close()
    assert ("/data.json", "session=s3cret") in asked
    assert any(path == "/members.html" for path, _ in asked)  # the link the XHR gave
    assert summary.pages == 2
    # save mode stores the rendered DOM: the link the script wrote is in the page's file
    assert b'href="/members.html"' in stored_pages(work_dir / "rendered" / "save")[root]
    # without the rule: the page as fetched, no such link, nothing else crawled
    assert plain.pages == 1 and [p for p, _ in site.requests] == ["/robots.txt", "/"]
    assert b"/members.html" not in stored_pages(work_dir / "plain" / "save")[root]


@pytest.mark.async_timeout(60)
async def test_dynamic_sandbox_off_is_said_at_start_and_chromium_is_still_not_root(work_dir, capsys):
    require_service("chromium", "apt-get install chromium")
    import os
    import pwd

    from larbin_py.config import parse_config_text
    from larbin_py.runner import run_engine

    site = CookieSite()
    port = await site.start()
    root = f"http://127.0.0.1:{port}/"
    seen = {}

    def started(engine):  # the browser is up: what it runs as, and with which switches
        pid = engine.edge.browser.pid
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            seen["args"] = f.read().split(b"\0")
        with open(f"/proc/{pid}/status") as f:
            seen["uid"] = int(next(ln for ln in f if ln.startswith("Uid:")).split()[2])

    try:
        config = parse_config_text("", require_start_urls=False).replace(
            start_urls=(root,), private_networks="allow", http_port=0, output_mode="none", wait_duration=0.0,
            save_dir=str(work_dir / "save"), state_dir=str(work_dir / "state"), dynamic_pages=((root, "none"),),
            dynamic_timeout=10.0, dynamic_sandbox=False)
        engine = Engine(config)
        engine.on_servers_started = started
        code = await run_engine(engine)
    finally:
        site.server.close()
    err = capsys.readouterr().err
    who = "nobody" if os.geteuid() == 0 else pwd.getpwuid(os.geteuid()).pw_name
    assert code == 0 and [ln for ln in err.splitlines() if "warning" in ln] == [
        f"larbin_py: warning: dynamicSandbox off: Chromium renders crawled pages without its sandbox "
        f"(--no-sandbox); a renderer exploit runs as {who} with nothing else in its way"]
    assert b"--no-sandbox" in seen["args"] and seen["uid"] == pwd.getpwnam(who).pw_uid
    assert any(path == "/data.json" for path, _ in site.requests)  # rendered: the page's script ran
