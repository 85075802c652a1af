"""Dynamic pages, the fetcher level: rules, the browser process, rendering against the sim.

Real Chromium (``require_service``), the sim's JavaScript host
(``SimConfig(dynamic=True)``, larbin_py.sim.dynamic) and the crawler's own
HTTP fetcher.  The sub-request gate here is a small one that admits the
page's host only (the frontier's gate, with robots.txt and politeness, is
exercised by the crawls of tests/test_dynamic_crawl.py).
"""

from __future__ import annotations

import asyncio
import re

import pytest

from larbin_py.net import dynamic as dynamic_mod
from larbin_py.net.browser import Browser, BrowserUnavailable
from larbin_py.net.dynamic import DynamicFetcher, DynamicRules, RenderedResult, parse_rule
from larbin_py.net.http import Fetcher
from larbin_py.sim import Sim, SimConfig
from larbin_py.sim.dynamic import DYN_LINKS, JS_HOST

from conftest import require_service

LINK_RE = re.compile(rb'<a href="(/dyn/[^"]+)"')
RULES = (("re:.*/scroll\\.html", "scroll"), ("re:.*/call\\.html", "call:loadMore"), (f"http://{JS_HOST}", "none"))


def test_rules_first_match_wins_prefix_or_regex():
    rules = DynamicRules([parse_rule(["http://a.example/list", "scroll"]), parse_rule(["re:https?://b\\.example/"]),
                          parse_rule(["http://a.example/", "call:app.more"])])
    assert rules.trigger("http://a.example/list?page=2") == "scroll"
    assert rules.trigger("http://a.example/other") == "call:app.more"
    assert rules.trigger("https://b.example/x") == "none"
    assert rules.trigger("http://c.example/b.example/") is None  # re: matches from the start
    assert not DynamicRules(()) and rules
    with pytest.raises(ValueError, match="trigger must be"):
        parse_rule(["http://a/", "click"])


async def test_a_missing_browser_is_one_clear_line_with_the_install_hint(tmp_path):
    browser = Browser(str(tmp_path), binary="no-such-chromium-binary")
    with pytest.raises(BrowserUnavailable, match="apt-get install chromium"):
        await browser.connection()
    await browser.close()
    assert not (tmp_path / "browser").exists()


class SameHostGate:
    """Admits the page's own host (the sim's address) but its /private/ (which the
    host's robots.txt disallows), refuses the rest as otherHost."""

    def __init__(self, ip: str, port: int) -> None:
        self.ip, self.port = ip, port
        self.asked: list[str] = []

    async def admit(self, page_request, url: str):
        self.asked.append(url)
        if f"//{JS_HOST}:" not in url:
            return "otherHost"
        if "/private/" in url:
            return "forbiddenRobots"
        return self.ip, self.port


@pytest.mark.async_timeout(90)
async def test_rendering_finds_the_links_of_every_trigger_and_stops_the_endless_page(tmp_path, monkeypatch):
    require_service("chromium", "apt-get install chromium")
    monkeypatch.setattr(dynamic_mod, "TAB_PAGES", 2)  # tabs recycled every 2 pages here
    async with Sim(SimConfig(hosts=1, extras=False, trap=False, dynamic=True)) as sim:
        ip = sim.resolve_map()[JS_HOST]
        http = Fetcher(user_agent="larbin_py-test")
        gate = SameHostGate(ip, sim.port)
        browser = Browser(str(tmp_path))
        dyn = DynamicFetcher(http, browser, DynamicRules(RULES), gate, timeout=10.0, tabs=2)
        base = f"http://{JS_HOST}:{sim.port}"
        try:
            pages = ["/onload.html", "/scroll.html", "/call.html", "/xhr.html", "/refresh.html"]
            results = await asyncio.gather(*(dyn.fetch(base + p, ip, sim.port) for p in pages))
            for page, res in zip(pages, results):
                assert isinstance(res, RenderedResult) and res.error is None, (page, res.error_detail)
                assert res.render_reason == "ok" and res.rendered, (page, res.render_reason)
                assert set(LINK_RE.findall(res.body)) == {p.encode() for p in DYN_LINKS[page]}, page
                assert not LINK_RE.findall(res.static_body)  # the links exist only once scripts ran
            # the meta refresh did not take the page away (its DOM is the one saved and parsed)
            assert dyn.refused["navigation"] == 1 and b"<title>refresh</title>" in results[-1].body
            # the other host's script and the disallowed JSON were refused, never fetched
            assert dyn.refused["otherHost"] == 1 and dyn.refused["forbiddenRobots"] == 1
            assert not any(r.path.startswith("/private/") for r in sim.log.requests)
            assert not any(r.host == "other.sim.test" for r in sim.log.requests)
            assert not any(r.path.startswith("/img/") for r in sim.log.requests)  # images never fetched
            # a function the page does not have: the page as loaded, counted
            missing = await dyn.fetch(base + "/onload.html", ip, sim.port, trigger="call:noSuchThing")
            assert missing.render_reason == "noFunction" and LINK_RE.findall(missing.body)
            # the endless page: stopped at the timeout, what it rendered kept
            loop = asyncio.get_running_loop()
            dyn.timeout = 2.0
            t0 = loop.time()
            endless = await dyn.fetch(base + "/endless.html", ip, sim.port)
            took = loop.time() - t0
            assert endless.render_reason == "dynamicTimeout"
            assert LINK_RE.findall(endless.body) == [b"/dyn/endless-1.html"]
            assert 2.0 <= took < 2.0 + 3.0, took  # the DOM is read after the deadline
            assert sum(r.path == "/api/tick.json" for r in sim.log.requests) > 3
            assert dyn.counters["dynamicTimeout"] == 1 and dyn.counters["ok"] == 5
            # a page that is not HTML is handed back as fetched
            script = await dyn.fetch(base + "/app.js", ip, sim.port)
            assert not isinstance(script, RenderedResult) and script.status == 200
            assert dyn.stats["sub_requests"] == dyn.counters["subRequests"] > 0
            # tabs are recycled: never more open than dynamicConnexions (+ the browser's first blank page)
            assert dyn.counters["tabsRecycled"] >= 3
            targets = (await browser.conn.send("Target.getTargets"))["targetInfos"]
            assert len([t for t in targets if t["type"] == "page"]) <= 2 + 1
        finally:
            await dyn.close()
            await http.close()
        assert browser.pid is None and not (tmp_path / "browser").exists()


@pytest.mark.async_timeout(60)
async def test_a_browser_killed_mid_render_is_a_connection_failure_then_restarted(tmp_path):
    require_service("chromium", "apt-get install chromium")
    async with Sim(SimConfig(hosts=1, extras=False, trap=False, dynamic=True)) as sim:
        ip = sim.resolve_map()[JS_HOST]
        http = Fetcher(user_agent="larbin_py-test")
        browser = Browser(str(tmp_path))
        dyn = DynamicFetcher(http, browser, DynamicRules(RULES), SameHostGate(ip, sim.port), timeout=20.0)
        base = f"http://{JS_HOST}:{sim.port}"
        try:
            render = asyncio.ensure_future(dyn.fetch(base + "/endless.html", ip, sim.port))
            # the page is rendering once its polling reaches the server
            await sim.log.wait_for(lambda log: any(r.path == "/api/tick.json" for r in log.requests), 15)
            first_pid = browser.pid
            browser.kill()
            res = await asyncio.wait_for(render, 10)
            assert res.error == "noConnection" and "browser crashed" in res.error_detail
            assert dyn.counters["crashes"] == 1
            again = await dyn.fetch(base + "/onload.html", ip, sim.port)
            assert again.error is None and again.render_reason == "ok" and LINK_RE.findall(again.body)
            assert browser.starts == 2 and browser.crashes == 1 and browser.pid != first_pid
        finally:
            await dyn.close()
            await http.close()


def test_metrics_show_the_dynamic_counters_only_when_dynamic_pages_are_on():
    from larbin_py.web.metrics import render_metrics

    dyn = {"pages": {"ok": 3, "dynamicTimeout": 1, "noFunction": 0, "renderFailed": 0}, "sub_requests": 7,
           "sub_refused": {"blocked": 2, "otherHost": 1}, "crashes": 1}
    text = render_metrics({"dynamic": dyn})
    assert 'larbin_dynamic_pages_total{reason="dynamicTimeout"} 1' in text
    assert "larbin_dynamic_sub_requests_total 7" in text
    assert 'larbin_dynamic_sub_refused_total{reason="otherHost"} 1' in text
    assert "larbin_dynamic_browser_crashes_total 1" in text
    assert "larbin_dynamic" not in render_metrics({"dynamic": None})


@pytest.mark.async_timeout(60)
async def test_a_script_spinning_for_ever_costs_one_timeout_and_keeps_the_fetched_page(tmp_path, monkeypatch):
    require_service("chromium", "apt-get install chromium")
    monkeypatch.setattr(dynamic_mod, "READ_TIMEOUT", 1.0)  # the hung renderer's last chance, short here
    async with Sim(SimConfig(hosts=1, extras=False, trap=False, dynamic=True)) as sim:
        ip = sim.resolve_map()[JS_HOST]
        http = Fetcher(user_agent="larbin_py-test")
        browser = Browser(str(tmp_path))
        # 3 s: time for the renderer to reach the endless loop even on a loaded machine (a
        # deadline that comes first is an honest dynamicTimeout: the DOM is still readable)
        dyn = DynamicFetcher(http, browser, DynamicRules(RULES), SameHostGate(ip, sim.port), timeout=3.0)
        base = f"http://{JS_HOST}:{sim.port}"
        try:
            loop = asyncio.get_running_loop()
            t0 = loop.time()
            busy = await dyn.fetch(base + "/busy.html", ip, sim.port)
            took = loop.time() - t0
            assert busy.error is None and busy.render_reason == "renderFailed"
            assert busy.body == busy.static_body  # the page as fetched: nothing rendered could be read
            assert took < 3.0 + 1.0 + 2.0, took
            assert dyn.counters["tabsRecycled"] == 1  # the stuck tab was closed, not reused
            # the browser itself is fine: the next page renders in a fresh tab
            dyn.timeout = 10.0  # (a loaded machine must not turn this render into a timeout)
            ok = await dyn.fetch(base + "/onload.html", ip, sim.port)
            assert ok.render_reason == "ok" and LINK_RE.findall(ok.body) and browser.starts == 1
        finally:
            await dyn.close()
            await http.close()
